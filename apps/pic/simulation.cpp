#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "pic.hpp"

namespace pic {

namespace {


// A counter-based generator: the same particle gets the same numbers whatever the thread count.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
double uniform01(uint64_t key) { return (static_cast<double>(mix(key) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
double gaussian(uint64_t key) {
  double u1 = uniform01(key), u2 = uniform01(key ^ 0x5bd1e995ull);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

int wrap(int i, int n) { return ((i % n) + n) % n; }

// Every kernel below declares what it does to the particle and field arrays (hm::access), so
// that an emulated slow tier charges the device time for it (docs/emulation.md); on DRAM and
// real tiers a declaration is a lookup. Particle arrays are declared per tile by the thread that
// works on the tile, field arrays per thread for the planes it sweeps.
using hm::Access;

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

}  // namespace

// ------------------------------------------------------------------------------------------------
Classes define_classes() {
  return {hm::Class::define("pic.fields", hm::ClassKind::hot, 100), hm::Class::define("pic.tiles", hm::ClassKind::streaming),
          hm::Class::define("pic.tile_currents", hm::ClassKind::hot, 50),
          hm::Class::define("pic.temporary", hm::ClassKind::temporary),
          hm::Class::define("pic.metadata", hm::ClassKind::metadata)};
}

Where where_for(const std::string &pinned, hm::Class cls) {
  return pinned.empty() ? Where(cls) : Where(hm::Tier::find(pinned));
}

hm::Tier first_tier(const std::string &pinned, hm::Class cls) {
  if (!pinned.empty()) return hm::Tier::find(pinned);
  hm_tier_t t;
  hm::check(hm_class_tier(cls.id(), &t));
  return hm::Tier(t);
}

// ------------------------------------------------------------------------------------------------
Field::Field(const Grid &g, const Where &where)
    : nx_(g.nx), ny_(g.ny), nz_(g.nz), sx_(g.nx + 2 * kGuard), sy_(g.ny + 2 * kGuard), sz_(g.nz + 2 * kGuard),
      data_(static_cast<size_t>(sx_) * sy_ * sz_, 0.0, where) {}

void Field::zero() {
  std::fill(data_.begin(), data_.end(), 0.0);
  hm::access(data_, Access::write);
}

long Field::guard_cells() const {
  return static_cast<long>(sx_) * sy_ * sz_ - static_cast<long>(nx_) * ny_ * nz_;
}

void Field::fill_guards() {
  hm::access(data_.data(), static_cast<size_t>(2 * guard_cells()), Access::read_write);  // images and guards
  for (int k = -kGuard; k < nz_ + kGuard; ++k)
    for (int j = -kGuard; j < ny_ + kGuard; ++j)
      for (int i = -kGuard; i < nx_ + kGuard; ++i) {
        bool inside = i >= 0 && i < nx_ && j >= 0 && j < ny_ && k >= 0 && k < nz_;
        if (!inside) at(i, j, k) = at(wrap(i, nx_), wrap(j, ny_), wrap(k, nz_));
      }
}

void Field::fold_guards() {
  hm::access(data_.data(), static_cast<size_t>(2 * guard_cells()), Access::read_write);
  for (int k = -kGuard; k < nz_ + kGuard; ++k)
    for (int j = -kGuard; j < ny_ + kGuard; ++j)
      for (int i = -kGuard; i < nx_ + kGuard; ++i) {
        bool inside = i >= 0 && i < nx_ && j >= 0 && j < ny_ && k >= 0 && k < nz_;
        if (!inside) {
          at(wrap(i, nx_), wrap(j, ny_), wrap(k, nz_)) += at(i, j, k);
          at(i, j, k) = 0;
        }
      }
}

// ------------------------------------------------------------------------------------------------
TileView TileView::over(void *base, size_t capacity, size_t n) {
  TileView v;
  auto *d = static_cast<double *>(base);
  if (!d) return v;
  v.x = d, v.y = d + capacity, v.z = d + 2 * capacity, v.ux = d + 3 * capacity, v.uy = d + 4 * capacity;
  v.uz = d + 5 * capacity, v.w = d + 6 * capacity, v.id = reinterpret_cast<uint64_t *>(d + 7 * capacity);
  v.n = n;
  return v;
}

void TileView::declare(Access how, bool all) const {
  if (n == 0) return;
  for (const double *a : {x, y, z, ux, uy, uz}) hm::access(a, n, how);
  if (all) {
    hm::access(w, n, how);
    hm::access(id, n, how);
  }
}

void Tile::reserve(size_t capacity) {
  if (capacity < n) capacity = n;
  if (capacity == capacity_) return;
  const size_t old = capacity_;
  auto move_arrays = [&](double *base, size_t from, size_t to) {
    // Array a moves from a * from to a * to: upwards from the last array, downwards from the first.
    if (to > from)
      for (size_t a = kArrays; a-- > 1;) std::memmove(base + a * to, base + a * from, n * sizeof(double));
    else
      for (size_t a = 1; a < kArrays; ++a) std::memmove(base + a * to, base + a * from, n * sizeof(double));
    if (n) hm::access(base, kArrays * n, Access::read_write);
  };
  if (capacity < old && x) move_arrays(x, old, capacity);  // before the allocation shrinks
  void *base = capacity ? stream_->resize(index_, capacity * kArrays * sizeof(double)) : nullptr;
  if (!capacity) stream_->resize(index_, 0);
  if (capacity > old && old && n) move_arrays(static_cast<double *>(base), old, capacity);
  capacity_ = capacity;
  static_cast<TileView &>(*this) = TileView::over(base, capacity, n);
}

void Tile::push_back(double px, double py, double pz, double qx, double qy, double qz, double pw, uint64_t pid) {
  if (n == capacity_) reserve(capacity_ + capacity_ / 4 + 16);
  x[n] = px, y[n] = py, z[n] = pz, ux[n] = qx, uy[n] = qy, uz[n] = qz, w[n] = pw, id[n] = pid;
  ++n;
}

void Tile::remove(size_t i) {
  const size_t last = n - 1;
  x[i] = x[last], y[i] = y[last], z[i] = z[last];
  ux[i] = ux[last], uy[i] = uy[last], uz[i] = uz[last];
  w[i] = w[last], id[i] = id[last];
  --n;
}

long Species::count() const {
  long n = 0;
  for (const Tile &t : tiles) n += static_cast<long>(t.size());
  return n;
}

// ------------------------------------------------------------------------------------------------
Simulation::Simulation(const Params &p) : p_(p) {
  const Grid &g = p_.grid;
  dt_ = p_.cfl / (kC * std::sqrt(1 / (g.dx * g.dx) + 1 / (g.dy * g.dy) + 1 / (g.dz * g.dz)));
  inv_dx_ = 1 / g.dx, inv_dy_ = 1 / g.dy, inv_dz_ = 1 / g.dz;
  ntx_ = g.nx / p_.tile[0];
  nty_ = g.ny / p_.tile[1];
  ntz_ = g.nz / p_.tile[2];
  // The active policy places the classes (HM_POLICY), unless hetmem.fields / hetmem.particles pin
  // fields or particles to a tier; temporaries go with the fields.
  const Classes classes = define_classes();
  const Where fields = where_for(p_.field_role, classes.fields);
  const Where currents = where_for(p_.particle_role, classes.tile_currents);
  arena_ = p_.field_role.empty()
               ? std::make_unique<hm::Arena>(classes.temporary, size_t{1} << 20, HM_ARENA_CONCURRENT)
               : std::make_unique<hm::Arena>(hm::Tier::find(p_.field_role), size_t{1} << 20, HM_ARENA_CONCURRENT);
  bx_ = p_.tile[0] + 4;
  by_ = p_.tile[1] + 4;
  bz_ = p_.tile[2] + 4;
  int ntiles = ntx_ * nty_ * ntz_;
  // Fields and current buffers before or after the particles (hetmem.allocation_order): the order
  // decides what a placement by allocation order (first-touch) puts on the fast tier.
  auto allocate_grid = [&] {
    for (Field *f : {&f_.ex, &f_.ey, &f_.ez, &f_.bx, &f_.by, &f_.bz, &f_.jx, &f_.jy, &f_.jz}) *f = Field(g, fields);
    for (int t = 0; t < ntiles; ++t)
      tile_j_.emplace_back(static_cast<size_t>(3) * bx_ * by_ * bz_, 0.0, currents);
  };
  if (!p_.particles_first) allocate_grid();

  uint64_t next_id = 1;
  for (size_t s = 0; s < p_.species.size(); ++s) {
    const SpeciesParams &sp = p_.species[s];
    // Tiles pinned to a role or tier (hetmem.particles) live there, never staged.
    Species species{sp,
                    p_.particle_role.empty()
                        ? std::make_unique<hm::TileStream>(classes.tiles, static_cast<size_t>(ntiles))
                        : std::make_unique<hm::TileStream>(hm::Tier::find(p_.particle_role), static_cast<size_t>(ntiles)),
                    TierVector<Tile>(hm::TierAllocator<Tile>(classes.metadata))};
    species.tiles.reserve(static_cast<size_t>(ntiles));
    for (int t = 0; t < ntiles; ++t) species.tiles.emplace_back(species.stream.get(), static_cast<size_t>(t));
    int per_cell = sp.ppc[0] * sp.ppc[1] * sp.ppc[2];
    double weight = per_cell > 0 ? sp.density * g.dx * g.dy * g.dz / per_cell : 0;
    double k[3] = {2 * M_PI * sp.langmuir_modes[0] / g.lx(), 2 * M_PI * sp.langmuir_modes[1] / g.ly(),
                   2 * M_PI * sp.langmuir_modes[2] / g.lz()};
    for (int cz = 0; cz < g.nz; ++cz)
      for (int cy = 0; cy < g.ny; ++cy)
        for (int cx = 0; cx < g.nx; ++cx)
          for (int pz = 0; pz < sp.ppc[2]; ++pz)
            for (int py = 0; py < sp.ppc[1]; ++py)
              for (int px = 0; px < sp.ppc[0]; ++px) {
                double x = (cx + (px + 0.5) / sp.ppc[0]) * g.dx;
                double y = (cy + (py + 0.5) / sp.ppc[1]) * g.dy;
                double z = (cz + (pz + 0.5) / sp.ppc[2]) * g.dz;
                uint64_t key = (p_.seed * 1315423911ull) ^ (next_id * 0x2545f4914f6cdd1dull) ^ (s << 56);
                double u[3];
                for (int d = 0; d < 3; ++d)
                  u[d] = (sp.u_drift[d] + sp.u_th * gaussian(key + 7919ull * d)) * kC;
                if (sp.langmuir_eps != 0) {
                  double sx = std::sin(k[0] * x), sy = std::sin(k[1] * y), sz = std::sin(k[2] * z);
                  double cxx = std::cos(k[0] * x), cyy = std::cos(k[1] * y), czz = std::cos(k[2] * z);
                  double a = sp.langmuir_sign * sp.langmuir_eps * kC / sp.langmuir_kp;
                  u[0] += a * k[0] * sx * cyy * czz;
                  u[1] += a * k[1] * cxx * sy * czz;
                  u[2] += a * k[2] * cxx * cyy * sz;
                }
                species.tiles[tile_of(x, y, z)].push_back(x, y, z, u[0], u[1], u[2], weight, next_id++);
              }
    // Each tile's allocation trimmed to its particles and a sixteenth more for those arriving.
    for (Tile &t : species.tiles) {
      t.reserve(t.size() + t.size() / 16 + 8);
      t.declare(Access::write, true);
    }
    species_.push_back(std::move(species));
  }
  // The background: the particles' own net charge, so that it cancels their deposit exactly.
  double net_charge = 0;
  for (const Species &sp : species_)
    for (const Tile &t : sp.tiles)
      for (size_t n = 0; n < t.size(); ++n) net_charge += sp.params.charge * t.w[n];
  background_rho_ = -net_charge / (g.lx() * g.ly() * g.lz());
  if (p_.particles_first) allocate_grid();
  for (const Field *f : {&f_.ex, &f_.ey, &f_.ez, &f_.bx, &f_.by, &f_.bz, &f_.jx, &f_.jy, &f_.jz})
    hm::access(f->data(), static_cast<size_t>(f->stride_z()) * (g.nz + 2 * Field::kGuard), Access::write);
  for (const auto &buf : tile_j_) hm::access(buf, Access::write);
  // The arena's first chunk is written by every redistribution: declared from the start.
  void *first = arena_->allocate(1);
  hm::access(static_cast<const char *>(first), 1, Access::write);
  arena_->reset();
}

int Simulation::tile_of(double x, double y, double z) const {
  const Grid &g = p_.grid;
  int cx = std::min(static_cast<int>(x * inv_dx_), g.nx - 1), cy = std::min(static_cast<int>(y * inv_dy_), g.ny - 1),
      cz = std::min(static_cast<int>(z * inv_dz_), g.nz - 1);
  return ((cz / p_.tile[2]) * nty_ + cy / p_.tile[1]) * ntx_ + cx / p_.tile[0];
}

void Simulation::half_b(double h) {
  const Grid &g = p_.grid;
  f_.ex.fill_guards(), f_.ey.fill_guards(), f_.ez.fill_guards();
  const double rx = h / g.dx, ry = h / g.dy, rz = h / g.dz;
  sweep_planes({&f_.ex, &f_.ey, &f_.ez}, {&f_.bx, &f_.by, &f_.bz}, [&](int k) {
    for (int j = 0; j < g.ny; ++j)
      for (int i = 0; i < g.nx; ++i) {
        f_.bx.at(i, j, k) -= ry * (f_.ez.at(i, j + 1, k) - f_.ez.at(i, j, k)) - rz * (f_.ey.at(i, j, k + 1) - f_.ey.at(i, j, k));
        f_.by.at(i, j, k) -= rz * (f_.ex.at(i, j, k + 1) - f_.ex.at(i, j, k)) - rx * (f_.ez.at(i + 1, j, k) - f_.ez.at(i, j, k));
        f_.bz.at(i, j, k) -= rx * (f_.ey.at(i + 1, j, k) - f_.ey.at(i, j, k)) - ry * (f_.ex.at(i, j + 1, k) - f_.ex.at(i, j, k));
      }
  });
}

// Runs plane(k) for every z-plane, in parallel over static chunks; each thread then declares what
// it did to the planes it swept: read the `in` components, read and updated the `out` ones.
template <class Plane>
void Simulation::sweep_planes(std::initializer_list<const Field *> in, std::initializer_list<const Field *> out,
                              Plane plane) {
  const size_t plane_cells = static_cast<size_t>(p_.grid.nx) * p_.grid.ny;
#pragma omp parallel
  {
    size_t planes = 0;
    int first = 0;
#pragma omp for schedule(static)
    for (int k = 0; k < p_.grid.nz; ++k) {
      if (planes++ == 0) first = k;
      plane(k);
    }
    // A static schedule gives each thread one run of planes: declared from its first one.
    if (planes) {
      for (const Field *f : in) hm::access(f->data() + f->index(0, 0, first), planes * plane_cells, Access::read);
      for (const Field *f : out)
        hm::access(f->data() + f->index(0, 0, first), planes * plane_cells, Access::read_write);
    }
  }
}

void Simulation::full_e(double dt) {
  const Grid &g = p_.grid;
  f_.bx.fill_guards(), f_.by.fill_guards(), f_.bz.fill_guards();
  const double c2 = kC * kC, rx = c2 * dt / g.dx, ry = c2 * dt / g.dy, rz = c2 * dt / g.dz, rj = dt / kEps0;
  sweep_planes({&f_.bx, &f_.by, &f_.bz, &f_.jx, &f_.jy, &f_.jz}, {&f_.ex, &f_.ey, &f_.ez}, [&](int k) {
    for (int j = 0; j < g.ny; ++j)
      for (int i = 0; i < g.nx; ++i) {
        f_.ex.at(i, j, k) += ry * (f_.bz.at(i, j, k) - f_.bz.at(i, j - 1, k)) - rz * (f_.by.at(i, j, k) - f_.by.at(i, j, k - 1)) -
                             rj * f_.jx.at(i, j, k);
        f_.ey.at(i, j, k) += rz * (f_.bx.at(i, j, k) - f_.bx.at(i, j, k - 1)) - rx * (f_.bz.at(i, j, k) - f_.bz.at(i - 1, j, k)) -
                             rj * f_.jy.at(i, j, k);
        f_.ez.at(i, j, k) += rx * (f_.by.at(i, j, k) - f_.by.at(i - 1, j, k)) - ry * (f_.bx.at(i, j, k) - f_.bx.at(i, j - 1, k)) -
                             rj * f_.jz.at(i, j, k);
      }
  });
}

void Simulation::field_step_vacuum() {
  half_b(0.5 * dt_);
  full_e(dt_);
  half_b(0.5 * dt_);
  time_ += dt_;
  ++steps_;
}

// Built twice: for x86-64-v3 (AVX2, FMA) and for any x86-64; the loader picks one per machine.
__attribute__((target_clones("arch=x86-64-v3", "default"))) void Simulation::push_and_deposit() {
  const Grid &g = p_.grid;
  for (Field *f : {&f_.ex, &f_.ey, &f_.ez, &f_.bx, &f_.by, &f_.bz}) f->fill_guards();
  const int ntiles = ntx_ * nty_ * ntz_;
  const long plane = static_cast<long>(bx_) * by_, comp = plane * bz_;
  for (auto &buf : tile_j_) {
    std::fill(buf.begin(), buf.end(), 0.0);
    hm::access(buf, Access::write);
  }
  const size_t tile_cells = static_cast<size_t>(p_.tile[0]) * p_.tile[1] * p_.tile[2];
  for (Species &sp : species_) {
    const double q = sp.params.charge, m = sp.params.mass, qmdt2 = q * dt_ / (2 * m);
    const double jfx = q / (dt_ * g.dy * g.dz), jfy = q / (dt_ * g.dx * g.dz), jfz = q / (dt_ * g.dx * g.dy);
    const double idx = 1 / g.dx, idy = 1 / g.dy, idz = 1 / g.dz;
    const long SY = f_.ex.stride_y(), SZ = f_.ex.stride_z();
    const double *pex = f_.ex.data(), *pey = f_.ey.data(), *pez = f_.ez.data();
    const double *pbx = f_.bx.data(), *pby = f_.by.data(), *pbz = f_.bz.data();
    const bool vay = p_.pusher == "vay";
    // Field data for particle n + k prefetched while particle n is computed (k from the prefetch
    // model under hetmem-static+prefetch and hetmem, or HM_PREFETCH_DISTANCE; 0: none).
    const size_t k_ahead = static_cast<size_t>(hm_prefetch_distance("gather+push+deposit", ns_per_particle_));
    // The tiles in batches: staged in the migration space by helper threads under hetmem, at home
    // otherwise (docs/streaming.md); the kernel sees the same bytes either way.
    hm::TileStream &stream = *sp.stream;
    stream.sweep(0, static_cast<size_t>(ntiles));
    for (size_t first, last; stream.next(first, last);) {
#pragma omp parallel for schedule(dynamic)
    for (int t = static_cast<int>(first); t < static_cast<int>(last); ++t) {
      const TileView tile = sp.tiles[t].in(stream.acquire(static_cast<size_t>(t)));
      double *jb = tile_j_[t].data();
      const int tx = t % ntx_, ty = (t / ntx_) % nty_, tz = t / (ntx_ * nty_);
      // Buffer origin: two cells below the tile's first cell.
      const int ox = tx * p_.tile[0] - 2, oy = ty * p_.tile[1] - 2, oz = tz * p_.tile[2] - 2;
      // One particle: gather, push, deposit. Inlined into the two loops below, with and without
      // prefetch, so that the loop without it carries no test per particle.
      auto particle = [&](size_t n) __attribute__((always_inline)) {
        const double x0 = tile.x[n], y0 = tile.y[n], z0 = tile.z[n];
        // Gather (energy-conserving: shape 0 along a component's staggered direction, 1 across).
        // All components share one layout, so one base index and two strides serve them all.
        const double xn = x0 * idx, yn = y0 * idy, zn = z0 * idz;
        const int i = static_cast<int>(xn), j = static_cast<int>(yn), k = static_cast<int>(zn);  // x >= 0
        const double fx = xn - i, fy = yn - j, fz = zn - k;
        const double sx[2] = {1 - fx, fx}, sy[2] = {1 - fy, fy}, sz[2] = {1 - fz, fz};
        const long c0 = f_.ex.index(i, j, k);
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
        if (vay) {
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
        const double x1 = x0 + dt_ * ux * inv_g, y1 = y0 + dt_ * uy * inv_g, z1 = z0 + dt_ * uz * inv_g;
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
        double *bjx = jb, *bjy = jb + comp, *bjz = jb + 2 * comp;
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
            double *row = bjx + (lz + c) * plane + (ly + b) * bx_ + lx;
            const double t = qx * tx[c][b];
            double acc = 0;
            for (int a = 0; a < 3; ++a) row[a] += (acc += DS[0][a] * t);
          }
        for (int c = 0; c < 3; ++c)
          for (int a = 0; a < 3; ++a) {
            double *col = bjy + (lz + c) * plane + ly * bx_ + lx + a;
            const double t = qy * ty[c][a];
            double acc = 0;
            for (int b = 0; b < 3; ++b) col[b * bx_] += (acc += DS[1][b] * t);
          }
        for (int b = 0; b < 3; ++b)
          for (int a = 0; a < 3; ++a) {
            double *col = bjz + lz * plane + (ly + b) * bx_ + lx + a;
            const double t = qz * tz[b][a];
            double acc = 0;
            for (int c = 0; c < 3; ++c) col[c * plane] += (acc += DS[2][c] * t);
          }
        // Periodic positions.
        tile.x[n] = x1 < 0 ? x1 + g.lx() : (x1 >= g.lx() ? x1 - g.lx() : x1);
        tile.y[n] = y1 < 0 ? y1 + g.ly() : (y1 >= g.ly() ? y1 - g.ly() : y1);
        tile.z[n] = z1 < 0 ? z1 + g.lz() : (z1 >= g.lz() ? z1 - g.lz() : z1);
      };
      const size_t count = tile.size(), ahead = k_ahead < count ? count - k_ahead : 0;
      if (k_ahead) {
        for (size_t n = 0; n < ahead; ++n) {
          const size_t a = n + k_ahead;
          const long ca = f_.ex.index(static_cast<int>(tile.x[a] * idx), static_cast<int>(tile.y[a] * idy),
                                      static_cast<int>(tile.z[a] * idz));
          for (const double *f : {pex, pey, pez, pbx, pby, pbz}) {
            __builtin_prefetch(f + ca);
            __builtin_prefetch(f + ca + SZ + SY);
          }
          particle(n);
        }
        for (size_t n = ahead; n < count; ++n) particle(n);
      } else {
        for (size_t n = 0; n < count; ++n) particle(n);
      }
      // Positions and momenta read and written, weights read; the tile's current buffer updated;
      // the field values around the tile's cells gathered (its share of each component).
      tile.declare(Access::read_write, false);
      if (tile.n) hm::access(tile.w, tile.n, Access::read);
      hm::access(tile_j_[t], Access::read_write);
      const long origin = f_.ex.index(tx * p_.tile[0], ty * p_.tile[1], tz * p_.tile[2]);
      for (const double *f : {pex, pey, pez, pbx, pby, pbz}) hm::access(f + origin, tile_cells, Access::read);
      stream.release(static_cast<size_t>(t), true);  // positions and momenta changed
    }
    }
  }
}

// Adds the tile buffers into the grid in tile order: the same sums in the same order whatever the
// number of threads, so runs are bitwise identical.
void Simulation::reduce_current() {
  const Grid &g = p_.grid;
  f_.jx.zero(), f_.jy.zero(), f_.jz.zero();
  const long plane = static_cast<long>(bx_) * by_, comp = plane * bz_;
  Field *J[3] = {&f_.jx, &f_.jy, &f_.jz};
  std::vector<int> wx(bx_), wy(by_), wz(bz_);
  for (int t = 0; t < ntx_ * nty_ * ntz_; ++t) {
    const int tx = t % ntx_, ty = (t / ntx_) % nty_, tz = t / (ntx_ * nty_);
    const int ox = tx * p_.tile[0] - 2, oy = ty * p_.tile[1] - 2, oz = tz * p_.tile[2] - 2;
    for (int a = 0; a < bx_; ++a) wx[a] = wrap(ox + a, g.nx);
    for (int b = 0; b < by_; ++b) wy[b] = wrap(oy + b, g.ny);
    for (int c = 0; c < bz_; ++c) wz[c] = wrap(oz + c, g.nz);
    const double *jb = tile_j_[t].data();
    hm::access(tile_j_[t], Access::read);
    for (const Field *f : J) hm::access(f->data() + f->index(wx[0], wy[0], wz[0]), static_cast<size_t>(comp), Access::read_write);
    for (int d = 0; d < 3; ++d)
      for (int c = 0; c < bz_; ++c)
        for (int b = 0; b < by_; ++b) {
          const double *row = jb + d * comp + c * plane + b * bx_;
          double *out = &J[d]->at(0, wy[b], wz[c]);
          for (int a = 0; a < bx_; ++a) out[wx[a]] += row[a];
        }
  }
}

// Particles that left their tile move to the tile they are in now, in a fixed order.
// Particles that left their tile move to the tile they are in now, in a fixed order. The lists
// of leavers are per-step temporaries: they come from the iteration arena, reset every step.
void Simulation::redistribute() {
  struct Leaver {
    int dest;
    uint32_t index;
  };
  for (Species &sp : species_) {
    const int ntiles = static_cast<int>(sp.tiles.size());
    std::vector<Leaver *> leaving(ntiles);
    std::vector<uint32_t> count(ntiles, 0);
#pragma omp parallel for schedule(dynamic)
    for (int t = 0; t < ntiles; ++t) {
      Tile &tile = sp.tiles[t];
      const size_t n = tile.size();
      if (n == 0) continue;
      // Destinations first (one lookup per particle), then the list of those that leave.
      int *dest = static_cast<int *>(arena_->allocate(n * sizeof(int), alignof(int)));
      uint32_t m = 0;
      for (size_t i = 0; i < n; ++i) m += (dest[i] = tile_of(tile.x[i], tile.y[i], tile.z[i])) != t;
      count[t] = m;
      for (const double *v : {tile.x, tile.y, tile.z}) hm::access(v, n, Access::read);
      hm::access(dest, n, Access::write);
      if (m == 0) continue;
      leaving[t] = static_cast<Leaver *>(arena_->allocate(m * sizeof(Leaver), alignof(Leaver)));
      for (size_t i = 0, k = 0; i < n; ++i)
        if (dest[i] != t) leaving[t][k++] = Leaver{dest[i], static_cast<uint32_t>(i)};
      hm::access(dest, n, Access::read);
      hm::access(leaving[t], m, Access::write);
    }
    std::vector<uint32_t> arriving(ntiles, 0);
    for (int t = 0; t < ntiles; ++t) {
      Tile &src = sp.tiles[t];
      for (uint32_t k = 0; k < count[t]; ++k) {
        const size_t n = leaving[t][k].index;
        sp.tiles[leaving[t][k].dest].push_back(src.x[n], src.y[n], src.z[n], src.ux[n], src.uy[n], src.uz[n], src.w[n],
                                                src.id[n]);
        ++arriving[leaving[t][k].dest];
      }
      for (uint32_t k = count[t]; k-- > 0;) src.remove(leaving[t][k].index);
      if (count[t] == 0) continue;
      // Each leaver: its 8 values read and the hole filled from the end (8 reads and 8 writes),
      // scattered 8-byte accesses; its arrival is declared once per destination tile below.
      hm::access(leaving[t], count[t], Access::read);
      hm::access_scattered(src.x, 8 * uint64_t{count[t]}, sizeof(double), Access::read_write);
    }
    for (int t = 0; t < ntiles; ++t)
      if (arriving[t]) hm::access_scattered(sp.tiles[t].x, 8 * uint64_t{arriving[t]}, sizeof(double), Access::write);
  }
  arena_->reset();
}

void Simulation::step() {
  hm_phase_begin("gather+push+deposit");
  const auto t0 = std::chrono::steady_clock::now();
  push_and_deposit();
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  long particles = 0;
  for (const Species &sp : species_) particles += sp.count();
  ns_per_particle_ = particles ? ns * omp_get_max_threads() / static_cast<double>(particles) : 0;
  hm_phase_end();
  if (!p_.static_fields) {
    hm_phase_begin("current reduction");
    reduce_current();
    hm_phase_end();
    hm_phase_begin("field solve");
    half_b(0.5 * dt_);
    full_e(dt_);
    half_b(0.5 * dt_);
    hm_phase_end();
  }
  hm_phase_begin("redistribution");
  redistribute();
  if (p_.sort_interval > 0 && (steps_ + 1) % p_.sort_interval == 0) sort_by_cell();
  hm_phase_end();
  time_ += dt_;
  ++steps_;
  hm_iteration_next();  // the placement runtime acts at iteration boundaries (hetmem-static settles)
}

// Orders each tile's particles by cell (x fastest), so that gather and deposit walk the grid in
// order. Stable, so a run stays deterministic.
void Simulation::sort_by_cell() {
  const Grid &g = p_.grid;
  for (Species &sp : species_) {
#pragma omp parallel for schedule(dynamic)
    for (size_t t = 0; t < sp.tiles.size(); ++t) {
      Tile &tile = sp.tiles[t];
      const size_t n = tile.size();
      std::vector<std::pair<long, uint32_t>> key(n);
      for (size_t i = 0; i < n; ++i) {
        long cx = static_cast<long>(tile.x[i] / g.dx), cy = static_cast<long>(tile.y[i] / g.dy),
             cz = static_cast<long>(tile.z[i] / g.dz);
        key[i] = {(cz * g.ny + cy) * g.nx + cx, static_cast<uint32_t>(i)};
      }
      std::stable_sort(key.begin(), key.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
      std::vector<uint64_t> copy(n);
      auto permute = [&](auto *v) {
        std::memcpy(copy.data(), v, n * sizeof(uint64_t));
        for (size_t i = 0; i < n; ++i) std::memcpy(v + i, &copy[key[i].second], sizeof(uint64_t));
      };
      permute(tile.x), permute(tile.y), permute(tile.z), permute(tile.ux), permute(tile.uy), permute(tile.uz);
      permute(tile.w), permute(tile.id);
      // Positions read for the keys; every array copied out and gathered back in key order.
      tile.declare(Access::read_write, true);
      hm::access_scattered(tile.x, 8 * uint64_t{n}, sizeof(double), Access::read);
    }
  }
}

// ------------------------------------------------------------------------------------------------
void Simulation::deposit_charge(Field &rho) const {
  const Grid &g = p_.grid;
  rho.zero();
  const double dv = g.dx * g.dy * g.dz;
  for (const Species &sp : species_)
    for (const Tile &tile : sp.tiles) {
      for (const double *v : {tile.x, tile.y, tile.z, tile.w}) hm::access(v, tile.n, Access::read);
      for (size_t n = 0; n < tile.size(); ++n) {
        double xn = tile.x[n] / g.dx, yn = tile.y[n] / g.dy, zn = tile.z[n] / g.dz;
        int i = static_cast<int>(std::floor(xn)), j = static_cast<int>(std::floor(yn)), k = static_cast<int>(std::floor(zn));
        double fx = xn - i, fy = yn - j, fz = zn - k, q = sp.params.charge * tile.w[n] / dv;
        double sx[2] = {1 - fx, fx}, sy[2] = {1 - fy, fy}, sz[2] = {1 - fz, fz};
        for (int c = 0; c < 2; ++c)
          for (int b = 0; b < 2; ++b)
            for (int a = 0; a < 2; ++a) rho.at(i + a, j + b, k + c) += q * sx[a] * sy[b] * sz[c];
      }
    }
  rho.fold_guards();
}

double Simulation::gauss_error() const {
  const Grid &g = p_.grid;
  Field rho(g, Where(hm::Tier::of(hm::Role::fast)));
  deposit_charge(rho);
  Fields &f = const_cast<Fields &>(f_);
  f.ex.fill_guards(), f.ey.fill_guards(), f.ez.fill_guards();
  double worst = 0, scale = 0;
  for (int k = 0; k < g.nz; ++k)
    for (int j = 0; j < g.ny; ++j)
      for (int i = 0; i < g.nx; ++i) {
        double div = (f_.ex.at(i, j, k) - f_.ex.at(i - 1, j, k)) / g.dx + (f_.ey.at(i, j, k) - f_.ey.at(i, j - 1, k)) / g.dy +
                     (f_.ez.at(i, j, k) - f_.ez.at(i, j, k - 1)) / g.dz;
        double r = (rho.at(i, j, k) + background_rho_) / kEps0;
        worst = std::max(worst, std::fabs(div - r));
        scale = std::max(scale, std::fabs(r));
      }
  // When the net rho is at rounding level (a neutral plasma, or one species over its background, at
  // rest), compare with a small fraction of one species' charge density instead, so that noise
  // over noise does not read as an error of 1.
  double floor_scale = 0;
  for (const Species &sp : species_) floor_scale += 1e-10 * std::fabs(sp.params.charge) * sp.params.density / kEps0;
  double denominator = std::max(scale, floor_scale);
  return denominator > 0 ? worst / denominator : worst;
}

double Simulation::field_energy() const {
  const Grid &g = p_.grid;
  double e2 = 0, b2 = 0;
  for (const Field *f : {&f_.ex, &f_.ey, &f_.ez, &f_.bx, &f_.by, &f_.bz})
    hm::access(f->data(), static_cast<size_t>(g.cells()), Access::read);
  for (int k = 0; k < g.nz; ++k)
    for (int j = 0; j < g.ny; ++j)
      for (int i = 0; i < g.nx; ++i) {
        e2 += f_.ex.at(i, j, k) * f_.ex.at(i, j, k) + f_.ey.at(i, j, k) * f_.ey.at(i, j, k) + f_.ez.at(i, j, k) * f_.ez.at(i, j, k);
        b2 += f_.bx.at(i, j, k) * f_.bx.at(i, j, k) + f_.by.at(i, j, k) * f_.by.at(i, j, k) + f_.bz.at(i, j, k) * f_.bz.at(i, j, k);
      }
  const double dv = g.dx * g.dy * g.dz;
  return 0.5 * kEps0 * (e2 + kC * kC * b2) * dv;  // B^2 / (2 mu0) = eps0 c^2 B^2 / 2
}

double Simulation::kinetic_energy(int s) const {
  const Species &sp = species_[static_cast<size_t>(s)];
  double e = 0;
  for (const Tile &t : sp.tiles) {
    for (const double *v : {t.ux, t.uy, t.uz, t.w}) hm::access(v, t.n, Access::read);
    for (size_t n = 0; n < t.size(); ++n) {
      double u2 = t.ux[n] * t.ux[n] + t.uy[n] * t.uy[n] + t.uz[n] * t.uz[n];
      e += t.w[n] * sp.params.mass * kC * kC * (std::sqrt(1 + u2 / (kC * kC)) - 1);
    }
  }
  return e;
}

}  // namespace pic
