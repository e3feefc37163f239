// The profiler and the placement rules as the preload library reaches them: C functions exported
// from libhetmem.so (not part of the public API), so that the shim and the program share one core.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define HM_HOOK_API extern "C" __attribute__((visibility("default")))

HM_HOOK_API int hm_profile_active(void);
HM_HOOK_API void hm_profile_record(int op, int fn, const void *ptr, size_t size, const void *caller);
HM_HOOK_API void hm_profile_note_large(const void *ptr, size_t size);
HM_HOOK_API void hm_profile_forget_large(const void *ptr);
// In a fork child: drop the parent's buffers; follow != 0 starts the child's own trace.
HM_HOOK_API void hm_profile_after_fork(int follow);
// Before the process execs `program`: everything recorded so far is written out.
HM_HOOK_API void hm_profile_before_exec(const char *program);
// Before _exit: the trace is finished (end record) as at a normal exit.
HM_HOOK_API void hm_profile_before_exit(void);
// Loads and installs placement rules; on error writes "FILE:LINE:COL: what" to error.
HM_HOOK_API int hm_rules_install(const char *path, char *error, size_t error_len);
// Only checks a rules file (the `hetmem run` command does this before starting anything).
HM_HOOK_API int hm_rules_check(const char *path, char *error, size_t error_len);
// 0: the C library, 1: a tier (*tier), 2: huge pages, 3: an object class (*tier is the class).
HM_HOOK_API int hm_rules_decide(size_t size, const void *caller, int *tier);
// Lists on fd the class rules (a plan's sites) no allocation matched.
HM_HOOK_API void hm_rules_report_unused(int fd);
