// Streamed tile containers (hm_stream_*): staging through the migration space under the hetmem
// policy, write-back of exactly the modified tiles, the errors a kernel gets for misuse, and the
// two performance models on synthetic inputs with known answers.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hetmem/hetmem.h"
#include "../support.h"
#include "place/helpers.h"
#include "place/models.h"

namespace {

using hm::place::HelperInputs;

constexpr size_t kTiles = 12;
constexpr size_t kTileBytes = 256 << 10;

class Stream : public ::testing::Test {
 protected:
  void TearDown() override {
    hm_stream_destroy(s_);
    s_ = nullptr;
    for (const char *v : {"HM_MIGRATION_SPACE", "HM_HELPERS", "HM_POLICY"}) unsetenv(v);
    hm_test::configure("");
  }
  // hetmem with an emulated capacity tier, a 4 MiB fast budget (the 3 MiB of tiles do not fit the
  // room hot objects leave, so they stay home for staging) and a 2 MiB migration space (1.5 MiB
  // asked, spaces are whole MiB: three slots of 680 KiB, two tiles a batch), after the observed
  // iteration (spaces sized: batches are staged from then).
  void start(const char *policy = "hetmem", const char *helpers = nullptr) {
    setenv("HM_MIGRATION_SPACE", "1536K", 1);
    if (helpers) setenv("HM_HELPERS", helpers, 1);
    else unsetenv("HM_HELPERS");
    ASSERT_EQ(hm_test::configure("capacity=emul:optane", "HM_FAST_BUDGET", "4M"), HM_OK);
    ASSERT_EQ(hm_policy_select(policy), HM_OK) << hm_last_error();
    hm_class_t cls;
    ASSERT_EQ(hm_class_define("stream.tiles", HM_CLASS_STREAMING, 0, &cls), HM_OK);
    ASSERT_EQ(hm_stream_create(cls, kTiles, &s_), HM_OK) << hm_last_error();
    for (size_t t = 0; t < kTiles; ++t) {
      auto *p = static_cast<unsigned char *>(hm_stream_resize(s_, t, kTileBytes));
      ASSERT_NE(p, nullptr) << hm_last_error();
      std::memset(p, static_cast<int>(t), kTileBytes);
    }
    ASSERT_EQ(hm_iteration_next(), HM_OK);  // hetmem-static's settle sizes the spaces
  }
  // One sweep: every tile's bytes incremented, released as modified when modify(t).
  template <class Modify>
  void sweep(Modify modify) {
    ASSERT_EQ(hm_stream_sweep(s_, 0, kTiles), HM_OK) << hm_last_error();
    size_t first, last;
    int rc;
    while ((rc = hm_stream_next(s_, &first, &last)) == 1) {
      for (size_t t = first; t < last; ++t) {
        void *p = nullptr;
        ASSERT_EQ(hm_stream_acquire(s_, t, &p), HM_OK) << hm_last_error();
        auto *b = static_cast<unsigned char *>(p);
        for (size_t i = 0; i < kTileBytes; ++i) ++b[i];
        ASSERT_EQ(hm_stream_release(s_, t, modify(t) ? 1 : 0), HM_OK);
      }
    }
    ASSERT_EQ(rc, 0) << hm_last_error();
  }
  // One sweep in phase `phase`, each tile taking ms(batch) milliseconds (the kernel's time), with
  // the tier that each batch's first tile was worked on appended to *where; with `mark`, byte 9 of
  // every tile set to 99 and the tile released as modified.
  template <class Ms>
  void timed_sweep(const char *phase, Ms ms, std::vector<hm_tier_t> *where, bool mark = false) {
    ASSERT_EQ(hm_phase_begin(phase), HM_OK);
    ASSERT_EQ(hm_stream_sweep(s_, 0, kTiles), HM_OK) << hm_last_error();
    size_t first, last, batch = 0;
    while (hm_stream_next(s_, &first, &last) == 1) {
      for (size_t t = first; t < last; ++t) {
        void *p;
        ASSERT_EQ(hm_stream_acquire(s_, t, &p), HM_OK);
        hm_tier_t tier;
        ASSERT_EQ(hm_ptr_tier(p, &tier), HM_OK);
        if (t == first) where->push_back(tier);
        std::this_thread::sleep_for(std::chrono::milliseconds(ms(batch)));
        if (mark) static_cast<unsigned char *>(p)[9] = 99;
        ASSERT_EQ(hm_stream_release(s_, t, mark ? 1 : 0), HM_OK);
      }
      ++batch;
    }
    ASSERT_EQ(hm_phase_end(), HM_OK);
  }
  unsigned char at_home(size_t t, size_t i) const { return static_cast<unsigned char *>(hm_stream_home(s_, t))[i]; }
  hm_stream_stats_t stats() const {
    hm_stream_stats_t st{};
    EXPECT_EQ(hm_stream_stats(s_, &st), HM_OK);
    return st;
  }
  hm_stream_t *s_ = nullptr;
};

}  // namespace

