#include "halo.hpp"

#include <hetmem/hetmem.hpp>

#include <algorithm>
#include <chrono>
#include <set>

namespace pic {

namespace {

constexpr int kFieldTag = 101, kFoldTag = 102, kCurrentTag = 103, kParticleTag = 104;

int wrap(int i, int n) { return ((i % n) + n) % n; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Calls visit(i, j, k) for every guard cell around `box` (guard layers wide), in array order.
template <class Visit>
void for_each_guard(const Box &box, int guard, Visit visit) {
  for (int k = box.lo[2] - guard; k < box.hi[2] + guard; ++k)
    for (int j = box.lo[1] - guard; j < box.hi[1] + guard; ++j)
      for (int i = box.lo[0] - guard; i < box.hi[0] + guard; ++i)
        if (!box.contains(i, j, k)) visit(i, j, k);
}

}  // namespace

Halo::Halo(const Comm &comm, const Decomposition &decomposition, int guard, const std::array<int, 3> &buffer)
    : comm_(comm), d_(decomposition), buffer_(buffer) {
  const int me = comm.rank(), n = d_.ranks();
  const auto &cells = d_.cells();
  layout_ = FieldLayout::over(d_.box(me), guard);
  buffer_values_ = static_cast<size_t>(3) * buffer[0] * buffer[1] * buffer[2];

  // Who exchanges with whom: a rank owns a cell of another's guard layer, or a tile buffer of one
  // covers the other's cells. Made symmetric, so that every send has its receive.
  auto guard_owners = [&](int r) {
    std::set<int> owners;
    for_each_guard(d_.box(r), guard, [&](int i, int j, int k) { owners.insert(d_.owner_of_cell(i, j, k)); });
    return owners;
  };
  auto covered = [&](int r) {
    std::set<int> out;
    for (int t : d_.tiles_of(r))
      for (int c : covered_by_tile(t)) out.insert(c);
    return out;
  };
  std::set<int> peers;
  for (int r : guard_owners(me)) peers.insert(r);
  for (int r : covered(me)) peers.insert(r);
  for (int r = 0; r < n; ++r) {
    if (r == me || peers.count(r)) continue;
    if (guard_owners(r).count(me) || covered(r).count(me)) peers.insert(r);
  }
  peers.erase(me);
  peers_.assign(peers.begin(), peers.end());
  send_.resize(peers_.size()), recv_.resize(peers_.size());
  tiles_to_.resize(peers_.size()), tiles_from_.resize(peers_.size());
  current_in_.resize(peers_.size());
  out_.resize(peers_.size()), in_.resize(peers_.size());

  // Guard cells this rank receives, by owner, in its guard order.
  for_each_guard(layout_.box, guard, [&](int i, int j, int k) {
    const int owner = d_.owner_of_cell(i, j, k);
    const long at = layout_.index(i, j, k);
    if (owner == me) {
      self_to_.push_back(at);
      self_from_.push_back(layout_.index(wrap(i, cells[0]), wrap(j, cells[1]), wrap(k, cells[2])));
    } else {
      recv_[peer_slot(owner)].push_back(at);
    }
  });
  // Cells this rank sends: its cells in each peer's guard layer, in the peer's guard order.
  for (size_t p = 0; p < peers_.size(); ++p)
    for_each_guard(d_.box(peers_[p]), guard, [&](int i, int j, int k) {
      if (d_.owner_of_cell(i, j, k) == me)
        send_[p].push_back(layout_.index(wrap(i, cells[0]), wrap(j, cells[1]), wrap(k, cells[2])));
    });
  // Tile current buffers: mine to the peers they cover; the peers' that cover mine.
  for (int t : d_.tiles_of(me))
    for (int r : covered_by_tile(t))
      if (r != me) tiles_to_[peer_slot(r)].push_back(t);
  for (size_t p = 0; p < peers_.size(); ++p)
    for (int t : d_.tiles_of(peers_[p])) {
      const auto c = covered_by_tile(t);
      if (std::binary_search(c.begin(), c.end(), me)) tiles_from_[p].push_back(t);
    }
  current_values_from_.assign(peers_.size(), 0);
  for (size_t p = 0; p < peers_.size(); ++p)
    for (int t : tiles_from_[p]) for_each_in_box(t, layout_.box, [&](long) { ++current_values_from_[p]; });
}

int Halo::peer_slot(int rank) const {
  auto it = std::lower_bound(peers_.begin(), peers_.end(), rank);
  return it != peers_.end() && *it == rank ? static_cast<int>(it - peers_.begin()) : -1;
}

std::vector<int> Halo::covered_by_tile(int t) const {
  const auto n = d_.tiles();
  const int tc[3] = {t % n[0], (t / n[0]) % n[1], t / (n[0] * n[1])};
  std::set<int> along[3];  // rank coordinates along each direction
  for (int k = 0; k < 3; ++k) {
    const int per = d_.cells()[k] / d_.dims()[k];
    for (int c = tc[k] * d_.tile()[k] - 2; c < tc[k] * d_.tile()[k] - 2 + buffer_[k]; ++c)
      along[k].insert(wrap(c, d_.cells()[k]) / per);
  }
  std::vector<int> out;
  for (int pz : along[2])
    for (int py : along[1])
      for (int px : along[0]) out.push_back((pz * d_.dims()[1] + py) * d_.dims()[0] + px);
  std::sort(out.begin(), out.end());
  return out;
}

double Halo::wait(std::vector<MPI_Request> *requests) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!requests->empty()) MPI_Waitall(static_cast<int>(requests->size()), requests->data(), MPI_STATUSES_IGNORE);
  requests->clear();
  const double waited = seconds_since(t0);
  stats.wait_seconds += waited;
  return waited;
}

