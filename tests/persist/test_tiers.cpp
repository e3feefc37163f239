// PM-octree across tiers: C0 on the fast tier gives the same trees as the pool alone, space is
// reused (deletion marks, mark-and-sweep), replicas restore a lost pool from deltas, the
// transformation moves C0 to where the features point, and incremental adaptation equals a
// rebuild from scratch.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "base/options.h"
#include "hetmem/hetmem.h"
#include "persist/octree.h"
#include "../support.h"
#include "octree_workload.h"

using hm::persist::Octree;
using hm::persist::OctreeOptions;
using hm_test::advance;
using hm_test::crosses_sphere;

namespace {

template <int N>
struct D {
  static constexpr int value = N;
};

template <class T>
class Tiers : public ::testing::Test {
 protected:
  static constexpr int Dim = T::value;
  using Tree = Octree<Dim>;
  void SetUp() override { path_ = hm_test::temp_path("tiers" + std::to_string(Dim)); }
  void TearDown() override {
    unlink(path_.c_str());
    unlink((path_ + ".replica").c_str());
    unlink((path_ + ".plain").c_str());
  }
  static OctreeOptions with_fast(uint64_t families) {
    OctreeOptions o;
    o.fast_bytes = families * sizeof(typename Tree::Family);
    return o;
  }
  std::string path_;
};

using Dims = ::testing::Types<D<2>, D<3>>;
namespace {
// A pool fetched back from a replica: only its used part came back (the file is sparse), and it
// is owner-only like every pool.
void expect_fetched_pool(const std::string &path) {
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 16 << 20);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, static_cast<uint64_t>(st.st_size) / 2);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}
}  // namespace

TYPED_TEST_SUITE(Tiers, Dims);

// A sphere moving along x: the application's interface, its refine predicate, and the feature.
template <int Dim>
bool near_moving_sphere(const typename Octree<Dim>::Leaf &l, double t) {
  const double size = std::ldexp(1.0, -static_cast<int>(l.level));
  double dist = 0;
  for (int d = 0; d < Dim; ++d) {
    const double centre = d == 0 ? 0.2 + 0.6 * t : 0.5;
    const double lo = std::ldexp(static_cast<double>(l.coord[d]), -Octree<Dim>::kMaxLevel) - centre, hi = lo + size;
    const double n = lo > 0 ? lo : (hi < 0 ? hi : 0);
    dist += n * n;
  }
  return std::sqrt(dist) < 0.12 + size;
}

// The octant a family of leaves came from.
template <int Dim>
typename Octree<Dim>::Leaf parent_of(const typename Octree<Dim>::Leaf *family) {
  typename Octree<Dim>::Leaf p = family[0];
  p.level -= 1;
  return p;
}

template <int Dim>
int step(Octree<Dim> &tree, double t, int level) {
  int rc = tree.coarsen([&](const typename Octree<Dim>::Leaf *f) { return !near_moving_sphere<Dim>(parent_of<Dim>(f), t); });
  for (int l = 0; l < level && rc == HM_OK; ++l)
    rc = tree.refine([&](const typename Octree<Dim>::Leaf &x) { return x.level < static_cast<uint32_t>(level) && near_moving_sphere<Dim>(x, t); });
  if (rc == HM_OK) rc = tree.balance();
  double p[3] = {0.2 + 0.6 * t, 0.5, 0.5};
  for (int k = 0; k < 20 && rc == HM_OK; ++k) {
    p[1] = 0.4 + 0.01 * k;
    rc = tree.set_value(p, t + k);
  }
  return rc;
}

