// Declared accesses (hm_access, hm_access_scattered), the referenced-page sampler as the emulated
// tier's third charge point, the zero-charge profile and the calibration's provenance.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "alloc/access.h"
#include "hetmem/hetmem.h"
#include "prim/prim.h"
#include "tier/emul.h"
#include "../support.h"

namespace {

hm_emul_stats_t emul_stats(hm_tier_t t) {
  hm_emul_stats_t s{};
  EXPECT_EQ(hm_emul_stats(t, &s), HM_OK);
  return s;
}

hm_sampler_stats_t sampler_stats() {
  hm_sampler_stats_t s{};
  EXPECT_EQ(hm_sampler_stats(&s), HM_OK);
  return s;
}

double model_ns(uint64_t r, uint64_t w, uint64_t n) {
  hm_calibration_t cal;
  EXPECT_EQ(hm_calibration_get(&cal), HM_OK);
  return hm::emul_extra_ns(*hm::emul_profile("optane"), cal, 1, r, w, n);
}

// Reads every byte of the array (a kernel that declares nothing when `declare` is false).
double read_all(const double *a, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += a[i];
  return s;
}

class Access : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(hm_test::configure("capacity=emul:optane", "HM_SAMPLE_BUDGET", "1"), HM_OK); }
  void TearDown() override {
    unsetenv("HM_SAMPLE_BUDGET");
    hm_test::configure("");
  }
};

}  // namespace

TEST_F(Access, DeclaredReadsAndWritesAreChargedAtTheirRatios) {
  hm_tier_t opt = hm_test::tier("capacity");
  const size_t bytes = size_t{32} << 20;
  void *a = hm_tier_alloc(opt, bytes, 64, HM_STRICT);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(hm_access(a, bytes, HM_ACCESS_READ), HM_OK);
  hm_emul_stats_t s = emul_stats(opt);
  EXPECT_EQ(s.read_bytes[HM_EMUL_DECLARED], bytes);
  EXPECT_EQ(s.write_bytes[HM_EMUL_DECLARED], 0u);
  double read_model = model_ns(bytes, 0, 0);
  EXPECT_NEAR(static_cast<double>(s.charged_ns[HM_EMUL_DECLARED]), read_model, 0.05 * read_model + 20000);
  ASSERT_EQ(hm_access(static_cast<char *>(a) + 4096, bytes / 2, HM_ACCESS_WRITE), HM_OK);
  s = emul_stats(opt);
  EXPECT_EQ(s.write_bytes[HM_EMUL_DECLARED], bytes / 2) << "an interior pointer names its allocation";
  double both = read_model + model_ns(0, bytes / 2, 0);
  EXPECT_NEAR(static_cast<double>(s.charged_ns[HM_EMUL_DECLARED]), both, 0.05 * both + 20000);
  EXPECT_GT(model_ns(0, bytes, 0), 2 * model_ns(bytes, 0, 0)) << "Optane writes cost more than reads";
  EXPECT_EQ(s.charges, 1);
  hm_free(a);
}

TEST_F(Access, SmallDeclarationsAreGatheredAndPaidExactly) {
  hm_tier_t opt = hm_test::tier("capacity");
  char *a = static_cast<char *>(hm_tier_alloc(opt, 4096, 64, HM_STRICT));
  ASSERT_NE(a, nullptr);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(hm_access(a + i, 64, HM_ACCESS_RW), HM_OK);
  // hm_emul_stats pays the caller's gathered declarations first: nothing is lost.
  hm_emul_stats_t s = emul_stats(opt);
  EXPECT_EQ(s.read_bytes[HM_EMUL_DECLARED], 6400u);
  EXPECT_EQ(s.write_bytes[HM_EMUL_DECLARED], 6400u);
  hm_free(a);
}

TEST_F(Access, BadArgumentsAreRefusedWithAMessage) {
  hm_tier_t opt = hm_test::tier("capacity");
  void *a = hm_tier_alloc(opt, 4096, 64, HM_STRICT);
  EXPECT_EQ(hm_access(nullptr, 8, HM_ACCESS_READ), HM_EINVAL);
  EXPECT_NE(std::string(hm_last_error()).find("NULL"), std::string::npos);
  EXPECT_EQ(hm_access(a, 8, 0), HM_EINVAL);
  EXPECT_NE(std::string(hm_last_error()).find("HM_ACCESS_READ"), std::string::npos) << hm_last_error();
  EXPECT_EQ(hm_access(a, 8, HM_ACCESS_READ | HM_ACCESS_DEPENDENT), HM_EINVAL);
  EXPECT_NE(std::string(hm_last_error()).find("hm_access_scattered"), std::string::npos) << hm_last_error();
  EXPECT_EQ(hm_access(a, 8, 0x40u), HM_EINVAL);
  EXPECT_EQ(hm_access_scattered(a, 10, 0, HM_ACCESS_READ), HM_EINVAL);
  EXPECT_EQ(hm_access_scattered(a, 10, 8, HM_ACCESS_DEPENDENT), HM_EINVAL) << "a direction is needed";
  // Memory hetmem does not own counts as DRAM: accepted, nothing charged.
  std::vector<double> mine(1024);
  hm_emul_stats_t before = emul_stats(opt);
  EXPECT_EQ(hm_access(mine.data(), 8192, HM_ACCESS_READ), HM_OK);
  EXPECT_EQ(emul_stats(opt).read_bytes[HM_EMUL_DECLARED], before.read_bytes[HM_EMUL_DECLARED]);
  hm_free(a);
}

