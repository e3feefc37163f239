// Input files: `key = value` lines (# comments), WarpX-like names; command-line key=value
// arguments override the file. Presets give the problem ladder of the reference note.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include "particle_kernel.hpp"
#include "pic.hpp"

namespace pic {
namespace {

const char *kGlobalKeys[] = {"max_step", "amr.n_cell", "geometry.prob_hi", "warpx.cfl", "algo.particle_shape",
                             "algo.particle_pusher", "algo.current_deposition", "algo.maxwell_solver",
                             "particles.species_names", "hetmem.tile_size", "hetmem.seed", "hetmem.fields",
                             "hetmem.particles", "diag.interval", "diag.directory", "diag.energy_log",
                             "diag.progress", "diag.summary", "hetmem.strict", "hetmem.allocation_order", "hetmem.sort_interval", "preset",
                             "diag.checkpoint_interval", "diag.checkpoint_directory", "restart", "hetmem.decomposition", "hetmem.kernel",
                             "hetmem.simd_target"};
const char *kSpeciesKeys[] = {"charge", "mass", "density", "num_particles_per_cell_each_dim", "u_th", "ux", "uy",
                              "uz", "langmuir.epsilon", "langmuir.modes", "langmuir.sign"};

size_t distance(const std::string &a, const std::string &b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Presets: the problem ladder (reference note section 6) and the WarpX comparison problem.
std::map<std::string, std::string> preset(const std::string &name) {
  auto uniform = [](int n, int ppc_each, double length) {
    std::ostringstream s;
    s << "amr.n_cell = " << n << " " << n << " " << n << "\ngeometry.prob_hi = " << length << " " << length << " "
      << length << "\nparticles.species_names = electrons\nelectrons.density = 1e24\nelectrons.u_th = 0.01\n"
      << "electrons.num_particles_per_cell_each_dim = " << ppc_each << " " << ppc_each << " " << ppc_each << "\n";
    return s.str();
  };
  std::map<std::string, std::string> p = {
      {"L0", uniform(32, 2, 20e-6)},            // 0.26 M particles, ~0.02 GiB
      {"L1", uniform(64, 2, 40e-6)},            // 2.1 M, ~0.15 GiB
      {"L2", uniform(128, 2, 80e-6)},           // 16.8 M, ~1.2 GiB
      {"L3", "amr.n_cell = 128 128 128\ngeometry.prob_hi = 80e-6 80e-6 80e-6\nparticles.species_names = electrons\n"
             "electrons.density = 1e24\nelectrons.u_th = 0.01\nelectrons.num_particles_per_cell_each_dim = 2 4 4\n"},
      {"L4", "amr.n_cell = 192 192 192\ngeometry.prob_hi = 120e-6 120e-6 120e-6\nparticles.species_names = electrons\n"
             "electrons.density = 1e24\nelectrons.u_th = 0.01\nelectrons.num_particles_per_cell_each_dim = 2 4 4\n"},
      {"warpx-uniform", uniform(64, 2, 40e-6) + "max_step = 50\n"},  // the WarpX peer problem
      {"langmuir", "amr.n_cell = 32 32 32\ngeometry.prob_hi = 20e-6 20e-6 20e-6\nwarpx.cfl = 0.99\nmax_step = 40\n"
                   "particles.species_names = electrons positrons\nelectrons.density = 2e24\n"
                   "electrons.langmuir.epsilon = 0.01\nelectrons.langmuir.modes = 1 1 1\npositrons.charge = q_e\n"
                   "positrons.density = 2e24\npositrons.langmuir.epsilon = 0.01\npositrons.langmuir.modes = 1 1 1\n"
                   "positrons.langmuir.sign = -1\n"},
  };
  auto it = p.find(name);
  std::map<std::string, std::string> out;
  if (it == p.end()) return out;
  std::istringstream in(it->second);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    out[line.substr(0, eq - 1)] = line.substr(eq + 2);
  }
  return out;
}

std::string trim(const std::string &s) {
  size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

bool number(const std::string &text, double *out) {
  std::string t = trim(text);
  if (t == "q_e") return *out = kQe, true;
  if (t == "-q_e") return *out = -kQe, true;
  if (t == "m_e") return *out = kMe, true;
  char *end = nullptr;
  *out = std::strtod(t.c_str(), &end);
  return !t.empty() && *end == '\0' && std::isfinite(*out);
}

bool numbers(const std::string &text, int count, double *out) {
  std::istringstream in(text);
  std::string word;
  int n = 0;
  while (in >> word) {
    if (n == count || !number(word, &out[n])) return false;
    ++n;
  }
  return n == count;
}

// `count` whole numbers of at least `least` (no fractions: "2.5" is an error, not 2).
// More particles per cell in one dimension than any PIC run uses; bounds the counts below.
constexpr double kMaxParticlesPerCellEachDim = 1 << 20;

bool whole_numbers(const std::string &text, int count, double *out, double least) {
  if (!numbers(text, count, out)) return false;
  for (int i = 0; i < count; ++i)
    if (out[i] < least || out[i] != std::floor(out[i]) || out[i] > 9007199254740992.0) return false;
  return true;
}

// `count` whole numbers in [least, most] that fit an int: counts, steps and intervals.
bool ints(const std::string &text, int count, int *out, int least, int most = std::numeric_limits<int>::max()) {
  double v[3];
  if (count > 3 || !whole_numbers(text, count, v, least)) return false;
  for (int i = 0; i < count; ++i) {
    if (v[i] > most) return false;
    out[i] = static_cast<int>(v[i]);
  }
  return true;
}

// Cells per dimension: beyond 2^24 the cell count overflows long before memory runs out.
constexpr int kMaxCellsEachDim = 1 << 24;

}  // namespace

bool parse_input(const std::string &text, const std::vector<std::string> &overrides, Params *out, std::string *error) {
  std::map<std::string, std::string> kv;
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  for (const auto &o : overrides) lines.push_back(o);
  // Presets first, so that the file and the command line can change any of their keys.
  for (const auto &l : lines) {
    std::string body = trim(l.substr(0, l.find('#')));
    auto eq = body.find('=');
    if (eq != std::string::npos && trim(body.substr(0, eq)) == "preset") {
      std::string name = trim(body.substr(eq + 1));
      auto p = preset(name);
      if (p.empty()) {
        *error = "preset '" + name + "' is unknown (presets: L0, L1, L2, L3, L4, warpx-uniform, langmuir)";
        return false;
      }
      kv.insert(p.begin(), p.end());
    }
  }
  int line_no = 0;
  for (const auto &l : lines) {
    ++line_no;
    std::string body = trim(l.substr(0, l.find('#')));
    if (body.empty()) continue;
    auto eq = body.find('=');
    if (eq == std::string::npos) {
      *error = "line " + std::to_string(line_no) + ": expected 'key = value', got '" + body + "'";
      return false;
    }
    kv[trim(body.substr(0, eq))] = trim(body.substr(eq + 1));
  }
  // Species names decide which species keys are valid.
  std::vector<std::string> species;
  if (kv.count("particles.species_names")) {
    std::istringstream s(kv["particles.species_names"]);
    std::string name;
    while (s >> name) species.push_back(name);
  }
  std::vector<std::string> known(std::begin(kGlobalKeys), std::end(kGlobalKeys));
  for (const auto &sp : species)
    for (const char *k : kSpeciesKeys) known.push_back(sp + "." + k);
  // Unknown keys: a misspelt global key first, since it may be the one that names the species.
  std::vector<std::string> keys;
  for (const auto &[key, value] : kv) keys.push_back(key);
  std::stable_partition(keys.begin(), keys.end(), [&](const std::string &k) {
    return std::find(species.begin(), species.end(), k.substr(0, k.find('.'))) != species.end() ||
           std::find(std::begin(kSpeciesKeys), std::end(kSpeciesKeys), k.substr(k.find('.') + 1)) == std::end(kSpeciesKeys);
  });
  for (const std::string &key : keys) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string best = known[0];
    for (const auto &k : known)
      if (distance(key, k) < distance(key, best)) best = k;
    const size_t dot = key.find('.');
    const std::string prefix = key.substr(0, dot);
    if (dot != std::string::npos && std::find(std::begin(kSpeciesKeys), std::end(kSpeciesKeys), key.substr(dot + 1)) !=
                                         std::end(kSpeciesKeys) &&
        std::find(species.begin(), species.end(), prefix) == species.end())
      *error = "unknown key '" + key + "': '" + prefix + "' is not one of particles.species_names ('" +
               (kv.count("particles.species_names") ? kv["particles.species_names"] : "") + "')";
    else
      *error = "unknown key '" + key + "' (did you mean '" + best + "'?)";
    return false;
  }
  Params p;
  p.sort_interval = 20;  // tiles sorted by cell every 20 steps unless the input says otherwise
  double v[3];
  auto need = [&](const char *key) -> bool {
    if (kv.count(key)) return true;
    *error = std::string("missing key '") + key + "'";
    return false;
  };
  if (!need("amr.n_cell") || !need("geometry.prob_hi")) return false;
  int cells[3];
  if (!ints(kv["amr.n_cell"], 3, cells, 1, kMaxCellsEachDim)) {
    *error = "amr.n_cell = '" + kv["amr.n_cell"] + "': three whole numbers of cells from 1 to " +
             std::to_string(kMaxCellsEachDim) + " are needed";
    return false;
  }
  p.grid.nx = cells[0], p.grid.ny = cells[1], p.grid.nz = cells[2];
  if (!numbers(kv["geometry.prob_hi"], 3, v) || v[0] <= 0 || v[1] <= 0 || v[2] <= 0) {
    *error = "geometry.prob_hi = '" + kv["geometry.prob_hi"] + "': three positive lengths in metres are needed";
    return false;
  }
  p.grid.dx = v[0] / p.grid.nx, p.grid.dy = v[1] / p.grid.ny, p.grid.dz = v[2] / p.grid.nz;
  // Cells outside a picometre..1e12 m leave the step (dt ~ cell / c) and the deposited current
  // (charge / dt / cell^2) outside double precision's useful range.
  for (double cell : {p.grid.dx, p.grid.dy, p.grid.dz})
    if (!(cell >= 1e-12 && cell <= 1e12)) {
      char what[64];
      std::snprintf(what, sizeof what, "%.3g m", cell);
      *error = "geometry.prob_hi = '" + kv["geometry.prob_hi"] + "' over amr.n_cell = '" + kv["amr.n_cell"] +
               "': a cell of " + what + "; cells from 1e-12 m to 1e12 m are simulated";
      return false;
    }
  if (kv.count("max_step") && !ints(kv["max_step"], 1, &p.steps, 0)) {
    *error = "max_step = '" + kv["max_step"] + "': a whole number of steps, 0 to " +
             std::to_string(std::numeric_limits<int>::max());
    return false;
  }
  // Below 1e-4 a step is so short that the deposited current (charge moved / dt) loses its digits.
  if (kv.count("warpx.cfl") && (!number(kv["warpx.cfl"], &p.cfl) || p.cfl < 1e-4 || p.cfl >= 1)) {
    *error = "warpx.cfl = '" + kv["warpx.cfl"] + "': the Yee scheme needs cfl < 1 (and at least 1e-4)";
    return false;
  }
  if (kv.count("hetmem.tile_size")) {
    if (!ints(kv["hetmem.tile_size"], 3, p.tile, 1, kMaxCellsEachDim)) {
      *error = "hetmem.tile_size = '" + kv["hetmem.tile_size"] + "': three positive whole numbers of cells";
      return false;
    }
  }
  if (kv.count("hetmem.decomposition")) {
    if (!ints(kv["hetmem.decomposition"], 3, p.decomposition.data(), 1, kMaxCellsEachDim)) {
      *error = "hetmem.decomposition = '" + kv["hetmem.decomposition"] + "': three positive whole numbers of ranks (x y z)";
      return false;
    }
  }
  int n[3] = {p.grid.nx, p.grid.ny, p.grid.nz};
  for (int d = 0; d < 3; ++d)
    if (n[d] % p.tile[d] != 0) {
      *error = "the grid (" + std::to_string(n[0]) + " " + std::to_string(n[1]) + " " + std::to_string(n[2]) +
               ") is not divisible by the tile size (" + std::to_string(p.tile[0]) + " " + std::to_string(p.tile[1]) +
               " " + std::to_string(p.tile[2]) + "): choose hetmem.tile_size that divides amr.n_cell";
      return false;
    }
  for (const char *key : {"algo.particle_shape"})
    if (kv.count(key) && kv[key] != "1") {
      *error = std::string(key) + " = '" + kv[key] + "': this version implements shape order 1";
      return false;
    }
  if (kv.count("algo.particle_pusher")) {
    p.pusher = kv["algo.particle_pusher"];
    if (p.pusher != "boris" && p.pusher != "vay") {
      *error = "algo.particle_pusher = '" + p.pusher + "': boris or vay";
      return false;
    }
  }
  if (kv.count("hetmem.kernel")) {
    p.kernel = kv["hetmem.kernel"];
    if (p.kernel != "simd" && p.kernel != "scalar") {
      *error = "hetmem.kernel = '" + p.kernel + "': simd (vectorized, the default) or scalar";
      return false;
    }
  }
  if (kv.count("hetmem.simd_target")) {
    p.simd_target = kv["hetmem.simd_target"];
    if (p.kernel != "simd") {
      *error = "hetmem.simd_target = '" + p.simd_target + "' is for the vectorized kernel (hetmem.kernel = simd)";
      return false;
    }
    if (!limit_simd_target(p.simd_target, error)) return false;
  }
  if (kv.count("hetmem.sort_interval") && !ints(kv["hetmem.sort_interval"], 1, &p.sort_interval, 0)) {
    *error = "hetmem.sort_interval = '" + kv["hetmem.sort_interval"] + "': steps between sorts by cell, 0 for never";
    return false;
  }
  if (kv.count("hetmem.seed")) {
    if (!whole_numbers(kv["hetmem.seed"], 1, v, 0)) {
      *error = "hetmem.seed = '" + kv["hetmem.seed"] + "': a whole number, 0 or more";
      return false;
    }
    p.seed = static_cast<uint64_t>(v[0]);
  }
  if (kv.count("hetmem.fields")) p.field_role = kv["hetmem.fields"];
  if (kv.count("hetmem.strict")) {
    const std::string &strict = kv["hetmem.strict"];
    if (strict != "0" && strict != "1") {
      *error = "hetmem.strict = '" + strict + "': 1 (refuse to start when the problem does not fit) or 0";
      return false;
    }
    p.strict = strict == "1";
  }
  if (kv.count("diag.interval") && !ints(kv["diag.interval"], 1, &p.output_interval, 0)) {
    *error = "diag.interval = '" + kv["diag.interval"] + "': steps between outputs, 0 for none";
    return false;
  }
  if (kv.count("diag.directory")) p.output_dir = kv["diag.directory"];
  if (kv.count("diag.energy_log")) p.energy_log = kv["diag.energy_log"];
  if (kv.count("diag.summary")) p.summary_path = kv["diag.summary"];
  if (kv.count("diag.checkpoint_interval")) {
    if (!ints(kv["diag.checkpoint_interval"], 1, &p.checkpoint_interval, 0)) {
      *error = "diag.checkpoint_interval = '" + kv["diag.checkpoint_interval"] + "': steps between checkpoints, 0 for none";
      return false;
    }
  }
  p.checkpoint_dir = kv.count("diag.checkpoint_directory") ? kv["diag.checkpoint_directory"] : p.output_dir + "/checkpoints";
  if (kv.count("restart")) p.restart = kv["restart"];
  if (kv.count("hetmem.allocation_order")) {
    const std::string &order = kv["hetmem.allocation_order"];
    if (order != "fields-first" && order != "particles-first") {
      *error = "hetmem.allocation_order = '" + order + "': give fields-first or particles-first";
      return false;
    }
    p.particles_first = order == "particles-first";
  }
  if (kv.count("diag.progress")) {
    if (!ints(kv["diag.progress"], 1, &p.progress_interval, 0)) {
      *error = "diag.progress = '" + kv["diag.progress"] + "': steps between progress lines, 0 for none";
      return false;
    }
  }
  if (kv.count("hetmem.particles")) p.particle_role = kv["hetmem.particles"];
  for (const auto &name : species) {
    SpeciesParams sp;
    sp.name = name;
    auto key = [&](const char *k) { return name + "." + k; };
    auto get = [&](const char *k, double *dst) -> bool {
      if (!kv.count(key(k))) return true;
      if (number(kv[key(k)], dst)) return true;
      *error = key(k) + " = '" + kv[key(k)] + "': a number is needed";
      return false;
    };
    if (!get("charge", &sp.charge) || !get("mass", &sp.mass) || !get("density", &sp.density) ||
        !get("u_th", &sp.u_th) || !get("ux", &sp.u_drift[0]) || !get("uy", &sp.u_drift[1]) ||
        !get("uz", &sp.u_drift[2]) || !get("langmuir.epsilon", &sp.langmuir_eps) ||
        !get("langmuir.sign", &sp.langmuir_sign))
      return false;
    for (const auto &[k, bad, rule] : {std::tuple{"mass", !(sp.mass > 0), "a positive mass in kg (or m_e)"},
                                        std::tuple{"density", sp.density < 0, "a density in m^-3, 0 or more"},
                                        std::tuple{"u_th", sp.u_th < 0, "a thermal spread of u in units of c, 0 or more"}})
      if (bad) {
        *error = key(k) + " = '" + kv[key(k)] + "': " + rule;
        return false;
      }
    // Beyond u = 1e6 (gamma 1e6) the energies lose all precision, and u^2 overflows from 1e154.
    for (const auto &[k, u] : {std::pair{"u_th", sp.u_th}, std::pair{"ux", sp.u_drift[0]},
                               std::pair{"uy", sp.u_drift[1]}, std::pair{"uz", sp.u_drift[2]}})
      if (std::fabs(u) > 1e6) {
        *error = key(k) + " = '" + kv[key(k)] + "': at most 1e6 in magnitude (u = gamma v / c)";
        return false;
      }
    if (kv.count(key("num_particles_per_cell_each_dim"))) {
      if (!whole_numbers(kv[key("num_particles_per_cell_each_dim")], 3, v, 0) ||
          std::max({v[0], v[1], v[2]}) > kMaxParticlesPerCellEachDim) {
        *error = key("num_particles_per_cell_each_dim") + " = '" + kv[key("num_particles_per_cell_each_dim")] +
                 "': three whole numbers from 0 to " + std::to_string(static_cast<long>(kMaxParticlesPerCellEachDim));
        return false;
      }
      for (int d = 0; d < 3; ++d) sp.ppc[d] = static_cast<int>(v[d]);
    }
    if (sp.density > 0 && sp.ppc[0] * sp.ppc[1] * sp.ppc[2] == 0) {
      *error = name + ": density " + kv[key("density")] + " with zero particles per cell: give " +
               key("num_particles_per_cell_each_dim") + " at least 1 1 1";
      return false;
    }
    if (kv.count(key("langmuir.modes"))) {
      if (!numbers(kv[key("langmuir.modes")], 3, v)) {
        *error = key("langmuir.modes") + ": three whole numbers (multiples of 2 pi / L)";
        return false;
      }
      for (int d = 0; d < 3; ++d) sp.langmuir_modes[d] = static_cast<int>(v[d]);
    }
    p.species.push_back(sp);
  }
  // The Langmuir perturbation is scaled by the plasma wave number of all species together.
  double n_total_q2m = 0;
  for (const auto &sp : p.species) n_total_q2m += sp.density * sp.charge * sp.charge / sp.mass;
  for (auto &sp : p.species) sp.langmuir_kp = std::sqrt(n_total_q2m / kEps0) / kC;
  // The leapfrog scheme is unstable for a plasma frequency it does not resolve (omega_p dt >= 2):
  // refused here, before the run fills its energies with infinities.
  const Grid &g = p.grid;
  const double dt = p.cfl / (kC * std::sqrt(1 / (g.dx * g.dx) + 1 / (g.dy * g.dy) + 1 / (g.dz * g.dz)));
  const double wp_dt = std::sqrt(n_total_q2m / kEps0) * dt;
  if (!(wp_dt < 2)) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.3g", wp_dt);
    *error = std::string("the plasma frequency is not resolved: omega_p dt = ") + buf +
             " (the scheme needs < 2, and < 0.2 to be accurate); omega_p is set by each species' density, charge "
             "and mass (" + p.species[0].name + ".density, " + p.species[0].name + ".charge, " + p.species[0].name +
             ".mass): lower the density, or refine amr.n_cell / geometry.prob_hi";
    return false;
  }
  char note[320];
  if (wp_dt >= 0.2) {
    std::snprintf(note, sizeof note, "omega_p dt = %.3g: the plasma frequency is resolved (< 2) but not accurately "
                  "(its phase error per step grows as (omega_p dt)^2 / 24); < 0.2 is accurate", wp_dt);
    p.warnings.push_back(note);
  }
  // The finite-grid instability heats a thermal plasma whose Debye length the cell does not
  // resolve (cell > pi lambda_D; Birdsall & Langdon, Plasma Physics via Computer Simulation, ch. 8):
  // worth a word once the run lasts a plasma period (its growth is a fraction of omega_p).
  const double cell = std::max({g.dx, g.dy, g.dz});
  const double periods = wp_dt * p.steps / (2 * M_PI);
  for (const auto &sp : p.species) {
    const double wp = std::sqrt(sp.density * sp.charge * sp.charge / (sp.mass * kEps0));
    const double debye = wp > 0 ? sp.u_th * kC / wp : 0;
    if (debye > 0 && cell > M_PI * debye && periods >= 1) {
      std::snprintf(note, sizeof note, "%s: the cell (%.3g m) is %.3g Debye lengths (%.3g m) over %.3g plasma "
                    "periods: the finite-grid instability will heat it (resolved below pi Debye lengths)",
                    sp.name.c_str(), cell, cell / debye, debye, periods);
      p.warnings.push_back(note);
    }
  }
  *out = p;
  return true;
}

