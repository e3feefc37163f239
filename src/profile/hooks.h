// The profiler as the preload library reaches it: C functions exported from libhetmem.so (not part
// of the public API), so that the shim and the program share one core. The placement rules' are in
// place/hooks.h.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifndef HM_HOOK_API
#define HM_HOOK_API extern "C" __attribute__((visibility("default")))
#endif

HM_HOOK_API void hm_profile_record(int op, int fn, const void *ptr, size_t size, const void *caller);
HM_HOOK_API void hm_profile_note_large(const void *ptr, size_t size);
HM_HOOK_API void hm_profile_forget_large(const void *ptr);
// In a fork child: drop the parent's buffers; follow != 0 starts the child's own trace.
HM_HOOK_API void hm_profile_after_fork(int follow);
// Before the process execs `program`: everything recorded so far is written out.
HM_HOOK_API void hm_profile_before_exec(const char *program);
// Before _exit: the trace is finished (end record) as at a normal exit.
HM_HOOK_API void hm_profile_before_exit(void);