TEST_F(Access, RealTiersAreNeverCharged) {
  hm_tier_t dram = hm_test::tier("dram");
  void *a = hm_tier_alloc(dram, size_t{8} << 20, 64, HM_STRICT);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(hm_access(a, size_t{8} << 20, HM_ACCESS_RW), HM_OK);
  hm_emul_stats_t s = emul_stats(dram);
  EXPECT_EQ(s.read_bytes[HM_EMUL_DECLARED], 0u);
  EXPECT_EQ(s.charged_ns[HM_EMUL_DECLARED], 0u);
  EXPECT_EQ(s.charges, 0);
  hm_free(a);
}

TEST_F(Access, ScatteredAccessesPayLatencyOrLines) {
  hm_tier_t opt = hm_test::tier("capacity");
  void *a = hm_tier_alloc(opt, size_t{4} << 20, 64, HM_STRICT);
  ASSERT_NE(a, nullptr);
  hm_calibration_t cal;
  ASSERT_EQ(hm_calibration_get(&cal), HM_OK);
  // A pointer chase: the device's extra latency per access, no bandwidth.
  ASSERT_EQ(hm_access_scattered(a, 10000, 8, HM_ACCESS_READ | HM_ACCESS_DEPENDENT), HM_OK);
  hm_emul_stats_t s = emul_stats(opt);
  EXPECT_EQ(s.accesses[HM_EMUL_DECLARED], 10000u);
  EXPECT_EQ(s.read_bytes[HM_EMUL_DECLARED], 0u);
  double chase = 10000 * (3.5 - 1) * cal.latency_ns;
  EXPECT_NEAR(static_cast<double>(s.charged_ns[HM_EMUL_DECLARED]), chase, 0.05 * chase + 20000);
  // Independent gathers: the larger of their lines' bandwidth and their share of the latency.
  uint64_t n = 100000;
  uint64_t dependent = hm::scattered_dependent_equivalent(cal, n);
  double by_latency = model_ns(0, 0, dependent), by_lines = model_ns(n * 64, 0, 0);
  ASSERT_EQ(hm_access_scattered(a, n, 8, HM_ACCESS_READ), HM_OK);
  hm_emul_stats_t t = emul_stats(opt);
  double charged = static_cast<double>(t.charged_ns[HM_EMUL_DECLARED] - s.charged_ns[HM_EMUL_DECLARED]);
  double expect = std::max(by_latency, by_lines);
  EXPECT_NEAR(charged, expect, 0.05 * expect + 20000);
  // An access of 100 bytes moves two lines.
  ASSERT_EQ(hm_access_scattered(a, 1000, 100, HM_ACCESS_WRITE), HM_OK);
  hm_emul_stats_t u = emul_stats(opt);
  uint64_t w = u.write_bytes[HM_EMUL_DECLARED] - t.write_bytes[HM_EMUL_DECLARED];
  uint64_t d = u.accesses[HM_EMUL_DECLARED] - t.accesses[HM_EMUL_DECLARED];
  EXPECT_TRUE(w == 1000u * 128 || d == hm::scattered_dependent_equivalent(cal, 1000)) << w << " " << d;
  hm_free(a);
}

