#include "domain.hpp"

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace pic {

namespace {

Comm g_world;
bool g_mpi_started = false;

int wrap(int i, int n) { return ((i % n) + n) % n; }

}  // namespace

// ------------------------------------------------------------------------------------------------
int Comm::launched_ranks() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"}) {
    const char *v = std::getenv(name);
    if (v && std::atoi(v) > 1) return std::atoi(v);
  }
  return 1;
}

void Comm::init(int *argc, char ***argv) {
  if (g_mpi_started || launched_ranks() <= 1) return;
  int provided = 0;
  // Threads compute (OpenMP) but only the main thread calls MPI.
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  g_mpi_started = true;
  g_world.comm_ = MPI_COMM_WORLD;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world.rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world.size_);
}

void Comm::finalize() {
  if (g_mpi_started) MPI_Finalize();
  g_mpi_started = false;
}

const Comm &Comm::world() { return g_world; }

double Comm::sum(double v) const {
  double out = v;
  if (parallel()) MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_SUM, comm_);
  return out;
}

double Comm::max(double v) const {
  double out = v;
  if (parallel()) MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, comm_);
  return out;
}

long Comm::sum(long v) const {
  long out = v;
  if (parallel()) MPI_Allreduce(&v, &out, 1, MPI_LONG, MPI_SUM, comm_);
  return out;
}

void Comm::broadcast(void *data, size_t bytes, int root) const {
  if (parallel()) MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_);
}

void Comm::sum(std::vector<uint64_t> *values) const {
  if (parallel())
    MPI_Allreduce(MPI_IN_PLACE, values->data(), static_cast<int>(values->size()), MPI_UINT64_T, MPI_SUM, comm_);
}

bool Comm::all(bool ok) const {
  int v = ok ? 1 : 0, out = v;
  if (parallel()) MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_MIN, comm_);
  return out == 1;
}

bool Comm::agree(bool ok, std::string *error) const {
  if (!parallel()) return ok;
  int good = ok ? 1 : 0;
  broadcast(&good, sizeof good);
  unsigned long length = good ? 0 : error->size();
  broadcast(&length, sizeof length);
  error->resize(length);
  broadcast(error->data(), length);
  return good == 1;
}

// ------------------------------------------------------------------------------------------------
FieldLayout FieldLayout::over(const Box &box, int guard) {
  FieldLayout l;
  l.box = box;
  l.guard = guard;
  l.sx = box.extent(0) + 2 * guard, l.sy = box.extent(1) + 2 * guard, l.sz = box.extent(2) + 2 * guard;
  l.origin = -((static_cast<long>(box.lo[2] - guard) * l.sy + (box.lo[1] - guard)) * l.sx + (box.lo[0] - guard));
  return l;
}

// ------------------------------------------------------------------------------------------------
bool Decomposition::make(const std::array<int, 3> &cells, const std::array<int, 3> &tile, int ranks,
                         const std::array<int, 3> &dims, Decomposition *out, std::string *error) {
  Decomposition d;
  d.cells_ = cells;
  d.tile_ = tile;
  const std::array<int, 3> tiles = d.tiles();
  const long total = static_cast<long>(tiles[0]) * tiles[1] * tiles[2];
  auto text = [](const std::array<int, 3> &v) {
    return std::to_string(v[0]) + " " + std::to_string(v[1]) + " " + std::to_string(v[2]);
  };
  if (ranks > total) {
    *error = std::to_string(ranks) + " ranks, but the grid has only " + std::to_string(total) + " tiles (" + text(tiles) +
             "): each rank needs at least one tile; use fewer ranks or a smaller hetmem.tile_size";
    return false;
  }
  if (dims[0] || dims[1] || dims[2]) {
    for (int k = 0; k < 3; ++k)
      if (dims[k] < 1 || tiles[k] % dims[k] != 0) {
        *error = "hetmem.decomposition = " + text(dims) + " does not divide the tile grid (" + text(tiles) + " tiles of " +
                 text(tile) + " cells): each count must divide the tiles along its direction";
        return false;
      }
    if (static_cast<long>(dims[0]) * dims[1] * dims[2] != ranks) {
      *error = "hetmem.decomposition = " + text(dims) + " makes " + std::to_string(dims[0] * dims[1] * dims[2]) +
               " boxes, but the run has " + std::to_string(ranks) + " rank(s)";
      return false;
    }
    d.dims_ = dims;
  } else {
    // Every split of the ranks that divides the tile grid; the least surface of a box wins.
    double best = std::numeric_limits<double>::max();
    bool found = false;
    for (int pz = ranks; pz >= 1; --pz)  // more ranks along z, then y, first: ties keep it
      for (int py = ranks / pz; py >= 1; --py) {
        if (ranks % (pz * py) != 0) continue;
        const int px = ranks / (pz * py);
        if (tiles[0] % px || tiles[1] % py || tiles[2] % pz) continue;
        const double ex = double(cells[0]) / px, ey = double(cells[1]) / py, ez = double(cells[2]) / pz;
        const double surface = ex * ey + ey * ez + ez * ex;
        if (surface < best * (1 - 1e-12)) best = surface, d.dims_ = {px, py, pz}, found = true;
      }
    if (!found) {
      *error = std::to_string(ranks) + " ranks cannot split the tile grid (" + text(tiles) +
               " tiles) into equal boxes of whole tiles; use a rank count that divides it, or a hetmem.tile_size "
               "that gives such a grid";
      return false;
    }
  }
  *out = d;
  return true;
}

Box Decomposition::box(int rank) const {
  const int p[3] = {rank % dims_[0], (rank / dims_[0]) % dims_[1], rank / (dims_[0] * dims_[1])};
  Box b;
  for (int k = 0; k < 3; ++k) {
    const int per = cells_[k] / dims_[k];  // whole tiles: the tile grid divides by dims
    b.lo[k] = p[k] * per;
    b.hi[k] = b.lo[k] + per;
  }
  return b;
}

int Decomposition::owner_of_cell(int i, int j, int k) const {
  const int c[3] = {wrap(i, cells_[0]), wrap(j, cells_[1]), wrap(k, cells_[2])};
  int p[3];
  for (int d = 0; d < 3; ++d) p[d] = c[d] / (cells_[d] / dims_[d]);
  return (p[2] * dims_[1] + p[1]) * dims_[0] + p[0];
}

int Decomposition::owner_of_tile(int t) const {
  const auto n = tiles();
  return owner_of_cell((t % n[0]) * tile_[0], ((t / n[0]) % n[1]) * tile_[1], (t / (n[0] * n[1])) * tile_[2]);
}

std::vector<int> Decomposition::tiles_of(int rank) const {
  const Box b = box(rank);
  const auto n = tiles();
  std::vector<int> out;
  for (int tz = b.lo[2] / tile_[2]; tz < b.hi[2] / tile_[2]; ++tz)
    for (int ty = b.lo[1] / tile_[1]; ty < b.hi[1] / tile_[1]; ++ty)
      for (int tx = b.lo[0] / tile_[0]; tx < b.hi[0] / tile_[0]; ++tx) out.push_back((tz * n[1] + ty) * n[0] + tx);
  return out;
}

}  // namespace pic
