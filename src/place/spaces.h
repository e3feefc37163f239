// The fast tier's spaces (Ren et al. (ICS'21) §4): metadata, temporary, migration and free space, each a
// sub-budget of the fast budget with its own accounting. Objects of a class are accounted in the
// space of their kind while they live on the fast tier, under every policy; only hetmem-static
// sizes the spaces (after the observed iteration), and from then on a space is never exceeded:
// a reservation that does not fit fails, except that the temporary and metadata spaces grow on
// demand into the free space's unused room (counted).
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "hetmem/hetmem.h"

namespace hm::place {

// The space an object of `kind` is accounted in while on the fast tier.
hm_space_t space_of(hm_class_kind_t kind);

class Spaces {
 public:
  // Takes `bytes` of `space`; false (counted as an overflow) when the sized space cannot hold them.
  bool reserve(hm_space_t space, uint64_t bytes);
  // The reserved bytes hold an object on the fast tier now: the high water follows (a reservation
  // whose allocation went elsewhere is released without ever counting).
  void confirm(hm_space_t space);
  void release(hm_space_t space, uint64_t bytes);
  // Counts an object of the space's kind that went to the capacity tier for want of room.
  void overflowed(hm_space_t space) { s_[space].overflows.fetch_add(1, std::memory_order_relaxed); }
  void object_added(hm_space_t space) { s_[space].objects.fetch_add(1, std::memory_order_relaxed); }
  void object_removed(hm_space_t space) { s_[space].objects.fetch_sub(1, std::memory_order_relaxed); }

  // Sizes the spaces from what the observed iteration used: metadata as in use now, temporary as
  // its high water, migration as asked; *free_budget receives the rest of `fast_budget`, which
  // size_free() gives the free space once hot objects have moved (the spaces count as sized from
  // then). HM_EBUDGET with the numbers in *why when the first three do not fit.
  int size(uint64_t fast_budget, uint64_t migration, uint64_t *free_budget, std::string *why);
  void size_free(uint64_t budget);
  // Gives what `space` holds no object in (its budget less its bytes in use) to the free space:
  // the migration space once staging is declined everywhere. Returns the bytes given.
  uint64_t give_to_free(hm_space_t space);
  bool sized() const { return sized_.load(std::memory_order_acquire); }
  uint64_t in_use(hm_space_t space) const { return s_[space].in_use.load(std::memory_order_relaxed); }
  uint64_t budget(hm_space_t space) const { return s_[space].budget.load(std::memory_order_relaxed); }
  // The free space's room not yet used.
  uint64_t free_room() const;
  hm_space_stats_t stats(hm_space_t space) const;
  void reset();  // a new initialisation of the library: nothing sized, nothing in use

 private:
  struct Counters {
    std::atomic<uint64_t> budget{0}, in_use{0}, high_water{0}, objects{0}, grows{0}, grown_bytes{0}, overflows{0};
  };
  bool grow_locked(hm_space_t space, uint64_t short_by);
  Counters s_[HM_SPACE_COUNT];
  std::atomic<bool> sized_{false};
  std::mutex mutex_;  // reservations in sized spaces and budget transfers between them
};

Spaces &spaces();

}  // namespace hm::place
