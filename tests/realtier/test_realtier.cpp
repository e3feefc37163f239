// Runs inside the QEMU guests of tests/realtier (real NUMA nodes, KMEM-DAX persistent memory, a DAX
// file system), never on the host: discovery without HM_TIERS, placement checked page by page,
// budgets and fallback, moves keeping addresses, and no emulation charge on real tiers.
// What the guest offers is passed in the environment:
//   HM_GUEST_SLOW_NODE=1      the node that must be found as the capacity tier
//   HM_GUEST_EXPECT_HMAT=1    its bandwidth/latency must come from hwloc (ACPI HMAT)
//   HM_GUEST_EXPECT_PMEM=1    it must be reported as persistent memory (KMEM-DAX)
//   HM_GUEST_DAX_DIR=/mnt/pmem  a DAX-mounted file system for file: pools with MAP_SYNC
#include <gtest/gtest.h>
#include <numaif.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "hetmem/hetmem.h"
#include "persist/pool.h"
#include "prim/prim.h"
#include "../support.h"

namespace {

int env_int(const char *name, int def) {
  const char *v = std::getenv(name);
  return v && *v ? std::atoi(v) : def;
}

// Node of every 64th page of [p, p+n): returns the node if all agree, -1 otherwise.
int node_of_range(const void *p, size_t n) {
  int node = -2;
  for (size_t off = 0; off < n; off += 64 * 4096) {
    int here = -1;
    if (hm::prim::page_node(static_cast<const char *>(p) + off, &here) != HM_OK) return -1;
    if (node == -2) node = here;
    else if (node != here) return -1;
  }
  return node;
}

int mempolicy_node(const void *p) {
  int node = -1;
  if (get_mempolicy(&node, nullptr, 0, const_cast<void *>(p), MPOL_F_NODE | MPOL_F_ADDR) != 0) return -1;
  return node;
}

class RealTier : public ::testing::Test {
 protected:
  void SetUp() override {
    slow_node_ = env_int("HM_GUEST_SLOW_NODE", -1);
    if (slow_node_ < 0) GTEST_SKIP() << "runs inside the real-tier QEMU guests only (HM_GUEST_SLOW_NODE unset)";
    ASSERT_EQ(hm_test::configure(""), HM_OK) << hm_last_error();
    ASSERT_EQ(hm_role_tier(HM_FAST, &fast_), HM_OK);
    ASSERT_EQ(hm_role_tier(HM_CAPACITY, &cap_), HM_OK) << hm_last_error();
  }
  void TearDown() override { hm_finalize(); }
  int slow_node_ = -1;
  hm_tier_t fast_ = -1, cap_ = -1;
};

TEST_F(RealTier, DiscoversTheSlowNodeAsCapacityWithoutConfiguration) {
  hm_tier_info_t f, c;
  ASSERT_EQ(hm_tier_info(fast_, &f), HM_OK);
  ASSERT_EQ(hm_tier_info(cap_, &c), HM_OK);
  EXPECT_STREQ(f.name, "dram");
  EXPECT_EQ(c.kind, HM_KIND_NUMA);
  EXPECT_EQ(c.numa_node, slow_node_);
  EXPECT_EQ(std::string(c.name), "numa:" + std::to_string(slow_node_));
  if (env_int("HM_GUEST_EXPECT_HMAT", 0)) {
    EXPECT_EQ(c.perf_source, HM_PERF_HWLOC) << c.detail;
    EXPECT_GT(c.latency_ns, f.latency_ns);
    EXPECT_LT(c.read_bw_mbps, f.read_bw_mbps);
  }
  EXPECT_EQ(c.is_persistent_memory != 0, env_int("HM_GUEST_EXPECT_PMEM", 0) != 0) << c.detail;
}

TEST_F(RealTier, AllocationsByRoleLandOnTheRightNode) {
  size_t n = 16 << 20;
  auto *a = static_cast<char *>(hm_alloc(HM_FAST, n, 0, HM_STRICT));
  auto *b = static_cast<char *>(hm_alloc(HM_CAPACITY, n, 0, HM_STRICT));
  auto *small = static_cast<char *>(hm_alloc(HM_CAPACITY, 3000, 0, HM_STRICT));
  ASSERT_TRUE(a && b && small) << hm_last_error();
  std::memset(a, 1, n);
  std::memset(b, 2, n);
  std::memset(small, 3, 3000);
  EXPECT_EQ(node_of_range(a, n), 0);
  EXPECT_EQ(node_of_range(b, n), slow_node_);
  EXPECT_EQ(mempolicy_node(b + n / 2), slow_node_);
  EXPECT_EQ(mempolicy_node(small), slow_node_) << "small blocks too: their segment is bound to the node";
  hm_free(a);
  hm_free(b);
  hm_free(small);
}

TEST_F(RealTier, BudgetsAndFallbackOnRealNodes) {
  ASSERT_EQ(hm_tier_set_budget(fast_, 4 << 20), HM_OK);
  EXPECT_EQ(hm_alloc(HM_FAST, 8 << 20, 0, HM_STRICT), nullptr);
  EXPECT_EQ(hm_last_error_code(), HM_EBUDGET);
  auto *p = static_cast<char *>(hm_alloc(HM_FAST, 8 << 20, 0, HM_PREFERRED));
  ASSERT_NE(p, nullptr);
  std::memset(p, 5, 8 << 20);
  EXPECT_EQ(node_of_range(p, 8 << 20), slow_node_) << "the fallback lands on the capacity node";
  EXPECT_EQ(hm_test::stats(cap_).fallbacks_in, 1u);
  hm_free(p);
}

TEST_F(RealTier, MoveKeepsAddressAndMovesPages) {
  size_t n = 8 << 20;
  auto *p = static_cast<uint32_t *>(hm_alloc(HM_FAST, n, 0, HM_MOVABLE));
  ASSERT_NE(p, nullptr);
  for (size_t i = 0; i < n / 4; ++i) p[i] = static_cast<uint32_t>(i * 7);
  EXPECT_EQ(node_of_range(p, n), 0);
  ASSERT_EQ(hm_move(p, cap_), HM_OK) << hm_last_error();
  EXPECT_EQ(node_of_range(p, n), slow_node_);
  for (size_t i = 0; i < n / 4; i += 1001) ASSERT_EQ(p[i], static_cast<uint32_t>(i * 7));
  ASSERT_EQ(hm_move(p, fast_), HM_OK) << hm_last_error();
  EXPECT_EQ(node_of_range(p, n), 0);
  for (size_t i = 0; i < n / 4; i += 1001) ASSERT_EQ(p[i], static_cast<uint32_t>(i * 7));
  hm_free(p);
}

// hetmem-static on real nodes: hot, metadata and temporary objects on node 0, streamed and cold
// ones on the far node, page by page; after the first iteration a high-priority hot object that
// came too late for the fast tier is moved there and a low-priority one moved out (move_pages).
// memory-mode is refused: a real tier's DRAM cache is the hardware's.
TEST_F(RealTier, StaticPlacementPutsClassesOnTheRightNodes) {
  ASSERT_EQ(hm_test::configure("", "HM_FAST_BUDGET", "20M"), HM_OK) << hm_last_error();
  ASSERT_EQ(hm_policy_select("hetmem-static"), HM_OK);
  hm_class_t low, high, stream, cold, meta, tmp;
  ASSERT_EQ(hm_class_define("rt.low", HM_CLASS_HOT, 1, &low), HM_OK);
  ASSERT_EQ(hm_class_define("rt.high", HM_CLASS_HOT, 9, &high), HM_OK);
  ASSERT_EQ(hm_class_define("rt.stream", HM_CLASS_STREAMING, 0, &stream), HM_OK);
  ASSERT_EQ(hm_class_define("rt.cold", HM_CLASS_COLD, 0, &cold), HM_OK);
  ASSERT_EQ(hm_class_define("rt.meta", HM_CLASS_METADATA, 0, &meta), HM_OK);
  ASSERT_EQ(hm_class_define("rt.tmp", HM_CLASS_TEMPORARY, 0, &tmp), HM_OK);
  const size_t n = 8 << 20;
  auto touch = [](void *p, size_t bytes) {
    std::memset(p, 7, bytes);
    return static_cast<char *>(p);
  };
  char *l1 = touch(hm_class_alloc(low, n, 0, 0), n), *l2 = touch(hm_class_alloc(low, n, 0, 0), n);
  char *h = touch(hm_class_alloc(high, n, 0, 0), n);
  char *s = touch(hm_class_alloc(stream, n, 0, 0), n), *c = touch(hm_class_alloc(cold, n, 0, 0), n);
  char *m = touch(hm_class_alloc(meta, 1 << 20, 0, 0), 1 << 20), *t = touch(hm_class_alloc(tmp, 1 << 20, 0, 0), 1 << 20);
  ASSERT_TRUE(l1 && l2 && h && s && c && m && t) << hm_last_error();
  EXPECT_EQ(node_of_range(l1, n), 0);
  EXPECT_EQ(node_of_range(l2, n), 0);
  EXPECT_EQ(node_of_range(h, n), slow_node_) << "iteration 1: the fast budget was used up in allocation order";
  EXPECT_EQ(node_of_range(s, n), slow_node_);
  EXPECT_EQ(node_of_range(c, n), slow_node_);
  EXPECT_EQ(node_of_range(m, 1 << 20), 0);
  EXPECT_EQ(node_of_range(t, 1 << 20), 0);
  hm_free(t);
  ASSERT_EQ(hm_iteration_next(), HM_OK);
  hm_placement_stats_t ps;
  ASSERT_EQ(hm_placement_stats(&ps), HM_OK);
  EXPECT_EQ(ps.settled, 1);
  EXPECT_EQ(node_of_range(h, n), 0) << "the high-priority object was moved to node 0";
  EXPECT_EQ(node_of_range(l1, n), 0);
  // The second low-priority object no longer fits whole: its first 2 MiB (the room left) stay on
  // node 0, the rest is bound to the far node (page-range split).
  EXPECT_EQ(ps.split, 1u);
  EXPECT_EQ(node_of_range(l2, size_t{2} << 20), 0);
  EXPECT_EQ(node_of_range(l2 + (size_t{2} << 20), n - (size_t{2} << 20)), slow_node_);
  EXPECT_EQ(mempolicy_node(l2 + n - 1), slow_node_);
  EXPECT_EQ(h[n - 1], 7);
  EXPECT_EQ(l2[12345], 7);
  for (char *p : {l1, l2, h, s, c, m}) hm_free(p);

  ASSERT_EQ(hm_test::configure(""), HM_OK);
  ASSERT_EQ(hm_policy_select("memory-mode"), HM_OK);
  EXPECT_EQ(hm_class_alloc(cold, 64, 0, 0), nullptr);
  EXPECT_EQ(hm_last_error_code(), HM_ENOTSUP) << hm_last_error();
}

// The full runtime on a real capacity tier: tile homes on the CPU-less node, each batch staged on
// node 0 by real copies (no emulation charges), modified tiles written back to the far node.
TEST_F(RealTier, StreamedTilesStageBetweenTheNodes) {
  setenv("HM_MIGRATION_SPACE", "3M", 1);
  setenv("HM_HELPERS", "1", 1);
  ASSERT_EQ(hm_test::configure("", "HM_FAST_BUDGET", "20M"), HM_OK) << hm_last_error();
  ASSERT_EQ(hm_policy_select("hetmem"), HM_OK);
  hm_class_t cls;
  ASSERT_EQ(hm_class_define("rt.tiles", HM_CLASS_STREAMING, 0, &cls), HM_OK);
  hm_stream_t *st = nullptr;
  constexpr size_t kTiles = 16, kBytes = 256 << 10;
  ASSERT_EQ(hm_stream_create(cls, kTiles, &st), HM_OK) << hm_last_error();
  for (size_t t = 0; t < kTiles; ++t) std::memset(hm_stream_resize(st, t, kBytes), static_cast<int>(t), kBytes);
  EXPECT_EQ(node_of_range(static_cast<char *>(hm_stream_home(st, 3)), kBytes), slow_node_) << "homes on the far node";
  ASSERT_EQ(hm_iteration_next(), HM_OK);
  ASSERT_EQ(hm_stream_sweep(st, 0, kTiles), HM_OK) << hm_last_error();
  size_t first, last;
  while (hm_stream_next(st, &first, &last) == 1)
    for (size_t t = first; t < last; ++t) {
      void *p;
      ASSERT_EQ(hm_stream_acquire(st, t, &p), HM_OK);
      EXPECT_EQ(node_of_range(static_cast<char *>(p), kBytes), 0) << "the working copy is on node 0";
      static_cast<unsigned char *>(p)[100] = static_cast<unsigned char>(t + 50);
      ASSERT_EQ(hm_stream_release(st, t, t % 2), HM_OK);
    }
  hm_stream_stats_t ss;
  ASSERT_EQ(hm_stream_stats(st, &ss), HM_OK);
  EXPECT_EQ(ss.staging, 1);
  EXPECT_EQ(ss.tiles_in, kTiles);
  EXPECT_EQ(ss.tiles_out, kTiles / 2);
  for (size_t t = 0; t < kTiles; ++t) {
    auto *home = static_cast<unsigned char *>(hm_stream_home(st, t));
    EXPECT_EQ(home[100], t % 2 ? t + 50 : t) << "tile " << t;
  }
  EXPECT_EQ(node_of_range(static_cast<char *>(hm_stream_home(st, 3)), kBytes), slow_node_);
  hm_stream_destroy(st);
  unsetenv("HM_MIGRATION_SPACE");
  unsetenv("HM_HELPERS");
  ASSERT_EQ(hm_test::configure(""), HM_OK);
}

TEST_F(RealTier, RealTiersAreNeverCharged) {
  size_t n = 8 << 20;
  void *a = hm_alloc(HM_FAST, n, 0, 0), *b = hm_alloc(HM_CAPACITY, n, 0, 0);
  std::memset(a, 1, n);
  ASSERT_EQ(hm_copy(b, a, n), HM_OK);
  uint64_t charged = 1;
  ASSERT_EQ(hm_emul_charge(cap_, n, n, 1000, &charged), HM_OK);
  EXPECT_EQ(charged, 0u);
  EXPECT_EQ(hm_test::stats(fast_).emul_charged_ns, 0u);
  EXPECT_EQ(hm_test::stats(cap_).emul_charged_ns, 0u);
  hm_free(a);
  hm_free(b);
}

TEST_F(RealTier, FilePoolOnADaxFileSystemUsesMapSync) {
  const char *dir = std::getenv("HM_GUEST_DAX_DIR");
  if (!dir || !*dir) GTEST_SKIP() << "this guest has no DAX file system (HM_GUEST_DAX_DIR unset)";
  std::string pool = std::string(dir) + "/hm.pool";
  ASSERT_EQ(hm_test::configure("persistent=file:" + pool + ":64M"), HM_OK) << hm_last_error();
  hm_tier_t pers;
  ASSERT_EQ(hm_role_tier(HM_PERSISTENT, &pers), HM_OK);
  hm_tier_info_t info;
  ASSERT_EQ(hm_tier_info(pers, &info), HM_OK);
  EXPECT_EQ(info.map_sync, 1) << info.detail;
  EXPECT_EQ(info.is_persistent_memory, 1);
  auto *p = static_cast<char *>(hm_alloc(HM_PERSISTENT, 4 << 20, 0, HM_STRICT));
  ASSERT_NE(p, nullptr) << hm_last_error();
  std::memset(p, 0x42, 4 << 20);
  ASSERT_EQ(hm_move(p, hm_test::tier("fast")), HM_OK) << hm_last_error();
  EXPECT_EQ(p[12345], 0x42);
  ASSERT_EQ(hm_move(p, pers), HM_OK) << hm_last_error();
  EXPECT_EQ(p[(4 << 20) - 1], 0x42);
  hm_free(p);
  hm_finalize();
  unlink(pool.c_str());
}

}  // namespace

