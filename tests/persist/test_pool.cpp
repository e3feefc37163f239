// Persistent pools: versions survive reopening, commits are atomic, bad files are refused and
// left as they are.
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "base/options.h"
#include "hetmem/hetmem.h"
#include "persist/pool.h"
#include "../support.h"

using hm::persist::Pool;

namespace {

struct Recorder : hm::persist::PersistObserver {
  std::vector<std::string> events;
  void on_flush(uint64_t offset, uint64_t bytes) override {
    events.push_back("flush " + std::to_string(offset) + " " + std::to_string(bytes));
  }
  void on_fence() override { events.push_back("fence"); }
};

class PoolTest : public ::testing::Test {
 protected:
  void SetUp() override { path_ = hm_test::temp_path("pool"); }
  void TearDown() override { unlink(path_.c_str()); }
  std::string path_;
};

}  // namespace

TEST_F(PoolTest, VersionsSurviveReopening) {
  uint64_t first = 0, second = 0;
  {
    std::unique_ptr<Pool> pool;
    ASSERT_EQ(Pool::create(path_, 1 << 20, &pool), HM_OK) << hm_last_error();
    EXPECT_EQ(pool->sequence(), 0u);
    ASSERT_EQ(pool->allocate(100, &first), HM_OK);
    std::strcpy(pool->at<char>(first), "version one");
    pool->written(pool->at<char>(first), 100);
    ASSERT_EQ(pool->commit(first), HM_OK);
    ASSERT_EQ(pool->allocate(100, &second), HM_OK);
    std::strcpy(pool->at<char>(second), "version two");
    pool->written(pool->at<char>(second), 100);
    ASSERT_EQ(pool->commit(second), HM_OK);
    EXPECT_EQ(pool->sequence(), 2u);
  }
  std::unique_ptr<Pool> pool;
  ASSERT_EQ(Pool::open(path_, &pool), HM_OK) << hm_last_error();
  EXPECT_EQ(pool->sequence(), 2u);
  EXPECT_EQ(pool->root(), second);
  EXPECT_STREQ(pool->at<char>(pool->root()), "version two");
  EXPECT_STREQ(pool->at<char>(first), "version one") << "the older version is still there";
  EXPECT_EQ(pool->top(), pool->committed_top());
}

TEST_F(PoolTest, UncommittedWorkIsNotAVersion) {
  uint64_t a = 0, b = 0;
  {
    std::unique_ptr<Pool> pool;
    ASSERT_EQ(Pool::create(path_, 1 << 20, &pool), HM_OK);
    ASSERT_EQ(pool->allocate(64, &a), HM_OK);
    ASSERT_EQ(pool->commit(a), HM_OK);
    ASSERT_EQ(pool->allocate(64, &b), HM_OK);  // never committed: as if the process died here
  }
  std::unique_ptr<Pool> pool;
  ASSERT_EQ(Pool::open(path_, &pool), HM_OK);
  EXPECT_EQ(pool->root(), a);
  EXPECT_EQ(pool->top(), a + 64) << "the space of the lost work is reused";
}

TEST_F(PoolTest, ATornRootSlotFallsBackToThePreviousVersion) {
  uint64_t a = 0, b = 0;
  {
    std::unique_ptr<Pool> pool;
    ASSERT_EQ(Pool::create(path_, 1 << 20, &pool), HM_OK);
    ASSERT_EQ(pool->allocate(64, &a), HM_OK);
    ASSERT_EQ(pool->commit(a), HM_OK);  // slot 0, sequence 1
    ASSERT_EQ(pool->allocate(64, &b), HM_OK);
    ASSERT_EQ(pool->commit(b), HM_OK);  // slot 1, sequence 2
  }
  // Tear the newest slot: its root changes but not its checksum, as a crash mid-write would.
  auto data = hm_test::read_file(path_);
  size_t slot1 = offsetof(hm::persist::PoolHeader, slots) + sizeof(hm::persist::RootSlot);
  data[slot1 + offsetof(hm::persist::RootSlot, root)] ^= 0x40;
  hm_test::write_file(path_, data);
  std::unique_ptr<Pool> pool;
  ASSERT_EQ(Pool::open(path_, &pool), HM_OK);
  EXPECT_EQ(pool->sequence(), 1u);
  EXPECT_EQ(pool->root(), a);
}

