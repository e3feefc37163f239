// The run summary (hm_summary_write): one JSON document with what a placement comparison needs of
// a run, whatever the program: tiers, classes, spaces, static placement, the DRAM cache model,
// phases, iteration times and the emulator's own cost. `hetmem compare` reads it; hetmem-pic adds
// its step times, and the preload library writes it at exit for unchanged programs (HM_SUMMARY).
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "alloc/phases.h"
#include "alloc/runtime.h"
#include "base/error.h"
#include "hetmem/hetmem.h"
#include "place/classes.h"
#include "place/policy.h"
#include "prim/prim.h"

namespace hm::place {
namespace {

using nlohmann::json;

// Wall and process CPU time of each iteration: the first from the placement runtime's start (its
// first class allocation) to the first hm_iteration_next (or inferred iteration), each later one
// between two of them; and the wall time of each phase within each iteration (a phase is charged
// to the iteration it ends in), so that a report can take a phase's time over the same iterations
// as the iteration's own (a mechanism tried and withdrawn in the first iterations then weighs on
// neither, or on both).
class IterationClock final : public PhaseObserver {
 public:
  void start() {
    std::lock_guard<std::mutex> lock(mutex_);
    last_ns_ = prim::now_ns();
    last_cpu_ns_ = prim::process_cpu_ns();
    seconds_.clear();
    cpu_seconds_.clear();
    phase_seconds_.clear();
    current_.clear();
    open_.clear();
  }
  void phase_begun(uint16_t phase) override {
    std::lock_guard<std::mutex> lock(mutex_);
    open_.push_back({phase, prim::now_ns()});
  }
  void phase_ended(const PhaseEnd &end) override {
    std::lock_guard<std::mutex> lock(mutex_);
    // Phases nest: the innermost open instance of this phase ends.
    for (size_t i = open_.size(); i-- > 0;)
      if (open_[i].first == end.phase) {
        if (current_.size() <= end.phase) current_.resize(end.phase + size_t{1});
        current_[end.phase] += static_cast<double>(prim::now_ns() - open_[i].second) * 1e-9;
        open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
  }
  void iteration_begun(uint32_t) override {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t now = prim::now_ns(), cpu = prim::process_cpu_ns();
    if (last_ns_) {
      seconds_.push_back(static_cast<double>(now - last_ns_) * 1e-9);
      cpu_seconds_.push_back(static_cast<double>(cpu - last_cpu_ns_) * 1e-9);
      phase_seconds_.push_back(current_);
    }
    current_.assign(current_.size(), 0.0);
    last_ns_ = now;
    last_cpu_ns_ = cpu;
  }
  std::vector<double> seconds() {
    std::lock_guard<std::mutex> lock(mutex_);
    return seconds_;
  }
  std::vector<double> cpu_seconds() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cpu_seconds_;
  }
  // {phase name: [seconds in iteration 1, 2, ...]} for every phase that ran in a timed iteration;
  // names[id - 1] is phase id's name (phase_totals' order).
  json phase_seconds(const std::vector<PhaseTotal> &names) {
    std::lock_guard<std::mutex> lock(mutex_);
    json out = json::object();
    for (size_t it = 0; it < phase_seconds_.size(); ++it)
      for (size_t p = 1; p < phase_seconds_[it].size() && p <= names.size(); ++p) {
        json &row = out[names[p - 1].name];
        if (row.is_null()) row = json::array();
        while (row.size() < it) row.push_back(0.0);  // a phase first seen in a later iteration
        row.push_back(phase_seconds_[it][p]);
      }
    for (auto &[name, row] : out.items())
      while (row.size() < phase_seconds_.size()) row.push_back(0.0);
    return out;
  }

