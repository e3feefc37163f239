#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>

#include "hetmem/hetmem.h"
#include "../support.h"

class AllocApi : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(hm_test::configure("fast=dram,capacity=emul:cxl"), HM_OK) << hm_last_error();
    fast_ = hm_test::tier("fast");
    cap_ = hm_test::tier("capacity");
  }
  void TearDown() override { hm_finalize(); }
  // Bytes the capacity tier has mapped (blocks in use, kept mappings, segments).
  uint64_t reserved() const {
    hm_tier_stats_t s{};
    EXPECT_EQ(hm_tier_stats(cap_, &s), HM_OK);
    return s.reserved;
  }
  hm_tier_t fast_ = -1, cap_ = -1;
};

TEST_F(AllocApi, ImplicitInitialisation) {
  hm_finalize();
  void *p = hm_malloc(10);  // no hm_init: the first call initialises
  ASSERT_NE(p, nullptr);
  hm_free(p);
}

TEST_F(AllocApi, ModeScopesSteerHmMalloc) {
  EXPECT_EQ(hm_mode_current(), fast_);
  void *a = hm_malloc(1000);
  ASSERT_EQ(hm_mode_push(HM_CAPACITY), HM_OK);
  void *b = hm_malloc(1000);
  ASSERT_EQ(hm_mode_push_tier(fast_), HM_OK);
  void *c = hm_malloc(1000);
  ASSERT_EQ(hm_mode_pop(), HM_OK);
  void *d = hm_calloc(10, 100);
  ASSERT_EQ(hm_mode_pop(), HM_OK);
  EXPECT_EQ(hm_mode_pop(), HM_EINVAL) << "unbalanced pop is an error, not a crash";
  hm_tier_t t;
  hm_ptr_tier(a, &t);
  EXPECT_EQ(t, fast_);
  hm_ptr_tier(b, &t);
  EXPECT_EQ(t, cap_);
  hm_ptr_tier(c, &t);
  EXPECT_EQ(t, fast_);
  hm_ptr_tier(d, &t);
  EXPECT_EQ(t, cap_);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(static_cast<char *>(d)[i], 0);
  // Modes are per thread.
  ASSERT_EQ(hm_mode_push(HM_CAPACITY), HM_OK);
  hm_tier_t other_thread = -1;
  std::thread([&] { other_thread = hm_mode_current(); }).join();
  EXPECT_EQ(other_thread, fast_);
  hm_mode_pop();
  for (void *p : {a, b, c, d}) hm_free(p);
}

TEST_F(AllocApi, PreferredFallsBackAndCounts) {
  hm_tier_set_budget(fast_, 1 << 20);
  void *p = hm_alloc(HM_FAST, 2 << 20, 0, HM_PREFERRED);
  ASSERT_NE(p, nullptr);
  hm_tier_t t;
  hm_ptr_tier(p, &t);
  EXPECT_EQ(t, cap_);
  EXPECT_EQ(hm_test::stats(fast_).fallbacks_out, 1u);
  EXPECT_EQ(hm_test::stats(cap_).fallbacks_in, 1u);
  EXPECT_EQ(hm_test::stats(fast_).failures, 0u) << "a fallback is not a refusal";
  EXPECT_EQ(hm_alloc(HM_FAST, 2 << 20, 0, HM_STRICT), nullptr);
  EXPECT_EQ(hm_last_error_code(), HM_EBUDGET);
  EXPECT_EQ(hm_test::stats(fast_).failures, 1u) << "the strict request was refused";
  hm_free(p);
}

