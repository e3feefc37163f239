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
Field::Field(const FieldLayout &layout, const Where &where) : layout_(layout), data_(layout.size(), 0.0, where) {}

void Field::zero() {
  std::fill(data_.begin(), data_.end(), 0.0);
  hm::access(data_, Access::write);
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
Simulation::Simulation(const Params &p, const Comm &comm) : p_(p), comm_(comm) {
  const Grid &g = p_.grid;
  std::string why;
  if (!Decomposition::make({g.nx, g.ny, g.nz}, {p_.tile[0], p_.tile[1], p_.tile[2]}, comm.size(), p_.decomposition,
                           &decomposition_, &why))
    throw std::invalid_argument(why);
  tile_ids_ = decomposition_.tiles_of(comm.rank());
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
  halo_ = std::make_unique<Halo>(comm, decomposition_, Field::kGuard, std::array<int, 3>{bx_, by_, bz_});
  const Box &box = halo_->layout().box;
  const int ntiles = static_cast<int>(tile_ids_.size());
  // Fields and current buffers before or after the particles (hetmem.allocation_order): the order
  // decides what a placement by allocation order (first-touch) puts on the fast tier.
  auto allocate_grid = [&] {
    for (Field *f : {&f_.ex, &f_.ey, &f_.ez, &f_.bx, &f_.by, &f_.bz, &f_.jx, &f_.jy, &f_.jz}) *f = Field(halo_->layout(), fields);
    for (int t = 0; t < ntiles; ++t)
      tile_j_.emplace_back(static_cast<size_t>(3) * bx_ * by_ * bz_, 0.0, currents);
  };
  if (!p_.particles_first) allocate_grid();

  uint64_t first_id = 1;  // ids run over the whole grid, cell by cell (x fastest), species after species
  // The background: the particles' own net charge, so that it cancels their deposit. Every
  // particle of a species has the same weight, so the net charge is a product per species: the
  // same bits on every rank and for every decomposition.
  double net_charge = 0;
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
    // This rank's cells only; a particle's id and random numbers depend on its cell, not on the
    // decomposition.
    for (int cz = box.lo[2]; cz < box.hi[2]; ++cz)
      for (int cy = box.lo[1]; cy < box.hi[1]; ++cy)
        for (int cx = box.lo[0]; cx < box.hi[0]; ++cx) {
          uint64_t next_id = first_id + static_cast<uint64_t>((static_cast<long>(cz) * g.ny + cy) * g.nx + cx) * per_cell;
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
                species.tiles[local_tile(tile_of(x, y, z))].push_back(x, y, z, u[0], u[1], u[2], weight, next_id++);
              }
        }
    first_id += static_cast<uint64_t>(g.cells()) * per_cell;
    net_charge += sp.charge * weight * static_cast<double>(g.cells() * per_cell);
    // Each tile's allocation trimmed to its particles and a sixteenth more for those arriving.
    for (Tile &t : species.tiles) {
      t.reserve(t.size() + t.size() / 16 + 8);
      t.declare(Access::write, true);
    }
    species_.push_back(std::move(species));
  }
  background_rho_ = -net_charge / (g.lx() * g.ly() * g.lz());
  if (p_.particles_first) allocate_grid();
  for (const Field *f : {&f_.ex, &f_.ey, &f_.ez, &f_.bx, &f_.by, &f_.bz, &f_.jx, &f_.jy, &f_.jz})
    hm::access(f->data(), f->size_with_guards(), Access::write);
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

int Simulation::local_tile(int t) const {
  const Box &b = box();
  const int nx = b.extent(0) / p_.tile[0], ny = b.extent(1) / p_.tile[1];
  const int tx = t % ntx_ - b.lo[0] / p_.tile[0], ty = (t / ntx_) % nty_ - b.lo[1] / p_.tile[1],
            tz = t / (ntx_ * nty_) - b.lo[2] / p_.tile[2];
  return (tz * ny + ty) * nx + tx;
}

long Simulation::global_particles() const {
  long n = 0;
  for (const Species &sp : species_) n += sp.count();
  return comm_.sum(n);
}

