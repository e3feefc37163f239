#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "hetmem/hetmem.h"
#include "prim/prim.h"
#include "../support.h"

using namespace hm;

TEST(Prim, MapAnonIsAlignedAndZeroed) {
  for (size_t align : {size_t{4096}, size_t{2} << 20, size_t{64} << 20}) {
    void *p = nullptr;
    ASSERT_EQ(prim::map_anon(3 << 20, align, 0, &p), HM_OK);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u) << "align " << align;
    EXPECT_EQ(static_cast<char *>(p)[12345], 0);
    std::memset(p, 7, 3 << 20);
    EXPECT_EQ(prim::unmap(p, 3 << 20), HM_OK);
  }
}

namespace {
size_t mapping_count() {
  std::ifstream maps("/proc/self/maps");
  size_t n = 0;
  for (std::string line; std::getline(maps, line);) ++n;
  return n;
}
}  // namespace

TEST(Prim, ThreadBlocksAreZeroedPerThreadAndGoWithTheirThread) {
  static prim::ThreadBlockKey key;
  char *mine = static_cast<char *>(prim::thread_block(&key, 600));
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(mine[0], 0);
  EXPECT_EQ(mine[599], 0);
  std::memset(mine, 1, 600);
  char *other = nullptr;
  std::thread([&] {
    other = static_cast<char *>(prim::thread_block(&key, 600));
    ASSERT_NE(other, nullptr);
    EXPECT_EQ(other[0], 0) << "another thread's block is its own, zeroed";
  }).join();
  EXPECT_NE(other, mine);
  // Threads that end return their blocks: a hundred of them leave no mapping behind.
  for (int warm = 0; warm < 2; ++warm) std::thread([] { prim::thread_block(&key, 600); }).join();
  const size_t before = mapping_count();
  for (int i = 0; i < 100; ++i) std::thread([] { ASSERT_NE(prim::thread_block(&key, 600), nullptr); }).join();
  EXPECT_LE(mapping_count(), before + 2);
}

TEST(Prim, PopulateWriteGivesEveryPageItsOwnZeroedFrameInOneCall) {
  constexpr size_t kPages = 64, kBytes = kPages * prim::kPageSize;
  void *p = nullptr;
  ASSERT_EQ(prim::map_anon(kBytes, prim::kPageSize, 0, &p), HM_OK);
  prim::advise_huge(p, kBytes, false);
  ASSERT_EQ(prim::populate_write(p, kBytes), HM_OK);
  // Resident and writable already: touching them again faults nothing (a read-only zero page
  // would fault on the write).
  std::vector<unsigned char> resident(kPages);
  ASSERT_EQ(mincore(p, kBytes, resident.data()), 0);
  for (size_t i = 0; i < kPages; ++i) EXPECT_TRUE(resident[i] & 1) << "page " << i;
  auto minor_faults = [] {
    rusage u{};
    getrusage(RUSAGE_THREAD, &u);
    return u.ru_minflt;
  };
  const long before = minor_faults();
  auto *c = static_cast<volatile char *>(p);
  for (size_t off = 0; off < kBytes; off += prim::kPageSize) {
    EXPECT_EQ(c[off], 0);
    c[off] = 1;
  }
  EXPECT_EQ(minor_faults(), before);
  EXPECT_EQ(prim::unmap(p, kBytes), HM_OK);
}

TEST(Prim, MapAnonRejectsZeroSize) {
  void *p = nullptr;
  EXPECT_EQ(prim::map_anon(0, 4096, 0, &p), HM_EINVAL);
}

TEST(Prim, PageNodeOfTouchedPage) {
  void *p = nullptr;
  ASSERT_EQ(prim::map_anon(4096, 4096, 0, &p), HM_OK);
  static_cast<char *>(p)[0] = 1;
  int node = -1;
  ASSERT_EQ(prim::page_node(p, &node), HM_OK);
  EXPECT_GE(node, 0);
  EXPECT_LT(node, prim::numa_node_count());
  prim::unmap(p, 4096);
}

TEST(Prim, BindToLocalNodeAndMove) {
  void *p = nullptr;
  ASSERT_EQ(prim::map_anon(1 << 20, 4096, 0, &p), HM_OK);
  std::memset(p, 1, 1 << 20);
  int node = prim::current_node();
  if (prim::numa_node_count() > 1 || prim::numa_available()) {
    EXPECT_EQ(prim::bind_node(p, 1 << 20, node, true), HM_OK);
    int where = -1;
    ASSERT_EQ(prim::page_node(p, &where), HM_OK);
    EXPECT_EQ(where, node);
  }
  prim::unmap(p, 1 << 20);
}

