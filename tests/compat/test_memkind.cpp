// hetmem's libmemkind: the kinds land on the tiers of the table (docs/memkind.md), the C library
// keeps MEMKIND_DEFAULT, unavailable kinds say so with memkind's errors, and memkind's own rules
// (hbw_set_policy once, before any allocation) hold. The tiers are the test defaults: fast = DRAM,
// capacity = the emulated Optane tier.
#include <errno.h>
#include <malloc.h>
#include <gtest/gtest.h>
#include <hetmem/hetmem.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hetmem/memkind/hbwmalloc.h"
#include "hetmem/memkind/memkind.h"

namespace {

hm_tier_t role(hm_role_t r) {
  hm_tier_t t = -1;
  EXPECT_EQ(hm_role_tier(r, &t), HM_OK);
  return t;
}

hm_tier_t tier_of(const void *p) {
  hm_tier_t t = -1;
  return hm_ptr_tier(p, &t) == HM_OK ? t : -1;
}

}  // namespace

TEST(Memkind, HbwPolicyIsSetOnceBeforeTheFirstAllocation) {
  // First in this binary: no hbw allocation has happened yet.
  EXPECT_EQ(hbw_get_policy(), HBW_POLICY_PREFERRED) << "the default";
  EXPECT_EQ(hbw_set_policy(static_cast<hbw_policy_t>(7)), EINVAL);
  EXPECT_EQ(hbw_set_policy(HBW_POLICY_BIND), 0);
  EXPECT_EQ(hbw_set_policy(HBW_POLICY_PREFERRED), EPERM) << "only once";
  EXPECT_EQ(hbw_get_policy(), HBW_POLICY_BIND);
  void *p = hbw_malloc(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(tier_of(p), role(HM_FAST));
  hbw_free(p);
}

TEST(Memkind, KindsLandOnTheirTiers) {
  ASSERT_EQ(hm_init(), HM_OK) << hm_last_error();
  const hm_tier_t fast = role(HM_FAST), capacity = role(HM_CAPACITY);
  ASSERT_NE(fast, capacity) << "the tests run with a capacity tier apart from DRAM";
  struct Case {
    memkind_t kind;
    hm_tier_t tier;
  } cases[] = {{MEMKIND_HBW, fast},          {MEMKIND_HBW_PREFERRED, fast},      {MEMKIND_HBW_ALL, fast},
               {MEMKIND_HBW_INTERLEAVE, fast}, {MEMKIND_REGULAR, fast},          {MEMKIND_DAX_KMEM, capacity},
               {MEMKIND_DAX_KMEM_ALL, capacity}, {MEMKIND_DAX_KMEM_PREFERRED, capacity},
               {MEMKIND_HIGHEST_CAPACITY, capacity}, {MEMKIND_LOWEST_LATENCY_LOCAL, fast},
               {MEMKIND_HIGHEST_BANDWIDTH_LOCAL, fast}};
  for (const Case &c : cases) {
    EXPECT_EQ(memkind_check_available(c.kind), 0);
    hm_tier_stats_t before, after;
    hm_tier_stats(c.tier, &before);
    auto *p = static_cast<char *>(memkind_malloc(c.kind, 1 << 20));
    ASSERT_NE(p, nullptr) << hm_last_error();
    std::memset(p, 7, 1 << 20);
    EXPECT_EQ(tier_of(p), c.tier);
    hm_tier_stats(c.tier, &after);
    EXPECT_GE(after.in_use - before.in_use, uint64_t{1} << 20) << "counted by hetmem";
    EXPECT_GE(memkind_malloc_usable_size(c.kind, p), size_t{1} << 20);
    EXPECT_EQ(memkind_detect_kind(p) != MEMKIND_DEFAULT, true);
    memkind_free(nullptr, p);  // no kind named: found from the pointer
  }
}

TEST(Memkind, DefaultIsTheCLibraryAndEveryFreeFindsItsAllocator) {
  void *d = memkind_malloc(MEMKIND_DEFAULT, 100);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(hm_owns(d), 0) << "MEMKIND_DEFAULT stays the C library's";
  EXPECT_EQ(memkind_detect_kind(d), MEMKIND_DEFAULT);
  void *h = memkind_malloc(MEMKIND_DAX_KMEM, 100);
  ASSERT_NE(h, nullptr);
  memkind_free(MEMKIND_DAX_KMEM, d);  // the wrong kind: still freed by malloc's free
  memkind_free(MEMKIND_DEFAULT, h);   // and this one by hetmem
  void *m = std::malloc(64);
  memkind_free(nullptr, m);
  memkind_free(MEMKIND_HBW, nullptr);
}

TEST(Memkind, ALargeDefaultBlockFreedIsReusedAndStaysTheCLibrarys) {
  constexpr size_t kBig = size_t{64} << 20;  // beyond the C library's largest mmap threshold
  auto *a = static_cast<unsigned char *>(memkind_malloc(MEMKIND_DEFAULT, kBig));
  ASSERT_NE(a, nullptr);
  std::memset(a, 7, kBig);
  memkind_free(MEMKIND_DEFAULT, a);
  auto *b = static_cast<unsigned char *>(memkind_malloc(MEMKIND_DEFAULT, kBig - 4096));
  ASSERT_EQ(b, a);
  EXPECT_EQ(b[0] + b[kBig - 4097], 14) << "the block freed was kept and handed out again with its pages (a fresh "
                                          "mapping would read zero)";
  EXPECT_EQ(hm_owns(b), 0) << "still the C library's block";
  EXPECT_EQ(memkind_detect_kind(b), MEMKIND_DEFAULT);
  EXPECT_GE(memkind_malloc_usable_size(MEMKIND_DEFAULT, b), kBig - 4096);
  // calloc never gets a kept block with its old bytes.
  auto *z = static_cast<unsigned char *>(memkind_calloc(MEMKIND_DEFAULT, 1, kBig));
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z[0] + z[kBig / 2] + z[kBig - 1], 0);
  // A kept block is a C library block: free() and realloc() take it as the C library's own.
  std::free(z);
  auto *c = static_cast<unsigned char *>(memkind_realloc(MEMKIND_DEFAULT, b, 2 * kBig));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c[kBig - 4097], 7) << "realloc keeps the data";
  memkind_free(MEMKIND_DEFAULT, c);
  // Too small to be kept: freed at once; a half-size request does not take a block twice its size.
  void *small = memkind_malloc(MEMKIND_DEFAULT, 1 << 20);
  memkind_free(nullptr, small);
  void *half = memkind_malloc(MEMKIND_DEFAULT, kBig / 2);
  ASSERT_NE(half, nullptr);
  EXPECT_NE(half, c);
  memkind_free(nullptr, half);
}

