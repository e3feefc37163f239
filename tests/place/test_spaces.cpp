// The fast tier's spaces and static placement (hetmem-static), memory-mode and interleave: what
// each puts where, that spaces are sized from the observed iteration and never exceeded, and the
// errors users get.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hetmem/hetmem.h"
#include "../support.h"

namespace {

hm_tier_t tier_of(const void *p) {
  hm_tier_t t = -1;
  EXPECT_EQ(hm_ptr_tier(p, &t), HM_OK);
  return t;
}

hm_space_stats_t space(hm_space_t s) {
  hm_space_stats_t st{};
  EXPECT_EQ(hm_space_stats(s, &st), HM_OK);
  return st;
}

hm_class_t define(const char *name, hm_class_kind_t kind, int priority = 0) {
  hm_class_t c = -1;
  EXPECT_EQ(hm_class_define(name, kind, priority, &c), HM_OK) << hm_last_error();
  return c;
}

class Spaces : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("HM_FAST_BUDGET");
    unsetenv("HM_POLICY");
    unsetenv("HM_MIGRATION_SPACE");
    hm_test::configure("");
  }
  void start(const char *policy, const char *fast_budget) {
    ASSERT_EQ(hm_test::configure("capacity=emul:optane", "HM_FAST_BUDGET", fast_budget), HM_OK);
    ASSERT_EQ(hm_policy_select(policy), HM_OK) << hm_last_error();
  }
};

}  // namespace

// Ren et al. (ICS'21) §4.1: iteration 1 observes (objects go where there is room, in allocation order); at its
// end the free space takes hot objects by priority, moving them at the same address.
TEST_F(Spaces, StaticPlacementMovesHotObjectsByPriorityAfterTheFirstIteration) {
  start("hetmem-static", "10M");
  hm_class_t low = define("spaces.low", HM_CLASS_HOT, 1), high = define("spaces.high", HM_CLASS_HOT, 50);
  hm_tier_t fast = hm_test::tier("fast"), capacity = hm_test::tier("capacity");
  const size_t n = size_t{4} << 20;
  // The low-priority objects come first and take the fast tier; the high-priority one does not fit.
  char *a = static_cast<char *>(hm_class_alloc(low, n, 0, 0));
  char *b = static_cast<char *>(hm_class_alloc(low, n, 0, 0));
  char *h = static_cast<char *>(hm_class_alloc(high, n, 0, 0));
  ASSERT_TRUE(a && b && h) << hm_last_error();
  std::memset(h, 7, n);
  std::memset(b, 3, n);
  EXPECT_EQ(tier_of(a), fast);
  EXPECT_EQ(tier_of(b), fast);
  EXPECT_EQ(tier_of(h), capacity) << "iteration 1: allocation order";
  hm_placement_stats_t ps;
  ASSERT_EQ(hm_placement_stats(&ps), HM_OK);
  EXPECT_EQ(ps.settled, 0);
  EXPECT_FALSE(space(HM_SPACE_FREE).sized);

  ASSERT_EQ(hm_iteration_next(), HM_OK);
  ASSERT_EQ(hm_placement_stats(&ps), HM_OK);
  EXPECT_EQ(ps.settled, 1);
  EXPECT_EQ(ps.error, HM_OK) << ps.message;
  EXPECT_EQ(tier_of(h), fast) << "the highest priority is moved into the free space";
  EXPECT_EQ(tier_of(a), fast) << "the first low-priority object still fits";
  // The second no longer fits whole: the 2 MiB left hold its first pages, the rest leaves.
  const size_t room = size_t{2} << 20;
  EXPECT_EQ(tier_of(b), fast);
  EXPECT_EQ(tier_of(b + room - 1), fast);
  EXPECT_EQ(tier_of(b + room), capacity);
  EXPECT_EQ(tier_of(b + n - 1), capacity);
  EXPECT_EQ(ps.promoted, 1u);
  EXPECT_EQ(ps.demoted, 0u);
  EXPECT_EQ(ps.split, 1u);
  EXPECT_EQ(ps.split_fast_bytes, room);
  EXPECT_EQ(h[n - 1], 7) << "moves keep data and address";
  EXPECT_EQ(b[12345], 3);
  EXPECT_EQ(b[n - 1], 3);
  hm_space_stats_t free_space = space(HM_SPACE_FREE);
  EXPECT_TRUE(free_space.sized);
  EXPECT_EQ(free_space.in_use, 2 * n + room);
  EXPECT_LE(free_space.in_use, free_space.budget);
  EXPECT_EQ(hm_test::stats(fast).in_use, 2 * n + room) << "the fast tier accounts the split object's head only";
  EXPECT_EQ(hm_test::stats(capacity).in_use, n - room);
  hm_class_info_t low_info;
  ASSERT_EQ(hm_class_info(low, &low_info), HM_OK);
  EXPECT_EQ(low_info.live_bytes_on_tier[fast], n + room);
  EXPECT_EQ(low_info.live_bytes_on_tier[capacity], n - room);
  // A split object's declared accesses are charged on each part's tier: only the tail's here.
  hm_emul_stats_t before, after;
  ASSERT_EQ(hm_emul_stats(capacity, &before), HM_OK);
  ASSERT_EQ(hm_access(b, n, HM_ACCESS_READ), HM_OK);
  ASSERT_EQ(hm_emul_stats(capacity, &after), HM_OK);
  EXPECT_EQ(after.read_bytes[HM_EMUL_DECLARED] - before.read_bytes[HM_EMUL_DECLARED], n - room);
  EXPECT_EQ(hm_move(b, fast), HM_ENOTSUP) << "a split object does not move whole";
  hm_class_info_t info;
  ASSERT_EQ(hm_class_info(high, &info), HM_OK);
  EXPECT_EQ(info.live_bytes_on_tier[fast], n) << "the class's live bytes follow the move";
  EXPECT_EQ(info.live_bytes_on_tier[capacity], 0u);
  for (void *p : {a, b, h}) hm_free(p);
  // Nothing of the class is live now; its peak on each tier stays (what compare reports).
  ASSERT_EQ(hm_class_info(high, &info), HM_OK);
  EXPECT_EQ(info.live_bytes_on_tier[fast], 0u);
  EXPECT_EQ(info.peak_bytes_on_tier[fast], n) << "the most of it live on the fast tier at once";
  EXPECT_EQ(space(HM_SPACE_FREE).in_use, 0u) << "frees leave the space";
  EXPECT_EQ(space(HM_SPACE_FREE).objects, 0u);
  EXPECT_EQ(hm_test::stats(fast).in_use, 0u);
  EXPECT_EQ(hm_test::stats(capacity).in_use, 0u) << "freeing a split object releases both parts";
}

