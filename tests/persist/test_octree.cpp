// The persistent multi-version octree, in 2D and 3D: versions, copy-on-write, restore, and
// recovery after the process is killed at random instants.
#include <filesystem>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <array>
#include <vector>

#include "hetmem/hetmem.h"
#include "persist/octree.h"
#include "../support.h"
#include "octree_workload.h"

using hm::persist::Octree;
using hm_test::advance;

namespace {

template <int Dim>
class OctreeTest : public ::testing::Test {
 protected:
  void SetUp() override { path_ = hm_test::temp_path("octree" + std::to_string(Dim)); }
  void TearDown() override { unlink(path_.c_str()); }
  std::string path_;
};

template <int N>
struct D {
  static constexpr int value = N;
};

}  // namespace

template <class T>
class OctreeDims : public OctreeTest<T::value> {};
using Dims = ::testing::Types<D<2>, D<3>>;
TYPED_TEST_SUITE(OctreeDims, Dims);

TYPED_TEST(OctreeDims, RefineCoarsenAndFind) {
  constexpr int Dim = TypeParam::value;
  std::unique_ptr<Octree<Dim>> tree;
  ASSERT_EQ(Octree<Dim>::create(this->path_, 16 << 20, &tree), HM_OK) << hm_last_error();
  EXPECT_EQ(tree->leaf_count(), 1u);
  ASSERT_EQ(tree->refine([](const auto &) { return true; }), HM_OK);
  ASSERT_EQ(tree->refine([](const auto &) { return true; }), HM_OK);
  EXPECT_EQ(tree->leaf_count(), size_t{1} << (2 * Dim));
  std::string why;
  EXPECT_TRUE(tree->valid(&why)) << why;
  double p[3] = {0.9, 0.1, 0.6};
  ASSERT_EQ(tree->set_value(p, 42.0), HM_OK);
  typename Octree<Dim>::Leaf leaf;
  ASSERT_TRUE(tree->find(p, &leaf));
  EXPECT_EQ(leaf.value, 42.0);
  EXPECT_EQ(leaf.level, 2u);
  ASSERT_EQ(tree->coarsen([](const auto *) { return true; }), HM_OK);
  EXPECT_EQ(tree->leaf_count(), size_t{1} << Dim) << "one level of families merged";
  ASSERT_EQ(tree->coarsen([](const auto *) { return true; }), HM_OK);
  EXPECT_EQ(tree->leaf_count(), 1u);
  EXPECT_TRUE(tree->valid(&why)) << why;
  ASSERT_TRUE(tree->find(p, &leaf));
  EXPECT_NEAR(leaf.value, 42.0 / (1 << (2 * Dim)), 1e-12) << "coarsening averages the family";
}

TYPED_TEST(OctreeDims, RestoreReturnsTheLastPersistedVersion) {
  constexpr int Dim = TypeParam::value;
  uint64_t persisted = 0;
  {
    std::unique_ptr<Octree<Dim>> tree;
    ASSERT_EQ(Octree<Dim>::create(this->path_, 64 << 20, &tree), HM_OK);
    ASSERT_EQ(advance(*tree, 1), HM_OK);
    ASSERT_EQ(tree->persist(), HM_OK);
    persisted = tree->checksum();
    ASSERT_EQ(advance(*tree, 2), HM_OK);  // never persisted
    EXPECT_NE(tree->checksum(), persisted);
  }
  std::unique_ptr<Octree<Dim>> tree;
  ASSERT_EQ(Octree<Dim>::restore(this->path_, &tree), HM_OK) << hm_last_error();
  EXPECT_EQ(tree->checksum(), persisted);
  EXPECT_EQ(tree->version(), 2u);
  std::string why;
  EXPECT_TRUE(tree->valid(&why)) << why;
  ASSERT_EQ(advance(*tree, 3), HM_OK) << "adaptation continues from the restored version";
  ASSERT_EQ(tree->persist(), HM_OK);
  EXPECT_TRUE(tree->valid(&why)) << why;
}

TYPED_TEST(OctreeDims, TheCommittedVersionIsNeverWritten) {
  // While the working version changes (reusing slots freed by older versions), a copy of the
  // pool taken at any moment still holds V(i-1) exactly.
  constexpr int Dim = TypeParam::value;
  std::unique_ptr<Octree<Dim>> tree;
  ASSERT_EQ(Octree<Dim>::create(this->path_, 64 << 20, &tree), HM_OK);
  for (int k = 1; k <= 3; ++k) {
    ASSERT_EQ(advance(*tree, k), HM_OK);
    ASSERT_EQ(tree->persist(), HM_OK);
  }
  const uint64_t committed = tree->checksum();
  ASSERT_EQ(advance(*tree, 4), HM_OK);
  ASSERT_EQ(tree->coarsen([](const auto *) { return true; }), HM_OK);
  ASSERT_NE(tree->checksum(), committed);
  const std::string copy = this->path_ + ".copy";
  std::filesystem::copy_file(this->path_, copy, std::filesystem::copy_options::overwrite_existing);
  std::unique_ptr<Octree<Dim>> old;
  ASSERT_EQ(Octree<Dim>::restore(copy, &old), HM_OK) << hm_last_error();
  EXPECT_EQ(old->checksum(), committed) << "V(i-1) is copied, not changed";
  EXPECT_EQ(old->version(), 4u);
  std::remove(copy.c_str());
}

