// Static placement (Ren et al. (ICS'21) §4.1): the first iteration observes where objects went and how much
// the temporaries needed at their peak; at its end the spaces are sized and hot objects moved,
// at the same addresses, so that the free space holds the highest priorities.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "alloc/phases.h"
#include "alloc/runtime.h"
#include "base/error.h"
#include "base/options.h"
#include "place/mechanisms.h"
#include "place/objects.h"
#include "place/spaces.h"
#include "place/stream.h"
#include "prim/prim.h"

namespace hm::place {
namespace {

std::mutex g_stats_mutex;
hm_placement_stats_t g_stats{};

// Which hot objects the free space holds: by priority (then allocation order), each that fits in
// what is left; one too large for the rest goes to the capacity tier and smaller ones may follow.
// *left receives the room no whole object took.
std::vector<bool> choose_fast(const std::vector<Object> &hot, uint64_t room, uint64_t *left) {
  std::vector<bool> fast(hot.size(), false);
  for (size_t i = 0; i < hot.size(); ++i)
    if (hot[i].size <= room) {
      fast[i] = true;
      room -= hot[i].size;
    }
  *left = room;
  return fast;
}

// The free space's last room (2 MiB or more) goes to the highest-priority object that did not fit,
// split by page range: its first pages on one tier, the rest on the other. Only objects with
// their own anonymous mapping split (file tiers and hugetlb pages do not).
constexpr uint64_t kMinSplit = uint64_t{2} << 20;

bool split_boundary(const Object &o, uint64_t room, int fast, int cap, hm_placement_stats_t *st) {
  // The object's records count its requested size; the heap splits its usable (page-rounded) size.
  const size_t usable = hm_usable_size(o.ptr);
  if (o.tier != fast) {
    // Pages coming in must also fit what the fast tier's budget has left: the space counts the
    // objects' requested sizes, the tier their page-rounded ones.
    hm_tier_stats_t fs;
    if (hm_tier_stats(fast, &fs) == HM_OK && fs.budget) room = std::min(room, fs.budget > fs.in_use ? fs.budget - fs.in_use : 0);
  }
  const uint64_t fast_bytes = room / prim::kPageSize * prim::kPageSize;
  if (fast_bytes < kMinSplit || fast_bytes >= o.size || !spaces().reserve(HM_SPACE_FREE, fast_bytes)) return false;
  bool ok;
  if (o.tier == fast) {  // the first pages stay, the rest leave
    ok = alloc_split(o.ptr, cap, fast_bytes) == HM_OK && object_split(o.ptr, cap, o.size - fast_bytes, true);
  } else {  // the last pages come in
    size_t tail_offset = usable - fast_bytes;
    ok = alloc_split(o.ptr, fast, tail_offset) == HM_OK && object_split(o.ptr, fast, fast_bytes, true);
  }
  if (!ok) {
    spaces().release(HM_SPACE_FREE, fast_bytes);
    return false;
  }
  st->split = 1;
  st->split_fast_bytes = fast_bytes;
  return true;
}

// Streamed objects made before the spaces were sized live on the capacity tier; the room hot
// objects leave in the free space takes them, in allocation order, as it takes streamed objects
// made after (a fast tier that holds the whole footprint then holds them all, as first-touch
// would). Under a policy that stages streamed data through the migration space they stay home
// unless every one of them fits (staging then has nothing to hide), until the helper model has
// declined staging everywhere (then they are placed as static placement places them); with
// HM_HELPERS set (staging asked for, as the helper sweeps do) they stay home.
void promote_streamed(int fast, int cap, hm_placement_stats_t *st) {
  if (fast < 0 || cap < 0) return;
  std::vector<Object> streamed;
  uint64_t total = 0;
  for (const Object &o : live_objects())
    if (o.kind == HM_CLASS_STREAMING && o.tier == cap && o.tail_tier < 0 && o.size >= kMovableStreamed) {
      streamed.push_back(o);
      total += o.size;
    }
  if (streamed.empty()) return;
  if (streaming_mechanism().active()) {
    int rc = HM_OK;
    if (helpers_override(&rc) >= 0) return;  // HM_HELPERS: staging asked for, homes stay home
    if (!staging_declined() && total > spaces().free_room()) return;
  }
  std::sort(streamed.begin(), streamed.end(), [](const Object &a, const Object &b) { return a.seq < b.seq; });
  for (const Object &o : streamed) {
    // Room first: a reservation that fails counts as the free space overflowing, which this is not.
    if (spaces().free_room() < o.size || !spaces().reserve(HM_SPACE_FREE, o.size)) break;
    if (hm_move(o.ptr, fast) == HM_OK && object_moved(o.ptr, fast, true)) {
      ++st->promoted;
      st->promoted_bytes += o.size;
    } else {
      spaces().release(HM_SPACE_FREE, o.size);
      ++st->unmovable;
    }
  }
}

void settle(uint32_t iteration) {
  const int fast = fast_tier(), cap = capacity_tier();
  hm_placement_stats_t st{};
  st.settle_iteration = static_cast<int>(iteration);
  uint64_t migration = 0;
  option_size(Option::kMigrationSpace, &migration);
  // A streaming policy needs staging slots: unless set, three slots each holding four of the largest
  // tiles per core (at least eight), at least 4 MiB, at most an eighth of the fast budget. A batch
  // is one slot's tiles, shared among the computing threads: with fewer tiles than threads some
  // idle, and with one each the slowest tile sets the interval.
  if (migration == 0 && streaming_mechanism().active()) {
    const uint64_t tiles_per_slot = std::max<uint64_t>(8, 4 * static_cast<uint64_t>(prim::cpu_count()));
    migration = std::min(fast_budget_bytes() / 8,
                         std::max<uint64_t>(3 * tiles_per_slot * largest_streamed_tile(), uint64_t{4} << 20));
  }
  uint64_t free_budget = 0;
  std::string why;
  st.error = spaces().size(fast_budget_bytes(), migration, &free_budget, &why);
  if (st.error != HM_OK) {
    std::snprintf(st.message, sizeof st.message, "%s", why.c_str());
    log(0, "hetmem-static: %s", why.c_str());
  }
  // Objects already split across the tiers (a class's own interleave) stay as they are; their
  // bytes on the fast tier hold part of the free space.
  std::vector<Object> hot;
  uint64_t held_split = 0;
  for (const Object &o : hot_objects()) {
    if (o.tail_tier >= 0) held_split += o.bytes_on(fast);
    else hot.push_back(o);
  }
  std::sort(hot.begin(), hot.end(), [](const Object &a, const Object &b) {
    return a.priority != b.priority ? a.priority > b.priority : a.seq < b.seq;
  });
  uint64_t left = 0;
  std::vector<bool> to_fast = choose_fast(hot, free_budget > held_split ? free_budget - held_split : 0, &left);
  // The object at the boundary: the first by priority that does not go fast whole.
  size_t boundary = hot.size();
  for (size_t i = 0; i < hot.size() && boundary == hot.size(); ++i)
    if (!to_fast[i] && left >= kMinSplit) boundary = i;
  uint64_t t0 = prim::now_ns();
  // Out first, so that what comes in finds the room (the boundary object is split instead).
  for (size_t i = 0; i < hot.size(); ++i) {
    if (to_fast[i] || hot[i].tier != fast || cap < 0 || i == boundary) continue;
    if (hm_move(hot[i].ptr, cap) == HM_OK && object_moved(hot[i].ptr, cap, false)) {
      ++st.demoted;
      st.demoted_bytes += hot[i].size;
    } else {
      ++st.unmovable;
    }
  }
  // The boundary object on the fast tier gives up its tail (or leaves whole) before others come in.
  const bool boundary_on_fast = boundary < hot.size() && hot[boundary].tier == fast;
  if (boundary_on_fast && cap >= 0 && !split_boundary(hot[boundary], left, fast, cap, &st)) {
    if (hm_move(hot[boundary].ptr, cap) == HM_OK && object_moved(hot[boundary].ptr, cap, false)) {
      ++st.demoted;
      st.demoted_bytes += hot[boundary].size;
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
  // The boundary object on the capacity tier brings its last pages into the room left.
  if (boundary < hot.size() && !boundary_on_fast) split_boundary(hot[boundary], left, fast, cap, &st);
  spaces().size_free(free_budget);
  promote_streamed(fast, cap, &st);
  st.settle_seconds = static_cast<double>(prim::now_ns() - t0) * 1e-9;
  st.settled = 1;
  log(2, "hetmem-static: settled after iteration %u: %llu objects in (%s), %llu out (%s), %llu could not move%s",
      iteration, static_cast<unsigned long long>(st.promoted), format_size(st.promoted_bytes).c_str(),
      static_cast<unsigned long long>(st.demoted), format_size(st.demoted_bytes).c_str(),
      static_cast<unsigned long long>(st.unmovable), st.split ? ", one split at the boundary" : "");
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  g_stats = st;
}

// Streamed objects left at home for staging that the helper model then declined (or withdrew):
// placed as static placement places them, between two iterations (no sweep is running then, so
// no helper copies a tile while it moves). Once per run.
std::atomic<bool> g_streamed_after_decline{false};

void place_streamed_after_decline() {
  if (g_streamed_after_decline.exchange(true)) return;
  hm_placement_stats_t st{};
  promote_streamed(fast_tier(), capacity_tier(), &st);
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  g_stats.promoted += st.promoted;
  g_stats.promoted_bytes += st.promoted_bytes;
  g_stats.unmovable += st.unmovable;
}

class SettleObserver final : public PhaseObserver {
 public:
  void iteration_begun(uint32_t iteration) override {
    if (!static_placement_mechanism().active() || iteration < 1) return;
    if (!spaces().sized()) {
      settle(iteration);
      return;
    }
    if (streaming_mechanism().active() && !g_streamed_after_decline.load() && staging_declined() &&
        migration_returned())
      place_streamed_after_decline();
  }
};

hm_placement_stats_t placement_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  return g_stats;
}

void print_spaces(int fd) {
  const Policy *p = active_policy();
  if (!p) return;
  prim::print_fd(fd, "placement: policy %s\n", p->name());
  prim::print_fd(fd, "%-10s %12s %12s %12s %9s %7s %11s\n", "space", "budget", "in use", "high water", "objects",
          "grows", "overflows");
  for (int s = 0; s < HM_SPACE_COUNT; ++s) {
    hm_space_stats_t st = spaces().stats(static_cast<hm_space_t>(s));
    prim::print_fd(fd, "%-10s %12s %12s %12s %9llu %7llu %11llu\n", hm_space_name(static_cast<hm_space_t>(s)),
            st.sized ? format_size(st.budget).c_str() : "not sized", format_size(st.in_use).c_str(),
            format_size(st.high_water).c_str(), static_cast<unsigned long long>(st.objects),
            static_cast<unsigned long long>(st.grows), static_cast<unsigned long long>(st.overflows));
  }
  hm_placement_stats_t ps = placement_stats();
  if (ps.settled)
    prim::print_fd(fd, "static placement after iteration %d: %llu objects in (%s), %llu out (%s), %llu unmovable, %s split "
            "at the boundary, %.3f s%s%s\n",
            ps.settle_iteration, static_cast<unsigned long long>(ps.promoted), format_size(ps.promoted_bytes).c_str(),
            static_cast<unsigned long long>(ps.demoted), format_size(ps.demoted_bytes).c_str(),
            static_cast<unsigned long long>(ps.unmovable), ps.split ? format_size(ps.split_fast_bytes).c_str() : "none",
            ps.settle_seconds, ps.error ? "; " : "", ps.message);
}

const bool g_section = [] {
  add_stats_section(print_spaces);
  return true;
}();

class StaticPlacement final : public Mechanism {
 public:
  const char *name() const override { return "static-placement"; }
  void reset() override {
    std::lock_guard<std::mutex> lock(g_stats_mutex);
    g_stats = hm_placement_stats_t{};
    g_streamed_after_decline.store(false);
  }
  int activate(std::string *) override {
    add_phase_observer_once<SettleObserver>();
    return HM_OK;
  }
  void summarise(nlohmann::json &placement) const override {
    const hm_placement_stats_t ps = placement_stats();
    placement["static"] = {{"settled", ps.settled != 0}, {"iteration", ps.settle_iteration},
                           {"promoted", ps.promoted}, {"promoted_bytes", ps.promoted_bytes},
                           {"demoted", ps.demoted}, {"demoted_bytes", ps.demoted_bytes},
                           {"unmovable", ps.unmovable}, {"split", ps.split != 0},
                           {"split_fast_bytes", ps.split_fast_bytes}, {"seconds", ps.settle_seconds},
                           {"problem", ps.message}};
  }
};

}  // namespace

Mechanism &static_placement_mechanism() { return single<StaticPlacement>(); }

}  // namespace hm::place

extern "C" int hm_placement_stats(hm_placement_stats_t *stats) {
  if (!stats) return hm::fail(HM_EINVAL, "hm_placement_stats: stats is NULL");
  *stats = hm::place::placement_stats();
  return HM_OK;
}