TEST(Prim, PoolFileCreateGrowAndErrors) {
  std::string path = hm_test::temp_path("prim-pool");
  int fd = -1;
  uint64_t size = 0;
  ASSERT_EQ(prim::open_pool_file(path, 4 << 20, &fd, &size), HM_OK);
  EXPECT_EQ(size, 4u << 20);
  prim::close_fd(fd);
  ASSERT_EQ(prim::open_pool_file(path, 0, &fd, &size), HM_OK) << "an existing file keeps its size";
  EXPECT_EQ(size, 4u << 20);
  prim::close_fd(fd);
  unlink(path.c_str());
  EXPECT_EQ(prim::open_pool_file("/nonexistent-dir/x/pool", 1 << 20, &fd, &size), HM_EIO);
  std::string empty = hm_test::temp_path("prim-empty");
  EXPECT_EQ(prim::open_pool_file(empty, 0, &fd, &size), HM_EINVAL) << "a new empty file needs a size";
  unlink(empty.c_str());
}

// A file written again under its name is a new file: a reader that holds the old one keeps what it
// had (it is not truncated under it), the name gets only the new contents, and a symbolic link is
// written through to its target, not replaced.
TEST(Prim, AppendFileReplacesAnOlderFileAndWritesThroughALink) {
  const std::string path = hm_test::temp_path("prim-append"), link = path + ".link";
  auto write = [](const std::string &at, const std::string &text) {
    prim::AppendFile f;
    ASSERT_EQ(f.create(at), HM_OK);
    prim::Piece piece{text.data(), text.size()};
    ASSERT_EQ(f.write(&piece, 1), HM_OK);
    f.close();
  };
  auto contents = [](const std::string &at) {
    std::string text;
    EXPECT_TRUE(prim::read_text(at, &text)) << at;
    return text;
  };
  write(path, "the first trace, longer than the second");
  std::ifstream old(path);
  write(path, "second");
  EXPECT_EQ(contents(path), "second");
  std::string kept;
  std::getline(old, kept);
  EXPECT_EQ(kept, "the first trace, longer than the second") << "a reader of the older file lost it";
  ASSERT_EQ(symlink(path.c_str(), link.c_str()), 0);
  write(link, "third");
  struct stat st;
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link was replaced";
  EXPECT_EQ(contents(path), "third");
  unlink(link.c_str());
  unlink(path.c_str());
}

TEST(Prim, RemapFixedMovesContents) {
  void *a = nullptr, *b = nullptr;
  ASSERT_EQ(prim::map_anon(1 << 20, 4096, 0, &a), HM_OK);
  ASSERT_EQ(prim::map_anon(1 << 20, 4096, 0, &b), HM_OK);
  std::memset(a, 0x5a, 1 << 20);
  ASSERT_EQ(prim::remap_fixed(a, 1 << 20, b), HM_OK);
  EXPECT_EQ(static_cast<unsigned char *>(b)[777], 0x5a);
  prim::unmap(b, 1 << 20);
}

TEST(Prim, SpinWaitsAtLeastTheDeadline) {
  uint64_t t0 = prim::now_ns();
  prim::spin_until_ns(t0 + 2'000'000);
  EXPECT_GE(prim::now_ns() - t0, 2'000'000u);
}

TEST(Prim, ReadTextReadsEveryByteOfFilesOfEverySize) {
  const std::string path = hm_test::temp_path("prim-read-text");
  // Around the first read's stack buffer (512 bytes) and the pieces after it.
  for (size_t size : {size_t{0}, size_t{1}, size_t{511}, size_t{512}, size_t{513}, size_t{4096 + 512},
                      size_t{3 * 4096 + 700}}) {
    std::string written(size, '\0');
    for (size_t i = 0; i < size; ++i) written[i] = static_cast<char>('a' + (i * 7) % 26);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << written;
    std::string text = "left from before";
    ASSERT_TRUE(prim::read_text(path, &text)) << size;
    EXPECT_EQ(text, written) << size;
    ASSERT_TRUE(prim::read_text(path, &text, 100)) << size;  // pieces smaller than the first read
    EXPECT_EQ(text, written) << size;
  }
  std::string text;
  EXPECT_FALSE(prim::read_text(path + ".absent", &text));
  std::remove(path.c_str());
}

TEST(Prim, SplitGivesThePiecesGetlineWould) {
  using V = std::vector<std::string>;
  EXPECT_EQ(prim::split("a\n\nb\n", '\n'), (V{"a", "", "b"}));
  EXPECT_EQ(prim::split("a,b", ','), (V{"a", "b"}));
  EXPECT_EQ(prim::split(",x,", ','), (V{"", "x"}));
  EXPECT_EQ(prim::split("", ','), V{});
  EXPECT_EQ(prim::split("one", ','), V{"one"});
}

TEST(Prim, WordsAreWhatWhitespaceSeparates) {
  using V = std::vector<std::string>;
  EXPECT_EQ(prim::words(" size  >=\t2M\r\n"), (V{"size", ">=", "2M"}));
  EXPECT_EQ(prim::words("all"), V{"all"});
  EXPECT_EQ(prim::words(" \t "), V{});
  EXPECT_EQ(prim::words(""), V{});
}

