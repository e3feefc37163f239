// One pass over the particles: gather E and B, push, deposit the current into each tile's buffer
// (particle_kernel.hpp: the scalar or the vectorized kernel, as hetmem.kernel says). The tiles in
// parallel, one thread per tile.
#include <omp.h>

#include <algorithm>

#include "particle_kernel.hpp"
#include "pic.hpp"

namespace pic {

using hm::Access;

void Simulation::push_and_deposit() {
  const Grid &g = p_.grid;
  fill_guards(true, true);
  const int ntiles = static_cast<int>(tile_ids_.size());
  for (auto &buf : tile_j_) {
    std::fill(buf.begin(), buf.end(), 0.0);
    hm::access(buf, Access::write);
  }
  const size_t tile_cells = static_cast<size_t>(p_.tile[0]) * p_.tile[1] * p_.tile[2];
  const auto kernel = p_.kernel == "scalar" ? push_deposit_scalar : push_deposit_simd;
  for (Species &sp : species_) {
    const double q = sp.params.charge, m = sp.params.mass;
    PushConstants k{};
    k.ex = f_.ex.data(), k.ey = f_.ey.data(), k.ez = f_.ez.data();
    k.bx = f_.bx.data(), k.by = f_.by.data(), k.bz = f_.bz.data();
    k.sy = f_.ex.stride_y(), k.sz = f_.ex.stride_z(), k.origin = f_.ex.index(0, 0, 0);
    k.idx = 1 / g.dx, k.idy = 1 / g.dy, k.idz = 1 / g.dz;
    k.lx = g.lx(), k.ly = g.ly(), k.lz = g.lz();
    k.dt = dt_, k.qmdt2 = q * dt_ / (2 * m);
    k.jfx = q / (dt_ * g.dy * g.dz), k.jfy = q / (dt_ * g.dx * g.dz), k.jfz = q / (dt_ * g.dx * g.dy);
    k.vay = p_.pusher == "vay";
    k.buf_x = bx_, k.buf_plane = static_cast<long>(bx_) * by_, k.buf_comp = k.buf_plane * bz_;
    // Field data for particle n + k prefetched while particle n is computed (k from the prefetch
    // model under hetmem-static+prefetch and hetmem, or HM_PREFETCH_DISTANCE; 0: none).
    k.prefetch_ahead = static_cast<size_t>(hm_prefetch_distance("gather+push+deposit", ns_per_particle_));
    // The tiles in batches: staged in the migration space by helper threads under hetmem, at home
    // otherwise (docs/streaming.md); the kernel sees the same bytes either way.
    hm::TileStream &stream = *sp.stream;
    stream.sweep(0, static_cast<size_t>(ntiles));
    for (size_t first, last; stream.next(first, last);) {
#pragma omp parallel for schedule(dynamic)
    for (int t = static_cast<int>(first); t < static_cast<int>(last); ++t) {
      const int tg = tile_ids_[t], tx = tg % ntx_, ty = (tg / ntx_) % nty_, tz = tg / (ntx_ * nty_);
      // Buffer origin: two cells below the tile's first cell.
      const TileWork work{sp.tiles[t].in(stream.acquire(static_cast<size_t>(t))), tile_j_[t].data(),
                          {tx * p_.tile[0] - 2, ty * p_.tile[1] - 2, tz * p_.tile[2] - 2}};
      kernel(k, work);
      // Positions and momenta read and written, weights read; the tile's current buffer updated;
      // the field values around the tile's cells gathered (its share of each component).
      const TileView &tile = work.tile;
      tile.declare(Access::read_write, false);
      if (tile.n) hm::access(tile.w, tile.n, Access::read);
      hm::access(tile_j_[t], Access::read_write);
      const long origin = f_.ex.index(tx * p_.tile[0], ty * p_.tile[1], tz * p_.tile[2]);
      for (const double *f : {k.ex, k.ey, k.ez, k.bx, k.by, k.bz}) hm::access(f + origin, tile_cells, Access::read);
      stream.release(static_cast<size_t>(t), true);  // positions and momenta changed
    }
    }
  }
}

}  // namespace pic
