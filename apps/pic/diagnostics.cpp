// Diagnostics of the state: the charge density, the error in Gauss's law, field and kinetic energy.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "pic.hpp"

namespace pic {

using hm::Access;

void Simulation::deposit_charge(Field &rho) const {
  const Grid &g = p_.grid;
  rho.zero();
  const double dv = g.dx * g.dy * g.dz;
  for (const Species &sp : species_)
    for (const Tile &tile : sp.tiles) {
      for (const double *v : {tile.x, tile.y, tile.z, tile.w}) hm::access(v, tile.n, Access::read);
      for (size_t n = 0; n < tile.size(); ++n) {
        double xn = tile.x[n] / g.dx, yn = tile.y[n] / g.dy, zn = tile.z[n] / g.dz;
        int i = static_cast<int>(std::floor(xn)), j = static_cast<int>(std::floor(yn)), k = static_cast<int>(std::floor(zn));
        double fx = xn - i, fy = yn - j, fz = zn - k, q = sp.params.charge * tile.w[n] / dv;
        double sx[2] = {1 - fx, fx}, sy[2] = {1 - fy, fy}, sz[2] = {1 - fz, fz};
        for (int c = 0; c < 2; ++c)
          for (int b = 0; b < 2; ++b)
            for (int a = 0; a < 2; ++a) rho.at(i + a, j + b, k + c) += q * sx[a] * sy[b] * sz[c];
      }
    }
  halo_->fold(rho.data());
}

double Simulation::gauss_error() const {
  const Grid &g = p_.grid;
  const Box &box = this->box();
  Field rho(halo_->layout(), Where(hm::Tier::of(hm::Role::fast)));
  deposit_charge(rho);
  fill_guards(true, false);
  double worst = 0, scale = 0;
  for (int k = box.lo[2]; k < box.hi[2]; ++k)
    for (int j = box.lo[1]; j < box.hi[1]; ++j)
      for (int i = box.lo[0]; i < box.hi[0]; ++i) {
        double div = (f_.ex.at(i, j, k) - f_.ex.at(i - 1, j, k)) / g.dx + (f_.ey.at(i, j, k) - f_.ey.at(i, j - 1, k)) / g.dy +
                     (f_.ez.at(i, j, k) - f_.ez.at(i, j, k - 1)) / g.dz;
        double r = (rho.at(i, j, k) + background_rho_) / kEps0;
        worst = std::max(worst, std::fabs(div - r));
        scale = std::max(scale, std::fabs(r));
      }
  // When the net rho is at rounding level (a neutral plasma, or one species over its background, at
  // rest), compare with a small fraction of one species' charge density instead, so that noise
  // over noise does not read as an error of 1.
  double floor_scale = 0;
  for (const Species &sp : species_) floor_scale += 1e-10 * std::fabs(sp.params.charge) * sp.params.density / kEps0;
  worst = comm_.max(worst);
  scale = comm_.max(scale);
  double denominator = std::max(scale, floor_scale);
  return denominator > 0 ? worst / denominator : worst;
}

double Simulation::field_energy() const {
  const Grid &g = p_.grid;
  const Box &box = this->box();
  for (const Field *f : {&f_.ex, &f_.ey, &f_.ez, &f_.bx, &f_.by, &f_.bz})
    hm::access(f->data(), static_cast<size_t>(box.cells()), Access::read);
  // Plane sums in parallel, added in plane order: the same bits for any thread count.
  std::vector<double> e2(static_cast<size_t>(box.extent(2))), b2(e2.size());
#pragma omp parallel for schedule(static)
  for (int k = box.lo[2]; k < box.hi[2]; ++k) {
    double e = 0, b = 0;
    for (int j = box.lo[1]; j < box.hi[1]; ++j)
      for (int i = box.lo[0]; i < box.hi[0]; ++i) {
        e += f_.ex.at(i, j, k) * f_.ex.at(i, j, k) + f_.ey.at(i, j, k) * f_.ey.at(i, j, k) + f_.ez.at(i, j, k) * f_.ez.at(i, j, k);
        b += f_.bx.at(i, j, k) * f_.bx.at(i, j, k) + f_.by.at(i, j, k) * f_.by.at(i, j, k) + f_.bz.at(i, j, k) * f_.bz.at(i, j, k);
      }
    e2[static_cast<size_t>(k - box.lo[2])] = e, b2[static_cast<size_t>(k - box.lo[2])] = b;
  }
  double e = 0, b = 0;
  for (size_t k = 0; k < e2.size(); ++k) e += e2[k], b += b2[k];
  const double dv = g.dx * g.dy * g.dz;
  return 0.5 * kEps0 * (comm_.sum(e) + kC * kC * comm_.sum(b)) * dv;  // B^2 / (2 mu0) = eps0 c^2 B^2 / 2
}

double Simulation::kinetic_energy(int s) const {
  const Species &sp = species_[static_cast<size_t>(s)];
  // Tile sums in parallel, added in tile order: the same bits for any thread count.
  std::vector<double> per_tile(sp.tiles.size());
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < sp.tiles.size(); ++i) {
    const Tile &t = sp.tiles[i];
    for (const double *v : {t.ux, t.uy, t.uz, t.w}) hm::access(v, t.n, Access::read);
    double e = 0;
    // In vectors (a fixed order for a given build): a diagnostic of every step, as cheap as it can be.
#pragma omp simd reduction(+ : e)
    for (size_t n = 0; n < t.size(); ++n) {
      double u2 = t.ux[n] * t.ux[n] + t.uy[n] * t.uy[n] + t.uz[n] * t.uz[n];
      e += t.w[n] * sp.params.mass * kC * kC * (std::sqrt(1 + u2 / (kC * kC)) - 1);
    }
    per_tile[i] = e;
  }
  double e = 0;
  for (double v : per_tile) e += v;
  return comm_.sum(e);
}

}  // namespace pic
