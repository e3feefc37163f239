// fma_peak.h: twelve independent chains per thread, more than a multiply-add's latency times the
// units that issue them on current cores (4 cycles x 2 units), so the loop runs at throughput.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "fma_peak.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "fma_peak.h"
#include "harness.h"

HWY_BEFORE_NAMESPACE();
namespace bench {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

constexpr int kChains = 12;

// Runs `iters` rounds of kChains multiply-adds; returns a value that depends on all of them.
double FmaChains(uint64_t iters) {
  const hn::ScalableTag<double> d;
  const auto m = hn::Set(d, 0.999999999), c = hn::Set(d, 1e-9);
  hn::Vec<decltype(d)> acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = hn::Set(d, 1.0 + i * 1e-3);
  for (uint64_t n = 0; n < iters; ++n)
    for (int i = 0; i < kChains; ++i) acc[i] = hn::MulAdd(acc[i], m, c);
  auto sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = hn::Add(sum, acc[i]);
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

double FlopsPerRound() { return 2.0 * kChains * hn::Lanes(hn::ScalableTag<double>()); }

const char *Target() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace bench {

HWY_EXPORT(FmaChains);
HWY_EXPORT(FlopsPerRound);
HWY_EXPORT(Target);

FmaPeak fma_peak(int threads, int reps, double seconds) {
  const double per_round = HWY_DYNAMIC_DISPATCH(FlopsPerRound)();
  // Rounds for about `seconds` on one thread, from a short calibration run.
  uint64_t iters = 1 << 20;
  const double t0 = now();
  double sum = HWY_DYNAMIC_DISPATCH(FmaChains)(iters);
  const double t = std::max(now() - t0, 1e-6);
  iters = static_cast<uint64_t>(static_cast<double>(iters) * seconds / t) + 1;
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const double start = now();
#pragma omp parallel num_threads(threads) reduction(+ : sum)
    sum += HWY_DYNAMIC_DISPATCH(FmaChains)(iters);
    times.push_back(now() - start);
  }
  volatile double sink = sum;  // the chains' results are used: the loops cannot be dropped
  (void)sink;
  return {per_round * static_cast<double>(iters) * threads / best(times) / 1e9, HWY_DYNAMIC_DISPATCH(Target)()};
}

}  // namespace bench
#endif
