// Placement policies: where an allocation of an object class goes (docs/placement.md). Every
// policy answers through the same interface, so one binary runs under each, and adding a policy
// adds a class here, not branches at call sites.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "hetmem/hetmem.h"

namespace hm::place {

// Under `reactive`, objects of this size or more get their own mapping, so that the sampler reads
// their page use and they can move (policy.cpp places them, reactive_placement.cpp moves them).
constexpr size_t kReactiveOwnMapping = size_t{64} << 10;

struct Request {
  hm_class_kind_t kind;
  int priority;
  size_t size;
};

struct Placement {
  int tier;           // -1: no tier has the role the policy asks for
  unsigned flags;     // HM_PREFERRED or HM_STRICT, plus HM_MOVABLE when the object may move later
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual const char *name() const = 0;
  virtual const char *doc() const = 0;
  // Called once per initialisation of the library, before the first object is placed. Returns
  // HM_OK, or a code with a sentence in *why (memory-mode on a real tier).
  virtual int activate(std::string * /*why*/) const { return HM_OK; }
  virtual Placement place(const Request &r) const = 0;
  // Whether static placement settles at the end of the first iteration (hetmem-static).
  virtual bool settles() const { return false; }
  // Whether kernels prefetch field data into the cache (hm_prefetch_distance > 0).
  virtual bool prefetches() const { return false; }
  // Whether streamed tile containers stage their batches in the migration space (hm_stream_*).
  virtual bool streams() const { return false; }
  // Whether objects are promoted and demoted after every iteration from sampled page use (reactive).
  virtual bool reacts() const { return false; }
  // Whether a class's own interleave ratio (hm_class_interleave) applies: not under the policies
  // that put everything on one tier (all-fast, slow-only, memory-mode).
  virtual bool honours_class_interleave() const { return false; }
  // The share (percent) of each large object the policy itself puts on the fast tier by page range
  // (interleave); -1: none, objects are placed whole.
  virtual int object_fast_percent() const { return -1; }
};

// The tiers policies place on, and the fast budget in bytes (the tier's capacity when unlimited).
int fast_tier();      // -1 if no tier has the role
int capacity_tier();
uint64_t fast_budget_bytes();

const Policy *policy_find(const std::string &name);  // nullptr if unknown
std::string policy_names();                          // "first-touch, all-fast, ..."

}  // namespace hm::place
