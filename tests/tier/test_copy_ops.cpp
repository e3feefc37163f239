#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "hetmem/hetmem.h"
#include "tier/copy_ops.h"
#include "../support.h"

using namespace hm;

TEST(CopyOps, TableHasARowForEveryPairOfKinds) {
  for (int s = 0; s < HM_KIND_COUNT; ++s)
    for (int d = 0; d < HM_KIND_COUNT; ++d)
      EXPECT_NE(copy_op(static_cast<hm_tier_kind_t>(s), static_cast<hm_tier_kind_t>(d)), nullptr) << s << "->" << d;
}

TEST(CopyOps, FastCopyIsExactAtEverySizeAndOffset) {
  set_nt_threshold(4096);  // exercise the streaming path on small buffers too
  std::vector<unsigned char> src(1 << 20), dst((1 << 20) + 256);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, size_t{4097}, size_t{100000}, size_t{1} << 20})
    for (size_t off : {size_t{0}, size_t{1}, size_t{33}}) {
      if (off + n > src.size()) continue;
      std::memset(dst.data(), 0, dst.size());
      fast_copy(dst.data() + off, src.data(), n);
      EXPECT_EQ(std::memcmp(dst.data() + off, src.data(), n), 0) << n << "@" << off;
      EXPECT_EQ(dst[off + n], 0) << "no write past the end";
    }
  set_nt_threshold(size_t{8} << 20);
}

TEST(CopyOps, CopyOutOfEmulatedTierIsCharged) {
  ASSERT_EQ(hm_test::configure("capacity=emul:optane"), HM_OK);
  hm_tier_t cap = hm_test::tier("capacity"), fast = hm_test::tier("fast");
  size_t n = 16 << 20;
  char *slow = static_cast<char *>(hm_tier_alloc(cap, n, 0, 0));
  char *quick = static_cast<char *>(hm_tier_alloc(fast, n, 0, 0));
  ASSERT_TRUE(slow && quick);
  std::memset(slow, 3, n);
  uint64_t before = hm_test::stats(cap).emul_charged_ns;
  ASSERT_EQ(hm_copy(quick, slow, n), HM_OK);
  EXPECT_EQ(quick[n - 1], 3);
  EXPECT_GT(hm_test::stats(cap).emul_charged_ns, before) << "reading the emulated tier is charged";
  EXPECT_EQ(hm_test::stats(fast).emul_charged_ns, 0u);
  EXPECT_EQ(hm_test::stats(fast).bytes_copied_in, n);
  std::vector<char> host(n);
  ASSERT_EQ(hm_copy(host.data(), quick, n), HM_OK) << "memory hetmem does not own counts as DRAM";
  EXPECT_EQ(host[12345], 3);
  EXPECT_EQ(hm_copy(nullptr, quick, 1), HM_EINVAL);
  hm_free(slow);
  hm_free(quick);
}