// Small default blocks are kept by the thread that freed them, as memkind's jemalloc keeps them in
// its thread cache: the next request of the same size class gets the same block, and it is still
// the C library's.
TEST(Memkind, ASmallDefaultBlockFreedIsReusedByItsThreadAndStaysTheCLibrarys) {
  for (size_t size : {size_t{1}, size_t{64}, size_t{100}, size_t{129}, size_t{1000}, size_t{4096}, size_t{5000},
                      size_t{20000}, size_t{32} << 10}) {
    auto *a = static_cast<unsigned char *>(memkind_malloc(MEMKIND_DEFAULT, size));
    ASSERT_NE(a, nullptr);
    std::memset(a, 7, size);
    memkind_free(MEMKIND_DEFAULT, a);
    auto *b = static_cast<unsigned char *>(memkind_malloc(MEMKIND_DEFAULT, size));
    EXPECT_EQ(b, a) << size << " B: the block freed is handed out again";
    EXPECT_EQ(hm_owns(b), 0) << "still the C library's block";
    EXPECT_GE(malloc_usable_size(b), size) << "a kept block holds the whole request";
    memkind_free(nullptr, b);
    auto *z = static_cast<unsigned char *>(memkind_calloc(MEMKIND_DEFAULT, 1, size));
    ASSERT_EQ(z, a) << size << " B: calloc takes the kept block too";
    for (size_t i = 0; i < size; ++i) ASSERT_EQ(z[i], 0) << "calloc clears a kept block, byte " << i;
    std::free(z);  // the C library frees it
  }
  // A block serves only requests it holds whole: a freed 1000-byte block is not a 2000-byte one.
  void *small = memkind_malloc(MEMKIND_DEFAULT, 1000);
  memkind_free(MEMKIND_DEFAULT, small);
  void *larger = memkind_malloc(MEMKIND_DEFAULT, 2000);
  ASSERT_NE(larger, nullptr);
  EXPECT_GE(malloc_usable_size(larger), 2000u);
  std::memset(larger, 1, 2000);
  memkind_free(MEMKIND_DEFAULT, larger);
  // realloc of a kept block handed out again works as on any C library block.
  auto *r = static_cast<unsigned char *>(memkind_malloc(MEMKIND_DEFAULT, 1000));
  std::memset(r, 5, 1000);
  r = static_cast<unsigned char *>(memkind_realloc(MEMKIND_DEFAULT, r, 100000));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r[999], 5);
  memkind_free(MEMKIND_DEFAULT, r);
}

