#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "hetmem/hetmem.h"
#include "prim/prim.h"
#include "tier/emul.h"
#include "tier/tier.h"
#include "../support.h"

using namespace hm;

namespace {
long involuntary_switches() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_nivcsw;
}

hm_calibration_t fixed_calibration() {
  hm_calibration_t c{};
  c.threads = 2;
  c.read_bw_mbps[0] = 10000;  // 10 GB/s one thread, 16 GB/s two
  c.read_bw_mbps[1] = 16000;
  c.write_bw_mbps[0] = 8000;
  c.write_bw_mbps[1] = 12000;
  c.copy_bw_mbps[0] = c.copy_bw_mbps[1] = 9000;
  c.latency_ns = 100;
  return c;
}
}  // namespace

TEST(Emul, ProfilesAreTheFixedPublishedRatios) {
  const EmulProfile *o = emul_profile("optane");
  ASSERT_NE(o, nullptr);
  EXPECT_DOUBLE_EQ(o->read_latency, 2.2);
  EXPECT_DOUBLE_EQ(o->random_latency, 3.5);
  EXPECT_DOUBLE_EQ(o->read_bw, 0.37);
  EXPECT_DOUBLE_EQ(o->write_bw, 0.14);
  const EmulProfile *c = emul_profile("cxl");
  ASSERT_NE(c, nullptr);
  EXPECT_DOUBLE_EQ(c->read_bw, 0.5);
  EXPECT_DOUBLE_EQ(c->random_latency, 2.0);
  const EmulProfile *n = emul_profile("nvbm");
  ASSERT_NE(n, nullptr);
  EXPECT_DOUBLE_EQ(n->random_latency, 100.0 / 60.0);
  EXPECT_DOUBLE_EQ(n->read_bw, 1.0);
  EXPECT_EQ(emul_profile("3dxp"), nullptr);
}

TEST(Emul, ChargeFormulaMatchesDesign) {
  hm_calibration_t cal = fixed_calibration();
  const EmulProfile &o = *emul_profile("optane");
  // 1e9 bytes read on one thread: 1e9 * (1/(0.37*1e10) - 1/1e10) s.
  double expect = 1e9 * (1.0 / (0.37e10) - 1.0 / 1e10) * 1e9;
  EXPECT_NEAR(emul_extra_ns(o, cal, 1, 1000000000ull, 0, 0), expect, expect * 1e-12);
  // Writes use the write ratio.
  double w = 1e8 * (1.0 / (0.14 * 8e9) - 1.0 / 8e9) * 1e9;
  EXPECT_NEAR(emul_extra_ns(o, cal, 1, 0, 100000000ull, 0), w, w * 1e-12);
  // Dependent accesses: N * (3.5 - 1) * 100 ns.
  EXPECT_NEAR(emul_extra_ns(o, cal, 1, 0, 0, 1000), 1000 * 2.5 * 100, 1e-6);
  // Two threads share the device: each thread's bytes cost 2 / aggregate(2 threads).
  double two = 1e9 * 2 * (1.0 / (0.37 * 1.6e10) - 1.0 / 1.6e10) * 1e9;
  EXPECT_NEAR(emul_extra_ns(o, cal, 2, 1000000000ull, 0, 0), two, two * 1e-12);
  // More threads than calibrated use the last entry.
  double four = 1e9 * 4 * (1.0 / (0.37 * 1.6e10) - 1.0 / 1.6e10) * 1e9;
  EXPECT_NEAR(emul_extra_ns(o, cal, 4, 1000000000ull, 0, 0), four, four * 1e-12);
  // nvbm charges no bandwidth, only latency.
  EXPECT_DOUBLE_EQ(emul_extra_ns(*emul_profile("nvbm"), cal, 1, 1 << 30, 1 << 30, 0), 0.0);
}

TEST(Emul, ChargeWaitsAndIsCountedPerTier) {
  ASSERT_EQ(hm_test::configure("capacity=emul:optane,emul:cxl"), HM_OK);
  hm_tier_t opt = hm_test::tier("emul:optane"), dram = hm_test::tier("dram");
  hm_calibration_t cal;
  ASSERT_EQ(hm_calibration_get(&cal), HM_OK);
  double model = emul_extra_ns(*emul_profile("optane"), cal, 1, 64u << 20, 0, 1000);
  uint64_t charged = 0, t0 = prim::now_ns();
  ASSERT_EQ(hm_emul_charge(opt, 64u << 20, 0, 1000, &charged), HM_OK);
  uint64_t elapsed = prim::now_ns() - t0;
  EXPECT_GE(static_cast<double>(charged), model - 1) << "whole nanoseconds";
  EXPECT_LT(static_cast<double>(charged), model * 1.05 + 50000) << "alone, the wait is the model";
  EXPECT_GE(elapsed, charged);
  EXPECT_EQ(hm_test::stats(opt).emul_charged_ns, charged);
  ASSERT_EQ(hm_emul_charge(dram, 64u << 20, 0, 0, &charged), HM_OK);
  EXPECT_EQ(charged, 0u) << "real tiers are never charged";
}

