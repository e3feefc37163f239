#include "summary.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

namespace pic {
namespace {

using nlohmann::json;

const char *const kKinds[] = {"metadata", "temporary", "hot", "streaming", "cold"};

json tiers_json() {
  json out = json::array();
  for (hm_tier_t t = 0; t < hm_tier_count(); ++t) {
    hm_tier_info_t info;
    hm_tier_stats_t s;
    if (hm_tier_info(t, &info) != HM_OK || hm_tier_stats(t, &s) != HM_OK) continue;
    json roles = json::array();
    for (int r = 0; r < HM_ROLE_COUNT; ++r)
      if (info.roles & (1u << r)) roles.push_back(hm_role_name(static_cast<hm_role_t>(r)));
    json row = {{"name", info.name},          {"kind", info.kind},          {"emulated", info.kind == HM_KIND_EMUL},
                {"detail", info.detail},      {"roles", roles},             {"budget", s.budget},
                {"high_water", s.high_water}, {"fallbacks_in", s.fallbacks_in}, {"moves_in", s.moves_in}};
    hm_emul_stats_t e;
    if (info.kind == HM_KIND_EMUL && hm_emul_stats(t, &e) == HM_OK) {
      uint64_t ns = 0, r = 0, w = 0;
      for (int src = 0; src < HM_EMUL_SOURCES; ++src) ns += e.charged_ns[src], r += e.read_bytes[src], w += e.write_bytes[src];
      row["charged_s"] = ns * 1e-9;
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
    json placed = json::object(), live = json::object();
    for (hm_tier_t t = 0; t < hm_tier_count() && t < 16; ++t) {
      hm_tier_info_t ti;
      hm_tier_info(t, &ti);
      if (info.bytes_on_tier[t]) placed[ti.name] = info.bytes_on_tier[t];
      if (info.live_bytes_on_tier[t]) live[ti.name] = info.live_bytes_on_tier[t];
    }
    out.push_back({{"name", info.name},
                   {"kind", kKinds[info.kind]},
                   {"priority", info.priority},
                   {"allocs", info.allocs},
                   {"bytes", info.bytes},
                   {"allocated_on", placed},
                   {"live_on", live}});
  }
  return out;
}

json placement_json() {
  json spaces = json::array();
  for (int s = 0; s < HM_SPACE_COUNT; ++s) {
    hm_space_stats_t st;
    if (hm_space_stats(static_cast<hm_space_t>(s), &st) != HM_OK) continue;
    spaces.push_back({{"space", hm_space_name(static_cast<hm_space_t>(s))},
                      {"sized", st.sized != 0},
                      {"budget", st.budget},
                      {"in_use", st.in_use},
                      {"high_water", st.high_water},
                      {"objects", st.objects},
                      {"grows", st.grows},
                      {"grown_bytes", st.grown_bytes},
                      {"overflows", st.overflows}});
  }
  hm_placement_stats_t ps;
  hm_placement_stats(&ps);
  json out = {{"policy", hm_policy_name()},
              {"spaces", spaces},
              {"static", {{"settled", ps.settled != 0},
                          {"iteration", ps.settle_iteration},
                          {"promoted", ps.promoted},
                          {"promoted_bytes", ps.promoted_bytes},
                          {"demoted", ps.demoted},
                          {"demoted_bytes", ps.demoted_bytes},
                          {"unmovable", ps.unmovable},
                          {"seconds", ps.settle_seconds},
                          {"problem", ps.message}}}};
  hm_dram_cache_stats_t cache;
  if (hm_dram_cache_stats(&cache) == HM_OK)
    out["dram_cache"] = {{"hits", cache.hits},
                         {"misses", cache.misses},
                         {"writebacks", cache.writebacks},
                         {"block_bytes", cache.block_bytes},
                         {"blocks", cache.blocks}};
  return out;
}

}  // namespace

bool write_summary(const std::string &path, const Params &p, const RunRecord &run, const char *const *phases,
                   int phase_count, std::string *error) {
  json phase_s = json::object();
  for (int i = 0; i < phase_count; ++i) {
    uint64_t calls = 0;
    double secs = 0;
    if (hm_phase_stats(phases[i], &calls, &secs) == HM_OK) phase_s[phases[i]] = secs;
  }
  hm_sampler_stats_t sampler{};
  hm_sampler_stats(&sampler);
  json doc = {{"program", "hetmem-pic"},
              {"cells", {p.grid.nx, p.grid.ny, p.grid.nz}},
              {"particles", run.particles},
              {"steps", p.steps},
              {"threads", run.threads},
              {"footprint_bytes", {{"fields", run.footprint.fields}, {"particles", run.footprint.particles}}},
              {"seconds", run.seconds},
              {"step_seconds", run.step_seconds},
              {"cpu_seconds", run.cpu_seconds},
              {"step_cpu_seconds", run.step_cpu_seconds},
              {"phase_seconds", phase_s},
              {"emulator_own_seconds", (sampler.own_ns + sampler.inflicted_ns) * 1e-9},
              {"tiers", tiers_json()},
              {"classes", classes_json()},
              {"placement", placement_json()}};
  std::ofstream out(path);
  out << doc.dump(1) << '\n';
  if (!out) {
    *error = "run summary '" + path + "' cannot be written (" + std::strerror(errno) + ")";
    return false;
  }
  return true;
}

}  // namespace pic
