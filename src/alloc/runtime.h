// The allocation runtime: one heap per tier, huge-page pools, and process-wide settings.
#pragma once
#include <atomic>
#include <cstdint>

#include "alloc/heap.h"

namespace hm {

#ifdef NDEBUG
constexpr bool kHetmemDebug = false;
#else
constexpr bool kHetmemDebug = true;
#endif

// Initialises options, tiers and heaps once; returns HM_OK or the failure recorded at the first
// attempt (every later call returns the same code and message).
int runtime_ensure();
void runtime_finalize();
TierHeap *heap_of(int tier);   // nullptr if no such tier
// Changes at every finalize, so thread caches drop stale blocks.
extern std::atomic<uint64_t> g_runtime_epoch;
inline uint64_t runtime_epoch() { return g_runtime_epoch.load(std::memory_order_relaxed); }
bool thp_enabled();
double sample_budget();  // HM_SAMPLE_BUDGET: fraction of the run time the page sampler may cost
uint64_t retain_limit();
// An observer of the C API's allocations and frees (the profiler registers one); the alloc layer
// calls it without knowing what is above. `caller` is the return address into the application.
using AllocObserver = void (*)(const void *ptr, size_t size, bool is_free, const void *caller);
void set_alloc_observer(AllocObserver observer);
AllocObserver alloc_observer();
// The tier hm_malloc uses outside any hm_mode_push scope (HM_DEFAULT_ROLE).
int default_tier();

// The heap that owns ptr, or nullptr; *owner receives the slot record.
TierHeap *heap_for(const void *ptr, SlotOwner **owner);

}  // namespace hm