TEST_F(AllocApi, PersistentNeverFallsBack) {
  std::string pool = hm_test::temp_path("api-pool");
  ASSERT_EQ(hm_test::configure("capacity=emul:cxl,persistent=file:" + pool + ":8M"), HM_OK);
  hm_tier_t pers = hm_test::tier("persistent");
  void *p = hm_alloc(HM_PERSISTENT, 4 << 20, 0, HM_PREFERRED);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(hm_alloc(HM_PERSISTENT, 6 << 20, 0, HM_PREFERRED), nullptr) << "pool is 8 MiB";
  EXPECT_EQ(hm_last_error_code(), HM_ECAPACITY);
  EXPECT_NE(std::string(hm_last_error()).find("full"), std::string::npos) << hm_last_error();
  hm_tier_t t;
  hm_ptr_tier(p, &t);
  EXPECT_EQ(t, pers);
  hm_free(p);
  hm_finalize();
  unlink(pool.c_str());
}

// Bytes held outside the allocator (a store's files on the tier's medium) share the tier's budget
// with its allocations, exactly, and a claim the budget cannot hold changes nothing.
TEST_F(AllocApi, ClaimedBytesShareTheBudgetWithAllocations) {
  ASSERT_EQ(hm_tier_set_budget(cap_, 4 << 20), HM_OK);
  void *p = hm_tier_alloc(cap_, 2 << 20, 0, HM_STRICT);
  ASSERT_NE(p, nullptr) << hm_last_error();
  const uint64_t held = hm_test::stats(cap_).in_use;
  ASSERT_EQ(hm_tier_claim(cap_, 1 << 20), HM_OK) << hm_last_error();
  EXPECT_EQ(hm_test::stats(cap_).in_use, held + (1 << 20));
  EXPECT_EQ(hm_tier_claim(cap_, 2 << 20), HM_EBUDGET) << "2 MiB + 1 MiB claimed + 2 MiB is over 4 MiB";
  const std::string why = hm_last_error();
  EXPECT_NE(why.find("tier 'emul:cxl'"), std::string::npos) << why;
  EXPECT_NE(why.find("does not fit its budget"), std::string::npos) << why;
  EXPECT_EQ(hm_test::stats(cap_).in_use, held + (1 << 20)) << "a refused claim counts nothing";
  EXPECT_EQ(hm_test::stats(cap_).failures, 1u);
  EXPECT_EQ(hm_tier_alloc(cap_, 2 << 20, 0, HM_STRICT), nullptr) << "the claim holds room an allocation wanted";
  EXPECT_EQ(hm_tier_unclaim(cap_, 2 << 20), HM_EINVAL) << "more than was claimed";
  EXPECT_EQ(hm_test::stats(cap_).in_use, held + (1 << 20));
  ASSERT_EQ(hm_tier_unclaim(cap_, 1 << 20), HM_OK);
  EXPECT_EQ(hm_test::stats(cap_).in_use, held);
  EXPECT_GE(hm_test::stats(cap_).high_water, held + (1 << 20));
  void *q = hm_tier_alloc(cap_, 1 << 20, 0, HM_STRICT);
  EXPECT_NE(q, nullptr) << "room given back serves allocations again: " << hm_last_error();
  EXPECT_EQ(hm_tier_claim(42, 1), HM_ENOTIER);
  hm_free(q);
  hm_free(p);
}

TEST_F(AllocApi, UnknownRoleAndTier) {
  EXPECT_EQ(hm_alloc(static_cast<hm_role_t>(9), 10, 0, 0), nullptr);
  EXPECT_EQ(hm_last_error_code(), HM_ENOTIER);
  EXPECT_EQ(hm_alloc(HM_PERSISTENT, 10, 0, 0), nullptr);
  EXPECT_NE(std::string(hm_last_error()).find("persistent"), std::string::npos);
  EXPECT_EQ(hm_tier_alloc(42, 10, 0, 0), nullptr);
  EXPECT_NE(std::string(hm_last_error()).find("known: dram"), std::string::npos) << hm_last_error();
  hm_tier_t t;
  EXPECT_EQ(hm_tier_find("hbm", &t), HM_ENOTIER);
  EXPECT_NE(std::string(hm_last_error()).find("emul:cxl"), std::string::npos);
}

