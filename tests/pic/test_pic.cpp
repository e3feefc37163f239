// Physics of the reference PIC code against analytic results, at stated tolerances.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "../../apps/pic/pic.hpp"
#include "../support.h"
#include "problems.h"

using namespace pic;

namespace {

Params cube(int n, double length) {
  Params p;
  p.grid = Grid{n, n, n, length / n, length / n, length / n};
  p.tile[0] = p.tile[1] = p.tile[2] = std::min(8, n);
  return p;
}

// A 16^3 cube of thermal electrons alone (as preset:L0): 2x2x2 particles per cell, u_th 0.05.
Params thermal_electrons() {
  Params p = cube(16, 16e-6);
  SpeciesParams e;
  e.density = 1e24;
  e.ppc[0] = e.ppc[1] = e.ppc[2] = 2;
  e.u_th = 0.05;
  p.species = {e};
  return p;
}

// The largest charge-conservation error over `steps` steps (Simulation::gauss_error after each).
double worst_gauss_error(Simulation &sim, int steps) {
  double worst = 0;
  for (int n = 0; n < steps; ++n) {
    sim.step();
    worst = std::max(worst, sim.gauss_error());
  }
  return worst;
}

// Leapfrog sequences of an eigenmode are exact cosines: cos(theta) = (A[n+1] + A[n-1]) / (2 A[n]),
// fitted in the least-squares sense over the whole series.
double measured_theta(const std::vector<double> &a) {
  double num = 0, den = 0;
  for (size_t n = 1; n + 1 < a.size(); ++n) {
    num += a[n] * (a[n + 1] + a[n - 1]);
    den += 2 * a[n] * a[n];
  }
  return std::acos(num / den);
}

}  // namespace

class Pic : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(hm_test::configure(""), HM_OK); }
  void TearDown() override { hm_finalize(); }
};

TEST_F(Pic, VacuumModesFollowTheYeeDispersionRelation) {
  // Two standing waves: Ey(x) with k along x, and Ez(x, y) with k in the x-y plane.
  for (int variant = 0; variant < 2; ++variant) {
    Params p = cube(16, 1e-3);
    p.cfl = 0.7;
    Simulation sim(p);
    const Grid &g = sim.grid();
    double kx = 2 * M_PI * 3 / g.lx(), ky = variant ? 2 * M_PI * 2 / g.ly() : 0;
    for (int k = 0; k < g.nz; ++k)
      for (int j = 0; j < g.ny; ++j)
        for (int i = 0; i < g.nx; ++i) {
          if (variant == 0) sim.fields().ey.at(i, j, k) = std::sin(kx * i * g.dx);
          else sim.fields().ez.at(i, j, k) = std::sin(kx * i * g.dx) * std::sin(ky * j * g.dy);
        }
    std::vector<double> amplitude;
    for (int n = 0; n < 60; ++n) {
      double a = 0;
      for (int j = 0; j < g.ny; ++j)
        for (int i = 0; i < g.nx; ++i)
          a += variant == 0 ? sim.fields().ey.at(i, j, 3) * std::sin(kx * i * g.dx)
                            : sim.fields().ez.at(i, j, 3) * std::sin(kx * i * g.dx) * std::sin(ky * j * g.dy);
      amplitude.push_back(a);
      sim.field_step_vacuum();
    }
    double dt = sim.dt();
    double rhs = std::pow(std::sin(kx * g.dx / 2) / g.dx, 2) + std::pow(std::sin(ky * g.dy / 2) / g.dy, 2);
    double theory = 2 * std::asin(kC * dt * std::sqrt(rhs));  // omega dt from the Yee relation
    double measured = measured_theta(amplitude);
    EXPECT_NEAR(measured / theory, 1.0, 1e-6) << "variant " << variant;
    // And it is not the continuum answer: the Yee relation is what is being checked.
    double continuum = kC * dt * std::sqrt(kx * kx + ky * ky);
    EXPECT_GT(std::fabs(measured / continuum - 1), 1e-4);
  }
}

