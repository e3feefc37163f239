// Streamed tile containers (Ren et al. (ICS'21) §4.3; docs/streaming.md). A sweep walks its tiles in batches
// that each fit one of three staging slots of the migration space: while the kernel computes batch
// b in slot b % 3, the helpers copy batch b+1 into the next slot and write the modified tiles of
// batch b-1 back home; a copy into a slot waits for the slot's previous batch to be written back.
// Without staging (any policy but "hetmem", or before the spaces are sized) a tile's working copy
// is its home and the whole range is one batch. This file is the engine and its mechanism; the C
// API is stream_api.cpp.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "alloc/phases.h"
#include "base/error.h"
#include "base/options.h"
#include "place/mechanisms.h"
#include "place/models.h"
#include "place/spaces.h"
#include "place/stream.h"
#include "prim/prim.h"
#include "tier/emul.h"

namespace hm::place {

Engine &engine() {
  static Engine *e = new Engine();  // lives as long as the process (helpers may outlive main)
  return *e;
}

// HM_HELPERS: -1 when unset (the model decides).
int helpers_override(int *rc) {
  *rc = HM_OK;
  if (option_text(Option::kHelpers).empty()) return -1;
  const int most = std::max(8, 2 * prim::cpu_count());
  long v = 0;
  if ((*rc = option_int(Option::kHelpers, &v)) != HM_OK) return -1;
  if (v < 0 || v > most) {
    *rc = fail(HM_EINVAL, "HM_HELPERS=%ld: the helper thread count must be between 0 and %d (0: the computing "
               "threads copy)", v, most);
    return -1;
  }
  return static_cast<int>(v);
}

bool staging_wanted() {
  return streaming_mechanism().active() && spaces().sized() && fast_tier() >= 0 && capacity_tier() >= 0 &&
         spaces().budget(HM_SPACE_MIGRATION) >= 3 * prim::kPageSize;
}

bool staging_declined() { return engine().declined.load(std::memory_order_acquire); }
bool migration_returned() { return engine().migration_returned.load(std::memory_order_acquire); }

// Allocates the staging slots once the migration space is sized (the engine's lock held).
int ensure_staging(Engine &e) {
  if (e.staging) return HM_OK;
  const size_t bytes = spaces().budget(HM_SPACE_MIGRATION) / (3 * prim::kPageSize) * (3 * prim::kPageSize);
  if (!spaces().reserve(HM_SPACE_MIGRATION, bytes))
    return fail(HM_EBUDGET, "streaming: the migration space (%s) cannot hold its staging slots",
                format_size(spaces().budget(HM_SPACE_MIGRATION)).c_str());
  void *p = hm_tier_alloc(fast_tier(), bytes, prim::kPageSize, HM_STRICT);
  if (!p) {
    spaces().release(HM_SPACE_MIGRATION, bytes);
    return fail(HM_EBUDGET, "streaming: the fast tier refused the migration space's %s of staging slots",
                format_size(bytes).c_str());
  }
  spaces().confirm(HM_SPACE_MIGRATION);
  e.staging = static_cast<char *>(p);
  e.staging_bytes = bytes;
  return HM_OK;
}

void release_staging(Engine &e) {
  if (!e.staging) return;
  hm_free(e.staging);
  spaces().release(HM_SPACE_MIGRATION, e.staging_bytes);
  e.staging = nullptr;
  e.staging_bytes = 0;
}

// The modified tiles of a batch go home (helpers), counted.
void write_back(hm_stream_t *s, Batch &b) {
  std::vector<Copy> copies;
  if (b.slot < 0) {  // worked on at home: nothing to copy
    engine().pool.submit(&b.out, copies);
    return;
  }
  for (size_t t = b.first; t < b.last; ++t) {
    if (!s->modified[t].load(std::memory_order_acquire) || !s->bytes[t]) continue;
    copies.push_back(Copy{s->home[t], s->slot(b.slot) + s->offset[t], s->bytes[t]});
    ++s->stats.tiles_out;
    s->stats.bytes_out += s->bytes[t];
  }
  engine().pool.submit(&b.out, copies);
}

void stage_in(hm_stream_t *s, size_t index) {
  Batch &b = *s->batches[index];
  b.in.after = index >= 3 ? &s->batches[index - 3]->out : nullptr;
  std::vector<Copy> copies;
  for (size_t t = b.first; t < b.last; ++t) {
    if (!s->bytes[t]) continue;
    copies.push_back(Copy{s->slot(b.slot) + s->offset[t], s->home[t], s->bytes[t]});
    ++s->stats.tiles_in;
    s->stats.bytes_in += s->bytes[t];
  }
  engine().pool.submit(&b.in, copies);
}

namespace {

// The helper model's inputs from the measured first batch of a phase's first staged sweep.
HelperInputs model_inputs(hm_stream_t *s, double t_comp) {
  HelperInputs in;
  double staged = 0, dirty = 0;
  for (const auto &b : s->batches)
    for (size_t t = b->first; t < b->last; ++t) staged += static_cast<double>(s->bytes[t]);
  const Batch &first = *s->batches[0];
  double first_bytes = 0;
  for (size_t t = first.first; t < first.last; ++t) {
    first_bytes += static_cast<double>(s->bytes[t]);
    if (s->modified[t].load()) dirty += static_cast<double>(s->bytes[t]);
  }
  in.data_in = staged / static_cast<double>(s->batches.size());
  in.data_out = first_bytes > 0 ? in.data_in * dirty / first_bytes : 0;
  // The interval's time scaled to an average batch.
  in.t_comp = first_bytes > 0 ? t_comp * in.data_in / first_bytes : t_comp;
  // The kernel reads its staged tiles and writes the modified ones at least once: the bandwidth
  // it uses is at least that (a lower bound; docs/streaming.md).
  in.bw_comp = in.t_comp > 0 ? (in.data_in + in.data_out) / in.t_comp : 0;
  in.thrd_max = prim::cpu_count();
  in.thrd_comp = std::max<int>(1, static_cast<int>(s->threads_seen.size()));
  hm_calibration_t cal;
  if (hm_calibration_get(&cal) == HM_OK && cal.threads > 0)
    in.bw_max = calibration_bw(cal.read_bw_mbps, cal.threads, in.thrd_max) * 1e6;
  Engine &e = engine();
  const CopyBandwidth &bw = copy_bandwidth(e.staging, e.staging_bytes, std::max(2, in.thrd_max + 1));
  in.bw_in = bw.in;
  in.bw_out = bw.out;
  return in;
}

double batch_bytes(const hm_stream_t *s, const Batch &b) {
  double bytes = 0;
  for (size_t t = b.first; t < b.last; ++t) bytes += static_cast<double>(s->bytes[t]);
  return bytes;
}

// Staging pays when the predicted interval beats working at home by a margin (the copies then
// hide the slow tier), or when working at home was not timed.
bool staging_pays(const PhaseDecision &d) {
  constexpr double kMargin = 0.95;
  return d.t_inplace <= 0 || d.choice.t_predicted < kMargin * d.t_inplace;
}

}  // namespace

int decide(hm_stream_t *s, double t_comp, double t_home, bool *stage) {
  Engine &e = engine();
  PhaseDecision d;
  d.inputs = model_inputs(s, t_comp);
  d.choice = choose_helpers(d.inputs);
  if (s->forced >= 0) {
    d.overridden = true;
    d.choice.helpers = s->forced;
  }
  const double home_bytes = s->batches.size() > 1 ? batch_bytes(s, *s->batches[1]) : 0;
  d.t_inplace = d.t_home_batch = home_bytes > 0 ? t_home * d.inputs.data_in / home_bytes : 0;
  // HM_HELPERS stages regardless (for sweeps of the helper count).
  d.stage = s->forced >= 0 || staging_pays(d);
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    e.decisions[s->phase] = d;
    e.decisions_changed();
  }
  log(2, "streaming: phase '%s': %d helper(s) (%s); interval %.3f ms staged, %.3f ms at home, copy %.3f ms, "
      "%.3f ms predicted: %s", s->phase.c_str(), d.choice.helpers, d.overridden ? "HM_HELPERS" : d.choice.binding.c_str(),
      d.inputs.t_comp * 1e3, d.t_inplace * 1e3, d.choice.t_cp * 1e3, d.choice.t_predicted * 1e3,
      d.stage ? "staging predicted to pay" : "tiles stay at home (staging would not pay)");
  *stage = d.stage;
  return d.choice.helpers;
}