// Streamed objects made in iteration 1 wait on the capacity tier; when the spaces are sized, the room
// hot objects leave takes them in allocation order (a fast tier that holds the whole footprint then
// holds everything, as first-touch would), at the same address and with their data. Under hetmem,
// which stages streamed data through the migration space, they stay home unless all of them fit.
TEST_F(Spaces, TheRoomHotObjectsLeaveTakesStreamedObjectsInAllocationOrder) {
  for (const char *policy : {"hetmem-static", "hetmem"}) {
    SCOPED_TRACE(policy);
    start(policy, "12M");
    hm_class_t hot = define("spaces.hot", HM_CLASS_HOT, 10), streamed = define("spaces.streamed", HM_CLASS_STREAMING);
    hm_tier_t fast = hm_test::tier("fast"), capacity = hm_test::tier("capacity");
    const size_t n = size_t{2} << 20;
    std::vector<char *> tiles;
    for (int i = 0; i < 6; ++i) {
      tiles.push_back(static_cast<char *>(hm_class_alloc(streamed, n, 0, 0)));
      ASSERT_NE(tiles.back(), nullptr) << hm_last_error();
      std::memset(tiles.back(), i + 1, n);
      EXPECT_EQ(tier_of(tiles.back()), capacity) << "iteration 1: streamed objects wait at home";
    }
    char *h = static_cast<char *>(hm_class_alloc(hot, n, 0, 0));
    ASSERT_NE(h, nullptr);
    ASSERT_EQ(hm_iteration_next(), HM_OK);
    hm_placement_stats_t ps;
    ASSERT_EQ(hm_placement_stats(&ps), HM_OK);
    ASSERT_EQ(ps.error, HM_OK) << ps.message;
    EXPECT_EQ(tier_of(h), fast);
    // The free space: the 12 MiB budget (less hetmem's 2 MiB migration space), 10 MiB after the hot
    // object: five of the six streamed objects, the first five; under hetmem 8 MiB, not all six,
    // so none moves.
    const bool staging = std::string(policy) == "hetmem";
    EXPECT_EQ(space(HM_SPACE_FREE).budget, (staging ? size_t{10} : size_t{12}) << 20);
    const size_t expected = staging ? 0 : 5;
    for (size_t i = 0; i < tiles.size(); ++i) {
      EXPECT_EQ(tier_of(tiles[i]), i < expected ? fast : capacity) << "tile " << i << " of " << expected << " in";
      EXPECT_EQ(tiles[i][n - 1], static_cast<char>(i + 1)) << "moves keep data and address";
    }
    EXPECT_EQ(ps.promoted, expected);
    EXPECT_LE(space(HM_SPACE_FREE).in_use, space(HM_SPACE_FREE).budget);
    EXPECT_EQ(space(HM_SPACE_FREE).overflows, 0u) << "a streamed object that does not fit is no overflow";
    for (char *t : tiles) hm_free(t);
    hm_free(h);
    EXPECT_EQ(space(HM_SPACE_FREE).in_use, 0u) << "frees leave the space";
    TearDown();
  }
}

