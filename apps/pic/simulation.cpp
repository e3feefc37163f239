#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "pic.hpp"

// The simulation's state and set-up: classes, fields, tiles, particles loaded, the step and the
// sort by cell. The field solve is field_solve.cpp, the particle kernel particle_push.cpp, the
// current reduction and particle redistribution tile_exchange.cpp, diagnostics diagnostics.cpp.
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

// Every kernel declares what it does to the particle and field arrays (hm::access), so
// that an emulated slow tier charges the device time for it (docs/emulation.md); on DRAM and
// real tiers a declaration is a lookup. Particle arrays are declared per tile by the thread that
// works on the tile, field arrays per thread for the planes it sweeps.
using hm::Access;

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
  const int cells[3] = {g.nx, g.ny, g.nz};
  for (int d = 0; d < 3; ++d)
    if (p_.tile[d] < 1 || cells[d] % p_.tile[d] != 0)
      throw std::invalid_argument("tiles of " + std::to_string(p_.tile[d]) + " cells along " + "xyz"[d] +
                                  " do not divide the grid's " + std::to_string(cells[d]) + " cells");
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
      tile_j_.emplace_back(static_cast<size_t>(3) * bx_ * by_ * bz_ + kTileBufferPad, 0.0, currents);
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
      // A counting sort over the tile's cells (stable, one pass to count and one to place).
      const int tg = tile_ids_[t], tx = tg % ntx_, ty = (tg / ntx_) % nty_, tz = tg / (ntx_ * nty_);
      const int T0 = p_.tile[0], T1 = p_.tile[1], T2 = p_.tile[2];
      const long lo[3] = {static_cast<long>(tx) * T0, static_cast<long>(ty) * T1, static_cast<long>(tz) * T2};
      auto local = [](long c, long first, int extent) { return static_cast<uint32_t>(std::clamp(c - first, 0L, extent - 1L)); };
      std::vector<uint32_t> cell(n), start(static_cast<size_t>(T0) * T1 * T2 + 1, 0), order(n);
      for (size_t i = 0; i < n; ++i) {
        const long cx = static_cast<long>(tile.x[i] / g.dx), cy = static_cast<long>(tile.y[i] / g.dy),
                   cz = static_cast<long>(tile.z[i] / g.dz);
        cell[i] = (local(cz, lo[2], T2) * T1 + local(cy, lo[1], T1)) * T0 + local(cx, lo[0], T0);
        ++start[cell[i] + 1];
      }
      for (size_t c = 1; c < start.size(); ++c) start[c] += start[c - 1];
      for (size_t i = 0; i < n; ++i) order[start[cell[i]]++] = static_cast<uint32_t>(i);
      std::vector<uint64_t> copy(n);
      auto permute = [&](auto *v) {
        std::memcpy(copy.data(), v, n * sizeof(uint64_t));
        for (size_t i = 0; i < n; ++i) std::memcpy(v + i, &copy[order[i]], sizeof(uint64_t));
      };
      permute(tile.x), permute(tile.y), permute(tile.z), permute(tile.ux), permute(tile.uy), permute(tile.uz);
      permute(tile.w), permute(tile.id);
      // Positions read for the keys; every array copied out and gathered back in key order.
      tile.declare(Access::read_write, true);
      hm::access_scattered(tile.x, 8 * uint64_t{n}, sizeof(double), Access::read);
    }
  }
}

}  // namespace pic