// The second batch at home was timed between two interval boundaries, where the computing threads
// wait for each other and, with fewer tiles in a batch than threads, some of them idle. A phase
// that does not stage has no boundaries: its sweep is one batch. The rest of the measuring sweep,
// worked on that way, is what staging has to beat. (hetmem-pic preset:L2, 8 of 16 cores computing,
// batches of 8 tiles: the batch at home took 0.63 ms, a staged interval 0.59, so staging stayed,
// and the phase took 1.34x as long as hetmem-static's, which works on the tiles at home.)
void confirm_decision(hm_stream_t *s, double seconds) {
  const double bytes = batch_bytes(s, *s->batches.back());
  if (!(bytes > 0 && seconds > 0)) return;
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  auto it = e.decisions.find(s->phase);
  if (it == e.decisions.end() || it->second.overridden) return;
  PhaseDecision &d = it->second;
  d.t_inplace = seconds * d.inputs.data_in / bytes;
  const bool stage = staging_pays(d);
  if (stage != d.stage) {
    d.stage = stage;
    e.decisions_changed();
  }
  log(2, "streaming: phase '%s': the rest of the measuring sweep at home took %.3f ms an interval (its second "
      "batch %.3f ms), %.3f ms predicted staged: %s", s->phase.c_str(), d.t_inplace * 1e3, d.t_home_batch * 1e3,
      d.choice.t_predicted * 1e3, d.stage ? "staging" : "tiles stay at home (staging would not pay)");
}

