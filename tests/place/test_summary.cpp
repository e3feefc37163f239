// The run summary (hm_summary_write): what it holds after a short run under hetmem-static, the
// caller's own members, and the errors users get.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "hetmem/hetmem.h"
#include "../support.h"

namespace {

nlohmann::json read_json(const std::string &path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST(Summary, HoldsTiersClassesSpacesPhasesAndIterations) {
  ASSERT_EQ(hm_test::configure("capacity=emul:optane", "HM_FAST_BUDGET", "16M"), HM_OK);
  ASSERT_EQ(hm_policy_select("hetmem-static"), HM_OK);
  hm_class_t hot;
  ASSERT_EQ(hm_class_define("summary.hot", HM_CLASS_HOT, 5, &hot), HM_OK);
  void *p = hm_class_alloc(hot, 4 << 20, 0, 0);
  ASSERT_NE(p, nullptr);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(hm_phase_begin("summary.work"), HM_OK);
    ASSERT_EQ(hm_access(p, 4 << 20, HM_ACCESS_RW), HM_OK);
    ASSERT_EQ(hm_phase_end(), HM_OK);
    ASSERT_EQ(hm_iteration_next(), HM_OK);
  }
  std::string path = hm_test::temp_path("summary.json");
  ASSERT_EQ(hm_summary_write(path.c_str(), R"({"program": "test", "steps": 3})"), HM_OK) << hm_last_error();
  nlohmann::json doc = read_json(path);
  EXPECT_EQ(doc["program"], "test") << "the caller's members are kept";
  EXPECT_EQ(doc["steps"], 3);
  EXPECT_EQ(doc["iteration_seconds"].size(), 3u);
  EXPECT_EQ(doc["phases"]["summary.work"]["calls"], 3);
  EXPECT_EQ(doc["placement"]["policy"], "hetmem-static");
  EXPECT_TRUE(doc["placement"]["static"]["settled"]);
  EXPECT_EQ(doc["placement"]["spaces"].size(), 4u);
  bool found = false;
  for (const auto &c : doc["classes"])
    if (c["name"] == "summary.hot") {
      found = true;
      EXPECT_EQ(c["kind"], "hot");
      EXPECT_EQ(c["live_on"]["dram"], 4 << 20);
      EXPECT_EQ(c["peak_on"]["dram"], 4 << 20);
    }
  EXPECT_TRUE(found);
  ASSERT_EQ(doc["tiers"].size(), 2u);
  EXPECT_EQ(doc["tiers"][0]["budget"], 16 << 20);
  EXPECT_TRUE(doc["tiers"][1]["emulated"]);
  hm_free(p);
  unlink(path.c_str());
  hm_test::configure("");
}

TEST(Summary, BadExtraMembersAndUnwritablePathsAreRefused) {
  ASSERT_EQ(hm_test::configure(""), HM_OK);
  std::string path = hm_test::temp_path("summary-bad.json");
  EXPECT_EQ(hm_summary_write(path.c_str(), "[1, 2]"), HM_EFORMAT);
  EXPECT_EQ(hm_summary_write(path.c_str(), "{not json"), HM_EFORMAT);
  EXPECT_NE(std::string(hm_last_error()).find("not a JSON object"), std::string::npos) << hm_last_error();
  EXPECT_EQ(access(path.c_str(), F_OK), -1) << "nothing written";
  EXPECT_EQ(hm_summary_write("/nonexistent-dir/x/summary.json", nullptr), HM_EIO);
  EXPECT_NE(std::string(hm_last_error()).find("/nonexistent-dir/x/summary.json"), std::string::npos);
  EXPECT_EQ(hm_summary_write(nullptr, nullptr), HM_EINVAL);
}
