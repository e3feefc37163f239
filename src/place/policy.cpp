#include "place/policy.h"

namespace hm::place {
namespace {

int role_tier_or_none(hm_role_t role) {
  hm_tier_t t = -1;
  return hm_role_tier(role, &t) == HM_OK ? t : -1;
}

// NUMA first-touch: the fast tier until its budget is used up, in allocation order, then the
// capacity tier (the preferred placement's fallback, counted).
class FirstTouch final : public Policy {
 public:
  const char *name() const override { return "first-touch"; }
  const char *doc() const override { return "the fast tier until its budget is used up, in allocation order"; }
  Placement place(hm_class_kind_t, int, size_t) const override { return {role_tier_or_none(HM_FAST), HM_PREFERRED}; }
};

// The upper bound: everything on the fast tier, strictly, for a footprint that fits.
class AllFast final : public Policy {
 public:
  const char *name() const override { return "all-fast"; }
  const char *doc() const override { return "everything on the fast tier (the upper bound; the footprint must fit)"; }
  Placement place(hm_class_kind_t, int, size_t) const override { return {role_tier_or_none(HM_FAST), HM_STRICT}; }
};

// Seed 000's Optane-only baseline: everything on the capacity tier.
class SlowOnly final : public Policy {
 public:
  const char *name() const override { return "slow-only"; }
  const char *doc() const override { return "everything on the capacity tier"; }
  Placement place(hm_class_kind_t, int, size_t) const override {
    return {role_tier_or_none(HM_CAPACITY), HM_PREFERRED};
  }
};

const FirstTouch kFirstTouch;
const AllFast kAllFast;
const SlowOnly kSlowOnly;
const Policy *const kPolicies[] = {&kFirstTouch, &kAllFast, &kSlowOnly};

}  // namespace

const Policy *policy_find(const std::string &name) {
  for (const Policy *p : kPolicies)
    if (name == p->name()) return p;
  return nullptr;
}

std::string policy_names() {
  std::string out;
  for (const Policy *p : kPolicies) out += std::string(out.empty() ? "" : ", ") + p->name();
  return out;
}

}  // namespace hm::place