TYPED_TEST(Tiers, C0GivesTheSameTreesAsThePoolAlone) {
  constexpr int Dim = TypeParam::value;
  std::unique_ptr<Octree<Dim>> fast, plain;
  ASSERT_EQ(Octree<Dim>::create(this->path_, 32 << 20, &fast, this->with_fast(150)), HM_OK) << hm_last_error();
  ASSERT_EQ(Octree<Dim>::create(this->path_ + ".plain", 32 << 20, &plain), HM_OK);
  const int level = Dim == 2 ? 7 : 5;
  for (int s = 0; s < 12; ++s) {
    const double t = s / 12.0;
    ASSERT_EQ(step(*fast, t, level), HM_OK) << hm_last_error();
    ASSERT_EQ(step(*plain, t, level), HM_OK);
    ASSERT_EQ(fast->checksum(), plain->checksum()) << "step " << s;
    ASSERT_EQ(fast->persist(), HM_OK);
    ASSERT_EQ(plain->persist(), HM_OK);
    std::string why;
    ASSERT_TRUE(fast->valid(&why)) << why;
    const auto st = fast->stats();
    ASSERT_LE(st.fast_families, st.fast_capacity);
  }
  const auto st = fast->stats();
  EXPECT_GT(st.fast_writes, 0u);
  EXPECT_GT(st.merges, 0u) << "a budget of 150 families must overflow and merge subtrees out";
  EXPECT_LT(st.pool_writes, plain->stats().pool_writes) << "C0 absorbs repeated writes";
  const uint64_t sum = fast->checksum();
  fast.reset();
  std::unique_ptr<Octree<Dim>> back;
  ASSERT_EQ(Octree<Dim>::restore(this->path_, &back), HM_OK);
  EXPECT_EQ(back->checksum(), sum) << "the persisted version holds what C0 held";
}

TYPED_TEST(Tiers, PersistFreesWhatOnlyTheOldVersionUsed) {
  constexpr int Dim = TypeParam::value;
  std::unique_ptr<Octree<Dim>> tree;
  ASSERT_EQ(Octree<Dim>::create(this->path_, 32 << 20, &tree), HM_OK);
  const int level = Dim == 2 ? 7 : 5;
  uint64_t most = 0;
  for (int s = 0; s < 40; ++s) {
    ASSERT_EQ(step(*tree, (s % 10) / 10.0, level), HM_OK);
    ASSERT_EQ(tree->persist(), HM_OK);
    if (s >= 10) most = std::max(most, tree->stats().pool_families);
  }
  const uint64_t families = (tree->leaf_count() - 1) / (Octree<Dim>::kChildren - 1);
  EXPECT_LT(most, 3 * families) << "the pool holds about two versions, not forty";
  // After a restart nothing is known free until a mark-and-sweep: it finds exactly the garbage.
  const uint64_t below_top = tree->pool().top();
  tree.reset();
  ASSERT_EQ(Octree<Dim>::restore(this->path_, &tree), HM_OK);
  ASSERT_EQ(tree->collect(), HM_OK);
  const auto st = tree->stats();
  EXPECT_EQ(st.gc_runs, 1u);
  EXPECT_EQ(st.pool_families, families + 1) << "live: the tree's families and its root object";
  EXPECT_EQ(st.gc_freed + st.pool_families, (below_top - hm::persist::kHeaderBytes) / ((sizeof(typename Octree<Dim>::Family) + 63) / 64 * 64));
  const uint64_t sum = tree->checksum();
  ASSERT_EQ(step(*tree, 0.55, level), HM_OK);
  ASSERT_EQ(tree->persist(), HM_OK);
  EXPECT_LE(tree->pool().top(), below_top) << "the new version went into freed slots";
  EXPECT_NE(tree->checksum(), sum);
}

TYPED_TEST(Tiers, ReplicaGetsDeltasAndRestoresALostPool) {
  constexpr int Dim = TypeParam::value;
  OctreeOptions o;
  o.replica = this->path_ + ".replica";
  std::unique_ptr<Octree<Dim>> tree;
  ASSERT_EQ(Octree<Dim>::create(this->path_, 16 << 20, &tree, o), HM_OK) << hm_last_error();
  const int level = Dim == 2 ? 7 : 5;
  ASSERT_EQ(step(*tree, 0.0, level), HM_OK);
  ASSERT_EQ(tree->persist(), HM_OK);
  const uint64_t first = tree->stats().replica_bytes;
  ASSERT_EQ(step(*tree, 0.05, level), HM_OK);
  ASSERT_EQ(tree->persist(), HM_OK);
  const uint64_t delta = tree->stats().replica_bytes - first;
  EXPECT_GT(delta, 0u);
  EXPECT_LT(delta, tree->pool().top() / 2) << "only the slots the version wrote are sent";
  const uint64_t sum = tree->checksum(), version = tree->version();
  tree.reset();
  ASSERT_EQ(unlink(this->path_.c_str()), 0);
  std::unique_ptr<Octree<Dim>> back;
  ASSERT_EQ(Octree<Dim>::restore(this->path_, &back, o), HM_OK) << hm_last_error();
  expect_fetched_pool(this->path_);
  EXPECT_EQ(back->checksum(), sum);
  EXPECT_EQ(back->version(), version);
  std::string why;
  EXPECT_TRUE(back->valid(&why)) << why;
  ASSERT_EQ(step(*back, 0.1, level), HM_OK) << "and the simulation continues";
  ASSERT_EQ(back->persist(), HM_OK);
}