// The temporary space is sized from iteration 1's peak and grows on demand (counted) into the free
// space's unused room; when that is gone, temporaries overflow to the capacity tier.
TEST_F(Spaces, TheTemporarySpaceIsSizedFromTheFirstIterationsPeakAndGrowsOnDemand) {
  start("hetmem-static", "16M");
  hm_class_t tmp = define("spaces.tmp", HM_CLASS_TEMPORARY), meta = define("spaces.meta", HM_CLASS_METADATA);
  hm_tier_t fast = hm_test::tier("fast"), capacity = hm_test::tier("capacity");
  void *m = hm_class_alloc(meta, 64 << 10, 0, 0);
  ASSERT_NE(m, nullptr);
  std::vector<void *> t;
  for (int i = 0; i < 3; ++i) t.push_back(hm_class_alloc(tmp, 1 << 20, 0, 0));  // peak 3 MiB
  for (void *p : t) {
    EXPECT_EQ(tier_of(p), fast);
    hm_free(p);
  }
  ASSERT_EQ(hm_iteration_next(), HM_OK);
  hm_space_stats_t ts = space(HM_SPACE_TEMPORARY), ms = space(HM_SPACE_METADATA), fs = space(HM_SPACE_FREE);
  EXPECT_EQ(ts.budget, uint64_t{3} << 20) << "the peak, in whole MiB";
  EXPECT_EQ(ms.budget, uint64_t{1} << 20) << "metadata in use, in whole MiB";
  EXPECT_EQ(fs.budget, uint64_t{12} << 20) << "the rest of the 16 MiB fast budget";
  // Iteration 2 needs 5 MiB of temporaries: the space grows by 2 MiB, counted.
  t.clear();
  for (int i = 0; i < 5; ++i) t.push_back(hm_class_alloc(tmp, 1 << 20, 0, 0));
  for (void *p : t) EXPECT_EQ(tier_of(p), fast);
  ts = space(HM_SPACE_TEMPORARY);
  EXPECT_GE(ts.grows, 1u);
  EXPECT_EQ(ts.grown_bytes, uint64_t{2} << 20);
  EXPECT_EQ(ts.budget, uint64_t{5} << 20);
  EXPECT_EQ(space(HM_SPACE_FREE).budget, uint64_t{10} << 20) << "taken from the free space's room";
  // Hot objects take the rest of the free space; then temporaries can grow no more.
  hm_class_t hot = define("spaces.hot", HM_CLASS_HOT, 1);
  void *big = hm_class_alloc(hot, size_t{10} << 20, 0, 0);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(tier_of(big), fast);
  void *more = hm_class_alloc(tmp, 1 << 20, 0, 0);
  ASSERT_NE(more, nullptr);
  EXPECT_EQ(tier_of(more), capacity) << "no room left: the temporary overflows";
  EXPECT_EQ(space(HM_SPACE_TEMPORARY).overflows, 1u);
  for (int s = 0; s < HM_SPACE_COUNT; ++s)
    EXPECT_LE(space(static_cast<hm_space_t>(s)).high_water, space(static_cast<hm_space_t>(s)).budget) << s;
  for (void *p : t) hm_free(p);
  for (void *p : {more, big, m}) hm_free(p);
}