// Brute force, independent of the tree's own queries: closed boxes meet and are not the same.
template <int Dim>
bool touch(const typename Octree<Dim>::Leaf &a, const typename Octree<Dim>::Leaf &b) {
  const uint64_t sa = uint64_t{1} << (Octree<Dim>::kMaxLevel - a.level), sb = uint64_t{1} << (Octree<Dim>::kMaxLevel - b.level);
  bool same = a.level == b.level;
  for (int d = 0; d < Dim; ++d) {
    if (a.coord[d] > b.coord[d] + sb || b.coord[d] > a.coord[d] + sa) return false;
    same &= a.coord[d] == b.coord[d];
  }
  return !same;
}

// Touching pairs more than one level apart.
template <int Dim>
int unbalanced_pairs(const Octree<Dim> &tree) {
  std::vector<typename Octree<Dim>::Leaf> all;
  EXPECT_EQ(tree.leaves([&](const auto &l) { all.push_back(l); }), HM_OK);
  int bad = 0;
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = i + 1; j < all.size(); ++j)
      if (touch<Dim>(all[i], all[j]) && std::abs(static_cast<int>(all[i].level) - static_cast<int>(all[j].level)) > 1) ++bad;
  return bad;
}

// Refines towards one point just below the domain's centre to `depth`: deep leaves around the
// centre touch the other quadrants' coarse leaves across faces, edges and the corner.
template <int Dim>
int refine_towards_centre(Octree<Dim> &tree, int depth) {
  const double p[3] = {0.5 - 1e-7, 0.5 - 1e-7, 0.5 - 1e-7};
  for (int k = 0; k < depth; ++k) {
    typename Octree<Dim>::Leaf target;
    if (!tree.find(p, &target)) return HM_EINVAL;
    int rc = tree.refine([&](const auto &l) { return l.level == target.level && std::memcmp(l.coord, target.coord, sizeof l.coord) == 0; });
    if (rc != HM_OK) return rc;
  }
  return HM_OK;
}

TYPED_TEST(OctreeDims, NeighboursAreExactlyTheTouchingLeaves) {
  constexpr int Dim = TypeParam::value;
  std::unique_ptr<Octree<Dim>> tree;
  ASSERT_EQ(Octree<Dim>::create(this->path_, 64 << 20, &tree), HM_OK);
  ASSERT_EQ(advance(*tree, 3), HM_OK);
  std::vector<typename Octree<Dim>::Leaf> all;
  ASSERT_EQ(tree->leaves([&](const auto &l) { all.push_back(l); }), HM_OK);
  ASSERT_GT(all.size(), 50u);
  size_t checked = 0, most = 0;
  for (size_t i = 0; i < all.size(); i += 7, ++checked) {
    std::set<std::array<uint32_t, 4>> got, want;
    tree->neighbours(all[i], [&](const auto &n) { got.insert({n.coord[0], n.coord[1], n.coord[2], n.level}); });
    for (const auto &l : all)
      if (touch<Dim>(all[i], l)) want.insert({l.coord[0], l.coord[1], l.coord[2], l.level});
    EXPECT_EQ(got, want) << "leaf " << i;
    most = std::max(most, got.size());
  }
  EXPECT_GT(checked, 7u);
  EXPECT_GE(most, static_cast<size_t>(Dim == 2 ? 8 : 26)) << "some leaf has all face, edge and corner neighbours";
}

TYPED_TEST(OctreeDims, BalanceIsTwoToOneAcrossFacesEdgesAndCornersAndIdempotent) {
  constexpr int Dim = TypeParam::value;
  std::unique_ptr<Octree<Dim>> tree;
  ASSERT_EQ(Octree<Dim>::create(this->path_, 64 << 20, &tree), HM_OK);
  ASSERT_EQ(refine_towards_centre(*tree, 8), HM_OK);
  ASSERT_GT(unbalanced_pairs(*tree), 0) << "the test tree starts unbalanced";
  const size_t before = tree->leaf_count();
  ASSERT_EQ(tree->balance(), HM_OK);
  EXPECT_EQ(unbalanced_pairs(*tree), 0);
  std::string why;
  EXPECT_TRUE(tree->valid(&why)) << why;
  EXPECT_GT(tree->leaf_count(), before);
  // The far corner of the domain only needs level 2 leaves to be balanced against the centre.
  const double far[3] = {0.99, 0.99, 0.99};
  typename Octree<Dim>::Leaf corner;
  ASSERT_TRUE(tree->find(far, &corner));
  EXPECT_LE(corner.level, 2u) << "balance refines no more than it must";
  const uint64_t sum = tree->checksum(), top = tree->pool().top();
  ASSERT_EQ(tree->balance(), HM_OK);
  EXPECT_EQ(tree->checksum(), sum) << "balancing a balanced tree changes nothing";
  EXPECT_EQ(tree->pool().top(), top) << "and writes nothing";
  ASSERT_EQ(tree->persist(), HM_OK);
  std::unique_ptr<Octree<Dim>> again;
  tree.reset();
  ASSERT_EQ(Octree<Dim>::restore(this->path_, &again), HM_OK);
  EXPECT_EQ(unbalanced_pairs(*again), 0) << "the balanced version is what was persisted";
}

