// The vectorized particle kernel (particle_kernel.hpp), written with Google Highway: compiled for
// every instruction set Highway targets on this architecture, the best the machine has chosen at
// run time.
//
// A tile is processed in chunks of kChunk particles, each in two passes (the organisation of
// PICSAR's vectorized deposition, Vincenti et al., Comput. Phys. Commun. 210, 2017: compute the
// weights across particles, then scatter them a particle at a time):
//  1. across particles, a vector of them at a time: gather (hardware gathers from the six
//     components, one index vector for all), push, new positions, and of the deposition
//     everything that does not depend on the cell: the y and z shape products and prefix sums,
//     the x relative positions, the buffer offset;
//  2. a particle at a time, across the cells of a row: the x shape factors as a vector of four
//     cells (the 3-cell stencil and one zero), and the 27 rows of Jx, Jy, Jz each one vector
//     multiply-add into the tile buffer.
// Esirkepov's weights W_x(a,b,c) = DS_x(a) T_x(b,c) are summed along their own direction as
// differences of cumulative shapes, C1(a) - C0(a), with C(a) = clamp(a + 1 - r, 0, 1) for a particle
// at r cells from the deposit's first cell: the same weights as the scalar kernel's running sums,
// exactly zero outside the stencil.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "particle_kernel_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cctype>
#include <string>

#include "particle_kernel.hpp"