TEST_F(AllocApi, ForeignPointersAreReportedAndLeftAlone) {
  int on_stack = 0;
  void *mine = hm_malloc(64);
  hm_tier_stats_t before = hm_test::stats(fast_);
  hm_free(&on_stack);
  EXPECT_EQ(hm_last_error_code(), HM_ENOTOWNED);
  void *libc = std::malloc(100);
  hm_free(libc);
  EXPECT_EQ(hm_last_error_code(), HM_ENOTOWNED);
  std::free(libc);
  EXPECT_EQ(hm_realloc(&on_stack, 100), nullptr);
  EXPECT_EQ(hm_usable_size(&on_stack), 0u);
  void *big = hm_tier_alloc(fast_, 4 << 20, 0, 0);
  hm_free(static_cast<char *>(big) + 4096);  // inside a block, not its start
  EXPECT_EQ(hm_last_error_code(), HM_ENOTOWNED);
  hm_tier_stats_t after = hm_test::stats(fast_);
  EXPECT_EQ(after.in_use, before.in_use + (4 << 20)) << "state untouched by the bad frees";
  hm_free(big);
  hm_free(mine);
  hm_free(nullptr);
}

// A large block need not fill its last 2 MiB slot; the rest of that slot belongs to whoever maps
// there next (the C library's mmap'd chunks, under the preload library). Such memory must never
// pass for hetmem's: freeing it through hetmem would release the block instead (the crash of an
// MD code under the profiler, whose realloc'd arrays were then unmapped under it).
TEST_F(AllocApi, MemorySharingALargeBlocksLastSlotIsNotHetmems) {
  constexpr size_t kSlot = size_t{2} << 20;
  // Below 2 MiB only guarded blocks have a mapping of their own (smaller ones share segments).
  const std::pair<unsigned, size_t> cases[] = {{0u, size_t{3} << 20}, {0u, size_t{11} << 19},
                                               {HM_GUARDED, size_t{3} << 19}, {HM_GUARDED, size_t{3} << 20}};
  for (auto [flags, size] : cases) {
    {
      SCOPED_TRACE(std::to_string(size) + (flags ? " guarded" : ""));
      // The kernel may place a block right below another mapping, which then fills the rest of
      // its last slot: such blocks are held (so the next one lands elsewhere) until one leaves a
      // free page to map a foreign page into.
      std::vector<char *> held;
      char *block = nullptr;
      void *foreign = MAP_FAILED;
      for (int attempt = 0; attempt < 8 && foreign == MAP_FAILED; ++attempt) {
        if (block) held.push_back(block);
        block = static_cast<char *>(hm_tier_alloc(fast_, size, 0, flags));
        ASSERT_NE(block, nullptr) << hm_last_error();
        uintptr_t end = (reinterpret_cast<uintptr_t>(block) + size + 4095) & ~uintptr_t{4095};
        if (flags) end += 4096;  // the guard page after the data
        uintptr_t slot_end = (end + kSlot - 1) & ~(kSlot - 1);
        ASSERT_GT(slot_end, end) << "the block should leave part of its last slot";
        // The first free page after the block in its last slot (a reused mapping may be longer).
        for (uintptr_t at = end; at < slot_end && foreign == MAP_FAILED; at += 4096)
          foreign = mmap(reinterpret_cast<void *>(at), 4096, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      }
      for (char *b : held) hm_free(b);
      ASSERT_NE(foreign, MAP_FAILED) << "no free page in the last slot of 8 blocks";
      EXPECT_EQ(hm_ptr_tier(foreign, nullptr), HM_ENOTOWNED);
      EXPECT_EQ(hm_usable_size(foreign), 0u);
      hm_free(foreign);
      EXPECT_EQ(hm_last_error_code(), HM_ENOTOWNED);
      EXPECT_EQ(hm_realloc(foreign, 100), nullptr);
      EXPECT_EQ(hm_ptr_tier(block, nullptr), HM_OK) << "the block itself is still hetmem's";
      EXPECT_EQ(hm_ptr_tier(block + size - 1, nullptr), HM_OK);
      std::memset(block, 1, size);  // still mapped: the bad free released nothing
      munmap(foreign, 4096);
      hm_free(block);
    }
  }
}

// Profiled objects of 1-2 MiB each get a guarded mapping; two of them must not share a slot, or
// the second one's record would hide the first.
TEST_F(AllocApi, GuardedBlocksSmallerThanASlotKeepTheirOwnRecords) {
  constexpr int kBlocks = 16;
  auto size_of = [](int i) { return (size_t{1} << 20) + static_cast<size_t>(i) * 65536; };  // all different
  std::vector<char *> blocks;
  size_t total = 0;
  for (int i = 0; i < kBlocks; ++i) {
    blocks.push_back(static_cast<char *>(hm_tier_alloc(fast_, size_of(i), 0, HM_GUARDED)));
    ASSERT_NE(blocks.back(), nullptr) << hm_last_error();
    total += size_of(i);
  }
  for (int i = 0; i < kBlocks; ++i) EXPECT_EQ(hm_usable_size(blocks[i]), size_of(i)) << "block " << i;
  hm_tier_stats_t before = hm_test::stats(fast_);
  for (char *b : blocks) hm_free(b);
  EXPECT_EQ(hm_test::stats(fast_).in_use, before.in_use - total);
}

// A freed guarded mapping (the profiler's large objects) is kept like any large mapping, and given
// again only to a guarded request of the same page-rounded size: the mapping stays exactly the
// object's, so the kernel's referenced bytes for it stay the object's.
// The mappings of the process that `p` lies in: [start, end) and its protection ("rw-p", "---p").
struct MappingOf {
  uintptr_t start = 0, end = 0;
  std::string perms;
};
static MappingOf mapping_of(uintptr_t p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &lo, &hi, perms) == 3 && p >= lo && p < hi) return {lo, hi, perms};
  }
  return {};
}

