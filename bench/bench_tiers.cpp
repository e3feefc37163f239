// hetmem-bench-tiers: STREAM copy/scale/add/triad plus read-only and write-only loops on every
// tier for 1..N threads (arrays at least 4x the last-level cache, best of several repetitions as
// STREAM's rules say), and the dependent-load latency of a pointer chase over a random cycle.
// Emulated tiers are charged per thread as DESIGN.md says (a kernel run in place on the tier), so
// their figures are the model's. Prints a table, writes JSON, and stores the DRAM figures as the
// calibration the emulated tier uses. A plain OpenMP triad loop on malloc'd memory runs in the
// same process as a check of the DRAM tier's figure.
//
//   hetmem-bench-tiers [--size-mib N] [--reps N] [--threads N] [--json PATH] [--no-store]
#include <hetmem/hetmem.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "fma_peak.h"
#include "harness.h"
#include "tier/calibrate.h"

namespace {

enum Kernel { kCopy, kScale, kAdd, kTriad, kRead, kWrite, kKernels };
const char *kNames[kKernels] = {"copy", "scale", "add", "triad", "read", "write"};
// Bytes read and written per element (STREAM counting).
const double kReadB[kKernels] = {8, 8, 16, 16, 8, 0};
const double kWriteB[kKernels] = {8, 8, 8, 8, 0, 8};

struct TierResult {
  hm_tier_info_t info;
  std::vector<std::vector<double>> mbps;  // [threads-1][kernel]
  double latency_ns = 0;
  double gather_ns = 0;  // one thread, independent random 8-byte loads, per load
};

volatile double g_sink;

// Runs one kernel on `threads` threads over static chunks; charges emulated tiers per thread.
double run_kernel(Kernel k, double *a, double *b, double *c, size_t n, int threads, hm_tier_t tier, bool emulated) {
  double t0 = bench::now();
#pragma omp parallel num_threads(threads)
  {
    int id = omp_get_thread_num(), nt = omp_get_num_threads();
    size_t lo = n * id / nt, hi = n * (id + 1) / nt, m = hi - lo;
    switch (k) {
      case kCopy: hm::kernels::stream_copy(c + lo, a + lo, m); break;
      case kScale: hm::kernels::stream_scale(b + lo, c + lo, 3.0, m); break;
      case kAdd: hm::kernels::stream_add(c + lo, a + lo, b + lo, m); break;
      case kTriad: hm::kernels::stream_triad(a + lo, b + lo, c + lo, 3.0, m); break;
      case kRead: g_sink = g_sink + hm::kernels::read_sum(a + lo, m); break;
      case kWrite: hm::kernels::write_fill(c + lo, m, 1.5); break;
      default: break;
    }
    if (emulated)
      hm_emul_charge(tier, static_cast<uint64_t>(kReadB[k] * m), static_cast<uint64_t>(kWriteB[k] * m), 0, nullptr);
  }
  return bench::now() - t0;
}

// The plain OpenMP triad loop on malloc'd memory, timed alternately with the DRAM tier's triad so
// that both see the same machine load; returns {tier MB/s, plain MB/s}.
struct TriadCheck {
  double tier_mbps = 0, plain_mbps = 0;
  bench::Ratio ratio;  // the tier's bandwidth over the plain loop's, with the spread of the rounds
};

TriadCheck triad_check(double *a, double *b, double *c, size_t n, int threads, int reps, hm_tier_t tier) {
  // Same page size as the tier's arrays (hetmem asks for transparent huge pages on large
  // allocations), so that the check compares the loops and not the TLB.
  size_t bytes = (n * 8 + (size_t{2} << 20) - 1) & ~((size_t{2} << 20) - 1);
  auto *pa = static_cast<double *>(std::aligned_alloc(size_t{2} << 20, bytes));
  auto *pb = static_cast<double *>(std::aligned_alloc(size_t{2} << 20, bytes));
  auto *pc = static_cast<double *>(std::aligned_alloc(size_t{2} << 20, bytes));
  for (double *p : {pa, pb, pc}) madvise(p, bytes, MADV_HUGEPAGE);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; ++i) {
    pa[i] = 1.0;
    pb[i] = 2.0;
    pc[i] = 0.0;
  }
  std::vector<double> tier_t, plain_t;
  for (int r = 0; r < 2 * reps; ++r) {
    tier_t.push_back(run_kernel(kTriad, a, b, c, n, threads, tier, false));
    double t0 = bench::now();
    double *__restrict x = pa;
    const double *__restrict y = pb, *__restrict z = pc;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; ++i) x[i] = y[i] + 3.0 * z[i];
    plain_t.push_back(bench::now() - t0);
  }
  std::free(pa);
  std::free(pb);
  std::free(pc);
  double moved = 24.0 * static_cast<double>(n);
  // Medians: the check compares two loops under the same noise, not two lucky repetitions.
  return {moved / bench::median(tier_t) / 1e6, moved / bench::median(plain_t) / 1e6, bench::ratio(plain_t, tier_t)};
}

