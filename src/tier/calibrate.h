// Memory kernels shared by the calibration (DRAM figures for the emulated tier) and the tier
// benchmark: STREAM-style loops and a dependent-load pointer chase. Each runs on one thread over
// the range it is given; callers parallelise.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hm::kernels {

// The loops are inline so that a caller compiled with -O3 vectorises them exactly as it would a
// loop of its own (the tier benchmark compares them with a plain OpenMP loop).
inline double read_sum(const double *__restrict a, size_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;  // four chains, so the adds overlap
  const size_t body = n & ~size_t{3};
  for (size_t i = 0; i < body; i += 4) {
    s0 += a[i];
    s1 += a[i + 1];
    s2 += a[i + 2];
    s3 += a[i + 3];
  }
  for (size_t i = body; i < n; ++i) s0 += a[i];
  return s0 + s1 + s2 + s3;
}
inline void write_fill(double *__restrict a, size_t n, double v) {
  for (size_t i = 0; i < n; ++i) a[i] = v;
}
inline void stream_copy(double *__restrict c, const double *__restrict a, size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i];
}
inline void stream_scale(double *__restrict b, const double *__restrict c, double s, size_t n) {
  for (size_t i = 0; i < n; ++i) b[i] = s * c[i];
}
inline void stream_add(double *__restrict c, const double *__restrict a, const double *__restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}
inline void stream_triad(double *__restrict a, const double *__restrict b, const double *__restrict c, double s,
                         size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}
// Sums `count` elements of a[0..n) at pseudo-random indices: independent loads (the next index
// comes from a cheap generator, not from the loaded value), so the memory system overlaps them.
// n must be a power of two. Time per load over the dependent-load latency gives the memory-level
// parallelism that the emulated tier's charge for scattered accesses uses.
inline double gather_sum(const double *__restrict a, size_t n, size_t count, uint64_t seed) {
  double s0 = 0, s1 = 0;
  uint64_t x = seed | 1;
  const uint64_t mask = n - 1;
  for (size_t i = 0; i + 1 < count; i += 2) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    s0 += a[(x >> 24) & mask];
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    s1 += a[(x >> 24) & mask];
  }
  return s0 + s1;
}
// Builds a random single cycle over `n` slots of `stride` bytes in `buf` (Sattolo's algorithm).
void chase_build(void *buf, size_t n, size_t stride, uint64_t seed);
// Follows `steps` dependent loads starting at buf; returns the final pointer (keeps it live).
void *chase_run(void *buf, size_t steps);

}  // namespace hm::kernels