// The physical frame behind a (touched) page, from /proc/self/pagemap; 0 when the kernel does not
// say (frame numbers need CAP_SYS_ADMIN).
static uint64_t physical_frame(const void *p) {
  std::FILE *f = std::fopen("/proc/self/pagemap", "rb");
  if (!f) return 0;
  uint64_t entry = 0;
  const long at = static_cast<long>(reinterpret_cast<uintptr_t>(p) / 4096 * sizeof entry);
  const bool read = std::fseek(f, at, SEEK_SET) == 0 && std::fread(&entry, sizeof entry, 1, f) == 1;
  std::fclose(f);
  return read && (entry >> 63) ? entry & ((uint64_t{1} << 55) - 1) : 0;
}

// A guarded block is exactly one mapping of its page-rounded size, between two inaccessible pages.
static void expect_own_guarded_mapping(const char *p, size_t size, const char *what) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), pages = (size + 4095) / 4096 * 4096;
  const MappingOf m = mapping_of(a);
  EXPECT_EQ(m.start, a) << what;
  EXPECT_EQ(m.end, a + pages) << what;
  EXPECT_EQ(a % (size_t{2} << 20), 0u) << what << ": 2 MiB-aligned";
  EXPECT_EQ(mapping_of(a - 1).perms, "---p") << what << ": the guard before it";
  EXPECT_EQ(mapping_of(a + pages).perms, "---p") << what << ": the guard after it";
}

