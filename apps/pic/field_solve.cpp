// The field solve: Yee's scheme on the staggered grid, B by half steps and E by whole ones, over
// z-planes in parallel, with the guard layers filled from the neighbours first.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "pic.hpp"

namespace pic {

using hm::Access;

// Fills the guard layers of E and/or B that do not hold their owners' present values, in one
// exchange (one message per neighbour for all the components it fills).
void Simulation::fill_guards(bool e, bool b) const {
  e = e && !e_guards_, b = b && !b_guards_;
  Fields &f = const_cast<Fields &>(f_);  // the guard layers only: a copy of the owners' cells
  if (e && b) halo_->fill({f.ex.data(), f.ey.data(), f.ez.data(), f.bx.data(), f.by.data(), f.bz.data()});
  else if (e) halo_->fill({f.ex.data(), f.ey.data(), f.ez.data()});
  else if (b) halo_->fill({f.bx.data(), f.by.data(), f.bz.data()});
  e_guards_ = e_guards_ || e;
  b_guards_ = b_guards_ || b;
}

void Simulation::half_b(double h) {
  const Grid &g = p_.grid;
  const Box &b = box();
  fill_guards(true, false);
  b_guards_ = false;  // B changes below
  const double rx = h / g.dx, ry = h / g.dy, rz = h / g.dz;
  sweep_planes({&f_.ex, &f_.ey, &f_.ez}, {&f_.bx, &f_.by, &f_.bz}, [&](int k) {
    for (int j = b.lo[1]; j < b.hi[1]; ++j)
      for (int i = b.lo[0]; i < b.hi[0]; ++i) {
        f_.bx.at(i, j, k) -= ry * (f_.ez.at(i, j + 1, k) - f_.ez.at(i, j, k)) - rz * (f_.ey.at(i, j, k + 1) - f_.ey.at(i, j, k));
        f_.by.at(i, j, k) -= rz * (f_.ex.at(i, j, k + 1) - f_.ex.at(i, j, k)) - rx * (f_.ez.at(i + 1, j, k) - f_.ez.at(i, j, k));
        f_.bz.at(i, j, k) -= rx * (f_.ey.at(i + 1, j, k) - f_.ey.at(i, j, k)) - ry * (f_.ex.at(i, j + 1, k) - f_.ex.at(i, j, k));
      }
  });
}

// Runs plane(k) for every z-plane, in parallel over static chunks; each thread then declares what
// it did to the planes it swept: read the `in` components, read and updated the `out` ones.
template <class Plane>
void Simulation::sweep_planes(std::initializer_list<const Field *> in, std::initializer_list<const Field *> out,
                              Plane plane) {
  const Box &b = box();
  const size_t plane_cells = static_cast<size_t>(b.extent(0)) * b.extent(1);
#pragma omp parallel
  {
    size_t planes = 0;
    int first = 0;
#pragma omp for schedule(static)
    for (int k = b.lo[2]; k < b.hi[2]; ++k) {
      if (planes++ == 0) first = k;
      plane(k);
    }
    // A static schedule gives each thread one run of planes: declared from its first one.
    if (planes) {
      for (const Field *f : in) hm::access(f->data() + f->index(b.lo[0], b.lo[1], first), planes * plane_cells, Access::read);
      for (const Field *f : out)
        hm::access(f->data() + f->index(b.lo[0], b.lo[1], first), planes * plane_cells, Access::read_write);
    }
  }
}

void Simulation::full_e(double dt) {
  const Grid &g = p_.grid;
  const Box &b = box();
  fill_guards(false, true);
  e_guards_ = false;  // E changes below
  const double c2 = kC * kC, rx = c2 * dt / g.dx, ry = c2 * dt / g.dy, rz = c2 * dt / g.dz, rj = dt / kEps0;
  sweep_planes({&f_.bx, &f_.by, &f_.bz, &f_.jx, &f_.jy, &f_.jz}, {&f_.ex, &f_.ey, &f_.ez}, [&](int k) {
    for (int j = b.lo[1]; j < b.hi[1]; ++j)
      for (int i = b.lo[0]; i < b.hi[0]; ++i) {
        f_.ex.at(i, j, k) += ry * (f_.bz.at(i, j, k) - f_.bz.at(i, j - 1, k)) - rz * (f_.by.at(i, j, k) - f_.by.at(i, j, k - 1)) -
                             rj * f_.jx.at(i, j, k);
        f_.ey.at(i, j, k) += rz * (f_.bx.at(i, j, k) - f_.bx.at(i, j, k - 1)) - rx * (f_.bz.at(i, j, k) - f_.bz.at(i - 1, j, k)) -
                             rj * f_.jy.at(i, j, k);
        f_.ez.at(i, j, k) += rx * (f_.by.at(i, j, k) - f_.by.at(i - 1, j, k)) - ry * (f_.bx.at(i, j, k) - f_.bx.at(i, j - 1, k)) -
                             rj * f_.jz.at(i, j, k);
      }
  });
}

void Simulation::field_step_vacuum() {
  half_b(0.5 * dt_);
  full_e(dt_);
  half_b(0.5 * dt_);
  time_ += dt_;
  ++steps_;
}

}  // namespace pic
