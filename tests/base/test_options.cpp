#include <gtest/gtest.h>

#include <cmath>

#include "base/options.h"
#include "hetmem/hetmem.h"
#include "../support.h"

using namespace hm;

TEST(Options, ParseSizes) {
  struct Case {
    const char *text;
    uint64_t bytes;
  } cases[] = {{"0", 0}, {"4096", 4096}, {"4K", 4096}, {"2M", 2u << 20}, {"2G", 2ull << 30},
               {"1.5G", 3ull << 29}, {"512MiB", 512ull << 20}, {"1gb", 1ull << 30}, {"3T", 3ull << 40},
               {" 8M ", 8u << 20}};
  for (const auto &c : cases) {
    uint64_t b = 1;
    std::string err;
    EXPECT_TRUE(parse_size(c.text, &b, &err)) << c.text << ": " << err;
    EXPECT_EQ(b, c.bytes) << c.text;
  }
}

TEST(Options, RejectMalformedSizes) {
  for (const char *text : {"", "G", "two", "2X", "-1G", "1..2", "2 GG"}) {
    uint64_t b = 0;
    std::string err;
    EXPECT_FALSE(parse_size(text, &b, &err)) << text;
    EXPECT_FALSE(err.empty());
  }
}

TEST(Options, MalformedBudgetFailsInitNamingTheVariable) {
  EXPECT_EQ(hm_test::configure("", "HM_FAST_BUDGET", "2 apples"), HM_EFORMAT);
  std::string msg = hm_last_error();
  EXPECT_NE(msg.find("HM_FAST_BUDGET"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 apples"), std::string::npos) << msg;
  // Every later call fails the same way instead of returning a silent NULL.
  EXPECT_EQ(hm_malloc(16), nullptr);
  EXPECT_EQ(hm_last_error_code(), HM_EINIT);
  EXPECT_NE(std::string(hm_last_error()).find("HM_FAST_BUDGET"), std::string::npos);
  ASSERT_EQ(hm_test::configure(""), HM_OK);
}

TEST(Options, SizesParseThroughThePublicApiAsTheOptionsDo) {
  uint64_t bytes = 0;
  ASSERT_EQ(hm_size_parse("64m", &bytes), HM_OK) << hm_last_error();
  EXPECT_EQ(bytes, 64ull << 20);
  ASSERT_EQ(hm_size_parse("1.5GiB", &bytes), HM_OK) << hm_last_error();
  EXPECT_EQ(bytes, 3ull << 29);
  EXPECT_EQ(hm_size_parse("12 parsecs", &bytes), HM_EINVAL);
  EXPECT_NE(std::string(hm_last_error()).find("size '12 parsecs'"), std::string::npos) << hm_last_error();
  EXPECT_EQ(hm_size_parse(nullptr, &bytes), HM_EINVAL);
}

TEST(Options, EffectiveValuesAndSources) {
  ASSERT_EQ(hm_test::configure("", "HM_FAST_BUDGET", "3G"), HM_OK);
  char value[64], source[32];
  ASSERT_EQ(hm_option_get("HM_FAST_BUDGET", value, sizeof value, source, sizeof source), HM_OK);
  EXPECT_STREQ(value, "3G");
  EXPECT_STREQ(source, "environment");
  ASSERT_EQ(hm_option_get("HM_RETAIN", value, sizeof value, source, sizeof source), HM_OK);
  EXPECT_STREQ(source, "default");
  EXPECT_EQ(hm_option_get("HM_NOPE", value, sizeof value, source, sizeof source), HM_EINVAL);
  // The same value without a copy: "" for an option left empty, NULL for an unknown name.
  ASSERT_NE(hm_option_text("HM_FAST_BUDGET"), nullptr);
  EXPECT_STREQ(hm_option_text("HM_FAST_BUDGET"), "3G");
  EXPECT_STREQ(hm_option_text("HM_RETAIN"), value);
  EXPECT_STREQ(hm_option_text("HM_PROFILE"), "");
  EXPECT_EQ(hm_option_text("HM_NOPE"), nullptr);
  EXPECT_EQ(hm_option_text(nullptr), nullptr);
  EXPECT_GT(hm_option_count(), 10);
  const char *name, *def, *doc;
  ASSERT_EQ(hm_option_info(0, &name, &def, &doc), HM_OK);
  EXPECT_STREQ(name, "HM_TIERS");
  hm_tier_stats_t s{};
  ASSERT_EQ(hm_tier_stats(hm_test::tier("fast"), &s), HM_OK);
  EXPECT_EQ(s.budget, 3ull << 30);
}

TEST(Options, UnknownDefaultRoleIsAnError) {
  EXPECT_EQ(hm_test::configure("", "HM_DEFAULT_ROLE", "fastest"), HM_EFORMAT);
  EXPECT_NE(std::string(hm_last_error()).find("HM_DEFAULT_ROLE"), std::string::npos);
  ASSERT_EQ(hm_test::configure(""), HM_OK);
}

// Every numeric option is checked by hm_init against its kind and range, naming the variable, the
// text and what it expects: a malformed value never becomes 0 in the code that reads it.
TEST(Options, EveryNumericOptionIsCheckedByInitWithItsRange) {
  struct Case {
    const char *name, *value, *expected;
  } cases[] = {{"HM_ITERATION_WINDOW", "abc", "expected a number from 0 to 3600"},
               {"HM_ITERATION_WINDOW", "7200", "expected a number from 0 to 3600"},
               {"HM_PROFILE_DEPTH", "40", "expected an integer from 0 to 32"},
               {"HM_PROFILE_LARGE", "1Q", "unknown unit 'Q'"},
               {"HM_THP", "yes", "expected 0 or 1"},
               {"HM_SAMPLE_BUDGET", "2", "expected a number from 0 to 1"},
               {"HM_PREFETCH_DISTANCE", "x", "expected an integer from 0 to 64"}};
  for (const Case &c : cases) {
    EXPECT_EQ(hm_test::configure("", c.name, c.value), HM_EFORMAT) << c.name << "=" << c.value;
    const std::string msg = hm_last_error();
    EXPECT_NE(msg.find(std::string(c.name) + "='" + c.value + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << msg;
    unsetenv(c.name);
  }
  EXPECT_EQ(hm_test::configure(""), HM_OK);
}

TEST(Options, EveryDefaultIsAValueItsOptionAccepts) {
  // hm_init checks only the values a user gave: the table's defaults must hold on their own.
  for (int i = 0; i < hm::option_count(); ++i) {
    const hm::OptionSpec &spec = hm::option_spec(i);
    EXPECT_EQ(hm::option_check(static_cast<hm::Option>(i), spec.default_value), HM_OK)
        << spec.name << "='" << spec.default_value << "': " << hm_last_error();
  }
}

TEST(Options, TheLibraryAnswersWhetherAValueIsValidAndWhatANumericOptionIs) {
  EXPECT_EQ(hm_option_check("HM_ITERATION_WINDOW", "0.25"), HM_OK);
  EXPECT_EQ(hm_option_check("HM_ITERATION_WINDOW", "-1"), HM_EFORMAT);
  EXPECT_NE(std::string(hm_last_error()).find("HM_ITERATION_WINDOW='-1'"), std::string::npos);
  EXPECT_EQ(hm_option_check("HM_NOPE", "1"), HM_EINVAL);
  EXPECT_EQ(hm_option_check("HM_TIERS", "anything at all"), HM_OK) << "text options are checked where they are parsed";
  double v = 0;
  setenv("HM_PROFILE_LARGE", "1M", 1);
  setenv("HM_HELPERS", "", 1);
  ASSERT_EQ(hm_test::configure(""), HM_OK);
  ASSERT_EQ(hm_option_number("HM_PROFILE_LARGE", &v), HM_OK);
  EXPECT_EQ(v, 1 << 20);
  ASSERT_EQ(hm_option_number("HM_ITERATION_WINDOW", &v), HM_OK);
  EXPECT_DOUBLE_EQ(v, 0.1) << "the default";
  ASSERT_EQ(hm_option_number("HM_HELPERS", &v), HM_OK);
  EXPECT_TRUE(std::isnan(v)) << "an integer option left empty: unset";
  EXPECT_EQ(hm_option_number("HM_TIERS", &v), HM_EINVAL) << "not a numeric option";
  unsetenv("HM_PROFILE_LARGE");
  unsetenv("HM_HELPERS");
  EXPECT_EQ(hm_test::configure(""), HM_OK);
}