TEST_F(Spaces, AFastBudgetBelowTheSpacesMinimumIsReportedWithTheNumbers) {
  setenv("HM_MIGRATION_SPACE", "64M", 1);
  start("hetmem-static", "8M");
  hm_class_t hot = define("spaces.hot", HM_CLASS_HOT, 1);
  void *p = hm_class_alloc(hot, 1 << 20, 0, 0);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(hm_iteration_next(), HM_OK);
  hm_placement_stats_t ps;
  ASSERT_EQ(hm_placement_stats(&ps), HM_OK);
  EXPECT_EQ(ps.error, HM_EBUDGET);
  std::string why = ps.message;
  EXPECT_NE(why.find("8.00 MiB"), std::string::npos) << why;
  EXPECT_NE(why.find("migration 64.00 MiB"), std::string::npos) << why;
  EXPECT_EQ(tier_of(p), hm_test::tier("capacity")) << "the free space is empty: the hot object goes out";
  hm_free(p);
}

TEST_F(Spaces, AFastBudgetLargerThanTheTierIsRefused) {
  start("hetmem-static", "1000T");
  hm_class_t hot = define("spaces.hot", HM_CLASS_HOT, 1);
  EXPECT_EQ(hm_class_alloc(hot, 64, 0, 0), nullptr);
  std::string why = hm_last_error();
  EXPECT_NE(why.find("larger than the fast tier"), std::string::npos) << why;
}

TEST_F(Spaces, MemoryModePutsEverythingBehindTheCacheAndReusedDataHits) {
  start("memory-mode", "8M");
  hm_class_t hot = define("spaces.hot", HM_CLASS_HOT, 1);
  const size_t n = size_t{2} << 20;
  void *p = hm_class_alloc(hot, n, 0, 0);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(tier_of(p), hm_test::tier("capacity")) << "memory mode keeps all data on the capacity tier";
  hm_dram_cache_stats_t before, after;
  ASSERT_EQ(hm_dram_cache_stats(&before), HM_OK) << hm_last_error();
  EXPECT_EQ(before.blocks * before.block_bytes, uint64_t{8} << 20) << "the cache is the fast budget's size";
  for (int i = 0; i < 4; ++i) ASSERT_EQ(hm_access(p, n, HM_ACCESS_READ), HM_OK);
  ASSERT_EQ(hm_dram_cache_stats(&after), HM_OK);
  uint64_t blocks = n / after.block_bytes;
  EXPECT_EQ(after.misses - before.misses, blocks) << "2 MiB fit in an 8 MiB cache: the first sweep misses";
  EXPECT_EQ(after.hits - before.hits, 3 * blocks) << "and the next three hit";
  hm_emul_stats_t e;
  ASSERT_EQ(hm_emul_stats(hm_test::tier("capacity"), &e), HM_OK);
  EXPECT_EQ(e.read_bytes[HM_EMUL_DECLARED], n) << "only the misses reach the device";
  hm_free(p);
}

TEST_F(Spaces, MemoryModeNeedsAnEmulatedCapacityTier) {
  ASSERT_EQ(hm_test::configure("fast=dram,capacity=dram"), HM_OK);
  ASSERT_EQ(hm_policy_select("memory-mode"), HM_OK);
  hm_class_t hot = define("spaces.hot", HM_CLASS_HOT, 1);
  EXPECT_EQ(hm_class_alloc(hot, 64, 0, 0), nullptr);
  EXPECT_EQ(hm_last_error_code(), HM_ENOTSUP);
  EXPECT_NE(std::string(hm_last_error()).find("Memory Mode"), std::string::npos) << hm_last_error();
  hm_dram_cache_stats_t s;
  EXPECT_EQ(hm_dram_cache_stats(&s), HM_ENOTSUP);
}

TEST_F(Spaces, InterleaveSpreadsBytesInTheRatioOfTheTiersBandwidths) {
  start("interleave", "0");
  hm_class_t c = define("spaces.any", HM_CLASS_STREAMING);
  hm_tier_t fast = hm_test::tier("fast"), capacity = hm_test::tier("capacity");
  std::vector<void *> blocks;
  for (int i = 0; i < 200; ++i) blocks.push_back(hm_class_alloc(c, 64 << 10, 0, 0));
  size_t on_fast = 0;
  for (void *p : blocks) on_fast += tier_of(p) == fast;
  EXPECT_NEAR(on_fast / 200.0, 1 / 1.37, 0.01) << "optane reads at 0.37x DRAM: 73% of the bytes go fast";
  for (void *p : blocks) hm_free(p);
  // A large object is split by pages in the same ratio: its last 73% on the fast tier.
  const size_t n = size_t{16} << 20;
  auto *big = static_cast<char *>(hm_class_alloc(c, n, 0, 0));
  ASSERT_NE(big, nullptr);
  const size_t fast_bytes = n * 73 / 100 / 4096 * 4096;
  EXPECT_EQ(tier_of(big), capacity);
  EXPECT_EQ(tier_of(big + n - fast_bytes - 1), capacity);
  EXPECT_EQ(tier_of(big + n - fast_bytes), fast);
  EXPECT_EQ(hm_test::stats(fast).in_use, fast_bytes);
  hm_free(big);
}

