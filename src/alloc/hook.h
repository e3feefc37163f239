// What the preload library and hetmem's libmemkind share with the allocation core (exported from
// libhetmem.so, not part of the public API).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "hetmem/hetmem.h"

extern "C" {
// Non-zero while the preload library handles a call on this thread: allocations the core makes
// then are the hook's own (not recorded twice, not hooked again).
extern __thread int hm_inside_hook __attribute__((visibility("default"), tls_model("initial-exec")));
// Depth of the calling thread's hm_mode_push stack (0: no scope open), read by the preload library
// on every allocation without a call (hm_mode_depth() returns it).
extern __thread int hm_modes_open __attribute__((visibility("default"), tls_model("initial-exec")));
__attribute__((visibility("default"))) int hm_mode_depth(void);
// The lowest address and the end of the highest range the allocator has owned so far (they only
// widen; UINTPTR_MAX and 0 before its first mapping): a pointer outside them is not hetmem's, so
// the preload library asks hm_owns only about the others. Read with relaxed atomic loads.
extern uintptr_t hm_owned_low __attribute__((visibility("default")));
extern uintptr_t hm_owned_high __attribute__((visibility("default")));
// Within the bounds of what hetmem's allocator ever owned (no call): the C library's memory mostly
// is not, so a free of it asks nothing more.
inline bool hm_within_owned_bounds(const void *p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return a >= __atomic_load_n(&hm_owned_low, __ATOMIC_RELAXED) && a < __atomic_load_n(&hm_owned_high, __ATOMIC_RELAXED);
}
// hetmem's memory: within those bounds and in the allocator's slot map (hm_owns is asked only
// about a pointer within them).
inline bool hm_is_hetmems(const void *p) { return hm_within_owned_bounds(p) && hm_owns(p) != 0; }
// hm_free for a pointer that may not be hetmem's: frees it and returns 1 if it is, returns 0 (and
// records no error) if not. One look-up of the slot map where hm_owns and hm_free take two.
__attribute__((visibility("default"))) int hm_free_if_owned(void *ptr);
// The `all -> TIER` rules' allocation: hm_tier_alloc(tier, size, 0, HM_PREFERRED), a small block
// straight from the thread's cache when called inside the hook (hm_inside_hook set).
__attribute__((visibility("default"))) void *hm_direct_alloc(int tier, size_t size);
// hm_free_if_owned, a small block straight back to the thread's cache when called inside the hook.
__attribute__((visibility("default"))) int hm_direct_free(void *ptr);
// hm_realloc of a block of hetmem's, a small block that outgrows its size class moved inside the
// thread's cache on its own tier when called inside the hook.
__attribute__((visibility("default"))) void *hm_direct_realloc(void *ptr, size_t size);
// Grows a block of the profiler's own (a guarded mapping) to `size` bytes by moving its pages, none
// copied (TierHeap::grow_guarded). The new address, or NULL when it cannot: the block is unchanged
// and the caller copies.
__attribute__((visibility("default"))) void *hm_grow_guarded(void *ptr, size_t size);
// Non-zero if hm_grow_guarded can grow this block (it can still fail on the budget or the mapping).
__attribute__((visibility("default"))) int hm_growable(const void *ptr);
}

namespace hm {
// Marks hetmem's own work on this thread (the profiler writing, a phase reading smaps): the C
// library calls it makes are not recorded as the program's, and never re-enter the profiler.
struct InternalScope {
  InternalScope() { ++hm_inside_hook; }
  ~InternalScope() { --hm_inside_hook; }
  InternalScope(const InternalScope &) = delete;
  InternalScope &operator=(const InternalScope &) = delete;
};
}  // namespace hm
