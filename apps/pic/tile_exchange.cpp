// What crosses tiles and ranks every step: the tiles' current buffers summed into the grid in an
// order that makes runs bitwise identical, and particles that left their tile moved to their new
// one, on this rank or another.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "pic.hpp"

namespace pic {

namespace {

using hm::Access;

int wrap(int i, int n) { return ((i % n) + n) % n; }

}  // namespace

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
  // Buffer index -> global cell along each direction, -1 where another rank owns the cell (or,
  // along z, where another thread adds it).
  auto owned = [](int c, int lo, int hi) { return c >= lo && c < hi ? c : -1; };
  auto windows = [&](int t, int zlo, int zhi, std::vector<int> &wx, std::vector<int> &wy, std::vector<int> &wz) {
    const int tx = t % ntx_, ty = (t / ntx_) % nty_, tz = t / (ntx_ * nty_);
    const int ox = tx * p_.tile[0] - 2, oy = ty * p_.tile[1] - 2, oz = tz * p_.tile[2] - 2;
    for (int a = 0; a < bx_; ++a) wx[a] = owned(wrap(ox + a, g.nx), box.lo[0], box.hi[0]);
    for (int b = 0; b < by_; ++b) wy[b] = owned(wrap(oy + b, g.ny), box.lo[1], box.hi[1]);
    for (int c = 0; c < bz_; ++c) wz[c] = owned(wrap(oz + c, g.nz), zlo, zhi);
  };
  auto first_owned = [](const std::vector<int> &w) {
    auto it = std::find_if(w.begin(), w.end(), [](int c) { return c >= 0; });
    return it == w.end() ? -1 : *it;
  };
  {
    // Declared: each buffer read, and the run of grid values from its first owned cell on (on one
    // rank: a buffer's worth of each component).
    std::vector<int> wx(bx_), wy(by_), wz(bz_);
    for (const auto &[t, jb] : all) {
      windows(t, box.lo[2], box.hi[2], wx, wy, wz);
      hm::access(jb, static_cast<size_t>(3 * comp), Access::read);
      const int fx = first_owned(wx), fy = first_owned(wy), fz = first_owned(wz);
      if (fx >= 0 && fy >= 0 && fz >= 0)
        for (const Field *f : J) hm::access(f->data() + f->index(fx, fy, fz), static_cast<size_t>(comp), Access::read_write);
    }
  }
  // Each thread adds into its own slab of z-planes, every buffer in global tile order: each grid
  // value gets the same additions in the same order whatever the thread count.
#pragma omp parallel
  {
    const int id = omp_get_thread_num(), nt = omp_get_num_threads(), nz = box.hi[2] - box.lo[2];
    const int zlo = box.lo[2] + nz * id / nt, zhi = box.lo[2] + nz * (id + 1) / nt;
    std::vector<int> wx(bx_), wy(by_), wz(bz_);
    for (const auto &[t, jb] : all) {
      windows(t, zlo, zhi, wx, wy, wz);
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
}

// Particles that left their tile move to the tile they are in now, on this rank or another, in an
// order that does not depend on the decomposition: every tile first loses its leavers (each
// removal fills the hole from the end), then each tile gets its arrivals in the global order of
// the tiles they came from, and in their order there. The lists of leavers are per-step
// temporaries: they come from the iteration arena, reset every step.
void Simulation::redistribute() {
  const Grid &g = p_.grid;
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
      // Destinations first, then the list of those that leave. A particle whose cell is inside its
      // tile's stays (no division); only those outside look their tile up.
      const int tx = self % ntx_, ty = (self / ntx_) % nty_, tz = self / (ntx_ * nty_);
      const int lo[3] = {tx * p_.tile[0], ty * p_.tile[1], tz * p_.tile[2]};
      int *dest = static_cast<int *>(arena_->allocate(n * sizeof(int), alignof(int)));
      uint32_t m = 0;
      for (size_t i = 0; i < n; ++i) {
        const int cx = std::min(static_cast<int>(tile.x[i] * inv_dx_), g.nx - 1),
                  cy = std::min(static_cast<int>(tile.y[i] * inv_dy_), g.ny - 1),
                  cz = std::min(static_cast<int>(tile.z[i] * inv_dz_), g.nz - 1);
        const bool stays = static_cast<unsigned>(cx - lo[0]) < static_cast<unsigned>(p_.tile[0]) &&
                           static_cast<unsigned>(cy - lo[1]) < static_cast<unsigned>(p_.tile[1]) &&
                           static_cast<unsigned>(cz - lo[2]) < static_cast<unsigned>(p_.tile[2]);
        dest[i] = stays ? self : tile_of(tile.x[i], tile.y[i], tile.z[i]);
        m += !stays;
      }
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

}  // namespace pic
