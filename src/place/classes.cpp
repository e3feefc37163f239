// Object classes (hm_class_*) and the choice of policy (hm_policy_*): the registry the C++ named
// allocators, the Fortran module and the PIC code allocate through, and the per-class record of
// where the active policy put each byte.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "alloc/runtime.h"
#include "base/error.h"
#include "base/options.h"
#include "hetmem/hetmem.h"
#include "place/policy.h"

namespace hm::place {
namespace {

constexpr int kMaxClasses = 256;
constexpr int kTierSlots = 16;

struct ClassRecord {
  char name[64] = {};
  hm_class_kind_t kind = HM_CLASS_COLD;
  int priority = 0;
  std::atomic<uint64_t> allocs{0}, bytes{0};
  std::atomic<uint64_t> bytes_on_tier[kTierSlots] = {};
};

const char *const kKindNames[HM_CLASS_KIND_COUNT] = {"metadata", "temporary", "hot", "streaming", "cold"};

std::mutex g_mutex;
ClassRecord g_classes[kMaxClasses];
std::atomic<int> g_count{0};
// The policy holds for one initialisation of the library (hm_finalize starts another).
std::atomic<const Policy *> g_policy{nullptr};
std::atomic<uint64_t> g_policy_epoch{~uint64_t{0}};
std::atomic<bool> g_used{false};  // a class allocation was made under the policy

// The active policy: HM_POLICY on first use (an unknown name fails every class call with a message
// that lists the policies), or hm_policy_select's.
const Policy *active(int *rc) {
  if ((*rc = hm_init()) != HM_OK) return nullptr;
  const Policy *p = g_policy.load(std::memory_order_acquire);
  if (p && g_policy_epoch.load(std::memory_order_acquire) == runtime_epoch()) return p;
  const std::string *name = option_text("HM_POLICY");
  std::string chosen = name && !name->empty() ? *name : "first-touch";
  p = policy_find(chosen);
  if (!p) {
    *rc = fail(HM_EINVAL, "HM_POLICY='%s': unknown policy (policies: %s)", chosen.c_str(), policy_names().c_str());
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_policy_epoch.load() != runtime_epoch()) {
    g_policy.store(p, std::memory_order_release);
    g_used.store(false);
    g_policy_epoch.store(runtime_epoch(), std::memory_order_release);
  }
  return g_policy.load(std::memory_order_acquire);
}

std::string class_names() {
  std::string out;
  for (int i = 0; i < g_count.load(); ++i) out += std::string(out.empty() ? "" : ", ") + g_classes[i].name;
  return out.empty() ? "none defined" : out;
}

}  // namespace
}  // namespace hm::place

using namespace hm;
using namespace hm::place;

extern "C" {

int hm_class_define(const char *name, hm_class_kind_t kind, int priority, hm_class_t *cls) {
  if (!name || !*name || !cls) return fail(HM_EINVAL, "hm_class_define: a class needs a name and an out-parameter");
  if (std::strlen(name) >= sizeof(ClassRecord{}.name))
    return fail(HM_EINVAL, "hm_class_define: the name '%s' is longer than 63 bytes", name);
  if (kind < 0 || kind >= HM_CLASS_KIND_COUNT)
    return fail(HM_EINVAL, "hm_class_define('%s'): kind %d is not one of metadata, temporary, hot, streaming, cold",
                name, static_cast<int>(kind));
  std::lock_guard<std::mutex> lock(g_mutex);
  int n = g_count.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i)
    if (std::strcmp(g_classes[i].name, name) == 0) {
      if (g_classes[i].kind != kind)
        return fail(HM_EINVAL, "hm_class_define('%s'): already defined as %s, not %s", name,
                    kKindNames[g_classes[i].kind], kKindNames[kind]);
      *cls = i;
      return HM_OK;
    }
  if (n == kMaxClasses) return fail(HM_EINVAL, "hm_class_define('%s'): more than %d classes", name, kMaxClasses);
  ClassRecord &c = g_classes[n];
  std::snprintf(c.name, sizeof c.name, "%s", name);
  c.kind = kind;
  c.priority = priority;
  g_count.store(n + 1, std::memory_order_release);
  *cls = n;
  return HM_OK;
}