TEST(Emul, ConcurrentChargesShareTheBandwidth) {
  ASSERT_EQ(hm_test::configure("capacity=emul:optane"), HM_OK);
  hm_tier_t opt = hm_test::tier("capacity");
  hm_calibration_t cal;
  ASSERT_EQ(hm_calibration_get(&cal), HM_OK);
  const uint64_t bytes = 128u << 20;
  double alone = emul_extra_ns(*emul_profile("optane"), cal, 1, bytes, 0, 0);
  double shared = emul_extra_ns(*emul_profile("optane"), cal, 2, bytes, 0, 0);
  // Another charger is registered on the tier for the whole charge (deterministic, whatever the
  // scheduler does): the charge takes the two-thread cost.
  std::atomic<int> &charging = hm::tier_get(opt)->emul.charging;
  charging.fetch_add(1);
  uint64_t waited = 0;
  ASSERT_EQ(hm_emul_charge(opt, bytes, 0, 0, &waited), HM_OK);
  charging.fetch_sub(1);
  EXPECT_NEAR(static_cast<double>(waited), shared, 0.03 * shared);
  // The other charger leaves part way: work is conserved, so the wait is
  // alone + overlap * (1 - alone / shared).
  std::atomic<uint64_t> start{0};
  long worker_preempted = 0, main_preempted = 0;
  charging.fetch_add(1);
  std::thread worker([&] {
    long before = involuntary_switches();
    start = prim::now_ns();
    hm_emul_charge(opt, bytes, 0, 0, &waited);
    worker_preempted = involuntary_switches() - before;
  });
  while (start.load() == 0) {
  }
  long before = involuntary_switches();
  prim::spin_until_ns(start.load() + static_cast<uint64_t>(alone / 2));
  charging.fetch_sub(1);
  double overlap = static_cast<double>(prim::now_ns() - start.load());
  main_preempted = involuntary_switches() - before;
  worker.join();
  // Whatever the scheduler did, the wait lies between the one- and the two-thread cost.
  EXPECT_GE(static_cast<double>(waited), alone - 1);
  EXPECT_LE(static_cast<double>(waited), shared + 1e6);
  // Unpreempted, work is conserved exactly: wait = alone + overlap * (1 - alone / shared). (A
  // preempted thread accesses no memory, so no sharing model can say what it should have paid.)
  if (worker_preempted == 0 && main_preempted == 0) {
    double expect = alone + overlap * (1 - alone / shared);
    EXPECT_NEAR(static_cast<double>(waited), expect, 0.03 * expect)
        << "alone " << alone << " ns, shared " << shared << " ns, overlap " << overlap << " ns";
  }
}

TEST(Emul, DisabledByOption) {
  ASSERT_EQ(hm_test::configure("capacity=emul:optane", "HM_EMUL", "0"), HM_OK);
  uint64_t charged = 1;
  ASSERT_EQ(hm_emul_charge(hm_test::tier("capacity"), 1 << 20, 0, 0, &charged), HM_OK);
  EXPECT_EQ(charged, 0u);
  unsetenv("HM_EMUL");
  ASSERT_EQ(hm_test::configure(""), HM_OK);
}

TEST(Emul, CalibrationIsStoredAndReloaded) {
  std::string path = hm_test::temp_path("calibration");
  const char *was = std::getenv("HM_CALIBRATION");
  std::string previous = was ? was : "";
  setenv("HM_CALIBRATION", path.c_str(), 1);
  ASSERT_EQ(hm_test::configure(""), HM_OK);
  hm_calibration_t measured;
  ASSERT_EQ(hm_calibration_get(&measured), HM_OK);
  EXPECT_STREQ(measured.path, path.c_str());
  EXPECT_GT(measured.read_bw_mbps[0], 100.0);
  EXPECT_GT(measured.latency_ns, 1.0);
  hm_calibration_t mine = fixed_calibration();
  ASSERT_EQ(hm_calibration_store(&mine), HM_OK);
  hm_calibration_t bad = mine;
  bad.read_bw_mbps[1] = -1;
  EXPECT_EQ(hm_calibration_store(&bad), HM_EINVAL);
  std::string text;
  ASSERT_TRUE(prim::read_text(path, &text));
  EXPECT_NE(text.find("read_bw_mbps = 10000 16000"), std::string::npos) << text;
  EXPECT_NE(text.find("latency_ns = 100"), std::string::npos) << text;
  unlink(path.c_str());
  // Leave the process as it was: later tests must not see the made-up figures.
  if (was) setenv("HM_CALIBRATION", previous.c_str(), 1);
  else unsetenv("HM_CALIBRATION");
  ASSERT_EQ(hm_test::configure(""), HM_OK);
}
