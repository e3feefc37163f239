// A rank's share of the run's state in the order the files hold it (pic.hpp, LocalState): what
// the openPMD output and the checkpoints write, and what a restart reads back, on any number of
// ranks.
#include "pic.hpp"

namespace pic {

Blocks particle_runs(const std::vector<uint64_t> &tile_counts, const std::vector<int> &tiles) {
  std::vector<uint64_t> first(tile_counts.size() + 1, 0);
  for (size_t t = 0; t < tile_counts.size(); ++t) first[t + 1] = first[t] + tile_counts[t];
  Blocks runs;
  for (int t : tiles) {
    const uint64_t at = first[static_cast<size_t>(t)], n = tile_counts[static_cast<size_t>(t)];
    if (n == 0) continue;
    if (!runs.empty() && runs.back().start[0] + runs.back().count[0] == at) runs.back().count[0] += n;
    else runs.push_back(Block{{at}, {n}});
  }
  return runs;
}

void Simulation::collect(LocalState *out) const {
  const Box &b = box();
  const Field *fields[LocalState::kFields] = {&f_.ex, &f_.ey, &f_.ez, &f_.bx, &f_.by, &f_.bz};
  *out = LocalState();
  out->box = b;
  for (int c = 0; c < LocalState::kFields; ++c) {
    hm::access(fields[c]->data(), static_cast<size_t>(b.cells()), hm::Access::read);
    out->fields[c].reserve(static_cast<size_t>(b.cells()));
    for (int k = b.lo[2]; k < b.hi[2]; ++k)
      for (int j = b.lo[1]; j < b.hi[1]; ++j)
        for (int i = b.lo[0]; i < b.hi[0]; ++i) out->fields[c].push_back(fields[c]->at(i, j, k));
  }
  out->species.resize(species_.size());
  for (size_t s = 0; s < species_.size(); ++s) {
    LocalState::Particles &pp = out->species[s];
    // Every tile's count, known on every rank: each rank fills its own, the sum over ranks the rest.
    pp.tile_counts.assign(static_cast<size_t>(decomposition_.global_tiles()), 0);
    for (size_t l = 0; l < species_[s].tiles.size(); ++l)
      pp.tile_counts[static_cast<size_t>(tile_ids_[l])] = species_[s].tiles[l].size();
    comm_.sum(&pp.tile_counts);
    for (uint64_t c : pp.tile_counts) pp.total += c;
    pp.runs = particle_runs(pp.tile_counts, tile_ids_);
    for (const Tile &t : species_[s].tiles) {
      t.declare(hm::Access::read, true);
      const double *cols[7] = {t.x, t.y, t.z, t.ux, t.uy, t.uz, t.w};
      for (int c = 0; c < 7; ++c) pp.col[c].insert(pp.col[c].end(), cols[c], cols[c] + t.size());
      pp.id.insert(pp.id.end(), t.id, t.id + t.size());
    }
  }
}

bool Simulation::adopt(const LocalState &state, std::string *error) {
  const Box &b = box();
  const size_t cells = static_cast<size_t>(b.cells());
  for (const auto &f : state.fields)
    if (f.size() != cells) return *error = "its fields do not cover this rank's cells", false;
  if (state.species.size() != species_.size())
    return *error = "it has " + std::to_string(state.species.size()) + " species, this input " +
                    std::to_string(species_.size()), false;
  for (size_t s = 0; s < species_.size(); ++s) {
    const LocalState::Particles &pp = state.species[s];
    size_t mine = 0;
    for (int t : tile_ids_) mine += pp.tile_counts.size() > static_cast<size_t>(t) ? pp.tile_counts[static_cast<size_t>(t)] : 0;
    if (pp.tile_counts.size() != static_cast<size_t>(decomposition_.global_tiles()) || pp.id.size() != mine)
      return *error = "the particles of species '" + species_[s].params.name + "' do not match its tile counts", false;
    for (const auto &c : pp.col)
      if (c.size() != mine) return *error = "the particles of species '" + species_[s].params.name + "' are incomplete", false;
  }
  Field *fields[LocalState::kFields] = {&f_.ex, &f_.ey, &f_.ez, &f_.bx, &f_.by, &f_.bz};
  for (int c = 0; c < LocalState::kFields; ++c) {
    size_t at = 0;
    for (int k = b.lo[2]; k < b.hi[2]; ++k)
      for (int j = b.lo[1]; j < b.hi[1]; ++j)
        for (int i = b.lo[0]; i < b.hi[0]; ++i) fields[c]->at(i, j, k) = state.fields[c][at++];
    hm::access(fields[c]->data(), fields[c]->size_with_guards(), hm::Access::write);
  }
  // The guard layers are filled from their owners by the next step's exchanges.
  e_guards_ = b_guards_ = false;
  for (size_t s = 0; s < species_.size(); ++s) {
    const LocalState::Particles &pp = state.species[s];
    size_t at = 0;
    for (size_t l = 0; l < species_[s].tiles.size(); ++l) {
      const size_t n = pp.tile_counts[static_cast<size_t>(tile_ids_[l])];
      Tile &tile = species_[s].tiles[l];
      tile.n = 0;
      tile.reserve(n + n / 16 + 8);
      for (size_t k = at; k < at + n; ++k)
        tile.push_back(pp.col[0][k], pp.col[1][k], pp.col[2][k], pp.col[3][k], pp.col[4][k], pp.col[5][k], pp.col[6][k],
                       pp.id[k]);
      at += n;
      tile.declare(hm::Access::write, true);
    }
  }
  return true;
}

}  // namespace pic
