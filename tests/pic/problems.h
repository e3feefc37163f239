// Problems shared by the PIC tests and the validation runs.
#pragma once
#include <cmath>

#include "../../apps/pic/pic.hpp"

namespace pic_test {

// A thermal electron-positron plasma with cells one Debye length wide.
inline pic::Params thermal_pair_plasma(int cells, int tile, double n0, double uth) {
  using namespace pic;
  const double wp = std::sqrt(2 * n0 * kQe * kQe / (kEps0 * kMe));
  const double debye = uth * kC / wp;
  Params p;
  p.grid = Grid{cells, cells, cells, debye, debye, debye};
  p.tile[0] = p.tile[1] = p.tile[2] = tile;
  p.cfl = 0.5;
  SpeciesParams e;
  e.density = n0;
  e.ppc[0] = e.ppc[1] = e.ppc[2] = 2;
  e.u_th = uth;
  SpeciesParams pos = e;
  pos.charge = kQe;
  p.species = {e, pos};
  return p;
}

// Electrons and positrons of density n0 each, 1 per cell, displaced in opposite directions by a
// Langmuir perturbation of amplitude eps with mode numbers (mx, my, mz) over the box. Returns the
// plasma frequency of the pair, sqrt(2 n0 e^2 / (eps0 m)).
inline double langmuir_pair(pic::Params &p, double n0, double eps, int mx, int my, int mz) {
  using namespace pic;
  const double wp = std::sqrt(2 * n0 * kQe * kQe / (kEps0 * kMe));
  SpeciesParams e;
  e.density = n0;
  e.langmuir_eps = eps;
  e.langmuir_modes[0] = mx;
  e.langmuir_modes[1] = my;
  e.langmuir_modes[2] = mz;
  e.langmuir_kp = wp / kC;
  SpeciesParams pos = e;
  pos.name = "positrons";
  pos.charge = kQe;
  pos.langmuir_sign = -1;
  p.species = {e, pos};
  return wp;
}

// Largest relative drift of field + kinetic energy over `steps`, sampled every `every` steps.
inline double energy_drift(pic::Simulation &sim, int steps, int every) {
  auto total = [&] { return sim.field_energy() + sim.kinetic_energy(0) + sim.kinetic_energy(1); };
  const double e0 = total();
  double worst = 0;
  for (int n = 0; n < steps; ++n) {
    sim.step();
    if (n % every == 0 || n + 1 == steps) worst = std::max(worst, std::fabs(total() - e0) / e0);
  }
  return worst;
}

}  // namespace pic_test