TEST_F(AllocApi, GuardedMappingsAreReusedOnlyForGuardedRequestsAndResizedToThem) {
  constexpr size_t kSize = (size_t{3} << 20) + 100;
  char *a = static_cast<char *>(hm_tier_alloc(fast_, kSize, 0, HM_GUARDED | HM_ZERO));
  ASSERT_NE(a, nullptr) << hm_last_error();
  std::memset(a, 7, kSize);
  hm_free(a);
  char *plain = static_cast<char *>(hm_tier_alloc(fast_, kSize, 0, 0));
  ASSERT_NE(plain, nullptr);
  EXPECT_NE(plain, a) << "a guarded mapping given to an unguarded request";
  char *far = static_cast<char *>(hm_tier_alloc(fast_, 3 * kSize, 0, HM_GUARDED));
  ASSERT_NE(far, nullptr);
  EXPECT_NE(far, a) << "a guarded mapping given to a request more than twice its size";
  hm_free(far);
  char *again = static_cast<char *>(hm_tier_alloc(fast_, kSize - 50, 0, HM_GUARDED | HM_ZERO));
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again, a) << "the guarded mapping of the same page-rounded size was not reused";
  EXPECT_EQ(hm_usable_size(again), (kSize - 50 + 4095) / 4096 * 4096) << "the usable size of a fresh one";
  EXPECT_EQ(again[0], 0);
  EXPECT_EQ(again[kSize - 51], 0) << "HM_ZERO on a reused mapping";
  std::memset(again, 9, kSize - 50);
  hm_free(again);
  // Grown (an array copied into a larger one): the pages kept, the mapping still exactly its own.
  const size_t grown = kSize + (size_t{1} << 20) + 5000;
  char *bigger = static_cast<char *>(hm_tier_alloc(fast_, grown, 0, HM_GUARDED));
  ASSERT_NE(bigger, nullptr) << hm_last_error();
  EXPECT_EQ(bigger[0], 9) << "a grown mapping keeps its pages (none fresh, none copied)";
  EXPECT_EQ(bigger[kSize - 51], 9);
  expect_own_guarded_mapping(bigger, grown, "grown");
  std::memset(bigger, 3, grown);
  EXPECT_EQ(hm_usable_size(bigger), (grown + 4095) / 4096 * 4096);
  hm_free(bigger);
  // Shrunk: the tail returned, the page after the new end a guard.
  const size_t shrunk = grown - (size_t{1} << 20) - 8192;
  char *smaller = static_cast<char *>(hm_tier_alloc(fast_, shrunk, 0, HM_GUARDED | HM_ZERO));
  ASSERT_NE(smaller, nullptr) << hm_last_error();
  expect_own_guarded_mapping(smaller, shrunk, "shrunk");
  EXPECT_EQ(smaller[shrunk - 1], 0) << "HM_ZERO on a resized mapping";
  std::memset(smaller, 5, shrunk);
  // Grown where the address space right after it is taken: moved elsewhere, still its own.
  hm_free(smaller);
  const uintptr_t after = reinterpret_cast<uintptr_t>(smaller) + (shrunk + 4095) / 4096 * 4096 + 4096;
  void *blocker = mmap(reinterpret_cast<void *>(after), 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_NE(blocker, MAP_FAILED);
  char *moved = static_cast<char *>(hm_tier_alloc(fast_, shrunk + (size_t{1} << 20), 0, HM_GUARDED));
  ASSERT_NE(moved, nullptr) << hm_last_error();
  EXPECT_NE(moved, smaller) << "grown in place over a mapping that was there";
  EXPECT_EQ(moved[0], 5) << "a mapping moved to grow keeps its pages";
  EXPECT_EQ(moved[shrunk - 1], 5);
  EXPECT_EQ(mapping_of(reinterpret_cast<uintptr_t>(smaller)).start == reinterpret_cast<uintptr_t>(smaller), false)
      << "the old place is returned";
  expect_own_guarded_mapping(moved, shrunk + (size_t{1} << 20), "moved");
  munmap(blocker, 4096);
  for (char *p : {plain, moved}) hm_free(p);
}

