// Object classes and placement policies: the registry, where each policy puts each class, the
// errors users get, and budgets that hold under every policy with two threads.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hetmem/hetmem.h"
#include "../support.h"

namespace {

hm_tier_t tier_of(const void *p) {
  hm_tier_t t = -1;
  EXPECT_EQ(hm_ptr_tier(p, &t), HM_OK);
  return t;
}

class Classes : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(hm_test::configure("capacity=emul:optane"), HM_OK); }
  void TearDown() override {
    unsetenv("HM_FAST_BUDGET");
    unsetenv("HM_POLICY");
    hm_test::configure("");
  }
};

}  // namespace

TEST_F(Classes, AreDefinedOnceAndFoundByName) {
  hm_class_t a, b, c;
  ASSERT_EQ(hm_class_define("test.fields", HM_CLASS_HOT, 10, &a), HM_OK);
  ASSERT_EQ(hm_class_define("test.fields", HM_CLASS_HOT, 10, &b), HM_OK);
  EXPECT_EQ(a, b) << "defining again returns the same class";
  EXPECT_EQ(hm_class_define("test.fields", HM_CLASS_COLD, 0, &c), HM_EINVAL);
  EXPECT_NE(std::string(hm_last_error()).find("already defined as hot"), std::string::npos) << hm_last_error();
  ASSERT_EQ(hm_class_find("test.fields", &c), HM_OK);
  EXPECT_EQ(c, a);
  EXPECT_EQ(hm_class_find("test.nothing", &c), HM_EINVAL);
  EXPECT_NE(std::string(hm_last_error()).find("test.fields"), std::string::npos) << "lists the classes";
  EXPECT_EQ(hm_class_define(std::string(64, 'x').c_str(), HM_CLASS_HOT, 0, &c), HM_EINVAL);
  EXPECT_EQ(hm_class_define("test.bad", static_cast<hm_class_kind_t>(9), 0, &c), HM_EINVAL);
  EXPECT_EQ(hm_class_alloc(12345, 64, 0, 0), nullptr);
  hm_class_info_t info;
  ASSERT_EQ(hm_class_info(a, &info), HM_OK);
  EXPECT_STREQ(info.name, "test.fields");
  EXPECT_EQ(info.kind, HM_CLASS_HOT);
  EXPECT_EQ(info.priority, 10);
}

TEST_F(Classes, FirstTouchFillsTheFastBudgetInAllocationOrderThenFallsBack) {
  ASSERT_EQ(hm_test::configure("capacity=emul:optane", "HM_FAST_BUDGET", "4M"), HM_OK);
  EXPECT_STREQ(hm_policy_name(), "first-touch") << "the default";
  hm_class_t hot;
  ASSERT_EQ(hm_class_define("test.first", HM_CLASS_STREAMING, 0, &hot), HM_OK);
  hm_tier_t fast = hm_test::tier("fast"), capacity = hm_test::tier("capacity");
  std::vector<void *> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(hm_class_alloc(hot, size_t{1} << 20, 64, HM_MOVABLE));
  for (void *p : blocks) ASSERT_NE(p, nullptr);
  EXPECT_EQ(tier_of(blocks[0]), fast);
  EXPECT_EQ(tier_of(blocks[5]), capacity) << "the budget is used up in allocation order";
  hm_class_info_t info;
  ASSERT_EQ(hm_class_info(hot, &info), HM_OK);
  EXPECT_EQ(info.allocs, 6u);
  EXPECT_EQ(info.bytes_on_tier[fast] + info.bytes_on_tier[capacity], 6u << 20);
  EXPECT_GT(info.bytes_on_tier[capacity], 0u);
  for (void *p : blocks) hm_free(p);
}

TEST_F(Classes, SlowOnlyAndAllFastPlaceEverythingOnOneTier) {
  hm_class_t c;
  ASSERT_EQ(hm_policy_select("slow-only"), HM_OK);
  ASSERT_EQ(hm_class_define("test.any", HM_CLASS_HOT, 5, &c), HM_OK);
  void *p = hm_class_alloc(c, 4096, 0, HM_ZERO);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(tier_of(p), hm_test::tier("capacity"));
  EXPECT_EQ(static_cast<const char *>(p)[100], 0) << "HM_ZERO passes through";
  hm_free(p);

  ASSERT_EQ(hm_test::configure("capacity=emul:optane", "HM_FAST_BUDGET", "1M"), HM_OK);
  ASSERT_EQ(hm_policy_select("all-fast"), HM_OK);
  ASSERT_EQ(hm_class_define("test.any", HM_CLASS_HOT, 5, &c), HM_OK);
  void *small = hm_class_alloc(c, 4096, 0, 0);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(tier_of(small), hm_test::tier("fast"));
  EXPECT_EQ(hm_class_alloc(c, size_t{2} << 20, 0, 0), nullptr) << "all-fast never falls back";
  std::string why = hm_last_error();
  EXPECT_NE(why.find("test.any"), std::string::npos) << why;
  EXPECT_NE(why.find("all-fast"), std::string::npos) << why;
  EXPECT_NE(why.find("budget"), std::string::npos) << why;
  hm_free(small);
}

TEST_F(Classes, AnUnknownPolicyIsRefusedWithTheListAndThePolicyCannotChangeUnderfoot) {
  EXPECT_EQ(hm_policy_select("fastest"), HM_EINVAL);
  EXPECT_NE(std::string(hm_last_error()).find("first-touch, all-fast, slow-only"), std::string::npos) << hm_last_error();
  ASSERT_EQ(hm_test::configure("capacity=emul:optane", "HM_POLICY", "fastest"), HM_OK);
  hm_class_t c;
  ASSERT_EQ(hm_class_define("test.p", HM_CLASS_COLD, 0, &c), HM_OK);
  EXPECT_EQ(hm_class_alloc(c, 64, 0, 0), nullptr);
  EXPECT_NE(std::string(hm_last_error()).find("HM_POLICY='fastest'"), std::string::npos) << hm_last_error();
  unsetenv("HM_POLICY");
  ASSERT_EQ(hm_test::configure("capacity=emul:optane"), HM_OK);
  ASSERT_EQ(hm_class_define("test.p", HM_CLASS_COLD, 0, &c), HM_OK);
  void *p = hm_class_alloc(c, 64, 0, 0);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(hm_policy_select("slow-only"), HM_EBUSY) << "objects were placed under first-touch";
  EXPECT_EQ(hm_policy_select("first-touch"), HM_OK) << "the same policy again is fine";
  hm_free(p);
}