TEST_F(Pic, EsirkepovConservesCharge) {
  Params p = cube(16, 16e-6);
  p.steps = 20;
  SpeciesParams e;
  e.density = 1e24;
  e.ppc[0] = e.ppc[1] = e.ppc[2] = 2;
  e.u_th = 0.05;
  SpeciesParams ion = e;
  ion.name = "positrons";
  ion.charge = kQe;
  ion.u_th = 0.02;
  p.species = {e, ion};
  Simulation sim(p);
  const double worst = worst_gauss_error(sim, 20);
  EXPECT_LT(worst, 1e-11) << "max|div E - rho/eps0| / max|rho/eps0|";
}

TEST_F(Pic, SingleSpeciesIsNeutralisedByAnExplicitBackground) {
  // Electrons alone (as preset:L0): the uniform background of opposite charge is part of Gauss's
  // law, so div E = (rho + rho_background) / eps0 holds to rounding from the first step.
  const Params p = thermal_electrons();
  const SpeciesParams &e = p.species[0];
  Simulation sim(p);
  EXPECT_NEAR(sim.background_charge_density(), -e.charge * e.density, 1e-12 * std::fabs(e.charge * e.density));
  const double worst = worst_gauss_error(sim, 20);
  EXPECT_LT(worst, 1e-11) << "max|div E - (rho + rho_bg)/eps0| / max|(rho + rho_bg)/eps0|";
}

TEST_F(Pic, LangmuirOscillationMatchesTheAnalyticField) {
  // WarpX's 3D Langmuir test (inputs_base_3d: 64^3 cells over 40 um, electrons and positrons of
  // 2e24 m^-3 each at 1 per cell, eps = 0.01, k = 2 * 2 pi / L, cfl 1, 40 steps) on half the box:
  // 32^3 cells over 20 um with k = 2 pi / L, which keeps k dx, dx and omega_p dt exactly as there.
  const double n0 = 2e24, L = 20e-6, eps = 0.01;
  Params p = cube(32, L);
  p.cfl = 1.0;
  const double wp = pic_test::langmuir_pair(p, n0, eps, 1, 1, 1);
  Simulation sim(p);
  const int steps = 40;
  for (int n = 0; n < steps; ++n) sim.step();
  const Grid &g = sim.grid();
  double k = 2 * M_PI / L, t = sim.time();
  double amp = eps * kMe * kC * kC * k / kQe * std::sin(wp * t);
  double err = 0, ref = 0;
  for (int kk = 0; kk < g.nz; ++kk)
    for (int j = 0; j < g.ny; ++j)
      for (int i = 0; i < g.nx; ++i) {
        double x = (i + 0.5) * g.dx, y = j * g.dy, z = kk * g.dz;  // Ex sits at (i+1/2, j, k)
        double th = amp * std::sin(k * x) * std::cos(k * y) * std::cos(k * z);
        err = std::max(err, std::fabs(sim.fields().ex.at(i, j, kk) - th));
        ref = std::max(ref, std::fabs(th));
      }
  EXPECT_LT(err / ref, 5e-2) << "max|Ex - Ex_theory| / max|Ex_theory| at t = " << t;
}