TEST_F(PoolTest, CommitFlushesDataThenFencesThenWritesTheSlot) {
  std::unique_ptr<Pool> pool;
  ASSERT_EQ(Pool::create(path_, 1 << 20, &pool), HM_OK);
  Recorder rec;
  pool->set_observer(&rec);
  uint64_t off = 0;
  ASSERT_EQ(pool->allocate(256, &off), HM_OK);
  std::memset(pool->at<char>(off), 7, 256);
  pool->written(pool->at<char>(off), 256);
  ASSERT_EQ(pool->commit(off), HM_OK);
  ASSERT_EQ(rec.events.size(), 4u);
  // Through msync (not a MAP_SYNC mapping) a flush covers whole pages.
  const std::string data = pool->map_sync() ? std::to_string(off) + " 256" : std::to_string(off & ~4095ull) + " 4096";
  EXPECT_EQ(rec.events[0], "flush " + data) << "the version's data first";
  EXPECT_EQ(rec.events[1], "fence");
  EXPECT_EQ(rec.events[2].rfind("flush 56 32", 0), 0u) << "then the root slot (slot 0 at byte 56): " << rec.events[2];
  EXPECT_EQ(rec.events[3], "fence");
}

// A write through the file is durable before the slot that names it: on MAP_SYNC the kernel's
// copy already bypassed the caches, so the commit fences it (no write-backs; the range is still
// reported flushed, exactly), elsewhere its pages are synced.
TEST_F(PoolTest, AWriteThroughTheFileIsDurableBeforeTheSlotThatNamesIt) {
  uint64_t off = 0;
  std::string data(1000, 'w');
  {
    std::unique_ptr<Pool> pool;
    ASSERT_EQ(Pool::create(path_, 1 << 20, &pool), HM_OK) << hm_last_error();
    Recorder rec;
    pool->set_observer(&rec);
    ASSERT_EQ(pool->allocate(data.size(), &off), HM_OK);
    ASSERT_EQ(pool->write(off, data.data(), 400, data.data() + 400, 600), HM_OK) << hm_last_error();
    ASSERT_EQ(pool->commit(off), HM_OK) << hm_last_error();
    ASSERT_EQ(rec.events.size(), 4u);
    const std::string range =
        pool->map_sync() ? std::to_string(off) + " 1000" : std::to_string(off & ~4095ull) + " 4096";
    EXPECT_EQ(rec.events[0], "flush " + range) << "the written data first";
    EXPECT_EQ(rec.events[1], "fence");
    EXPECT_EQ(rec.events[2].rfind("flush 56 32", 0), 0u) << "then the root slot: " << rec.events[2];
    EXPECT_EQ(rec.events[3], "fence");
    // A rolled-back write is not carried into the next commit.
    uint64_t gone = 0;
    ASSERT_EQ(pool->allocate(64, &gone), HM_OK);
    ASSERT_EQ(pool->write(gone, data.data(), 64), HM_OK);
    pool->rollback();
    rec.events.clear();
    ASSERT_EQ(pool->commit(off), HM_OK);
    ASSERT_EQ(rec.events.size(), 3u) << "nothing left to flush but the slot";
    EXPECT_EQ(rec.events[0], "fence");
  }
  std::unique_ptr<Pool> pool;
  ASSERT_EQ(Pool::open(path_, &pool), HM_OK) << hm_last_error();
  EXPECT_EQ(std::string(pool->at<char>(off), data.size()), data);
}

// What the page cache holds of a file's range, and how much of it is dirty (cachestat, Linux 6.5;
// the struct and number of linux/mman.h and asm/unistd_64.h there).
struct CacheState {
  uint64_t cached = 0, dirty = 0, writeback = 0, evicted = 0, recently_evicted = 0;
};
int cache_state(int fd, uint64_t offset, uint64_t bytes, CacheState *out) {
  struct {
    uint64_t off, len;
  } range{offset, bytes};
  constexpr long kCachestat = 451;
  return static_cast<int>(syscall(kCachestat, fd, &range, out, 0));
}

