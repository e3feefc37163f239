// hetmem-pic INPUT [key=value ...]: runs the reference PIC code on an input file (WarpX-like keys,
// docs/pic.md). Prints progress, writes an energy log (CSV) and openPMD output, and the time per
// particle-step split by phase.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "hetmem/hetmem.h"
#include "node.hpp"
#include "openpmd.hpp"
#include "particle_kernel.hpp"
#include "pic.hpp"
#include "roofline.hpp"
#include "summary.hpp"
#include <omp.h>

namespace {

std::string mib(uint64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
  return buf;
}

// What the tiers fields and particles can go to (the fast and capacity roles) can still take: each
// one's budget, else its capacity, less what is in use; DRAM and emulated tiers share the
// machine's memory, counted once. *held lists them.
uint64_t tier_room(std::string *held) {
  uint64_t memory = 0, memory_cap = 0, other = 0;
  for (hm_tier_t t = 0; t < hm_tier_count(); ++t) {
    hm_tier_info_t info;
    hm_tier_stats_t s;
    if (hm_tier_info(t, &info) != HM_OK || hm_tier_stats(t, &s) != HM_OK) continue;
    if (!(info.roles & ((1u << HM_FAST) | (1u << HM_CAPACITY)))) continue;
    uint64_t limit = info.capacity;
    if (s.budget && (!limit || s.budget < limit)) limit = s.budget;
    const uint64_t free = limit - std::min(limit, s.in_use);
    if (info.kind == HM_KIND_DRAM || info.kind == HM_KIND_EMUL) {
      memory += free;
      memory_cap = std::max(memory_cap, info.capacity);
    } else {
      other += free;
    }
    *held += std::string(held->empty() ? "" : ", ") + info.name + " " + mib(free);
  }
  return std::min(memory, memory_cap) + other;
}

// For what every rank finds alike (bad input, a checkpoint that does not fit): rank 0 says it.
int die(const std::string &msg) {
  if (pic::Comm::world().rank() == 0) std::fprintf(stderr, "hetmem-pic: %s\n", msg.c_str());
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

// CPU time of the whole process (every thread), user and system: on a shared virtual machine it
// does not count the time other guests take the cores away, which wall time does.
double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

const char *kPhases[] = {"gather+push+deposit", "current reduction", "field solve", "redistribution"};

}  // namespace

// Where each object class landed under the active policy (bytes allocated per tier).
void report_placement() {
  std::printf("  placement (policy %s):", hm_policy_name());
  const char *kinds[] = {"metadata", "temporary", "hot", "streaming", "cold"};
  for (hm_class_t c = 0; c < hm_class_count(); ++c) {
    hm_class_info_t info;
    if (hm_class_info(c, &info) != HM_OK || info.bytes == 0) continue;
    std::printf(" %s (%s) %.1f MiB:", info.name, kinds[info.kind], info.bytes / 1048576.0);
    for (hm_tier_t t = 0; t < hm_tier_count() && t < 16; ++t) {
      if (!info.bytes_on_tier[t]) continue;
      hm_tier_info_t ti;
      hm_tier_info(t, &ti);
      std::printf(" %s %.0f%%", ti.name, 100.0 * info.bytes_on_tier[t] / info.bytes);
    }
    std::printf(";");
  }
  std::printf("\n");
}

// What the emulated tiers charged during the run, by where the volume came from, beside what the
// emulator spent on its own bookkeeping (docs/emulation.md). Silent when no tier is emulated.
void report_emulation(double run_seconds) {
  bool any = false;
  for (hm_tier_t t = 0; t < hm_tier_count(); ++t) {
    hm_tier_info_t info;
    hm_emul_stats_t e;
    if (hm_tier_info(t, &info) != HM_OK || info.kind != HM_KIND_EMUL || hm_emul_stats(t, &e) != HM_OK) continue;
    uint64_t volume = 0;
    for (int s = 0; s < HM_EMUL_SOURCES; ++s) volume += e.read_bytes[s] + e.write_bytes[s];
    if (volume == 0 && e.accesses[HM_EMUL_DECLARED] == 0) continue;
    any = true;
    double total = (e.charged_ns[0] + e.charged_ns[1] + e.charged_ns[2]) * 1e-9;
    std::printf("  %s (emulated): %.3f s device time charged (%.1f%% of the run): declared %.3f s, copies %.3f s, "
                "sampled %.3f s; %.1f GiB read, %.1f GiB written%s\n", info.name, total,
                run_seconds > 0 ? 100 * total / run_seconds : 0.0, e.charged_ns[HM_EMUL_DECLARED] * 1e-9,
                e.charged_ns[HM_EMUL_COPY] * 1e-9, e.charged_ns[HM_EMUL_SAMPLED] * 1e-9,
                (e.read_bytes[0] + e.read_bytes[1] + e.read_bytes[2]) / 1073741824.0,
                (e.write_bytes[0] + e.write_bytes[1] + e.write_bytes[2]) / 1073741824.0,
                e.charges ? "" : " (this profile charges nothing: bookkeeping only)");
  }
  hm_sampler_stats_t s;
  if (any && hm_sampler_stats(&s) == HM_OK)
    std::printf("  emulator's own time: %.1f ms reading referenced pages in %llu sampled phase(s), about %.1f ms more "
                "for the program to touch its pages again; %llu phase(s) charged from an earlier sample, %llu charged "
                "nothing by sampling (their accesses declared)\n", s.own_ns * 1e-6, static_cast<unsigned long long>(s.phases_sampled),
                s.inflicted_ns * 1e-6, static_cast<unsigned long long>(s.phases_carried),
                static_cast<unsigned long long>(s.phases_skipped));
}

// How the particle tiles were streamed (staged through the migration space under hetmem), and
// what the helper model decided for the push.
void report_streaming(pic::Simulation &sim) {
  bool staged = false;
  for (const pic::Species &sp : sim.species()) {
    hm_stream_stats_t st = sp.stream->stats();
    if (!st.tiles_in) continue;
    staged = true;
    std::printf("  streaming (%s): %llu sweeps in %llu batches of up to %.1f MiB, %d helper(s); %.0f MiB in, %.0f MiB "
                "written back (%llu tiles clean); waited %.3f s for staging, helpers copied %.3f s\n",
                sp.params.name.c_str(), static_cast<unsigned long long>(st.sweeps), static_cast<unsigned long long>(st.batches),
                st.slot_bytes / 1048576.0, st.helpers, st.bytes_in / 1048576.0, st.bytes_out / 1048576.0,
                static_cast<unsigned long long>(st.released_clean), st.wait_seconds, st.copy_seconds);
  }
  hm_helper_model_t m;
  if (staged && hm_helper_model("gather+push+deposit", &m) == HM_OK)
    std::printf("  helper model (gather+push+deposit): %d helper(s) [%s]; interval %.2f ms staged, %.2f ms at home; "
                "%.2f MiB in, %.2f MiB out, copy %.2f ms, interval %.2f ms predicted; %d of %d threads computing: %s\n",
                m.helpers, m.binding, m.t_comp * 1e3, m.t_inplace * 1e3, m.data_in / 1048576.0, m.data_out / 1048576.0,
                m.t_cp * 1e3, m.t_predicted * 1e3, m.thrd_comp, m.thrd_max,
                m.stage ? "staging"
                : m.t_staged_seen > 0 ? "staged, then withdrawn (a staged sweep was slower than working at home)"
                                      : "tiles stay at home from then on (staging would not pay)");
}

// What the exchanges of a run took per step: this rank's messages, the slowest rank's seconds.
void report_exchange(const pic::Simulation &sim, int steps, double seconds) {
  const pic::Comm &comm = sim.comm();
  if (!comm.parallel() || steps <= 0) return;
  const pic::ExchangeStats &x = sim.exchange_stats();
  const double field = comm.max(x.field_seconds), current = comm.max(x.current_seconds),
               particle = comm.max(x.particle_seconds), waited = comm.max(x.wait_seconds);
  const double moved = static_cast<double>(comm.sum(static_cast<long>(x.particles_sent)));
  if (comm.rank() != 0) return;
  const auto &d = sim.decomposition().dims();
  std::printf("  decomposition %d x %d x %d over %d ranks; per step on rank 0 (%zu neighbour(s)): guard fills %.0f "
              "messages (%.0f with one per component), %.1f KiB; currents %.0f messages, %.1f KiB; particles %.0f "
              "messages, %.1f KiB; %.1f particles changed rank per step (all ranks)\n", d[0], d[1], d[2], comm.size(),
              sim.exchange_peers(), double(x.field_messages) / steps, double(x.field_messages_unpacked) / steps,
              x.field_bytes / 1024.0 / steps, double(x.current_messages) / steps, x.current_bytes / 1024.0 / steps,
              double(x.particle_messages) / steps, x.particle_bytes / 1024.0 / steps, moved / steps);
  std::printf("  exchange time (slowest rank): guard fills %.3f s, currents %.3f s, particles %.3f s packing and unpacking; "
              "%.3f s waiting for neighbours (messages in flight and load imbalance); %.1f%% of the run in all\n",
              field, current, particle, waited, seconds > 0 ? 100 * (field + current + particle + waited) / seconds : 0.0);
}

// Ends MPI however main returns.
struct MpiSession {
  MpiSession(int *argc, char ***argv) { pic::Comm::init(argc, argv); }
  ~MpiSession() { pic::Comm::finalize(); }
};

int main(int argc, char **argv) {
  MpiSession mpi(&argc, &argv);
  const pic::Comm &comm = pic::Comm::world();
  // Rank 0 speaks for the run: the other ranks' standard output is dropped (errors still show).
  if (comm.rank() != 0 && !std::freopen("/dev/null", "w", stdout)) return die("cannot silence rank output");
  // A launcher of another MPI (MPICH's, say) starts N processes that this Open MPI build would see
  // as N runs of one rank each, overwriting each other's output: refused before anything is read.
  if (const int launched = pic::Comm::launched_ranks(); launched > 1 && !comm.parallel())
    return die("started by an MPI launcher as one of " + std::to_string(launched) + " processes, but MPI sees this "
               "one alone (a launcher of another MPI implementation?): start it with Open MPI's mpirun, or without "
               "a launcher");
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(stderr, "usage: hetmem-pic INPUT [key=value ...]   (INPUT may be 'preset:NAME'); hetmem-pic --version\n");
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    std::printf("hetmem-pic %s\n", hm_version());
    return 0;
  }
  std::string text, input = argv[1];
  if (input.rfind("preset:", 0) == 0) {
    text = "preset = " + input.substr(7) + "\n";
  } else {
    std::error_code ec;
    if (std::filesystem::is_directory(input, ec))
      return die(input + ": a directory, not an input file (give a file of key = value lines, or preset:NAME)");
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
  if (pic::Comm::world().rank() == 0)
    for (const std::string &w : p.warnings) std::fprintf(stderr, "hetmem-pic: warning: %s\n", w.c_str());
  pic::Decomposition decomposition;
  if (!pic::Decomposition::make({p.grid.nx, p.grid.ny, p.grid.nz}, {p.tile[0], p.tile[1], p.tile[2]}, comm.size(),
                                p.decomposition, &decomposition, &error))
    return die(error);
  pic::NodeShare node = pic::share_node(comm);
  if (hm_init() != HM_OK || pic::split_fast_budget(&node) != HM_OK) return die(hm_last_error());

  // What the problem needs, against the budgets, before anything is allocated.
  pic::Footprint need = pic::estimate(p);
  // Fields and particles go where the placement policy puts their classes, unless the input pins
  // them to a role or tier; the strict check uses the policy's first choice.
  hm_tier_t field_tier, particle_tier;
  std::string field_where, particle_where;
  try {
    const pic::Classes classes = pic::define_classes();
    field_tier = pic::first_tier(p.field_role, classes.fields).id();
    particle_tier = pic::first_tier(p.particle_role, classes.tiles).id();
    auto describe = [](const std::string &pinned, hm::Class cls) {
      return pinned.empty() ? "class " + std::string(cls.info().name) + ", policy " + hm_policy_name() : "'" + pinned + "'";
    };
    field_where = describe(p.field_role, classes.fields);
    particle_where = describe(p.particle_role, classes.tiles);
  } catch (const hm::Error &e) {
    return die(e.what());
  }
  std::printf("hetmem-pic: %d x %d x %d cells, %zu species, %d steps; fields %.1f MiB (%s), particles %.1f MiB (%s)\n",
              p.grid.nx, p.grid.ny, p.grid.nz, p.species.size(), p.steps, need.fields / 1048576.0,
              field_where.c_str(), need.particles / 1048576.0, particle_where.c_str());
  if (comm.parallel()) {
    const auto &d = decomposition.dims();
    const pic::Box b = decomposition.box(0);
    std::printf("  %d ranks: %d x %d x %d boxes of %d x %d x %d cells (hetmem.decomposition); each rank holds about "
                "1/%d of the above; %d rank(s) on rank 0's node, rank 0: %s%s%s\n", comm.size(), d[0], d[1], d[2],
                b.extent(0), b.extent(1), b.extent(2), comm.size(), node.on_node, node.binding.c_str(),
                node.budget.empty() ? "" : "; fast budget ", node.budget.c_str());
    need.fields /= static_cast<uint64_t>(comm.size());  // the strict check is per rank
    need.particles /= static_cast<uint64_t>(comm.size());
  }
  if (need.overflow)
    return die("the problem is too large to count: amr.n_cell times the species' num_particles_per_cell_each_dim "
               "overflows 64 bits");
  {
    std::string held;
    const uint64_t room = tier_room(&held);
    if (need.fields + need.particles > room)
      return die("the problem needs " + mib(need.fields + need.particles) + (comm.parallel() ? " per rank" : "") +
                 " (fields " + mib(need.fields) + ": amr.n_cell; particles " + mib(need.particles) +
                 ": amr.n_cell x num_particles_per_cell_each_dim), the tiers can hold " + mib(room) + " (" + held + ")");
  }
  if (p.strict) {
    for (auto [t, bytes] : {std::pair<hm_tier_t, uint64_t>{field_tier, need.fields}, {particle_tier, need.particles}}) {
      hm_tier_stats_t s;
      hm_tier_stats(t, &s);
      uint64_t total = field_tier == particle_tier ? need.fields + need.particles : bytes;
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
  // Rank 0 writes every file; the others learn whether it could.
  const bool root = comm.rank() == 0;
  if (!comm.agree(!root || !(p.output_interval > 0 || p.energy_log.empty()) || make_dirs(p.output_dir), &error))
    return die("output directory '" + p.output_dir + "' cannot be created or written");
  if (!comm.agree(!root || p.checkpoint_interval <= 0 || make_dirs(p.checkpoint_dir), &error))
    return die("checkpoint directory '" + p.checkpoint_dir + "' cannot be created or written");
  std::string energy_path = p.energy_log.empty() ? p.output_dir + "/energy.csv" : p.energy_log;
  std::ofstream energy;

  try {
    pic::Simulation sim(p);
    // A restart replaces the initial state before anything is written: a checkpoint of another
    // problem, or a damaged one, stops the run with every earlier output as it was.
    if (!p.restart.empty()) {
      if (!sim.restore(p.restart, &error)) return die(error);
      if (sim.steps_done() >= p.steps)
        return die("restart = '" + p.restart + "': it is at step " + std::to_string(sim.steps_done()) +
                   ", max_step is " + std::to_string(p.steps) + ": nothing to run (max_step counts from step 0)");
      std::printf("restarted from %s at step %d (t = %.6e s)\n", p.restart.c_str(), sim.steps_done(), sim.time());
    }
    // A restart continues the log it finds; a log it starts (another directory) gets its header.
    std::error_code ec;
    const bool new_log = p.restart.empty() || std::filesystem::file_size(energy_path, ec) == 0 || ec;
    if (root) energy.open(energy_path, new_log ? std::ios::trunc : std::ios::app);
    if (!comm.agree(!root || energy, &error)) return die("energy log '" + energy_path + "' cannot be written");
    const long particles = sim.global_particles();
    energy << std::setprecision(17);  // full double precision: conservation is read from these columns
    double species_rho = 0;
    for (auto &s : sim.species()) species_rho += std::fabs(s.params.charge * s.params.density);
    if (std::fabs(sim.background_charge_density()) > 1e-9 * species_rho)
      std::printf("  neutralising background: %.6g C/m^3, uniform and immobile (the species' net charge; in the "
                  "Gauss-law diagnostic)\n", sim.background_charge_density());
    if (new_log) {
      energy << "step,time_s,field_J";
      for (auto &s : sim.species()) energy << ",kinetic_" << s.params.name << "_J";
      energy << ",total_J,charge_error\n";
    }
    auto log_energy = [&] {  // collective: every rank computes, rank 0 writes; false: not finite
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
      return std::isfinite(total);
    };
    // A state whose energy is no longer finite is no simulation: the run stops there, the log and
    // the outputs written so far kept.
    auto non_finite = [&] {
      energy.flush();
      die("the energy became non-finite at step " + std::to_string(sim.steps_done()) + " (see " + energy_path +
          "); the run stops, the outputs written so far are kept");
      return 1;
    };
    if (p.restart.empty() && !log_energy()) return non_finite();
    auto start = std::chrono::steady_clock::now();
    pic::RunRecord record;
    const double cpu_start = cpu_now();
    const int first_step = sim.steps_done(), to_run = p.steps - first_step;
    for (int n = 0; n < to_run; ++n) {
      auto step_start = std::chrono::steady_clock::now();
      double step_cpu = cpu_now();
      sim.step();
      record.step_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
      record.step_cpu_seconds.push_back(cpu_now() - step_cpu);
      if (!log_energy()) return non_finite();
      if (p.output_interval > 0 && sim.steps_done() % p.output_interval == 0) {
        hm_phase_begin("diagnostics");
        bool ok = pic::write_openpmd(sim, p.output_dir, &error);
        hm_phase_end();
        if (!ok) return die(error);
      }
      if (p.checkpoint_interval > 0 && sim.steps_done() % p.checkpoint_interval == 0) {
        char name[64];
        std::snprintf(name, sizeof name, "/checkpoint_%06d.h5", sim.steps_done());
        hm_phase_begin("diagnostics");
        bool ok = sim.save_checkpoint(p.checkpoint_dir + name, &error);
        hm_phase_end();
        if (!ok) return die(error);
      }
      if (p.progress_interval > 0 && (sim.steps_done() % p.progress_interval == 0 || n + 1 == to_run)) {
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::printf("step %6d/%d  t = %.4e s  %.3f s/step  %.3g particle-steps/s\n", sim.steps_done(), p.steps, sim.time(),
                    s / (n + 1), particles * static_cast<double>(n + 1) / s);
        std::fflush(stdout);
      }
    }
    // The slowest rank's time is the run's.
    double seconds = comm.max(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    int threads = 1;
#pragma omp parallel
#pragma omp single
    threads = omp_get_num_threads();
    if (to_run > 0) {
      double per = seconds / (static_cast<double>(particles) * to_run) * 1e9;
      if (comm.parallel())
        std::printf("\n%ld particles, %d steps, %d ranks x %d thread(s): %.1f ns wall per particle-step, %.1f ns core time "
                    "(phases: the slowest rank's)\n", particles, to_run, comm.size(), threads, per, per * threads * comm.size());
      else
        std::printf("\n%ld particles, %d steps, %d thread(s): %.1f ns wall per particle-step, %.1f ns core time\n", particles,
                    to_run, threads, per, per * threads);
      for (const char *phase : kPhases) {
        uint64_t calls = 0;
        double secs = 0;
        if (hm_phase_stats(phase, &calls, &secs) != HM_OK) secs = -1;
        secs = comm.max(secs);
        if (secs >= 0)
          std::printf("  %-22s %8.3f s  %5.1f%%  %.1f ns per particle-step\n", phase, secs, 100 * secs / seconds,
                      secs / (static_cast<double>(particles) * to_run) * 1e9);
      }
      std::printf("particle kernel: %s", p.kernel.c_str());
      if (p.kernel == "simd") {
        // The work each phase does per particle-step (roofline.hpp), for `hetmem bench pic`'s roofline.
        std::printf(" (%s); work per particle-step, counted from the kernels:", pic::simd_target());
        const double ppc = static_cast<double>(particles) / static_cast<double>(sim.grid().cells());
        for (const pic::PhaseWork &w : pic::work_per_particle_step(p, ppc))
          std::printf(" %s %.1f flops %.1f B;", w.phase, w.flops, w.bytes);
      }
      std::printf("\n");
    }
    report_exchange(sim, to_run, seconds);
    report_placement();
    report_streaming(sim);
    report_emulation(seconds);
    if (!p.summary_path.empty()) {
      record.particles = particles;
      record.threads = threads;
      record.seconds = seconds;
      record.cpu_seconds = cpu_now() - cpu_start;
      record.footprint = need;
      record.ranks = comm.size();
      if (!comm.agree(!root || pic::write_summary(p.summary_path, p, record, &error), &error)) return die(error);
      std::printf("run summary: %s\n", p.summary_path.c_str());
    }
    std::printf("energy log: %s\n", energy_path.c_str());
  } catch (const std::exception &e) {
    if (!comm.parallel()) return die(std::string("run stopped: ") + e.what());
    // One rank's failure: it says so, and ends the others, which may be waiting for it.
    std::fprintf(stderr, "hetmem-pic (rank %d of %d): run stopped: %s\n", comm.rank(), comm.size(), e.what());
    MPI_Abort(comm.handle(), 2);
    return 2;
  }
  return 0;
}