TYPED_TEST(OctreeDims, BalanceOnTwoThreadsMakesTheSameTreeAsOnOne) {
  constexpr int Dim = TypeParam::value;
  // A random refinement (every octant to level 3, then each with probability 0.3 from a hash of
  // its corner and level): large enough that the ripple's levels are split between two threads.
  const uint32_t deepest = Dim == 3 ? 9 : 14;
  auto random_tree = [&](const std::string &path, int threads, std::unique_ptr<Octree<Dim>> *out) {
    hm::persist::OctreeOptions o;
    o.threads = threads;
    ASSERT_EQ(Octree<Dim>::create(path, 256 << 20, out, o), HM_OK) << hm_last_error();
    ASSERT_EQ((*out)->refine(
                  [&](const auto &l) {
                    if (l.level >= deepest) return false;
                    uint64_t z = (uint64_t{l.coord[0]} | uint64_t{l.coord[1]} << 20 | uint64_t{l.coord[2]} << 40 |
                                  uint64_t{l.level} << 60) + 0x9E3779B97F4A7C15ull;
                    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
                    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
                    z ^= z >> 31;
                    return l.level < 3 || (z >> 11) * 0x1.0p-53 < (Dim == 3 ? 0.3 : 0.55);
                  },
                  true),
              HM_OK);
  };
  std::unique_ptr<Octree<Dim>> one, two;
  random_tree(this->path_, 1, &one);
  random_tree(this->path_ + ".two", 2, &two);
  ASSERT_EQ(one->checksum(), two->checksum()) << "the same tree before balancing";
  const uint64_t before = one->leaf_count();
  ASSERT_EQ(one->balance(), HM_OK);
  ASSERT_EQ(two->balance(), HM_OK);
  EXPECT_GT(one->leaf_count(), before + 10000) << "the balance had much to do";
  EXPECT_EQ(two->leaf_count(), one->leaf_count());
  EXPECT_EQ(two->checksum(), one->checksum()) << "leaf for leaf the tree one thread makes";
  std::string why;
  EXPECT_TRUE(two->valid(&why)) << why;
  EXPECT_GT(two->stats().pool_reads, 0u) << "the workers' reads are counted";
  two.reset();
  unlink((this->path_ + ".two").c_str());
}

TYPED_TEST(OctreeDims, RestoreRefusesAPoolHoldingSomethingElse) {
  constexpr int Dim = TypeParam::value;
  constexpr int Other = Dim == 2 ? 3 : 2;
  {
    std::unique_ptr<Octree<Other>> other;
    ASSERT_EQ(Octree<Other>::create(this->path_, 1 << 20, &other), HM_OK);
  }
  std::unique_ptr<Octree<Dim>> tree;
  EXPECT_EQ(Octree<Dim>::restore(this->path_, &tree), HM_EFORMAT);
  EXPECT_NE(std::string(hm_last_error()).find("holds 'octree" + std::to_string(Other) + ".3', not a " +
                                                     std::to_string(Dim) + "D tree"), std::string::npos) << hm_last_error();
  EXPECT_FALSE(tree);
  std::unique_ptr<Octree<Other>> same;
  EXPECT_EQ(Octree<Other>::restore(this->path_, &same), HM_OK) << "the refused pool was not touched";
  same.reset();
  unlink(this->path_.c_str());
  {
    std::unique_ptr<hm::persist::Pool> bare;
    ASSERT_EQ(hm::persist::Pool::create(this->path_, 1 << 20, &bare), HM_OK);
    EXPECT_EQ(bare->content(), "");
    ASSERT_EQ(bare->commit(0), HM_OK);
    std::unique_ptr<hm::persist::Pool> named;
    EXPECT_EQ(hm::persist::Pool::create(this->path_ + ".x", 1 << 20, &named, "a-name-of-16-chr"), HM_EINVAL);
    EXPECT_NE(std::string(hm_last_error()).find("longer than 15 characters"), std::string::npos) << hm_last_error();
  }
  EXPECT_EQ(Octree<Dim>::restore(this->path_, &tree), HM_EFORMAT);
  EXPECT_NE(std::string(hm_last_error()).find("holds no tree"), std::string::npos) << hm_last_error();
  unlink(this->path_.c_str());
  {
    // A tree of the layout before 32-bit child references: refused by name, not misread.
    const std::string older = "octree" + std::to_string(Dim) + ".2";
    std::unique_ptr<hm::persist::Pool> pool;
    ASSERT_EQ(hm::persist::Pool::create(this->path_, 1 << 20, &pool, older), HM_OK);
    uint64_t top = 0;
    ASSERT_EQ(pool->allocate(192, &top), HM_OK);
    ASSERT_EQ(pool->commit(top), HM_OK);
  }
  EXPECT_EQ(Octree<Dim>::restore(this->path_, &tree), HM_EFORMAT);
  EXPECT_NE(std::string(hm_last_error()).find("in an older layout ('octree" + std::to_string(Dim) + ".2'"),
            std::string::npos) << hm_last_error();
  EXPECT_FALSE(tree);
}

