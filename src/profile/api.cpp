// The profiler's C entry points, and the observer that records allocations made through the
// hetmem API itself.
#include "alloc/runtime.h"
#include "base/error.h"
#include "base/options.h"
#include "hetmem/hetmem.h"
#include "profile/hooks.h"
#include "profile/profiler.h"

namespace {

void observe(const void *ptr, size_t size, bool is_free, const void *caller) {
  if (is_free) {
    hm::profile::record(hm::trace::kFree, hm::trace::kHmApi, ptr, 0, caller);
    if (size >= hm::profile::large_threshold()) hm::profile::forget_large(ptr);
  } else {
    hm::profile::record(hm::trace::kAlloc, hm::trace::kHmApi, ptr, size, caller);
    if (size >= hm::profile::large_threshold()) hm::profile::note_large(ptr, size);
  }
}

}  // namespace

extern "C" {

int hm_profile_start(const char *path, int stack_depth, uint64_t large_threshold) {
  if (!path || !*path) return hm::fail(HM_EINVAL, "hm_profile_start: a trace path is needed");
  int rc = hm::runtime_ensure();
  if (rc != HM_OK) return rc;
  try {
    hm::profile::Options o;
    o.path = path;
    o.depth = stack_depth;
    o.large = large_threshold ? large_threshold : (1u << 20);
    if ((rc = hm::option_size(hm::Option::kProfileStackMin, &o.stack_min)) != HM_OK) return rc;
    if ((rc = hm::option_size(hm::Option::kProfileSample, &o.sample)) != HM_OK) return rc;
    rc = hm::profile::start(o);
  } catch (...) {
    return hm::fail(HM_ENOMEM, "hm_profile_start: out of memory");
  }
  if (rc == HM_OK) hm::set_alloc_observer(observe);
  return rc;
}

int hm_profile_stop(void) {
  hm::set_alloc_observer(nullptr);
  return hm::profile::stop();
}

int hm_profile_active(void) { return hm::profile::active() ? 1 : 0; }

int hm_profile_watch(void (*on_change)(int active)) {
  if (!on_change) return hm::fail(HM_EINVAL, "hm_profile_watch: no function given");
  return hm::profile::watch(on_change);
}

int hm_profile_site_name(const char *name) { return hm::profile::set_site_name(name); }

void hm_profile_record(int op, int fn, const void *ptr, size_t size, const void *caller) {
  hm::profile::record(static_cast<hm::trace::Op>(op), static_cast<hm::trace::Fn>(fn), ptr, size, caller);
}

void hm_profile_note_large(const void *ptr, size_t size) { hm::profile::note_large(ptr, size); }
void hm_profile_forget_large(const void *ptr) { hm::profile::forget_large(ptr); }
void hm_profile_after_fork(int follow) { hm::profile::after_fork_in_child(follow != 0); }
void hm_profile_before_exec(const char *program) { hm::profile::before_exec(program); }
void hm_profile_before_exit(void) { hm::profile::before_exit(); }

}  // extern "C"