TEST(RealTierPool, PersistentPoolOnDaxFlushesCacheLines) {
  const char *dir = std::getenv("HM_GUEST_DAX_DIR");
  if (!dir || !*dir) GTEST_SKIP() << "this guest has no DAX file system (HM_GUEST_DAX_DIR unset)";
  std::string path = std::string(dir) + "/versions.pool";
  uint64_t off = 0;
  {
    std::unique_ptr<hm::persist::Pool> pool;
    ASSERT_EQ(hm::persist::Pool::create(path, 4 << 20, &pool), HM_OK) << hm_last_error();
    EXPECT_TRUE(pool->map_sync()) << "MAP_SYNC: stores are durable once their lines are written back";
    ASSERT_EQ(pool->allocate(4096, &off), HM_OK);
    std::memset(pool->at<char>(off), 0x5a, 4096);
    pool->written(pool->at<char>(off), 4096);
    ASSERT_EQ(pool->commit(off), HM_OK);
  }
  std::unique_ptr<hm::persist::Pool> pool;
  ASSERT_EQ(hm::persist::Pool::open(path, &pool), HM_OK) << hm_last_error();
  EXPECT_EQ(pool->root(), off);
  EXPECT_EQ(pool->at<unsigned char>(off)[4095], 0x5a);
  pool.reset();
  unlink(path.c_str());
}