TYPED_TEST(OctreeDims, APoolLargerThanChildReferencesNameIsRefused) {
  constexpr int Dim = TypeParam::value;
  std::unique_ptr<Octree<Dim>> tree;
  EXPECT_EQ(Octree<Dim>::create(this->path_, Octree<Dim>::kMaxPoolBytes + 4096, &tree), HM_EINVAL);
  EXPECT_NE(std::string(hm_last_error()).find("32-bit"), std::string::npos) << hm_last_error();
  EXPECT_FALSE(std::filesystem::exists(this->path_)) << "nothing was created";
  EXPECT_EQ(Octree<Dim>::kMaxPoolBytes, uint64_t{128} << 30);
}

TYPED_TEST(OctreeDims, SnapshotRoundTripAndDamagedSnapshotsAreRefused) {
  constexpr int Dim = TypeParam::value;
  const std::string snap = this->path_ + ".snap", copy = this->path_ + ".copy";
  std::unique_ptr<Octree<Dim>> tree;
  ASSERT_EQ(Octree<Dim>::create(this->path_, 64 << 20, &tree), HM_OK);
  ASSERT_EQ(advance(*tree, 4), HM_OK);
  ASSERT_EQ(tree->coarsen([](const auto *f) { return f[0].coord[0] == 0 && f[0].level == 4; }), HM_OK);
  ASSERT_EQ(tree->balance(), HM_OK);
  ASSERT_EQ(tree->save_snapshot(snap), HM_OK) << hm_last_error();
  std::unique_ptr<Octree<Dim>> loaded;
  ASSERT_EQ(Octree<Dim>::load_snapshot(snap, copy, 64 << 20, &loaded), HM_OK) << hm_last_error();
  EXPECT_EQ(loaded->checksum(), tree->checksum()) << "the same leaves, levels and values";
  EXPECT_EQ(loaded->leaf_count(), tree->leaf_count());
  std::string why;
  EXPECT_TRUE(loaded->valid(&why)) << why;
  loaded.reset();
  ASSERT_EQ(Octree<Dim>::restore(copy, &loaded), HM_OK) << "the loaded tree was persisted";
  EXPECT_EQ(loaded->checksum(), tree->checksum());
  loaded.reset();
  unlink(copy.c_str());

  std::string bytes;
  {
    std::ifstream in(snap, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string &b) { std::ofstream(snap, std::ios::binary | std::ios::trunc) << b; };
  auto refused = [&](const std::string &words) {
    EXPECT_EQ(Octree<Dim>::load_snapshot(snap, copy, 64 << 20, &loaded), HM_EFORMAT);
    EXPECT_NE(std::string(hm_last_error()).find(words), std::string::npos) << hm_last_error();
    EXPECT_FALSE(loaded);
    EXPECT_NE(access(copy.c_str(), F_OK), 0) << "no pool is left behind";
  };
  std::string damaged = bytes;
  damaged[damaged.size() - 3] ^= 0x10;  // the last leaf's value
  write(damaged);
  refused("do not match its checksum");
  write(bytes.substr(0, bytes.size() - 10));
  refused("truncated or damaged");
  write("not a snapshot at all, but long enough to have a header");
  refused("wrong magic");
  write(bytes);
  std::unique_ptr<Octree<Dim == 2 ? 3 : 2>> other;
  EXPECT_EQ((Octree<Dim == 2 ? 3 : 2>::load_snapshot(snap, copy, 64 << 20, &other)), HM_EFORMAT);
  EXPECT_NE(std::string(hm_last_error()).find("holds a " + std::to_string(Dim) + "D tree"), std::string::npos)
      << hm_last_error();
  unlink(snap.c_str());
  EXPECT_EQ(Octree<Dim>::load_snapshot(snap, copy, 64 << 20, &loaded), HM_EIO);
}

TYPED_TEST(OctreeDims, KilledAtAnyInstantRecoversAPersistedVersion) {
  constexpr int Dim = TypeParam::value;
  // Reference checksums of versions 1..8, computed in a scratch pool.
  std::vector<uint64_t> expect(1, 0);
  {
    std::string scratch = this->path_ + ".ref";
    std::unique_ptr<Octree<Dim>> ref;
    ASSERT_EQ(Octree<Dim>::create(scratch, 64 << 20, &ref), HM_OK);
    expect.push_back(ref->checksum());  // version 1: the root leaf
    for (int k = 1; k <= 8; ++k) {
      ASSERT_EQ(advance(*ref, k), HM_OK);
      ASSERT_EQ(ref->persist(), HM_OK);
      expect.push_back(ref->checksum());
    }
    unlink(scratch.c_str());
  }
  std::mt19937 rng(7);
  signal(SIGPIPE, SIG_IGN);  // a child that died early shows as a failed write, not a dead test
  int recovered_mid_run = 0;
  for (int trial = 0; trial < 12; ++trial) {
    unlink(this->path_.c_str());
    // The parent paces the child one step at a time (a byte on `go` per advance+persist; the
    // child answers on `done`). After a random number of completed steps (0..7) the parent lets
    // one more step start and kills after a random delay, so the kill lands before, during or
    // just after a persist whatever the machine's speed or CPU count.
    int go[2], done[2];
    ASSERT_EQ(pipe(go), 0);
    ASSERT_EQ(pipe(done), 0);
    pid_t child = fork();
    if (child == 0) {
      close(go[1]);
      close(done[0]);
      // Odd trials keep the hot part of the tree in C0 on the fast tier, merged at each persist.
      hm::persist::OctreeOptions options;
      if (trial % 2) options.fast_bytes = 120 * sizeof(typename Octree<Dim>::Family);
      std::unique_ptr<Octree<Dim>> tree;
      if (Octree<Dim>::create(this->path_, 64 << 20, &tree, options) != HM_OK) _exit(3);
      char token;
      for (int k = 1; k <= 8 && read(go[0], &token, 1) == 1; ++k) {
        if (advance(*tree, k) != HM_OK || tree->persist() != HM_OK) _exit(4);
        if (write(done[1], "p", 1) != 1) _exit(5);
      }
      _exit(0);
    }
    close(go[0]);
    close(done[1]);
    int wait_for = std::uniform_int_distribution<int>(0, 7)(rng);
    char byte;
    int seen = 0;
    for (; seen < wait_for; ++seen) {
      if (write(go[1], "g", 1) != 1 || read(done[0], &byte, 1) != 1) break;
    }
    ASSERT_EQ(seen, wait_for) << "the child stopped early";
    if (write(go[1], "g", 1) != 1) ADD_FAILURE() << "the child went away before its last step";
    usleep(std::uniform_int_distribution<int>(0, 3000)(rng));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    close(go[1]);
    close(done[0]);
    std::unique_ptr<Octree<Dim>> tree;
    int rc = Octree<Dim>::restore(this->path_, &tree);
    if (rc != HM_OK) {
      // Killed before the first commit finished: the pool is not yet a tree, and says so.
      EXPECT_TRUE(rc == HM_EFORMAT || rc == HM_EIO) << hm_last_error();
      EXPECT_EQ(wait_for, 0) << "a persist was reported, so a version must be there";
      continue;
    }
    const uint64_t v = tree->version();
    ASSERT_GE(v, static_cast<uint64_t>(wait_for) + 1) << "every reported persist survives";
    ASSERT_LE(v, static_cast<uint64_t>(wait_for) + 2) << "no step ran beyond the one let start";
    ASSERT_LT(v, expect.size());
    EXPECT_EQ(tree->checksum(), expect[v]) << "version " << v << " after a kill in trial " << trial;
    std::string why;
    EXPECT_TRUE(tree->valid(&why)) << why;
    ASSERT_EQ(advance(*tree, 9), HM_OK) << "and adaptation continues";
    if (v > 1 && v < 9) ++recovered_mid_run;
  }
  EXPECT_GT(recovered_mid_run, 0) << "at least one kill landed between two persists";
}

namespace {

// A tree with history: three persisted versions, values changed and octants coarsened between
// them, so that the pool holds families of several versions and reused space.
template <int Dim>
void build_history(Octree<Dim> &tree) {
  auto near = [](const auto &leaf) { return leaf.coord[0] < (1u << 19) && leaf.coord[1] < (3u << 18); };
  ASSERT_EQ(tree.refine([](const auto &) { return true; }), HM_OK);
  ASSERT_EQ(tree.refine([](const auto &) { return true; }), HM_OK);
  ASSERT_EQ(tree.refine(near), HM_OK);
  ASSERT_EQ(tree.persist(), HM_OK);
  std::mt19937_64 rng(7);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 40; ++i) {
      double p[3] = {std::uniform_real_distribution<double>(0, 1)(rng), std::uniform_real_distribution<double>(0, 1)(rng),
                     std::uniform_real_distribution<double>(0, 1)(rng)};
      ASSERT_EQ(tree.set_value(p, round * 100.0 + i), HM_OK);
    }
    ASSERT_EQ(tree.refine([&](const auto &leaf) { return near(leaf) && leaf.level < 5u + round % 2; }), HM_OK);
    ASSERT_EQ(tree.coarsen([&](const auto *family) { return family[0].level == 5u && round == 1; }), HM_OK);
    ASSERT_EQ(tree.persist(), HM_OK);
  }
}

