// One suite over every tier kind: run for each kind that exists on this machine; a kind that
// does not (a second NUMA node on a one-node machine) is skipped with the reason.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "hetmem/hetmem.h"
#include "prim/prim.h"
#include "../support.h"

namespace {

struct Kind {
  const char *label;
  std::string spec;   // HM_TIERS item for the capacity role ("" = defaults)
  std::string name;   // the tier's name
  int needs_nodes;    // NUMA nodes this kind needs
};

std::vector<Kind> kinds() {
  std::string pool = hm_test::temp_path("typed-pool");
  return {
      {"dram", "", "dram", 1},
      {"numa1", "numa:1", "numa:1", 2},
      {"file", "file:" + pool + ":256M", "file:" + pool, 1},
      {"emul_optane", "emul:optane", "emul:optane", 1},
      {"emul_cxl", "emul:cxl", "emul:cxl", 1},
      {"emul_nvbm", "emul:nvbm", "emul:nvbm", 1},
      {"emul_optane_on_file", "emul:optane:file:" + pool + "-e:256M", "emul:optane:file:" + pool + "-e", 1},
  };
}

void PrintTo(const Kind &k, std::ostream *os) { *os << k.label; }

class EveryTier : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    const Kind &k = GetParam();
    if (hm::prim::numa_node_count() < k.needs_nodes)
      GTEST_SKIP() << "tier kind " << k.name << " needs " << k.needs_nodes << " NUMA nodes; this machine has "
                   << hm::prim::numa_node_count() << " (run the real-tier tests for it)";
    ASSERT_EQ(hm_test::configure(k.spec.empty() ? "" : "capacity=" + k.spec), HM_OK) << hm_last_error();
    tier_ = hm_test::tier(k.name.c_str());
    other_ = tier_ == hm_test::tier("dram") ? hm_test::tier("capacity") : hm_test::tier("dram");
  }
  void TearDown() override {
    hm_finalize();
    const Kind &k = GetParam();
    if (k.name.find("file:") != std::string::npos) {
      std::string path = k.name.substr(k.name.find("file:") + 5);
      unlink(path.c_str());
    }
  }
  hm_tier_t tier_ = -1, other_ = -1;
};

TEST_P(EveryTier, AllocationsLandOnTheTierWithExactAccounting) {
  const size_t sizes[] = {1, 16, 100, 4096, 32768, 40000, 300000, 1 << 20, 3 << 20, 17 << 20};
  hm_tier_stats_t before = hm_test::stats(tier_);
  std::vector<void *> ptrs;
  uint64_t usable = 0;
  for (size_t s : sizes) {
    void *p = hm_tier_alloc(tier_, s, 0, HM_STRICT);
    ASSERT_NE(p, nullptr) << s << ": " << hm_last_error();
    std::memset(p, static_cast<int>(s & 0xff), s);
    hm_tier_t where = -1;
    ASSERT_EQ(hm_ptr_tier(p, &where), HM_OK);
    EXPECT_EQ(where, tier_) << s;
    ASSERT_EQ(hm_ptr_tier(static_cast<char *>(p) + s - 1, &where), HM_OK) << "interior address";
    EXPECT_EQ(where, tier_);
    EXPECT_GE(hm_usable_size(p), s);
    usable += hm_usable_size(p);
    ptrs.push_back(p);
  }
  hm_tier_stats_t during = hm_test::stats(tier_);
  EXPECT_EQ(during.in_use - before.in_use, usable);
  EXPECT_EQ(during.allocs - before.allocs, std::size(sizes));
  EXPECT_GE(during.high_water, during.in_use);
  EXPECT_GE(during.reserved, during.in_use);
  for (size_t i = 0; i < ptrs.size(); ++i)
    EXPECT_EQ(static_cast<unsigned char *>(ptrs[i])[sizes[i] - 1], sizes[i] & 0xff) << "data kept";
  for (void *p : ptrs) hm_free(p);
  hm_tier_stats_t after = hm_test::stats(tier_);
  EXPECT_EQ(after.in_use, before.in_use);
  EXPECT_EQ(after.frees - before.frees, std::size(sizes));
  EXPECT_EQ(after.high_water, during.high_water);
}