TEST_F(PoolTest, AWriteStartsItsWholePagesOnTheirWayToTheMedium) {
  std::unique_ptr<Pool> pool;
  ASSERT_EQ(Pool::create(path_, 16 << 20, &pool), HM_OK);
  ASSERT_EQ(pool->commit(0), HM_OK);  // the pool at its path
  struct statfs fs {};
  ASSERT_EQ(statfs(path_.c_str(), &fs), 0);
  if (fs.f_type == TMPFS_MAGIC || pool->map_sync())
    GTEST_SKIP() << "the pool is on tmpfs or DAX, where nothing is written back";
  const int fd = open(path_.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  CacheState before;
  if (cache_state(fd, 0, 0, &before) != 0) {
    close(fd);
    GTEST_SKIP() << "no cachestat on this kernel (" << std::strerror(errno) << "; Linux 6.5 has it)";
  }
  const uint64_t bytes = 4 << 20;
  uint64_t off = 0;
  ASSERT_EQ(pool->allocate(bytes + 64, &off), HM_OK);
  std::vector<char> data(bytes + 64, 'x');
  ASSERT_EQ(pool->write(off, data.data(), data.size()), HM_OK);
  CacheState now;
  ASSERT_EQ(cache_state(fd, off, data.size(), &now), 0);
  close(fd);
  if (now.cached == 0)
    GTEST_SKIP() << "the file's page cache is not this file's (an overlay file system?): nothing to observe";
  // Left alone, the page cache writes dirty pages back after 30 s (vm.dirty_expire_centisecs):
  // all of them would still be dirty. Started at the write, at most the last page, which the next
  // write shares, is.
  EXPECT_EQ(now.cached, (data.size() + 4095) / 4096) << "the pages written are in the page cache";
  EXPECT_LE(now.dirty, 1u) << "of " << now.cached << " pages written, " << now.dirty << " are dirty and "
                           << now.writeback << " under writeback";
  ASSERT_EQ(pool->commit(off), HM_OK);
}

TEST_F(PoolTest, BadFilesAreRefusedAndLeftAsTheyAre) {
  {
    std::unique_ptr<Pool> pool;
    ASSERT_EQ(Pool::create(path_, 1 << 20, &pool), HM_OK);
    ASSERT_EQ(pool->commit(0), HM_OK);
  }
  const auto good = hm_test::read_file(path_);
  auto expect_refused = [&](std::vector<char> bytes, int code, const char *words) {
    hm_test::write_file(path_, bytes);
    std::unique_ptr<Pool> pool;
    EXPECT_EQ(Pool::open(path_, &pool), code) << words;
    EXPECT_NE(std::string(hm_last_error()).find(words), std::string::npos) << hm_last_error();
    EXPECT_EQ(hm_test::read_file(path_), bytes) << "a refused pool is not modified";
  };
  auto wrong_magic = good;
  wrong_magic[0] = 'X';
  expect_refused(wrong_magic, HM_EFORMAT, "wrong magic");
  auto future = good;
  future[8] = 9;
  expect_refused(future, HM_EFORMAT, "format version 9");
  auto damaged = good;
  damaged[16] ^= 1;  // pool_bytes, covered by the header checksum
  expect_refused(damaged, HM_EFORMAT, "checksum mismatch");
  expect_refused(std::vector<char>(good.begin(), good.begin() + 1000), HM_EFORMAT, "truncated");
  expect_refused(std::vector<char>(good.begin(), good.begin() + 8192), HM_EFORMAT, "truncated");
  std::unique_ptr<Pool> pool;
  EXPECT_EQ(Pool::open("/nonexistent-dir/pool", &pool), HM_EIO);
}

TEST_F(PoolTest, OnlyOneProcessOpensAPool) {
  std::unique_ptr<Pool> first, second;
  ASSERT_EQ(Pool::create(path_, 1 << 20, &first), HM_OK);
  ASSERT_EQ(first->commit(0), HM_OK);
  EXPECT_EQ(Pool::open(path_, &second), HM_EBUSY);
  EXPECT_NE(std::string(hm_last_error()).find("open in another process"), std::string::npos);
  first.reset();
  EXPECT_EQ(Pool::open(path_, &second), HM_OK) << "free again once closed";
}

TEST_F(PoolTest, OutOfSpaceBeforeAnyVersionIsDamaged) {
  std::unique_ptr<Pool> pool;
  ASSERT_EQ(Pool::create(path_, 64 << 10, &pool), HM_OK);
  uint64_t a = 0, big = 0;
  ASSERT_EQ(pool->allocate(1000, &a), HM_OK);
  std::strcpy(pool->at<char>(a), "kept");
  pool->written(pool->at<char>(a), 5);
  ASSERT_EQ(pool->commit(a), HM_OK);
  EXPECT_EQ(pool->allocate(1 << 20, &big), HM_ECAPACITY);
  EXPECT_NE(std::string(hm_last_error()).find("committed version is intact"), std::string::npos);
  pool.reset();
  ASSERT_EQ(Pool::open(path_, &pool), HM_OK);
  EXPECT_STREQ(pool->at<char>(pool->root()), "kept");
}

// A pool larger than its medium: the medium fills up to its last blocks (the chunks the pool
// backs its new space with shrink to what an allocation needs), then the allocation that finds
// no block is refused by name, and the committed version stays.
TEST_F(PoolTest, AFullMediumGivesItsLastBlocksThenIsNamed) {
  const std::string dir = path_ + ".medium";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  if (mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=3m") != 0) {
    rmdir(dir.c_str());
    GTEST_SKIP() << "cannot mount a 3 MiB tmpfs here (" << std::strerror(errno) << "; needs root)";
  }
  const std::string path = dir + "/pool";
  {
    std::unique_ptr<Pool> pool;
    ASSERT_EQ(Pool::create(path, 64 << 20, &pool), HM_OK) << hm_last_error();
    uint64_t a = 0, got = 0;
    ASSERT_EQ(pool->allocate(64, &a), HM_OK);
    std::strcpy(pool->at<char>(a), "kept");
    pool->written(pool->at<char>(a), 5);
    ASSERT_EQ(pool->commit(a), HM_OK);
    int rc = HM_OK;
    uint64_t at = 0;
    while ((rc = pool->allocate(4096, &at)) == HM_OK) {
      std::memset(pool->at<char>(at), 1, 4096);  // every page the pool handed out can be written
      got += 4096;
    }
    EXPECT_EQ(rc, HM_ECAPACITY);
    EXPECT_NE(std::string(hm_last_error()).find("its medium is full"), std::string::npos) << hm_last_error();
    // All of the medium but the header's 64 KiB and a page or two (tmpfs keeps some for itself).
    EXPECT_GE(got, (uint64_t{3} << 20) - (128 << 10)) << "the medium's last blocks were used, not refused for a chunk";
  }
  {
    std::unique_ptr<Pool> pool;
    ASSERT_EQ(Pool::open(path, &pool), HM_OK) << hm_last_error();
    EXPECT_STREQ(pool->at<char>(pool->root()), "kept");
  }
  unlink(path.c_str());
  umount(dir.c_str());
  rmdir(dir.c_str());
}

TEST_F(PoolTest, APoolAppearsAtItsPathOnlyWithItsFirstVersion) {
  using State = hm::persist::PoolInfo::State;
  hm::persist::PoolInfo info;
  const std::string staging = Pool::staging_path(path_);
  {
    std::unique_ptr<Pool> pool;
    ASSERT_EQ(Pool::create(path_, 1 << 20, &pool, "test", "level=6 radius=0.15"), HM_OK);
    EXPECT_NE(access(staging.c_str(), F_OK), -1) << "written under its staging name";
    EXPECT_EQ(access(path_.c_str(), F_OK), -1) << "nothing at the path before the first commit";
    ASSERT_EQ(Pool::inspect(path_, &info), HM_OK);
    EXPECT_EQ(info.state, State::creating);
    uint64_t a = 0;
    ASSERT_EQ(pool->allocate(64, &a), HM_OK);
    ASSERT_EQ(pool->commit(a), HM_OK);
    EXPECT_EQ(access(staging.c_str(), F_OK), -1);
    EXPECT_NE(access(path_.c_str(), F_OK), -1) << "published by the first commit";
  }
  ASSERT_EQ(Pool::inspect(path_, &info), HM_OK);
  EXPECT_EQ(info.state, State::committed);
  EXPECT_EQ(info.sequence, 1u);
  EXPECT_EQ(info.content, "test");
  EXPECT_EQ(info.note, "level=6 radius=0.15");
  std::unique_ptr<Pool> pool;
  ASSERT_EQ(Pool::open(path_, &pool), HM_OK);
  EXPECT_EQ(pool->note(), "level=6 radius=0.15");
}

TEST_F(PoolTest, ACreatorThatStopsEarlyLeavesThePathAsItWas) {
  {
    std::unique_ptr<Pool> old;
    ASSERT_EQ(Pool::create(path_, 1 << 20, &old, "old"), HM_OK);
    ASSERT_EQ(old->commit(0), HM_OK);
  }
  const auto before = hm_test::read_file(path_);
  {
    std::unique_ptr<Pool> replacing;
    ASSERT_EQ(Pool::create(path_, 2 << 20, &replacing, "new"), HM_OK);
    std::unique_ptr<Pool> other;
    EXPECT_EQ(Pool::open(path_, &other), HM_EBUSY) << "the pool being replaced is held";
    EXPECT_EQ(Pool::create(path_, 1 << 20, &other), HM_EBUSY) << "one creator at a time";
  }  // closed before its first commit, as a failed creation is
  EXPECT_EQ(hm_test::read_file(path_), before) << "the old pool is untouched";
  EXPECT_EQ(access(Pool::staging_path(path_).c_str(), F_OK), -1) << "the staging file is removed";
  {
    std::unique_ptr<Pool> replacing;
    ASSERT_EQ(Pool::create(path_, 2 << 20, &replacing, "new"), HM_OK);
    ASSERT_EQ(replacing->commit(0), HM_OK);
  }
  std::unique_ptr<Pool> pool;
  ASSERT_EQ(Pool::open(path_, &pool), HM_OK);
  EXPECT_EQ(pool->content(), "new") << "the first commit replaced it";
}

TEST_F(PoolTest, AStagingFileLeftByAKilledCreatorIsTakenOver) {
  const std::string staging = Pool::staging_path(path_);
  hm_test::write_file(staging, std::vector<char>(3 << 20, 'x'));  // what a creator killed mid-way leaves
  hm::persist::PoolInfo info;
  ASSERT_EQ(Pool::inspect(path_, &info), HM_OK);
  EXPECT_EQ(info.state, hm::persist::PoolInfo::State::creating);
  {
    std::unique_ptr<Pool> pool;
    ASSERT_EQ(Pool::create(path_, 1 << 20, &pool), HM_OK) << hm_last_error();
    EXPECT_EQ(pool->capacity(), 1u << 20);
    uint64_t a = 0;
    ASSERT_EQ(pool->allocate(1 << 16, &a), HM_OK);
    EXPECT_EQ(*pool->at<char>(a + 100), 0) << "nothing of the old file's data is left";
    ASSERT_EQ(pool->commit(a), HM_OK);
  }
  EXPECT_EQ(access(staging.c_str(), F_OK), -1);
  EXPECT_EQ(hm_test::read_file(path_).size(), 1u << 20);
}

TEST_F(PoolTest, InspectNamesWhatIsNotAPool) {
  hm::persist::PoolInfo info;
  ASSERT_EQ(Pool::inspect(path_, &info), HM_OK);
  EXPECT_EQ(info.state, hm::persist::PoolInfo::State::missing);
  hm_test::write_file(path_, std::vector<char>(8192, 'x'));
  EXPECT_EQ(Pool::inspect(path_, &info), HM_EFORMAT);
  EXPECT_NE(std::string(hm_last_error()).find("wrong magic"), std::string::npos) << hm_last_error();
  hm_test::write_file(path_, std::vector<char>(100, 'x'));
  EXPECT_EQ(Pool::inspect(path_, &info), HM_EFORMAT);
  EXPECT_NE(std::string(hm_last_error()).find("truncated"), std::string::npos) << hm_last_error();
}

TEST_F(PoolTest, APoolIsMappedWithTransparentHugePagesOnlyWhenAsked) {
  // MADV_HUGEPAGE shows as "hg" in the mapping's VmFlags: HM_PM_THP=1 sets it, the default (0)
  // leaves a page-cache mapping without it. A DAX file system marks its mappings itself (ext4 and
  // XFS set the flag on every DAX mapping), so there only the "1" half can be checked.
  for (const char *thp : {"1", "0"}) {
    hm::option_set("HM_PM_THP", thp);
    std::unique_ptr<Pool> pool;
    ASSERT_EQ(Pool::create(path_, 4 << 20, &pool), HM_OK) << hm_last_error();
    const std::string smaps = hm_test::smaps_of(pool->at<char>(0));
    const size_t vm_flags = smaps.find("VmFlags:");
    ASSERT_NE(vm_flags, std::string::npos) << "no mapping with VmFlags holds the pool:\n" << smaps;
    const std::string flags = smaps.substr(vm_flags, smaps.find('\n', vm_flags) - vm_flags);
    const bool huge = flags.find(" hg") != std::string::npos;
    if (std::string(thp) == "1") {
      EXPECT_TRUE(huge) << "HM_PM_THP=1: " << flags;
    } else if (!pool->map_sync()) {
      EXPECT_FALSE(huge) << "HM_PM_THP=0: " << flags;
    }
    pool.reset();
    unlink(path_.c_str());
  }
  hm::option_set("HM_PM_THP", "0");
}