using hm_test::read_file;
using hm_test::write_file;

// Restore's options with every family checked before it returns, not on the first visit.
hm::persist::OctreeOptions check_before_returning(int threads = 1) {
  hm::persist::OctreeOptions o;
  o.check_on_first_visit = false;
  o.threads = threads;
  return o;
}

}  // namespace

// Random single-byte flips in the committed data: restore and its first visit either return
// exactly the persisted tree (the byte was not part of it) or refuse with HM_EFORMAT; they never
// crash and never return a different tree. Run by CTest with HM_PM_CHECK=1 and again with HM_PM_CHECK=0.
TYPED_TEST(OctreeDims, SingleByteDamageIsRefusedNeverFollowedNorReturned) {
  constexpr int Dim = TypeParam::value;
  uint64_t want_sum = 0, data_end = 0;
  size_t want_leaves = 0;
  {
    std::unique_ptr<Octree<Dim>> tree;
    ASSERT_EQ(Octree<Dim>::create(this->path_, 1 << 20, &tree), HM_OK) << hm_last_error();
    build_history(*tree);
    want_sum = tree->checksum();
    want_leaves = tree->leaf_count();
    data_end = tree->pool().committed_top();
  }
  const std::vector<char> good = read_file(this->path_);
  std::mt19937_64 rng(2024 + Dim);
  int refused = 0, identical = 0;
  const int trials = std::getenv("HM_TEST_FLIPS") ? std::atoi(std::getenv("HM_TEST_FLIPS")) : 300;
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<char> bad = good;
    const uint64_t at = hm::persist::kHeaderBytes + rng() % (data_end - hm::persist::kHeaderBytes);
    bad[at] = static_cast<char>(bad[at] ^ static_cast<char>(1 + rng() % 255));
    write_file(this->path_, bad);
    std::unique_ptr<Octree<Dim>> tree;
    int rc = Octree<Dim>::restore(this->path_, &tree);
    size_t visited = 0;
    if (rc == HM_OK) rc = tree->leaves([&](const auto &) { ++visited; });  // the first visit checks
    if (rc == HM_OK) {
      ASSERT_EQ(tree->checksum(), want_sum) << "a flip at byte " << at << " gave a different tree";
      ASSERT_EQ(visited, want_leaves);
      ++identical;
    } else {
      ASSERT_EQ(rc, HM_EFORMAT) << hm_last_error();
      if (tree) {
        ASSERT_EQ(tree->checksum(), 0u) << "a damaged tree is refused from then on";
      }
      ++refused;
    }
  }
  EXPECT_GT(refused, trials / 4) << "most of the committed data is the tree";
  EXPECT_GT(identical, 0) << "slots of the older versions and free space are not the tree";
  write_file(this->path_, good);
  std::unique_ptr<Octree<Dim>> tree;
  ASSERT_EQ(Octree<Dim>::restore(this->path_, &tree), HM_OK);
  EXPECT_EQ(tree->checksum(), want_sum);
}

