// Fixed-size slots of a persistent pool, as one versioned structure uses them (Nguyen et al. (SC'17) §3.2).
// Which slots the working version allocated (fresh: written in place, flushed at the commit),
// which committed slots it no longer references (deletion marks: still part of the last
// persisted version, so not reusable before the next commit), and which are free. All of this is
// volatile: after a restart nothing is known to be free until a mark-and-sweep (`rebuild`) says
// which slots the versions reach.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "persist/pool.h"

namespace hm::persist {

class SlotSpace {
 public:
  SlotSpace(Pool &pool, uint64_t slot_bytes) : pool_(pool), slot_bytes_(slot_bytes) {}

  // A slot for the working version: a free one, else new space above the pool's top.
  // HM_ECAPACITY when the pool is full (nothing committed is touched).
  int allocate(uint64_t *offset);
  // The working version no longer uses `offset`: a fresh slot is free at once, a committed one is
  // marked deleted and becomes free after the next commit.
  void release(uint64_t offset);
  bool fresh(uint64_t offset) const;

  // Slots the working version allocated and still uses (what a commit must flush).
  template <class Visit>
  void each_fresh(const Visit &visit) const {
    for (uint64_t off : fresh_list_)
      if (fresh(off)) visit(off);
  }
  // After a commit: the working version's slots are committed and the deletion marks free.
  void committed();
  // After a rollback to the last commit: the working version's slots are free again and its
  // deletion marks are dropped.
  void rolled_back();
  // Mark-and-sweep: every slot below the pool's top for which live(offset) is false is free.
  // Fresh slots that are not live are freed as well; deletion marks stay.
  template <class Live>
  uint64_t rebuild(const Live &live) {
    free_.clear();
    uint64_t freed = 0;
    for (uint64_t off = kHeaderBytes; off + slot_bytes_ <= pool_.top(); off += slot_bytes_)
      if (!live(off)) {
        set_fresh(off, false);
        free_.push_back(off);
        ++freed;
      }
    std::reverse(free_.begin(), free_.end());  // lowest offsets first
    return freed;
  }

  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t index(uint64_t offset) const { return (offset - kHeaderBytes) / slot_bytes_; }
  uint64_t slots_below_top() const { return (pool_.top() - kHeaderBytes) / slot_bytes_; }
  // Slots a new version can still take: free ones plus the space above the top.
  uint64_t available() const { return free_.size() + (pool_.capacity() - pool_.top()) / slot_bytes_; }
  uint64_t capacity_slots() const { return (pool_.capacity() - kHeaderBytes) / slot_bytes_; }
  // Slots below the top that are not free (either version's, or deletion-marked).
  uint64_t in_use() const { return slots_below_top() - free_.size(); }

 private:
  void set_fresh(uint64_t offset, bool on);

  Pool &pool_;
  uint64_t slot_bytes_;
  std::vector<uint64_t> free_;
  std::vector<uint64_t> deleted_;
  std::vector<uint64_t> fresh_list_;  // may hold slots freed since; `fresh` tells
  std::vector<bool> fresh_bits_;
};

}  // namespace hm::persist
