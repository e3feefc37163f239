// Which allocations a profile records (profile/sampling.h): the chance of a small one, the table of
// live sampled pointers behind its filter, and the exact mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "profile/sampling.h"

namespace {

const void *at(uint64_t address) { return reinterpret_cast<const void *>(address); }

}  // namespace

TEST(Sampling, EveryAllocationAndFreeWhenTheMeanIsZero) {
  ASSERT_EQ(hm::profile::sampling_start(0, 1 << 20), 0);
  for (uint64_t i = 1; i <= 1000; ++i) {
    EXPECT_TRUE(hm::profile::sample_allocation(at(i * 16), 8));
    EXPECT_TRUE(hm::profile::sampled_free(at(i * 16)));
  }
  EXPECT_TRUE(hm::profile::sampled_free(at(0x1234560))) << "a free is recorded even when its allocation was not seen";
  EXPECT_EQ(hm::profile::sampled_live(), 0u);
}

// An allocation of s bytes is recorded with probability p = 1 - exp(-s / mean). With 1,000,000
// allocations of 512 B and a mean of 64 KiB, p = 0.00778: about 7,780 are expected, with a
// standard deviation of 88. The bound of 6% is 5.3 of them (a false failure about once in ten
// million runs).
TEST(Sampling, SmallAllocationsAreRecordedWithTheirChance) {
  constexpr uint64_t kMean = 64 << 10, kSize = 512, kCount = 1000000;
  ASSERT_EQ(hm::profile::sampling_start(kMean, 1 << 20), 0);
  uint64_t recorded = 0;
  for (uint64_t i = 0; i < kCount; ++i) {
    const void *p = at(0x100000 + 16 * (i % 4096));
    if (hm::profile::sample_allocation(p, kSize)) {
      ++recorded;
      EXPECT_TRUE(hm::profile::sampled_free(p)) << "a recorded allocation's free is recorded";
    } else {
      EXPECT_FALSE(hm::profile::sampled_free(p)) << "an unrecorded one's is not";
    }
  }
  const double expected = kCount * -std::expm1(-double(kSize) / kMean);
  EXPECT_NEAR(double(recorded), expected, 0.06 * expected);
  EXPECT_EQ(hm::profile::sampled_live(), 0u);
  hm::profile::sampling_clear();
}

TEST(Sampling, AllocationsFromTheMeanOrTheLargeSizeOnAreAlwaysRecorded) {
  ASSERT_EQ(hm::profile::sampling_start(64 << 10, 32 << 10), 0);
  for (uint64_t i = 1; i <= 100; ++i) EXPECT_TRUE(hm::profile::sample_allocation(at(i << 20), 32 << 10));
  ASSERT_EQ(hm::profile::sampling_start(64 << 10, 1 << 20), 0);
  for (uint64_t i = 101; i <= 200; ++i) EXPECT_TRUE(hm::profile::sample_allocation(at(i << 20), 64 << 10));
  EXPECT_EQ(hm::profile::sampled_live(), 200u);
  for (uint64_t i = 1; i <= 200; ++i) EXPECT_TRUE(hm::profile::sampled_free(at(i << 20)));
  for (uint64_t i = 1; i <= 200; ++i) EXPECT_FALSE(hm::profile::sampled_free(at(i << 20))) << "freed once only";
  hm::profile::sampling_clear();
}

// The table grows past its first pages and keeps every pointer through backward-shift deletions,
// including pointers 2 MiB apart, which share a filter byte.
TEST(Sampling, TheTableFindsEveryLivePointerAndNoFreedOne) {
  ASSERT_EQ(hm::profile::sampling_start(64 << 10, 64 << 10), 0);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> live;
  for (int i = 0; i < 50000; ++i) {
    const uint64_t p = (rng() & 0x7ffffffff0ull) | 0x10;  // 16-byte aligned, never 0
    if (std::find(live.end() - std::min<size_t>(live.size(), 8), live.end(), p) != live.end()) continue;
    live.push_back(p);
  }
  for (int i = 0; i < 64; ++i) live.push_back(0x40000000ull + (uint64_t(i) << 21));  // one filter byte
  std::sort(live.begin(), live.end());
  live.erase(std::unique(live.begin(), live.end()), live.end());
  std::shuffle(live.begin(), live.end(), rng);
  for (uint64_t p : live) ASSERT_TRUE(hm::profile::sample_allocation(at(p), 64 << 10));
  EXPECT_EQ(hm::profile::sampled_live(), live.size());
  const size_t half = live.size() / 2;
  for (size_t i = 0; i < half; ++i) ASSERT_TRUE(hm::profile::sampled_free(at(live[i]))) << i;
  for (size_t i = 0; i < half; ++i) ASSERT_FALSE(hm::profile::sampled_free(at(live[i]))) << i;
  for (size_t i = half; i < live.size(); ++i) ASSERT_TRUE(hm::profile::sampled_free(at(live[i]))) << i;
  EXPECT_EQ(hm::profile::sampled_live(), 0u);
  hm::profile::sampling_clear();
}

TEST(Sampling, ClearForgetsEveryPointer) {
  ASSERT_EQ(hm::profile::sampling_start(64 << 10, 64 << 10), 0);
  for (uint64_t i = 1; i <= 100; ++i) hm::profile::sample_allocation(at(i * 4096), 1 << 20);
  hm::profile::sampling_clear();
  EXPECT_EQ(hm::profile::sampled_live(), 0u);
  for (uint64_t i = 1; i <= 100; ++i) EXPECT_FALSE(hm::profile::sampled_free(at(i * 4096)));
}