// Restore's check on two threads (the top levels on one, then subtrees taken in turn) gives the
// same answer as on one for every single-byte damage: the same tree, or the same refusal naming
// the same family.
TYPED_TEST(OctreeDims, RestoreChecksOnTwoThreadsAsOnOne) {
  constexpr int Dim = TypeParam::value;
  const uint32_t uniform = Dim == 3 ? 4 : 6;  // hundreds of subtrees for the threads to take
  uint64_t want_sum = 0, data_end = 0;
  {
    std::unique_ptr<Octree<Dim>> tree;
    ASSERT_EQ(Octree<Dim>::create(this->path_, 16 << 20, &tree), HM_OK) << hm_last_error();
    for (uint32_t l = 0; l < uniform; ++l) ASSERT_EQ(tree->refine([](const auto &) { return true; }), HM_OK);
    ASSERT_EQ(tree->refine([](const auto &l) { return l.coord[0] == 0 && l.level < 8; }, true), HM_OK);
    ASSERT_EQ(tree->persist(), HM_OK);
    want_sum = tree->checksum();
    data_end = tree->pool().committed_top();
  }
  const std::vector<char> good = read_file(this->path_);
  // What a restore on `threads` threads gives: its code, and the tree's checksum or the refusal.
  auto restore = [&](int threads) {
    std::unique_ptr<Octree<Dim>> tree;
    const int rc = Octree<Dim>::restore(this->path_, &tree, check_before_returning(threads));
    return std::make_pair(rc, rc == HM_OK ? std::to_string(tree->checksum()) : std::string(hm_last_error()));
  };
  ASSERT_EQ(restore(2), std::make_pair(int{HM_OK}, std::to_string(want_sum)));
  std::mt19937_64 rng(77 + Dim);
  int refused = 0;
  for (int trial = 0; trial < 120; ++trial) {
    std::vector<char> bad = good;
    const uint64_t at = hm::persist::kHeaderBytes + rng() % (data_end - hm::persist::kHeaderBytes);
    bad[at] = static_cast<char>(bad[at] ^ static_cast<char>(1 + rng() % 255));
    write_file(this->path_, bad);
    const auto one = restore(1);
    ASSERT_EQ(restore(2), one) << "a flip at byte " << at;
    if (one.first == HM_OK) {
      ASSERT_EQ(one.second, std::to_string(want_sum)) << "a flip at byte " << at;
    } else {
      ++refused;
    }
  }
  EXPECT_GT(refused, 30) << "most of the committed data is the tree";
}