// The DRAM figures become the calibration the emulated tiers scale; stored before the emulated
// tiers are measured so that their figures follow this run's DRAM.
void store_calibration(const TierResult &r) {
  hm_calibration_t cal{};
  cal.threads = static_cast<int>(r.mbps.size());
  for (int t = 0; t < cal.threads; ++t) {
    cal.read_bw_mbps[t] = r.mbps[t][kRead];
    cal.write_bw_mbps[t] = r.mbps[t][kWrite];
    cal.copy_bw_mbps[t] = r.mbps[t][kCopy] / 2;  // bytes copied, counted once
  }
  cal.latency_ns = r.latency_ns;
  cal.gather_ns = r.gather_ns;
  cal.method = HM_CALIBRATION_FULL;
  if (hm_calibration_store(&cal) == HM_OK) {
    hm_calibration_t stored;
    hm_calibration_get(&stored);
    std::printf("  calibration updated: %s\n", stored.path);
  } else {
    std::fprintf(stderr, "hetmem-bench-tiers: %s\n", hm_last_error());
  }
}

double chase_latency(hm_tier_t tier, bool emulated, size_t bytes, size_t steps) {
  void *buf = hm_tier_alloc(tier, bytes, 4096, HM_STRICT);
  if (!buf) return 0;
  const size_t stride = 64;
  hm::kernels::chase_build(buf, bytes / stride, stride, 7);
  hm::kernels::chase_run(buf, steps / 8);  // warm up the TLB and caches that can help
  double t0 = bench::now();
  void *end = hm::kernels::chase_run(buf, steps);
  if (emulated) hm_emul_charge(tier, 0, 0, steps, nullptr);
  double t = bench::now() - t0;
  g_sink = g_sink + (end ? 1 : 0);
  hm_free(buf);
  return t * 1e9 / static_cast<double>(steps);
}

// Independent random 8-byte loads over an array much larger than the caches (declared as
// scattered accesses on an emulated tier): time per load on one thread, best of three.
double gather_time(hm_tier_t tier, bool emulated, size_t bytes, size_t loads) {
  size_t n = 1;
  while (n * 2 * sizeof(double) <= bytes) n *= 2;
  auto *a = static_cast<double *>(hm_tier_alloc(tier, n * sizeof(double), 4096, HM_STRICT));
  if (!a) return 0;
  hm::kernels::write_fill(a, n, 1.0);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    double t0 = bench::now();
    g_sink = g_sink + hm::kernels::gather_sum(a, n, loads, 11 + rep);
    if (emulated) hm_access_scattered(a, loads, sizeof(double), HM_ACCESS_READ);
    double t = bench::now() - t0;
    if (rep == 0 || t < best) best = t;
  }
  hm_free(a);
  return best * 1e9 / static_cast<double>(loads);
}

