// hetmem-pic INPUT [key=value ...]: runs the reference PIC code on an input file (WarpX-like keys,
// docs/pic.md). Prints progress, writes an energy log (CSV) and openPMD output, and the time per
// particle-step split by phase.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "openpmd.hpp"
#include "pic.hpp"
#include <omp.h>

namespace {

int die(const std::string &msg) {
  std::fprintf(stderr, "hetmem-pic: %s\n", msg.c_str());
  return 2;
}

bool make_dirs(const std::string &path) {
  std::string part;
  std::stringstream in(path);
  std::string item;
  if (!path.empty() && path[0] == '/') part = "/";
  while (std::getline(in, item, '/')) {
    if (item.empty()) continue;
    part += item + "/";
    if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return access(path.c_str(), W_OK) == 0;
}

const char *kPhases[] = {"gather+push+deposit", "current reduction", "field solve", "redistribution"};

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(stderr, "usage: hetmem-pic INPUT [key=value ...]   (INPUT may be 'preset:NAME')\n");
    return argc < 2 ? 2 : 0;
  }
  std::string text, input = argv[1];
  if (input.rfind("preset:", 0) == 0) {
    text = "preset = " + input.substr(7) + "\n";
  } else {
    std::ifstream in(input);
    if (!in) return die(input + ": cannot read the input file (" + std::strerror(errno) + ")");
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  std::vector<std::string> overrides(argv + 2, argv + argc);
  for (const auto &o : overrides)
    if (o.find('=') == std::string::npos) return die("'" + o + "': command-line overrides are key=value");
  pic::Params p;
  std::string error;
  if (!pic::parse_input(text, overrides, &p, &error)) return die(error);
  if (hm_init() != HM_OK) return die(hm_last_error());

  // What the problem needs, against the budgets, before anything is allocated.
  pic::Footprint need = pic::estimate(p);
  std::printf("hetmem-pic: %d x %d x %d cells, %zu species, %d steps; fields %.1f MiB on '%s', particles %.1f MiB on '%s'\n",
              p.grid.nx, p.grid.ny, p.grid.nz, p.species.size(), p.steps, need.fields / 1048576.0,
              p.field_role.c_str(), need.particles / 1048576.0, p.particle_role.c_str());
  if (p.strict) {
    for (auto [role, bytes] : {std::pair<std::string, uint64_t>{p.field_role, need.fields}, {p.particle_role, need.particles}}) {
      hm_tier_t t;
      if (hm_tier_find(role.c_str(), &t) != HM_OK) return die(hm_last_error());
      hm_tier_stats_t s;
      hm_tier_stats(t, &s);
      uint64_t total = role == p.field_role && role == p.particle_role ? need.fields + need.particles : bytes;
      if (s.budget && s.budget - std::min(s.budget, s.in_use) < total) {
        hm_tier_info_t info;
        hm_tier_info(t, &info);
        return die("the problem does not fit tier '" + std::string(info.name) + "': it needs " +
                   std::to_string(total >> 20) + " MiB, the budget leaves " +
                   std::to_string((s.budget - std::min(s.budget, s.in_use)) >> 20) + " MiB (" +
                   std::to_string((total - (s.budget - std::min(s.budget, s.in_use))) >> 20) + " MiB short)");
      }
    }
  }
  if ((p.output_interval > 0 || p.energy_log.empty()) && !make_dirs(p.output_dir))
    return die("output directory '" + p.output_dir + "' cannot be created or written");
  std::string energy_path = p.energy_log.empty() ? p.output_dir + "/energy.csv" : p.energy_log;
  std::ofstream energy(energy_path);
  if (!energy) return die("energy log '" + energy_path + "' cannot be written");

  try {
    pic::Simulation sim(p);
    long particles = 0;
    for (auto &s : sim.species()) particles += s.count();
    energy << "step,time_s,field_J";
    for (auto &s : sim.species()) energy << ",kinetic_" << s.params.name << "_J";
    energy << ",total_J,charge_error\n";
    auto log_energy = [&] {
      double total = sim.field_energy();
      energy << sim.steps_done() << "," << sim.time() << "," << total;
      for (size_t s = 0; s < sim.species().size(); ++s) {
        double k = sim.kinetic_energy(static_cast<int>(s));
        energy << "," << k;
        total += k;
      }
      energy << "," << total << ",";
      // max|div E - rho/eps0| / max|rho/eps0| at the progress interval (it deposits rho: not every step)
      // (From the first step on: before any step a neutral plasma's rho is rounding noise.)
      if (p.progress_interval > 0 && sim.steps_done() > 0 && sim.steps_done() % p.progress_interval == 0)
        energy << sim.gauss_error();
      energy << "\n";
    };
    log_energy();
    auto start = std::chrono::steady_clock::now();
    for (int n = 0; n < p.steps; ++n) {
      sim.step();
      log_energy();
      if (p.output_interval > 0 && sim.steps_done() % p.output_interval == 0) {
        hm_phase_begin("diagnostics");
        bool ok = pic::write_openpmd(sim, p.output_dir, &error);
        hm_phase_end();
        if (!ok) return die(error);
      }
      if (p.progress_interval > 0 && (sim.steps_done() % p.progress_interval == 0 || n + 1 == p.steps)) {
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::printf("step %6d/%d  t = %.4e s  %.3f s/step  %.3g particle-steps/s\n", sim.steps_done(), p.steps, sim.time(),
                    s / sim.steps_done(), particles * static_cast<double>(sim.steps_done()) / s);
        std::fflush(stdout);
      }
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    int threads = 1;
#pragma omp parallel
#pragma omp single
    threads = omp_get_num_threads();
    if (p.steps > 0) {
      double per = seconds / (static_cast<double>(particles) * p.steps) * 1e9;
      std::printf("\n%ld particles, %d steps, %d thread(s): %.1f ns wall per particle-step, %.1f ns core time\n", particles,
                  p.steps, threads, per, per * threads);
      for (const char *phase : kPhases) {
        uint64_t calls = 0;
        double secs = 0;
        if (hm_phase_stats(phase, &calls, &secs) == HM_OK)
          std::printf("  %-22s %8.3f s  %5.1f%%  %.1f ns per particle-step\n", phase, secs, 100 * secs / seconds,
                      secs / (static_cast<double>(particles) * p.steps) * 1e9);
      }
    }
    std::printf("energy log: %s\n", energy_path.c_str());
  } catch (const std::exception &e) {
    return die(std::string("run stopped: ") + e.what());
  }
  return 0;
}