 private:
  std::mutex mutex_;
  uint64_t last_ns_ = 0, last_cpu_ns_ = 0;
  std::vector<double> seconds_, cpu_seconds_;
  std::vector<std::pair<uint16_t, uint64_t>> open_;      // phases begun and not ended: id, start
  std::vector<double> current_;                          // by phase id: this iteration's seconds
  std::vector<std::vector<double>> phase_seconds_;       // per timed iteration, by phase id
};

IterationClock *clock_instance() {
  static IterationClock *c = [] {
    auto *o = new IterationClock();  // lives as long as the process, as observers must
    add_phase_observer(o);
    return o;
  }();
  return c;
}

json tiers_json() {
  json out = json::array();
  for (hm_tier_t t = 0; t < hm_tier_count(); ++t) {
    hm_tier_info_t info;
    hm_tier_stats_t s;
    if (hm_tier_info(t, &info) != HM_OK || hm_tier_stats(t, &s) != HM_OK) continue;
    json roles = json::array();
    for (int r = 0; r < HM_ROLE_COUNT; ++r)
      if (info.roles & (1u << r)) roles.push_back(hm_role_name(static_cast<hm_role_t>(r)));
    json row = {{"name", info.name},         {"kind", info.kind},      {"emulated", info.kind == HM_KIND_EMUL},
                {"detail", info.detail},     {"roles", roles},         {"budget", s.budget},
                {"in_use", s.in_use},        {"high_water", s.high_water}, {"fallbacks_in", s.fallbacks_in},
                {"moves_in", s.moves_in}};
    hm_emul_stats_t e;
    if (info.kind == HM_KIND_EMUL && hm_emul_stats(t, &e) == HM_OK) {
      uint64_t ns = 0, r = 0, w = 0;
      for (int src = 0; src < HM_EMUL_SOURCES; ++src) ns += e.charged_ns[src], r += e.read_bytes[src], w += e.write_bytes[src];
      row["charged_s"] = static_cast<double>(ns) * 1e-9;
      row["charged_read_bytes"] = r;
      row["charged_write_bytes"] = w;
      row["charges"] = e.charges != 0;
    }
    out.push_back(row);
  }
  return out;
}

json classes_json() {
  json out = json::array();
  for (hm_class_t c = 0; c < hm_class_count(); ++c) {
    hm_class_info_t info;
    if (hm_class_info(c, &info) != HM_OK) continue;
    json placed = json::object(), live = json::object(), peak = json::object();
    for (hm_tier_t t = 0; t < hm_tier_count() && t < 16; ++t) {
      hm_tier_info_t ti;
      if (hm_tier_info(t, &ti) != HM_OK) continue;
      if (info.bytes_on_tier[t]) placed[ti.name] = info.bytes_on_tier[t];
      if (info.live_bytes_on_tier[t]) live[ti.name] = info.live_bytes_on_tier[t];
      if (info.peak_bytes_on_tier[t]) peak[ti.name] = info.peak_bytes_on_tier[t];
    }
    out.push_back({{"name", info.name}, {"kind", class_kind_name(info.kind)}, {"priority", info.priority},
                   {"allocs", info.allocs}, {"bytes", info.bytes}, {"allocated_on", placed}, {"live_on", live},
                   {"peak_on", peak}});
  }
  return out;
}

json placement_json() {
  json spaces = json::array();
  for (int s = 0; s < HM_SPACE_COUNT; ++s) {
    hm_space_stats_t st;
    if (hm_space_stats(static_cast<hm_space_t>(s), &st) != HM_OK) continue;
    spaces.push_back({{"space", hm_space_name(static_cast<hm_space_t>(s))}, {"sized", st.sized != 0},
                      {"budget", st.budget}, {"in_use", st.in_use}, {"high_water", st.high_water},
                      {"objects", st.objects}, {"grows", st.grows}, {"grown_bytes", st.grown_bytes},
                      {"overflows", st.overflows}});
  }
  json out = {{"policy", hm_policy_name()}, {"spaces", spaces}};
  for (const Mechanism *m : all_mechanisms()) m->summarise(out);
  return out;
}

// The clock restarts with the placement runtime at every initialisation, whatever the policy.
class IterationClockMechanism final : public Mechanism {
 public:
  const char *name() const override { return "iteration-clock"; }
  void reset() override { clock_instance()->start(); }
};

}  // namespace

Mechanism &iteration_clock_mechanism() { return single<IterationClockMechanism>(); }

}  // namespace hm::place

extern "C" int hm_summary_write(const char *path, const char *extra_json) {
  using nlohmann::json;
  if (!path || !*path) return hm::fail(HM_EINVAL, "hm_summary_write: no path");
  int rc = hm::runtime_ensure();
  if (rc != HM_OK) return rc;
  try {
    json doc = json::object();
    if (extra_json && *extra_json) {
      json extra = json::parse(extra_json, nullptr, false);
      if (extra.is_discarded() || !extra.is_object())
        return hm::fail(HM_EFORMAT, "hm_summary_write: the extra members are not a JSON object");
      doc = extra;
    }
    json phases = json::object();
    const std::vector<hm::PhaseTotal> totals = hm::phase_totals();
    for (const hm::PhaseTotal &p : totals) phases[p.name] = {{"calls", p.calls}, {"seconds", p.seconds}};
    hm_sampler_stats_t sampler{};
    hm_sampler_stats(&sampler);
    doc["tiers"] = hm::place::tiers_json();
    doc["classes"] = hm::place::classes_json();
    doc["placement"] = hm::place::placement_json();
    doc["phases"] = phases;
    doc["iteration_seconds"] = hm::place::clock_instance()->seconds();
    doc["iteration_cpu_seconds"] = hm::place::clock_instance()->cpu_seconds();
    doc["iteration_phase_seconds"] = hm::place::clock_instance()->phase_seconds(totals);
    doc["emulator_own_seconds"] = static_cast<double>(sampler.own_ns + sampler.inflicted_ns) * 1e-9;
    doc["sampler"] = {{"sampled", sampler.phases_sampled},
                      {"carried", sampler.phases_carried},
                      {"skipped", sampler.phases_skipped},
                      {"own_seconds", static_cast<double>(sampler.own_ns) * 1e-9},
                      {"inflicted_seconds", static_cast<double>(sampler.inflicted_ns) * 1e-9},
                      {"page_cost_ns", sampler.page_cost_ns}};
    if (!hm::prim::write_text_atomic(path, doc.dump(1) + "\n"))
      return hm::fail(HM_EIO, "hm_summary_write: cannot write '%s'", path);
    return HM_OK;
  } catch (const std::exception &e) {
    return hm::fail(HM_ENOMEM, "hm_summary_write: %s", e.what());
  }
}