TYPED_TEST(Tiers, TransformationFollowsTheFeatures) {
  constexpr int Dim = TypeParam::value;
  const int level = Dim == 2 ? 8 : 6;
  uint64_t writes[2] = {0, 0};
  for (int transform = 0; transform < 2; ++transform) {
    OctreeOptions o = this->with_fast(Dim == 2 ? 200 : 400);
    o.transform = transform == 1;
    std::unique_ptr<Octree<Dim>> tree;
    unlink(this->path_.c_str());
    ASSERT_EQ(Octree<Dim>::create(this->path_, 64 << 20, &tree, o), HM_OK) << hm_last_error();
    double next = 0;
    tree->set_features([&](const typename Octree<Dim>::Leaf &l) { return near_moving_sphere<Dim>(l, next); });
    for (int s = 0; s < 10; ++s) {
      next = (s + 1) / 10.0;
      ASSERT_EQ(step(*tree, s / 10.0, level), HM_OK);
      ASSERT_EQ(tree->persist(), HM_OK);
    }
    writes[transform] = tree->stats().pool_writes;
    if (transform) {
      EXPECT_GT(tree->stats().transforms, 1u) << "the hot subtree moved with the sphere";
      const auto hot = tree->hot_subtrees();
      ASSERT_GE(hot.size(), 1u);
      for (const auto &h : hot) EXPECT_TRUE(near_moving_sphere<Dim>(h, next)) << "C0 is for where the features point";
    }
  }
  EXPECT_LT(writes[1], writes[0]) << "following the features takes writes off the persistent tier";
}

TYPED_TEST(Tiers, IncrementalAdaptationEqualsARebuild) {
  // Adapting step by step to the sphere at t (coarsen and refine to a fixed point, balance) gives
  // the tree a fresh build for t gives.
  constexpr int Dim = TypeParam::value;
  using Leaf = typename Octree<Dim>::Leaf;
  const uint32_t level = Dim == 2 ? 7 : 5;
  auto adapt = [&](Octree<Dim> &tree, double t) {
    for (bool changed = true; changed;) {
      const size_t before = tree.leaf_count();
      EXPECT_EQ(tree.coarsen([&](const Leaf *f) { return !near_moving_sphere<Dim>(parent_of<Dim>(f), t); }), HM_OK);
      changed = tree.leaf_count() != before;
    }
    for (bool changed = true; changed;) {
      const size_t before = tree.leaf_count();
      EXPECT_EQ(tree.refine([&](const Leaf &x) { return x.level < level && near_moving_sphere<Dim>(x, t); }), HM_OK);
      changed = tree.leaf_count() != before;
    }
    EXPECT_EQ(tree.balance(), HM_OK);
  };
  std::unique_ptr<Octree<Dim>> steps, fresh;
  ASSERT_EQ(Octree<Dim>::create(this->path_, 32 << 20, &steps, this->with_fast(100)), HM_OK);
  for (int s = 0; s <= 6; ++s) {
    adapt(*steps, s / 6.0);
    ASSERT_EQ(steps->persist(), HM_OK);
  }
  ASSERT_EQ(Octree<Dim>::create(this->path_ + ".plain", 32 << 20, &fresh), HM_OK);
  adapt(*fresh, 1.0);
  EXPECT_EQ(steps->leaf_count(), fresh->leaf_count());
  EXPECT_EQ(steps->checksum(), fresh->checksum());
  EXPECT_TRUE(steps->balanced());
}

