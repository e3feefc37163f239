// What the preload library shares with the allocation core (exported from libhetmem.so, not part
// of the public API).
#pragma once
#include <stddef.h>

extern "C" {
// Non-zero while the preload library handles a call on this thread: allocations the core makes
// then are the hook's own (not recorded twice, not hooked again).
extern __thread int hm_inside_hook __attribute__((visibility("default"), tls_model("initial-exec")));
// Depth of the calling thread's hm_mode_push stack (0: no scope open).
__attribute__((visibility("default"))) int hm_mode_depth(void);
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