// Fills the guard layers of E and/or B that do not hold their owners' present values, in one
// exchange (one message per neighbour for all the components it fills).
void Simulation::fill_guards(bool e, bool b) const {
  e = e && !e_guards_, b = b && !b_guards_;
  Fields &f = const_cast<Fields &>(f_);  // the guard layers only: a copy of the owners' cells
  if (e && b) halo_->fill({f.ex.data(), f.ey.data(), f.ez.data(), f.bx.data(), f.by.data(), f.bz.data()});
  else if (e) halo_->fill({f.ex.data(), f.ey.data(), f.ez.data()});
  else if (b) halo_->fill({f.bx.data(), f.by.data(), f.bz.data()});
  e_guards_ = e_guards_ || e;
  b_guards_ = b_guards_ || b;
}

void Simulation::half_b(double h) {
  const Grid &g = p_.grid;
  const Box &b = box();
  fill_guards(true, false);
  b_guards_ = false;  // B changes below
  const double rx = h / g.dx, ry = h / g.dy, rz = h / g.dz;
  sweep_planes({&f_.ex, &f_.ey, &f_.ez}, {&f_.bx, &f_.by, &f_.bz}, [&](int k) {
    for (int j = b.lo[1]; j < b.hi[1]; ++j)
      for (int i = b.lo[0]; i < b.hi[0]; ++i) {
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
  const Box &b = box();
  const size_t plane_cells = static_cast<size_t>(b.extent(0)) * b.extent(1);
#pragma omp parallel
  {
    size_t planes = 0;
    int first = 0;
#pragma omp for schedule(static)
    for (int k = b.lo[2]; k < b.hi[2]; ++k) {
      if (planes++ == 0) first = k;
      plane(k);
    }
    // A static schedule gives each thread one run of planes: declared from its first one.
    if (planes) {
      for (const Field *f : in) hm::access(f->data() + f->index(b.lo[0], b.lo[1], first), planes * plane_cells, Access::read);
      for (const Field *f : out)
        hm::access(f->data() + f->index(b.lo[0], b.lo[1], first), planes * plane_cells, Access::read_write);
    }
  }
}

void Simulation::full_e(double dt) {
  const Grid &g = p_.grid;
  const Box &b = box();
  fill_guards(false, true);
  e_guards_ = false;  // E changes below
  const double c2 = kC * kC, rx = c2 * dt / g.dx, ry = c2 * dt / g.dy, rz = c2 * dt / g.dz, rj = dt / kEps0;
  sweep_planes({&f_.bx, &f_.by, &f_.bz, &f_.jx, &f_.jy, &f_.jz}, {&f_.ex, &f_.ey, &f_.ez}, [&](int k) {
    for (int j = b.lo[1]; j < b.hi[1]; ++j)
      for (int i = b.lo[0]; i < b.hi[0]; ++i) {
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
  fill_guards(true, true);
  const int ntiles = static_cast<int>(tile_ids_.size());
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
      const int tg = tile_ids_[t], tx = tg % ntx_, ty = (tg / ntx_) % nty_, tz = tg / (ntx_ * nty_);
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

// Adds the tile buffers into the grid in global tile order, this rank's tiles and those of other
// ranks that cover its cells alike: every grid point gets the same sums in the same order whatever
// the number of threads or ranks, so runs are bitwise identical.
void Simulation::reduce_current() {
  const Grid &g = p_.grid;
  const Box &box = this->box();
  f_.jx.zero(), f_.jy.zero(), f_.jz.zero();
  const long plane = static_cast<long>(bx_) * by_, comp = plane * bz_;
  Field *J[3] = {&f_.jx, &f_.jy, &f_.jz};
  std::vector<Halo::TileBuffer> mine, all;
  for (size_t l = 0; l < tile_ids_.size(); ++l) mine.emplace_back(tile_ids_[l], tile_j_[l].data());
  halo_->gather_currents(mine, &all);
  // Buffer index -> global cell along each direction, -1 where another rank owns the cell.
  std::vector<int> wx(bx_), wy(by_), wz(bz_);
  auto owned = [](int c, int lo, int hi) { return c >= lo && c < hi ? c : -1; };
  auto first_owned = [](const std::vector<int> &w) {
    auto it = std::find_if(w.begin(), w.end(), [](int c) { return c >= 0; });
    return it == w.end() ? -1 : *it;
  };
  for (const auto &[t, jb] : all) {
    const int tx = t % ntx_, ty = (t / ntx_) % nty_, tz = t / (ntx_ * nty_);
    const int ox = tx * p_.tile[0] - 2, oy = ty * p_.tile[1] - 2, oz = tz * p_.tile[2] - 2;
    for (int a = 0; a < bx_; ++a) wx[a] = owned(wrap(ox + a, g.nx), box.lo[0], box.hi[0]);
    for (int b = 0; b < by_; ++b) wy[b] = owned(wrap(oy + b, g.ny), box.lo[1], box.hi[1]);
    for (int c = 0; c < bz_; ++c) wz[c] = owned(wrap(oz + c, g.nz), box.lo[2], box.hi[2]);
    // Declared: the buffer read, and the run of grid values from its first owned cell on (on one
    // rank: a buffer's worth of each component).
    hm::access(jb, static_cast<size_t>(3 * comp), Access::read);
    const int fx = first_owned(wx), fy = first_owned(wy), fz = first_owned(wz);
    if (fx >= 0 && fy >= 0 && fz >= 0)
      for (const Field *f : J) hm::access(f->data() + f->index(fx, fy, fz), static_cast<size_t>(comp), Access::read_write);
    for (int d = 0; d < 3; ++d)
      for (int c = 0; c < bz_; ++c) {
        if (wz[c] < 0) continue;
        for (int b = 0; b < by_; ++b) {
          if (wy[b] < 0) continue;
          const double *row = jb + d * comp + c * plane + b * bx_;
          double *out = &J[d]->at(0, wy[b], wz[c]);
          for (int a = 0; a < bx_; ++a)
            if (wx[a] >= 0) out[wx[a]] += row[a];
        }
      }
  }
}

// Particles that left their tile move to the tile they are in now, on this rank or another, in an
// order that does not depend on the decomposition: every tile first loses its leavers (each
// removal fills the hole from the end), then each tile gets its arrivals in the global order of
// the tiles they came from, and in their order there. The lists of leavers are per-step
// temporaries: they come from the iteration arena, reset every step.
void Simulation::redistribute() {
  struct Leaver {
    int dest;
    uint32_t index;
  };
  constexpr int R = Halo::kRecord;  // source tile, destination tile, x y z ux uy uz w id
  const size_t npeers = halo_->peers().size();
  for (Species &sp : species_) {
    const int ntiles = static_cast<int>(sp.tiles.size());
    std::vector<Leaver *> leaving(ntiles);
    std::vector<uint32_t> count(ntiles, 0);
#pragma omp parallel for schedule(dynamic)
    for (int t = 0; t < ntiles; ++t) {
      Tile &tile = sp.tiles[t];
      const size_t n = tile.size();
      if (n == 0) continue;
      const int self = tile_ids_[t];
      // Destinations first (one lookup per particle), then the list of those that leave.
      int *dest = static_cast<int *>(arena_->allocate(n * sizeof(int), alignof(int)));
      uint32_t m = 0;
      for (size_t i = 0; i < n; ++i) m += (dest[i] = tile_of(tile.x[i], tile.y[i], tile.z[i])) != self;
      count[t] = m;
      for (const double *v : {tile.x, tile.y, tile.z}) hm::access(v, n, Access::read);
      hm::access(dest, n, Access::write);
      if (m == 0) continue;
      leaving[t] = static_cast<Leaver *>(arena_->allocate(m * sizeof(Leaver), alignof(Leaver)));
      for (size_t i = 0, k = 0; i < n; ++i)
        if (dest[i] != self) leaving[t][k++] = Leaver{dest[i], static_cast<uint32_t>(i)};
      hm::access(dest, n, Access::read);
      hm::access(leaving[t], m, Access::write);
    }
    // The leavers packed, in tile order: those staying on this rank, and one message per neighbour.
    std::vector<double> local;
    std::vector<std::vector<double>> out(npeers), in;
    for (int t = 0; t < ntiles; ++t) {
      const Tile &src = sp.tiles[t];
      for (uint32_t k = 0; k < count[t]; ++k) {
        const Leaver &l = leaving[t][k];
        const int owner = comm_.parallel() ? decomposition_.owner_of_tile(l.dest) : comm_.rank();
        const int slot = owner == comm_.rank() ? -1 : halo_->peer_slot(owner);
        // A particle moves less than a cell a step (c dt < the smallest cell, cfl < 1), so it stays
        // on this rank or goes to a neighbour.
        if (owner != comm_.rank() && slot < 0)
          throw std::logic_error("a particle left for rank " + std::to_string(owner) + ", which is not a neighbour");
        std::vector<double> &to = slot < 0 ? local : out[static_cast<size_t>(slot)];
        const size_t n = l.index;
        double id;
        std::memcpy(&id, &src.id[n], sizeof id);
        to.insert(to.end(), {static_cast<double>(tile_ids_[t]), static_cast<double>(l.dest), src.x[n], src.y[n], src.z[n],
                             src.ux[n], src.uy[n], src.uz[n], src.w[n], id});
      }
      if (count[t]) {
        // Each leaver: its 8 values read and the hole filled from the end (8 reads and 8 writes).
        hm::access(leaving[t], count[t], Access::read);
        hm::access_scattered(src.x, 8 * uint64_t{count[t]}, sizeof(double), Access::read_write);
      }
    }
    for (int t = 0; t < ntiles; ++t)
      for (uint32_t k = count[t]; k-- > 0;) sp.tiles[t].remove(leaving[t][k].index);
    if (comm_.parallel()) halo_->exchange_particles(out, &in);
    // Arrivals by source tile: this rank's and each neighbour's lists are each in source-tile order
    // and no source tile is in two of them (with one rank, the local list is the order already).
    std::vector<const double *> arrivals;
    for (size_t r = 0; r < local.size(); r += R) arrivals.push_back(local.data() + r);
    for (const auto &list : in)
      for (size_t r = 0; r < list.size(); r += R) arrivals.push_back(list.data() + r);
    if (!in.empty())
      std::stable_sort(arrivals.begin(), arrivals.end(), [](const double *a, const double *b) { return a[0] < b[0]; });
    std::vector<uint32_t> arriving(ntiles, 0);
    for (const double *a : arrivals) {
      const int dest = local_tile(static_cast<int>(a[1]));
      uint64_t id;
      std::memcpy(&id, &a[9], sizeof id);
      sp.tiles[dest].push_back(a[2], a[3], a[4], a[5], a[6], a[7], a[8], id);
      ++arriving[dest];
    }
    // Each arrival's 8 values written, declared once per destination tile.
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
  halo_->fold(rho.data());
}

double Simulation::gauss_error() const {
  const Grid &g = p_.grid;
  const Box &box = this->box();
  Field rho(halo_->layout(), Where(hm::Tier::of(hm::Role::fast)));
  deposit_charge(rho);
  fill_guards(true, false);
  double worst = 0, scale = 0;
  for (int k = box.lo[2]; k < box.hi[2]; ++k)
    for (int j = box.lo[1]; j < box.hi[1]; ++j)
      for (int i = box.lo[0]; i < box.hi[0]; ++i) {
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
  worst = comm_.max(worst);
  scale = comm_.max(scale);
  double denominator = std::max(scale, floor_scale);
  return denominator > 0 ? worst / denominator : worst;
}

double Simulation::field_energy() const {
  const Grid &g = p_.grid;
  const Box &box = this->box();
  double e2 = 0, b2 = 0;
  for (const Field *f : {&f_.ex, &f_.ey, &f_.ez, &f_.bx, &f_.by, &f_.bz})
    hm::access(f->data(), static_cast<size_t>(box.cells()), Access::read);
  for (int k = box.lo[2]; k < box.hi[2]; ++k)
    for (int j = box.lo[1]; j < box.hi[1]; ++j)
      for (int i = box.lo[0]; i < box.hi[0]; ++i) {
        e2 += f_.ex.at(i, j, k) * f_.ex.at(i, j, k) + f_.ey.at(i, j, k) * f_.ey.at(i, j, k) + f_.ez.at(i, j, k) * f_.ez.at(i, j, k);
        b2 += f_.bx.at(i, j, k) * f_.bx.at(i, j, k) + f_.by.at(i, j, k) * f_.by.at(i, j, k) + f_.bz.at(i, j, k) * f_.bz.at(i, j, k);
      }
  const double dv = g.dx * g.dy * g.dz;
  return 0.5 * kEps0 * (comm_.sum(e2) + kC * kC * comm_.sum(b2)) * dv;  // B^2 / (2 mu0) = eps0 c^2 B^2 / 2
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
  return comm_.sum(e);
}

}  // namespace pic
