#include "place/objects.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "alloc/runtime.h"
#include "place/budget.h"
#include "place/spaces.h"
#include "tier/tier.h"

namespace hm::place {
namespace {

// Sharded by address so that threads freeing different objects rarely meet on a lock.
constexpr int kShards = 16;
struct Shard {
  std::mutex mutex;
  std::unordered_map<uintptr_t, Object> live;
};
Shard *shards() {
  static Shard *s = new Shard[kShards];  // lives as long as the process: frees come during exit
  return s;
}
Shard &shard_of(const void *p) { return shards()[(reinterpret_cast<uintptr_t>(p) >> 6) % kShards]; }

// Each class's live bytes on each tier (hm_class_info), kept with the records they sum.
constexpr int kMaxClasses = HM_MAX_CLASSES, kTierSlots = kMaxTiers;
std::atomic<int64_t> g_live[kMaxClasses][kTierSlots] = {};
std::atomic<int64_t> g_peak[kMaxClasses][kTierSlots] = {};  // the most of them at once

void class_live_add(int cls, int tier, int64_t delta) {
  if (cls < 0 || cls >= kMaxClasses || tier < 0 || tier >= kTierSlots) return;
  const int64_t now = g_live[cls][tier].fetch_add(delta, std::memory_order_relaxed) + delta;
  std::atomic<int64_t> &peak = g_peak[cls][tier];
  for (int64_t seen = peak.load(std::memory_order_relaxed);
       now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed);) {
  }
}

// The class's live bytes on each of the object's tiers, and its space's bytes on the fast tier
// (reserved by the caller before an object is added or moved in).
void account(const Object &o, int sign) {
  class_live_add(o.cls, o.tier, sign * static_cast<int64_t>(o.bytes_on(o.tier)));
  if (o.tail_tier >= 0) class_live_add(o.cls, o.tail_tier, sign * static_cast<int64_t>(o.tail_bytes));
  if (!o.in_space) return;
  hm_space_t s = space_of(o.kind);
  if (sign > 0) {
    spaces().confirm(s);
    spaces().object_added(s);
  } else {
    spaces().release(s, o.bytes_on(fast_tier()));
    spaces().object_removed(s);
  }
}

void on_release(void *ptr, size_t) {
  Shard &sh = shard_of(ptr);
  Object o;
  {
    std::lock_guard<std::mutex> lock(sh.mutex);
    auto it = sh.live.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == sh.live.end()) return;
    o = it->second;
    sh.live.erase(it);
  }
  account(o, -1);
}

}  // namespace

void object_add(const Object &o) {
  {
    Shard &sh = shard_of(o.ptr);
    std::lock_guard<std::mutex> lock(sh.mutex);
    sh.live[reinterpret_cast<uintptr_t>(o.ptr)] = o;
  }
  mark_tracked(o.ptr);
  account(o, +1);
}

std::vector<Object> live_objects(bool hot_only) {
  std::vector<Object> out;
  for (int i = 0; i < kShards; ++i) {
    std::lock_guard<std::mutex> lock(shards()[i].mutex);
    for (const auto &kv : shards()[i].live)
      if (!hot_only || kv.second.kind == HM_CLASS_HOT) out.push_back(kv.second);
  }
  return out;
}

std::vector<Object> hot_objects() { return live_objects(true); }

namespace {
// Changes the record of the object at ptr and moves its accounting along; false if it is gone.
template <class Change>
bool update(void *ptr, Change change) {
  Shard &sh = shard_of(ptr);
  Object before, after;
  {
    std::lock_guard<std::mutex> lock(sh.mutex);
    auto it = sh.live.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == sh.live.end()) return false;
    before = it->second;
    change(it->second);
    after = it->second;
  }
  account(before, -1);
  account(after, +1);
  return true;
}
}  // namespace

bool object_moved(void *ptr, int tier, bool in_space) {
  return update(ptr, [&](Object &o) {
    o.tier = tier;
    o.in_space = in_space;
  });
}

bool object_split(void *ptr, int tail_tier, uint64_t tail_bytes, bool in_space) {
  return update(ptr, [&](Object &o) {
    o.tail_tier = tail_tier;
    o.tail_bytes = tail_bytes;
    o.in_space = in_space;
  });
}

int64_t class_live_bytes(int cls, int tier) {
  if (cls < 0 || cls >= kMaxClasses || tier < 0 || tier >= kTierSlots) return 0;
  return g_live[cls][tier].load(std::memory_order_relaxed);
}

int64_t class_peak_bytes(int cls, int tier) {
  if (cls < 0 || cls >= kMaxClasses || tier < 0 || tier >= kTierSlots) return 0;
  return g_peak[cls][tier].load(std::memory_order_relaxed);
}

void objects_reset() {
  for (int i = 0; i < kShards; ++i) {
    std::lock_guard<std::mutex> lock(shards()[i].mutex);
    shards()[i].live.clear();
  }
}

void objects_install() {
  static bool installed = [] {
    set_release_observer(on_release);
    return true;
  }();
  (void)installed;
}

}  // namespace hm::place
