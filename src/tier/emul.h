// The emulated slow tier (DESIGN.md): fixed device profiles as ratios to DRAM, the DRAM
// calibration they scale, and the charge that turns modelled extra time into real time.
#pragma once
#include <atomic>
#include <cstdint>

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

// Per-tier state of the charge: how many threads charge now, and the total charged.
struct EmulState {
  std::atomic<int> charging{0};
  std::atomic<uint64_t> charged_ns{0};
};

// Extra nanoseconds the model charges (no waiting): the DESIGN.md formula with `threads` threads
// sharing the device.
double emul_extra_ns(const EmulProfile &p, const hm_calibration_t &cal, int threads, uint64_t read_bytes,
                     uint64_t write_bytes, uint64_t dependent);
// Charges on the calling thread: waits the extra time, sharing the device's bandwidth with the
// threads charging the same tier meanwhile. Returns the delay charged (the modelled device time;
// the wall time can be longer if the scheduler preempts the thread).
uint64_t emul_charge(const EmulProfile &p, EmulState &state, uint64_t read_bytes, uint64_t write_bytes,
                     uint64_t dependent);
// Whether charges are made (HM_EMUL); set at initialisation.
void emul_set_enabled(bool on);

// DRAM calibration: loaded from the cache file, measured quickly if absent or stale.
const hm_calibration_t &calibration();
int calibration_replace(const hm_calibration_t &cal);
// Makes the next use read the cache again (after hm_finalize; HM_CALIBRATION may have changed).
void calibration_forget();
// Bandwidth with `threads` threads from a per-thread-count table (clamped to what was measured).
double calibration_bw(const double *table, int filled, int threads);

}  // namespace hm
