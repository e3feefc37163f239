// Declared accesses: what the C API's hm_access gathers per thread, and what phases need of it.
#pragma once
#include <cstdint>

#include "hetmem/hetmem.h"
#include "tier/charge_model.h"
#include "tier/emul.h"

namespace hm {

// Pays the calling thread's gathered declarations (at a phase end, before statistics).
void access_pay_pending();
// How many dependent accesses `count` independent scattered ones are worth (count / MLP, with
// the memory-level parallelism of this machine's DRAM from the calibration).
uint64_t scattered_dependent_equivalent(const hm_calibration_t &cal, uint64_t count);

// What `count` scattered accesses of `size` bytes are charged as on a device of profile `p`
// (hm_access_scattered): a dependent chain its extra latency per access; independent ones the
// larger of their whole cache lines' bandwidth and their share of the latency.
DeviceVolume scattered_volume(const EmulProfile &p, const hm_calibration_t &cal, uint64_t count, size_t size,
                              unsigned how);

}  // namespace hm
