#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "hetmem/hetmem.h"
#include "prim/prim.h"
#include "../support.h"

namespace {

using hm_test::smaps_of;

// Reserves `pages` free huge pages of `page_size` for the test when the kernel has too few (root
// only), and gives the machine its old setting back afterwards.
class HugePageReservation {
 public:
  HugePageReservation(unsigned pages, size_t page_size = hm::prim::kHugePage2M)
      : page_size_(page_size),
        path_("/sys/kernel/mm/hugepages/hugepages-" + std::to_string(page_size >> 10) + "kB/nr_hugepages") {
    if (hm::prim::hugetlb_free_pages(page_size_) >= pages) return;
    std::ifstream(path_) >> old_;
    if (old_ < 0) return;
    std::ofstream(path_) << old_ + pages;
    changed_ = true;
  }
  ~HugePageReservation() {
    if (changed_) std::ofstream(path_) << old_;
  }
  bool ok(unsigned pages) const { return hm::prim::hugetlb_free_pages(page_size_) >= pages; }
  bool page_size_exists() const { return std::ifstream(path_).good(); }

 private:
  size_t page_size_;
  std::string path_;
  long old_ = -1;
  bool changed_ = false;
};

}  // namespace

TEST(HugePages, PoolServesLargeAllocationsFirstFit) {
  HugePageReservation reservation(8);
  if (!reservation.ok(8))
    GTEST_SKIP() << "no free 2 MiB hugetlb pages and /proc/sys/vm/nr_hugepages is not writable";
  ASSERT_EQ(hm_test::configure("", "HM_HUGETLB_POOL", "16M"), HM_OK);
  hm_tier_t fast = hm_test::tier("fast");
  void *a = hm_alloc(HM_FAST, 4 << 20, 0, 0);
  void *b = hm_alloc(HM_FAST, 3 << 20, 0, 0);  // rounds to 4 MiB of pages
  ASSERT_TRUE(a && b);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % (2 << 20), 0u);
  EXPECT_EQ(static_cast<char *>(b) - static_cast<char *>(a), 4 << 20) << "first fit: b follows a";
  std::memset(a, 1, 4 << 20);
  EXPECT_EQ(hm_test::stats(fast).huge_bytes, (4u << 20) + (3u << 20));
  EXPECT_NE(smaps_of(a).find("KernelPageSize:     2048 kB"), std::string::npos) << smaps_of(a);
  hm_free(a);
  void *c = hm_alloc(HM_FAST, 2 << 20, 0, 0);
  EXPECT_EQ(c, a) << "the freed run is reused first";
  void *big = hm_alloc(HM_FAST, 12 << 20, 0, 0);  // does not fit the rest of the pool: THP fallback
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(hm_test::stats(fast).huge_bytes, (2u << 20) + (3u << 20));
  void *small = hm_alloc(HM_FAST, 1 << 20, 0, 0);
  EXPECT_FALSE(small >= a && small < static_cast<char *>(a) + (16 << 20)) << "below 2 MiB: not from the pool";
  for (void *p : {b, c, big, small}) hm_free(p);
  EXPECT_EQ(hm_test::stats(fast).huge_bytes, 0u);
  hm_finalize();
}

TEST(HugePages, TransparentHugePagesWhenNoPool) {
  if (!hm::prim::thp_available()) GTEST_SKIP() << "transparent huge pages are disabled on this kernel";
  ASSERT_EQ(hm_test::configure(""), HM_OK);
  void *p = hm_alloc(HM_FAST, 8 << 20, 0, 0);
  ASSERT_NE(p, nullptr);
  EXPECT_NE(smaps_of(p).find(" hg"), std::string::npos) << "madvise(MADV_HUGEPAGE) set:\n" << smaps_of(p);
  void *q = hm_alloc(HM_FAST, 8 << 20, 0, HM_NO_HUGE);
  EXPECT_EQ(smaps_of(q).find(" hg"), std::string::npos) << "HM_NO_HUGE respected";
  hm_free(p);
  hm_free(q);
  hm_finalize();
}

