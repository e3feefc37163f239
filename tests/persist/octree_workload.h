// The test trees of the octree suites: version k refines around a sphere whose radius grows with k.
#pragma once
#include <algorithm>
#include <cmath>

#include "hetmem/hetmem.h"
#include "persist/octree.h"

namespace hm_test {

using hm::persist::Octree;

// Refines the leaves that the sphere of radius r around the centre crosses.
template <int Dim>
bool crosses_sphere(const typename Octree<Dim>::Leaf &l, double r) {
  const double size = std::ldexp(1.0, -static_cast<int>(l.level));
  double nearest = 0, farthest = 0;
  for (int d = 0; d < Dim; ++d) {
    double lo = std::ldexp(static_cast<double>(l.coord[d]), -Octree<Dim>::kMaxLevel) - 0.5, hi = lo + size;
    double n = lo > 0 ? lo : (hi < 0 ? hi : 0);
    double f = std::max(std::fabs(lo), std::fabs(hi));
    nearest += n * n;
    farthest += f * f;
  }
  return std::sqrt(nearest) <= r && std::sqrt(farthest) >= r;
}

// Version k of the test tree: a sphere of radius 0.1 + 0.02 k refined to level 4, values set.
template <int Dim>
int advance(Octree<Dim> &tree, int k) {
  double r = 0.1 + 0.02 * k;
  for (int level = 0; level < 4; ++level) {
    int rc = tree.refine([&](const typename Octree<Dim>::Leaf &l) { return l.level < 4 && crosses_sphere<Dim>(l, r); });
    if (rc != HM_OK) return rc;
  }
  double p[3] = {0.25, 0.5, 0.75};
  return tree.set_value(p, k);
}

}  // namespace hm_test