Footprint estimate(const Params &p) {
  // Checked arithmetic throughout: a problem too large to count is too large to run.
  Footprint f;
  auto mul = [&f](uint64_t a, uint64_t b) {
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) f.overflow = true;
    return r;
  };
  auto add = [&f](uint64_t a, uint64_t b) {
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r)) f.overflow = true;
    return r;
  };
  const Grid &g = p.grid;
  f.fields = mul(mul(mul(9ull * sizeof(double), g.nx + 2), g.ny + 2), g.nz + 2);
  uint64_t particles = 0;
  for (const auto &sp : p.species)
    particles = add(particles, mul(mul(mul(static_cast<uint64_t>(g.cells()), sp.ppc[0]), sp.ppc[1]), sp.ppc[2]));
  const uint64_t tiles = mul(mul(g.nx / p.tile[0], g.ny / p.tile[1]), g.nz / p.tile[2]);
  const uint64_t tile_buffers =
      mul(mul(mul(mul(tiles, 3 * sizeof(double)), p.tile[0] + 4), p.tile[1] + 4), p.tile[2] + 4);
  f.particles = add(mul(particles, TileView::kArrays * sizeof(double)), tile_buffers);
  add(f.fields, f.particles);  // the two are summed against the tiers' room
  return f;
}

}  // namespace pic