// Every space's and the fast tier's budget hold under every policy while two threads allocate and
// free objects of every kind, across the iteration boundary at which hetmem-static sizes its spaces.
TEST_F(Spaces, BudgetsAndSpaceBudgetsAreNeverExceededUnderAnyPolicyWithTwoThreads) {
  for (const std::string &name : hm_test::policies()) {
    const char *policy = name.c_str();
    start(policy, "8M");
    hm_class_t classes[5] = {define("b.meta", HM_CLASS_METADATA), define("b.tmp", HM_CLASS_TEMPORARY),
                             define("b.hot", HM_CLASS_HOT, 3), define("b.stream", HM_CLASS_STREAMING),
                             define("b.cold", HM_CLASS_COLD)};
    auto work = [&](unsigned seed, int rounds) {
      std::mt19937 rng(seed);
      std::vector<void *> live;
      for (int i = 0; i < rounds; ++i) {
        size_t size = size_t{1} << (6 + rng() % 14);  // 64 B .. 512 KiB
        void *p = hm_class_alloc(classes[rng() % 5], size, 0, 0);
        if (p) live.push_back(p);
        if (live.size() > 40 || (rng() % 3 == 0 && !live.empty())) {
          size_t k = rng() % live.size();
          hm_free(live[k]);
          live[k] = live.back();
          live.pop_back();
        }
      }
      for (void *p : live) hm_free(p);
    };
    for (int iteration = 0; iteration < 2; ++iteration) {
      std::thread a(work, 1u + iteration, 1500), b(work, 7u + iteration, 1500);
      a.join();
      b.join();
      ASSERT_EQ(hm_iteration_next(), HM_OK);
    }
    hm_tier_stats_t fast = hm_test::stats(hm_test::tier("fast"));
    EXPECT_LE(fast.high_water, uint64_t{8} << 20) << "policy " << policy;
    EXPECT_EQ(fast.in_use, 0u) << "policy " << policy;
    // Budgets of the temporary and metadata spaces only grow, by what the free space lends, so
    // each space's high water since sizing must lie within its largest budget.
    uint64_t sum = 0, lent = space(HM_SPACE_TEMPORARY).grown_bytes + space(HM_SPACE_METADATA).grown_bytes;
    for (int s = 0; s < HM_SPACE_COUNT; ++s) {
      hm_space_stats_t st = space(static_cast<hm_space_t>(s));
      const char *name = hm_space_name(static_cast<hm_space_t>(s));
      EXPECT_EQ(st.in_use, 0u) << policy << " space " << name;
      EXPECT_EQ(st.objects, 0u) << policy << " space " << name;
      uint64_t largest = st.budget + (s == HM_SPACE_FREE ? lent : 0);
      if (st.sized) {
        EXPECT_LE(st.high_water, largest) << policy << " space " << name;
      }
      sum += st.budget;
    }
    if (std::string(policy) == "hetmem-static") {
      EXPECT_LE(sum, uint64_t{8} << 20) << "spaces divide the fast budget";
    }
  }
}

