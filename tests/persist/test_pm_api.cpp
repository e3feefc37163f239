// The C interface of the persistent octree and its C++ layer: the same operations as the C++
// class, and clear errors for bad arguments and bad pools.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "hetmem/pm_octree.h"
#include "hetmem/pm_octree.hpp"
#include "persist/pool.h"
#include "../support.h"

namespace {

bool has(const std::string &words) { return std::string(hm_last_error()).find(words) != std::string::npos; }

class PmApi : public ::testing::Test {
 protected:
  void SetUp() override { path_ = hm_test::temp_path("pm-api"); }
  void TearDown() override { unlink(path_.c_str()); }
  std::string path_;
};

TEST_F(PmApi, CreateRefinePersistRestoreDeleteIn2DAnd3D) {
  for (int dim : {2, 3}) {
    pm_octree_t *t = nullptr;
    ASSERT_EQ(pm_create(path_.c_str(), dim, 16 << 20, &t), HM_OK) << hm_last_error();
    EXPECT_EQ(pm_dim(t), dim);
    EXPECT_EQ(pm_version(t), 1u);
    auto all = [](const pm_leaf_t *l, void *) { return l->level < 3 ? 1 : 0; };
    for (int k = 0; k < 3; ++k) ASSERT_EQ(pm_refine(t, all, nullptr), HM_OK);
    EXPECT_EQ(pm_leaf_count(t), uint64_t{1} << (3 * dim));
    const double p[3] = {0.9, 0.1, 0.5};
    ASSERT_EQ(pm_set_value(t, p, 2.5), HM_OK);
    ASSERT_EQ(pm_persistent(t), HM_OK);
    const uint64_t sum = pm_checksum(t);
    // Merge the families whose first leaf is in the lower half along x.
    auto low_x = [](const pm_leaf_t *f, int n, void *count) {
      ++*static_cast<int *>(count);
      return n > 0 && f[0].coord[0] < (1u << 19) ? 1 : 0;
    };
    int families = 0;
    ASSERT_EQ(pm_coarsen(t, low_x, &families), HM_OK);
    EXPECT_EQ(families, 1 << (2 * dim)) << "every family of level-3 leaves was offered once";
    EXPECT_LT(pm_leaf_count(t), uint64_t{1} << (3 * dim));
    pm_close(t);
    ASSERT_EQ(pm_restore(path_.c_str(), &t), HM_OK) << hm_last_error();
    EXPECT_EQ(pm_dim(t), dim) << "the dimension comes from the pool";
    EXPECT_EQ(pm_version(t), 2u);
    EXPECT_EQ(pm_checksum(t), sum) << "exactly the persisted version";
    EXPECT_EQ(pm_valid(t), HM_OK);
    pm_leaf_t leaf{};
    ASSERT_EQ(pm_find(t, p, &leaf), HM_OK);
    EXPECT_EQ(leaf.value, 2.5);
    EXPECT_EQ(leaf.level, 3u);
    int neighbours = 0;
    ASSERT_EQ(pm_neighbours(t, &leaf, [](const pm_leaf_t *, void *n) { ++*static_cast<int *>(n); }, &neighbours), HM_OK);
    EXPECT_GT(neighbours, 0);
    uint64_t visited = 0;
    ASSERT_EQ(pm_leaves(t, [](const pm_leaf_t *, void *n) { ++*static_cast<uint64_t *>(n); }, &visited), HM_OK);
    EXPECT_EQ(visited, pm_leaf_count(t));
    ASSERT_EQ(pm_balance(t), HM_OK);
    const std::string snap = path_ + ".snap", copy = path_ + ".copy";
    ASSERT_EQ(pm_snapshot_save(t, snap.c_str()), HM_OK) << hm_last_error();
    pm_octree_t *loaded = nullptr;
    ASSERT_EQ(pm_snapshot_load(snap.c_str(), copy.c_str(), 16 << 20, &loaded), HM_OK) << hm_last_error();
    EXPECT_EQ(pm_dim(loaded), dim) << "the dimension comes from the snapshot";
    EXPECT_EQ(pm_checksum(loaded), pm_checksum(t));
    ASSERT_EQ(pm_delete(loaded), HM_OK);
    unlink(snap.c_str());
    EXPECT_EQ(pm_snapshot_load(snap.c_str(), copy.c_str(), 16 << 20, &loaded), HM_EIO);
    ASSERT_EQ(pm_delete(t), HM_OK);
    EXPECT_NE(access(path_.c_str(), F_OK), 0) << "pm_delete removes the pool file";
  }
}

TEST_F(PmApi, BadArgumentsAndPoolsGetClearErrors) {
  pm_octree_t *t = reinterpret_cast<pm_octree_t *>(0x1);
  EXPECT_EQ(pm_create(path_.c_str(), 4, 1 << 20, &t), HM_EINVAL);
  EXPECT_TRUE(has("dimension 4")) << hm_last_error();
  EXPECT_EQ(t, nullptr) << "the result is cleared on failure";
  EXPECT_EQ(pm_create(nullptr, 3, 1 << 20, &t), HM_EINVAL);
  EXPECT_EQ(pm_create(path_.c_str(), 3, 1024, &t), HM_EINVAL);
  EXPECT_TRUE(has("too small")) << hm_last_error();
  EXPECT_EQ(pm_restore((path_ + ".missing").c_str(), &t), HM_EIO);
  EXPECT_EQ(pm_persistent(nullptr), HM_EINVAL);
  EXPECT_EQ(pm_delete(nullptr), HM_EINVAL);
  pm_close(nullptr);
  {
    std::unique_ptr<hm::persist::Pool> bare;
    ASSERT_EQ(hm::persist::Pool::create(path_, 1 << 20, &bare), HM_OK);
    ASSERT_EQ(bare->commit(0), HM_OK);
  }
  EXPECT_EQ(pm_restore(path_.c_str(), &t), HM_EFORMAT);
  EXPECT_TRUE(has("holds no tree")) << hm_last_error();
  unlink(path_.c_str());

  ASSERT_EQ(pm_create(path_.c_str(), 2, 1 << 20, &t), HM_OK);
  pm_octree_t *second = nullptr;
  EXPECT_EQ(pm_restore(path_.c_str(), &second), HM_EBUSY) << "one writer per pool";
  const double outside[2] = {1.0, 0.5};
  pm_leaf_t leaf{};
  EXPECT_EQ(pm_find(t, outside, &leaf), HM_EINVAL);
  EXPECT_TRUE(has("outside the unit domain")) << hm_last_error();
  EXPECT_EQ(pm_refine(t, nullptr, nullptr), HM_EINVAL);
  leaf.level = 21;
  EXPECT_EQ(pm_neighbours(t, &leaf, [](const pm_leaf_t *, void *) {}, nullptr), HM_EINVAL);
  EXPECT_EQ(pm_valid(t), HM_OK);
  pm_close(t);
}

}  // namespace

