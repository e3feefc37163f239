// The persist-point crash simulator on the octree's commit path: at every flush/fence point of a
// persist, images built from what was fenced plus any subset of the pending lines (whole or torn
// at 8 bytes) recover to exactly the old or the new version, valid, and adaptation continues.
// Removing a flush or a fence from the commit path makes the harness fail.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "hetmem/hetmem.h"
#include "persist/octree.h"
#include "../support.h"
#include "crash_simulator.h"
#include "octree_workload.h"

using hm::persist::Octree;
using hm_test::advance;
using hm_test::CrashSimulator;
using hm_test::Mutation;

namespace {

template <int Dim>
struct Outcome {
  hm_test::CrashReport report;
  size_t points = 0;
  size_t most_lines = 0;
};

// Builds version 1..`before`, then simulates crashes throughout the step to the next version:
// `small` changes one value (a handful of lines, every subset tried), otherwise the sphere grows
// (hundreds of lines, sampled).
template <int Dim>
Outcome<Dim> simulate(const std::string &path, int before, bool small, Mutation mutation,
                      const hm::persist::OctreeOptions &options = {}) {
  Outcome<Dim> run;
  const uint64_t capacity = 4 << 20;
  std::unique_ptr<Octree<Dim>> tree;
  EXPECT_EQ(Octree<Dim>::create(path, capacity, &tree, options), HM_OK) << hm_last_error();
  if (!tree) return run;
  for (int k = 1; k <= before; ++k) {
    EXPECT_EQ(advance(*tree, k), HM_OK);
    EXPECT_EQ(tree->persist(), HM_OK);
  }
  const uint64_t old_version = tree->version(), old_sum = tree->checksum();
  uint64_t new_sum = 0;
  {
    CrashSimulator sim(tree->pool(), mutation);
    if (small) {
      double p[3] = {0.6, 0.3, 0.7};
      EXPECT_EQ(tree->set_value(p, 42.0), HM_OK);
    } else {
      EXPECT_EQ(advance(*tree, before + 1), HM_OK);
    }
    new_sum = tree->checksum();
    EXPECT_EQ(tree->persist(), HM_OK);
    sim.finish();
    run.points = sim.points().size();
    for (const auto &p : sim.points()) run.most_lines = std::max(run.most_lines, p.lines.size());
    auto check = [&](const std::string &image, bool after) -> std::string {
      std::unique_ptr<Octree<Dim>> t;
      int rc = Octree<Dim>::restore(image, &t);
      if (rc != HM_OK) return std::string("restore failed: ") + hm_last_error();
      std::string why;
      if (!t->valid(&why)) return "invalid tree: " + why;
      const uint64_t v = t->version(), sum = t->checksum();
      if (v == old_version + 1) {
        if (sum != new_sum) return "version " + std::to_string(v) + " has the wrong contents";
      } else if (v == old_version) {
        if (after) return "the persist returned but version " + std::to_string(v + 1) + " was lost";
        if (sum != old_sum) return "version " + std::to_string(v) + " has the wrong contents";
      } else {
        return "recovered version " + std::to_string(v) + ", neither old nor new";
      }
      if (advance(*t, 9) != HM_OK || !t->valid(&why)) return "adaptation does not continue: " + why;
      return "";
    };
    run.report = hm_test::replay(sim.points(), path + ".crash", capacity, check);
  }
  tree.reset();
  unlink(path.c_str());
  return run;
}

template <int N>
struct D {
  static constexpr int value = N;
};

template <class T>
class CrashSim : public ::testing::Test {
 protected:
  void SetUp() override { path_ = hm_test::temp_path("crash" + std::to_string(T::value)); }
  std::string path_;
};

using Dims = ::testing::Types<D<2>, D<3>>;
TYPED_TEST_SUITE(CrashSim, Dims);

TYPED_TEST(CrashSim, SmallChangeEverySubsetOfPendingLinesRecovers) {
  Outcome<TypeParam::value> run = simulate<TypeParam::value>(this->path_, 2, true, Mutation{});
  EXPECT_EQ(run.points, 3u) << "two fences in a commit and the point after it";
  EXPECT_LE(run.most_lines, 10u) << "a one-value change stays small enough to try every subset";
  EXPECT_GT(run.report.images, 16);
  EXPECT_EQ(run.report.bad, 0) << run.report.first_bad;
}

TYPED_TEST(CrashSim, LargeChangeSampledSubsetsAndTornLinesRecover) {
  Outcome<TypeParam::value> run = simulate<TypeParam::value>(this->path_, 3, false, Mutation{});
  EXPECT_GT(run.most_lines, 10u) << "a growing sphere changes many lines";
  EXPECT_GE(run.report.images, 2 + 48 + 16) << "none, all, 48 random subsets and 16 torn images at least";
  EXPECT_EQ(run.report.bad, 0) << run.report.first_bad;
}

TYPED_TEST(CrashSim, WithC0MergedAtThePersistRecovers) {
  // C0 on the fast tier, small enough that subtrees are merged out during the step as well.
  hm::persist::OctreeOptions options;
  options.fast_bytes = 120 * sizeof(typename Octree<TypeParam::value>::Family);
  Outcome<TypeParam::value> run = simulate<TypeParam::value>(this->path_, 3, false, Mutation{}, options);
  EXPECT_GT(run.most_lines, 10u);
  EXPECT_EQ(run.report.bad, 0) << run.report.first_bad;
}

TYPED_TEST(CrashSim, FirstVersionAfterCreateRecovers) {
  Outcome<TypeParam::value> run = simulate<TypeParam::value>(this->path_, 0, false, Mutation{});
  EXPECT_EQ(run.report.bad, 0) << run.report.first_bad;
}

// Each mutation removes one step of the commit: the data flushes, the fence after them, the root
// slot's flush, the last fence.
class CommitMutation : public ::testing::TestWithParam<Mutation> {};

TEST_P(CommitMutation, IsCaughtByTheHarness) {
  const std::string path = hm_test::temp_path(std::string("mutation-") + GetParam().name);
  Outcome<3> small = simulate<3>(path, 2, true, GetParam());
  Outcome<3> large = simulate<3>(path, 2, false, GetParam());
  EXPECT_GT(small.report.bad + large.report.bad, 0)
      << "removing " << GetParam().name << " must leave some crash image recovering wrongly";
  RecordProperty("caught_by", small.report.bad ? small.report.first_bad : large.report.first_bad);
}

INSTANTIATE_TEST_SUITE_P(Commit, CommitMutation,
                         ::testing::Values(Mutation{"the_data_flushes", 0, -1}, Mutation{"the_first_fence", -1, 0},
                                           Mutation{"the_slot_flush", 1, -1}, Mutation{"the_last_fence", -1, 1}),
                         [](const auto &info) { return std::string(info.param.name); });

}  // namespace
