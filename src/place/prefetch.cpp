// Cache prefetch of field data (Ren et al. (ICS'21) §4.2, docs/streaming.md#cache-prefetch): Equation 2's
// alpha, beta1 and beta2 fitted once per process on a microbenchmark that spreads field-like data
// across the fast and capacity tiers at several ratios and prefetches it one unit at a time;
// Equation 1's distance per phase from the kernel's measured time per unit.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/options.h"
#include "place/mechanisms.h"
#include "place/models.h"
#include "prim/prim.h"

using namespace hm;
using namespace hm::place;

namespace {

struct PrefetchState {
  std::mutex mutex;
  bool fitted = false;
  PrefetchFit fit;
  double lat_fast = 0, lat_slow = 0;
  std::map<std::string, double> ns_per_unit;  // the last figure each phase gave
};

PrefetchState &state() {
  static PrefetchState *s = new PrefetchState();
  return *s;
}

double tier_latency(int tier) {
  hm_tier_info_t info;
  if (tier >= 0 && hm_tier_info(tier, &info) == HM_OK && info.latency_ns > 0) return info.latency_ns;
  hm_calibration_t cal;
  return hm_calibration_get(&cal) == HM_OK ? cal.latency_ns : 100;
}

// One unit's field data (the 48 bytes a particle gathers from six components, one line) chased
// through a random cycle of lines, a share `r` of them on the fast tier, `passes` times round:
// nanoseconds per unit of prefetch-then-use, the time the prefetch of one unit takes.
double prefetch_ns(char *fast, char *slow, size_t lines, double r, std::mt19937_64 &rng, size_t passes = 1) {
  constexpr size_t kLine = 64;
  const size_t on_fast = static_cast<size_t>(r * static_cast<double>(lines));
  std::vector<char *> line(lines);
  for (size_t i = 0; i < lines; ++i) line[i] = i < on_fast ? fast + i * kLine : slow + (i - on_fast) * kLine;
  std::shuffle(line.begin(), line.end(), rng);
  for (size_t i = 0; i < lines; ++i) *reinterpret_cast<char **>(line[i]) = line[(i + 1) % lines];
  hm_access(fast, on_fast * kLine, HM_ACCESS_WRITE);
  hm_access(slow, (lines - on_fast) * kLine, HM_ACCESS_WRITE);
  char *p = line[0];
  const size_t steps = lines * passes;
  const uint64_t t0 = prim::now_ns();
  for (size_t i = 0; i < steps; ++i) {
    __builtin_prefetch(*reinterpret_cast<char **>(p), 0, 3);
    p = *reinterpret_cast<char **>(p);
  }
  // What the chase did to the capacity tier's lines, declared so that an emulated tier charges it
  // (one dependent access per line there) within the time measured.
  hm_access_scattered(slow, lines - on_fast, kLine, HM_ACCESS_READ | HM_ACCESS_DEPENDENT);
  const double ns = static_cast<double>(prim::now_ns() - t0) / static_cast<double>(steps);
  return p ? ns : 0;
}

void fit_once(PrefetchState &s) {
  if (s.fitted) return;
  s.fitted = true;
  s.lat_fast = tier_latency(fast_tier());
  s.lat_slow = tier_latency(capacity_tier());
  // 16 MiB per side, beyond the last-level cache; 4 MiB when the fast budget has no such room.
  // Strictly on their tiers: a fallback would put the "fast" lines on the capacity tier. Without
  // any room the fit stays empty and nothing is prefetched.
  const int slow_tier = capacity_tier() >= 0 ? capacity_tier() : fast_tier();
  size_t lines = size_t{1} << 18;
  char *fast = nullptr, *slow = nullptr;
  for (; lines >= (size_t{1} << 16); lines /= 4) {
    hm_free(fast);
    hm_free(slow);
    fast = static_cast<char *>(hm_tier_alloc(fast_tier(), lines * 64, 4096, HM_STRICT));
    slow = static_cast<char *>(hm_tier_alloc(slow_tier, lines * 64, 4096, HM_STRICT));
    if (fast && slow) break;
  }
  if (fast && slow) {
    std::mt19937_64 rng(7);
    // alpha: the same chase over lines that stay in the first-level cache (256 lines, 16 KiB).
    const double alpha = prefetch_ns(fast, fast + 128 * 64, 256, 0.5, rng, 400);
    std::vector<PrefetchSample> samples;
    for (double r : {0.0, 0.5, 1.0}) samples.push_back({r, prefetch_ns(fast, slow, lines, r, rng)});
    s.fit = fit_prefetch(samples, alpha, s.lat_fast, s.lat_slow);
    log(2, "prefetch model: alpha %.1f ns, beta1 %.3f, beta2 %.3f (latencies %.0f / %.0f ns, rms %.1f ns)", s.fit.alpha,
        s.fit.beta1, s.fit.beta2, s.lat_fast, s.lat_slow, s.fit.residual);
  }
  hm_free(fast);
  hm_free(slow);
}

// The share of the hot classes' live bytes on the fast tier (the fields, after static placement).
double hot_fast_fraction() {
  const int fast = fast_tier();
  double on_fast = 0, total = 0;
  for (int c = 0; c < hm_class_count(); ++c) {
    hm_class_info_t info;
    if (hm_class_info(c, &info) != HM_OK || info.kind != HM_CLASS_HOT) continue;
    for (int t = 0; t < 16; ++t) {
      total += static_cast<double>(info.live_bytes_on_tier[t]);
      if (t == fast) on_fast += static_cast<double>(info.live_bytes_on_tier[t]);
    }
  }
  return total > 0 ? on_fast / total : 1;
}

}  // namespace

