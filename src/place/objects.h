// The placement runtime's record of every live object of a class: where it is, which space holds
// it, and what static placement needs to move it (docs/placement.md). Kept exact by the alloc
// layer's release observer, which frees of tracked records call.
#pragma once
#include <cstdint>
#include <vector>

#include "hetmem/hetmem.h"

namespace hm::place {

struct Object {
  void *ptr = nullptr;
  int cls = -1;
  hm_class_kind_t kind = HM_CLASS_COLD;
  int priority = 0;
  uint64_t size = 0;
  int tier = -1;
  bool in_space = false;  // accounted in its space (its bytes on the fast tier are)
  uint64_t seq = 0;       // allocation order
  int tail_tier = -1;     // split across two tiers: the last tail_bytes live on tail_tier
  uint64_t tail_bytes = 0;
  // Bytes on `t`, and bytes on the fast tier `fast` (what its space accounts).
  uint64_t bytes_on(int t) const {
    return (t == tier ? size - tail_bytes : 0) + (t == tail_tier ? tail_bytes : 0);
  }
};

// Records a new object and, when on the fast tier, its space's bytes (already reserved).
void object_add(const Object &o);
// The hot objects alive now, in no particular order; and every live object.
std::vector<Object> hot_objects();
std::vector<Object> live_objects(bool hot_only = false);
// Records that the object at ptr now lives on `tier` (after hm_move): its space accounting follows.
// False if it no longer exists.
bool object_moved(void *ptr, int tier, bool in_space);
// Records that the last tail_bytes of the object at ptr now live on tail_tier (TierHeap::split_to).
bool object_split(void *ptr, int tail_tier, uint64_t tail_bytes, bool in_space);
// The live bytes of class `cls` on `tier` (0 for indices out of range).
int64_t class_live_bytes(int cls, int tier);
// The most of them live on `tier` at once since the process began.
int64_t class_peak_bytes(int cls, int tier);
// Drops every record (a new initialisation of the library).
void objects_reset();
// Installs the release observer once.
void objects_install();

}  // namespace hm::place
