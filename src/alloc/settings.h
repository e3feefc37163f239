// The state of the allocation layer that its parts read: the heap of each tier, the runtime's
// epoch, and the settings read from the options at initialisation. The runtime (runtime.cpp)
// writes them; the heaps, the sampler and the declared accesses only read them, so none of
// them depends on the runtime.
#pragma once
#include <atomic>
#include <cstdint>

#include "hetmem/hetmem.h"

namespace hm {

class TierHeap;

#ifdef NDEBUG
constexpr bool kHetmemDebug = false;
#else
constexpr bool kHetmemDebug = true;
#endif

// Set from the options at initialisation (runtime.cpp; the defaults are base/options.cpp's); before
// it, the cautious values: no huge-page advice, no sampling, nothing retained.
struct AllocSettings {
  bool thp = false;           // HM_THP: large blocks advise transparent huge pages
  double sample_budget = 0;   // HM_SAMPLE_BUDGET: fraction of the run time the page sampler may cost
  uint64_t retain = 0;        // HM_RETAIN: freed large mappings kept for reuse per heap
};
extern AllocSettings g_alloc_settings;  // constant-initialised: readable before initialisation
inline bool thp_enabled() { return g_alloc_settings.thp; }
inline double sample_budget() { return g_alloc_settings.sample_budget; }
inline uint64_t retain_limit() { return g_alloc_settings.retain; }

// What every allocation and free reads before it touches a heap, in one cache line for the first
// tiers: the runtime's epoch (changes at every finalize, so thread caches drop stale blocks), which
// tiers have a budget (their small blocks are charged one by one, outside the thread caches' fast
// paths), and the heap of each tier (nullptr if no such tier, or before initialisation). A program
// that allocates between long stretches of its own work finds this line, not five, cold.
struct alignas(64) HeapDirectory {
  std::atomic<uint64_t> epoch{1};
  std::atomic<uint32_t> budgeted{0};  // bit t: tier t's heap has a budget
  TierHeap *heaps[HM_MAX_TIERS] = {};
};
static_assert(HM_MAX_TIERS <= 32, "HeapDirectory::budgeted has a bit per tier");
extern HeapDirectory g_heap_directory;
inline TierHeap *heap_of(int tier) {
  return tier >= 0 && tier < HM_MAX_TIERS ? g_heap_directory.heaps[tier] : nullptr;
}
void heap_install(int tier, TierHeap *heap);
inline uint64_t runtime_epoch() { return g_heap_directory.epoch.load(std::memory_order_relaxed); }
inline bool tier_budgeted(int tier) {
  return (g_heap_directory.budgeted.load(std::memory_order_relaxed) >> tier) & 1u;
}

}  // namespace hm
