#include <gtest/gtest.h>
#include <unistd.h>

#include "hetmem/hetmem.h"
#include "tier/tier.h"
#include "../support.h"

using namespace hm;

TEST(TierSpec, ParsesEveryKind) {
  TierSpec s;
  std::string err;
  ASSERT_EQ(parse_tier_spec("dram", &s, &err), HM_OK);
  EXPECT_EQ(s.kind, HM_KIND_DRAM);
  ASSERT_EQ(parse_tier_spec("numa:3", &s, &err), HM_OK);
  EXPECT_EQ(s.kind, HM_KIND_NUMA);
  EXPECT_EQ(s.node, 3);
  ASSERT_EQ(parse_tier_spec("file:/var/tmp/hm.pool", &s, &err), HM_OK);
  EXPECT_EQ(s.kind, HM_KIND_FILE);
  EXPECT_EQ(s.path, "/var/tmp/hm.pool");
  EXPECT_EQ(s.size, 0u);
  ASSERT_EQ(parse_tier_spec("file:/var/tmp/hm.pool:4G", &s, &err), HM_OK);
  EXPECT_EQ(s.path, "/var/tmp/hm.pool");
  EXPECT_EQ(s.size, 4ull << 30);
  EXPECT_EQ(s.canonical, "file:/var/tmp/hm.pool");
  ASSERT_EQ(parse_tier_spec("emul:optane", &s, &err), HM_OK);
  EXPECT_EQ(s.kind, HM_KIND_EMUL);
  EXPECT_EQ(s.profile, "optane");
  EXPECT_TRUE(s.path.empty());
  ASSERT_EQ(parse_tier_spec("emul:cxl:file:/tmp/c.pool:64M", &s, &err), HM_OK);
  EXPECT_EQ(s.profile, "cxl");
  EXPECT_EQ(s.path, "/tmp/c.pool");
  EXPECT_EQ(s.size, 64u << 20);
  EXPECT_EQ(s.canonical, "emul:cxl:file:/tmp/c.pool");
}

TEST(TierSpec, RejectsMalformedText) {
  TierSpec s;
  std::string err;
  EXPECT_EQ(parse_tier_spec("numa:", &s, &err), HM_EFORMAT);
  EXPECT_EQ(parse_tier_spec("numa:x", &s, &err), HM_EFORMAT);
  EXPECT_EQ(parse_tier_spec("file:", &s, &err), HM_EFORMAT);
  EXPECT_EQ(parse_tier_spec("emul:3dxp", &s, &err), HM_EFORMAT);
  EXPECT_NE(err.find("optane, cxl, nvbm"), std::string::npos) << err;
  EXPECT_EQ(parse_tier_spec("emul:cxl:tmpfs", &s, &err), HM_EFORMAT);
  EXPECT_EQ(parse_tier_spec("file:/tmp/x.pool:4Q", &s, &err), HM_EFORMAT) << "a size that does not parse";
  EXPECT_NE(err.find("'4Q' is not a size"), std::string::npos) << err;
  EXPECT_EQ(parse_tier_spec("emul:cxl:file:/tmp/c.pool:12x", &s, &err), HM_EFORMAT);
  EXPECT_NE(err.find("'12x' is not a size"), std::string::npos) << err;
  EXPECT_EQ(parse_tier_spec("file:/tmp/dir:name", &s, &err), HM_OK) << "a ':' in a path is the path's";
  EXPECT_EQ(s.path, "/tmp/dir:name");
  EXPECT_EQ(parse_tier_spec("hbm", &s, &err), HM_ENOTIER);
  EXPECT_NE(err.find("known kinds"), std::string::npos) << err;
}