// The model predicts from one batch staged and the sweep at home; the first whole staged sweep
// after its decision shows what staging costs with the helpers copying beside the computation. If
// an interval took longer than working at home did, the phase's tiles stay at home from the next
// sweep on (HM_HELPERS, which stages for the sweeps of the helper count, is left as it is).
void check_decision(hm_stream_t *s) {
  if (!s->staged || !s->decided_before || s->forced >= 0 || s->next_batch < 3) return;
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  auto it = e.decisions.find(s->phase);
  if (it == e.decisions.end() || it->second.checked || it->second.t_inplace <= 0) return;
  PhaseDecision &d = it->second;
  d.checked = true;
  // Per interval: the sweep's time over its batches, each a staging slot's worth of tiles (the
  // unit t_inplace was scaled to).
  const double interval = static_cast<double>(prim::now_ns() - s->sweep_ns) * 1e-9 / static_cast<double>(s->next_batch);
  d.t_staged_seen = interval;
  if (interval < d.t_inplace) return;
  d.stage = false;
  e.decisions_changed();
  log(1, "streaming: phase '%s': a staged sweep took %.3f ms an interval against %.3f ms at home (the model "
      "predicted %.3f ms): its tiles stay at home from now on", s->phase.c_str(), interval * 1e3, d.t_inplace * 1e3,
      d.choice.t_predicted * 1e3);
}

int end_sweep(hm_stream_t *s) {
  if (!s->active) return HM_OK;
  Engine &e = engine();
  // The batch being computed goes home, then everything in flight completes (a batch never
  // staged has nothing to wait for).
  if (s->staged && s->next_batch > s->written_back) write_back(s, *s->batches[s->next_batch - 1]);
  for (auto &b : s->batches) {
    e.pool.wait(b->in);
    e.pool.wait(b->out);
  }
  s->stats.copy_seconds += e.pool.take_copy_seconds();
  check_decision(s);
  for (size_t t = 0; t < s->home.size(); ++t) s->state[t].store(kIdle), s->modified[t].store(0);
  s->batches.clear();
  s->active = false;
  std::lock_guard<std::mutex> lock(e.mutex);
  e.sweeping = nullptr;
  return_migration_if_declined(e);  // nothing is in flight now
  return HM_OK;
}