TEST_F(Stream, HomesLiveOnTheCapacityTierAndBatchesAreStagedOnTheFastTier) {
  start("hetmem", "1");  // staging forced (the model would first measure a batch at home)
  hm_tier_t home;
  ASSERT_EQ(hm_ptr_tier(hm_stream_home(s_, 0), &home), HM_OK);
  EXPECT_EQ(home, hm_test::tier("capacity"));
  ASSERT_EQ(hm_stream_sweep(s_, 0, kTiles), HM_OK) << hm_last_error();
  size_t first, last, batches = 0;
  while (hm_stream_next(s_, &first, &last) == 1) {
    EXPECT_EQ(last - first, 2u) << "two 256 KiB tiles fit a 512 KiB slot";
    ++batches;
    for (size_t t = first; t < last; ++t) {
      void *p;
      ASSERT_EQ(hm_stream_acquire(s_, t, &p), HM_OK);
      hm_tier_t where;
      ASSERT_EQ(hm_ptr_tier(p, &where), HM_OK);
      EXPECT_EQ(where, hm_test::tier("fast")) << "the working copy is in the migration space";
      EXPECT_NE(p, hm_stream_home(s_, t));
      EXPECT_EQ(static_cast<unsigned char *>(p)[kTileBytes - 1], t) << "the staged copy holds the tile's bytes";
      ASSERT_EQ(hm_stream_release(s_, t, 0), HM_OK);
    }
  }
  EXPECT_EQ(batches, kTiles / 2);
  hm_stream_stats_t st = stats();
  EXPECT_EQ(st.staging, 1);
  EXPECT_EQ(st.tiles_in, kTiles);
  EXPECT_EQ(st.bytes_in, kTiles * kTileBytes);
  EXPECT_EQ(st.tiles_out, 0u) << "nothing was modified";
  EXPECT_EQ(st.released_clean, kTiles);
}

// The modified tiles go home, the others do not, even when the kernel wrote to their staged copy.
TEST_F(Stream, WritesBackExactlyTheModifiedTiles) {
  for (const char *helpers : {"0", "1", "3"}) {
    start("hetmem", helpers);
    sweep([](size_t t) { return t % 3 == 1; });
    hm_stream_stats_t st = stats();
    EXPECT_EQ(st.helpers, std::atoi(helpers));
    EXPECT_EQ(st.tiles_out, kTiles / 3) << helpers << " helpers";
    EXPECT_EQ(st.bytes_out, kTiles / 3 * kTileBytes);
    for (size_t t = 0; t < kTiles; ++t) {
      const unsigned expect = t % 3 == 1 ? t + 1 : t;
      EXPECT_EQ(at_home(t, 0), expect) << "tile " << t << ", " << helpers << " helpers";
      EXPECT_EQ(at_home(t, kTileBytes - 1), expect) << "tile " << t;
    }
    // A second sweep sees the first one's results.
    sweep([](size_t) { return true; });
    for (size_t t = 0; t < kTiles; ++t) EXPECT_EQ(at_home(t, 77), t % 3 == 1 ? t + 2 : t + 1) << "tile " << t;
    hm_stream_destroy(s_);
    s_ = nullptr;
  }
}

// Every policy but hetmem uses the tiles at home: the same results without copies.
TEST_F(Stream, OtherPoliciesUseTheTilesAtHome) {
  for (const std::string &name : hm_test::policies()) {
    if (name == "hetmem") continue;  // the one that stages
    const char *policy = name.c_str();
    start(policy);
    sweep([](size_t) { return true; });
    hm_stream_stats_t st = stats();
    EXPECT_EQ(st.staging, 0) << policy;
    EXPECT_EQ(st.tiles_in, 0u) << policy;
    EXPECT_EQ(st.batches, 1u) << policy << ": the whole range is one batch";
    for (size_t t = 0; t < kTiles; ++t) EXPECT_EQ(at_home(t, 5), t + 1) << policy;
    hm_stream_destroy(s_);
    s_ = nullptr;
  }
}

TEST_F(Stream, BudgetsAndTheMigrationSpaceAreNeverExceeded) {
  start("hetmem", "2");
  for (int i = 0; i < 3; ++i) sweep([](size_t t) { return t % 2 == 0; });
  hm_space_stats_t mig;
  ASSERT_EQ(hm_space_stats(HM_SPACE_MIGRATION, &mig), HM_OK);
  EXPECT_EQ(mig.budget, 2u << 20);
  EXPECT_LE(mig.high_water, mig.budget);
  EXPECT_GT(mig.high_water, 0u) << "the staging slots are accounted in the migration space";
  hm_tier_stats_t fast = hm_test::stats(hm_test::tier("fast"));
  EXPECT_LE(fast.high_water, fast.budget);
}

TEST_F(Stream, MisuseGetsAnErrorAndNothingIsCorrupted) {
  start();
  void *p;
  size_t first, last;
  EXPECT_EQ(hm_stream_acquire(s_, 0, &p), HM_EINVAL) << "no sweep";
  EXPECT_EQ(hm_stream_next(s_, &first, &last), HM_EINVAL);
  EXPECT_EQ(hm_stream_sweep(s_, 3, kTiles + 1), HM_EINVAL);
  EXPECT_NE(std::string(hm_last_error()).find("not a range"), std::string::npos) << hm_last_error();
  ASSERT_EQ(hm_stream_sweep(s_, 0, kTiles), HM_OK);
  EXPECT_EQ(hm_stream_sweep(s_, 0, kTiles), HM_EBUSY) << "one sweep at a time";
  ASSERT_EQ(hm_stream_next(s_, &first, &last), 1);
  EXPECT_EQ(hm_stream_acquire(s_, last, &p), HM_EINVAL) << "past the batch";
  EXPECT_NE(std::string(hm_last_error()).find("not in the current batch"), std::string::npos) << hm_last_error();
  EXPECT_EQ(hm_stream_release(s_, first, 1), HM_EINVAL) << "released without being acquired";
  EXPECT_NE(std::string(hm_last_error()).find("not acquired"), std::string::npos);
  EXPECT_EQ(hm_stream_release(s_, kTiles + 4, 1), HM_EINVAL);
  ASSERT_EQ(hm_stream_acquire(s_, first, &p), HM_OK);
  EXPECT_EQ(hm_stream_acquire(s_, first, &p), HM_EINVAL) << "acquired twice";
  std::memset(p, 0xee, kTileBytes);
  EXPECT_EQ(hm_stream_next(s_, &first, &last), HM_EINVAL) << "a tile still held";
  EXPECT_EQ(hm_stream_resize(s_, 1, 64), nullptr);
  EXPECT_NE(std::string(hm_last_error()).find("while a sweep is running"), std::string::npos) << hm_last_error();
  ASSERT_EQ(hm_stream_release(s_, first, 0), HM_OK);
  EXPECT_EQ(hm_stream_sweep_end(s_), HM_OK);
  EXPECT_EQ(at_home(first, 0), first) << "an unmodified tile's scribbled copy never reaches home";
  EXPECT_EQ(hm_stream_resize(s_, kTiles, 64), nullptr);
  EXPECT_NE(std::string(hm_last_error()).find("past the end"), std::string::npos);
}

