#include <gtest/gtest.h>

#include "hetmem/hetmem.h"
#include "place/rules.h"
#include "../support.h"

using hm::place::Rule;

TEST(Rules, ParsesEveryForm) {
  std::vector<Rule> rules;
  std::string error;
  ASSERT_EQ(hm::place::parse_rules("# placement\n"
                                   "size >= 2M -> huge\n"
                                   "size < 4096 -> libc   # small stays\n"
                                   "function push_ -> capacity\n"
                                   "site ./pic+0x4f2a -> emul:optane\n"
                                   "\n"
                                   "all -> fast\n",
                                   "r.txt", &rules, &error),
            HM_OK)
      << error;
  ASSERT_EQ(rules.size(), 5u);
  EXPECT_EQ(rules[0].kind, Rule::kSizeAtLeast);
  EXPECT_EQ(rules[0].size, 2u << 20);
  EXPECT_EQ(rules[0].target, Rule::kHuge);
  EXPECT_EQ(rules[1].kind, Rule::kSizeBelow);
  EXPECT_EQ(rules[1].target, Rule::kLibc);
  EXPECT_EQ(rules[2].kind, Rule::kFunction);
  EXPECT_EQ(rules[2].text, "push_");
  EXPECT_EQ(rules[3].kind, Rule::kSite);
  EXPECT_EQ(rules[3].text, "./pic");
  EXPECT_EQ(rules[3].offset, 0x4f2au);
  EXPECT_EQ(rules[3].target_name, "emul:optane");
  EXPECT_EQ(rules[4].kind, Rule::kAll);
  EXPECT_EQ(rules[4].line, 7);
}

TEST(Rules, ErrorsGiveFileLineColumn) {
  std::vector<Rule> rules;
  std::string error;
  EXPECT_EQ(hm::place::parse_rules("all -> fast\n  size >= 2X -> fast\n", "r.txt", &rules, &error), HM_EFORMAT);
  EXPECT_EQ(error.rfind("r.txt:2:11: expected a size", 0), 0u) << error;
  EXPECT_EQ(hm::place::parse_rules("site nowhere -> fast\n", "r.txt", &rules, &error), HM_EFORMAT);
  EXPECT_EQ(error.rfind("r.txt:1:6: expected MODULE+0xOFFSET", 0), 0u) << error;
  EXPECT_EQ(hm::place::parse_rules("all -> fast slow\n", "r.txt", &rules, &error), HM_EFORMAT);
  EXPECT_EQ(error.rfind("r.txt:1:13: unexpected 'slow'", 0), 0u) << error;
}

TEST(Rules, DecideFirstMatchWins) {
  ASSERT_EQ(hm_test::configure("capacity=emul:cxl"), HM_OK);
  std::string path = hm_test::temp_path("decide.rules");
  {
    FILE *f = std::fopen(path.c_str(), "w");
    std::fputs("size >= 64M -> capacity\nsize >= 1M -> fast\nsize >= 512K -> huge\n", f);
    std::fclose(f);
  }
  std::vector<Rule> rules;
  std::string error;
  ASSERT_EQ(hm::place::load_rules(path, &rules, &error), HM_OK) << error;
  hm::place::install(rules);
  auto d = hm::place::decide(size_t{100} << 20, nullptr);
  EXPECT_EQ(d.target, Rule::kTier);
  EXPECT_EQ(d.tier, hm_test::tier("capacity"));
  d = hm::place::decide(size_t{2} << 20, nullptr);
  EXPECT_EQ(d.tier, hm_test::tier("fast"));
  EXPECT_EQ(hm::place::decide(size_t{600} << 10, nullptr).target, Rule::kHuge);
  EXPECT_EQ(hm::place::decide(100, nullptr).target, Rule::kLibc);
  unlink(path.c_str());
}