TYPED_TEST(Tiers, TheNvbmEmulationChargesWhatTheCacheModelMisses) {
  // A family read again while the modelled CPU cache still holds it costs the device nothing;
  // the first visit of a restored tree is charged.
  constexpr int Dim = TypeParam::value;
  using Leaf = typename Octree<Dim>::Leaf;
  OctreeOptions o;
  o.emulate_nvbm = true;
  std::unique_ptr<Octree<Dim>> tree;
  ASSERT_EQ(Octree<Dim>::create(this->path_, 32 << 20, &tree, o), HM_OK);
  ASSERT_EQ(tree->refine([](const Leaf &x) { return x.level < 4; }, true), HM_OK);
  ASSERT_EQ(tree->persist(), HM_OK);
  tree.reset();
  ASSERT_EQ(Octree<Dim>::restore(this->path_, &tree, o), HM_OK);
  const uint64_t before = tree->stats().emul_charged_ns;
  uint64_t leaves = 0;
  ASSERT_EQ(tree->leaves([&](const Leaf &) { ++leaves; }), HM_OK);
  const uint64_t first = tree->stats().emul_charged_ns - before;
  ASSERT_EQ(tree->leaves([&](const Leaf &) { ++leaves; }), HM_OK);
  const uint64_t second = tree->stats().emul_charged_ns - before - first;
  EXPECT_EQ(leaves, 2 * tree->leaf_count());
  EXPECT_GT(first, 0u) << "the first visit reads every family from the device";
  EXPECT_EQ(second, 0u) << "the second finds them all in the modelled cache";
}

TYPED_TEST(Tiers, RecursiveAdaptationReachesTheFixedPointOfSinglePasses) {
  // One recursive coarsening under Gerris' rule (finest level first) merges exactly what
  // single-level passes repeated until nothing changes merge, and one recursive refinement
  // refines what single passes do; step by step, on a balanced tree, with and without C0.
  constexpr int Dim = TypeParam::value;
  using Leaf = typename Octree<Dim>::Leaf;
  const uint32_t level = Dim == 2 ? 8 : 6;
  auto coarse = [](double t) {
    return [t](const Leaf *f) { return f[0].level > 2 && !near_moving_sphere<Dim>(parent_of<Dim>(f), t); };
  };
  auto fine = [level](double t) { return [t, level](const Leaf &x) { return x.level < level && near_moving_sphere<Dim>(x, t); }; };
  std::unique_ptr<Octree<Dim>> passes, recursive;
  ASSERT_EQ(Octree<Dim>::create(this->path_, 64 << 20, &passes), HM_OK);
  ASSERT_EQ(Octree<Dim>::create(this->path_ + ".plain", 64 << 20, &recursive, this->with_fast(100)), HM_OK);
  ASSERT_EQ(recursive->refine(fine(0), true), HM_OK);
  ASSERT_EQ(recursive->balance(), HM_OK);
  for (bool changed = true; changed;) {
    const size_t before = passes->leaf_count();
    ASSERT_EQ(passes->refine(fine(0)), HM_OK);
    changed = passes->leaf_count() != before;
  }
  ASSERT_EQ(passes->balance(), HM_OK);
  ASSERT_EQ(passes->checksum(), recursive->checksum());
  for (int s = 1; s <= 5; ++s) {
    const double t = s / 5.0;
    int single_passes = 0;
    for (bool changed = true; changed; ++single_passes) {
      const size_t before = passes->leaf_count();
      ASSERT_EQ(passes->coarsen(coarse(t), true), HM_OK);
      changed = passes->leaf_count() != before;
    }
    ASSERT_EQ(recursive->coarsen(coarse(t), true, true), HM_OK);
    EXPECT_EQ(passes->leaf_count(), recursive->leaf_count()) << "step " << s;
    EXPECT_EQ(passes->checksum(), recursive->checksum()) << "step " << s;
    EXPECT_GT(single_passes, 2) << "the sphere moved far enough for coarsening over several levels";
    for (bool changed = true; changed;) {
      const size_t before = passes->leaf_count();
      ASSERT_EQ(passes->refine(fine(t)), HM_OK);
      changed = passes->leaf_count() != before;
    }
    ASSERT_EQ(recursive->refine(fine(t), true), HM_OK);
    ASSERT_EQ(passes->balance(), HM_OK);
    ASSERT_EQ(recursive->balance(), HM_OK);
    EXPECT_EQ(passes->checksum(), recursive->checksum()) << "step " << s;
    ASSERT_EQ(recursive->persist(), HM_OK);
    ASSERT_EQ(passes->persist(), HM_OK);
  }
}

}  // namespace

