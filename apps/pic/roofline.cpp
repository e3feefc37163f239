#include "roofline.hpp"

namespace pic {

namespace {

// particle_kernel_simd.cpp, GatherPush, per particle (one lane):
//   positions in cells 3, fractions and their complements 6, the gather index 5 (2 multiply-adds
//   and an add), Ex Ey Ez 9 each and Bx By Bz 3 each (the interpolations as multiply-adds) 36,
//   new gamma, step and positions 16, wrap 6 (both branches computed), new positions in cells 3,
//   first cells 6, relative x 2, buffer offset 7, charges 3, relative y z 4, per stencil cell along
//   y and z (3 of them): 4 shapes 8, M and D 8, 4 cumulative shapes 8, Wy Wz scaled 4 = 84, and the
//   9 Tx products 36. Pusher: Boris 58, Vay 100 (PushBoris, PushVay).
constexpr double kGatherPushBoris = 3 + 6 + 5 + 36 + 58 + 16 + 6 + 3 + 6 + 2 + 7 + 3 + 4 + 84 + 36;  // 275
constexpr double kVayOverBoris = 100 - 58;
// Deposit, per particle, in vectors of 4 cells along x (the 4th holds a zero; its work counted),
//   per lane: shapes and cumulative shapes 8, Mx Dx Wx 5, the 3 Pc and 3 Qb 18, the 27 rows'
//   multiply-adds 54.
constexpr double kDeposit = 4 * (8 + 5 + 18 + 54);  // 340
// Particle arrays: x y z ux uy uz w read, x y z ux uy uz written.
constexpr double kParticleBytes = 7 * 8 + 6 * 8;
// Field solve (field_solve.cpp), per cell: two half B steps of 18 (per component 2 differences,
// 2 multiplies, 2 subtractions) and an E step of 24 (likewise, and the current term: 2 more);
// bytes: each half B step reads E and B and writes B (9 arrays), the E step reads B, E, J and
// writes E (12).
constexpr double kSolveFlopsPerCell = 18 + 18 + 24, kSolveBytesPerCell = (9 + 9 + 12) * 8;

}  // namespace

std::vector<PhaseWork> work_per_particle_step(const Params &p, double particles_per_cell) {
  const double tile_cells = static_cast<double>(p.tile[0]) * p.tile[1] * p.tile[2];
  const double per_tile = particles_per_cell * tile_cells;
  // The tile's fields with the layer above it, and its current buffer (2 cells around the tile).
  const double gathered = (p.tile[0] + 1.0) * (p.tile[1] + 1.0) * (p.tile[2] + 1.0) * 6 * 8;
  const double buffer = (p.tile[0] + 4.0) * (p.tile[1] + 4.0) * (p.tile[2] + 4.0) * 3 * 8;
  const double push = kGatherPushBoris + (p.pusher == "vay" ? kVayOverBoris : 0);
  return {
      // The buffer zeroed (written) and then updated in cache.
      {"gather+push+deposit", push + kDeposit, kParticleBytes + (gathered + buffer) / per_tile},
      // Every buffer value added to J; J zeroed, read and written once per cell (3 components).
      {"current reduction", buffer / 8 / per_tile, buffer / per_tile + 3 * 8 * 3 / particles_per_cell},
      {"field solve", kSolveFlopsPerCell / particles_per_cell, kSolveBytesPerCell / particles_per_cell},
      // Each particle's tile from its position (3 multiplies), positions read, destinations written
      // and read (4 bytes each).
      {"redistribution", 3, 3 * 8 + 2 * 4},
  };
}

}  // namespace pic
