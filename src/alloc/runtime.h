// The allocation runtime: one heap per tier, huge-page pools, and process-wide settings.
#pragma once
#include <atomic>
#include <cstdint>

#include "alloc/heap.h"
#include "hetmem/hetmem.h"
#include "alloc/settings.h"

namespace hm {

// Initialises options, tiers and heaps once; returns HM_OK or the failure recorded at the first
// attempt (every later call returns the same code and message). A failure is printed to standard
// error unless `caller_reports` (hm_init, whose caller has the message in hm_last_error()): an
// implicit first use has nobody else to say it. Inline: every allocation asks, and once started
// the answer is one load.
extern std::atomic<int> g_runtime_state;  // 0: not initialised, 1: ready, 2: failed
int runtime_start(bool caller_reports);
inline int runtime_ensure(bool caller_reports = false) {
  if (__builtin_expect(g_runtime_state.load(std::memory_order_acquire) == 1, 1)) return HM_OK;
  return runtime_start(caller_reports);
}
void runtime_finalize();
// An observer of the C API's allocations and frees (the profiler registers one); the alloc layer
// calls it without knowing what is above. `caller` is the return address into the application.
using AllocObserver = void (*)(const void *ptr, size_t size, bool is_free, const void *caller);
void set_alloc_observer(AllocObserver observer);
AllocObserver alloc_observer();
// Layers above keep records of some allocations (the placement runtime's objects of a class).
// mark_tracked(ptr) flags the allocation's record; frees and reallocations of memory in a flagged
// record call the release observer with the block before it is released, so the records stay
// exact without a lookup on every free.
using ReleaseObserver = void (*)(void *ptr, size_t usable);
void set_release_observer(ReleaseObserver observer);
void mark_tracked(const void *ptr);
void notify_release(void *ptr, SlotOwner *owner);
// Sections that layers above add to hm_stats_print (the placement runtime's spaces).
using StatsSection = void (*)(int fd);
void add_stats_section(StatsSection section);
void print_stats_sections(int fd);
// Arenas for a class (hm_arena_create_class) take their chunks from the layer that places classes.
using ClassChunkAlloc = void *(*)(int cls, size_t size, size_t align, unsigned flags);
void set_class_chunk_alloc(ClassChunkAlloc alloc);
ClassChunkAlloc class_chunk_alloc();
// Moves the pages [tail_offset, end) of the allocation at ptr (its own mapping) to `tier`, keeping
// the address (TierHeap::split_to); the placement runtime's boundary split and class interleave.
int alloc_split(void *ptr, int tier, size_t tail_offset);
// The tier hm_malloc uses outside any hm_mode_push scope (HM_DEFAULT_ROLE).
int default_tier();

// The heap that owns ptr, or nullptr; *owner receives the slot record.
inline TierHeap *heap_for(const void *ptr, SlotOwner **owner) {
  SlotOwner *o = slot_map().get(ptr);
  if (!o) return nullptr;
  *owner = o;
  return heap_of(o->tier);
}

}  // namespace hm
