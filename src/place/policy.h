// Placement policies and the mechanisms they use (docs/placement.md, docs/architecture.md).
//
// A Policy answers one question, where an allocation of an object class goes, and names the
// Mechanisms that act for it beyond that answer (static placement's settling at the end of the
// first iteration, streamed tiles staged by helper threads, cache prefetch, the reactive rounds,
// memory mode's DRAM cache). Each mechanism lives in its own unit with its observers, its counters
// and its part of the run summary; the class registry (classes.cpp) knows none of them.
//
// Adding a policy: one file in src/place/ (built without being listed) with the class and its
// accessor `const Policy &NAME_policy()`, plus the row NAME in policy.cpp's HM_BUILTIN_POLICIES
// (or policy_register at run time). A mechanism of its own comes with the policy that
// names it: every mechanism some policy names is reset at each initialisation and asked for its
// part of the run summary.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "hetmem/hetmem.h"
#include "place/budget.h"

namespace hm::place {

struct Request {
  hm_class_kind_t kind;
  int priority;
  size_t size;
};

struct Placement {
  int tier;        // -1: no tier has the role the policy asks for
  unsigned flags;  // HM_PREFERRED or HM_STRICT, plus HM_MOVABLE when the object may move later
};

// Streamed objects at least this large get mappings of their own (HM_MOVABLE) under static
// placement, so that the room hot objects leave on the fast tier can take them when the spaces
// are sized; smaller ones would waste most of a page each.
constexpr uint64_t kMovableStreamed = uint64_t{64} << 10;

// A mechanism of the placement runtime. Every registered mechanism is reset at each initialisation
// of the library; those the active policy names are then activated. Observers a mechanism installs
// live as long as the process (the alloc layer cannot remove them), so they ask active() on every
// event.
class Mechanism {
 public:
  virtual ~Mechanism() = default;
  virtual const char *name() const = 0;
  // Forgets the previous initialisation's state (every mechanism, before any placement).
  virtual void reset() {}
  // Sets up for the active policy: installs observers, a charge model. HM_OK, or a code with a
  // sentence in *why.
  virtual int activate(std::string * /*why*/) { return HM_OK; }
  // Undoes activate() when the policy is replaced before any object was placed under it.
  virtual void deactivate() {}
  // Adds its part to the run summary's "placement" object (hm_summary_write).
  virtual void summarise(nlohmann::json & /*placement*/) const {}
  // Whether the policy of this initialisation uses it, activated.
  bool active() const;

 private:
  friend void mechanism_set_active(Mechanism &m, bool on);
  std::atomic<uint64_t> active_epoch_{~uint64_t{0}};
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual const char *name() const = 0;
  virtual const char *doc() const = 0;
  virtual Placement place(const Request &r) const = 0;
  // The mechanisms that act for the policy (none: placement at allocation is all it does).
  virtual std::vector<Mechanism *> mechanisms() const { return {}; }
  // Once per initialisation, before its mechanisms and the first placement: the policy's own
  // set-up. HM_OK, or a code with a sentence in *why.
  virtual int activate(std::string * /*why*/) const { return HM_OK; }
  // Whether a class's own interleave ratio (hm_class_interleave) applies: not under the policies
  // that put everything on one tier (all-fast, slow-only, memory-mode).
  virtual bool honours_class_interleave() const { return false; }
  // The share (percent) of each large object the policy itself puts on the fast tier by page range
  // (interleave); -1: none, objects are placed whole.
  virtual int object_fast_percent() const { return -1; }
};

// The one instance of a policy or mechanism class: what each unit's accessor returns.
template <class T>
T &single() {
  static T instance;
  return instance;
}

// The registry (policy.cpp).
const Policy *policy_find(const std::string &name);  // nullptr if unknown
std::string policy_names();                          // "first-touch, all-fast, ..."
std::vector<const Policy *> policies();              // in the table's order, then registered ones
// Adds a policy defined outside the table (an extension, a test). HM_EINVAL if the name is taken.
int policy_register(const Policy *policy);
// The iteration clock and every mechanism some policy names, each once.
std::vector<Mechanism *> all_mechanisms();

// The policy of this initialisation of the library: HM_POLICY on first use, or hm_policy_select's.
// chosen_policy() only chooses; placing_policy() also activates it and its mechanisms once per
// initialisation. nullptr (error recorded, *rc set) on failure.
const Policy *chosen_policy(int *rc);
const Policy *placing_policy(int *rc);
// The policy once activated for this initialisation (nullptr before).
const Policy *active_policy();
// Records that an object was placed under the policy (hm_policy_select refuses to switch then).
void policy_mark_used();
// hm_policy_select: switches before any object was placed, undoing the previous activation.
int policy_select(const Policy *p);

}  // namespace hm::place