TEST_F(Pic, LangmuirFrequencyIsTheNumericalPlasmaFrequency) {
  // A plane mode along x on a thin box, followed for two periods.
  const double n0 = 1e24, L = 40e-6;
  Params p;
  p.grid = Grid{32, 8, 8, L / 32, L / 32, L / 32};
  p.tile[0] = p.tile[1] = p.tile[2] = 8;
  p.cfl = 0.9;
  const double wp = pic_test::langmuir_pair(p, n0, 0.005, 1, 0, 0);
  Simulation sim(p);
  const Grid &g = sim.grid();
  double k = 2 * M_PI / L;
  std::vector<double> a;
  int steps = static_cast<int>(2 * 2 * M_PI / (wp * sim.dt()));
  for (int n = 0; n <= steps; ++n) {
    double s = 0;
    for (int i = 0; i < g.nx; ++i) s += sim.fields().ex.at(i, 2, 2) * std::sin(k * (i + 0.5) * g.dx);
    a.push_back(s);
    sim.step();
  }
  // Zero crossings of sin(omega t): linear interpolation between the samples around each.
  std::vector<double> crossings;
  for (size_t n = 1; n < a.size(); ++n)
    if ((a[n - 1] < 0) != (a[n] < 0) && n > 1) crossings.push_back((n - 1) + a[n - 1] / (a[n - 1] - a[n]));
  ASSERT_GE(crossings.size(), 3u);
  double half_period_steps = (crossings.back() - crossings.front()) / static_cast<double>(crossings.size() - 1);
  double measured = M_PI / (half_period_steps * sim.dt());
  double numerical = 2 / sim.dt() * std::asin(wp * sim.dt() / 2);
  EXPECT_NEAR(measured / numerical, 1.0, 0.01);
}

namespace {
// Fields and particles after 10 steps of a thermal plasma, as raw doubles.
std::vector<double> thermal_state(int threads, hm_stream_stats_t *stream = nullptr) {
    omp_set_num_threads(threads);
    Simulation sim(thermal_electrons());
    for (int n = 0; n < 10; ++n) sim.step();
    std::vector<double> state;
    const Grid &g = sim.grid();
    for (int k = 0; k < g.nz; ++k)
      for (int j = 0; j < g.ny; ++j)
        for (int i = 0; i < g.nx; ++i) state.push_back(sim.fields().ex.at(i, j, k)), state.push_back(sim.fields().bz.at(i, j, k));
    for (const Tile &t : sim.species()[0].tiles)
      for (size_t n = 0; n < t.size(); ++n) state.push_back(t.x[n]), state.push_back(t.uz[n]), state.push_back(double(t.id[n]));
    if (stream) *stream = sim.species()[0].stream->stats();
    return state;
}

size_t bitwise_differences(const std::vector<double> &a, const std::vector<double> &b) {
  size_t differ = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(double)) != 0;
  return differ;
}
}  // namespace

TEST_F(Pic, OneAndTwoThreadsGiveBitwiseIdenticalResults) {
  std::vector<double> one = thermal_state(1), two = thermal_state(2);
  omp_set_num_threads(omp_get_num_procs());
  ASSERT_EQ(one.size(), two.size());
  EXPECT_EQ(bitwise_differences(one, two), 0u) << "values that differ between 1 and 2 threads";
}

// Placement changes where the bytes live, never the physics: every policy, with a fast budget
// that holds only part of the problem, gives the same fields and particles to the bit.
TEST_F(Pic, EveryPolicyGivesBitwiseIdenticalResults) {
  ASSERT_EQ(hm_test::configure("capacity=emul:optane"), HM_OK);
  std::vector<double> reference = thermal_state(2);
  const std::vector<std::string> policies = hm_test::policies();
  ASSERT_GE(policies.size(), 9u);
  for (const std::string &name : policies) {
    const char *policy = name.c_str();
    // all-fast is the upper bound: it runs without the budget; the others with a quarter of it.
    ASSERT_EQ(hm_test::configure("capacity=emul:optane", "HM_FAST_BUDGET", name == "all-fast" ? "0" : "1M"), HM_OK);
    ASSERT_EQ(hm_policy_select(policy), HM_OK) << hm_last_error();
    std::vector<double> state = thermal_state(2);
    EXPECT_EQ(bitwise_differences(reference, state), 0u) << "policy " << policy;
    hm_tier_t capacity = hm_test::tier("capacity");
    if (name != "all-fast") {
      EXPECT_GT(hm_test::stats(capacity).allocs, 0u) << policy << " put part of the problem on the capacity tier";
    }
  }
  unsetenv("HM_FAST_BUDGET");
  omp_set_num_threads(omp_get_num_procs());
  ASSERT_EQ(hm_test::configure(""), HM_OK);
}

