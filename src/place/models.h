// The placement runtime's two performance models (Ren et al. (ICS'21) §4.2-4.3, docs/streaming.md): how many
// helper threads stage streamed tiles (Equations 3-9, with an extension for machines whose cores
// are all computing), and how far ahead a kernel prefetches field data into the cache
// (Equations 1-2, with alpha and beta fitted by least squares). Pure functions of their inputs, so
// that tests can give them synthetic machines with known answers.
#pragma once
#include <string>
#include <vector>

#include "base/options.h"

namespace hm::place {

// What the helper model knows about one phase's intervals (one batch of tiles each).
struct HelperInputs {
  double data_in = 0;                 // bytes copied into the migration space per interval
  double data_out = 0;                // bytes written back per interval (the dirty tiles)
  double t_comp = 0;                  // seconds of computing one interval with its data staged
  double bw_comp = 0;                 // bytes/s the computation itself moves meanwhile
  double bw_max = 0;                  // the machine's peak memory bandwidth, bytes/s (Eq. 7)
  int ranks = 1;                      // processes sharing bw_max (Eq. 6's N)
  int thrd_max = 1;                   // hardware threads of this process
  int thrd_comp = 1;                  // threads computing
  std::vector<double> bw_in, bw_out;  // copy bandwidth with h = 1, 2, ... helpers, bytes/s
};

struct HelperChoice {
  int helpers = 1;
  // Which constraint decided, in words: "overlap", "bandwidth", "threads", or "none met".
  std::string binding;
  double t_cp = 0;         // Eq. 4 at the chosen count
  double t_predicted = 0;  // the interval's predicted time (T'_comp)
  std::vector<double> t_cp_by_helpers, t_predicted_by_helpers;  // for every count tried
};

// Eq. 3-4: the copy time of an interval with h helpers (in and out in parallel).
double copy_time(const HelperInputs &in, int h);
// The predicted interval time with h helpers: max(T_comp, T_cp) while compute and helper threads
// have cores of their own (Eq. 5 and 8); when they do not (thrd_comp + h > thrd_max, the extension
// for machines with few cores), a core shared by a computing thread and helpers is the critical
// path of the interval: max(T_comp, T_cp, T_comp + ceil((thrd_comp + h - thrd_max) / thrd_max) T_cp).
double predicted_time(const HelperInputs &in, int h);
// WarpX-PM's procedure: the counts that meet the bandwidth constraint (Eq. 6), of those the ones
// that meet the overlap (Eq. 5) and thread (Eq. 8) constraints, the smallest of them; when no
// count meets all three, the count with the smallest predicted time among those that meet the
// bandwidth constraint (among all when none does; ties: the smaller count).
HelperChoice choose_helpers(const HelperInputs &in);

// Eq. 2's coefficients: prefetch_time = alpha + beta1 r lat_fast + beta2 (1 - r) lat_slow, with r
// the fraction of the field data on the fast tier. The three regressors are linearly dependent
// (1 = r + (1 - r)), so varying r alone cannot separate alpha from the betas: alpha, the issue and
// execution cost of a prefetch, is measured on its own (on data in the cache), and beta1 and beta2
// are fitted to what is left.
struct PrefetchFit {
  double alpha = 0, beta1 = 0, beta2 = 0;
  double residual = 0;  // root mean square of the fit's residuals, ns
  bool ok = false;      // false when the samples do not determine the coefficients
};
struct PrefetchSample {
  double fast_fraction;  // r
  double ns;             // measured time to prefetch one unit's field data
};
// Least squares for beta1 and beta2 given alpha (at least two distinct fractions).
PrefetchFit fit_prefetch(const std::vector<PrefetchSample> &samples, double alpha_ns, double lat_fast_ns,
                         double lat_slow_ns);
// Eq. 1: k = ceil(prefetch_time / time_per_unit), clamped to 1..kMaxPrefetchDistance (base/options.h,
// HM_PREFETCH_DISTANCE's range).
int prefetch_distance(const PrefetchFit &fit, double fast_fraction, double lat_fast_ns, double lat_slow_ns,
                      double ns_per_unit);

}  // namespace hm::place
