// The placement rules as the preload library reaches them: C functions exported from libhetmem.so
// (not part of the public API; hm_rules_check, which a user may call, is in hetmem.h).
#pragma once
#include <stddef.h>

#ifndef HM_HOOK_API
#define HM_HOOK_API extern "C" __attribute__((visibility("default")))
#endif

// Loads and installs placement rules; on error writes "FILE:LINE:COL: what" to error.
HM_HOOK_API int hm_rules_install(const char *path, char *error, size_t error_len);
// Where the rules send one allocation.
typedef enum hm_rules_target {
  HM_RULES_LIBC = 0,   // no rule matched, or `-> libc`: the C library
  HM_RULES_TIER = 1,   // a tier or role: *tier is the tier
  HM_RULES_HUGE = 2,   // huge pages on the fast tier
  HM_RULES_CLASS = 3,  // a plan's object class, placed by the policy: *tier is the class
} hm_rules_target_t;
HM_HOOK_API hm_rules_target_t hm_rules_decide(size_t size, const void *caller, int *tier);
// 1 when every allocation gets the same decision (hm::place::uniform), in *target and *tier: the
// preload library then asks hm_rules_decide nothing.
HM_HOOK_API int hm_rules_uniform(hm_rules_target_t *target, int *tier);
// hm::place::placed_from: allocations smaller than this go to the C library, whatever their call
// site, without asking hm_rules_decide.
HM_HOOK_API size_t hm_rules_placed_from(void);
// Forgets the per-call-site answers for call sites no longer in a loaded object (the preload
// library calls it when a module was unloaded).
HM_HOOK_API void hm_rules_forget_sites(void);
// Lists on fd the class rules (a plan's sites) that placed nothing: no allocation of HM_CLASS_MIN
// bytes or more matched them.
HM_HOOK_API void hm_rules_report_unused(int fd);