// Declared for the emulated tiers (hm::access): a fill reads the cells it sends or copies and
// writes the guard layer, about twice the guard layer's values per component.
void Halo::fill(std::initializer_list<double *> components) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const double *c : components) hm::access(c, static_cast<size_t>(2 * layout_.guard_cells()), hm::Access::read_write);
  const size_t nc = components.size();
  std::vector<std::vector<double>> &out = out_, &in = in_;
  std::vector<MPI_Request> requests;
  for (size_t p = 0; p < peers_.size(); ++p) {
    out[p].clear();
    in[p].resize(recv_[p].size() * nc);
    if (recv_[p].empty() && send_[p].empty()) continue;
    if (!in[p].empty()) {
      requests.emplace_back();
      MPI_Irecv(in[p].data(), static_cast<int>(in[p].size()), MPI_DOUBLE, peers_[p], kFieldTag, comm_.handle(),
                &requests.back());
    }
    for (const double *c : components)
      for (long at : send_[p]) out[p].push_back(c[at]);
    if (!out[p].empty()) {
      requests.emplace_back();
      MPI_Isend(out[p].data(), static_cast<int>(out[p].size()), MPI_DOUBLE, peers_[p], kFieldTag, comm_.handle(),
                &requests.back());
      ++stats.field_messages;
      stats.field_messages_unpacked += nc;
      stats.field_bytes += out[p].size() * sizeof(double);
    }
  }
  for (double *c : components)
    for (size_t m = 0; m < self_to_.size(); ++m) c[self_to_[m]] = c[self_from_[m]];
  const double waited = wait(&requests);
  for (size_t p = 0; p < peers_.size(); ++p) {
    const double *v = in[p].data();
    for (double *c : components)
      for (long at : recv_[p]) c[at] = *v++;
  }
  stats.field_seconds += seconds_since(t0) - waited;
}

void Halo::fold(double *component) {
  hm::access(component, static_cast<size_t>(2 * layout_.guard_cells()), hm::Access::read_write);
  std::vector<std::vector<double>> &out = out_, &in = in_;
  std::vector<MPI_Request> requests;
  for (size_t p = 0; p < peers_.size(); ++p) {
    out[p].clear();
    in[p].resize(send_[p].size());
    if (!in[p].empty()) {
      requests.emplace_back();
      MPI_Irecv(in[p].data(), static_cast<int>(in[p].size()), MPI_DOUBLE, peers_[p], kFoldTag, comm_.handle(),
                &requests.back());
    }
    for (long at : recv_[p]) out[p].push_back(component[at]);
    if (!out[p].empty()) {
      requests.emplace_back();
      MPI_Isend(out[p].data(), static_cast<int>(out[p].size()), MPI_DOUBLE, peers_[p], kFoldTag, comm_.handle(),
                &requests.back());
    }
  }
  for (size_t m = 0; m < self_to_.size(); ++m) component[self_from_[m]] += component[self_to_[m]];
  wait(&requests);
  for (size_t p = 0; p < peers_.size(); ++p)
    for (size_t m = 0; m < send_[p].size(); ++m) component[send_[p][m]] += in[p][m];
  for (long at : self_to_) component[at] = 0;
  for (const auto &list : recv_)
    for (long at : list) component[at] = 0;
}