TEST_F(Stream, AMigrationSpaceTooSmallForATileIsRefusedNamingBoth) {
  start();
  ASSERT_NE(hm_stream_resize(s_, 4, 2 << 20), nullptr) << hm_last_error();
  EXPECT_EQ(hm_stream_sweep(s_, 0, kTiles), HM_EBUDGET);
  const std::string why = hm_last_error();
  EXPECT_NE(why.find("tile 4 holds 2.00 MiB"), std::string::npos) << why;
  EXPECT_NE(why.find("migration space (2.00 MiB)"), std::string::npos) << why;
  EXPECT_NE(why.find("HM_MIGRATION_SPACE"), std::string::npos) << why;
  EXPECT_EQ(hm_stream_sweep(s_, 5, kTiles), HM_OK) << "the stream is still usable: " << hm_last_error();
  EXPECT_EQ(hm_stream_sweep_end(s_), HM_OK);
}

TEST_F(Stream, HelperCountOutOfRangeNamesTheRange) {
  start("hetmem", "999");
  EXPECT_EQ(hm_stream_sweep(s_, 0, kTiles), HM_EINVAL);
  const std::string why = hm_last_error();
  EXPECT_NE(why.find("HM_HELPERS=999"), std::string::npos) << why;
  EXPECT_NE(why.find("between 0 and"), std::string::npos) << why;
  // Not an integer at all: refused when hetmem starts, as every numeric option is.
  hm_stream_destroy(s_);
  s_ = nullptr;
  setenv("HM_HELPERS", "two", 1);
  EXPECT_EQ(hm_test::configure("capacity=emul:optane"), HM_EFORMAT);
  EXPECT_NE(std::string(hm_last_error()).find("HM_HELPERS='two': expected an integer"), std::string::npos)
      << hm_last_error();
}

// Kernels on two threads acquire and release tiles of one batch at once.
TEST_F(Stream, TwoComputingThreadsShareABatch) {
  start("hetmem", "1");
  ASSERT_EQ(hm_stream_sweep(s_, 0, kTiles), HM_OK);
  size_t first, last;
  while (hm_stream_next(s_, &first, &last) == 1) {
    std::vector<std::thread> team;
    for (size_t t = first; t < last; ++t)
      team.emplace_back([&, t] {
        void *p;
        if (hm_stream_acquire(s_, t, &p) != HM_OK) return;
        static_cast<unsigned char *>(p)[0] = 200;
        hm_stream_release(s_, t, 1);
      });
    for (std::thread &th : team) th.join();
  }
  for (size_t t = 0; t < kTiles; ++t) EXPECT_EQ(at_home(t, 0), 200) << t;
  EXPECT_EQ(stats().tiles_out, kTiles);
}

// The helper model's measurement: in a phase's first staged sweep the first batch is computed
// staged with the helpers idle, the second at home, the rest at home as one batch (timed: the
// interval at home); later sweeps stage as the model decided.
TEST_F(Stream, TheFirstStagedSweepMeasuresABatchStagedAndOneAtHome) {
  start();
  hm_tier_t fast = hm_test::tier("fast"), capacity = hm_test::tier("capacity");
  std::vector<hm_tier_t> where, next;
  timed_sweep("measured", [](size_t) { return 0; }, &where, /*mark=*/true);
  ASSERT_GE(where.size(), 3u);
  EXPECT_EQ(where[0], fast) << "batch 0: staged";
  EXPECT_EQ(where[1], capacity) << "batch 1: at home";
  hm_helper_model_t m;
  ASSERT_EQ(hm_helper_model("measured", &m), HM_OK);
  EXPECT_GT(m.t_comp, 0);
  EXPECT_GT(m.t_inplace, 0) << "the tiles at home were timed";
  EXPECT_EQ(where.size(), 3u) << "the rest of the sweep is one batch";
  EXPECT_EQ(where[2], capacity) << "the rest at home";
  for (size_t t = 0; t < kTiles; ++t) EXPECT_EQ(at_home(t, 9), 99) << "every modification reached home, tile " << t;
  timed_sweep("measured", [](size_t) { return 0; }, &next);
  ASSERT_FALSE(next.empty());
  EXPECT_EQ(next[0], m.stage ? fast : capacity) << "the next sweep as the model decided";
}