// What a thread keeps goes back to the C library when the thread ends: blocks made here and freed
// by another thread are the C library's in-use bytes again once that thread has ended.
TEST(Memkind, AThreadsKeptDefaultBlocksAreFreedWhenItEnds) {
  constexpr int kBlocks = 16;
  constexpr size_t kSize = 16 << 10;
  const size_t before = mallinfo2().uordblks;
  std::vector<void *> blocks;
  for (int i = 0; i < kBlocks; ++i) blocks.push_back(memkind_malloc(MEMKIND_DEFAULT, kSize));
  EXPECT_GE(mallinfo2().uordblks, before + kBlocks * kSize);
  std::thread freer([&blocks] {
    for (void *p : blocks) memkind_free(MEMKIND_DEFAULT, p);
  });
  freer.join();
  blocks.clear();
  blocks.shrink_to_fit();
  EXPECT_LE(mallinfo2().uordblks, before + 4096) << "the ended thread's kept blocks were freed";
}

TEST(Memkind, CallocReallocAndAlignment) {
  auto *z = static_cast<unsigned char *>(memkind_calloc(MEMKIND_DAX_KMEM, 1000, 8));
  ASSERT_NE(z, nullptr);
  for (int i = 0; i < 8000; ++i) ASSERT_EQ(z[i], 0);
  EXPECT_EQ(memkind_calloc(MEMKIND_DAX_KMEM, SIZE_MAX / 2, 4), nullptr) << "overflow is refused";
  std::memset(z, 3, 8000);
  auto *bigger = static_cast<unsigned char *>(memkind_realloc(MEMKIND_DAX_KMEM, z, 1 << 20));
  ASSERT_NE(bigger, nullptr);
  EXPECT_EQ(bigger[7999], 3);
  EXPECT_EQ(tier_of(bigger), role(HM_CAPACITY));
  auto *moved = static_cast<unsigned char *>(memkind_realloc(MEMKIND_HBW, bigger, 1 << 20));
  ASSERT_NE(moved, nullptr);
  EXPECT_EQ(moved[7999], 3);
  EXPECT_EQ(tier_of(moved), role(HM_FAST)) << "realloc to another kind moves the data there";
  EXPECT_EQ(memkind_realloc(MEMKIND_HBW, moved, 0), nullptr);
  void *a = nullptr;
  EXPECT_EQ(memkind_posix_memalign(MEMKIND_DAX_KMEM, &a, 4096, 100), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 4096, 0u);
  memkind_free(nullptr, a);
  EXPECT_EQ(memkind_posix_memalign(MEMKIND_DAX_KMEM, &a, 24, 100), EINVAL);
  EXPECT_EQ(a, nullptr);
  EXPECT_EQ(hbw_posix_memalign(&a, 3, 100), EINVAL);
  EXPECT_EQ(hbw_posix_memalign_psize(&a, 64, 100, static_cast<hbw_pagesize_t>(9)), EINVAL);
}

