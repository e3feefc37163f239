// The placement rules as the preload library reaches them: C functions exported from libhetmem.so
// (not part of the public API; hm_rules_check, which a user may call, is in hetmem.h).
#pragma once
#include <stddef.h>

#ifndef HM_HOOK_API
#define HM_HOOK_API extern "C" __attribute__((visibility("default")))
#endif

// Loads and installs placement rules; on error writes "FILE:LINE:COL: what" to error.
HM_HOOK_API int hm_rules_install(const char *path, char *error, size_t error_len);
// 0: the C library, 1: a tier (*tier), 2: huge pages, 3: an object class (*tier is the class).
HM_HOOK_API int hm_rules_decide(size_t size, const void *caller, int *tier);
// Lists on fd the class rules (a plan's sites) no allocation matched.
HM_HOOK_API void hm_rules_report_unused(int fd);