// The model decides from one batch staged and the sweep at home; the first whole staged sweep
// after it is timed, and a sweep slower per interval than working at home withdraws the decision: the
// tiles stay at home from the next sweep on.
TEST_F(Stream, AStagedSweepSlowerThanWorkingAtHomeWithdrawsStaging) {
  start();
  hm_tier_t capacity = hm_test::tier("capacity");
  // Sweep 0: the tiles at home (batch 1 and the rest) are slow, so staging is predicted to pay;
  // sweep 1: every staged tile is slower than that.
  auto run = [&](int sweep_no, std::vector<hm_tier_t> *where) {
    timed_sweep("withdrawn", [&](size_t batch) { return sweep_no == 0 ? (batch >= 1 ? 10 : 0) : sweep_no == 1 ? 20 : 0; },
                where);
  };
  std::vector<hm_tier_t> first_sweep, second_sweep, third_sweep;
  run(0, &first_sweep);
  hm_helper_model_t m;
  ASSERT_EQ(hm_helper_model("withdrawn", &m), HM_OK);
  ASSERT_EQ(m.stage, 1) << "a slow batch at home: staging predicted to pay";
  EXPECT_EQ(m.t_staged_seen, 0);
  run(1, &second_sweep);
  ASSERT_GE(second_sweep.size(), 3u);
  ASSERT_EQ(hm_helper_model("withdrawn", &m), HM_OK);
  EXPECT_EQ(m.stage, 0) << "the staged sweep was slower than working at home";
  EXPECT_GE(m.t_staged_seen, m.t_inplace);
  run(2, &third_sweep);
  for (hm_tier_t t : third_sweep) EXPECT_EQ(t, capacity) << "tiles stay at home after the withdrawal";
}

// A batch at home is timed between two interval boundaries; a sweep that does not stage has none.
// When the rest of the measuring sweep, worked on at home as one batch, is faster than the
// predicted staged interval, the decision is taken again against it: the tiles stay at home,
// before any sweep pays for staging.
TEST_F(Stream, TheSweepAtHomeNotTheBatchAtHomeIsWhatStagingMustBeat) {
  start();
  hm_tier_t capacity = hm_test::tier("capacity");
  // Sweep 0, two tiles a batch: the staged batch takes 10 ms, the batch at home 40 ms (staging
  // predicted to pay), the rest at home 1 ms a tile (2 ms an interval: it does not).
  auto run = [&](int sweep_no, std::vector<hm_tier_t> *where) {
    timed_sweep("home", [&](size_t batch) { return sweep_no == 0 ? (batch == 0 ? 5 : batch == 1 ? 20 : 1) : 0; }, where);
  };
  std::vector<hm_tier_t> measuring, next;
  run(0, &measuring);
  hm_helper_model_t m;
  ASSERT_EQ(hm_helper_model("home", &m), HM_OK);
  EXPECT_EQ(m.stage, 0) << "predicted " << m.t_predicted << " s staged, " << m.t_inplace << " s at home";
  EXPECT_LT(m.t_inplace, 0.005) << "the interval at home is the rest of the sweep's (2 ms), not the batch's (40 ms)";
  EXPECT_GT(m.t_predicted, m.t_inplace);
  EXPECT_EQ(m.t_staged_seen, 0) << "no sweep paid for staging";
  run(1, &next);
  ASSERT_FALSE(next.empty());
  for (hm_tier_t t : next) EXPECT_EQ(t, capacity) << "the tiles stay at home";
  hm_space_stats_t mig{};
  ASSERT_EQ(hm_space_stats(HM_SPACE_MIGRATION, &mig), HM_OK);
  EXPECT_EQ(mig.in_use, 0u) << "declined everywhere: the staging slots went back";
}

TEST_F(Stream, TheHelperModelIsReportedPerPhase) {
  start();
  ASSERT_EQ(hm_phase_begin("sweep"), HM_OK);
  sweep([](size_t) { return true; });
  ASSERT_EQ(hm_phase_end(), HM_OK);
  hm_helper_model_t m;
  ASSERT_EQ(hm_helper_model("sweep", &m), HM_OK) << hm_last_error();
  EXPECT_EQ(m.data_in, 2.0 * kTileBytes) << "two tiles an interval";
  EXPECT_EQ(m.data_out, 2.0 * kTileBytes) << "every tile was modified";
  EXPECT_GT(m.t_comp, 0);
  EXPECT_GE(m.helpers, 1);
  EXPECT_EQ(m.overridden, 0);
  EXPECT_EQ(hm_helper_model("never", &m), HM_EINVAL);
  double in[4], out[4];
  ASSERT_GE(hm_copy_bandwidth(in, out, 4), 1);
  EXPECT_GT(in[0], 0);
  EXPECT_GT(out[0], 0);
}