TEST_P(EveryTier, AlignmentIsHonoured) {
  // 300 and 1500 bytes: classes whose blocks keep a cache line's alignment only (heap.cpp's
  // colours); an aligned request of them takes a power of two.
  for (size_t align : {size_t{16}, size_t{64}, size_t{128}, size_t{256}, size_t{512}, size_t{4096}, size_t{65536},
                       size_t{2} << 20})
    for (size_t size : {size_t{24}, size_t{300}, size_t{1500}, size_t{5000}, size_t{200000}}) {
      void *p = hm_tier_alloc(tier_, size, align, HM_STRICT);
      ASSERT_NE(p, nullptr) << hm_last_error();
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u) << "align " << align << " size " << size;
      hm_free(p);
    }
  EXPECT_EQ(hm_tier_alloc(tier_, 64, 48, 0), nullptr);
  EXPECT_EQ(hm_last_error_code(), HM_EINVAL);
}

TEST_P(EveryTier, ReallocKeepsTierAndData) {
  auto *p = static_cast<unsigned char *>(hm_tier_alloc(tier_, 100, 0, 0));
  ASSERT_NE(p, nullptr);
  for (int i = 0; i < 100; ++i) p[i] = static_cast<unsigned char>(i);
  for (size_t grow : {size_t{1000}, size_t{100000}, size_t{3} << 20, size_t{50}}) {
    p = static_cast<unsigned char *>(hm_realloc(p, grow));
    ASSERT_NE(p, nullptr) << hm_last_error();
    hm_tier_t where;
    ASSERT_EQ(hm_ptr_tier(p, &where), HM_OK);
    EXPECT_EQ(where, tier_);
    for (int i = 0; i < 50; ++i) ASSERT_EQ(p[i], i) << "after realloc to " << grow;
  }
  hm_free(p);
  EXPECT_EQ(hm_test::stats(tier_).in_use, 0u);
}

TEST_P(EveryTier, StrictOverBudgetFailsWithMessage) {
  hm_tier_set_budget(tier_, 1 << 20);
  void *ok = hm_tier_alloc(tier_, 512 << 10, 0, HM_STRICT);
  ASSERT_NE(ok, nullptr);
  void *no = hm_tier_alloc(tier_, 1 << 20, 0, HM_STRICT);
  EXPECT_EQ(no, nullptr);
  EXPECT_EQ(hm_last_error_code(), HM_EBUDGET);
  std::string msg = hm_last_error();
  hm_tier_info_t info;
  hm_tier_info(tier_, &info);
  EXPECT_NE(msg.find(info.name), std::string::npos) << msg;
  EXPECT_NE(msg.find("1.00 MiB"), std::string::npos) << "names the request: " << msg;
  EXPECT_NE(msg.find("remaining"), std::string::npos) << msg;
  EXPECT_EQ(hm_test::stats(tier_).failures, 1u);
  EXPECT_LE(hm_test::stats(tier_).in_use, 1u << 20);
  hm_free(ok);
}