// The same read kernel measured both ways: declared, and by the referenced-page sampler. They agree
// within the sampler's granularity (4 KiB pages here: the arrays have no huge pages).
TEST_F(Access, DeclaredAndSampledVolumesAgreeAndNothingIsChargedTwice) {
  hm_tier_t opt = hm_test::tier("capacity");
  const size_t bytes = size_t{16} << 20, n = bytes / sizeof(double);
  auto *declared = static_cast<double *>(hm_tier_alloc(opt, bytes, 4096, HM_STRICT | HM_NO_HUGE));
  auto *undeclared = static_cast<double *>(hm_tier_alloc(opt, bytes, 4096, HM_STRICT | HM_NO_HUGE));
  ASSERT_TRUE(declared && undeclared);
  std::memset(declared, 0, bytes);
  std::memset(undeclared, 0, bytes);
  ASSERT_EQ(hm_access(declared, bytes, HM_ACCESS_WRITE), HM_OK);  // marks it declared
  hm_emul_stats_t before = emul_stats(opt);
  hm_sampler_stats_t sb = sampler_stats();
  ASSERT_EQ(hm_phase_begin("read both"), HM_OK);
  volatile double sink = read_all(declared, n) + read_all(undeclared, n);
  (void)sink;
  ASSERT_EQ(hm_access(declared, bytes, HM_ACCESS_READ), HM_OK);
  ASSERT_EQ(hm_phase_end(), HM_OK);
  hm_emul_stats_t after = emul_stats(opt);
  EXPECT_EQ(sampler_stats().phases_sampled, sb.phases_sampled + 1);
  uint64_t declared_read = after.read_bytes[HM_EMUL_DECLARED] - before.read_bytes[HM_EMUL_DECLARED];
  uint64_t sampled_read = after.read_bytes[HM_EMUL_SAMPLED] - before.read_bytes[HM_EMUL_SAMPLED];
  EXPECT_EQ(declared_read, bytes);
  // The declared array is left out of the sample (else it would count twice); the other one is
  // counted once per page, within a page or two at its ends.
  EXPECT_GE(sampled_read + 2 * 4096, bytes);
  EXPECT_LE(sampled_read, bytes + 2 * 4096);
  double declared_ns = after.charged_ns[HM_EMUL_DECLARED] - before.charged_ns[HM_EMUL_DECLARED];
  double sampled_ns = after.charged_ns[HM_EMUL_SAMPLED] - before.charged_ns[HM_EMUL_SAMPLED];
  EXPECT_NEAR(sampled_ns, declared_ns, 0.05 * declared_ns + model_ns(2 * 4096, 0, 0) + 20000);
  hm_free(declared);
  hm_free(undeclared);
}

TEST_F(Access, ThePhaseNeedsNoSampleWhenEverythingIsDeclared) {
  hm_tier_t opt = hm_test::tier("capacity");
  const size_t bytes = size_t{4} << 20;
  void *a = hm_tier_alloc(opt, bytes, 64, HM_STRICT);
  ASSERT_EQ(hm_access(a, bytes, HM_ACCESS_WRITE), HM_OK);
  hm_sampler_stats_t sb = sampler_stats();
  ASSERT_EQ(hm_phase_begin("declared only"), HM_OK);
  ASSERT_EQ(hm_access(a, bytes, HM_ACCESS_READ), HM_OK);
  ASSERT_EQ(hm_phase_end(), HM_OK);
  hm_sampler_stats_t sa = sampler_stats();
  EXPECT_EQ(sa.phases_sampled, sb.phases_sampled) << "no undeclared memory on the tier: no sample";
  EXPECT_EQ(sa.phases_skipped, sb.phases_skipped + 1);
  hm_free(a);
}

TEST(AccessBudget, SamplingStopsAtTheBudgetAndLaterPhasesCarryTheLastSample) {
  ASSERT_EQ(hm_test::configure("capacity=emul:optane", "HM_SAMPLE_BUDGET", "0"), HM_OK);
  hm_tier_t opt = hm_test::tier("capacity");
  const size_t bytes = size_t{4} << 20;
  auto *a = static_cast<double *>(hm_tier_alloc(opt, bytes, 4096, HM_STRICT | HM_NO_HUGE));
  std::memset(a, 0, bytes);
  hm_sampler_stats_t sb = sampler_stats();
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(hm_phase_begin("undeclared"), HM_OK);
    volatile double sink = read_all(a, bytes / 8);
    (void)sink;
    ASSERT_EQ(hm_phase_end(), HM_OK);
  }
  hm_sampler_stats_t sa = sampler_stats();
  // A budget of 0 allows the first sample only (nothing spent yet), then none.
  EXPECT_LE(sa.phases_sampled - sb.phases_sampled, 1u);
  EXPECT_EQ(sa.phases_sampled + sa.phases_carried + sa.phases_skipped,
            sb.phases_sampled + sb.phases_carried + sb.phases_skipped + 5);
  if (sa.phases_sampled > sb.phases_sampled) {
    EXPECT_EQ(sa.phases_carried - sb.phases_carried, 4u) << "charged the first sample's volume";
    EXPECT_GE(emul_stats(opt).read_bytes[HM_EMUL_SAMPLED] + 5 * 2 * 4096, 5 * bytes);
  }
  hm_free(a);
  unsetenv("HM_SAMPLE_BUDGET");
  hm_test::configure("");
}