namespace {

TYPED_TEST(Tiers, AReplicaThatDoesNotMatchIsRefused) {
  constexpr int Dim = TypeParam::value;
  const std::string replica = this->path_ + ".replica";
  {
    std::unique_ptr<Octree<Dim>> other;  // a pool of another size where the replica should go
    ASSERT_EQ(Octree<Dim>::create(replica, 4 << 20, &other), HM_OK);
  }
  OctreeOptions o;
  o.replica = replica;
  std::unique_ptr<Octree<Dim>> tree;
  EXPECT_EQ(Octree<Dim>::create(this->path_, 8 << 20, &tree, o), HM_EFORMAT);
  EXPECT_NE(std::string(hm_last_error()).find("does not match"), std::string::npos) << hm_last_error();
  EXPECT_FALSE(std::filesystem::exists(this->path_)) << "no pool is left behind";
  std::unique_ptr<Octree<Dim>> untouched;
  EXPECT_EQ(Octree<Dim>::restore(replica, &untouched), HM_OK) << "the mismatched replica was left as it was";
  untouched.reset();
  ASSERT_EQ(unlink(replica.c_str()), 0);
  std::FILE *f = std::fopen(replica.c_str(), "w");  // not a pool at all
  ASSERT_NE(f, nullptr);
  std::fputs("not a pool\n", f);
  std::fclose(f);
  EXPECT_EQ(Octree<Dim>::create(this->path_, 8 << 20, &tree, o), HM_EFORMAT);
  EXPECT_NE(std::string(hm_last_error()).find("truncated"), std::string::npos) << hm_last_error();
}

}  // namespace

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "persist/replica.h"
#include "prim/prim.h"

