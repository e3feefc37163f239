// Charge models of the emulated slow tier: what device traffic an access to the tier causes.
// Without a model (the default) every byte read or written reaches the device, and the DESIGN.md
// formula charges it. A model sits between the charge points (copies, declared accesses, sampled
// pages) and that formula and turns the program's accesses into device traffic; the memory-mode
// policy installs one that puts a direct-mapped DRAM cache in front of the device (Optane's
// Memory Mode, Weiland et al. (SC'19) §2.1). Adding a kind of model adds a class here, not branches in emul.cpp.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace hm {

// Traffic that reaches the slow device: bytes read from it, bytes written to it, and dependent
// (latency-bound) accesses.
struct DeviceVolume {
  uint64_t read = 0, write = 0, dependent = 0;
};

class ChargeModel {
 public:
  virtual ~ChargeModel() = default;
  virtual const char *name() const = 0;
  // The program read (`read`) and/or wrote (`write`) `bytes` bytes in order from `addr`.
  virtual DeviceVolume range(uintptr_t addr, uint64_t bytes, bool read, bool write) = 0;
  // The program made `count` accesses of `size` bytes at scattered places of [base, base + span);
  // `dependent`: each waited for the previous one. `independent` is what the direct charge would
  // be for them (the caller's volume rule for scattered accesses), scaled by the model's miss rate.
  virtual DeviceVolume scattered(uintptr_t base, uint64_t span, uint64_t count, size_t size, bool write,
                                 bool dependent, const DeviceVolume &independent) = 0;
};

// What a direct-mapped DRAM cache in front of the slow device did.
struct DramCacheStats {
  uint64_t hits = 0, misses = 0, writebacks = 0;  // in blocks
  uint64_t block = 0, blocks = 0;                 // block size and number of blocks (sets)
};

// A direct-mapped cache of `capacity` bytes in blocks of `block` bytes (both powers of two after
// rounding down): a block of the address space maps to set (address / block) mod sets. A read
// miss fills the block from the device (a device read of one block); a write miss allocates it
// the same way and marks it dirty; evicting a dirty block writes it back (a device write of one
// block). Hits cost DRAM, which the program's own access already spent: nothing is charged.
// Scattered accesses land on blocks picked by a fixed hash of (base, access number), so that
// repeated runs give the same figures. Thread-safe without locks (one atomic word per set).
class DramCacheModel final : public ChargeModel {
 public:
  static constexpr uint64_t kDefaultBlock = 4096;
  explicit DramCacheModel(uint64_t capacity, uint64_t block = kDefaultBlock);
  const char *name() const override { return "dram-cache"; }
  DeviceVolume range(uintptr_t addr, uint64_t bytes, bool read, bool write) override;
  DeviceVolume scattered(uintptr_t base, uint64_t span, uint64_t count, size_t size, bool write, bool dependent,
                         const DeviceVolume &independent) override;
  DramCacheStats stats() const;
  void reset_stats();

 private:
  // One block access; returns (filled, written back) as bit 0 and bit 1.
  unsigned touch(uint64_t block_number, bool write);
  uint64_t block_, shift_, mask_;
  std::vector<std::atomic<uint64_t>> sets_;  // block number + 1 (0: empty); top bit: dirty
  std::atomic<uint64_t> hits_{0}, misses_{0}, writebacks_{0};
};

}  // namespace hm