// A restore that checks on the first visit (the default) accepts and refuses what the check
// before returning does, for every single-byte damage: the first visit gives the same tree,
// or stops with the same refusal having given only a prefix of the intact tree's leaves; every
// later operation is refused with it and the pool file is left as it was.
TYPED_TEST(OctreeDims, ACheckOnTheFirstVisitRefusesWhatRestoreRefuses) {
  constexpr int Dim = TypeParam::value;
  using Leaf = typename Octree<Dim>::Leaf;
  auto same = [](const Leaf &a, const Leaf &b) {
    return a.level == b.level && a.value == b.value && std::equal(a.coord, a.coord + Dim, b.coord);
  };
  std::vector<Leaf> good_leaves;
  uint64_t data_end = 0;
  {
    std::unique_ptr<Octree<Dim>> tree;
    ASSERT_EQ(Octree<Dim>::create(this->path_, 4 << 20, &tree), HM_OK) << hm_last_error();
    for (uint32_t l = 0; l < (Dim == 3 ? 3u : 5u); ++l) ASSERT_EQ(tree->refine([](const auto &) { return true; }), HM_OK);
    ASSERT_EQ(tree->refine([](const auto &l) { return l.coord[0] == 0 && l.level < 7; }, true), HM_OK);
    uint64_t i = 0;
    ASSERT_EQ(tree->each_leaf([&](const Leaf &) {}), HM_OK);
    std::vector<Leaf> all;
    ASSERT_EQ(tree->leaves([&](const Leaf &l) { all.push_back(l); }), HM_OK);
    for (const Leaf &l : all) {  // distinct values, so that a prefix names its leaves
      double point[3];
      for (int d = 0; d < Dim; ++d) point[d] = (l.coord[d] + 0.5) / double(1u << 20);
      ASSERT_EQ(tree->set_value(point, 1.0 + static_cast<double>(i++)), HM_OK);
    }
    ASSERT_EQ(tree->persist(), HM_OK);
    ASSERT_EQ(tree->leaves([&](const Leaf &l) { good_leaves.push_back(l); }), HM_OK);
    data_end = tree->pool().committed_top();
  }
  const std::vector<char> good = read_file(this->path_);
  std::mt19937_64 rng(91 + Dim);
  int refused = 0, refused_mid_visit = 0;
  for (int trial = 0; trial < 120; ++trial) {
    std::vector<char> bad = good;
    const uint64_t at = hm::persist::kHeaderBytes + rng() % (data_end - hm::persist::kHeaderBytes);
    bad[at] = static_cast<char>(bad[at] ^ static_cast<char>(1 + rng() % 255));
    write_file(this->path_, bad);
    std::string eager_refusal;
    {
      std::unique_ptr<Octree<Dim>> tree;
      if (Octree<Dim>::restore(this->path_, &tree, check_before_returning()) != HM_OK) eager_refusal = hm_last_error();
    }
    std::unique_ptr<Octree<Dim>> tree;
    ASSERT_EQ(Octree<Dim>::restore(this->path_, &tree), HM_OK)
        << "a flip at byte " << at << " in the families is found by the visit, not by restore: " << hm_last_error();
    std::vector<Leaf> seen;
    const int rc = tree->each_leaf([&](const Leaf &l) { seen.push_back(l); });
    ASSERT_LE(seen.size(), good_leaves.size()) << "a flip at byte " << at;
    for (size_t k = 0; k < seen.size(); ++k) ASSERT_TRUE(same(seen[k], good_leaves[k])) << "leaf " << k << ", a flip at byte " << at;
    if (eager_refusal.empty()) {
      ASSERT_EQ(rc, HM_OK) << "a flip at byte " << at << ": " << hm_last_error();
      ASSERT_EQ(seen.size(), good_leaves.size()) << "a flip at byte " << at;
      continue;
    }
    ++refused;
    refused_mid_visit += seen.size() < good_leaves.size();
    ASSERT_EQ(rc, HM_EFORMAT) << "a flip at byte " << at;
    ASSERT_EQ(std::string(hm_last_error()), eager_refusal) << "a flip at byte " << at;
    // Refused from then on, by the operations that write and by those that read, with the same words.
    ASSERT_EQ(tree->refine([](const Leaf &) { return true; }), HM_EFORMAT);
    ASSERT_EQ(std::string(hm_last_error()), eager_refusal);
    ASSERT_EQ(tree->persist(), HM_EFORMAT);
    ASSERT_EQ(tree->each_leaf([](const Leaf &) { ADD_FAILURE() << "a damaged tree gave a leaf"; }), HM_EFORMAT);
    ASSERT_EQ(tree->checksum(), 0u);
    tree.reset();
    ASSERT_EQ(read_file(this->path_), bad) << "a refused pool is left as it was";
  }
  EXPECT_GT(refused, 30) << "most of the committed data is the tree";
  EXPECT_GT(refused_mid_visit, 0) << "some damage lies past the first leaves";
}