// hm_realloc of a guarded block (the profiler's objects) grows it by moving its pages, as the C
// library grows a chunk it mapped: none copied, the contents kept, the new mapping exactly its own,
// the old range no longer hetmem's, and the tier's in_use the new size.
TEST_F(AllocApi, AGuardedBlockGrowsByMovingItsPages) {
  constexpr size_t kSize = (size_t{3} << 20) + 100, kGrown = (size_t{9} << 20) + 300;
  char *a = static_cast<char *>(hm_tier_alloc(fast_, kSize, 0, HM_GUARDED));
  ASSERT_NE(a, nullptr) << hm_last_error();
  for (size_t i = 0; i < kSize; i += 4096) a[i] = static_cast<char>(i / 4096);
  hm_tier_stats_t before, after;
  ASSERT_EQ(hm_tier_stats(fast_, &before), HM_OK);
  const uint64_t frame = physical_frame(a + 8192);
  char *b = static_cast<char *>(hm_realloc(a, kGrown));
  ASSERT_NE(b, nullptr) << hm_last_error();
  for (size_t i = 0; i < kSize; i += 4096) ASSERT_EQ(b[i], static_cast<char>(i / 4096)) << "lost at " << i;
  if (frame) {
    EXPECT_EQ(physical_frame(b + 8192), frame) << "the page moved, not copied";
  }
  EXPECT_EQ(hm_usable_size(b), (kGrown + 4095) / 4096 * 4096);
  expect_own_guarded_mapping(b, kGrown, "grown by realloc");
  if (b != a) {
    EXPECT_EQ(hm_owns(a), 0) << "the old range is no longer hetmem's";
  }
  EXPECT_EQ(hm_owns(b + kGrown - 1), 1);
  ASSERT_EQ(hm_tier_stats(fast_, &after), HM_OK);
  EXPECT_EQ(after.in_use - before.in_use, hm_usable_size(b) - (kSize + 4095) / 4096 * 4096);
  std::memset(b + kSize, 5, kGrown - kSize);  // the new part is usable
  hm_free(b);
  ASSERT_EQ(hm_tier_stats(fast_, &after), HM_OK);
  EXPECT_EQ(after.in_use + (kSize + 4095) / 4096 * 4096, before.in_use) << "freed whole";
}

TEST_F(AllocApi, CallocOverflowIsAnError) {
  EXPECT_EQ(hm_calloc(SIZE_MAX / 2, 4), nullptr);
  EXPECT_EQ(hm_last_error_code(), HM_EINVAL);
}

TEST_F(AllocApi, StatsResetKeepsInUse) {
  void *p = hm_malloc(5000);
  hm_stats_reset();
  hm_tier_stats_t s = hm_test::stats(fast_);
  EXPECT_EQ(s.allocs, 0u);
  EXPECT_EQ(s.high_water, s.in_use);
  EXPECT_GT(s.in_use, 0u);
  hm_free(p);
}

// A small block's page is carved into blocks as they are handed out: the first allocation of a
// size class touches the few blocks it and the thread's cache take, not the whole 64 KiB page (a
// short process allocating a few blocks of many sizes would otherwise fault in 64 KiB for each).
TEST_F(AllocApi, TheFirstBlockOfASizeClassTouchesFewPagesOfItsPage) {
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(thp, mode);
  if (mode.find("[always]") != std::string::npos)
    GTEST_SKIP() << "transparent huge pages are always on: the segment may be one huge page";
  constexpr size_t kPage = size_t{64} << 10;
  for (size_t size : {16, 48, 256, 1000}) {
    char *p = static_cast<char *>(hm_tier_alloc(fast_, size, 0, 0));
    ASSERT_NE(p, nullptr) << hm_last_error();
    p[0] = 1;
    void *page = reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(p) & ~(kPage - 1));
    unsigned char resident[kPage / 4096];
    ASSERT_EQ(mincore(page, kPage, resident), 0);
    int touched = 0;
    for (unsigned char r : resident) touched += r & 1;
    // The batch a thread cache takes is at most 16 KiB of blocks (heap.cpp): 4 pages, 5 when
    // the block straddles.
    EXPECT_LE(touched, 5) << size << "-byte blocks: " << touched << " of the page's 16 pages touched";
    hm_free(p);
  }
}

