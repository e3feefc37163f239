#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <set>
#include <thread>

#include "hetmem/hetmem.h"
#include "../support.h"

TEST(Arena, BumpResetGrowAndMerge) {
  ASSERT_EQ(hm_test::configure(""), HM_OK);
  hm_tier_t fast = hm_test::tier("fast");
  hm_arena_t *a = nullptr;
  ASSERT_EQ(hm_arena_create(fast, 64 << 10, 0, &a), HM_OK);
  uint64_t in_use_with_arena = hm_test::stats(fast).in_use;
  EXPECT_GE(in_use_with_arena, 64u << 10) << "arena chunks count toward the tier";
  // Iteration 1 overflows the first chunk twice.
  char *prev = nullptr;
  for (int i = 0; i < 3000; ++i) {
    auto *p = static_cast<char *>(hm_arena_alloc(a, 100, 0));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u);
    if (prev) {
      EXPECT_NE(p, prev);
    }
    std::memset(p, i & 0xff, 100);
    prev = p;
  }
  hm_arena_stats_t s;
  ASSERT_EQ(hm_arena_stats(a, &s), HM_OK);
  EXPECT_EQ(s.used, 3000u * 112u) << "100 bytes rounded to 16-byte alignment";
  EXPECT_GT(s.grows, 0u);
  EXPECT_GT(s.chunks, 1u);
  hm_arena_reset(a);
  ASSERT_EQ(hm_arena_stats(a, &s), HM_OK);
  EXPECT_EQ(s.chunks, 1u) << "chunks merged after growing";
  EXPECT_GE(s.capacity, s.peak);
  EXPECT_EQ(s.peak, 3000u * 112u);
  EXPECT_EQ(s.used, 0u);
  // Iteration 2 of the same shape does not grow.
  uint64_t grows = s.grows;
  for (int i = 0; i < 3000; ++i) ASSERT_NE(hm_arena_alloc(a, 100, 0), nullptr);
  ASSERT_EQ(hm_arena_stats(a, &s), HM_OK);
  EXPECT_EQ(s.grows, grows);
  EXPECT_EQ(s.resets, 1u);
  // Aligned and oversized requests.
  void *big = hm_arena_alloc(a, 10 << 20, 4096);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big) % 4096, 0u);
  EXPECT_EQ(hm_arena_alloc(a, 10, 3), nullptr);
  hm_arena_destroy(a);
  EXPECT_EQ(hm_test::stats(fast).in_use, 0u) << "destroy returns every chunk";
}

TEST(Arena, ConcurrentAllocationsDoNotOverlap) {
  ASSERT_EQ(hm_test::configure(""), HM_OK);
  hm_arena_t *a = nullptr;
  ASSERT_EQ(hm_arena_create(hm_test::tier("fast"), 1 << 16, HM_ARENA_CONCURRENT, &a), HM_OK);
  constexpr int kPer = 20000;
  std::vector<uintptr_t> got[2];
  auto work = [&](int t) {
    for (int i = 0; i < kPer; ++i) {
      auto *p = static_cast<uint64_t *>(hm_arena_alloc(a, 32, 16));
      p[0] = p[1] = p[2] = p[3] = static_cast<uint64_t>(t);
      got[t].push_back(reinterpret_cast<uintptr_t>(p));
    }
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  std::set<uintptr_t> all(got[0].begin(), got[0].end());
  all.insert(got[1].begin(), got[1].end());
  EXPECT_EQ(all.size(), 2u * kPer) << "every block distinct";
  for (int t = 0; t < 2; ++t)
    for (uintptr_t p : got[t]) ASSERT_EQ(reinterpret_cast<uint64_t *>(p)[3], static_cast<uint64_t>(t));
  hm_arena_stats_t s;
  hm_arena_stats(a, &s);
  EXPECT_EQ(s.used, 2u * kPer * 32u);
  hm_arena_destroy(a);
}

TEST(Arena, OnTheCapacityTier) {
  ASSERT_EQ(hm_test::configure("capacity=emul:optane"), HM_OK);
  hm_tier_t cap = hm_test::tier("capacity");
  hm_arena_t *a = nullptr;
  ASSERT_EQ(hm_arena_create(cap, 0, 0, &a), HM_OK);
  void *p = hm_arena_alloc(a, 1000, 0);
  hm_tier_t t;
  ASSERT_EQ(hm_ptr_tier(p, &t), HM_OK);
  EXPECT_EQ(t, cap);
  hm_arena_destroy(a);
  EXPECT_EQ(hm_arena_create(99, 0, 0, &a), HM_ENOTIER);
}

// A full fast budget slows temporaries down (their chunks go to the capacity tier, counted); it
// never stops the run. A strict arena refuses instead.
TEST(Arena, AFullTierSendsNewChunksDownTheChain) {
  ASSERT_EQ(hm_test::configure("capacity=emul:optane", "HM_FAST_BUDGET", "4M"), HM_OK);
  hm_tier_t fast = hm_test::tier("fast"), capacity = hm_test::tier("capacity");
  void *filler = hm_tier_alloc(fast, size_t{3} << 20, 64, HM_STRICT);  // leaves less than 1 MiB
  ASSERT_NE(filler, nullptr);
  hm_arena_t *a = nullptr;
  ASSERT_EQ(hm_arena_create(fast, 512 << 10, HM_ARENA_CONCURRENT, &a), HM_OK);
  uint64_t fallbacks_before = hm_test::stats(fast).fallbacks_out;
  void *big = hm_arena_alloc(a, size_t{2} << 20, 64);  // does not fit the fast budget
  ASSERT_NE(big, nullptr) << hm_last_error();
  std::memset(big, 1, size_t{2} << 20);
  hm_tier_t where = -1;
  ASSERT_EQ(hm_ptr_tier(big, &where), HM_OK);
  EXPECT_EQ(where, capacity);
  hm_arena_stats_t s;
  ASSERT_EQ(hm_arena_stats(a, &s), HM_OK);
  EXPECT_GE(s.fallbacks, 1u);
  EXPECT_GT(hm_test::stats(fast).fallbacks_out, fallbacks_before);
  EXPECT_LE(hm_test::stats(fast).in_use, uint64_t{4} << 20) << "the budget is never exceeded";
  hm_arena_reset(a);  // merges into one chunk; still usable
  EXPECT_NE(hm_arena_alloc(a, 1000, 0), nullptr);
  hm_arena_destroy(a);

  hm_arena_t *strict = nullptr;
  ASSERT_EQ(hm_arena_create(fast, 256 << 10, HM_ARENA_STRICT, &strict), HM_OK);
  EXPECT_EQ(hm_arena_alloc(strict, size_t{2} << 20, 64), nullptr);
  EXPECT_EQ(hm_last_error_code(), HM_EBUDGET);
  hm_arena_destroy(strict);
  hm_arena_t *bad = nullptr;
  EXPECT_EQ(hm_arena_create(fast, 0, 0x80u, &bad), HM_EINVAL);
  hm_free(filler);
  unsetenv("HM_FAST_BUDGET");
  ASSERT_EQ(hm_test::configure(""), HM_OK);
}
