#include "tier/charge_model.h"

#include <algorithm>

namespace hm {
namespace {

constexpr uint64_t kDirty = uint64_t{1} << 63;

uint64_t floor_pow2(uint64_t v) { return v ? uint64_t{1} << (63 - __builtin_clzll(v)) : 0; }

// splitmix64: a fixed, well-mixed hash for the scattered accesses' blocks.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

DramCacheModel::DramCacheModel(uint64_t capacity, uint64_t block)
    : block_(std::max<uint64_t>(64, floor_pow2(block))),
      shift_(static_cast<uint64_t>(__builtin_ctzll(block_))),
      mask_(std::max<uint64_t>(1, floor_pow2(capacity) / block_) - 1),
      sets_(mask_ + 1) {
  for (auto &s : sets_) s.store(0, std::memory_order_relaxed);
}

unsigned DramCacheModel::touch(uint64_t block_number, bool write) {
  std::atomic<uint64_t> &set = sets_[block_number & mask_];
  const uint64_t tag = block_number + 1;
  uint64_t old = set.load(std::memory_order_relaxed);
  if ((old & ~kDirty) == tag) {
    if (write && !(old & kDirty)) set.fetch_or(kDirty, std::memory_order_relaxed);
    hits_.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  // Another thread may fill the set meanwhile; the last writer wins, as in a cache without locks
  // the victim's write-back is charged once, by whoever evicted it.
  old = set.exchange(tag | (write ? kDirty : 0), std::memory_order_relaxed);
  if ((old & ~kDirty) == tag) {  // filled by another thread between the load and the exchange
    if (old & kDirty) set.fetch_or(kDirty, std::memory_order_relaxed);
    hits_.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  unsigned out = 1;
  if (old & kDirty) {
    writebacks_.fetch_add(1, std::memory_order_relaxed);
    out |= 2;
  }
  return out;
}

DeviceVolume DramCacheModel::range(uintptr_t addr, uint64_t bytes, bool read, bool write) {
  DeviceVolume v;
  if (bytes == 0 || (!read && !write)) return v;
  const uint64_t first = addr >> shift_, last = (addr + bytes - 1) >> shift_;
  uint64_t fills = 0, backs = 0;
  for (uint64_t b = first; b <= last; ++b) {
    unsigned r = touch(b, write);
    fills += r & 1;
    backs += r >> 1;
  }
  v.read = fills * block_;
  v.write = backs * block_;
  return v;
}

DeviceVolume DramCacheModel::scattered(uintptr_t base, uint64_t span, uint64_t count, size_t size, bool write,
                                       bool dependent, const DeviceVolume &independent) {
  DeviceVolume v;
  if (count == 0 || span == 0) return v;
  const uint64_t first = base >> shift_, nblocks = ((base + span - 1) >> shift_) - first + 1;
  uint64_t misses = 0, backs = 0;
  for (uint64_t i = 0; i < count; ++i) {
    unsigned r = touch(first + mix(base ^ (i * 0x100000001b3ull)) % nblocks, write);
    misses += r & 1;
    backs += r >> 1;
  }
  // A miss moves a block from the device; a chain of dependent accesses also waits the device's
  // latency once per miss. Independent misses overlap as the direct rule says, scaled by the
  // share that missed.
  if (dependent) {
    v.dependent = misses;
  } else {
    double share = static_cast<double>(misses) / static_cast<double>(count);
    v.read = static_cast<uint64_t>(static_cast<double>(independent.read + independent.write) * share);
    v.dependent = static_cast<uint64_t>(static_cast<double>(independent.dependent) * share);
  }
  (void)size;
  v.write = backs * block_;
  return v;
}

DramCacheStats DramCacheModel::stats() const {
  DramCacheStats s;
  s.hits = hits_.load();
  s.misses = misses_.load();
  s.writebacks = writebacks_.load();
  s.block = block_;
  s.blocks = mask_ + 1;
  return s;
}

void DramCacheModel::reset_stats() { hits_ = misses_ = writebacks_ = 0; }

}  // namespace hm