// Small blocks under a budget set while the thread's cache already holds blocks of their class:
// the cache's fast path must not serve them past the budget, and once the budget is lifted every
// byte is still accounted.
TEST_P(EveryTier, ABudgetSetOnAWarmCacheHoldsForSmallBlocks) {
  void *warm = hm_tier_alloc(tier_, 64, 0, 0);
  ASSERT_NE(warm, nullptr) << hm_last_error();
  hm_free(warm);  // the class's bin now holds blocks
  const uint64_t before = hm_test::stats(tier_).in_use;
  ASSERT_EQ(hm_tier_set_budget(tier_, before + (64 << 10)), HM_OK);
  std::vector<void *> blocks;
  for (int i = 0; i < 2048; ++i) {
    void *p = hm_tier_alloc(tier_, 64, 0, HM_STRICT);
    if (!p) break;
    blocks.push_back(p);
  }
  EXPECT_EQ(blocks.size(), size_t{1024}) << "64 KiB of budget holds 1024 blocks of 64 bytes";
  EXPECT_EQ(hm_last_error_code(), HM_EBUDGET);
  EXPECT_LE(hm_test::stats(tier_).in_use, before + (64 << 10));
  ASSERT_EQ(hm_tier_set_budget(tier_, 0), HM_OK);
  for (int i = 0; i < 512; ++i) {
    void *p = hm_tier_alloc(tier_, 64, 0, HM_STRICT);
    ASSERT_NE(p, nullptr) << "no budget: " << hm_last_error();
    blocks.push_back(p);
  }
  EXPECT_EQ(hm_test::stats(tier_).in_use, before + 1536 * 64);
  for (void *p : blocks) hm_free(p);
  EXPECT_EQ(hm_test::stats(tier_).in_use, before);
}

TEST_P(EveryTier, MoveKeepsAddressAndData) {
  size_t n = 4 << 20;
  auto *p = static_cast<uint32_t *>(hm_tier_alloc(tier_, n, 0, HM_MOVABLE));
  ASSERT_NE(p, nullptr) << hm_last_error();
  for (size_t i = 0; i < n / 4; ++i) p[i] = static_cast<uint32_t>(i * 2654435761u);
  uint64_t here = hm_test::stats(tier_).in_use, there = hm_test::stats(other_).in_use;
  ASSERT_EQ(hm_move(p, other_), HM_OK) << hm_last_error();
  hm_tier_t where;
  ASSERT_EQ(hm_ptr_tier(p, &where), HM_OK);
  EXPECT_EQ(where, other_);
  for (size_t i = 0; i < n / 4; i += 997) ASSERT_EQ(p[i], static_cast<uint32_t>(i * 2654435761u));
  EXPECT_EQ(hm_test::stats(tier_).in_use, here - n);
  EXPECT_EQ(hm_test::stats(other_).in_use, there + n);
  EXPECT_EQ(hm_test::stats(other_).moves_in, 1u);
  ASSERT_EQ(hm_move(p, tier_), HM_OK) << "and back: " << hm_last_error();
  for (size_t i = 0; i < n / 4; i += 997) ASSERT_EQ(p[i], static_cast<uint32_t>(i * 2654435761u));
  hm_tier_info_t info;
  hm_tier_info(tier_, &info);
  if (info.numa_node >= 0 && info.kind != HM_KIND_EMUL) {
    int node = -1;
    ASSERT_EQ(hm::prim::page_node(p, &node), HM_OK);
    EXPECT_EQ(node, info.numa_node) << "the pages are on the tier's node";
  }
  hm_free(p);
  void *small = hm_tier_alloc(tier_, 100, 0, 0);
  EXPECT_EQ(hm_move(small, other_), HM_ENOTSUP) << "a small block shares its pages";
  hm_free(small);
}

TEST_P(EveryTier, ZeroedAllocations) {
  for (size_t s : {size_t{48}, size_t{70000}, size_t{5} << 20}) {
    // Dirty a block of the same class first so that reuse is exercised.
    void *d = hm_tier_alloc(tier_, s, 0, 0);
    std::memset(d, 0xff, s);
    hm_free(d);
    auto *p = static_cast<unsigned char *>(hm_tier_alloc(tier_, s, 0, HM_ZERO));
    ASSERT_NE(p, nullptr);
    size_t nonzero = 0;
    for (size_t i = 0; i < s; ++i) nonzero += p[i] != 0;
    EXPECT_EQ(nonzero, 0u) << s;
    hm_free(p);
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, EveryTier, ::testing::ValuesIn(kinds()),
                         [](const ::testing::TestParamInfo<Kind> &i) { return std::string(i.param.label); });

}  // namespace