namespace {

TYPED_TEST(Tiers, ARemoteReplicaGetsDeltasAndRestoresALostPool) {
  // A replica server in a thread of this process, on a free localhost port, serving three
  // connections: the primary's run, the restore's fetch, the restored tree's own replica.
  constexpr int Dim = TypeParam::value;
  const std::string served = this->path_ + ".replica";
  unlink(served.c_str());
  int listener = -1, port = 0;
  ASSERT_EQ(hm::prim::tcp_listen("127.0.0.1", 0, &listener, &port), HM_OK);
  std::thread server([&] {
    for (int connection = 0; connection < 3; ++connection) {
      int fd = -1;
      if (hm::prim::tcp_accept(listener, &fd) != HM_OK) return;
      hm::persist::serve_replica(fd, served);
    }
  });
  OctreeOptions o;
  o.replica = "tcp://127.0.0.1:" + std::to_string(port);
  uint64_t sum = 0, version = 0, first = 0, delta = 0;
  {
    std::unique_ptr<Octree<Dim>> tree;
    ASSERT_EQ(Octree<Dim>::create(this->path_, 16 << 20, &tree, o), HM_OK) << hm_last_error();
    const int level = Dim == 2 ? 7 : 5;
    ASSERT_EQ(step(*tree, 0.0, level), HM_OK);
    ASSERT_EQ(tree->persist(), HM_OK) << hm_last_error();
    first = tree->stats().replica_bytes;
    ASSERT_EQ(step(*tree, 0.05, level), HM_OK);
    ASSERT_EQ(tree->persist(), HM_OK) << hm_last_error();
    delta = tree->stats().replica_bytes - first;
    EXPECT_LT(delta, tree->pool().top() / 2) << "only the delta crosses the network";
    sum = tree->checksum();
    version = tree->version();
  }
  ASSERT_EQ(unlink(this->path_.c_str()), 0);
  std::unique_ptr<Octree<Dim>> back;
  ASSERT_EQ(Octree<Dim>::restore(this->path_, &back, OctreeOptions{}), HM_EIO) << "without the replica: gone";
  ASSERT_EQ(Octree<Dim>::restore(this->path_, &back, o), HM_OK) << hm_last_error();
  expect_fetched_pool(this->path_);
  EXPECT_EQ(back->checksum(), sum);
  EXPECT_EQ(back->version(), version);
  ASSERT_EQ(back->persist(), HM_OK) << "and the restored tree goes on sending to the replica";
  back.reset();
  server.join();
  hm::prim::close_fd(listener);
  unlink(served.c_str());
  // Nobody listening: a clear error, and no pool is made.
  o.replica = "tcp://127.0.0.1:" + std::to_string(port);
  unlink(this->path_.c_str());
  std::unique_ptr<Octree<Dim>> none;
  EXPECT_EQ(Octree<Dim>::create(this->path_, 16 << 20, &none, o), HM_EIO);
  EXPECT_NE(std::string(hm_last_error()).find("cannot be reached"), std::string::npos) << hm_last_error();
  EXPECT_FALSE(std::filesystem::exists(this->path_));
}

TYPED_TEST(Tiers, AKeyedReplicaServerAdmitsOnlyPrimariesHoldingTheKey) {
  constexpr int Dim = TypeParam::value;
  // A home of its own: a primary without HM_REPLICA_KEY would otherwise find the user's default key.
  const std::string home = this->path_ + ".home";
  const char *real_home = getenv("HOME");
  const std::string saved_home = real_home ? real_home : "";
  setenv("HOME", home.c_str(), 1);
  const std::string served = this->path_ + ".replica", key = this->path_ + ".key", other = this->path_ + ".other";
  auto write_key = [](const std::string &path, const std::string &bytes, mode_t mode) {
    std::ofstream(path, std::ios::binary) << bytes;
    chmod(path.c_str(), mode);
  };
  write_key(key, "0123456789abcdef0123456789abcdef", 0600);
  write_key(other, "fedcba9876543210fedcba9876543210", 0600);
  std::string loaded;
  write_key(this->path_ + ".open", "0123456789abcdef0123456789abcdef", 0644);
  EXPECT_EQ(hm::persist::load_replica_key(this->path_ + ".open", &loaded), HM_EAUTH) << "readable by others";
  write_key(this->path_ + ".short", "too short", 0600);
  EXPECT_EQ(hm::persist::load_replica_key(this->path_ + ".short", &loaded), HM_EAUTH) << "under 16 bytes";
  ASSERT_EQ(hm::persist::load_replica_key(key, &loaded), HM_OK);

  unlink(served.c_str());
  int listener = -1, port = 0;
  ASSERT_EQ(hm::prim::tcp_listen("127.0.0.1", 0, &listener, &port), HM_OK);
  std::vector<int> results;
  std::thread server([&] {
    for (int connection = 0; connection < 3; ++connection) {
      int fd = -1;
      if (hm::prim::tcp_accept(listener, &fd) != HM_OK) return;
      results.push_back(hm::persist::serve_replica(fd, served, loaded));
    }
  });
  OctreeOptions o;
  o.replica = "tcp://127.0.0.1:" + std::to_string(port);
  std::unique_ptr<Octree<Dim>> tree;
  hm::option_set("HM_REPLICA_KEY", "");
  EXPECT_EQ(Octree<Dim>::create(this->path_, 1 << 20, &tree, o), HM_EAUTH);
  EXPECT_NE(std::string(hm_last_error()).find("requires a key"), std::string::npos) << hm_last_error();
  unlink(this->path_.c_str());
  hm::option_set("HM_REPLICA_KEY", other);
  EXPECT_EQ(Octree<Dim>::create(this->path_, 1 << 20, &tree, o), HM_EAUTH) << "a wrong key is refused";
  EXPECT_NE(std::string(hm_last_error()).find("did not prove it holds the key"), std::string::npos) << hm_last_error();
  unlink(this->path_.c_str());
  hm::option_set("HM_REPLICA_KEY", key);
  ASSERT_EQ(Octree<Dim>::create(this->path_, 1 << 20, &tree, o), HM_OK) << hm_last_error();
  ASSERT_EQ(tree->refine([](const auto &) { return true; }), HM_OK);
  ASSERT_EQ(tree->persist(), HM_OK) << hm_last_error();
  EXPECT_GT(tree->stats().replica_bytes, 0u);
  tree.reset();
  server.join();
  hm::prim::close_fd(listener);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[1], HM_EAUTH) << "the server refused the wrong key";
  EXPECT_EQ(results[2], HM_OK);
  // A primary holding a key never sends to a server that does not check it.
  ASSERT_EQ(hm::prim::tcp_listen("127.0.0.1", 0, &listener, &port), HM_OK);
  std::thread open_server([&] {
    int fd = -1;
    if (hm::prim::tcp_accept(listener, &fd) == HM_OK) hm::persist::serve_replica(fd, served + ".2");
  });
  o.replica = "tcp://127.0.0.1:" + std::to_string(port);
  unlink(this->path_.c_str());
  EXPECT_EQ(Octree<Dim>::create(this->path_, 1 << 20, &tree, o), HM_EAUTH);
  EXPECT_NE(std::string(hm_last_error()).find("does not check keys"), std::string::npos) << hm_last_error();
  open_server.join();
  hm::prim::close_fd(listener);
  hm::option_set("HM_REPLICA_KEY", "");
  for (const std::string &f : {served, served + ".2", key, other, this->path_ + ".open", this->path_ + ".short"})
    unlink(f.c_str());
  if (real_home) setenv("HOME", saved_home.c_str(), 1);
  else unsetenv("HOME");
}

