// A policy defined outside the library's table, with a mechanism of its own, registered at run
// time: the class and one registration are all it takes. It places, its mechanism is reset and
// activated with it, adds its part to the run summary, and is undone when the program switches
// policy before placing anything.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "hetmem/hetmem.h"
#include "place/policy.h"
#include "../support.h"

namespace {

using hm::place::Mechanism;
using hm::place::Placement;
using hm::place::Policy;
using hm::place::Request;

class Counting final : public Mechanism {
 public:
  const char *name() const override { return "test-counting"; }
  void reset() override { ++resets; }
  int activate(std::string *) override {
    ++activations;
    return HM_OK;
  }
  void deactivate() override { ++deactivations; }
  void summarise(nlohmann::json &placement) const override { placement["test_counting"] = activations; }
  int resets = 0, activations = 0, deactivations = 0;
};

Counting g_counting;

// Hot objects on the fast tier, everything else on the capacity tier.
class HotOnlyFast final : public Policy {
 public:
  const char *name() const override { return "test-hot-only-fast"; }
  const char *doc() const override { return "hot classes fast, the rest on the capacity tier"; }
  Placement place(const Request &r) const override {
    return r.kind == HM_CLASS_HOT ? Placement{hm::place::fast_tier(), HM_PREFERRED}
                                  : Placement{hm::place::capacity_tier(), HM_PREFERRED};
  }
  std::vector<Mechanism *> mechanisms() const override { return {&g_counting}; }
};

const HotOnlyFast g_policy;

hm_tier_t tier_of(const void *p) {
  hm_tier_t t = -1;
  EXPECT_EQ(hm_ptr_tier(p, &t), HM_OK);
  return t;
}

}  // namespace

TEST(PolicyExtension, ARegisteredPolicyPlacesAndItsMechanismFollowsTheLifecycle) {
  ASSERT_EQ(hm_test::configure("capacity=emul:optane"), HM_OK);
  ASSERT_EQ(hm::place::policy_register(&g_policy), HM_OK);
  EXPECT_EQ(hm::place::policy_register(&g_policy), HM_EINVAL) << "a name is registered once";
  EXPECT_NE(hm::place::policy_names().find("test-hot-only-fast"), std::string::npos);

  ASSERT_EQ(hm_policy_select("test-hot-only-fast"), HM_OK) << hm_last_error();
  hm_class_t hot, cold;
  ASSERT_EQ(hm_class_define("ext.hot", HM_CLASS_HOT, 1, &hot), HM_OK);
  ASSERT_EQ(hm_class_define("ext.cold", HM_CLASS_COLD, 0, &cold), HM_OK);
  hm_tier_t fast = -1, cap = -1;
  ASSERT_EQ(hm_role_tier(HM_FAST, &fast), HM_OK);
  ASSERT_EQ(hm_role_tier(HM_CAPACITY, &cap), HM_OK);
  void *a = hm_class_alloc(hot, 1 << 20, 64, 0);
  void *b = hm_class_alloc(cold, 1 << 20, 64, 0);
  ASSERT_TRUE(a && b) << hm_last_error();
  EXPECT_EQ(tier_of(a), fast);
  EXPECT_EQ(tier_of(b), cap);
  EXPECT_EQ(g_counting.activations, 1) << "activated once per initialisation, not per allocation";
  EXPECT_GE(g_counting.resets, 1);
  EXPECT_TRUE(g_counting.active());

  const std::string path = hm_test::temp_path("extension-summary.json");
  ASSERT_EQ(hm_summary_write(path.c_str(), nullptr), HM_OK) << hm_last_error();
  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::remove(path.c_str());
  EXPECT_EQ(doc["placement"]["policy"], "test-hot-only-fast");
  EXPECT_EQ(doc["placement"]["test_counting"], 1) << "the mechanism's own part of the summary";
  hm_free(a);
  hm_free(b);

  // A new initialisation under another policy: reset again, not active.
  const int resets = g_counting.resets;
  ASSERT_EQ(hm_test::configure("capacity=emul:optane"), HM_OK);
  ASSERT_EQ(hm_policy_select("first-touch"), HM_OK);
  void *c = hm_class_alloc(cold, 4096, 64, 0);
  ASSERT_TRUE(c);
  EXPECT_GT(g_counting.resets, resets);
  EXPECT_FALSE(g_counting.active());
  hm_free(c);

  // Chosen and activated, then replaced before any object was placed: its set-up is undone.
  ASSERT_EQ(hm_test::configure("capacity=emul:optane"), HM_OK);
  ASSERT_EQ(hm_policy_select("test-hot-only-fast"), HM_OK);
  hm_tier_t where = -1;
  ASSERT_EQ(hm_class_tier(hot, &where), HM_OK);  // activates without placing
  EXPECT_TRUE(g_counting.active());
  ASSERT_EQ(hm_policy_select("first-touch"), HM_OK) << hm_last_error();
  EXPECT_EQ(g_counting.deactivations, 1);
  EXPECT_FALSE(g_counting.active());
  hm_test::configure("");
}
