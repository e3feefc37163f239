#include "tier/calibrate.h"

#include <cstring>
#include <random>
#include <vector>

namespace hm::kernels {

double read_sum(const double *a, size_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i];
    s1 += a[i + 1];
    s2 += a[i + 2];
    s3 += a[i + 3];
  }
  for (; i < n; ++i) s0 += a[i];
  return s0 + s1 + s2 + s3;
}

void write_fill(double *a, size_t n, double v) {
  for (size_t i = 0; i < n; ++i) a[i] = v;
}

void stream_copy(double *c, const double *a, size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i];
}

void stream_scale(double *b, const double *c, double s, size_t n) {
  for (size_t i = 0; i < n; ++i) b[i] = s * c[i];
}

void stream_add(double *c, const double *a, const double *b, size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

void stream_triad(double *a, const double *b, const double *c, double s, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

void chase_build(void *buf, size_t n, size_t stride, uint64_t seed) {
  std::vector<uint32_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
  std::mt19937_64 rng(seed);
  for (size_t i = n - 1; i > 0; --i) {  // Sattolo: one cycle through every slot
    std::uniform_int_distribution<size_t> pick(0, i - 1);
    std::swap(order[i], order[pick(rng)]);
  }
  char *base = static_cast<char *>(buf);
  for (size_t i = 0; i < n; ++i) {
    void *next = base + static_cast<size_t>(order[i]) * stride;
    std::memcpy(base + i * stride, &next, sizeof next);
  }
}

void *chase_run(void *buf, size_t steps) {
  void *p = buf;
  for (size_t i = 0; i < steps; ++i) p = *static_cast<void **>(p);
  return p;
}

}  // namespace hm::kernels