TEST(Memkind, UnavailableKindsAndBadArgumentsGetMemkindsErrors) {
  // No hugetlb pool reserved in the tests (HM_HUGETLB_POOL unset): the huge kinds are unavailable.
  EXPECT_EQ(memkind_check_available(MEMKIND_HUGETLB), MEMKIND_ERROR_HUGETLB);
  EXPECT_EQ(memkind_malloc(MEMKIND_HBW_HUGETLB, 100), nullptr);
  EXPECT_EQ(memkind_check_available(nullptr), MEMKIND_ERROR_INVALID);
  char msg[MEMKIND_ERROR_MESSAGE_SIZE];
  memkind_error_message(MEMKIND_ERROR_HUGETLB, msg, sizeof msg);
  EXPECT_NE(std::string(msg).find("HM_HUGETLB_POOL"), std::string::npos) << msg;
  memkind_t pmem = nullptr;
  EXPECT_EQ(memkind_create_pmem("/nonexistent-dir", 0, &pmem), MEMKIND_ERROR_INVALID);
  EXPECT_EQ(memkind_create_pmem("/tmp", MEMKIND_PMEM_MIN_SIZE - 1, &pmem), MEMKIND_ERROR_INVALID);
  EXPECT_EQ(memkind_create_pmem("/tmp", 0, &pmem), MEMKIND_ERROR_MEMTYPE_NOT_AVAILABLE)
      << "no file tier in /tmp: not a silent substitute";
  EXPECT_EQ(pmem, nullptr);
  EXPECT_EQ(memkind_destroy_kind(MEMKIND_HBW), MEMKIND_ERROR_OPERATION_FAILED);
  EXPECT_EQ(memkind_get_version(), 1014000);
  EXPECT_EQ(hbw_check_available(), 0);
  int x = 0;
  EXPECT_EQ(hbw_verify_memory_region(&x, sizeof x, 0), EFAULT) << "not hetmem's memory";
  EXPECT_EQ(hbw_verify_memory_region(nullptr, 8, 0), EINVAL);
  void *p = hbw_malloc(4096);
  EXPECT_EQ(hbw_verify_memory_region(p, 4096, 0), 0);
  void *c = memkind_malloc(MEMKIND_DAX_KMEM, 4096);
  EXPECT_EQ(hbw_verify_memory_region(c, 4096, 0), -1);
  hbw_free(p);
  memkind_free(nullptr, c);
}

// memkind_create_pmem's max_size holds: the kind's allocations fail past it, and succeed again once
// freed. Needs a file tier (the compat.pmem test runs this with one in HM_TIERS).
TEST(Memkind, APmemKindHoldsItsSizeLimit) {
  std::string dir;
  for (int t = 0; t < hm_tier_count(); ++t) {
    hm_tier_info_t info;
    if (hm_tier_info(t, &info) == HM_OK && info.kind == HM_KIND_FILE) {
      std::string path = info.name + sizeof "file:" - 1;
      dir = path.substr(0, path.rfind('/'));
    }
  }
  if (dir.empty()) GTEST_SKIP() << "no file tier in HM_TIERS (ctest's compat.pmem gives one)";
  constexpr size_t kLimit = size_t{32} << 20, kBlock = size_t{1} << 20;
  memkind_t pmem = nullptr;
  ASSERT_EQ(memkind_create_pmem(dir.c_str(), kLimit, &pmem), 0);
  std::vector<void *> blocks;
  for (int i = 0; i < 64; ++i) {
    void *p = memkind_malloc(pmem, kBlock);
    if (!p) break;
    blocks.push_back(p);
  }
  EXPECT_LE(blocks.size() * kBlock, kLimit) << "past the kind's max_size";
  EXPECT_GE(blocks.size() * kBlock, kLimit - 4 * kBlock) << "well short of the kind's max_size";
  EXPECT_EQ(memkind_malloc(pmem, kBlock), nullptr);
  for (void *p : blocks) memkind_free(pmem, p);
  void *again = memkind_malloc(pmem, kBlock);
  EXPECT_NE(again, nullptr) << "the freed bytes are the kind's again";
  memkind_free(pmem, again);
  EXPECT_EQ(memkind_destroy_kind(pmem), 0);
}
