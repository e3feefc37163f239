#include "alloc/slot_map.h"

#include <mutex>

#include "alloc/hook.h"
#include "hetmem/hetmem.h"
#include "prim/prim.h"

uintptr_t hm_owned_low = UINTPTR_MAX;
uintptr_t hm_owned_high = 0;

namespace hm {
namespace {
std::mutex g_leaf_mutex;
}

SlotMap g_slot_map;

SlotMap::Leaf *SlotMap::leaf_for(uintptr_t slot) {
  auto &ref = top_[slot >> kLeafBits];
  Leaf *leaf = ref.load(std::memory_order_acquire);
  if (leaf) return leaf;
  std::lock_guard<std::mutex> lock(g_leaf_mutex);
  leaf = ref.load(std::memory_order_acquire);
  if (leaf) return leaf;
  void *mem = nullptr;
  if (prim::map_anon(sizeof(Leaf), prim::kPageSize, 0, &mem) != HM_OK) return nullptr;
  leaf = static_cast<Leaf *>(mem);  // zero pages: every entry starts as nullptr
  ref.store(leaf, std::memory_order_release);
  return leaf;
}

bool SlotMap::set(const void *addr, size_t size, SlotOwner *owner) {
  // The bounds widen before the range is owned (and so before its memory is handed out).
  const uintptr_t lo = reinterpret_cast<uintptr_t>(addr), hi = lo + size;
  uintptr_t seen = __atomic_load_n(&hm_owned_low, __ATOMIC_RELAXED);
  while (lo < seen && !__atomic_compare_exchange_n(&hm_owned_low, &seen, lo, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  seen = __atomic_load_n(&hm_owned_high, __ATOMIC_RELAXED);
  while (hi > seen && !__atomic_compare_exchange_n(&hm_owned_high, &seen, hi, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  uintptr_t first = reinterpret_cast<uintptr_t>(addr) >> kSlotShift;
  uintptr_t last = (reinterpret_cast<uintptr_t>(addr) + size - 1) >> kSlotShift;
  owner->begin = reinterpret_cast<uintptr_t>(addr);
  owner->end = owner->begin + size;
  for (uintptr_t s = first; s <= last; ++s) {
    Leaf *leaf = s < kSlots ? leaf_for(s) : nullptr;
    if (!leaf) {
      if (s > first) clear(addr, (s - first) << kSlotShift);
      return false;
    }
    leaf->entry[s & (kLeafSize - 1)].store(owner, std::memory_order_release);
  }
  return true;
}

void SlotMap::clear(const void *addr, size_t size) {
  uintptr_t first = reinterpret_cast<uintptr_t>(addr) >> kSlotShift;
  uintptr_t last = (reinterpret_cast<uintptr_t>(addr) + size - 1) >> kSlotShift;
  for (uintptr_t s = first; s <= last && s < kSlots; ++s) {
    Leaf *leaf = top_[s >> kLeafBits].load(std::memory_order_acquire);
    if (leaf) leaf->entry[s & (kLeafSize - 1)].store(nullptr, std::memory_order_release);
  }
}

void SlotMap::lock_for_fork() { g_leaf_mutex.lock(); }
void SlotMap::unlock_after_fork() { g_leaf_mutex.unlock(); }

void SlotMap::reset() {
  std::lock_guard<std::mutex> lock(g_leaf_mutex);
  for (auto &ref : top_) {
    Leaf *leaf = ref.exchange(nullptr);
    if (leaf) prim::unmap(leaf, sizeof(Leaf));
  }
}

}  // namespace hm
