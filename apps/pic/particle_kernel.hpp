// The particle kernel of one tile: gather E and B at each particle (energy-conserving, shape 1),
// push it (Boris or Vay), deposit its current (Esirkepov, order 1) into the tile's buffer. Two
// implementations of the same arithmetic: a scalar one, a particle at a time, and a vectorized one
// (Google Highway, chosen at run time for the machine: AVX-512, AVX2, SSE4, NEON, ...), selected by
// `hetmem.kernel = scalar|simd`. Each is deterministic: the same particles in the same order give
// the same bits on one machine for any thread count. The two differ in the last bits (the order of
// the sums in the gather and the deposition), not in the physics (tests/pic: both kernels agree to
// 1e-12 relative).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>

#include "pic.hpp"

namespace pic {

// What every tile of one species shares in a step.
struct PushConstants {
  const double *ex, *ey, *ez, *bx, *by, *bz;  // the field components (one layout, guards filled)
  long sy, sz;                               // their strides along y and z (along x: 1)
  long origin;                               // index of global cell (0, 0, 0)
  double idx, idy, idz;                      // 1 / cell size
  double lx, ly, lz;                         // the periodic box (m)
  double dt;                                 // s
  double qmdt2;                              // q dt / 2m
  double jfx, jfy, jfz;                      // q / (dt dA) along x, y, z: current per unit weight
  bool vay;                                  // Vay's pusher instead of Boris's
  long buf_x, buf_plane, buf_comp;           // the tile buffer's row, plane and component strides
  size_t prefetch_ahead;                     // particles between a prefetch and its use (0: none)
};

// One tile's particles and where its current goes: `jb` holds three components of buf_comp values
// each, its cell (0, 0, 0) at global cell `origin`. The buffer has at least one value more than
// three components: the vectorized deposition adds zero one past a row's last cell.
struct TileWork {
  TileView tile;
  double *jb;
  int origin[3];
};

// Prefetches the field values particle `n` of `tile` will gather (its cell and the far corner of
// the cells it reads, in each component): issued `prefetch_ahead` particles before its turn.
inline void prefetch_gather(const PushConstants &k, const TileView &tile, size_t n) {
  const long c = k.origin + static_cast<long>(tile.z[n] * k.idz) * k.sz + static_cast<long>(tile.y[n] * k.idy) * k.sy +
                 static_cast<long>(tile.x[n] * k.idx);
  for (const double *f : {k.ex, k.ey, k.ez, k.bx, k.by, k.bz}) {
    __builtin_prefetch(f + c);
    __builtin_prefetch(f + c + k.sz + k.sy);
  }
}

void push_deposit_scalar(const PushConstants &k, const TileWork &w);
void push_deposit_simd(const PushConstants &k, const TileWork &w);
// The instruction set the vectorized kernel runs with on this machine ("AVX3", "AVX2", ...).
const char *simd_target();
// Keeps the vectorized kernel at `name` (a Highway target in lower case: avx2, sse4, avx3, ...) or
// below, so that a narrower instruction set's kernel can be measured on a wider CPU. False with
// `error` set when the kernel is not built for it or the CPU cannot run it.
bool limit_simd_target(const std::string &name, std::string *error);

}  // namespace pic