// Blocks of one size class start in many sets of the first-level cache (64-byte lines, 4 KiB per
// way), as the C library's do: a program that reads the first line of many blocks (sqlite reads
// the header of each 4368-byte page of its cache) misses when they share a few sets. Side by side
// in 64 KiB pages, 5120-byte blocks would start in 4 sets, and the same block of every page in one;
// each page's colour (heap.cpp) spreads them.
// A page of a size class whose blocks have all come back returns to its segment: a program that
// needed many blocks of one size and then as many of another holds the pages of one of them, not
// both (R builds vectors of every size, one after another).
TEST_F(AllocApi, APageWhoseBlocksAllComeBackServesAnotherClass) {
  // In a thread of its own each time: at its end its cache gives every block back.
  auto fill_and_free = [&](size_t size, size_t bytes) {
    std::thread([&] {
      std::vector<void *> blocks;
      for (size_t done = 0; done < bytes; done += size) {
        void *p = hm_tier_alloc(cap_, size, 0, 0);
        ASSERT_NE(p, nullptr) << hm_last_error();
        std::memset(p, 1, size);
        blocks.push_back(p);
      }
      for (void *p : blocks) hm_free(p);
    }).join();
  };
  fill_and_free(1000, size_t{6} << 20);  // 6 MiB of one class: three segments and more
  const uint64_t after_first = reserved();
  for (size_t size : {3000, 200, 9000, 500})  // as much of each of four other classes
    fill_and_free(size, size_t{6} << 20);
  EXPECT_EQ(reserved(), after_first) << "the other classes needed new segments: the first class's pages stayed its own";
  // The blocks are still good after their pages changed class.
  std::vector<void *> blocks;
  for (int i = 0; i < 1000; ++i) {
    blocks.push_back(hm_tier_alloc(cap_, 1000, 0, 0));
    ASSERT_NE(blocks.back(), nullptr);
    std::memset(blocks.back(), i & 0xff, 1000);
  }
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(static_cast<unsigned char *>(blocks[i])[999], i & 0xff);
    hm_free(blocks[i]);
  }
}

// A freed large mapping is kept for reuse: a smaller request takes its head, the next one its
// tail, and once both are freed the whole serves a request of its size again. No new mapping,
// no page faulted in again (numpy's arrays of varying sizes).
TEST_F(AllocApi, AFreedLargeMappingServesSmallerRequestsAndRejoins) {
  constexpr size_t MiB = size_t{1} << 20;
  char *whole = static_cast<char *>(hm_tier_alloc(cap_, 48 * MiB, 0, 0));
  ASSERT_NE(whole, nullptr) << hm_last_error();
  std::memset(whole, 7, 48 * MiB);
  hm_free(whole);
  const uint64_t before = reserved();
  char *head = static_cast<char *>(hm_tier_alloc(cap_, 7 * MiB + 100, 0, 0));
  char *tail = static_cast<char *>(hm_tier_alloc(cap_, 30 * MiB, 0, 0));
  ASSERT_NE(head, nullptr);
  ASSERT_NE(tail, nullptr);
  EXPECT_EQ(head, whole) << "the freed mapping's head serves the smaller request";
  EXPECT_EQ(tail, whole + 8 * MiB) << "its tail, from the next 2 MiB boundary, serves the next one";
  EXPECT_EQ(hm_usable_size(head), 7 * MiB + 4096);
  EXPECT_EQ(head[0], 7) << "the pages are the ones faulted in before";
  EXPECT_EQ(reserved(), before) << "no new mapping";
  std::memset(head, 1, 7 * MiB + 100);
  std::memset(tail, 2, 30 * MiB);
  hm_free(tail);
  hm_free(head);
  char *again = static_cast<char *>(hm_tier_alloc(cap_, 40 * MiB, 0, 0));
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again, whole) << "head and tail rejoined";
  EXPECT_EQ(reserved(), before);
  hm_free(again);
}