// The copy bandwidth is measured once per configuration and kept beside the calibration, one line
// per configuration ("key<TAB> in MB/s...<TAB> out MB/s..."): a later run reads its line back.
TEST_F(Stream, TheCopyBandwidthIsCachedBesideTheCalibrationAndReadBack) {
  ASSERT_EQ(hm_test::configure("capacity=emul:optane"), HM_OK);
  hm_calibration_t cal;
  ASSERT_EQ(hm_calibration_get(&cal), HM_OK);
  std::string path = cal.path;
  path = path.substr(0, path.rfind('/') + 1) + "copy-bandwidth";
  std::remove(path.c_str());
  hm::place::copy_bandwidth_forget();  // nothing from an earlier test in this process
  double in[2] = {}, out[2] = {};
  ASSERT_EQ(hm_copy_bandwidth(in, out, 2), 2) << hm_last_error();
  ASSERT_GT(in[0], 0);
  const std::vector<char> bytes = hm_test::read_file(path);
  const std::string text(bytes.begin(), bytes.end());
  ASSERT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  const size_t tab = text.find('\t');
  ASSERT_NE(tab, std::string::npos) << text;
  // The same configuration's line with other figures, and another configuration's line.
  {
    std::FILE *f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "other machine\t 1 2\t 3 4\n%s\t 1234.5 2000\t 678.25 900\n", text.substr(0, tab).c_str());
    std::fclose(f);
  }
  hm::place::copy_bandwidth_forget();  // as a new run starts: the cache is read again
  ASSERT_EQ(hm_copy_bandwidth(in, out, 2), 2) << hm_last_error();
  EXPECT_DOUBLE_EQ(in[0], 1234.5);
  EXPECT_DOUBLE_EQ(in[1], 2000);
  EXPECT_DOUBLE_EQ(out[0], 678.25);
  EXPECT_DOUBLE_EQ(out[1], 900);
  std::remove(path.c_str());
}

// The copy bandwidth belongs to the calibration it was measured under: after a new calibration
// (`hetmem tiers --bench`) it is measured again, and the rows of the old one are dropped, so a
// figure taken on a busy machine is not kept for good.
TEST_F(Stream, ANewCalibrationMeasuresTheCopyBandwidthAgain) {
  ASSERT_EQ(hm_test::configure("capacity=emul:optane"), HM_OK);
  hm_calibration_t cal;
  ASSERT_EQ(hm_calibration_get(&cal), HM_OK);
  const std::vector<char> original = hm_test::read_file(cal.path);
  ASSERT_FALSE(original.empty()) << cal.path;
  char dir[] = "/tmp/hetmem-test-calibration-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string cal_path = std::string(dir) + "/calibration", cache = std::string(dir) + "/copy-bandwidth";
  const char *env = std::getenv("HM_CALIBRATION");
  const std::string saved = env ? env : "";
  auto write = [](const std::string &path, const std::string &text) {
    hm_test::write_file(path, std::vector<char>(text.begin(), text.end()));
    ASSERT_EQ(hm_test::read_file(path).size(), text.size()) << path;
  };
  auto cache_lines = [&] {
    const std::vector<char> bytes = hm_test::read_file(cache);
    return std::string(bytes.begin(), bytes.end());
  };
  std::string text(original.begin(), original.end());
  write(cal_path, text);
  setenv("HM_CALIBRATION", cal_path.c_str(), 1);
  ASSERT_EQ(hm_test::configure("capacity=emul:optane"), HM_OK);
  ASSERT_EQ(hm_calibration_get(&cal), HM_OK);
  const std::string stamp = "|calibrated=" + std::to_string(cal.measured_unix);
  hm::place::copy_bandwidth_forget();
  double in[2] = {}, out[2] = {};
  ASSERT_EQ(hm_copy_bandwidth(in, out, 2), 2) << hm_last_error();
  std::string lines = cache_lines();
  const std::string key = lines.substr(0, lines.find('\t'));
  ASSERT_NE(key.find(stamp), std::string::npos) << lines;
  // Under this calibration: its own row with other figures; and a row of an older calibration.
  write(cache, key + "\t 1234.5 2000\t 678.25 900\nsome machine|calibrated=1\t 1 2\t 3 4\n");
  hm::place::copy_bandwidth_forget();
  ASSERT_EQ(hm_copy_bandwidth(in, out, 2), 2);
  EXPECT_DOUBLE_EQ(in[0], 1234.5) << "the same calibration: read back";
  // A new calibration: the same figures, measured a second later.
  const std::string field = "measured_unix = " + std::to_string(cal.measured_unix);
  ASSERT_NE(text.find(field), std::string::npos) << text;
  text.replace(text.find(field), field.size(), "measured_unix = " + std::to_string(cal.measured_unix + 1));
  write(cal_path, text);
  ASSERT_EQ(hm_test::configure("capacity=emul:optane"), HM_OK);
  hm::place::copy_bandwidth_forget();
  ASSERT_EQ(hm_copy_bandwidth(in, out, 2), 2) << hm_last_error();
  EXPECT_NE(in[0], 1234.5) << "measured again under the new calibration";
  EXPECT_GT(in[0], 0);
  lines = cache_lines();
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 1) << "the older calibration's rows dropped:\n" << lines;
  EXPECT_NE(lines.find("|calibrated=" + std::to_string(cal.measured_unix + 1) + "\t"), std::string::npos) << lines;
  if (saved.empty()) unsetenv("HM_CALIBRATION");
  else setenv("HM_CALIBRATION", saved.c_str(), 1);
  std::remove(cache.c_str());
  std::remove(cal_path.c_str());
  rmdir(dir);
  hm::place::copy_bandwidth_forget();
}

// ------------------------------------------------------------------------------------------------
// The helper model (Equations 3-9) on synthetic machines.
namespace {
HelperInputs machine() {
  HelperInputs in;
  in.data_in = in.data_out = 100e6;   // 100 MB in and out per interval
  in.t_comp = 0.1;                     // 100 ms
  in.bw_comp = 1e9;
  in.bw_max = 100e9;
  in.thrd_max = 16;
  in.thrd_comp = 12;
  in.bw_in = {0.4e9, 0.8e9, 1.6e9, 2.0e9, 2.2e9};  // 1..5 helpers
  in.bw_out = {0.5e9, 1.0e9, 2.0e9, 2.5e9, 2.6e9};
  return in;
}
}  // namespace

