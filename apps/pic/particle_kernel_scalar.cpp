// The scalar particle kernel (particle_kernel.hpp): one particle at a time.
#include <algorithm>
#include <cmath>

#include "particle_kernel.hpp"

namespace pic {

namespace {

// Vay's pusher (Phys. Plasmas 15, 056701, 2008): correct E x B drift at any gamma, where Boris
// is off. u = gamma v; qmdt2 = q dt / 2m.
inline void push_vay(double &ux, double &uy, double &uz, double ex, double ey, double ez, double bx, double by,
                     double bz, double qmdt2) {
  const double c2 = kC * kC;
  const double g0 = std::sqrt(1 + (ux * ux + uy * uy + uz * uz) / c2);
  const double vx = ux / g0, vy = uy / g0, vz = uz / g0;
  // u' = u + (q dt / m) (E + v x B / 2)
  const double upx = ux + 2 * qmdt2 * ex + qmdt2 * (vy * bz - vz * by);
  const double upy = uy + 2 * qmdt2 * ey + qmdt2 * (vz * bx - vx * bz);
  const double upz = uz + 2 * qmdt2 * ez + qmdt2 * (vx * by - vy * bx);
  const double tx = qmdt2 * bx, ty = qmdt2 * by, tz = qmdt2 * bz;  // tau
  const double tau2 = tx * tx + ty * ty + tz * tz;
  const double ustar = (upx * tx + upy * ty + upz * tz) / kC;
  const double sigma = 1 + (upx * upx + upy * upy + upz * upz) / c2 - tau2;
  const double g1 = std::sqrt(0.5 * (sigma + std::sqrt(sigma * sigma + 4 * (tau2 + ustar * ustar))));
  const double t1x = tx / g1, t1y = ty / g1, t1z = tz / g1;
  const double s = 1 / (1 + t1x * t1x + t1y * t1y + t1z * t1z);
  const double ut = upx * t1x + upy * t1y + upz * t1z;
  ux = s * (upx + ut * t1x + (upy * t1z - upz * t1y));
  uy = s * (upy + ut * t1y + (upz * t1x - upx * t1z));
  uz = s * (upz + ut * t1z + (upx * t1y - upy * t1x));
}

// One particle: gather, push, deposit.
inline __attribute__((always_inline)) void particle(const PushConstants &K, const TileView &tile, double *jb, int ox,
                                                    int oy, int oz, size_t n) {
  const double idx = K.idx, idy = K.idy, idz = K.idz, qmdt2 = K.qmdt2;
  const double jfx = K.jfx, jfy = K.jfy, jfz = K.jfz;
  const long SY = K.sy, SZ = K.sz;
  const double *pex = K.ex, *pey = K.ey, *pez = K.ez, *pbx = K.bx, *pby = K.by, *pbz = K.bz;
  const double x0 = tile.x[n], y0 = tile.y[n], z0 = tile.z[n];
  // Gather (energy-conserving: shape 0 along a component's staggered direction, 1 across).
  // All components share one layout, so one base index and two strides serve them all.
  const double xn = x0 * idx, yn = y0 * idy, zn = z0 * idz;
  const int i = static_cast<int>(xn), j = static_cast<int>(yn), k = static_cast<int>(zn);  // x >= 0
  const double fx = xn - i, fy = yn - j, fz = zn - k;
  const double sx[2] = {1 - fx, fx}, sy[2] = {1 - fy, fy}, sz[2] = {1 - fz, fz};
  const long c0 = K.origin + k * SZ + j * SY + i;
  double ex = 0, ey = 0, ez = 0;
  for (int b = 0; b < 2; ++b)
    for (int a = 0; a < 2; ++a) {
      ex += sy[a] * sz[b] * pex[c0 + a * SY + b * SZ];
      ey += sx[a] * sz[b] * pey[c0 + a + b * SZ];
      ez += sx[a] * sy[b] * pez[c0 + a + b * SY];
    }
  const double bxv = sx[0] * pbx[c0] + sx[1] * pbx[c0 + 1];
  const double byv = sy[0] * pby[c0] + sy[1] * pby[c0 + SY];
  const double bzv = sz[0] * pbz[c0] + sz[1] * pbz[c0 + SZ];
  double ux = tile.ux[n], uy = tile.uy[n], uz = tile.uz[n];
  if (K.vay) {
    push_vay(ux, uy, uz, ex, ey, ez, bxv, byv, bzv, qmdt2);
  } else {
    // Boris (u = gamma v): half E kick, rotation, half E kick.
    ux += qmdt2 * ex, uy += qmdt2 * ey, uz += qmdt2 * ez;
    const double gm = std::sqrt(1 + (ux * ux + uy * uy + uz * uz) / (kC * kC));
    const double tbx = qmdt2 * bxv / gm, tby = qmdt2 * byv / gm, tbz = qmdt2 * bzv / gm;
    const double s = 2 / (1 + tbx * tbx + tby * tby + tbz * tbz);
    const double px = ux + (uy * tbz - uz * tby), py = uy + (uz * tbx - ux * tbz), pz = uz + (ux * tby - uy * tbx);
    ux += s * (py * tbz - pz * tby);
    uy += s * (pz * tbx - px * tbz);
    uz += s * (px * tby - py * tbx);
    ux += qmdt2 * ex, uy += qmdt2 * ey, uz += qmdt2 * ez;
  }
  const double inv_g = 1 / std::sqrt(1 + (ux * ux + uy * uy + uz * uz) / (kC * kC));
  const double x1 = x0 + K.dt * ux * inv_g, y1 = y0 + K.dt * uy * inv_g, z1 = z0 + K.dt * uz * inv_g;
  tile.ux[n] = ux, tile.uy[n] = uy, tile.uz[n] = uz;
  // Esirkepov deposition, shape 1, into the tile buffer.
  const double wq = tile.w[n];
  double S0[3][4] = {}, DS[3][4] = {};
  int base[3];
  const double old_pos[3] = {xn, yn, zn}, new_pos[3] = {x1 * idx, y1 * idy, z1 * idz};
  for (int d = 0; d < 3; ++d) {
    // Old positions are inside the box (>= 0); new ones move less than a cell (> -1), so
    // truncation of np + 1 is floor without the call.
    const int i0 = static_cast<int>(old_pos[d]), i1 = static_cast<int>(new_pos[d] + 1.0) - 1;
    base[d] = std::min(i0, i1);
    const double f0 = old_pos[d] - i0, f1 = new_pos[d] - i1;
    double S1[4] = {};
    S0[d][i0 - base[d]] += 1 - f0;
    S0[d][i0 - base[d] + 1] += f0;
    S1[i1 - base[d]] += 1 - f1;
    S1[i1 - base[d] + 1] += f1;
    for (int a = 0; a < 4; ++a) DS[d][a] = S1[a] - S0[d][a];
  }
  const int lx = base[0] - ox, ly = base[1] - oy, lz = base[2] - oz;
  double *bjx = jb, *bjy = jb + K.buf_comp, *bjz = jb + 2 * K.buf_comp;
  // Esirkepov: W_x(a,b,c) = DS_x(a) T_x(b,c) with T_x from the other two directions (and
  // cyclically); J accumulates -q w / (dt dA) W along its own direction.
  // S0 S0' + (DS S0' + S0 DS')/2 + DS DS'/3 = M M' + DS DS'/12, with M = S0 + DS/2 the shape
  // at mid-step: two products per weight instead of seven operations.
  constexpr double kInvSqrt12 = 0.28867513459481288225;
  double M[3][3], D[3][3];
  for (int d = 0; d < 3; ++d)
    for (int a = 0; a < 3; ++a) M[d][a] = S0[d][a] + 0.5 * DS[d][a], D[d][a] = DS[d][a] * kInvSqrt12;
  double tx[3][3], ty[3][3], tz[3][3];
  for (int c = 0; c < 3; ++c)
    for (int b = 0; b < 3; ++b) {
      tx[c][b] = M[1][b] * M[2][c] + D[1][b] * D[2][c];
      ty[c][b] = M[0][b] * M[2][c] + D[0][b] * D[2][c];
      tz[c][b] = M[0][b] * M[1][c] + D[0][b] * D[1][c];
    }
  const double qx = -jfx * wq, qy = -jfy * wq, qz = -jfz * wq;
  for (int c = 0; c < 3; ++c)
    for (int b = 0; b < 3; ++b) {
      double *row = bjx + (lz + c) * K.buf_plane + (ly + b) * K.buf_x + lx;
      const double t = qx * tx[c][b];
      double acc = 0;
      for (int a = 0; a < 3; ++a) row[a] += (acc += DS[0][a] * t);
    }
  for (int c = 0; c < 3; ++c)
    for (int a = 0; a < 3; ++a) {
      double *col = bjy + (lz + c) * K.buf_plane + ly * K.buf_x + lx + a;
      const double t = qy * ty[c][a];
      double acc = 0;
      for (int b = 0; b < 3; ++b) col[b * K.buf_x] += (acc += DS[1][b] * t);
    }
  for (int b = 0; b < 3; ++b)
    for (int a = 0; a < 3; ++a) {
      double *col = bjz + lz * K.buf_plane + (ly + b) * K.buf_x + lx + a;
      const double t = qz * tz[b][a];
      double acc = 0;
      for (int c = 0; c < 3; ++c) col[c * K.buf_plane] += (acc += DS[2][c] * t);
    }
  // Periodic positions.
  tile.x[n] = x1 < 0 ? x1 + K.lx : (x1 >= K.lx ? x1 - K.lx : x1);
  tile.y[n] = y1 < 0 ? y1 + K.ly : (y1 >= K.ly ? y1 - K.ly : y1);
  tile.z[n] = z1 < 0 ? z1 + K.lz : (z1 >= K.lz ? z1 - K.lz : z1);
}

}  // namespace

// Built twice: for x86-64-v3 (AVX2, FMA) and for any x86-64; the loader picks one per machine.
__attribute__((target_clones("arch=x86-64-v3", "default"))) void push_deposit_scalar(const PushConstants &K,
                                                                                    const TileWork &w) {
  const TileView &tile = w.tile;
  const int ox = w.origin[0], oy = w.origin[1], oz = w.origin[2];
  // Field data for particle n + k prefetched while particle n is computed (two loops, so that the
  // one without prefetch carries no test per particle).
  const size_t count = tile.size(), k_ahead = K.prefetch_ahead, ahead = k_ahead < count ? count - k_ahead : 0;
  if (k_ahead) {
    for (size_t n = 0; n < ahead; ++n) {
      prefetch_gather(K, tile, n + k_ahead);
      particle(K, tile, w.jb, ox, oy, oz, n);
    }
    for (size_t n = ahead; n < count; ++n) particle(K, tile, w.jb, ox, oy, oz, n);
  } else {
    for (size_t n = 0; n < count; ++n) particle(K, tile, w.jb, ox, oy, oz, n);
  }
}

}  // namespace pic