// A kept mapping smaller than a request no kept mapping serves is returned to the OS before the
// new one is made: a program whose arrays outgrow the ones it freed does not hold both (R's
// vectors). One that still serves smaller requests stays.
TEST_F(AllocApi, KeptMappingsARequestHasOutgrownAreReturnedBeforeANewOneIsMade) {
  constexpr size_t MiB = size_t{1} << 20;
  const uint64_t start = reserved();
  char *small = static_cast<char *>(hm_tier_alloc(cap_, 4 * MiB, 0, 0));
  char *large = static_cast<char *>(hm_tier_alloc(cap_, 16 * MiB, 0, 0));
  ASSERT_NE(small, nullptr) << hm_last_error();
  ASSERT_NE(large, nullptr) << hm_last_error();
  hm_free(small);
  hm_free(large);
  const uint64_t kept = reserved();
  EXPECT_GE(kept, start + 20 * MiB) << "both kept for reuse";

  // 8 MiB: the 16 MiB mapping's head serves it; the 4 MiB one is not in the way and stays.
  char *mid = static_cast<char *>(hm_tier_alloc(cap_, 8 * MiB, 0, 0));
  ASSERT_NE(mid, nullptr);
  EXPECT_EQ(mid, large);
  EXPECT_EQ(reserved(), kept) << "served by a kept mapping: nothing mapped, nothing returned";

  // 24 MiB: no kept mapping serves it (the 16 MiB one is now an 8 MiB head in use and its tail).
  // The 4 MiB and 8 MiB kept ones are returned, and 24 MiB mapped.
  char *grown = static_cast<char *>(hm_tier_alloc(cap_, 24 * MiB, 0, 0));
  ASSERT_NE(grown, nullptr) << hm_last_error();
  std::memset(grown, 3, 24 * MiB);
  EXPECT_EQ(reserved(), kept - 12 * MiB + 24 * MiB) << "the outgrown 4 and 8 MiB mappings returned";
  hm_free(mid);
  hm_free(grown);
}

TEST_F(AllocApi, BlocksOfAClassAndFirstBlocksOfClassesSpreadOverTheCacheSets) {
  auto set_of = [](const void *p) { return (reinterpret_cast<uintptr_t>(p) % 4096) / 64; };
  std::vector<void *> blocks;
  std::vector<bool> sets(64);
  for (int i = 0; i < 240; ++i) {  // 20 pages of the class
    void *p = hm_tier_alloc(fast_, 4368, 0, 0);
    ASSERT_NE(p, nullptr) << hm_last_error();
    sets[set_of(p)] = true;
    blocks.push_back(p);
  }
  int used = 0;
  for (bool b : sets) used += b;
  EXPECT_GE(used, 48) << "240 blocks of 4368 bytes start in " << used << " of the 64 sets";
  for (void *p : blocks) hm_free(p);

  // The first block of each of 12 classes of 300 bytes to 28 KiB (pages taken one after another).
  std::vector<bool> first_sets(64);
  for (size_t size : {300, 700, 1300, 1500, 2300, 2900, 3500, 4500, 6000, 7000, 11000, 28000}) {
    void *p = hm_tier_alloc(fast_, size, 0, 0);
    ASSERT_NE(p, nullptr) << hm_last_error();
    first_sets[set_of(p)] = true;
    blocks.push_back(p);
  }
  used = 0;
  for (bool b : first_sets) used += b;
  EXPECT_GE(used, 8) << "the first blocks of 12 classes start in " << used << " of the 64 sets";
  for (size_t i = 240; i < blocks.size(); ++i) hm_free(blocks[i]);
}
