// The work of a step per particle, phase by phase, counted from the kernels: floating-point
// operations and the bytes each phase must move to and from memory (what stays in cache across a
// tile's particles counted once per tile). With a phase's time and the machine's measured peaks
// (`hetmem tiers --bench`: multiply-add throughput and STREAM bandwidth) they place it on a
// roofline (`hetmem bench pic`, docs/pic.md).
#pragma once

#include <vector>

#include "pic.hpp"

namespace pic {

struct PhaseWork {
  const char *phase;  // the name hetmem-pic times it under
  double flops;       // per particle-step: add, subtract, multiply, divide, square root 1, multiply-add 2
                      // (min, max, abs, truncation, compare and select not counted)
  double bytes;       // per particle-step, to and from memory
};

// For the vectorized kernel (hetmem.kernel = simd), `particles_per_cell` on average.
std::vector<PhaseWork> work_per_particle_step(const Params &p, double particles_per_cell);

}  // namespace pic
