// Maps every 2 MiB slot of the address space to the record that owns it (a segment of small
// blocks or a large block), so that free() finds an allocation's tier without a search and a
// pointer hetmem does not own is recognised. Two-level radix table, leaves mapped on demand.
//
// A record owns the range [begin, end) it was set with, which need not fill its last slot: a
// large block of 3 MiB leaves 1 MiB of its second slot to whoever maps there next (the C
// library's mmap'd chunks, under the preload library). A lookup therefore answers only for
// addresses inside the record's range; two records never share a slot (every hetmem mapping
// starts on a slot boundary).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace hm {

constexpr size_t kSlotShift = 21;
constexpr size_t kSlotSize = size_t{1} << kSlotShift;  // 2 MiB

enum class OwnerKind : uint32_t { kSegment = 0x5e65e601, kLarge = 0x1a46e001 };

// First member of every record stored in the map.
struct SlotOwner {
  OwnerKind kind;
  int tier;
  // Set (atomically, once) by the first hm_access on memory of this record: its accesses are
  // declared, so the referenced-page sampler leaves it out.
  uint32_t declared = 0;
  // Set (atomically) when an allocation in this record has a placement record above the alloc
  // layer (an object of a class): frees here tell the release observer (alloc/runtime.h).
  uint32_t tracked = 0;
  // The address range the record owns (SlotMap::set writes it before publishing the record).
  uintptr_t begin = 0, end = 0;
  bool is_declared() const { return __atomic_load_n(&declared, __ATOMIC_RELAXED) != 0; }
  bool is_tracked() const { return __atomic_load_n(&tracked, __ATOMIC_RELAXED) != 0; }
};

class SlotMap {
 public:
  // Records `owner` as the owner of [addr, addr+size) in every slot that range touches. False if
  // a leaf cannot be mapped.
  bool set(const void *addr, size_t size, SlotOwner *owner);
  void clear(const void *addr, size_t size);
  // The record owning `addr`, or nullptr when no record's range holds it (even where a record
  // owns another part of the same slot).
  SlotOwner *get(const void *addr) const {
    uintptr_t a = reinterpret_cast<uintptr_t>(addr), slot = a >> kSlotShift;
    if (slot >= kSlots) return nullptr;
    Leaf *leaf = top_[slot >> kLeafBits].load(std::memory_order_acquire);
    SlotOwner *o = leaf ? leaf->entry[slot & (kLeafSize - 1)].load(std::memory_order_acquire) : nullptr;
    return o && a >= o->begin && a < o->end ? o : nullptr;
  }
  void reset();  // drops every entry (hm_finalize)
  static void lock_for_fork();  // the lock that maps new leaves, held across a fork
  static void unlock_after_fork();

 private:
  static constexpr size_t kSlots = size_t{1} << (48 - kSlotShift);
  static constexpr size_t kLeafBits = 14;
  static constexpr size_t kLeafSize = size_t{1} << kLeafBits;
  struct Leaf {
    std::atomic<SlotOwner *> entry[kLeafSize];
  };
  Leaf *leaf_for(uintptr_t slot);
  std::atomic<Leaf *> top_[kSlots >> kLeafBits] = {};
};

extern SlotMap g_slot_map;  // zero-initialised: usable before any constructor runs
inline SlotMap &slot_map() { return g_slot_map; }

}  // namespace hm
