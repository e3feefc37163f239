// Memory kernels shared by the calibration (DRAM figures for the emulated tier) and the tier
// benchmark: STREAM-style loops and a dependent-load pointer chase. Each runs on one thread over
// the range it is given; callers parallelise.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hm::kernels {

double read_sum(const double *a, size_t n);                       // reads n doubles
void write_fill(double *a, size_t n, double v);                   // writes n doubles
void stream_copy(double *c, const double *a, size_t n);           // c = a
void stream_scale(double *b, const double *c, double s, size_t n);  // b = s*c
void stream_add(double *c, const double *a, const double *b, size_t n);  // c = a+b
void stream_triad(double *a, const double *b, const double *c, double s, size_t n);  // a = b+s*c
// Builds a random single cycle over `n` slots of `stride` bytes in `buf` (Sattolo's algorithm).
void chase_build(void *buf, size_t n, size_t stride, uint64_t seed);
// Follows `steps` dependent loads starting at buf; returns the final pointer (keeps it live).
void *chase_run(void *buf, size_t steps);

}  // namespace hm::kernels
