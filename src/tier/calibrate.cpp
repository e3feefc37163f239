#include "tier/calibrate.h"

#include <cstring>
#include <random>
#include <vector>

namespace hm::kernels {

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