// A class's own weighted interleave: each large object split by page range, fast_percent on the
// fast tier; declared accesses charged on each part's tier; frees release both parts.
TEST_F(Spaces, AClassInterleaveSplitsEachObjectByItsRatio) {
  start("first-touch", "64M");
  hm_class_t c = define("spaces.split", HM_CLASS_HOT, 1);
  EXPECT_EQ(hm_class_interleave(c, 150), HM_EINVAL);
  EXPECT_NE(std::string(hm_last_error()).find("0 to 100"), std::string::npos) << hm_last_error();
  ASSERT_EQ(hm_class_interleave(c, 25), HM_OK);
  hm_tier_t fast = hm_test::tier("fast"), capacity = hm_test::tier("capacity");
  const size_t n = size_t{8} << 20, quarter = n / 4;
  auto *p = static_cast<char *>(hm_class_alloc(c, n, 0, 0));
  ASSERT_NE(p, nullptr) << hm_last_error();
  std::memset(p, 9, n);
  EXPECT_EQ(tier_of(p), capacity);
  EXPECT_EQ(tier_of(p + n - quarter - 1), capacity);
  EXPECT_EQ(tier_of(p + n - quarter), fast);
  EXPECT_EQ(tier_of(p + n - 1), fast);
  EXPECT_EQ(hm_test::stats(fast).in_use, quarter);
  EXPECT_EQ(hm_test::stats(capacity).in_use, n - quarter);
  EXPECT_EQ(space(HM_SPACE_FREE).in_use, quarter);
  hm_class_info_t info;
  ASSERT_EQ(hm_class_info(c, &info), HM_OK);
  EXPECT_EQ(info.live_bytes_on_tier[fast], quarter);
  EXPECT_EQ(info.bytes_on_tier[capacity], n - quarter);
  hm_emul_stats_t before, after;
  ASSERT_EQ(hm_emul_stats(capacity, &before), HM_OK);
  ASSERT_EQ(hm_access(p, n, HM_ACCESS_READ), HM_OK);
  ASSERT_EQ(hm_emul_stats(capacity, &after), HM_OK);
  EXPECT_EQ(after.read_bytes[HM_EMUL_DECLARED] - before.read_bytes[HM_EMUL_DECLARED], n - quarter)
      << "only the capacity tier's part is charged";
  void *small = hm_class_alloc(c, 4096, 0, 0);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(tier_of(small), fast) << "objects under 1 MiB are placed whole by the policy";
  hm_free(small);
  hm_free(p);
  EXPECT_EQ(hm_test::stats(fast).in_use, 0u);
  EXPECT_EQ(hm_test::stats(capacity).in_use, 0u);
  EXPECT_EQ(space(HM_SPACE_FREE).in_use, 0u);
  // The policies that put everything on one tier ignore it.
  start("slow-only", "64M");
  void *q = hm_class_alloc(c, n, 0, 0);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(tier_of(static_cast<char *>(q) + n - 1), capacity);
  hm_free(q);
  ASSERT_EQ(hm_class_interleave(c, -1), HM_OK);
}

// Objects whose size is not a whole number of pages split and free with exact accounting.
TEST_F(Spaces, SplitsOfObjectsOfAnySizeLeaveNothingBehind) {
  start("hetmem-static", "12M");
  hm_class_t c = define("spaces.odd", HM_CLASS_HOT, 1), d = define("spaces.odd.interleaved", HM_CLASS_HOT, 1);
  ASSERT_EQ(hm_class_interleave(d, 40), HM_OK);
  const size_t odd = (size_t{4} << 20) + 12345;
  void *a = hm_class_alloc(c, odd, 0, 0), *b = hm_class_alloc(c, odd, 0, 0), *x = hm_class_alloc(c, odd, 0, 0);
  void *i = hm_class_alloc(d, odd, 0, 0);
  ASSERT_TRUE(a && b && x && i);
  ASSERT_EQ(hm_iteration_next(), HM_OK);
  hm_placement_stats_t ps;
  ASSERT_EQ(hm_placement_stats(&ps), HM_OK);
  EXPECT_EQ(ps.split, 1u) << "the third object brings its last pages into the room left";
  EXPECT_EQ(tier_of(static_cast<char *>(x) + odd - 1), hm_test::tier("fast"));
  EXPECT_EQ(tier_of(i), hm_test::tier("capacity")) << "the interleaved object keeps its own split";
  EXPECT_LE(space(HM_SPACE_FREE).in_use, space(HM_SPACE_FREE).budget);
  for (void *p : {a, b, x, i}) hm_free(p);
  EXPECT_EQ(space(HM_SPACE_FREE).in_use, 0u);
  EXPECT_EQ(space(HM_SPACE_FREE).objects, 0u);
  EXPECT_EQ(hm_test::stats(hm_test::tier("fast")).in_use, 0u);
  EXPECT_EQ(hm_test::stats(hm_test::tier("capacity")).in_use, 0u);
  hm_class_info_t info;
  ASSERT_EQ(hm_class_info(c, &info), HM_OK);
  for (int t = 0; t < 2; ++t) EXPECT_EQ(info.live_bytes_on_tier[t], 0u) << t;
  ASSERT_EQ(hm_class_interleave(d, -1), HM_OK);
}