TEST(Tiers, DefaultRolesOnThisMachine) {
  ASSERT_EQ(hm_test::configure(""), HM_OK);
  hm_tier_t fast = -1, cap = -1;
  ASSERT_EQ(hm_role_tier(HM_FAST, &fast), HM_OK);
  ASSERT_EQ(hm_role_tier(HM_CAPACITY, &cap), HM_OK);
  hm_tier_info_t fi, ci;
  ASSERT_EQ(hm_tier_info(fast, &fi), HM_OK);
  ASSERT_EQ(hm_tier_info(cap, &ci), HM_OK);
  EXPECT_STREQ(fi.name, "dram");
  EXPECT_EQ(fi.kind, HM_KIND_DRAM);
  EXPECT_NE(fi.roles & (1u << HM_FAST), 0u);
  EXPECT_GT(fi.capacity, 0u);
  EXPECT_GT(fi.read_bw_mbps, 0.0);
  if (ci.kind == HM_KIND_EMUL) {  // one-node machine: the emulated Optane tier is the default
    EXPECT_STREQ(ci.name, "emul:optane");
    EXPECT_EQ(ci.perf_source, HM_PERF_EMULATED);
    EXPECT_NEAR(ci.read_bw_mbps / fi.read_bw_mbps, 0.37, 1e-9);
    EXPECT_NEAR(ci.latency_ns / fi.latency_ns, 3.5, 1e-9);
  } else {
    EXPECT_EQ(ci.kind, HM_KIND_NUMA);
  }
  hm_tier_t none = -1;
  EXPECT_EQ(hm_role_tier(HM_PERSISTENT, &none), HM_ENOTIER);
  EXPECT_NE(std::string(hm_last_error()).find("HM_TIERS=persistent="), std::string::npos) << hm_last_error();
}

TEST(Tiers, HmTiersMapsRolesAndAddsTiers) {
  std::string pool = hm_test::temp_path("spec-pool");
  std::string spec = "fast=dram,capacity=emul:cxl,persistent=file:" + pool + ":8M,emul:nvbm";
  ASSERT_EQ(hm_test::configure(spec), HM_OK) << hm_last_error();
  hm_tier_info_t info;
  hm_tier_t t = hm_test::tier("capacity");
  ASSERT_EQ(hm_tier_info(t, &info), HM_OK);
  EXPECT_STREQ(info.name, "emul:cxl");
  t = hm_test::tier("persistent");
  ASSERT_EQ(hm_tier_info(t, &info), HM_OK);
  EXPECT_EQ(info.kind, HM_KIND_FILE);
  EXPECT_EQ(info.capacity, 8u << 20);
  EXPECT_EQ(info.numa_node, -1);
  EXPECT_EQ(hm_test::tier("emul:nvbm"), hm_test::tier("emul:nvbm"));
  EXPECT_EQ(hm_test::tier("numa:0"), hm_test::tier("dram")) << "the local node is the dram tier";
  hm_tier_t unknown;
  EXPECT_EQ(hm_tier_find("emul:optane", &unknown), HM_ENOTIER);
  std::string msg = hm_last_error();
  EXPECT_NE(msg.find("known: dram"), std::string::npos) << msg;
  EXPECT_NE(msg.find("emul:cxl"), std::string::npos) << msg;
  hm_finalize();
  unlink(pool.c_str());
}

TEST(Tiers, MalformedHmTiersNamesVariableAndText) {
  EXPECT_EQ(hm_test::configure("fsat=dram"), HM_EFORMAT);
  std::string msg = hm_last_error();
  EXPECT_NE(msg.find("HM_TIERS='fsat=dram'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown role 'fsat'"), std::string::npos) << msg;
  EXPECT_EQ(hm_test::configure("capacity=emul:3dxp"), HM_EFORMAT);
  EXPECT_NE(std::string(hm_last_error()).find("3dxp"), std::string::npos);
  EXPECT_EQ(hm_test::configure("capacity=numa:7"), HM_EFORMAT);
  EXPECT_NE(std::string(hm_last_error()).find("no such NUMA node"), std::string::npos) << hm_last_error();
  EXPECT_EQ(hm_test::configure("=dram"), HM_EFORMAT) << "an '=' with no role";
  EXPECT_NE(std::string(hm_last_error()).find("'=dram' has '=' with no role"), std::string::npos) << hm_last_error();
  ASSERT_EQ(hm_test::configure(""), HM_OK);
}

TEST(Tiers, FilePoolThatCannotBeCreatedIsAClearError) {
  EXPECT_EQ(hm_test::configure("persistent=file:/nonexistent-dir/hm.pool:8M"), HM_EIO);
  std::string msg = hm_last_error();
  EXPECT_NE(msg.find("/nonexistent-dir/hm.pool"), std::string::npos) << msg;
  EXPECT_EQ(hm_test::configure("persistent=file:" + hm_test::temp_path("tiny") + ":4K"), HM_EFORMAT);
  EXPECT_NE(std::string(hm_last_error()).find("too small"), std::string::npos) << hm_last_error();
  ASSERT_EQ(hm_test::configure(""), HM_OK);
}
