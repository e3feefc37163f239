// The memory-mode cache model (tier/charge_model.h) on access sequences whose hits, misses and
// write-backs are known by hand: a direct-mapped cache of 4 blocks of 4 KiB.
#include <gtest/gtest.h>

#include <thread>

#include "tier/charge_model.h"

using namespace hm;

namespace {

constexpr uint64_t kBlock = 4096;
constexpr uintptr_t kBase = uintptr_t{1} << 30;  // block-aligned; set of block b is b mod 4

DramCacheStats stats_of(const DramCacheModel &m) { return m.stats(); }

}  // namespace

TEST(DramCacheModel, ASweepThatFitsMissesOnceThenHits) {
  DramCacheModel m(4 * kBlock, kBlock);
  DeviceVolume first = m.range(kBase, 4 * kBlock, true, false);
  EXPECT_EQ(first.read, 4 * kBlock) << "four cold misses fill four blocks from the device";
  EXPECT_EQ(first.write, 0u);
  DeviceVolume again = m.range(kBase, 4 * kBlock, true, false);
  EXPECT_EQ(again.read, 0u) << "the second sweep hits";
  DramCacheStats s = stats_of(m);
  EXPECT_EQ(s.misses, 4u);
  EXPECT_EQ(s.hits, 4u);
  EXPECT_EQ(s.writebacks, 0u);
  EXPECT_EQ(s.blocks, 4u);
  EXPECT_EQ(s.block, kBlock);
}

TEST(DramCacheModel, ACyclicSweepTwiceTheCacheMissesEveryTime) {
  DramCacheModel m(4 * kBlock, kBlock);
  for (int pass = 0; pass < 3; ++pass) {
    DeviceVolume v = m.range(kBase, 8 * kBlock, true, false);
    EXPECT_EQ(v.read, 8 * kBlock) << "pass " << pass << ": blocks b and b+4 evict each other";
  }
  EXPECT_EQ(stats_of(m).hits, 0u);
  EXPECT_EQ(stats_of(m).misses, 24u);
}

TEST(DramCacheModel, DirtyBlocksAreWrittenBackWhenEvictedAndOnlyThen) {
  DramCacheModel m(4 * kBlock, kBlock);
  DeviceVolume w = m.range(kBase, 4 * kBlock, false, true);
  EXPECT_EQ(w.read, 4 * kBlock) << "a write miss allocates the block (read from the device)";
  EXPECT_EQ(w.write, 0u) << "nothing written back yet";
  DeviceVolume hit = m.range(kBase + kBlock, kBlock, true, true);
  EXPECT_EQ(hit.read + hit.write, 0u) << "a read-modify-write of a resident block is a hit";
  // Blocks 4..5 map onto sets 0..1: the dirty blocks 0..1 go back to the device.
  DeviceVolume conflict = m.range(kBase + 4 * kBlock, 2 * kBlock, true, false);
  EXPECT_EQ(conflict.read, 2 * kBlock);
  EXPECT_EQ(conflict.write, 2 * kBlock);
  // Blocks 0..1 come back clean (read only): evicting them again writes nothing back.
  m.range(kBase, 2 * kBlock, true, false);
  DeviceVolume clean = m.range(kBase + 4 * kBlock, 2 * kBlock, true, false);
  EXPECT_EQ(clean.read, 2 * kBlock);
  EXPECT_EQ(clean.write, 0u) << "blocks 4..5 were only read";
  DramCacheStats s = stats_of(m);
  EXPECT_EQ(s.writebacks, 2u);
  EXPECT_EQ(s.misses, 4u + 2u + 2u + 2u);
  EXPECT_EQ(s.hits, 1u);
}

TEST(DramCacheModel, ARangeCountsEveryBlockItTouches) {
  DramCacheModel m(4 * kBlock, kBlock);
  DeviceVolume v = m.range(kBase + kBlock - 8, 16, true, false);
  EXPECT_EQ(v.read, 2 * kBlock) << "16 bytes across a block boundary touch two blocks";
  EXPECT_EQ(m.range(kBase, 0, true, false).read, 0u) << "an empty range touches nothing";
}

TEST(DramCacheModel, ScatteredAccessesToResidentDataHit) {
  DramCacheModel m(4 * kBlock, kBlock);
  m.range(kBase, 2 * kBlock, true, false);
  DeviceVolume independent{100 * 64, 0, 0};
  DeviceVolume v = m.scattered(kBase, 2 * kBlock, 100, 8, false, false, independent);
  EXPECT_EQ(v.read, 0u) << "all 100 land on the two resident blocks";
  DeviceVolume dep = m.scattered(kBase + 8 * kBlock, 4 * kBlock, 50, 8, false, true, DeviceVolume{});
  // Blocks 8..11 are cold: each of the four misses once; a dependent chain waits once per miss.
  EXPECT_GE(dep.dependent, 1u);
  EXPECT_LE(dep.dependent, 4u);
  EXPECT_EQ(stats_of(m).misses, 2u + dep.dependent);
}

TEST(DramCacheModel, TwoThreadsOnDisjointSetsCountEveryAccess) {
  DramCacheModel m(64 * kBlock, kBlock);
  auto sweep = [&](uintptr_t base) {
    for (int pass = 0; pass < 100; ++pass) m.range(base, 32 * kBlock, true, pass % 2 == 1);
  };
  std::thread a(sweep, kBase), b(sweep, kBase + 32 * kBlock);
  a.join();
  b.join();
  DramCacheStats s = stats_of(m);
  EXPECT_EQ(s.hits + s.misses, 2u * 100u * 32u);
  EXPECT_EQ(s.misses, 64u) << "each thread's 32 blocks fit in its own half of the sets";
  EXPECT_EQ(s.writebacks, 0u);
}