TEST(AccessBudget, AMalformedBudgetIsRefusedAtInitialisation) {
  EXPECT_NE(hm_test::configure("", "HM_SAMPLE_BUDGET", "2"), HM_OK);
  EXPECT_NE(std::string(hm_last_error()).find("HM_SAMPLE_BUDGET"), std::string::npos) << hm_last_error();
  unsetenv("HM_SAMPLE_BUDGET");
  EXPECT_EQ(hm_test::configure(""), HM_OK);
}

TEST(AccessProfile, TheDramProfileKeepsTheBookkeepingAndChargesNothing) {
  ASSERT_EQ(hm_test::configure("capacity=emul:dram"), HM_OK);
  hm_tier_t t = hm_test::tier("capacity");
  const size_t bytes = size_t{64} << 20;
  void *a = hm_tier_alloc(t, bytes, 64, HM_STRICT);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(hm_access(a, bytes, HM_ACCESS_RW), HM_OK);
  hm_emul_stats_t s = emul_stats(t);
  EXPECT_EQ(s.read_bytes[HM_EMUL_DECLARED], bytes) << "the volume is still counted";
  EXPECT_EQ(s.charged_ns[HM_EMUL_DECLARED], 0u);
  EXPECT_EQ(s.charges, 0);
  hm_free(a);
  hm_test::configure("");
}

TEST(Calibration, ItsProvenanceIsRecordedAndAQuickOrOldOneIsFlagged) {
  std::string path = hm_test::temp_path("calibration-provenance");
  const char *was = std::getenv("HM_CALIBRATION");
  std::string previous = was ? was : "";
  setenv("HM_CALIBRATION", path.c_str(), 1);
  ASSERT_EQ(hm_test::configure(""), HM_OK);
  hm_calibration_t cal;
  ASSERT_EQ(hm_calibration_get(&cal), HM_OK);  // no file: measured quickly now
  EXPECT_EQ(cal.method, HM_CALIBRATION_QUICK);
  EXPECT_GT(cal.measured_unix, 1700000000);
  EXPECT_GT(cal.gather_ns, 0.0);
  EXPECT_GT(std::strlen(cal.cpu), 0u);
  char why[512];
  EXPECT_EQ(hm_calibration_problem(why, sizeof why), 1);
  EXPECT_NE(std::string(why).find("quick"), std::string::npos) << why;
  EXPECT_NE(std::string(why).find("hetmem tiers --bench"), std::string::npos) << why;
  // A full calibration of every core, made now: nothing to say.
  hm_calibration_t full = cal;
  full.method = HM_CALIBRATION_FULL;
  full.threads = hm::prim::cpu_count();
  for (int t = 0; t < full.threads; ++t)
    full.read_bw_mbps[t] = full.write_bw_mbps[t] = full.copy_bw_mbps[t] = 10000 + t;
  ASSERT_EQ(hm_calibration_store(&full), HM_OK);
  EXPECT_EQ(hm_calibration_problem(why, sizeof why), 0) << why;
  std::string text;
  ASSERT_TRUE(hm::prim::read_text(path, &text));
  EXPECT_NE(text.find("method = full"), std::string::npos) << text;
  EXPECT_NE(text.find("measured = 20"), std::string::npos) << text;
  // The same file dated 40 days ago is flagged as old.
  std::string old = text;
  auto at = old.find("measured_unix = ");
  auto eol = old.find('\n', at);
  old.replace(at, eol - at, "measured_unix = " + std::to_string(hm::prim::wall_seconds() - 40 * 86400));
  std::ofstream(path) << old;
  ASSERT_EQ(hm_test::configure(""), HM_OK);
  EXPECT_EQ(hm_calibration_problem(why, sizeof why), 1);
  EXPECT_NE(std::string(why).find("30 days"), std::string::npos) << why;
  // A machine whose memory grew or shrank (virtual machines do) keeps its calibration, also one
  // written with the node size in its key.
  std::string grown = text;
  at = grown.find("machine = ");
  eol = grown.find('\n', at);
  grown.replace(at, eol - at, grown.substr(at, eol - at) + "|node0=999G");
  std::ofstream(path) << grown;
  ASSERT_EQ(hm_test::configure(""), HM_OK);
  hm_calibration_t kept;
  ASSERT_EQ(hm_calibration_get(&kept), HM_OK);
  EXPECT_EQ(kept.from_cache, 1) << "not measured again";
  EXPECT_EQ(kept.method, HM_CALIBRATION_FULL);
  EXPECT_DOUBLE_EQ(kept.read_bw_mbps[0], 10000);
  unlink(path.c_str());
  if (was) setenv("HM_CALIBRATION", previous.c_str(), 1);
  else unsetenv("HM_CALIBRATION");
  ASSERT_EQ(hm_test::configure(""), HM_OK);
}