// The full runtime stages the particle tiles through the migration space in batches, copied by
// helper threads and written back after each batch: the same simulation to the bit, whatever the
// number of helpers (0: the computing thread copies), with every tile staged and written back.
TEST_F(Pic, StreamedRunsGiveBitwiseIdenticalResultsForEveryHelperCount) {
  ASSERT_EQ(hm_test::configure("capacity=emul:optane"), HM_OK);
  ASSERT_EQ(hm_policy_select("all-fast"), HM_OK);
  std::vector<double> reference = thermal_state(2);
  // 16^3 cells, 8 particles a cell: 8 tiles of about 280 KiB; a 2 MiB migration space stages two a batch.
  setenv("HM_MIGRATION_SPACE", "2M", 1);
  for (const char *helpers : {"", "0", "1", "2", "3"}) {
    if (*helpers) setenv("HM_HELPERS", helpers, 1);
    else unsetenv("HM_HELPERS");
    ASSERT_EQ(hm_test::configure("capacity=emul:optane", "HM_FAST_BUDGET", "4M"), HM_OK);
    ASSERT_EQ(hm_policy_select("hetmem"), HM_OK) << hm_last_error();
    hm_stream_stats_t st{};
    std::vector<double> state = thermal_state(2, &st);
    EXPECT_EQ(bitwise_differences(reference, state), 0u) << "HM_HELPERS='" << helpers << "'";
    EXPECT_EQ(st.sweeps, 10u);
    // HM_HELPERS stages every sweep after the observed step. The model measures in the first
    // sweep after it (one batch staged, the rest at home) and may decide that staging does not
    // pay, and the tiles then stay at home; or stage from the next sweep, and withdraw after a
    // whole staged sweep slower than working at home.
    hm_helper_model_t model{};
    ASSERT_EQ(hm_helper_model("gather+push+deposit", &model), HM_OK) << hm_last_error();
    const bool staged = *helpers || model.stage;
    const bool withdrawn = !*helpers && !model.stage && model.t_staged_seen > 0;
    EXPECT_EQ(st.staging, staged ? 1 : 0);
    if (*helpers) {
      EXPECT_EQ(st.tiles_in, 9u * 8) << "every tile of the sweeps staged";
    } else if (withdrawn) {  // the measuring sweep's first batch and one whole sweep staged
      EXPECT_GE(model.t_staged_seen, model.t_inplace);
      EXPECT_GT(st.tiles_in, 8u);
      EXPECT_LT(st.tiles_in, 2u * 8);
    } else if (staged) {  // the measuring sweep's first batch, then every later sweep whole
      EXPECT_GT(st.tiles_in, 8u * 8);
      EXPECT_LE(st.tiles_in, 8u * 8 + 4);
    } else {  // the model timed a batch staged and the rest at home, then left the tiles at home
      EXPECT_GT(st.tiles_in, 0u);
      EXPECT_LT(st.tiles_in, 8u);
    }
    EXPECT_EQ(st.tiles_out, st.tiles_in) << "the push modifies every tile";
    if (*helpers) {
      EXPECT_EQ(st.helpers, std::atoi(helpers));
    }
    hm_space_stats_t mig{};
    ASSERT_EQ(hm_space_stats(HM_SPACE_MIGRATION, &mig), HM_OK);
    // Staging declined or withdrawn: the slots went and the space's 2 MiB went to the free space
    // (its high water is what the staged sweeps held).
    EXPECT_LE(mig.high_water, staged ? mig.budget : uint64_t{2} << 20);
    if (!staged) {
      EXPECT_EQ(mig.in_use, 0u);
    }
    hm_tier_stats_t fast = hm_test::stats(hm_test::tier("fast"));
    EXPECT_LE(fast.high_water, fast.budget);
  }
  unsetenv("HM_HELPERS");
  unsetenv("HM_MIGRATION_SPACE");
  omp_set_num_threads(omp_get_num_procs());
  ASSERT_EQ(hm_test::configure(""), HM_OK);
}