TEST(HugePages, AnObjectOfHalfAGibibyteOrMoreKeepsItsEndsInSmallPages) {
  // A program that writes two elements of a huge array (numpy's np.empty, then a[0] and a[-1])
  // faults two 4 KiB pages, as with the C library's mapping, not two 2 MiB pages zeroed.
  if (!hm::prim::thp_available()) GTEST_SKIP() << "transparent huge pages are disabled on this kernel";
  ASSERT_EQ(hm_test::configure(""), HM_OK);
  const size_t bytes = size_t{512} << 20, unit = hm::prim::kHugePage2M;
  char *p = static_cast<char *>(hm_alloc(HM_FAST, bytes, 0, 0));
  ASSERT_NE(p, nullptr);  // MAP_NORESERVE: nothing is faulted in below but two pages
  p[0] = 1;
  p[bytes - 1] = 1;
  EXPECT_EQ(smaps_of(p).find(" hg"), std::string::npos) << "first 2 MiB:\n" << smaps_of(p);
  EXPECT_NE(smaps_of(p).find(" nh"), std::string::npos) << "first 2 MiB:\n" << smaps_of(p);
  EXPECT_NE(smaps_of(p + unit).find(" hg"), std::string::npos) << "interior:\n" << smaps_of(p + unit);
  EXPECT_NE(smaps_of(p + bytes - unit - 1).find(" hg"), std::string::npos) << smaps_of(p + bytes - unit - 1);
  EXPECT_EQ(smaps_of(p + bytes - 1).find(" hg"), std::string::npos) << "last 2 MiB:\n" << smaps_of(p + bytes - 1);
  EXPECT_NE(smaps_of(p).find("AnonHugePages:         0 kB"), std::string::npos) << smaps_of(p);
  EXPECT_NE(smaps_of(p + bytes - 1).find("AnonHugePages:         0 kB"), std::string::npos);
  // Below that size the whole object is advised, ends included.
  char *q = static_cast<char *>(hm_alloc(HM_FAST, bytes - unit, 0, 0));
  ASSERT_NE(q, nullptr);
  EXPECT_NE(smaps_of(q).find(" hg"), std::string::npos) << smaps_of(q);
  EXPECT_NE(smaps_of(q + bytes - unit - 1).find(" hg"), std::string::npos);
  hm_free(p);
  hm_free(q);
  hm_finalize();
}

TEST(HugePages, MissingPoolFallsBackQuietly) {
  // Ask for far more hugetlb memory than any machine here reserves: hetmem falls back to THP.
  ASSERT_EQ(hm_test::configure("", "HM_HUGETLB_POOL", "64T"), HM_OK);
  void *p = hm_alloc(HM_FAST, 4 << 20, 0, 0);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(hm_test::stats(hm_test::tier("fast")).huge_bytes, 0u);
  hm_free(p);
  hm_finalize();
}

TEST(HugePages, OneGigabytePagesWhenTheMachineHasThem) {
  HugePageReservation reservation(1, hm::prim::kHugePage1G);
  if (!reservation.page_size_exists()) GTEST_SKIP() << "this CPU or kernel has no 1 GiB pages";
  if (!reservation.ok(1))
    GTEST_SKIP() << "the kernel could not reserve a 1 GiB page (memory too fragmented, or not root)";
  ASSERT_EQ(hm_test::configure("", "HM_HUGETLB_1G", "1G"), HM_OK);
  void *p = hm_alloc(HM_FAST, size_t{1} << 30, 0, 0);
  ASSERT_NE(p, nullptr) << hm_last_error();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t{1} << 30), 0u);
  static_cast<char *>(p)[0] = 1;
  EXPECT_EQ(hm_test::stats(hm_test::tier("fast")).huge_bytes, size_t{1} << 30);
  EXPECT_NE(smaps_of(p).find("KernelPageSize:  1048576 kB"), std::string::npos) << smaps_of(p);
  hm_free(p);
  hm_finalize();
}