namespace {

// A corner refined deep, so coarsening elsewhere must respect 2:1.
int towards_origin(const pm_leaf_t *l, void *) { return l->level < 6 && l->coord[0] == 0 && l->coord[1] == 0 ? 1 : 0; }
int everything(const pm_leaf_t *, int, void *) { return 1; }
int near_origin(const pm_leaf_t *l, void *) { return l->coord[0] < (1u << 18) && l->coord[1] < (1u << 18) ? 1 : 0; }

TEST_F(PmApi, OptionsStatsFeaturesCollectAndBalancedCoarsening) {
  pm_options_t o;
  pm_options_init(&o);
  EXPECT_EQ(o.fast_bytes, 0u);
  EXPECT_EQ(o.transform, 1);
  o.fast_bytes = 100;  // holds no useful C0
  pm_octree_t *t = nullptr;
  EXPECT_EQ(pm_create_ex(path_.c_str(), 3, 16 << 20, &o, &t), HM_EINVAL);
  EXPECT_TRUE(has("fast-tier budget")) << hm_last_error();
  EXPECT_NE(access(path_.c_str(), F_OK), 0) << "a refused create leaves no pool behind";
  o.fast_bytes = 64 << 10;
  o.gc_threshold = 1.5;
  EXPECT_EQ(pm_create_ex(path_.c_str(), 3, 16 << 20, &o, &t), HM_EINVAL);
  EXPECT_TRUE(has("gc_threshold")) << hm_last_error();
  o.gc_threshold = 0.1;
  EXPECT_EQ(o.threads, 1);
  o.threads = -1;
  EXPECT_EQ(pm_create_ex(path_.c_str(), 3, 16 << 20, &o, &t), HM_EINVAL);
  EXPECT_TRUE(has("threads -1")) << hm_last_error();
  o.threads = 2;  // the balance below runs its ripple on 2 threads
  ASSERT_EQ(pm_create_ex(path_.c_str(), 2, 16 << 20, &o, &t), HM_OK) << hm_last_error();
  ASSERT_EQ(pm_set_features(t, near_origin, nullptr), HM_OK);
  for (int k = 0; k < 6; ++k) ASSERT_EQ(pm_refine(t, towards_origin, nullptr), HM_OK);
  ASSERT_EQ(pm_balance(t), HM_OK);
  const uint64_t balanced = pm_leaf_count(t);
  ASSERT_EQ(pm_persistent(t), HM_OK);
  pm_stats_t st{};
  ASSERT_EQ(pm_stats(t, &st), HM_OK);
  EXPECT_GT(st.fast_writes, 0u) << "the tree was built in C0";
  EXPECT_GT(st.pool_writes, 0u) << "and merged into the pool at the persist";
  EXPECT_EQ(st.fast_capacity, (64u << 10) / 80u) << "a quadtree family: 80 bytes";
  // Gerris' rule: only families whose coarsening keeps 2:1 go; plain coarsening takes more.
  ASSERT_EQ(pm_coarsen_balanced(t, everything, nullptr), HM_OK);
  const uint64_t kept = pm_leaf_count(t);
  EXPECT_LT(kept, balanced);
  ASSERT_EQ(pm_balance(t), HM_OK);
  EXPECT_EQ(pm_leaf_count(t), kept) << "nothing to refine again after balanced coarsening";
  ASSERT_EQ(pm_coarsen(t, everything, nullptr), HM_OK);
  EXPECT_LT(pm_leaf_count(t), kept);
  // Recursive: one balanced coarsening merges the whole tree, and one refinement refines what
  // six single passes refined.
  EXPECT_EQ(pm_refine_ex(t, towards_origin, nullptr, 4), HM_EINVAL);
  EXPECT_TRUE(has("PM_RECURSIVE")) << hm_last_error();
  EXPECT_EQ(pm_coarsen_ex(t, everything, nullptr, 8), HM_EINVAL);
  EXPECT_TRUE(has("PM_KEEP_BALANCE")) << hm_last_error();
  ASSERT_EQ(pm_coarsen_ex(t, everything, nullptr, PM_RECURSIVE | PM_KEEP_BALANCE), HM_OK);
  EXPECT_EQ(pm_leaf_count(t), 1u);
  ASSERT_EQ(pm_refine_ex(t, towards_origin, nullptr, PM_RECURSIVE), HM_OK);
  ASSERT_EQ(pm_balance(t), HM_OK);
  EXPECT_EQ(pm_leaf_count(t), balanced);
  ASSERT_EQ(pm_collect(t), HM_OK);
  ASSERT_EQ(pm_stats(t, &st), HM_OK);
  EXPECT_EQ(st.gc_runs, 1u);
  EXPECT_EQ(pm_set_features(nullptr, near_origin, nullptr), HM_EINVAL);
  EXPECT_EQ(pm_stats(t, nullptr), HM_EINVAL);
  ASSERT_EQ(pm_persistent(t), HM_OK);
  pm_close(t);
  // Restore's check on 2 threads (o.threads is still 2): the tree persisted last.
  ASSERT_EQ(pm_restore_ex(path_.c_str(), &o, &t), HM_OK) << hm_last_error();
  EXPECT_EQ(pm_leaf_count(t), balanced);
  EXPECT_EQ(pm_delete(t), HM_OK);
}

TEST_F(PmApi, RestoreFromTheReplicaWhenThePoolIsGone) {
  const std::string replica = path_ + ".replica";
  unlink(replica.c_str());
  pm_options_t o;
  pm_options_init(&o);
  o.replica = replica.c_str();
  pm_octree_t *t = nullptr;
  ASSERT_EQ(pm_create_ex(path_.c_str(), 3, 16 << 20, &o, &t), HM_OK) << hm_last_error();
  for (int k = 0; k < 4; ++k) ASSERT_EQ(pm_refine(t, towards_origin, nullptr), HM_OK);
  ASSERT_EQ(pm_persistent(t), HM_OK);
  const uint64_t sum = pm_checksum(t);
  pm_close(t);
  ASSERT_EQ(unlink(path_.c_str()), 0);
  EXPECT_EQ(pm_restore(path_.c_str(), &t), HM_EIO) << "without the replica named, a missing pool is an error";
  ASSERT_EQ(pm_restore_ex(path_.c_str(), &o, &t), HM_OK) << hm_last_error();
  EXPECT_EQ(pm_dim(t), 3);
  EXPECT_EQ(pm_checksum(t), sum);
  EXPECT_EQ(pm_version(t), 2u);
  pm_close(t);
  unlink(replica.c_str());
}

}  // namespace

