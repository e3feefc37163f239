// How hetmem-pic splits its grid over processes (docs/pic.md, "Running on several processes").
//
// Comm: the processes of a run. Under an MPI launcher (mpirun, srun) MPI_COMM_WORLD; otherwise
// this process alone, with no MPI call made, so a single-process run needs no MPI runtime.
//
// Decomposition: the grid's tiles split into PX x PY x PZ equal boxes of whole tiles, one per
// rank (rank = (pz PY + py) PX + px). Every rank knows every box, so who sends what to whom is
// computed, never negotiated.
//
// Halo: the messages of a step. Guard cells of E and B filled from their owners, with every
// component of a field for one neighbour packed into one message; tile current buffers sent to
// the ranks whose cells they cover, so that each grid point adds its tiles' currents in global
// tile order; particles that leave a rank's box packed per destination. Ranks that are the same
// process (a direction with one rank, periodic) copy instead of sending.
#pragma once

#include <mpi.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pic {

class Comm {
 public:
  // Starts MPI when an MPI launcher started this process (launched_ranks() > 1); a no-op
  // otherwise. Call once, first thing in main.
  static void init(int *argc, char ***argv);
  static void finalize();
  static const Comm &world();
  // Processes an MPI launcher started this one among, from its environment (1 when none did).
  static int launched_ranks();

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool parallel() const { return size_ > 1; }
  MPI_Comm handle() const { return comm_; }
  // Collectives; with one process they return the argument.
  double sum(double v) const;
  double max(double v) const;
  long sum(long v) const;
  void sum(std::vector<uint64_t> *values) const;  // element by element, in place
  // The same bytes on every rank as on `root` (broadcast); for one process, nothing.
  void broadcast(void *data, size_t bytes, int root = 0) const;
  // true on every rank when `ok` is true on every rank.
  bool all(bool ok) const;
  // Rank 0's `ok` and *error on every rank (for what only rank 0 did: writing a file).
  bool agree(bool ok, std::string *error) const;

 private:
  int rank_ = 0, size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// Cells [lo, hi) along x, y, z, in global cell coordinates.
struct Box {
  std::array<int, 3> lo{}, hi{};
  int extent(int d) const { return hi[d] - lo[d]; }
  long cells() const { return static_cast<long>(extent(0)) * extent(1) * extent(2); }
  bool contains(int i, int j, int k) const {
    return i >= lo[0] && i < hi[0] && j >= lo[1] && j < hi[1] && k >= lo[2] && k < hi[2];
  }
};

class Decomposition {
 public:
  // `ranks` boxes over a grid of `cells` in tiles of `tile` cells. `dims` 0 0 0 chooses: the
  // split of the tile grid into `ranks` boxes with the least surface (the least halo), ties to
  // the split with more ranks along z, then along y (whole planes of
  // tiles, contiguous in memory). false with *error naming what does not divide or fit.
  static bool make(const std::array<int, 3> &cells, const std::array<int, 3> &tile, int ranks,
                   const std::array<int, 3> &dims, Decomposition *out, std::string *error);

  int ranks() const { return dims_[0] * dims_[1] * dims_[2]; }
  const std::array<int, 3> &dims() const { return dims_; }
  const std::array<int, 3> &cells() const { return cells_; }
  const std::array<int, 3> &tile() const { return tile_; }
  std::array<int, 3> tiles() const { return {cells_[0] / tile_[0], cells_[1] / tile_[1], cells_[2] / tile_[2]}; }
  int global_tiles() const { auto t = tiles(); return t[0] * t[1] * t[2]; }
  Box box(int rank) const;
  // The rank owning a cell (any integers: wrapped periodically).
  int owner_of_cell(int i, int j, int k) const;
  // The rank owning global tile t (tiles numbered x fastest).
  int owner_of_tile(int t) const;
  // Global tile indices of `rank`'s tiles, in global order (which is also their order within the box).
  std::vector<int> tiles_of(int rank) const;

 private:
  std::array<int, 3> cells_{}, tile_{}, dims_{1, 1, 1};
};

// A block of a dataset in a file: where it starts and how many elements along each dimension
// (unsigned long long: HDF5's hsize_t).
struct Block {
  std::vector<unsigned long long> start, count;
};
using Blocks = std::vector<Block>;

// Where a value of a field with `guard` layers around `box` lives in its array: x fastest, indexed
// by global cell coordinates (the box's first cell is not at 0 unless the box starts the grid).
struct FieldLayout {
  Box box;
  int guard = 1;
  long sx = 0, sy = 0, sz = 0;  // extents with guards
  long origin = 0;              // the index of global cell (0, 0, 0), which may lie outside the array
  static FieldLayout over(const Box &box, int guard);
  long index(int i, int j, int k) const { return (static_cast<long>(k) * sy + j) * sx + i + origin; }
  size_t size() const { return static_cast<size_t>(sx) * sy * sz; }
  long guard_cells() const { return sx * sy * sz - box.cells(); }
};

// Per-step message counters (one rank's view).
struct ExchangeStats {
  uint64_t field_messages = 0, field_bytes = 0;        // guard fills of E and B (packed)
  uint64_t field_messages_unpacked = 0;                // what one message per component would have taken
  uint64_t current_messages = 0, current_bytes = 0;    // tile current buffers
  uint64_t particle_messages = 0, particle_bytes = 0;  // leaving particles
  uint64_t particles_sent = 0;
  // Packing, copying and unpacking each kind; waiting for neighbours (the messages in flight, and
  // a neighbour still computing: load imbalance) is counted apart.
  double field_seconds = 0, current_seconds = 0, particle_seconds = 0;
  double wait_seconds = 0;
};

}  // namespace pic