TEST_F(Pic, TotalEnergyDriftsLessThanOnePercentOver1000Steps) {
  // A thermal electron-positron plasma with dx about the Debye length.
  Simulation sim(pic_test::thermal_pair_plasma(8, 4, 1e24, 0.02));
  EXPECT_LT(pic_test::energy_drift(sim, 1000, 1), 0.01) << "largest relative drift of field + kinetic energy";
  EXPECT_GT(sim.field_energy(), 0) << "the plasma's thermal fluctuations do make fields";
}

TEST_F(Pic, TwoStreamGrowthRateMatchesColdBeamTheory) {
  // Two cold electron beams at +-v0 on a neutralising positron background that does not move
  // (mass x 1e9). Cold theory with relativistic beams: omega_b' = omega_b / gamma0^(3/2); at
  // k v0 = (sqrt(3)/2) omega_b' the growth rate is gamma_max = omega_b' / 2.
  const double n_beam = 5e23, beta = 0.2, g0 = 1 / std::sqrt(1 - beta * beta), v0 = beta * kC;
  const double wb = std::sqrt(n_beam * kQe * kQe / (kEps0 * kMe)) / std::pow(g0, 1.5);
  const double k = std::sqrt(3.0) / 2 * wb / v0;
  const double L = 2 * M_PI / k;
  Params p;
  p.grid = Grid{32, 1, 1, L / 32, 4 * L, 4 * L};  // wide transverse cells: dt set by dx
  p.tile[0] = 8;
  p.tile[1] = p.tile[2] = 1;
  p.cfl = 0.9;
  SpeciesParams a;
  a.density = n_beam;
  a.ppc[0] = 64;
  a.u_drift[0] = beta * g0;
  a.langmuir_eps = 1e-5;  // a small seed of the unstable mode
  a.langmuir_modes[0] = 1;
  a.langmuir_kp = wb / kC;
  SpeciesParams b = a;
  b.u_drift[0] = -beta * g0;
  SpeciesParams bg;
  bg.charge = kQe;
  bg.mass = kMe * 1e9;
  bg.density = 2 * n_beam;
  p.species = {a, b, bg};
  Simulation sim(p);
  const Grid &g = sim.grid();
  std::vector<double> t, amp;
  const int steps = static_cast<int>(16 / (wb * sim.dt()));
  for (int n = 0; n < steps; ++n) {
    sim.step();
    double s = 0, c = 0;
    for (int i = 0; i < g.nx; ++i) {
      s += sim.fields().ex.at(i, 0, 0) * std::sin(k * (i + 0.5) * g.dx);
      c += sim.fields().ex.at(i, 0, 0) * std::cos(k * (i + 0.5) * g.dx);
    }
    t.push_back(sim.time() * wb);
    amp.push_back(std::log(std::sqrt(s * s + c * c)));
  }
  // Growth rate: least-squares slope of log|E_k| over the linear phase, from 2 e-folds above the
  // start until 2 e-folds below saturation.
  size_t peak = static_cast<size_t>(std::max_element(amp.begin(), amp.end()) - amp.begin());
  size_t lo = 0, hi = peak;
  while (lo < peak && amp[lo] < amp[0] + 2) ++lo;
  while (hi > lo && amp[hi] > amp[peak] - 2) --hi;
  ASSERT_GT(hi, lo + 10) << "no linear phase: the mode did not grow";
  double mt = 0, ma = 0, stt = 0, sta = 0;
  for (size_t i = lo; i <= hi; ++i) mt += t[i], ma += amp[i];
  mt /= static_cast<double>(hi - lo + 1), ma /= static_cast<double>(hi - lo + 1);
  for (size_t i = lo; i <= hi; ++i) stt += (t[i] - mt) * (t[i] - mt), sta += (t[i] - mt) * (amp[i] - ma);
  EXPECT_NEAR(sta / stt, 0.5, 0.05) << "growth rate in units of omega_b' (cold theory: 1/2), fitted over "
                                    << t[lo] << ".." << t[hi];
}