void return_migration_if_declined(Engine &e) {
  if (!e.declined.load() || e.migration_returned.load()) return;
  release_staging(e);
  const uint64_t given = spaces().give_to_free(HM_SPACE_MIGRATION);
  e.migration_returned.store(true);
  log(2, "streaming: staging declined in every phase: the migration space's %s returned to the free space",
      format_size(given).c_str());
}



namespace {

std::vector<std::string> helper_model_phases() {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  std::vector<std::string> out;
  for (const auto &kv : e.decisions) out.push_back(kv.first);
  return out;
}

// The live streams' counters summed.
hm_stream_stats_t streaming_totals() {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  hm_stream_stats_t t{};
  for (const hm_stream_t *s : e.streams) {
    const hm_stream_stats_t &x = s->stats;
    t.staging |= x.staging;
    t.helpers = std::max(t.helpers, x.helpers);
    t.sweeps += x.sweeps, t.batches += x.batches, t.tiles_in += x.tiles_in, t.bytes_in += x.bytes_in;
    t.tiles_out += x.tiles_out, t.bytes_out += x.bytes_out, t.released_clean += x.released_clean;
    t.wait_seconds += x.wait_seconds, t.compute_seconds += x.compute_seconds, t.copy_seconds += x.copy_seconds;
    t.slot_bytes = std::max(t.slot_bytes, x.slot_bytes);
  }
  return t;
}

class Streaming final : public Mechanism {
 public:
  const char *name() const override { return "streaming"; }
  // Forgets the helper model's decisions and the copy bandwidth measured under the previous
  // initialisation.
  void reset() override {
    Engine &e = engine();
    {
      std::lock_guard<std::mutex> lock(e.mutex);
      e.decisions.clear();
      e.decisions_changed();
      e.migration_returned.store(false);
    }
    copy_bandwidth_forget();
  }
  void summarise(nlohmann::json &placement) const override {
    using nlohmann::json;
    const hm_stream_stats_t st = streaming_totals();
    json models = json::array();
    for (const std::string &phase : helper_model_phases()) {
      hm_helper_model_t m;
      if (hm_helper_model(phase.c_str(), &m) != HM_OK) continue;
      models.push_back({{"phase", m.phase}, {"helpers", m.helpers}, {"overridden", m.overridden != 0},
                        {"data_in", m.data_in}, {"data_out", m.data_out}, {"t_comp", m.t_comp},
                        {"bw_comp", m.bw_comp}, {"bw_max", m.bw_max}, {"thrd_max", m.thrd_max},
                        {"thrd_comp", m.thrd_comp}, {"t_cp", m.t_cp}, {"t_predicted", m.t_predicted},
                        {"t_inplace", m.t_inplace}, {"t_staged_seen", m.t_staged_seen}, {"stage", m.stage != 0},
                        {"binding", m.binding}});
    }
    double bw_in[8], bw_out[8];
    const int measured = models.empty() ? 0 : hm_copy_bandwidth(bw_in, bw_out, 8);
    placement["streaming"] = {
        {"staging", st.staging != 0}, {"helpers", st.helpers}, {"sweeps", st.sweeps}, {"batches", st.batches},
        {"tiles_in", st.tiles_in}, {"bytes_in", st.bytes_in}, {"tiles_out", st.tiles_out},
        {"bytes_out", st.bytes_out}, {"released_clean", st.released_clean}, {"wait_seconds", st.wait_seconds},
        {"compute_seconds", st.compute_seconds}, {"copy_seconds", st.copy_seconds}, {"slot_bytes", st.slot_bytes},
        {"helper_models", models},
        {"copy_bw_in_mbps", std::vector<double>(bw_in, bw_in + std::max(measured, 0))},
        {"copy_bw_out_mbps", std::vector<double>(bw_out, bw_out + std::max(measured, 0))}};
  }
};

}  // namespace

uint64_t largest_streamed_tile() {
  Engine &e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  uint64_t most = 0;
  for (const hm_stream_t *s : e.streams)
    if (s->cls >= 0)
      for (size_t b : s->bytes) most = std::max<uint64_t>(most, b);
  return most;
}

Mechanism &streaming_mechanism() { return single<Streaming>(); }

}  // namespace hm::place