// The last-level cache from sysfs (sysconf reports nonsense on some virtual machines).
long last_level_cache() {
  long best = 0;
  for (int idx = 0; idx < 8; ++idx) {
    std::string path = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(idx) + "/size";
    FILE *f = std::fopen(path.c_str(), "r");
    if (!f) break;
    long v = 0;
    char unit = 0;
    if (std::fscanf(f, "%ld%c", &v, &unit) >= 1) {
      if (unit == 'K') v <<= 10;
      else if (unit == 'M') v <<= 20;
      if (v > best) best = v;
    }
    std::fclose(f);
  }
  return best > 0 ? best : 32l << 20;
}

}  // namespace

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  bench::Args args(argc, argv,
                   "usage: hetmem-bench-tiers [--size-mib N] [--reps N] [--threads N] [--json PATH] [--no-store]",
                   {"--size-mib", "--reps", "--threads", "--json"}, {"--no-store"});
  if (hm_init() != HM_OK) {
    std::fprintf(stderr, "hetmem-bench-tiers: %s\n", hm_last_error());
    return 1;
  }
  long llc = last_level_cache();
  size_t mib = std::strtoul(args.get("--size-mib", "0").c_str(), nullptr, 10);
  if (mib == 0) mib = std::max<size_t>(4 * static_cast<size_t>(llc) >> 20, 64);
  int reps = std::atoi(args.get("--reps", "5").c_str());
  int max_threads = std::atoi(args.get("--threads", std::to_string(omp_get_max_threads()).c_str()).c_str());
  if (reps < 2 || max_threads < 1 || max_threads > 64) {
    std::fprintf(stderr, "hetmem-bench-tiers: --reps must be >= 2 and --threads 1..64\n");
    return 2;
  }
  size_t n = (mib << 20) / sizeof(double);
  std::string json_path = args.get("--json", bench::results_path("hetmem-bench-tiers.json"));
  std::printf("hetmem tier benchmark: 3 arrays of %zu MiB per tier (last-level cache %ld MiB), best of %d, "
              "1..%d threads\n", mib, llc >> 20, reps, max_threads);

  std::vector<TierResult> results;
  TriadCheck check;  // DRAM tier triad vs plain OpenMP triad
  // DRAM first: its figures calibrate the emulated tiers measured after it.
  std::vector<hm_tier_t> order;
  for (int pass = 0; pass < 2; ++pass)
    for (hm_tier_t t = 0; t < hm_tier_count(); ++t) {
      hm_tier_info_t info;
      hm_tier_info(t, &info);
      if ((info.kind == HM_KIND_DRAM) == (pass == 0)) order.push_back(t);
    }
  for (hm_tier_t t : order) {
    TierResult r;
    hm_tier_info(t, &r.info);
    bool emulated = r.info.kind == HM_KIND_EMUL;
    auto *a = static_cast<double *>(hm_tier_alloc(t, n * 8, 64, HM_STRICT));
    auto *b = static_cast<double *>(hm_tier_alloc(t, n * 8, 64, HM_STRICT));
    auto *c = static_cast<double *>(hm_tier_alloc(t, n * 8, 64, HM_STRICT));
    if (!a || !b || !c) {
      std::printf("  %-24s skipped: %s\n", r.info.name, hm_last_error());
      hm_free(a);
      hm_free(b);
      hm_free(c);
      continue;
    }
    std::printf("  measuring %s ...\n", r.info.name);
#pragma omp parallel for num_threads(max_threads) schedule(static)
    for (size_t i = 0; i < n; ++i) {
      a[i] = 1.0;
      b[i] = 2.0;
      c[i] = 0.0;
    }
    for (int threads = 1; threads <= max_threads; ++threads) {
      std::vector<double> row(kKernels);
      for (int k = 0; k < kKernels; ++k) {
        std::vector<double> times;
        for (int rep = 0; rep < reps; ++rep)
          times.push_back(run_kernel(static_cast<Kernel>(k), a, b, c, n, threads, t, emulated));
        row[k] = (kReadB[k] + kWriteB[k]) * static_cast<double>(n) / bench::best(times) / 1e6;
      }
      r.mbps.push_back(row);
    }
    if (r.info.kind == HM_KIND_DRAM) check = triad_check(a, b, c, n, max_threads, reps, t);
    hm_free(a);
    hm_free(b);
    hm_free(c);
    r.latency_ns = chase_latency(t, emulated, size_t{64} << 20, size_t{1} << 21);
    r.gather_ns = gather_time(t, emulated, std::max<size_t>(n * 8, size_t{64} << 20), size_t{1} << 22);
    if (r.info.kind == HM_KIND_DRAM && !args.has("--no-store")) store_calibration(r);
    results.push_back(r);
  }

  std::printf("\n%-26s %-9s %7s", "tier", "figures", "threads");
  for (const char *k : kNames) std::printf(" %9s", k);
  std::printf(" %11s %10s\n", "latency ns", "gather ns");
  for (const TierResult &r : results) {
    const char *src = r.info.kind == HM_KIND_EMUL ? "emulated" : "measured";
    for (size_t t = 0; t < r.mbps.size(); ++t) {
      std::printf("%-26s %-9s %7zu", t == 0 ? r.info.name : "", t == 0 ? src : "", t + 1);
      for (double v : r.mbps[t]) std::printf(" %9.0f", v);
      if (t == 0) std::printf(" %11.1f %10.2f", r.latency_ns, r.gather_ns);
      std::printf("\n");
    }
  }
  // The compute roof beside the memory's: double-precision multiply-adds at full width.
  std::vector<bench::FmaPeak> fma;
  for (int threads = 1; threads <= max_threads; ++threads) fma.push_back(bench::fma_peak(threads, reps, 0.2));
  std::printf("\nFMA peak (measured, %s, double precision, best of %d):", fma[0].target, reps);
  for (size_t t = 0; t < fma.size(); ++t) std::printf(" %zu thread(s) %.1f GFLOP/s%s", t + 1, fma[t].gflops, t + 1 < fma.size() ? "," : "\n");
  const double plain = check.plain_mbps, ratio = check.ratio.value;
  const char *verdict = bench::between(check.ratio, 0.95, 1.05);
  std::printf("\n(MB/s, STREAM byte counting)\ntriad check, %d threads, timed alternately (medians): dram tier %.0f MB/s, "
              "plain OpenMP loop on malloc'd memory (THP) %.0f MB/s, ratio %.3f (spread %.3f-%.3f; within 5%% in every "
              "round: %s)\n", max_threads, check.tier_mbps, plain, ratio, check.ratio.low, check.ratio.high, verdict);

  bench::Json j;
  j.open().str("benchmark", "hetmem-bench-tiers").num("array_mib", static_cast<double>(mib)).num("reps", reps);
  j.open_array("tiers");
  for (const TierResult &r : results) {
    j.open().str("name", r.info.name).boolean("emulated", r.info.kind == HM_KIND_EMUL).num("latency_ns", r.latency_ns)
        .num("gather_ns", r.gather_ns);
    j.open_array("threads");
    for (size_t t = 0; t < r.mbps.size(); ++t) {
      j.open().num("threads", static_cast<double>(t + 1));
      for (int k = 0; k < kKernels; ++k) j.num(std::string(kNames[k]) + "_mbps", r.mbps[t][k]);
      j.close();
    }
    j.close().close();
  }
  j.close();
  j.num("dram_triad_check_mbps", check.tier_mbps).num("plain_triad_mbps", plain).num("dram_over_plain_triad", ratio);
  j.num("dram_over_plain_triad_low", check.ratio.low).num("dram_over_plain_triad_high", check.ratio.high);
  j.str("triad_check_verdict", verdict);
  j.str("fma_target", fma[0].target).open_array("fma_gflops");
  for (const bench::FmaPeak &f : fma) j.num("", f.gflops);
  j.close();
  j.close();
  if (!j.write(json_path)) std::fprintf(stderr, "hetmem-bench-tiers: cannot write %s\n", json_path.c_str());
  else if (json_path != "-") std::printf("results: %s\n", json_path.c_str());

  return 0;
}
