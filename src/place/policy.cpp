// The policy registry and the policy of each initialisation of the library: the table of built-in
// policies, the list of mechanisms, and activation (the mechanisms reset, then the policy's own
// activated) before the first object is placed.
#include "place/policy.h"

#include <algorithm>
#include <array>
#include <mutex>

#include "alloc/runtime.h"
#include "base/error.h"
#include "base/options.h"
#include "place/objects.h"
#include "place/spaces.h"

namespace hm::place {

// The built-in policies, one row each, in the order `hetmem policies` lists them (`hetmem compare`
// runs all-fast first, then the others in this order). A row NAME is the function
// `const Policy &NAME_policy()` that the policy's own file defines: nothing else to declare.
#define HM_BUILTIN_POLICIES(ROW) \
  ROW(first_touch)               \
  ROW(all_fast)                  \
  ROW(slow_only)                 \
  ROW(memory_mode)               \
  ROW(interleave)                \
  ROW(hetmem_static)             \
  ROW(hetmem_static_prefetch)    \
  ROW(hetmem)                    \
  ROW(reactive)

#define HM_DECLARE_POLICY(name) const Policy &name##_policy();
HM_BUILTIN_POLICIES(HM_DECLARE_POLICY)
#undef HM_DECLARE_POLICY
// The mechanism every policy has: wall and CPU time per iteration for the run summary (summary.cpp).
Mechanism &iteration_clock_mechanism();

namespace {

// Made at the first use, not when the library is loaded: a process that places nothing (each of
// a build's programs under the preload library) never constructs a policy.
#define HM_COUNT_ROW(name) +1
using BuiltinPolicies = std::array<const Policy *, 0 HM_BUILTIN_POLICIES(HM_COUNT_ROW)>;
#undef HM_COUNT_ROW
const BuiltinPolicies &builtin_policies() {
#define HM_POLICY_ROW(name) &name##_policy(),
  static const BuiltinPolicies table = {HM_BUILTIN_POLICIES(HM_POLICY_ROW)};
#undef HM_POLICY_ROW
  return table;
}

std::mutex g_mutex;           // the choice and activation of the policy
std::mutex g_registry_mutex;  // policy_register's list
std::vector<const Policy *> g_registered;  // policy_register's, after the table
// The policy holds for one initialisation of the library (hm_finalize starts another).
std::atomic<const Policy *> g_policy{nullptr};
std::atomic<uint64_t> g_policy_epoch{~uint64_t{0}};
std::atomic<bool> g_used{false};  // an object was placed under the policy
std::atomic<uint64_t> g_activated_epoch{~uint64_t{0}};

}  // namespace

bool Mechanism::active() const {
  return active_epoch_.load(std::memory_order_acquire) == runtime_epoch();
}

void mechanism_set_active(Mechanism &m, bool on) {
  m.active_epoch_.store(on ? runtime_epoch() : ~uint64_t{0}, std::memory_order_release);
}

std::vector<Mechanism *> all_mechanisms() {
  // The iteration clock runs under every policy; the others are the ones some policy names, so a
  // policy that brings a mechanism of its own brings it here too.
  std::vector<Mechanism *> out{&iteration_clock_mechanism()};
  for (const Policy *p : policies())
    for (Mechanism *m : p->mechanisms())
      if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  return out;
}

std::vector<const Policy *> policies() {
  std::vector<const Policy *> out(builtin_policies().begin(), builtin_policies().end());
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  out.insert(out.end(), g_registered.begin(), g_registered.end());
  return out;
}

const Policy *policy_find(const std::string &name) {
  for (const Policy *p : policies())
    if (name == p->name()) return p;
  return nullptr;
}

std::string policy_names() {
  std::string out;
  for (const Policy *p : policies()) out += std::string(out.empty() ? "" : ", ") + p->name();
  return out;
}

int policy_register(const Policy *policy) {
  if (!policy || !policy->name() || !*policy->name()) return fail(HM_EINVAL, "policy_register: a policy needs a name");
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  auto taken = [&](const Policy *p) { return std::string(p->name()) == policy->name(); };
  if (std::any_of(builtin_policies().begin(), builtin_policies().end(), taken) ||
      std::any_of(g_registered.begin(), g_registered.end(), taken))
    return fail(HM_EINVAL, "policy_register: '%s' is already a policy", policy->name());
  g_registered.push_back(policy);
  return HM_OK;
}

const Policy *chosen_policy(int *rc) {
  if ((*rc = hm_init()) != HM_OK) return nullptr;
  const Policy *p = g_policy.load(std::memory_order_acquire);
  if (p && g_policy_epoch.load(std::memory_order_acquire) == runtime_epoch()) return p;
  const std::string &name = option_text(Option::kPolicy);
  std::string chosen = name.empty() ? option_default(Option::kPolicy) : name;
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

namespace {

// Before the first placement of an initialisation: a fresh record of objects and spaces, every
// mechanism forgets the last initialisation, then the policy and the mechanisms it names set up.
int activate(const Policy *p) {
  if (g_activated_epoch.load(std::memory_order_acquire) == runtime_epoch()) return HM_OK;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_activated_epoch.load() == runtime_epoch()) return HM_OK;
  std::string why;
  int rc = p->activate(&why);
  if (rc != HM_OK) return fail(rc, "%s", why.c_str());
  objects_reset();
  spaces().reset();
  objects_install();
  for (Mechanism *m : all_mechanisms()) {
    mechanism_set_active(*m, false);
    m->reset();
  }
  for (Mechanism *m : p->mechanisms()) {
    if ((rc = m->activate(&why)) != HM_OK) return fail(rc, "%s", why.c_str());
    mechanism_set_active(*m, true);
  }
  g_activated_epoch.store(runtime_epoch(), std::memory_order_release);
  return HM_OK;
}

}  // namespace

const Policy *placing_policy(int *rc) {
  const Policy *p = chosen_policy(rc);
  if (!p) return nullptr;
  if ((*rc = activate(p)) != HM_OK) return nullptr;
  return p;
}

const Policy *active_policy() {
  if (g_activated_epoch.load(std::memory_order_acquire) != runtime_epoch()) return nullptr;
  return g_policy.load(std::memory_order_acquire);
}

void policy_mark_used() { g_used.store(true, std::memory_order_relaxed); }

int policy_select(const Policy *p) {
  int rc = HM_OK;
  const Policy *current = chosen_policy(&rc);
  if (!current && rc != HM_EINVAL) return rc;  // an unknown HM_POLICY is overridden here
  std::lock_guard<std::mutex> lock(g_mutex);
  if (current && current != p && g_used.load())
    return fail(HM_EBUSY, "hm_policy_select('%s'): objects were already placed under policy %s", p->name(),
                current->name());
  if (current && current != p && g_activated_epoch.load() == runtime_epoch()) {
    // Activated for the other policy but nothing placed: undo its mechanisms' set-up.
    for (Mechanism *m : current->mechanisms()) {
      m->deactivate();
      mechanism_set_active(*m, false);
    }
    g_activated_epoch.store(~uint64_t{0}, std::memory_order_release);
  }
  g_policy.store(p, std::memory_order_release);
  g_policy_epoch.store(runtime_epoch(), std::memory_order_release);
  return HM_OK;
}

}  // namespace hm::place

using namespace hm::place;

extern "C" {

const char *hm_policy_name(void) {
  int rc = HM_OK;
  const Policy *p = chosen_policy(&rc);
  return p ? p->name() : "(none: HM_POLICY is not a policy)";
}

int hm_policy_count(void) { return static_cast<int>(policies().size()); }

int hm_policy_info(int index, const char **name, const char **doc) {
  const std::vector<const Policy *> all = policies();
  if (!name || !doc || index < 0 || index >= static_cast<int>(all.size()))
    return hm::fail(HM_EINVAL, "hm_policy_info: %d is not a policy index (0..%zu)", index, all.size() - 1);
  *name = all[static_cast<size_t>(index)]->name();
  *doc = all[static_cast<size_t>(index)]->doc();
  return HM_OK;
}

int hm_policy_select(const char *name) {
  if (!name) return hm::fail(HM_EINVAL, "hm_policy_select: name is NULL");
  const Policy *p = policy_find(name);
  if (!p) return hm::fail(HM_EINVAL, "'%s' is not a policy (policies: %s)", name, policy_names().c_str());
  return policy_select(p);
}

}  // extern "C"
