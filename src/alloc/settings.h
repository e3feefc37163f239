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

// The heap of each tier: nullptr if no such tier (or before initialisation). Inline: every
// allocation and free asks.
extern TierHeap *g_heaps[HM_MAX_TIERS];
inline TierHeap *heap_of(int tier) { return tier >= 0 && tier < HM_MAX_TIERS ? g_heaps[tier] : nullptr; }
void heap_install(int tier, TierHeap *heap);

// Changes at every finalize, so thread caches drop stale blocks.
extern std::atomic<uint64_t> g_runtime_epoch;
inline uint64_t runtime_epoch() { return g_runtime_epoch.load(std::memory_order_relaxed); }

}  // namespace hm