namespace {

TEST_F(PmApi, CxxLayerOwnsTheTreeAndThrowsWithTheMessage) {
  unlink(path_.c_str());
  uint64_t sum = 0;
  {
    auto tree = hm::PmOctree::restore_or_create(path_, 3, 16 << 20);  // first run: created
    EXPECT_EQ(tree.version(), 1u);
    for (int k = 0; k < 3; ++k) tree.refine([](const pm_leaf_t &l) { return l.level < 3; });  // a level per call
    EXPECT_EQ(tree.leaf_count(), 512u);
    tree.coarsen_balanced([](const pm_leaf_t *family, int) { return family[0].coord[0] >= (1u << 19); });
    tree.balance();
    const double p[3] = {0.1, 0.2, 0.3};
    tree.set_value(p, 4.0);
    EXPECT_EQ(tree.find(p).value, 4.0);
    int n = 0;
    tree.leaves([&](const pm_leaf_t &) { ++n; });
    EXPECT_EQ(static_cast<uint64_t>(n), tree.leaf_count());
    tree.persist();
    sum = tree.checksum();
    EXPECT_TRUE(tree.valid());
  }  // closed, the pool kept
  auto again = hm::PmOctree::restore_or_create(path_, 3, 16 << 20);  // a restart: restored
  EXPECT_EQ(again.version(), 2u);
  EXPECT_EQ(again.checksum(), sum);
  try {
    auto second = hm::PmOctree::restore(path_);  // the pool is open above
    FAIL() << "a second opener must be refused";
  } catch (const hm::Error &e) {
    EXPECT_EQ(e.code(), HM_EBUSY);
    EXPECT_NE(std::string(e.what()).find("open in another process"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {
void count_leaf(const pm_leaf_t *, void *arg) { ++*static_cast<uint64_t *>(arg); }
}  // namespace

// pm_restore checks the families on the first visit (the default): a sound pool reads as after
// a check before returning (check_on_first_visit = 0), its first pm_leaves doing the check; a
// damaged one is refused by the first call that reads it, and by every call after, with the
// message the check before returning gives (pm_checksum: 0; the C++ layer throws it).
TEST_F(PmApi, CheckOnTheFirstVisitGivesTheSameTreeOrTheSameRefusal) {
  pm_options_t before_returning;
  pm_options_init(&before_returning);
  EXPECT_EQ(before_returning.check_on_first_visit, 1) << "the check on the first visit is the default";
  before_returning.check_on_first_visit = 0;
  uint64_t sum = 0, leaves = 0;
  {
    pm_octree_t *t = nullptr;
    ASSERT_EQ(pm_create(path_.c_str(), 3, 4 << 20, &t), HM_OK) << hm_last_error();
    for (int k = 0; k < 3; ++k) ASSERT_EQ(pm_refine_ex(t, towards_origin, nullptr, PM_RECURSIVE), HM_OK);
    ASSERT_EQ(pm_persistent(t), HM_OK);
    sum = pm_checksum(t);
    leaves = pm_leaf_count(t);
    pm_close(t);
  }
  pm_octree_t *t = nullptr;
  ASSERT_EQ(pm_restore(path_.c_str(), &t), HM_OK) << hm_last_error();
  uint64_t n = 0;
  ASSERT_EQ(pm_leaves(t, count_leaf, &n), HM_OK) << hm_last_error();
  EXPECT_EQ(n, leaves);
  EXPECT_EQ(pm_checksum(t), sum);
  pm_close(t);
  // A flip in a committed family, not in the root object: one that a check before returning
  // refuses and pm_restore does not (slot by slot from the header).
  const std::vector<char> good = hm_test::read_file(path_);
  std::vector<char> bytes;
  std::string refusal;
  for (size_t at = hm::persist::kHeaderBytes + 40; at < good.size() && refusal.empty(); at += 128) {
    bytes = good;
    bytes[at] = static_cast<char>(bytes[at] ^ 0x21);
    hm_test::write_file(path_, bytes);
    if (pm_restore_ex(path_.c_str(), &before_returning, &t) == HM_OK) {
      pm_close(t);
      continue;
    }
    const std::string why = hm_last_error();
    if (pm_restore(path_.c_str(), &t) == HM_OK) refusal = why;  // else the root object
  }
  ASSERT_FALSE(refusal.empty()) << "no flip in a family found";
  EXPECT_EQ(pm_leaf_count(t), leaves) << "as the root object records it";
  n = 0;
  EXPECT_EQ(pm_leaves(t, count_leaf, &n), HM_EFORMAT);
  EXPECT_EQ(std::string(hm_last_error()), refusal);
  EXPECT_LT(n, leaves);
  const double p[3] = {0.9, 0.9, 0.9};
  pm_leaf_t leaf{};
  EXPECT_EQ(pm_find(t, p, &leaf), HM_EFORMAT);
  EXPECT_EQ(pm_set_value(t, p, 1.0), HM_EFORMAT);
  EXPECT_EQ(pm_persistent(t), HM_EFORMAT);
  EXPECT_EQ(pm_checksum(t), 0u);
  EXPECT_EQ(pm_valid(t), HM_EFORMAT);
  EXPECT_TRUE(has(refusal)) << hm_last_error();
  pm_close(t);
  EXPECT_EQ(hm_test::read_file(path_), bytes) << "nothing written to a refused pool";
  try {
    auto tree = hm::PmOctree::restore(path_);
    tree.balance();
    FAIL() << "the first call that reads a damaged pool must throw";
  } catch (const hm::Error &e) {
    EXPECT_EQ(e.code(), HM_EFORMAT);
    EXPECT_NE(std::string(e.what()).find(refusal), std::string::npos) << e.what();
  }
}

TEST_F(PmApi, InspectAndTheNoteKeptAtCreation) {
  pm_pool_info_t info;
  ASSERT_EQ(pm_inspect(path_.c_str(), &info), HM_OK);
  EXPECT_EQ(info.state, PM_POOL_MISSING);
  pm_options_t o;
  pm_options_init(&o);
  o.note = "level=6 spheres=2";
  pm_octree_t *t = nullptr;
  ASSERT_EQ(pm_create_ex(path_.c_str(), 2, 1 << 20, &o, &t), HM_OK) << hm_last_error();
  EXPECT_STREQ(pm_note(t), "level=6 spheres=2");
  ASSERT_EQ(pm_inspect(path_.c_str(), &info), HM_OK) << "a pool open elsewhere can be inspected";
  EXPECT_EQ(info.state, PM_POOL_COMMITTED);
  EXPECT_EQ(info.version, 1u);
  EXPECT_EQ(info.dim, 2);
  EXPECT_STREQ(info.note, "level=6 spheres=2");
  ASSERT_EQ(pm_persistent(t), HM_OK);
  pm_close(t);
  ASSERT_EQ(pm_restore(path_.c_str(), &t), HM_OK);
  EXPECT_STREQ(pm_note(t), "level=6 spheres=2") << "the note survives restore";
  EXPECT_EQ(pm_version(t), 2u);
  pm_close(t);
  const std::string long_note(1024, 'x');
  o.note = long_note.c_str();
  EXPECT_EQ(pm_create_ex((path_ + ".long").c_str(), 2, 1 << 20, &o, &t), HM_EINVAL);
  EXPECT_TRUE(has("at most 1023 fit")) << hm_last_error();
  EXPECT_EQ(pm_inspect(nullptr, &info), HM_EINVAL);
}