TEST(HelperModel, CopyTimeIsTheSlowerDirection) {
  HelperInputs in = machine();
  EXPECT_DOUBLE_EQ(hm::place::copy_time(in, 1), 100e6 / 0.4e9);  // in: 0.25 s, out: 0.2 s
  in.data_out = 0;
  EXPECT_DOUBLE_EQ(hm::place::copy_time(in, 2), 100e6 / 0.8e9);
}

TEST(HelperModel, OverlapBindsTheSmallestCountThatHidesTheCopy) {
  HelperInputs in = machine();
  // 1 helper: 0.25 s, 2: 0.125 s, 3: 0.0625 s <= 0.1 s: three helpers.
  auto c = hm::place::choose_helpers(in);
  EXPECT_EQ(c.helpers, 3);
  EXPECT_EQ(c.binding, "overlap");
  EXPECT_DOUBLE_EQ(c.t_predicted, 0.1);
  in.t_comp = 0.3;  // one helper is enough
  EXPECT_EQ(hm::place::choose_helpers(in).helpers, 1);
}

TEST(HelperModel, BandwidthBindsWhenMoreHelpersWouldStarveTheComputation) {
  HelperInputs in = machine();
  in.bw_comp = 96e9;  // 4 GB/s left: 1 helper (0.9 GB/s copying), 2 (1.8) and 3 (3.6) fit, 4 (4.5) not
  in.t_comp = 0.05;   // no count that fits hides the copy: 4 helpers would (0.05 s), but do not fit
  auto c = hm::place::choose_helpers(in);
  EXPECT_EQ(c.helpers, 3) << "no count meets every constraint: the fastest within the bandwidth";
  EXPECT_NE(c.binding.find("no count meets every constraint"), std::string::npos) << c.binding;
  in.bw_max = 98.5e9;  // now only up to 1 helper fits the bandwidth, and nothing hides the copy
  in.bw_comp = 97.5e9;
  in.t_comp = 0.3;     // one helper hides it
  c = hm::place::choose_helpers(in);
  EXPECT_EQ(c.helpers, 1);
  in.bw_comp = 98.4e9;  // not even one helper fits
  c = hm::place::choose_helpers(in);
  EXPECT_NE(c.binding.find("bandwidth"), std::string::npos) << c.binding;
}

TEST(HelperModel, ThreadsBindOnAMachineWhoseCoresAllCompute) {
  HelperInputs in = machine();
  in.thrd_max = 2;
  in.thrd_comp = 2;
  in.t_comp = 0.5;
  in.bw_in = {0.4e9, 0.8e9, 1.2e9};  // copy bandwidth linear in the helpers
  in.bw_out = {0.5e9, 1.0e9, 1.5e9};
  // Every helper shares a core with a computing thread, which then takes its computing and the
  // helper's copying (the other computing thread waits for it): 1 helper 0.5 + 0.25 = 0.75; 2, one
  // per core, 0.5 + 0.125 = 0.625; 3, two on one core, 0.5 + 2 x 0.25 / 3 = 0.667.
  auto c = hm::place::choose_helpers(in);
  EXPECT_EQ(c.helpers, 2);
  EXPECT_NE(c.binding.find("threads"), std::string::npos) << c.binding;
  EXPECT_DOUBLE_EQ(c.t_predicted, 0.625);
  EXPECT_DOUBLE_EQ(c.t_predicted_by_helpers[0], 0.75);
  EXPECT_NEAR(c.t_predicted_by_helpers[2], 0.5 + 2 * 0.25 / 3, 1e-12);
  // With one core free, one helper fits the thread constraint and hides the copy.
  in.thrd_comp = 1;
  c = hm::place::choose_helpers(in);
  EXPECT_EQ(c.helpers, 1);
  EXPECT_EQ(c.binding.find("threads"), std::string::npos) << c.binding;
  EXPECT_DOUBLE_EQ(c.t_predicted, 0.5);
}

// ------------------------------------------------------------------------------------------------
// The prefetch model (Equations 1-2).
TEST(PrefetchModel, RegressionRecoversKnownCoefficients) {
  const double alpha = 12, beta1 = 0.8, beta2 = 0.35, lf = 90, ls = 310;
  std::vector<hm::place::PrefetchSample> samples;
  for (double r : {0.0, 0.2, 0.4, 0.6, 0.8, 1.0}) {
    const double wobble = (r == 0.4 ? 0.5 : r == 0.6 ? -0.5 : 0);  // measurement noise
    samples.push_back({r, alpha + beta1 * r * lf + beta2 * (1 - r) * ls + wobble});
  }
  auto fit = hm::place::fit_prefetch(samples, alpha, lf, ls);
  ASSERT_TRUE(fit.ok);
  EXPECT_EQ(fit.alpha, alpha) << "measured on its own: the regressors 1, r and 1 - r are dependent";
  EXPECT_NEAR(fit.beta1, beta1, 0.02);
  EXPECT_NEAR(fit.beta2, beta2, 0.01);
  EXPECT_LT(fit.residual, 0.5);
  // Eq. 1: all fields on the slow tier, 40 ns a particle: ceil((12 + 0.35 * 310) / 40) = ceil(3.01).
  EXPECT_EQ(hm::place::prefetch_distance(fit, 0, lf, ls, 40), 4);
  EXPECT_EQ(hm::place::prefetch_distance(fit, 1, lf, ls, 40), 3);  // ceil((12 + 72) / 40)
  EXPECT_EQ(hm::place::prefetch_distance(fit, 1, lf, ls, 100), 1);
  EXPECT_EQ(hm::place::prefetch_distance(fit, 0, lf, ls, 0.001), hm::kMaxPrefetchDistance);
}

