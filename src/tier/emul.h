// The emulated slow tier (DESIGN.md): fixed device profiles as ratios to DRAM, the DRAM
// calibration they scale, and the charge that turns modelled extra time into real time.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "hetmem/hetmem.h"

namespace hm {

struct EmulProfile {
  const char *name;
  double read_latency;    // ratio to DRAM: sequential read latency
  double random_latency;  // ratio to DRAM: dependent (pointer-chasing) access latency
  double read_bw;         // ratio to DRAM bandwidth; 1 = no bandwidth charge
  double write_bw;
  const char *source;
};

// The profile named `name`, or nullptr. `known` receives "optane, cxl, nvbm".
const EmulProfile *emul_profile(const char *name);
const char *emul_profile_names();

// Where a charge's access volume came from, from the most precise to the least (DESIGN.md).
enum EmulSource { kEmulCopy = 0, kEmulDeclared = 1, kEmulSampled = 2, kEmulSources = 3 };

// Per-tier state of the charge: how many threads charge now, the total charged, and per source
// the volume and the delay charged.
struct EmulState {
  std::atomic<int> charging{0};
  std::atomic<uint64_t> charged_ns{0};
  std::atomic<uint64_t> source_ns[kEmulSources] = {};
  std::atomic<uint64_t> read_bytes[kEmulSources] = {};
  std::atomic<uint64_t> write_bytes[kEmulSources] = {};
  std::atomic<uint64_t> accesses[kEmulSources] = {};
  void reset();
};

// Extra nanoseconds the model charges (no waiting): the DESIGN.md formula with `threads` threads
// sharing the device.
double emul_extra_ns(const EmulProfile &p, const hm_calibration_t &cal, int threads, uint64_t read_bytes,
                     uint64_t write_bytes, uint64_t dependent);
// Charges on the calling thread: waits the extra time, sharing the device's bandwidth with the
// threads charging the same tier meanwhile. Returns the delay charged (the modelled device time;
// the wall time can be longer if the scheduler preempts the thread).
uint64_t emul_charge(const EmulProfile &p, EmulState &state, uint64_t read_bytes, uint64_t write_bytes,
                     uint64_t dependent, EmulSource source);
// Charges made on the calling thread from now on are not waited there but owed by the program:
// for a helper thread that samples an unchanged program's pages (inferred iterations), whose own
// delay would slow nobody. The program's threads pay what is owed with emul_pay_owed.
void emul_defer_charges_on_this_thread();
// Waits off everything owed so far on the calling thread; one relaxed load when nothing is owed.
// Returns the nanoseconds paid.
uint64_t emul_pay_owed();
// Whether charges are made (HM_EMUL); set at initialisation.
void emul_set_enabled(bool on);
bool emul_enabled();
// While paused, charges are counted but not waited, and the sampler runs as before: an
// instrument's baseline on the emulated tier's own memory (`hetmem tiers --validate`), so that
// what it compares differs by the emulator's waits alone, not by which physical pages back each
// array (in a VM, pages the host backs with huge pages or not differ by 10% on random access).
void emul_pause_waits(bool paused);
// Whether a profile charges anything at all (`dram` does not: the bookkeeping runs, nothing waits).
inline bool emul_charges(const EmulProfile &p) {
  return p.read_bw != 1.0 || p.write_bw != 1.0 || p.random_latency != 1.0;
}

// DRAM calibration: loaded from the cache file, measured quickly if absent or from another machine.
const hm_calibration_t &calibration();
// Empty when the calibration is a full one from the last 30 days covering every core; otherwise a
// sentence saying what is wrong with it and how to fix it.
std::string calibration_problem(const hm_calibration_t &cal);
// Prints calibration_problem() once per process, the first time an emulated tier charges.
void calibration_warn_once();
int calibration_replace(const hm_calibration_t &cal);
// Makes the next use read the cache again (after hm_finalize; HM_CALIBRATION may have changed).
void calibration_forget();
// Bandwidth with `threads` threads from a per-thread-count table (clamped to what was measured).
double calibration_bw(const double *table, int filled, int threads);

}  // namespace hm