TEST_F(Pic, ExBDriftAtGamma20IsExactWithVayAndWrongWithBoris) {
  // WarpX's particle_pusher test: u_y = 19.975 c (gamma about 20), Bz = 1 T, Ex = -v_y Bz: the
  // force vanishes and the particle must stay at x = 0 over 10^4 steps (|x| < 1e-3 m).
  auto drift = [](const char *pusher) {
    Params p;
    p.grid = Grid{8, 8, 8, 1.0, 1.0, 1.0};
    p.tile[0] = p.tile[1] = p.tile[2] = 8;
    p.cfl = 0.9;
    p.pusher = pusher;
    p.static_fields = true;
    SpeciesParams e;
    e.density = 1.0;
    e.ppc[0] = e.ppc[1] = e.ppc[2] = 1;
    p.species = {e};
    Simulation sim(p);
    // Keep one particle, at x = 4.5 (cell centre), moving along y.
    Tile &home = sim.species()[0].tiles[0];
    while (home.size() > 1) home.remove(home.size() - 1);
    home.x[0] = 4.5, home.y[0] = 4.5, home.z[0] = 4.5;
    const double uy = 19.975 * kC, gamma = std::sqrt(1 + 19.975 * 19.975), vy = uy / gamma;
    home.ux[0] = home.uz[0] = 0, home.uy[0] = uy;
    const Grid &g = sim.grid();
    for (int k = -1; k <= g.nz; ++k)
      for (int j = -1; j <= g.ny; ++j)
        for (int i = -1; i <= g.nx; ++i) sim.fields().bz.at(i, j, k) = 1.0, sim.fields().ex.at(i, j, k) = -vy * 1.0;
    double worst = 0;
    for (int n = 0; n < 10000; ++n) {
      sim.step();
      for (const Tile &t : sim.species()[0].tiles)
        if (t.size()) worst = std::max(worst, std::fabs(t.x[0] - 4.5));
    }
    return worst;
  };
  EXPECT_LT(drift("vay"), 1e-3);
  EXPECT_GT(drift("boris"), 1e-3) << "Boris is known to fail this test (WarpX documents it)";
}

