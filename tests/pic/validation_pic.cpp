// Longer physics runs, outside the default test command (`cmake --build build --target validation`
// or `scripts/test -L validation`).
#include <gtest/gtest.h>

#include <cmath>

#include "../../apps/pic/pic.hpp"
#include "../support.h"
#include "problems.h"

using namespace pic;

class Validation : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(hm_test::configure(""), HM_OK); }
  void TearDown() override { hm_finalize(); }
};

TEST_F(Validation, WarpXLangmuirDeckAtFullSize) {
  // Examples/Tests/langmuir/inputs_base_3d exactly: 64^3 cells over 40 um, electrons and positrons
  // of 2e24 m^-3, 1 per cell, eps = 0.01, k = 2 * 2 pi / L, cfl 1, 40 steps; Ex within 5%.
  const double n0 = 2e24, L = 40e-6, eps = 0.01;
  Params p;
  p.grid = Grid{64, 64, 64, L / 64, L / 64, L / 64};
  p.cfl = 1.0;
  const double wp = pic_test::langmuir_pair(p, n0, eps, 2, 2, 2);
  Simulation sim(p);
  for (int n = 0; n < 40; ++n) sim.step();
  const Grid &g = sim.grid();
  double k = 2 * 2 * M_PI / L, amp = eps * kMe * kC * kC * k / kQe * std::sin(wp * sim.time());
  double err = 0, ref = 0;
  for (int kk = 0; kk < g.nz; ++kk)
    for (int j = 0; j < g.ny; ++j)
      for (int i = 0; i < g.nx; ++i) {
        double th = amp * std::sin(k * (i + 0.5) * g.dx) * std::cos(k * j * g.dy) * std::cos(k * kk * g.dz);
        err = std::max(err, std::fabs(sim.fields().ex.at(i, j, kk) - th));
        ref = std::max(ref, std::fabs(th));
      }
  EXPECT_LT(err / ref, 5e-2);
  EXPECT_LT(sim.gauss_error(), 1e-11);
}

TEST_F(Validation, EnergyOver5000Steps) {
  Simulation sim(pic_test::thermal_pair_plasma(16, 8, 1e24, 0.02));
  EXPECT_LT(pic_test::energy_drift(sim, 5000, 10), 0.02) << "over five times the default test's length";
}