TEST(PrefetchModel, OneRatioDoesNotDetermineTwoBetas) {
  auto fit = hm::place::fit_prefetch({{0.5, 100}, {0.5, 101}}, 10, 90, 310);
  EXPECT_FALSE(fit.ok);
}

// ------------------------------------------------------------------------------------------------
// One iteration of one phase that touches every page of `p` three times (the phase's first
// instance, which the sampler reads while reactive wants samples).
namespace {
void use_in_one_iteration(const char *phase, char *p, size_t n) {
  ASSERT_EQ(hm_phase_begin(phase), HM_OK);
  for (int pass = 0; pass < 3; ++pass)
    for (size_t i = 0; i < n; i += 4096) p[i] = static_cast<char>(p[i] + 1);
  ASSERT_EQ(hm_phase_end(), HM_OK);
  ASSERT_EQ(hm_iteration_next(), HM_OK);
}
}  // namespace

// The reactive baseline: after an iteration whose phases the sampler read, the object used most
// per byte is promoted into the fast tier in place of one that was not used.
TEST(Reactive, PromotesWhatTheLastIterationUsedAndDemotesWhatItDidNot) {
  ASSERT_EQ(hm_test::configure("capacity=emul:optane", "HM_FAST_BUDGET", "3M"), HM_OK);
  ASSERT_EQ(hm_policy_select("reactive"), HM_OK) << hm_last_error();
  hm_class_t cls;
  ASSERT_EQ(hm_class_define("reactive.data", HM_CLASS_HOT, 0, &cls), HM_OK);
  const size_t n = 2 << 20;
  auto *cold = static_cast<char *>(hm_class_alloc(cls, n, 0, 0));  // first: takes the fast tier
  auto *hot = static_cast<char *>(hm_class_alloc(cls, n, 0, 0));   // no room left: capacity
  ASSERT_TRUE(cold && hot) << hm_last_error();
  std::memset(cold, 1, n);
  std::memset(hot, 2, n);
  hm_tier_t fast = hm_test::tier("fast"), capacity = hm_test::tier("capacity"), t;
  ASSERT_EQ(hm_ptr_tier(hot, &t), HM_OK);
  EXPECT_EQ(t, capacity);
  ASSERT_NO_FATAL_FAILURE(use_in_one_iteration("reactive use", hot, n));
  ASSERT_EQ(hm_ptr_tier(hot, &t), HM_OK);
  EXPECT_EQ(t, fast) << "promoted after the iteration that used it";
  ASSERT_EQ(hm_ptr_tier(cold, &t), HM_OK);
  EXPECT_EQ(t, capacity) << "demoted: not used";
  EXPECT_EQ(hot[4096], 5) << "the data moved with the object";
  EXPECT_EQ(cold[5], 1);
  hm_reactive_stats_t rs;
  ASSERT_EQ(hm_reactive_stats(&rs), HM_OK);
  EXPECT_EQ(rs.rounds, 1u);
  EXPECT_EQ(rs.promoted, 1u);
  EXPECT_EQ(rs.demoted, 1u);
  hm_free(cold);
  hm_free(hot);
  hm_test::configure("");
}

// While the capacity tier holds nothing there is nothing to decide: reactive asks for no samples
// of its own and moves nothing. Once an object lands there, sampling resumes and it is promoted.
TEST(Reactive, SamplesNothingWhileEverythingIsFast) {
  const size_t n = 2 << 20;
  ASSERT_EQ(hm_test::configure("capacity=emul:optane", "HM_FAST_BUDGET", "7M"), HM_OK);
  ASSERT_EQ(hm_policy_select("reactive"), HM_OK) << hm_last_error();
  hm_class_t cls;
  ASSERT_EQ(hm_class_define("reactive.room", HM_CLASS_HOT, 0, &cls), HM_OK);
  hm_tier_t fast = hm_test::tier("fast"), capacity = hm_test::tier("capacity"), t;
  char *cold[3];
  for (char *&c : cold) {
    c = static_cast<char *>(hm_class_alloc(cls, n, 0, 0));
    ASSERT_NE(c, nullptr) << hm_last_error();
    std::memset(c, 1, n);
  }
  // Everything on the fast tier: iterations sample nothing on reactive's behalf.
  hm_sampler_stats_t before, after;
  ASSERT_EQ(hm_sampler_stats(&before), HM_OK);
  const int iterations = 6;
  for (int i = 0; i < iterations; ++i) {
    ASSERT_EQ(hm_phase_begin("reactive all fast"), HM_OK);
    cold[0][i] = 2;
    ASSERT_EQ(hm_phase_end(), HM_OK);
    ASSERT_EQ(hm_iteration_next(), HM_OK);
  }
  ASSERT_EQ(hm_sampler_stats(&after), HM_OK);
  EXPECT_LT(after.phases_sampled - before.phases_sampled, static_cast<uint64_t>(iterations))
      << "not every phase sampled while the capacity tier holds nothing";
  for (char *c : cold) {
    ASSERT_EQ(hm_ptr_tier(c, &t), HM_OK);
    EXPECT_EQ(t, fast) << "nothing demoted with room to spare";
  }
  hm_reactive_stats_t rs;
  ASSERT_EQ(hm_reactive_stats(&rs), HM_OK);
  EXPECT_EQ(rs.demoted, 0u);
  // A fourth object does not fit (8 MiB against 7): the capacity tier. Used, it is promoted.
  auto *hot = static_cast<char *>(hm_class_alloc(cls, n, 0, 0));
  ASSERT_NE(hot, nullptr) << hm_last_error();
  ASSERT_EQ(hm_ptr_tier(hot, &t), HM_OK);
  ASSERT_EQ(t, capacity);
  ASSERT_NO_FATAL_FAILURE(use_in_one_iteration("reactive room use", hot, n));
  ASSERT_EQ(hm_ptr_tier(hot, &t), HM_OK);
  EXPECT_EQ(t, fast) << "promoted after the iteration that used it";
  EXPECT_EQ(hot[4096], 3) << "the data moved with the object";
  ASSERT_EQ(hm_reactive_stats(&rs), HM_OK);
  EXPECT_EQ(rs.promoted, 1u);
  for (char *c : cold) hm_free(c);
  hm_free(hot);
  hm_test::configure("");
}