// With the check on the first visit, an operation other than a visit checks every family before
// it reads or writes any: on an intact pool it works as after an ordinary restore, on a damaged one
// it is refused with restore's message and nothing is written.
TYPED_TEST(OctreeDims, ACheckOnTheFirstVisitIsDoneWholeByAnyOtherFirstOperation) {
  constexpr int Dim = TypeParam::value;
  using Leaf = typename Octree<Dim>::Leaf;
  uint64_t want_sum = 0, data_end = 0;
  {
    std::unique_ptr<Octree<Dim>> tree;
    ASSERT_EQ(Octree<Dim>::create(this->path_, 4 << 20, &tree), HM_OK) << hm_last_error();
    for (int l = 0; l < 3; ++l) ASSERT_EQ(tree->refine([](const auto &) { return true; }), HM_OK);
    ASSERT_EQ(tree->persist(), HM_OK);
    want_sum = tree->checksum();
    data_end = tree->pool().committed_top();
  }
  const double point[3] = {0.1, 0.2, 0.3};
  {
    std::unique_ptr<Octree<Dim>> tree;
    ASSERT_EQ(Octree<Dim>::restore(this->path_, &tree), HM_OK) << hm_last_error();
    ASSERT_EQ(tree->set_value(point, 7.0), HM_OK) << hm_last_error();
    Leaf found{};
    ASSERT_TRUE(tree->find(point, &found));
    EXPECT_EQ(found.value, 7.0);
    EXPECT_NE(tree->checksum(), want_sum);
    EXPECT_EQ(tree->each_leaf([](const Leaf &) {}), HM_OK);
  }
  const std::vector<char> good = read_file(this->path_);
  // Damage a committed family near the end of the data (slot by slot from the end, the first
  // flip restore refuses that leaves the root object intact).
  std::vector<char> bad;
  std::string eager_refusal;
  for (uint64_t slot = data_end - 128; slot >= hm::persist::kHeaderBytes && eager_refusal.empty(); slot -= 128) {
    bad = good;
    bad[slot + 20] = static_cast<char>(bad[slot + 20] ^ 0x5A);
    write_file(this->path_, bad);
    std::unique_ptr<Octree<Dim>> tree;
    if (Octree<Dim>::restore(this->path_, &tree, check_before_returning()) == HM_OK) continue;
    const std::string refusal = hm_last_error();
    if (Octree<Dim>::restore(this->path_, &tree) == HM_OK) eager_refusal = refusal;  // not the root object
  }
  ASSERT_FALSE(eager_refusal.empty());
  std::unique_ptr<Octree<Dim>> tree;
  ASSERT_EQ(Octree<Dim>::restore(this->path_, &tree), HM_OK) << hm_last_error();
  ASSERT_EQ(tree->set_value(point, 7.0), HM_EFORMAT);
  EXPECT_EQ(std::string(hm_last_error()), eager_refusal);
  Leaf found{};
  EXPECT_FALSE(tree->find(point, &found));
  std::string why;
  EXPECT_FALSE(tree->valid(&why));
  EXPECT_EQ(why, eager_refusal);
  EXPECT_EQ(tree->settle(), HM_EFORMAT);
  tree.reset();
  EXPECT_EQ(read_file(this->path_), bad) << "a refused pool is left as it was";
}

// The newest root slot damaged after work went on past the last persist: the version before it
// has had its space reused. Restore must refuse it and say so; with the slot damaged right after
// a persist (nothing reused), the version before is intact and is restored.
TYPED_TEST(OctreeDims, ADamagedNewestRootSlotNeverReturnsAReusedVersion) {
  constexpr int Dim = TypeParam::value;
  for (bool work_after = false;; work_after = true) {
    uint64_t previous_sum = 0;
    int newest_slot = 0;
    {
      std::unique_ptr<Octree<Dim>> tree;
      ASSERT_EQ(Octree<Dim>::create(this->path_, 1 << 20, &tree), HM_OK) << hm_last_error();
      build_history(*tree);
      previous_sum = tree->checksum();
      // One more version that rewrites every value: the previous version's families are then
      // its alone, freed by this persist and the first slots the next work takes.
      ASSERT_EQ(tree->refine([](const auto &leaf) { return leaf.level < 4u; }), HM_OK);
      std::vector<std::array<double, 3>> points;
      ASSERT_EQ(tree->leaves([&](const auto &leaf) {
        const double h = 0.5 / (1u << 20);
        points.push_back({leaf.coord[0] / double(1u << 20) + h, leaf.coord[1] / double(1u << 20) + h,
                          leaf.coord[2] / double(1u << 20) + h});
      }), HM_OK);
      for (auto &p : points) ASSERT_EQ(tree->set_value(p.data(), 1.0), HM_OK);
      ASSERT_EQ(tree->persist(), HM_OK);
      if (work_after) {
        for (auto &p : points) ASSERT_EQ(tree->set_value(p.data(), 2.0), HM_OK);  // not persisted
      }
      newest_slot = tree->version() % 2 == 0 ? 1 : 0;  // version 1 went to slot 0, then alternating
    }
    // Root slots are 32 bytes at 56 and 88; flip a byte of the newest one's root offset.
    std::vector<char> data = read_file(this->path_);
    const size_t slot_at = 56 + 32 * static_cast<size_t>(newest_slot);
    data[slot_at + 8] = static_cast<char>(data[slot_at + 8] ^ 0x40);
    write_file(this->path_, data);
    std::unique_ptr<Octree<Dim>> tree;
    int rc = Octree<Dim>::restore(this->path_, &tree);
    if (rc == HM_OK) rc = tree->settle();  // the families, checked on the first operation
    if (work_after) {
      ASSERT_EQ(rc, HM_EFORMAT) << "the version before the damaged slot has had its space reused";
      const std::string msg = hm_last_error();
      EXPECT_NE(msg.find("the newest root slot is damaged"), std::string::npos) << msg;
      EXPECT_NE(msg.find("reused"), std::string::npos) << msg;
    } else {
      ASSERT_EQ(rc, HM_OK) << hm_last_error();
      EXPECT_EQ(tree->checksum(), previous_sum) << "the version before the damaged slot, intact";
    }
    tree.reset();
    unlink(this->path_.c_str());
    if (work_after) break;
  }
}