// The vectorized kernel (hetmem.kernel = simd, the default) and the scalar one do the same
// arithmetic in a different order (the gather's and the deposition's sums): after 10 steps of a
// thermal pair plasma, with either pusher, particles and fields agree to rounding, 1e-12 relative
// to their scales (cell size, thermal momentum, largest field value), and both conserve charge.
TEST_F(Pic, ScalarAndSimdKernelsAgreeToRounding) {
  for (const char *pusher : {"boris", "vay"}) {
    struct Result {
      std::vector<double> pos, mom, fields;
      double gauss;
    };
    auto run = [&](const char *kernel) {
      // Tiles of 125 cells: after the first step their counts end in partial vectors.
      Params p = pic_test::thermal_pair_plasma(15, 5, 1e24, 0.05);
      p.pusher = pusher;
      p.kernel = kernel;
      Simulation sim(p);
      for (int n = 0; n < 10; ++n) sim.step();
      Result r;
      for (const Species &sp : sim.species())
        for (const Tile &t : sp.tiles)
          for (size_t n = 0; n < t.size(); ++n) {
            r.pos.insert(r.pos.end(), {t.x[n], t.y[n], t.z[n]});
            r.mom.insert(r.mom.end(), {t.ux[n], t.uy[n], t.uz[n]});
          }
      const Grid &g = sim.grid();
      for (const Field *f : {&sim.fields().ex, &sim.fields().ey, &sim.fields().ez, &sim.fields().bx,
                             &sim.fields().by, &sim.fields().bz, &sim.fields().jx, &sim.fields().jy, &sim.fields().jz})
        for (int k = 0; k < g.nz; ++k)
          for (int j = 0; j < g.ny; ++j)
            for (int i = 0; i < g.nx; ++i) r.fields.push_back(f->at(i, j, k));
      r.gauss = sim.gauss_error();
      return std::make_pair(r, g.dx);
    };
    const auto [scalar, dx] = run("scalar");
    const auto [simd, unused] = run("simd");
    ASSERT_EQ(scalar.pos.size(), simd.pos.size()) << pusher;
    ASSERT_EQ(scalar.fields.size(), simd.fields.size()) << pusher;
    auto worst = [](const std::vector<double> &a, const std::vector<double> &b, double scale) {
      double w = 0;
      for (size_t i = 0; i < a.size(); ++i) w = std::max(w, std::fabs(a[i] - b[i]) / scale);
      return w;
    };
    double field_scale = 0;
    for (double v : scalar.fields) field_scale = std::max(field_scale, std::fabs(v));
    // Positions wrap at the box's edge: a particle on the edge in one run may sit a box length away.
    std::vector<double> pos_scalar = scalar.pos, pos_simd = simd.pos;
    for (size_t i = 0; i < pos_scalar.size(); ++i)
      if (std::fabs(pos_scalar[i] - pos_simd[i]) > 8 * dx) pos_simd[i] = pos_scalar[i];
    EXPECT_LT(worst(pos_scalar, pos_simd, dx), 1e-12) << pusher << ": positions, relative to the cell size";
    EXPECT_LT(worst(scalar.mom, simd.mom, 0.05 * kC), 1e-12) << pusher << ": momenta, relative to the thermal u";
    EXPECT_LT(worst(scalar.fields, simd.fields, field_scale), 1e-12) << pusher << ": fields and currents";
    EXPECT_LT(scalar.gauss, 1e-11) << pusher;
    EXPECT_LT(simd.gauss, 1e-11) << pusher;
  }
}

TEST_F(Pic, TilesThatDoNotDivideTheGridAreRefusedByName) {
  Params p = cube(16, 16e-6);
  p.tile[0] = 5;
  try {
    Simulation sim(p);
    FAIL() << "a tile of 5 cells over 16 was accepted";
  } catch (const std::invalid_argument &e) {
    EXPECT_NE(std::string(e.what()).find("tiles of 5 cells along x"), std::string::npos) << e.what();
  }
}

TEST_F(Pic, SortingByCellChangesOrderNotPhysics) {
  auto run = [](int sort_interval) {
    Params p = cube(16, 16e-6);
    p.sort_interval = sort_interval;
    SpeciesParams e;
    e.density = 1e24;
    e.ppc[0] = e.ppc[1] = e.ppc[2] = 2;
    e.u_th = 0.05;
    SpeciesParams pos = e;
    pos.charge = kQe;
    p.species = {e, pos};  // neutral, so that Gauss's law holds from the start
    Simulation sim(p);
    for (int n = 0; n < 6; ++n) sim.step();
    return std::make_pair(sim.field_energy(), sim.gauss_error());
  };
  auto [e_plain, gauss_plain] = run(0);
  auto [e_sorted, gauss_sorted] = run(2);
  EXPECT_NEAR(e_sorted / e_plain, 1.0, 1e-9) << "the same physics up to rounding of summation order";
  EXPECT_LT(gauss_sorted, 1e-11);
}

