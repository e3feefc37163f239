// The whole state of a run in global order (pic.hpp, Snapshot): gathered on rank 0 for output
// and checkpoints, and taken apart again by every rank on restart, whatever the rank counts.
#include <cstring>

#include "pic.hpp"

namespace pic {

namespace {

// A particle id travels among doubles bit for bit.
double id_bits(uint64_t id) {
  double d;
  std::memcpy(&d, &id, sizeof d);
  return d;
}
uint64_t bits_id(double d) {
  uint64_t id;
  std::memcpy(&id, &d, sizeof id);
  return id;
}

}  // namespace

void Simulation::gather(Snapshot *out) const {
  const Box &b = box();
  const Field *fields[Snapshot::kFields] = {&f_.ex, &f_.ey, &f_.ez, &f_.bx, &f_.by, &f_.bz};
  // This rank's part, packed: the fields of its box; per species its tiles' counts, then each
  // tile's particles (x y z ux uy uz w id).
  std::vector<double> mine;
  for (const Field *f : fields) {
    hm::access(f->data(), static_cast<size_t>(b.cells()), hm::Access::read);
    for (int k = b.lo[2]; k < b.hi[2]; ++k)
      for (int j = b.lo[1]; j < b.hi[1]; ++j)
        for (int i = b.lo[0]; i < b.hi[0]; ++i) mine.push_back(f->at(i, j, k));
  }
  for (const Species &sp : species_) {
    for (const Tile &t : sp.tiles) mine.push_back(static_cast<double>(t.size()));
    for (const Tile &t : sp.tiles) {
      t.declare(hm::Access::read, true);
      for (const double *col : {t.x, t.y, t.z, t.ux, t.uy, t.uz, t.w}) mine.insert(mine.end(), col, col + t.size());
      for (size_t n = 0; n < t.size(); ++n) mine.push_back(id_bits(t.id[n]));
    }
  }
  std::vector<std::vector<double>> parts = comm_.gather(mine);
  *out = Snapshot();
  if (comm_.rank() != 0) return;

  const Grid &g = p_.grid;
  for (auto &f : out->fields) f.assign(static_cast<size_t>(g.cells()), 0.0);
  // Where each rank's species data starts, and each global tile's particles: (rank, offset, count).
  struct Span {
    int rank = 0;
    size_t at = 0, n = 0;
  };
  std::vector<size_t> cursor(parts.size());
  for (int r = 0; r < comm_.size(); ++r) {
    const Box rb = decomposition_.box(r);
    size_t at = 0;
    for (auto &f : out->fields)
      for (int k = rb.lo[2]; k < rb.hi[2]; ++k)
        for (int j = rb.lo[1]; j < rb.hi[1]; ++j)
          for (int i = rb.lo[0]; i < rb.hi[0]; ++i) f[(static_cast<size_t>(k) * g.ny + j) * g.nx + i] = parts[r][at++];
    cursor[r] = at;
  }
  const int global_tiles = decomposition_.global_tiles();
  out->species.resize(species_.size());
  for (size_t s = 0; s < species_.size(); ++s) {
    std::vector<Span> spans(static_cast<size_t>(global_tiles));
    for (int r = 0; r < comm_.size(); ++r) {
      const std::vector<int> tiles = decomposition_.tiles_of(r);
      size_t counts = cursor[r], at = cursor[r] + tiles.size();
      for (size_t l = 0; l < tiles.size(); ++l) {
        const size_t n = static_cast<size_t>(parts[r][counts + l]);
        spans[static_cast<size_t>(tiles[l])] = Span{r, at, n};
        at += 8 * n;
      }
      cursor[r] = at;
    }
    Snapshot::Particles &pp = out->species[s];
    for (const Span &span : spans) {
      const double *v = parts[span.rank].data() + span.at;
      pp.tile_counts.push_back(span.n);
      for (int c = 0; c < 7; ++c) pp.col[c].insert(pp.col[c].end(), v + c * span.n, v + (c + 1) * span.n);
      for (size_t n = 0; n < span.n; ++n) pp.id.push_back(bits_id(v[7 * span.n + n]));
    }
  }
}

bool Simulation::adopt(const Snapshot &snap, std::string *error) {
  const Grid &g = p_.grid;
  const size_t cells = static_cast<size_t>(g.cells());
  for (const auto &f : snap.fields)
    if (f.size() != cells) return *error = "its fields are not of this grid's size", false;
  if (snap.species.size() != species_.size())
    return *error = "it has " + std::to_string(snap.species.size()) + " species, this input " +
                    std::to_string(species_.size()), false;
  const size_t global_tiles = static_cast<size_t>(decomposition_.global_tiles());
  std::vector<std::vector<size_t>> first(species_.size());  // each global tile's first particle
  for (size_t s = 0; s < species_.size(); ++s) {
    const Snapshot::Particles &pp = snap.species[s];
    if (pp.tile_counts.size() != global_tiles)
      return *error = "species '" + species_[s].params.name + "' has particle counts for " +
                      std::to_string(pp.tile_counts.size()) + " tiles, this grid has " + std::to_string(global_tiles),
             false;
    size_t total = 0;
    for (uint64_t c : pp.tile_counts) first[s].push_back(total), total += c;
    for (const auto &c : pp.col)
      if (c.size() != total) return *error = "the particles of species '" + species_[s].params.name + "' are incomplete", false;
    if (pp.id.size() != total) return *error = "the particle ids of species '" + species_[s].params.name + "' are incomplete", false;
  }
  const Box &b = box();
  Field *fields[Snapshot::kFields] = {&f_.ex, &f_.ey, &f_.ez, &f_.bx, &f_.by, &f_.bz};
  for (int c = 0; c < Snapshot::kFields; ++c) {
    for (int k = b.lo[2]; k < b.hi[2]; ++k)
      for (int j = b.lo[1]; j < b.hi[1]; ++j)
        for (int i = b.lo[0]; i < b.hi[0]; ++i)
          fields[c]->at(i, j, k) = snap.fields[c][(static_cast<size_t>(k) * g.ny + j) * g.nx + i];
    hm::access(fields[c]->data(), fields[c]->size_with_guards(), hm::Access::write);
  }
  for (size_t s = 0; s < species_.size(); ++s) {
    const Snapshot::Particles &pp = snap.species[s];
    for (size_t l = 0; l < species_[s].tiles.size(); ++l) {
      const size_t t = static_cast<size_t>(tile_ids_[l]), n = pp.tile_counts[t], at = first[s][t];
      Tile &tile = species_[s].tiles[l];
      tile.n = 0;
      tile.reserve(n + n / 16 + 8);
      for (size_t k = at; k < at + n; ++k)
        tile.push_back(pp.col[0][k], pp.col[1][k], pp.col[2][k], pp.col[3][k], pp.col[4][k], pp.col[5][k], pp.col[6][k],
                       pp.id[k]);
      tile.declare(hm::Access::write, true);
    }
  }
  return true;
}

}  // namespace pic