int hm_class_find(const char *name, hm_class_t *cls) {
  if (!name || !cls) return fail(HM_EINVAL, "hm_class_find: NULL argument");
  for (int i = 0; i < g_count.load(std::memory_order_acquire); ++i)
    if (std::strcmp(g_classes[i].name, name) == 0) {
      *cls = i;
      return HM_OK;
    }
  return fail(HM_EINVAL, "no class named '%s' (classes: %s)", name, class_names().c_str());
}

void *hm_class_alloc(hm_class_t cls, size_t size, size_t align, unsigned flags) {
  int rc = HM_OK;
  const Policy *policy = active(&rc);
  if (!policy) return nullptr;
  if (cls < 0 || cls >= g_count.load(std::memory_order_acquire))
    return fail_null(HM_EINVAL, "hm_class_alloc: %d is not a defined class", cls);
  ClassRecord &c = g_classes[cls];
  Placement where = policy->place(c.kind, c.priority, size);
  if (where.tier < 0)
    return fail_null(HM_ENOTIER, "class '%s' under policy %s: no tier has the role the policy asks for", c.name,
                     policy->name());
  g_used.store(true, std::memory_order_relaxed);
  void *p = hm_tier_alloc(where.tier, size, align, (flags & ~HM_STRICT) | where.flags);
  if (!p) {
    std::string why = hm_last_error();
    int code = hm_last_error_code();
    return fail_null(code, "class '%s' (%s) under policy %s: %s", c.name, kKindNames[c.kind], policy->name(),
                     why.c_str());
  }
  hm_tier_t got = where.tier;
  hm_ptr_tier(p, &got);
  c.allocs.fetch_add(1, std::memory_order_relaxed);
  c.bytes.fetch_add(size, std::memory_order_relaxed);
  if (got >= 0 && got < kTierSlots) c.bytes_on_tier[got].fetch_add(size, std::memory_order_relaxed);
  return p;
}

int hm_class_tier(hm_class_t cls, hm_tier_t *tier) {
  int rc = HM_OK;
  const Policy *policy = active(&rc);
  if (!policy) return rc;
  if (!tier || cls < 0 || cls >= g_count.load(std::memory_order_acquire))
    return fail(HM_EINVAL, "hm_class_tier: %d is not a defined class (or tier is NULL)", cls);
  Placement where = policy->place(g_classes[cls].kind, g_classes[cls].priority, 0);
  if (where.tier < 0)
    return fail(HM_ENOTIER, "class '%s' under policy %s: no tier has the role the policy asks for",
                g_classes[cls].name, policy->name());
  *tier = where.tier;
  return HM_OK;
}

int hm_class_count(void) { return g_count.load(std::memory_order_acquire); }

int hm_class_info(hm_class_t cls, hm_class_info_t *info) {
  if (!info) return fail(HM_EINVAL, "hm_class_info: info is NULL");
  if (cls < 0 || cls >= g_count.load(std::memory_order_acquire))
    return fail(HM_EINVAL, "hm_class_info: %d is not a defined class", cls);
  const ClassRecord &c = g_classes[cls];
  *info = hm_class_info_t{};
  std::snprintf(info->name, sizeof info->name, "%s", c.name);
  info->kind = c.kind;
  info->priority = c.priority;
  info->allocs = c.allocs.load();
  info->bytes = c.bytes.load();
  for (int t = 0; t < kTierSlots; ++t) info->bytes_on_tier[t] = c.bytes_on_tier[t].load();
  return HM_OK;
}

const char *hm_policy_name(void) {
  int rc = HM_OK;
  const Policy *p = active(&rc);
  return p ? p->name() : "(none: HM_POLICY is not a policy)";
}

int hm_policy_select(const char *name) {
  if (!name) return fail(HM_EINVAL, "hm_policy_select: name is NULL");
  const Policy *p = policy_find(name);
  if (!p) return fail(HM_EINVAL, "'%s' is not a policy (policies: %s)", name, policy_names().c_str());
  int rc = HM_OK;
  const Policy *current = active(&rc);
  if (!current && rc != HM_EINVAL) return rc;  // an unknown HM_POLICY is overridden here
  std::lock_guard<std::mutex> lock(g_mutex);
  if (current && current != p && g_used.load())
    return fail(HM_EBUSY, "hm_policy_select('%s'): objects were already placed under policy %s", name,
                current->name());
  g_policy.store(p, std::memory_order_release);
  g_policy_epoch.store(runtime_epoch(), std::memory_order_release);
  return HM_OK;
}

}  // extern "C"