HWY_BEFORE_NAMESPACE();
namespace pic {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

constexpr size_t kChunk = 32;  // particles per two passes: their staged values stay in L1
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(double);
static_assert(kChunk % kMaxLanes == 0, "a chunk is whole vectors");
constexpr double kInvSqrt12 = 0.28867513459481288225;

// What the first pass leaves for the second, per particle of a chunk.
struct Staged {
  alignas(64) double rx0[kChunk];  // old x position, in cells from the deposit's first cell
  alignas(64) double rx1[kChunk];  // new x position, likewise
  alignas(64) double off[kChunk];  // the deposit's first cell in the tile buffer (an index)
  alignas(64) double tx[9][kChunk];  // qx (M_y(b) M_z(c) + D_y(b) D_z(c)), at [3c + b]
  alignas(64) double ty[3][kChunk];  // qy W_y(b)
  alignas(64) double tz[3][kChunk];  // qz W_z(c)
  alignas(64) double my[3][kChunk], dy[3][kChunk], mz[3][kChunk], dz[3][kChunk];
};

// One vector of particles' arrays (the tile's, or a padded copy of its last few).
struct Lanes {
  double *x, *y, *z, *ux, *uy, *uz;
  const double *w;
};

// Vay's pusher (Phys. Plasmas 15, 056701, 2008), as the scalar kernel's push_vay.
template <class D, class V>
HWY_INLINE void PushVay(D d, V &ux, V &uy, V &uz, V ex, V ey, V ez, V bx, V by, V bz, V q, V inv_c2, V inv_c) {
  const V one = hn::Set(d, 1.0), two = hn::Set(d, 2.0), half = hn::Set(d, 0.5), four = hn::Set(d, 4.0);
  const V g0 = hn::Sqrt(hn::MulAdd(hn::MulAdd(ux, ux, hn::MulAdd(uy, uy, hn::Mul(uz, uz))), inv_c2, one));
  const V vx = hn::Div(ux, g0), vy = hn::Div(uy, g0), vz = hn::Div(uz, g0);
  const V q2 = hn::Mul(two, q);
  const V upx = hn::MulAdd(q, hn::Sub(hn::Mul(vy, bz), hn::Mul(vz, by)), hn::MulAdd(q2, ex, ux));
  const V upy = hn::MulAdd(q, hn::Sub(hn::Mul(vz, bx), hn::Mul(vx, bz)), hn::MulAdd(q2, ey, uy));
  const V upz = hn::MulAdd(q, hn::Sub(hn::Mul(vx, by), hn::Mul(vy, bx)), hn::MulAdd(q2, ez, uz));
  const V tx = hn::Mul(q, bx), ty = hn::Mul(q, by), tz = hn::Mul(q, bz);
  const V tau2 = hn::MulAdd(tx, tx, hn::MulAdd(ty, ty, hn::Mul(tz, tz)));
  const V ustar = hn::Mul(hn::MulAdd(upx, tx, hn::MulAdd(upy, ty, hn::Mul(upz, tz))), inv_c);
  const V up2 = hn::MulAdd(upx, upx, hn::MulAdd(upy, upy, hn::Mul(upz, upz)));
  const V sigma = hn::Sub(hn::MulAdd(up2, inv_c2, one), tau2);
  const V root = hn::Sqrt(hn::MulAdd(sigma, sigma, hn::Mul(four, hn::MulAdd(ustar, ustar, tau2))));
  const V g1 = hn::Sqrt(hn::Mul(half, hn::Add(sigma, root)));
  const V t1x = hn::Div(tx, g1), t1y = hn::Div(ty, g1), t1z = hn::Div(tz, g1);
  const V s = hn::Div(one, hn::MulAdd(t1x, t1x, hn::MulAdd(t1y, t1y, hn::MulAdd(t1z, t1z, one))));
  const V ut = hn::MulAdd(upx, t1x, hn::MulAdd(upy, t1y, hn::Mul(upz, t1z)));
  ux = hn::Mul(s, hn::Add(hn::MulAdd(ut, t1x, upx), hn::Sub(hn::Mul(upy, t1z), hn::Mul(upz, t1y))));
  uy = hn::Mul(s, hn::Add(hn::MulAdd(ut, t1y, upy), hn::Sub(hn::Mul(upz, t1x), hn::Mul(upx, t1z))));
  uz = hn::Mul(s, hn::Add(hn::MulAdd(ut, t1z, upz), hn::Sub(hn::Mul(upx, t1y), hn::Mul(upy, t1x))));
}

// Boris's pusher (u = gamma v): half E kick, rotation, half E kick.
template <class D, class V>
HWY_INLINE void PushBoris(D d, V &ux, V &uy, V &uz, V ex, V ey, V ez, V bx, V by, V bz, V q, V inv_c2) {
  const V one = hn::Set(d, 1.0), two = hn::Set(d, 2.0);
  ux = hn::MulAdd(q, ex, ux), uy = hn::MulAdd(q, ey, uy), uz = hn::MulAdd(q, ez, uz);
  const V gm = hn::Sqrt(hn::MulAdd(hn::MulAdd(ux, ux, hn::MulAdd(uy, uy, hn::Mul(uz, uz))), inv_c2, one));
  const V qg = hn::Div(q, gm);
  const V tbx = hn::Mul(qg, bx), tby = hn::Mul(qg, by), tbz = hn::Mul(qg, bz);
  const V s = hn::Div(two, hn::MulAdd(tbx, tbx, hn::MulAdd(tby, tby, hn::MulAdd(tbz, tbz, one))));
  const V px = hn::Add(ux, hn::Sub(hn::Mul(uy, tbz), hn::Mul(uz, tby)));
  const V py = hn::Add(uy, hn::Sub(hn::Mul(uz, tbx), hn::Mul(ux, tbz)));
  const V pz = hn::Add(uz, hn::Sub(hn::Mul(ux, tby), hn::Mul(uy, tbx)));
  ux = hn::MulAdd(s, hn::Sub(hn::Mul(py, tbz), hn::Mul(pz, tby)), ux);
  uy = hn::MulAdd(s, hn::Sub(hn::Mul(pz, tbx), hn::Mul(px, tbz)), uy);
  uz = hn::MulAdd(s, hn::Sub(hn::Mul(px, tby), hn::Mul(py, tbx)), uz);
  ux = hn::MulAdd(q, ex, ux), uy = hn::MulAdd(q, ey, uy), uz = hn::MulAdd(q, ez, uz);
}

// Shape factor 1 of a particle at r (in cells) at stencil cell a: the hat max(0, 1 - |a - r|).
template <class D, class V>
HWY_INLINE V Shape(D d, V r, V a) {
  return hn::Max(hn::Zero(d), hn::Sub(hn::Set(d, 1.0), hn::Abs(hn::Sub(a, r))));
}

// The shape summed over cells 0..a: clamp(a + 1 - r, 0, 1), exactly 0 below the stencil and 1 above.
template <class D, class V>
HWY_INLINE V Cumulative(D d, V r, V a) {
  const V one = hn::Set(d, 1.0);
  return hn::Min(one, hn::Max(hn::Zero(d), hn::Sub(hn::Add(a, one), r)));
}

// Periodic wrap of a position that moved less than a box length.
template <class D, class V>
HWY_INLINE V Wrap(D d, V x, double length) {
  const V l = hn::Set(d, length), zero = hn::Zero(d);
  return hn::IfThenElse(hn::Lt(x, zero), hn::Add(x, l), hn::IfThenElse(hn::Ge(x, l), hn::Sub(x, l), x));
}

// The first pass for one vector of particles, staged at slot `s` of the chunk.
template <class D>
HWY_INLINE void GatherPush(D d, const PushConstants &K, const int origin[3], const Lanes &p, Staged &st, size_t s) {
  using V = hn::Vec<D>;
  const hn::RebindToSigned<D> di;
  const V one = hn::Set(d, 1.0), half = hn::Set(d, 0.5), k12 = hn::Set(d, kInvSqrt12);
  const V x0 = hn::LoadU(d, p.x), y0 = hn::LoadU(d, p.y), z0 = hn::LoadU(d, p.z);
  const V xn = hn::Mul(x0, hn::Set(d, K.idx)), yn = hn::Mul(y0, hn::Set(d, K.idy)), zn = hn::Mul(z0, hn::Set(d, K.idz));
  const V ci = hn::Trunc(xn), cj = hn::Trunc(yn), ck = hn::Trunc(zn);  // positions are >= 0
  const V fx = hn::Sub(xn, ci), fy = hn::Sub(yn, cj), fz = hn::Sub(zn, ck);
  const V gx = hn::Sub(one, fx), gy = hn::Sub(one, fy), gz = hn::Sub(one, fz);
  // One index for all six components (they share a layout), exact in double below 2^53.
  const auto c0 = hn::ConvertTo(
      di, hn::MulAdd(ck, hn::Set(d, static_cast<double>(K.sz)),
                     hn::MulAdd(cj, hn::Set(d, static_cast<double>(K.sy)), hn::Add(ci, hn::Set(d, static_cast<double>(K.origin))))));
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  // x86: scalar loads put together beat the gather instructions, which AMD's cores run as
  // microcode (the same values either way, so the same bits).
  HWY_ALIGN int64_t idx[8];
  hn::Store(c0, di, idx);
  auto quad = [&](const double *b, const int64_t *i) {
    const __m256d lo = _mm256_castpd128_pd256(_mm_loadh_pd(_mm_load_sd(b + i[0]), b + i[1]));
    return _mm256_insertf128_pd(lo, _mm_loadh_pd(_mm_load_sd(b + i[2]), b + i[3]), 1);
  };
#if HWY_TARGET == HWY_AVX2
  auto at = [&](const double *base, long shift) { return V{quad(base + shift, idx)}; };
#else
  auto at = [&](const double *base, long shift) {
    const double *b = base + shift;
    return V{_mm512_insertf64x4(_mm512_castpd256_pd512(quad(b, idx)), quad(b, idx + 4), 1)};
  };
#endif
#else
  auto at = [&](const double *base, long shift) { return hn::GatherIndex(d, base + shift, c0); };
#endif
  const long SY = K.sy, SZ = K.sz;
  // Energy-conserving gather: shape 0 along a component's staggered direction, 1 across.
  const V ex = hn::MulAdd(gz, hn::MulAdd(gy, at(K.ex, 0), hn::Mul(fy, at(K.ex, SY))),
                          hn::Mul(fz, hn::MulAdd(gy, at(K.ex, SZ), hn::Mul(fy, at(K.ex, SY + SZ)))));
  const V ey = hn::MulAdd(gz, hn::MulAdd(gx, at(K.ey, 0), hn::Mul(fx, at(K.ey, 1))),
                          hn::Mul(fz, hn::MulAdd(gx, at(K.ey, SZ), hn::Mul(fx, at(K.ey, 1 + SZ)))));
  const V ez = hn::MulAdd(gy, hn::MulAdd(gx, at(K.ez, 0), hn::Mul(fx, at(K.ez, 1))),
                          hn::Mul(fy, hn::MulAdd(gx, at(K.ez, SY), hn::Mul(fx, at(K.ez, 1 + SY)))));
  const V bx = hn::MulAdd(gx, at(K.bx, 0), hn::Mul(fx, at(K.bx, 1)));
  const V by = hn::MulAdd(gy, at(K.by, 0), hn::Mul(fy, at(K.by, SY)));
  const V bz = hn::MulAdd(gz, at(K.bz, 0), hn::Mul(fz, at(K.bz, SZ)));

  V ux = hn::LoadU(d, p.ux), uy = hn::LoadU(d, p.uy), uz = hn::LoadU(d, p.uz);
  const V q = hn::Set(d, K.qmdt2), inv_c2 = hn::Set(d, 1 / (kC * kC));
  if (K.vay)
    PushVay(d, ux, uy, uz, ex, ey, ez, bx, by, bz, q, inv_c2, hn::Set(d, 1 / kC));
  else
    PushBoris(d, ux, uy, uz, ex, ey, ez, bx, by, bz, q, inv_c2);
  hn::StoreU(ux, d, p.ux), hn::StoreU(uy, d, p.uy), hn::StoreU(uz, d, p.uz);
  const V inv_g = hn::Div(one, hn::Sqrt(hn::MulAdd(hn::MulAdd(ux, ux, hn::MulAdd(uy, uy, hn::Mul(uz, uz))), inv_c2, one)));
  const V step = hn::Mul(hn::Set(d, K.dt), inv_g);
  const V x1 = hn::MulAdd(ux, step, x0), y1 = hn::MulAdd(uy, step, y0), z1 = hn::MulAdd(uz, step, z0);
  hn::StoreU(Wrap(d, x1, K.lx), d, p.x), hn::StoreU(Wrap(d, y1, K.ly), d, p.y), hn::StoreU(Wrap(d, z1, K.lz), d, p.z);

  // The deposition's first cell along each direction: the lower of the old and new cells (new
  // positions moved less than a cell, > -1, so truncating np + 1 is floor without the call).
  const V nx = hn::Mul(x1, hn::Set(d, K.idx)), ny = hn::Mul(y1, hn::Set(d, K.idy)), nz = hn::Mul(z1, hn::Set(d, K.idz));
  const V bsx = hn::Min(ci, hn::Sub(hn::Trunc(hn::Add(nx, one)), one));
  const V bsy = hn::Min(cj, hn::Sub(hn::Trunc(hn::Add(ny, one)), one));
  const V bsz = hn::Min(ck, hn::Sub(hn::Trunc(hn::Add(nz, one)), one));
  hn::Store(hn::Sub(xn, bsx), d, st.rx0 + s), hn::Store(hn::Sub(nx, bsx), d, st.rx1 + s);
  const V off = hn::MulAdd(hn::Sub(bsz, hn::Set(d, origin[2])), hn::Set(d, static_cast<double>(K.buf_plane)),
                           hn::MulAdd(hn::Sub(bsy, hn::Set(d, origin[1])), hn::Set(d, static_cast<double>(K.buf_x)),
                                      hn::Sub(bsx, hn::Set(d, origin[0]))));
  hn::Store(off, d, st.off + s);
  // Along y and z, per stencil cell a: the mid-step shape M = (S0 + S1) / 2, D = (S1 - S0) / sqrt(12)
  // (S0 S0' + (DS S0' + S0 DS') / 2 + DS DS' / 3 = M M' + D D') and the prefix sum W = C1 - C0.
  const V w = hn::LoadU(d, p.w);
  const V qx = hn::Mul(hn::Set(d, -K.jfx), w), qy = hn::Mul(hn::Set(d, -K.jfy), w), qz = hn::Mul(hn::Set(d, -K.jfz), w);
  const V ry0 = hn::Sub(yn, bsy), ry1 = hn::Sub(ny, bsy), rz0 = hn::Sub(zn, bsz), rz1 = hn::Sub(nz, bsz);
  V my[3], dy[3], mz[3], dz[3];
  for (int a = 0; a < 3; ++a) {
    const V av = hn::Set(d, a);
    const V sy0 = Shape(d, ry0, av), sy1 = Shape(d, ry1, av), sz0 = Shape(d, rz0, av), sz1 = Shape(d, rz1, av);
    my[a] = hn::Mul(half, hn::Add(sy0, sy1)), dy[a] = hn::Mul(k12, hn::Sub(sy1, sy0));
    mz[a] = hn::Mul(half, hn::Add(sz0, sz1)), dz[a] = hn::Mul(k12, hn::Sub(sz1, sz0));
    hn::Store(my[a], d, st.my[a] + s), hn::Store(dy[a], d, st.dy[a] + s);
    hn::Store(mz[a], d, st.mz[a] + s), hn::Store(dz[a], d, st.dz[a] + s);
    hn::Store(hn::Mul(qy, hn::Sub(Cumulative(d, ry1, av), Cumulative(d, ry0, av))), d, st.ty[a] + s);
    hn::Store(hn::Mul(qz, hn::Sub(Cumulative(d, rz1, av), Cumulative(d, rz0, av))), d, st.tz[a] + s);
  }
  for (int c = 0; c < 3; ++c)
    for (int b = 0; b < 3; ++b)
      hn::Store(hn::Mul(qx, hn::MulAdd(my[b], mz[c], hn::Mul(dy[b], dz[c]))), d, st.tx[3 * c + b] + s);
}

// The second pass: particles [0, count) of the chunk into the tile buffer.
HWY_INLINE void Deposit(const PushConstants &K, const Staged &st, size_t count, double *jb) {
  const hn::CappedTag<double, 4> d;  // the stencil's three cells and a zero, in one or more vectors
  using V = hn::Vec<decltype(d)>;
  const size_t lanes = hn::Lanes(d);
  const V half = hn::Set(d, 0.5), k12 = hn::Set(d, kInvSqrt12);
  const long row_y = K.buf_x, row_z = K.buf_plane;
  for (size_t p = 0; p < count; ++p) {
    const long off = static_cast<long>(st.off[p]);
    double *jx = jb + off, *jy = jb + K.buf_comp + off, *jz = jb + 2 * K.buf_comp + off;
    const V r0 = hn::Set(d, st.rx0[p]), r1 = hn::Set(d, st.rx1[p]);
    for (size_t a = 0; a < 4; a += lanes) {
      const V av = hn::Iota(d, static_cast<double>(a));
      const V s0 = Shape(d, r0, av), s1 = Shape(d, r1, av), c0 = Cumulative(d, r0, av), c1 = Cumulative(d, r1, av);
      const V mx = hn::Mul(half, hn::Add(s0, s1)), dx = hn::Mul(k12, hn::Sub(s1, s0)), wx = hn::Sub(c1, c0);
      for (int c = 0; c < 3; ++c) {
        const V pc = hn::MulAdd(mx, hn::Set(d, st.mz[c][p]), hn::Mul(dx, hn::Set(d, st.dz[c][p])));
        for (int b = 0; b < 3; ++b) {
          const long r = c * row_z + b * row_y + static_cast<long>(a);
          hn::StoreU(hn::MulAdd(wx, hn::Set(d, st.tx[3 * c + b][p]), hn::LoadU(d, jx + r)), d, jx + r);
          hn::StoreU(hn::MulAdd(pc, hn::Set(d, st.ty[b][p]), hn::LoadU(d, jy + r)), d, jy + r);
        }
      }
      for (int b = 0; b < 3; ++b) {
        const V qb = hn::MulAdd(mx, hn::Set(d, st.my[b][p]), hn::Mul(dx, hn::Set(d, st.dy[b][p])));
        for (int c = 0; c < 3; ++c) {
          const long r = c * row_z + b * row_y + static_cast<long>(a);
          hn::StoreU(hn::MulAdd(qb, hn::Set(d, st.tz[c][p]), hn::LoadU(d, jz + r)), d, jz + r);
        }
      }
    }
  }
}

void PushDepositTile(const PushConstants &K, const TileWork &work) {
  const hn::ScalableTag<double> d;
  const size_t lanes = hn::Lanes(d);
  const TileView &t = work.tile;
  const size_t count = t.size();
  Staged st;
  // The last partial vector goes through a padded copy: the last particle repeated, with no weight.
  HWY_ALIGN double pad[7][kMaxLanes];
  for (size_t first = 0; first < count; first += kChunk) {
    const size_t n = std::min(kChunk, count - first);
    if (K.prefetch_ahead) {
      // The cells of the particles prefetch_ahead after this chunk's, for the gather.
      for (size_t a = first + K.prefetch_ahead, end = std::min(count, a + n); a < end; ++a) prefetch_gather(K, t, a);
    }
    size_t s = 0;
    for (; s + lanes <= n; s += lanes) {
      const size_t i = first + s;
      GatherPush(d, K, work.origin, Lanes{t.x + i, t.y + i, t.z + i, t.ux + i, t.uy + i, t.uz + i, t.w + i}, st, s);
    }
    if (s < n) {
      const size_t i = first + s, m = n - s;
      double *const cols[6] = {t.x, t.y, t.z, t.ux, t.uy, t.uz};
      for (int c = 0; c < 6; ++c)
        for (size_t l = 0; l < lanes; ++l) pad[c][l] = cols[c][i + std::min(l, m - 1)];
      for (size_t l = 0; l < lanes; ++l) pad[6][l] = l < m ? t.w[i + l] : 0.0;
      GatherPush(d, K, work.origin, Lanes{pad[0], pad[1], pad[2], pad[3], pad[4], pad[5], pad[6]}, st, s);
      for (int c = 0; c < 6; ++c) std::copy(pad[c], pad[c] + m, cols[c] + i);
    }
    Deposit(K, st, n, work.jb);
  }
}

const char *TargetHere() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace pic
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pic {

HWY_EXPORT(PushDepositTile);
HWY_EXPORT(TargetHere);

void push_deposit_simd(const PushConstants &k, const TileWork &w) { HWY_DYNAMIC_DISPATCH(PushDepositTile)(k, w); }

const char *simd_target() { return HWY_DYNAMIC_DISPATCH(TargetHere)(); }

bool limit_simd_target(const std::string &name, std::string *error) {
  // Highway's targets are bits, the more preferred the lower: keeping `name` as the best one
  // disables every bit below it.
  const int64_t supported = hwy::SupportedTargets() & HWY_TARGETS;
  std::string known;
  for (int64_t bits = HWY_TARGETS; bits != 0; bits &= bits - 1) {
    const int64_t target = bits & -bits;
    std::string here = hwy::TargetName(target);
    for (auto &c : here) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (here == name) {
      if (!(supported & target)) {
        *error = "hetmem.simd_target = '" + name + "': this CPU does not run it";
        return false;
      }
      hwy::DisableTargets(target - 1);
      return true;
    }
    if (supported & target) known += (known.empty() ? "" : ", ") + here;
  }
  *error = "hetmem.simd_target = '" + name + "': not a target the kernel is built for (this CPU runs: " + known + ")";
  return false;
}

}  // namespace pic
#endif
