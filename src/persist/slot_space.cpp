#include "persist/slot_space.h"

#include <algorithm>
#include <functional>

#include "hetmem/hetmem.h"

namespace hm::persist {

void SlotSpace::set_fresh(uint64_t offset, bool on) {
  uint64_t i = index(offset);
  if (i >= fresh_bits_.size()) {
    if (!on) return;
    fresh_bits_.resize(std::max<uint64_t>(i + 1, fresh_bits_.size() * 2), false);
  }
  fresh_bits_[i] = on;
}

bool SlotSpace::fresh(uint64_t offset) const {
  uint64_t i = index(offset);
  return i < fresh_bits_.size() && fresh_bits_[i];
}

int SlotSpace::allocate(uint64_t *offset) {
  if (!free_.empty()) {
    *offset = free_.back();
    free_.pop_back();
  } else {
    int rc = pool_.allocate(slot_bytes_, offset);
    if (rc != HM_OK) return rc;
  }
  set_fresh(*offset, true);
  fresh_list_.push_back(*offset);
  return HM_OK;
}

void SlotSpace::release(uint64_t offset) {
  if (fresh(offset)) {
    set_fresh(offset, false);
    free_.push_back(offset);
  } else {
    deleted_.push_back(offset);
  }
}

void SlotSpace::committed() {
  for (uint64_t off : fresh_list_) set_fresh(off, false);
  fresh_list_.clear();
  free_.insert(free_.end(), deleted_.begin(), deleted_.end());
  deleted_.clear();
  // Lowest offsets are handed out first, so a version's writes stay close together.
  std::sort(free_.begin(), free_.end(), std::greater<uint64_t>());
}

void SlotSpace::rolled_back() {
  for (uint64_t off : fresh_list_)
    if (fresh(off)) {
      set_fresh(off, false);
      if (off < pool_.top()) free_.push_back(off);
    }
  fresh_list_.clear();
  deleted_.clear();
  // Slots above the committed top went back to the pool with its rollback.
  std::vector<uint64_t> kept;
  for (uint64_t off : free_)
    if (off + slot_bytes_ <= pool_.top()) kept.push_back(off);
  free_.swap(kept);
}

}  // namespace hm::persist
