// Static placement (seed 000 §4.1): the first iteration observes where objects went and how much
// the temporaries needed at their peak; at its end the spaces are sized and hot objects moved,
// at the same addresses, so that the free space holds the highest priorities.
#include <algorithm>
#include <cstdio>
#include <mutex>
#include <vector>

#include "alloc/phases.h"
#include "alloc/runtime.h"
#include "base/error.h"
#include "base/options.h"
#include "place/classes.h"
#include "place/objects.h"
#include "place/spaces.h"

namespace hm::place {
namespace {

std::mutex g_stats_mutex;
hm_placement_stats_t g_stats{};

// Which hot objects the free space holds: by priority (then allocation order), each that fits in
// what is left; one too large for the rest goes to the capacity tier and smaller ones may follow.
std::vector<bool> choose_fast(const std::vector<Object> &hot, uint64_t room) {
  std::vector<bool> fast(hot.size(), false);
  for (size_t i = 0; i < hot.size(); ++i)
    if (hot[i].size <= room) {
      fast[i] = true;
      room -= hot[i].size;
    }
  return fast;
}

void settle(uint32_t iteration) {
  const int fast = fast_tier(), cap = capacity_tier();
  hm_placement_stats_t st{};
  st.settle_iteration = static_cast<int>(iteration);
  uint64_t migration = 0;
  option_size("HM_MIGRATION_SPACE", &migration);
  uint64_t free_budget = 0;
  std::string why;
  st.error = spaces().size(fast_budget_bytes(), migration, &free_budget, &why);
  if (st.error != HM_OK) {
    std::snprintf(st.message, sizeof st.message, "%s", why.c_str());
    log(0, "hetmem-static: %s", why.c_str());
  }
  std::vector<Object> hot = hot_objects();
  std::sort(hot.begin(), hot.end(), [](const Object &a, const Object &b) {
    return a.priority != b.priority ? a.priority > b.priority : a.seq < b.seq;
  });
  std::vector<bool> to_fast = choose_fast(hot, free_budget);
  uint64_t t0 = prim::now_ns();
  // Out first, so that what comes in finds the room.
  for (size_t i = 0; i < hot.size(); ++i) {
    if (to_fast[i] || hot[i].tier != fast || cap < 0) continue;
    if (hm_move(hot[i].ptr, cap) == HM_OK && object_moved(hot[i].ptr, cap, false)) {
      ++st.demoted;
      st.demoted_bytes += hot[i].size;
    } else {
      ++st.unmovable;
    }
  }
  for (size_t i = 0; i < hot.size(); ++i) {
    if (!to_fast[i] || hot[i].tier == fast) continue;
    if (!spaces().reserve(HM_SPACE_FREE, hot[i].size)) {
      ++st.unmovable;
      continue;
    }
    if (hm_move(hot[i].ptr, fast) == HM_OK && object_moved(hot[i].ptr, fast, true)) {
      ++st.promoted;
      st.promoted_bytes += hot[i].size;
    } else {
      spaces().release(HM_SPACE_FREE, hot[i].size);
      ++st.unmovable;
    }
  }
  spaces().size_free(free_budget);
  st.settle_seconds = static_cast<double>(prim::now_ns() - t0) * 1e-9;
  st.settled = 1;
  log(2, "hetmem-static: settled after iteration %u: %llu hot objects in (%s), %llu out (%s), %llu could not move",
      iteration, static_cast<unsigned long long>(st.promoted), format_size(st.promoted_bytes).c_str(),
      static_cast<unsigned long long>(st.demoted), format_size(st.demoted_bytes).c_str(),
      static_cast<unsigned long long>(st.unmovable));
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  g_stats = st;
}

class StaticPlacement final : public PhaseObserver {
 public:
  void iteration_begun(uint32_t iteration) override {
    const Policy *p = active_policy();
    if (!p || !p->settles() || spaces().sized() || iteration < 1) return;
    settle(iteration);
  }
};

void print_spaces(int fd) {
  const Policy *p = active_policy();
  if (!p) return;
  dprintf(fd, "placement: policy %s\n", p->name());
  dprintf(fd, "%-10s %12s %12s %12s %9s %7s %11s\n", "space", "budget", "in use", "high water", "objects",
          "grows", "overflows");
  for (int s = 0; s < HM_SPACE_COUNT; ++s) {
    hm_space_stats_t st = spaces().stats(static_cast<hm_space_t>(s));
    dprintf(fd, "%-10s %12s %12s %12s %9llu %7llu %11llu\n", hm_space_name(static_cast<hm_space_t>(s)),
            st.sized ? format_size(st.budget).c_str() : "not sized", format_size(st.in_use).c_str(),
            format_size(st.high_water).c_str(), static_cast<unsigned long long>(st.objects),
            static_cast<unsigned long long>(st.grows), static_cast<unsigned long long>(st.overflows));
  }
  hm_placement_stats_t ps = static_placement_stats();
  if (ps.settled)
    dprintf(fd, "static placement after iteration %d: %llu objects in (%s), %llu out (%s), %llu unmovable, %.3f s%s%s\n",
            ps.settle_iteration, static_cast<unsigned long long>(ps.promoted), format_size(ps.promoted_bytes).c_str(),
            static_cast<unsigned long long>(ps.demoted), format_size(ps.demoted_bytes).c_str(),
            static_cast<unsigned long long>(ps.unmovable), ps.settle_seconds, ps.error ? "; " : "", ps.message);
}

const bool g_section = [] {
  add_stats_section(print_spaces);
  return true;
}();

}  // namespace

void static_placement_install() {
  static StaticPlacement *observer = [] {
    auto *o = new StaticPlacement();  // lives as long as the process, as observers must
    add_phase_observer(o);
    return o;
  }();
  (void)observer;
}

void static_placement_reset() {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  g_stats = hm_placement_stats_t{};
}

hm_placement_stats_t static_placement_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  return g_stats;
}

}  // namespace hm::place