// Calls visit(offset) for each value of tile t's buffer (3 components) whose cell lies in `box`,
// in buffer order: sender and receiver walk the same values in the same order.
template <class Visit>
void Halo::for_each_in_box(int t, const Box &box, Visit visit) const {
  const auto n = d_.tiles();
  const int tc[3] = {t % n[0], (t / n[0]) % n[1], t / (n[0] * n[1])};
  std::vector<int> inside[3];  // buffer indices along each direction whose cells are in the box
  for (int k = 0; k < 3; ++k)
    for (int a = 0; a < buffer_[k]; ++a) {
      const int c = wrap(tc[k] * d_.tile()[k] - 2 + a, d_.cells()[k]);
      if (c >= box.lo[k] && c < box.hi[k]) inside[k].push_back(a);
    }
  const long plane = static_cast<long>(buffer_[0]) * buffer_[1], comp = plane * buffer_[2];
  for (int d = 0; d < 3; ++d)
    for (int c : inside[2])
      for (int b : inside[1])
        for (int a : inside[0]) visit(d * comp + c * plane + b * buffer_[0] + a);
}

void Halo::gather_currents(const std::vector<TileBuffer> &mine, std::vector<TileBuffer> *all) {
  const auto t0 = std::chrono::steady_clock::now();
  // Only the values of a buffer that fall in the receiver's box travel; the receiver puts them
  // back in place in a whole buffer (its other values are never read).
  std::vector<std::vector<double>> &out = out_, &in = in_;
  std::vector<MPI_Request> requests;
  for (size_t p = 0; p < peers_.size(); ++p) {
    out[p].clear();
    in[p].resize(current_values_from_[p]);
    if (!in[p].empty()) {
      requests.emplace_back();
      MPI_Irecv(in[p].data(), static_cast<int>(in[p].size()), MPI_DOUBLE, peers_[p], kCurrentTag, comm_.handle(),
                &requests.back());
    }
    if (tiles_to_[p].empty()) continue;
    const Box to = d_.box(peers_[p]);
    size_t m = 0;
    for (int t : tiles_to_[p]) {  // both lists in global order
      while (mine[m].first != t) ++m;
      const double *buffer = mine[m].second;
      for_each_in_box(t, to, [&](long at) { out[p].push_back(buffer[at]); });
    }
    requests.emplace_back();
    MPI_Isend(out[p].data(), static_cast<int>(out[p].size()), MPI_DOUBLE, peers_[p], kCurrentTag, comm_.handle(),
              &requests.back());
    ++stats.current_messages;
    stats.current_bytes += out[p].size() * sizeof(double);
  }
  const double waited = wait(&requests);
  *all = mine;
  for (size_t p = 0; p < peers_.size(); ++p) {
    current_in_[p].resize(tiles_from_[p].size() * buffer_values_);
    const double *v = in[p].data();
    for (size_t m = 0; m < tiles_from_[p].size(); ++m) {
      double *buffer = current_in_[p].data() + m * buffer_values_;
      for_each_in_box(tiles_from_[p][m], layout_.box, [&](long at) { buffer[at] = *v++; });
      all->emplace_back(tiles_from_[p][m], buffer);
    }
  }
  std::stable_sort(all->begin(), all->end(), [](const TileBuffer &a, const TileBuffer &b) { return a.first < b.first; });
  stats.current_seconds += seconds_since(t0) - waited;
}

void Halo::exchange_particles(const std::vector<std::vector<double>> &out, std::vector<std::vector<double>> *in) {
  const auto t0 = std::chrono::steady_clock::now();
  in->assign(peers_.size(), {});
  std::vector<MPI_Request> requests;
  // Every neighbour gets a message, empty when no particle goes its way: the receiver learns the
  // count from the message itself.
  for (size_t p = 0; p < peers_.size(); ++p) {
    requests.emplace_back();
    MPI_Isend(out[p].data(), static_cast<int>(out[p].size()), MPI_DOUBLE, peers_[p], kParticleTag, comm_.handle(),
              &requests.back());
    ++stats.particle_messages;
    stats.particle_bytes += out[p].size() * sizeof(double);
    stats.particles_sent += out[p].size() / kRecord;
  }
  const auto w0 = std::chrono::steady_clock::now();
  for (size_t p = 0; p < peers_.size(); ++p) {
    MPI_Status status;
    MPI_Probe(peers_[p], kParticleTag, comm_.handle(), &status);
    int count = 0;
    MPI_Get_count(&status, MPI_DOUBLE, &count);
    (*in)[p].resize(static_cast<size_t>(count));
    MPI_Recv((*in)[p].data(), count, MPI_DOUBLE, peers_[p], kParticleTag, comm_.handle(), MPI_STATUS_IGNORE);
  }
  const double probing = seconds_since(w0);
  stats.wait_seconds += probing;
  const double waited = probing + wait(&requests);
  stats.particle_seconds += seconds_since(t0) - waited;
}

}  // namespace pic
