// The messages of a hetmem-pic step between the ranks of a decomposition (domain.hpp). Every
// list of who sends which values to whom is computed once, from the boxes every rank knows; each
// exchange then posts one receive and one send per neighbouring rank and copies where a rank is
// its own neighbour (a direction with one rank, periodic).
#pragma once

#include <initializer_list>
#include <utility>
#include <vector>

#include "domain.hpp"

namespace pic {

class Halo {
 public:
  // `buffer`: the extents of a tile's current buffer (the tile and two cells on every side), whose
  // first cell is two cells below the tile's first.
  Halo(const Comm &comm, const Decomposition &decomposition, int guard, const std::array<int, 3> &buffer);

  const FieldLayout &layout() const { return layout_; }
  // The other ranks this one exchanges with, ascending.
  const std::vector<int> &peers() const { return peers_; }

  // Fills the guard layer of these components (same layout) from the cells' owners: one message
  // per neighbour carries every component.
  void fill(std::initializer_list<double *> components);
  // Adds what was deposited into the guard layer onto the owners' cells and zeroes the guards.
  void fold(double *component);

  // Tile current buffers (3 components of buffer extents each), by global tile index.
  using TileBuffer = std::pair<int, const double *>;
  // Sends each of `mine` to the ranks whose cells its buffer covers and receives theirs: `all`
  // gets this rank's and the received buffers that cover its cells, in global tile order (the
  // received ones point into storage kept until the next call).
  void gather_currents(const std::vector<TileBuffer> &mine, std::vector<TileBuffer> *all);

  // Particles: records of kRecord doubles. `out[p]` goes to peers()[p]; `in[p]` gets what
  // peers()[p] sent (in its order).
  static constexpr int kRecord = 10;
  void exchange_particles(const std::vector<std::vector<double>> &out, std::vector<std::vector<double>> *in);
  int peer_slot(int rank) const;  // index into peers(), -1 for this rank or a non-neighbour

  ExchangeStats stats;  // accumulated over the run

 private:
  // The ranks whose cells tile t's current buffer covers, ascending.
  std::vector<int> covered_by_tile(int t) const;
  double wait(std::vector<MPI_Request> *requests);  // seconds waited, also added to stats
  template <class Visit>
  void for_each_in_box(int t, const Box &box, Visit visit) const;

  const Comm &comm_;
  Decomposition d_;
  FieldLayout layout_;
  std::array<int, 3> buffer_;
  size_t buffer_values_ = 0;
  std::vector<int> peers_;
  // Guard fills: per peer, the indices sent (owned cells, in the peer's guard order) and received
  // (this rank's guard cells owned by the peer); self_* for the cells this rank is its own image of.
  std::vector<std::vector<long>> send_, recv_;
  std::vector<long> self_from_, self_to_;
  // Currents: per peer, the local tiles sent (global indices) and the tiles expected.
  std::vector<std::vector<int>> tiles_to_, tiles_from_;
  std::vector<size_t> current_values_from_;  // values each peer's message of currents holds
  std::vector<std::vector<double>> current_in_;
  // Message buffers, per peer, kept from one exchange to the next (no allocation a step).
  std::vector<std::vector<double>> out_, in_;
};

}  // namespace pic