// The decomposition every rank computes for itself: boxes of whole tiles that cover the grid once,
// the least halo by default, and bad requests named.
TEST(Decomposition, BoxesCoverEveryTileOnceAndOwnersWrapPeriodically) {
  Decomposition d;
  std::string error;
  ASSERT_TRUE(Decomposition::make({32, 16, 16}, {4, 4, 4}, 4, {0, 0, 0}, &d, &error)) << error;
  // 8 x 4 x 4 tiles over 4 ranks: 2 x 1 x 2, 2 x 2 x 1 and 4 x 1 x 1 (boxes with faces adding up to
  // 512 cells) beat 1 x 2 x 2 (576); of the three, the one with more ranks along z.
  EXPECT_EQ(d.dims(), (std::array<int, 3>{2, 1, 2}));
  std::vector<int> seen(static_cast<size_t>(d.global_tiles()), 0);
  for (int r = 0; r < 4; ++r) {
    const Box b = d.box(r);
    EXPECT_EQ(b.cells(), 32L * 16 * 16 / 4);
    for (int t : d.tiles_of(r)) {
      ++seen[static_cast<size_t>(t)];
      EXPECT_EQ(d.owner_of_tile(t), r);
    }
    EXPECT_EQ(d.owner_of_cell(b.lo[0], b.lo[1], b.lo[2]), r);
    EXPECT_EQ(d.owner_of_cell(b.hi[0] - 1 + 32, b.hi[1] - 1 - 16, b.hi[2] - 1), r);  // periodic images
  }
  for (int count : seen) EXPECT_EQ(count, 1);
}

TEST(Decomposition, DefaultSplitHasTheLeastSurfaceWithTiesAlongZThenY) {
  Decomposition d;
  std::string error;
  ASSERT_TRUE(Decomposition::make({64, 64, 64}, {8, 8, 8}, 2, {0, 0, 0}, &d, &error)) << error;
  EXPECT_EQ(d.dims(), (std::array<int, 3>{1, 1, 2}));
  ASSERT_TRUE(Decomposition::make({64, 64, 64}, {8, 8, 8}, 4, {0, 0, 0}, &d, &error)) << error;
  EXPECT_EQ(d.dims(), (std::array<int, 3>{1, 2, 2}));
  ASSERT_TRUE(Decomposition::make({64, 64, 64}, {8, 8, 8}, 8, {0, 0, 0}, &d, &error)) << error;
  EXPECT_EQ(d.dims(), (std::array<int, 3>{2, 2, 2}));
  ASSERT_TRUE(Decomposition::make({128, 16, 16}, {8, 8, 8}, 4, {0, 0, 0}, &d, &error)) << error;
  EXPECT_EQ(d.dims(), (std::array<int, 3>{4, 1, 1}));  // a long box splits along its length
  ASSERT_TRUE(Decomposition::make({64, 64, 64}, {8, 8, 8}, 4, {4, 1, 1}, &d, &error)) << error;
  EXPECT_EQ(d.dims(), (std::array<int, 3>{4, 1, 1}));  // as asked
}

TEST(Decomposition, BadRequestsAreNamed) {
  Decomposition d;
  std::string error;
  EXPECT_FALSE(Decomposition::make({16, 16, 16}, {8, 8, 8}, 16, {0, 0, 0}, &d, &error));
  EXPECT_NE(error.find("16 ranks, but the grid has only 8 tiles"), std::string::npos) << error;
  EXPECT_FALSE(Decomposition::make({24, 24, 24}, {8, 8, 8}, 2, {0, 0, 0}, &d, &error));
  EXPECT_NE(error.find("2 ranks cannot split the tile grid (3 3 3 tiles)"), std::string::npos) << error;
  EXPECT_FALSE(Decomposition::make({32, 32, 32}, {8, 8, 8}, 3, {3, 1, 1}, &d, &error));
  EXPECT_NE(error.find("does not divide the tile grid"), std::string::npos) << error;
  EXPECT_FALSE(Decomposition::make({32, 32, 32}, {8, 8, 8}, 4, {2, 1, 1}, &d, &error));
  EXPECT_NE(error.find("makes 2 boxes, but the run has 4 rank(s)"), std::string::npos) << error;
}
