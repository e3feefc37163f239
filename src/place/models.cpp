#include "place/models.h"

#include <algorithm>
#include <cmath>

namespace hm::place {

namespace {

double at(const std::vector<double> &table, int h) {
  if (table.empty()) return 0;
  return table[static_cast<size_t>(std::clamp(h, 1, static_cast<int>(table.size())) - 1)];
}

}  // namespace

double copy_time(const HelperInputs &in, int h) {
  const double bi = at(in.bw_in, h), bo = at(in.bw_out, h);
  const double t_in = in.data_in > 0 ? (bi > 0 ? in.data_in / bi : INFINITY) : 0;
  const double t_out = in.data_out > 0 ? (bo > 0 ? in.data_out / bo : INFINITY) : 0;
  return std::max(t_in, t_out);
}

double predicted_time(const HelperInputs &in, int h) {
  const double t_cp = copy_time(in, h);
  double t = std::max(in.t_comp, t_cp);
  const int without_core = in.thrd_comp + h - in.thrd_max;  // helpers that share a core
  if (without_core > 0 && in.thrd_max > 0) {
    // The computing threads wait for each other at the end of an interval, so a core that runs
    // one of them and ceil(without_core / thrd_max) helpers sets the interval's time.
    const int per_core = (without_core + in.thrd_max - 1) / in.thrd_max;
    t = std::max(t, in.t_comp + per_core * t_cp);
  }
  return t;
}

HelperChoice choose_helpers(const HelperInputs &in) {
  HelperChoice c;
  const int most = std::max<int>(1, static_cast<int>(std::min(in.bw_in.size(), in.bw_out.size())));
  const double share = in.bw_max / std::max(1, in.ranks);
  int best_any = 1, best_bw = 0, first_ok = 0;
  bool any_bw = false, any_overlap = false, any_threads = false;
  for (int h = 1; h <= most; ++h) {
    const double t_cp = copy_time(in, h), t = predicted_time(in, h);
    c.t_cp_by_helpers.push_back(t_cp);
    c.t_predicted_by_helpers.push_back(t);
    // Eq. 6: the computation's bandwidth and the copies' together within this process's share.
    const bool bandwidth = in.bw_max <= 0 || in.bw_comp + at(in.bw_in, h) + at(in.bw_out, h) <= share;
    const bool overlap = t_cp <= in.t_comp;                   // Eq. 5
    const bool threads = in.thrd_comp + h <= in.thrd_max;      // Eq. 8
    any_bw |= bandwidth;
    any_overlap |= overlap;
    any_threads |= threads;
    if (bandwidth && overlap && threads && !first_ok) first_ok = h;
    if (t < c.t_predicted_by_helpers[static_cast<size_t>(best_any - 1)] - 1e-12) best_any = h;
    if (bandwidth && (!best_bw || t < c.t_predicted_by_helpers[static_cast<size_t>(best_bw - 1)] - 1e-12)) best_bw = h;
  }
  if (first_ok) {
    c.helpers = first_ok;
    // The constraint that rules out the count below the chosen one (the smallest count otherwise).
    if (first_ok == 1) c.binding = "none (one helper meets every constraint)";
    else c.binding = "overlap";
  } else {
    // Bandwidth first, as WarpX-PM selects: the fastest predicted count among those within it.
    c.helpers = best_bw ? best_bw : best_any;
    c.binding = !any_bw ? "bandwidth" : !any_threads ? "threads" : !any_overlap ? "overlap" : "none met";
    c.binding += " (no count meets every constraint: the smallest predicted time)";
  }
  c.t_cp = c.t_cp_by_helpers[static_cast<size_t>(c.helpers - 1)];
  c.t_predicted = c.t_predicted_by_helpers[static_cast<size_t>(c.helpers - 1)];
  return c;
}

PrefetchFit fit_prefetch(const std::vector<PrefetchSample> &samples, double alpha_ns, double lat_fast_ns,
                         double lat_slow_ns) {
  PrefetchFit f;
  f.alpha = alpha_ns;
  // y - alpha = beta1 u + beta2 v with u = r lat_fast, v = (1 - r) lat_slow: 2x2 normal equations.
  double uu = 0, uv = 0, vv = 0, uy = 0, vy = 0;
  std::vector<double> seen;
  for (const PrefetchSample &s : samples) {
    const double u = s.fast_fraction * lat_fast_ns, v = (1 - s.fast_fraction) * lat_slow_ns, y = s.ns - alpha_ns;
    uu += u * u, uv += u * v, vv += v * v, uy += u * y, vy += v * y;
    if (std::none_of(seen.begin(), seen.end(), [&](double r) { return std::fabs(r - s.fast_fraction) < 1e-9; }))
      seen.push_back(s.fast_fraction);
  }
  const double det = uu * vv - uv * uv;
  if (seen.size() < 2 || lat_fast_ns <= 0 || lat_slow_ns <= 0 || std::fabs(det) < 1e-12 * (uu * vv + 1)) return f;
  f.beta1 = (uy * vv - vy * uv) / det;
  f.beta2 = (vy * uu - uy * uv) / det;
  double sq = 0;
  for (const PrefetchSample &s : samples) {
    const double pred = alpha_ns + f.beta1 * s.fast_fraction * lat_fast_ns + f.beta2 * (1 - s.fast_fraction) * lat_slow_ns;
    sq += (pred - s.ns) * (pred - s.ns);
  }
  f.residual = std::sqrt(sq / static_cast<double>(samples.size()));
  f.ok = true;
  return f;
}

int prefetch_distance(const PrefetchFit &fit, double fast_fraction, double lat_fast_ns, double lat_slow_ns,
                      double ns_per_unit) {
  if (ns_per_unit <= 0) return kMaxPrefetchDistance;
  const double t = fit.alpha + fit.beta1 * fast_fraction * lat_fast_ns + fit.beta2 * (1 - fast_fraction) * lat_slow_ns;
  const double k = std::ceil(t / ns_per_unit);
  return static_cast<int>(std::clamp(k, 1.0, static_cast<double>(kMaxPrefetchDistance)));
}

}  // namespace hm::place