namespace hm::place {
namespace {

class Prefetch final : public Mechanism {
 public:
  const char *name() const override { return "prefetch"; }
  void reset() override {
    PrefetchState &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.fitted = false;
    s.fit = PrefetchFit{};
    s.ns_per_unit.clear();
  }
  // What the model knows now: its fit, the latencies, the share of hot data on the fast tier, and
  // per phase the unit time last measured and the distance Eq. 1 gives.
  void summarise(nlohmann::json &placement) const override {
    PrefetchState &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.fitted || !s.fit.ok) return;
    const double fast_fraction = hot_fast_fraction();
    nlohmann::json phases = nlohmann::json::array();
    for (const auto &[phase, ns] : s.ns_per_unit)
      phases.push_back({{"phase", phase}, {"ns_per_unit", ns},
                        {"k", prefetch_distance(s.fit, fast_fraction, s.lat_fast, s.lat_slow, ns)}});
    placement["prefetch"] = {{"alpha_ns", s.fit.alpha}, {"beta1", s.fit.beta1}, {"beta2", s.fit.beta2},
                             {"residual_ns", s.fit.residual}, {"lat_fast_ns", s.lat_fast},
                             {"lat_slow_ns", s.lat_slow}, {"fast_fraction", fast_fraction}, {"phases", phases}};
  }
};

}  // namespace

Mechanism &prefetch_mechanism() { return single<Prefetch>(); }

}  // namespace hm::place

extern "C" int hm_prefetch_distance(const char *phase, double ns_per_unit) {
  // The model runs under the prefetching policies whatever decides in the end, so that its choice
  // is reported beside the one HM_PREFETCH_DISTANCE forces (Figure 11's sweeps).
  int model = 0;
  const bool modelled = prefetch_mechanism().active();
  const double on_fast = modelled ? hot_fast_fraction() : 1;
  if (modelled) {
    PrefetchState &s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    fit_once(s);
    const std::string key = phase ? phase : "";
    if (ns_per_unit > 0) s.ns_per_unit[key] = ns_per_unit;
    auto it = s.ns_per_unit.find(key);
    // Ren et al. (ICS'21) §4.1: prefetch is for field data static placement could not keep on the fast tier;
    // before a first measurement of the unit's time there is no distance.
    if (it != s.ns_per_unit.end() && on_fast < 0.999 && s.fit.ok)
      model = prefetch_distance(s.fit, on_fast, s.lat_fast, s.lat_slow, it->second);
  }
  const std::string &forced = option_text(Option::kPrefetchDistance);
  if (!forced.empty()) {
    long k = 0;
    if (option_int(Option::kPrefetchDistance, &k) != HM_OK || k < 0 || k > kMaxPrefetchDistance) {
      static std::atomic<bool> said{false};
      if (!said.exchange(true))
        log(0, "HM_PREFETCH_DISTANCE='%s': the distance must be an integer from 0 to %d (0: no prefetch); prefetch "
            "is off", forced.c_str(), kMaxPrefetchDistance);
      return 0;
    }
    return static_cast<int>(k);
  }
  return model;
}