TYPED_TEST(Tiers, AReplicaServerOutlivesBadRequestsAndItsPrimaryReconnects) {
  // One server, a thread per connection as hetmem-replica runs it. A delta that breaks off or names
  // a range outside its version ends its own connection and leaves the replica as it was; a
  // primary whose connection the server dropped makes it again at its next persist.
  constexpr int Dim = TypeParam::value;
  const std::string served = this->path_ + ".replica";
  unlink(served.c_str());
  hm::option_set("HM_REPLICA_KEY", "");
  const char *real_home = getenv("HOME");
  const std::string saved_home = real_home ? real_home : "";
  setenv("HOME", (this->path_ + ".home").c_str(), 1);
  auto replica = std::make_unique<hm::persist::ReplicaServer>(served, "");
  int listener = -1, port = 0;
  ASSERT_EQ(hm::prim::tcp_listen("127.0.0.1", 0, &listener, &port), HM_OK);
  std::vector<std::thread> connections;
  std::vector<int> results(16, 1), fds(16, -1);
  std::atomic<int> accepted{0};
  std::thread server([&] {
    for (int c = 0; c < 5; ++c) {
      int fd = -1;
      if (hm::prim::tcp_accept(listener, &fd) != HM_OK) return;
      if (c == 0) fds[c] = dup(fd);  // the primary's, for the server to drop later
      connections.emplace_back([&, c, fd] { results[c] = replica->serve(fd); });
      ++accepted;
    }
  });
  OctreeOptions o;
  o.replica = "tcp://127.0.0.1:" + std::to_string(port);
  std::unique_ptr<Octree<Dim>> tree;
  ASSERT_EQ(Octree<Dim>::create(this->path_, 4 << 20, &tree, o), HM_OK) << hm_last_error();  // connection 0
  ASSERT_EQ(tree->refine([](const auto &) { return true; }), HM_OK);
  ASSERT_EQ(tree->persist(), HM_OK) << hm_last_error();
  const uint64_t sum = tree->checksum(), version = tree->version();

  // A raw client: the greeting, a hello naming the tree's pool, then `request`; the answer's status.
  auto raw = [&](const std::string &request, bool hello) {
    int fd = -1;
    if (hm::prim::tcp_connect("127.0.0.1", port, &fd) != HM_OK) return -1000;
    char greeting[33];
    int32_t status = -1000;
    std::string out;
    if (hello) {
      char content[16] = {};
      const std::string c = tree->pool().content();
      std::memcpy(content, c.data(), c.size());
      const uint64_t capacity = tree->pool().capacity();
      out.push_back('H');
      out.append(content, 16);
      out.append(reinterpret_cast<const char *>(&capacity), 8);
    }
    out += request;
    if (hm::prim::recv_all(fd, greeting, sizeof greeting) == HM_OK && hm::prim::send_all(fd, out.data(), out.size()) == HM_OK) {
      shutdown(fd, SHUT_WR);
      if (hello) {  // the hello's status and the replica's version
        uint64_t seq = 0;
        if (hm::prim::recv_all(fd, &status, 4) != HM_OK || status != HM_OK || hm::prim::recv_all(fd, &seq, 8) != HM_OK)
          status = -2000;
      }
      if (status != -2000 && hm::prim::recv_all(fd, &status, 4) != HM_OK) status = -1000;
    }
    hm::prim::close_fd(fd);
    return static_cast<int>(status);
  };
  auto delta_header = [](uint64_t top, uint32_t n) {
    std::string d = "D";
    const uint64_t sequence = 99, root = 0;
    d.append(reinterpret_cast<const char *>(&sequence), 8);
    d.append(reinterpret_cast<const char *>(&root), 8);
    d.append(reinterpret_cast<const char *>(&top), 8);
    d.append(reinterpret_cast<const char *>(&n), 4);
    return d;
  };
  auto range = [](uint64_t off, uint64_t bytes) {
    std::string r(reinterpret_cast<const char *>(&off), 8);
    return r.append(reinterpret_cast<const char *>(&bytes), 8);
  };
  const uint64_t top = tree->pool().top();
  // Connection 1: a delta before the hello. 2: a range past the new top. 3: a delta over all the
  // committed data that breaks off half-way.
  EXPECT_EQ(raw(delta_header(top, 1) + range(4096, 8), false), HM_EINVAL);
  EXPECT_EQ(raw(delta_header(top, 1) + range(top, 1 << 20), true), HM_EFORMAT);
  ASSERT_GT(top, 4096u + 2);
  EXPECT_EQ(raw(delta_header(top, 1) + range(4096, top - 4096) + std::string((top - 4096) / 2, 'x'), true), -1000);
  // Connection 4: the server drops the primary's connection; its next persist makes connection 5.
  while (accepted.load() < 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  shutdown(fds[0], SHUT_RDWR);
  ASSERT_EQ(tree->refine([](const auto &) { return true; }), HM_OK);
  ASSERT_EQ(tree->persist(), HM_OK) << "the primary connects again: " << hm_last_error();
  const uint64_t sum2 = tree->checksum(), version2 = tree->version();
  EXPECT_NE(sum2, sum);
  tree.reset();
  server.join();
  for (auto &t : connections) t.join();
  hm::prim::close_fd(listener);
  for (int fd : fds)
    if (fd >= 0) hm::prim::close_fd(fd);
  EXPECT_EQ(results[1], HM_EINVAL);
  EXPECT_EQ(results[2], HM_EFORMAT);
  EXPECT_EQ(results[3], HM_EIO) << "the delta that broke off";
  replica.reset();
  // The replica holds the primary's last version, untouched by the bad requests.
  ASSERT_EQ(unlink(this->path_.c_str()), 0);
  std::unique_ptr<Octree<Dim>> back;
  OctreeOptions from_replica;
  from_replica.replica = served;
  ASSERT_EQ(Octree<Dim>::restore(this->path_, &back, from_replica), HM_OK) << hm_last_error();
  EXPECT_EQ(back->checksum(), sum2);
  EXPECT_EQ(back->version(), version2);
  EXPECT_GT(version2, version);
  back.reset();
  unlink(served.c_str());
  if (real_home) setenv("HOME", saved_home.c_str(), 1);
  else unsetenv("HOME");
}

}  // namespace