// An object of 512 MiB or more is three mappings (its first and last 2 MiB in small pages): its
// use is what the program referenced in all three, here only in the middle one.
TEST(Reactive, AHugeObjectUsedOnlyInItsInteriorIsPromoted) {
  const size_t n = size_t{512} << 20, unit = size_t{2} << 20;
  ASSERT_EQ(hm_test::configure("capacity=emul:optane", "HM_FAST_BUDGET", "513M"), HM_OK);
  ASSERT_EQ(hm_policy_select("reactive"), HM_OK) << hm_last_error();
  hm_class_t cls;
  ASSERT_EQ(hm_class_define("reactive.huge", HM_CLASS_HOT, 0, &cls), HM_OK);
  auto *cold = static_cast<char *>(hm_class_alloc(cls, unit, 0, 0));  // takes the fast tier
  auto *hot = static_cast<char *>(hm_class_alloc(cls, n, 0, 0));      // does not fit beside it
  ASSERT_TRUE(cold && hot) << hm_last_error();
  std::memset(cold, 1, unit);
  hm_tier_t fast = hm_test::tier("fast"), capacity = hm_test::tier("capacity"), t;
  ASSERT_EQ(hm_ptr_tier(hot, &t), HM_OK);
  ASSERT_EQ(t, capacity);
  ASSERT_EQ(hm_phase_begin("reactive huge use"), HM_OK);  // its first instance: sampled
  for (size_t i = unit; i < n - unit; i += 64 << 10) hot[i] = 7;
  ASSERT_EQ(hm_phase_end(), HM_OK);
  ASSERT_EQ(hm_iteration_next(), HM_OK);
  ASSERT_EQ(hm_ptr_tier(hot, &t), HM_OK);
  EXPECT_EQ(t, fast) << "promoted: its interior was used";
  ASSERT_EQ(hm_ptr_tier(cold, &t), HM_OK);
  EXPECT_EQ(t, capacity) << "demoted: not used";
  EXPECT_EQ(hot[unit + (64 << 10)], 7) << "the data moved with the object";
  hm_free(cold);
  hm_free(hot);
  hm_test::configure("");
}

// hm_prefetch_distance: nothing under policies that do not prefetch or with every hot object
// fast; HM_PREFETCH_DISTANCE forces a distance, and one out of range turns prefetch off.
TEST(PrefetchModel, TheDistanceFollowsThePolicyThePlacementAndTheOverride) {
  unsetenv("HM_PREFETCH_DISTANCE");
  ASSERT_EQ(hm_test::configure("capacity=emul:optane", "HM_FAST_BUDGET", "24M"), HM_OK);
  ASSERT_EQ(hm_policy_select("hetmem-static+prefetch"), HM_OK);
  hm_class_t cls;
  ASSERT_EQ(hm_class_define("prefetch.fields", HM_CLASS_HOT, 10, &cls), HM_OK);
  void *fast_part = hm_class_alloc(cls, 1 << 20, 0, 0);
  ASSERT_NE(fast_part, nullptr);
  EXPECT_EQ(hm_prefetch_distance("push", 50), 0) << "every hot object is on the fast tier: nothing to hide";
  // A hot object that does not fit goes to the capacity tier: now there is something to prefetch.
  void *slow_part = hm_class_alloc(cls, 40 << 20, 0, 0);
  ASSERT_NE(slow_part, nullptr);
  const int k = hm_prefetch_distance("push", 50);
  EXPECT_GE(k, 1);
  EXPECT_LE(k, 64);
  EXPECT_GE(hm_prefetch_distance("push", 5), k) << "a shorter unit needs a longer distance";
  EXPECT_EQ(hm_prefetch_distance("never measured", 0), 0) << "no unit time yet: no distance";
  setenv("HM_PREFETCH_DISTANCE", "7", 1);
  ASSERT_EQ(hm_test::configure("capacity=emul:optane"), HM_OK);
  ASSERT_EQ(hm_policy_select("first-touch"), HM_OK);
  EXPECT_EQ(hm_prefetch_distance("push", 50), 7) << "the override applies under any policy";
  setenv("HM_PREFETCH_DISTANCE", "99", 1);
  EXPECT_EQ(hm_test::configure("capacity=emul:optane"), HM_EFORMAT) << "out of range: refused when hetmem starts";
  EXPECT_NE(std::string(hm_last_error()).find("HM_PREFETCH_DISTANCE='99': expected an integer from 0 to 64"),
            std::string::npos) << hm_last_error();
  unsetenv("HM_PREFETCH_DISTANCE");
  ASSERT_EQ(hm_test::configure("capacity=emul:optane"), HM_OK);
  hm_free(fast_part);
  hm_free(slow_part);
  hm_test::configure("");
}