TEST(Prim, NumbersAreWrittenShortestAndReadBackExactly) {
  for (double x : {0.0, -0.0, 1.0, 10000.0, 0.1, 1.0 / 3, -2.5e-300, 6.02214076e23, 1e21, 123456.789, 4.9e-324,
                   1.7976931348623157e308}) {
    const std::string text = prim::format_number(x);
    double back = -1;
    ASSERT_TRUE(prim::parse_number(text, &back)) << text;
    EXPECT_EQ(back, x) << text;
    EXPECT_EQ(std::signbit(back), std::signbit(x)) << text;
  }
  EXPECT_EQ(prim::format_number(10000), "10000");  // a whole number without a fraction
  EXPECT_EQ(prim::format_number(0.1), "0.1");
  EXPECT_EQ(prim::format_number(2.5), "2.5");
  EXPECT_EQ(prim::format_number(std::numeric_limits<double>::infinity()), "inf");
}

TEST(Prim, ParseNumberTakesWhatFromCharsTakesAndNothingElse) {
  double x = 0;
  ASSERT_TRUE(prim::parse_number("-2.5e-3", &x));
  EXPECT_EQ(x, -2.5e-3);
  ASSERT_TRUE(prim::parse_number("42", &x));
  EXPECT_EQ(x, 42);
  x = 7;
  for (const char *bad : {"", " 1", "+1", "0x10", "-0x10", "1.5x", "1e999", "1 ", "abc", "1,5"}) {
    EXPECT_FALSE(prim::parse_number(bad, &x)) << "'" << bad << "'";
    EXPECT_EQ(x, 7) << "'" << bad << "' changed the value";
  }
}

TEST(Prim, CpuFeaturesAreTheCompilersWithoutItsConstructor) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  EXPECT_EQ(prim::cpu_has(prim::CpuFeature::kAvx2), __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(prim::cpu_has(prim::CpuFeature::kClwb), __builtin_cpu_supports("clwb") != 0);
  EXPECT_EQ(prim::cpu_has(prim::CpuFeature::kClflushopt), __builtin_cpu_supports("clflushopt") != 0);
#else
  EXPECT_FALSE(prim::cpu_has(prim::CpuFeature::kAvx2));
#endif
}

TEST(Prim, RoundToU64RoundsHalvesUpAndClampsBelowZero) {
  EXPECT_EQ(prim::round_to_u64(2.5), 3u);
  EXPECT_EQ(prim::round_to_u64(2.49), 2u);
  EXPECT_EQ(prim::round_to_u64(0.0), 0u);
  EXPECT_EQ(prim::round_to_u64(-3.0), 0u);
  EXPECT_EQ(prim::round_to_u64(std::numeric_limits<double>::quiet_NaN()), 0u);
  EXPECT_EQ(prim::round_to_u64(1.5e19), uint64_t{15000000000000000000u});  // above INT64_MAX
}

// A creator of staging files beside a sweeper that removes every staging file whose lock it can
// take (as fields::remove_abandoned_pools does for killed writers): the sweeper may come between
// the creator's open and its lock. Every file created must still be the one its path names, locked
// by its creator, so that publishing it later finds it.
TEST(StagingFiles, ASweeperNeverTakesAFileFromItsCreator) {
  const std::string dir = hm_test::temp_path("staging-race");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  std::atomic<bool> done{false};
  std::thread sweeper([&] {
    while (!done.load()) {
      std::string names;
      if (!hm::prim::list_dir(dir, &names)) continue;
      for (const std::string &name : hm::prim::split(names, '\n')) {
        if (name.size() < 9 || name.compare(name.size() - 9, 9, ".creating") != 0) continue;
        const std::string path = dir + "/" + name;
        int fd = -1;
        uint64_t size = 0;
        if (hm::prim::open_existing(path, &fd, &size) != HM_OK) continue;
        if (hm::prim::lock_file(fd) == HM_OK) hm::prim::remove_path(path);
        hm::prim::close_fd(fd);
      }
    }
  });
  int lost = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::string path = dir + "/pool" + std::to_string(i) + ".creating";
    int fd = -1;
    ASSERT_EQ(hm::prim::create_staging_file(path, 4096, &fd), HM_OK) << i;
    struct stat held, named;
    ASSERT_EQ(::fstat(fd, &held), 0);
    if (::stat(path.c_str(), &named) != 0 || named.st_ino != held.st_ino) ++lost;
    EXPECT_EQ(hm::prim::publish_file(fd, path, path + ".done"), HM_OK) << i;
    hm::prim::close_fd(fd);
    hm::prim::remove_path(path + ".done");
  }
  done = true;
  sweeper.join();
  EXPECT_EQ(lost, 0) << "staging files removed from under their creators";
  ::rmdir(dir.c_str());
}
