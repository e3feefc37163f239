// Phases and iterations of the program's main loop (hm_phase_begin/end, hm_iteration_next) as
// events that the layers above subscribe to: the profiler writes them into its trace, and the
// placement runtime acts at iteration boundaries. The referenced-page sampler (alloc/sampler.h)
// runs here, between the events, so that both the emulated tier's third charge point and the
// profiler's per-object referenced bytes come from one reading.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "prim/prim.h"

namespace hm {

struct PhaseEnd {
  uint16_t phase;
  uint16_t enclosing;       // the phase open around it (0: none)
  uint32_t iteration;       // the iteration it began in
  bool sampled;             // the sampler read this instance's referenced pages
  // When sampled: every mapping of the process with its referenced bytes during the phase.
  const std::vector<prim::MappingUse> *mappings;
};

// Called with the phase lock held, in event order; must not call the phase API.
class PhaseObserver {
 public:
  virtual ~PhaseObserver() = default;
  virtual void phase_named(uint16_t /*phase*/, const char * /*name*/) {}
  virtual void phase_begun(uint16_t /*phase*/) {}
  virtual void phase_ended(const PhaseEnd & /*end*/) {}
  virtual void iteration_begun(uint32_t /*iteration*/) {}
  // True while the observer needs the first instance of every phase name sampled (a recording
  // profiler); the sampler otherwise samples only within its budget.
  virtual bool wants_every_phase_sampled() const { return false; }
};

// Observers live as long as the library (static objects); at most a few.
void add_phase_observer(PhaseObserver *observer);
// Creates and adds one observer of type O on the first call (it lives as long as the process, as
// observers must); later calls do nothing.
template <class O>
void add_phase_observer_once() {
  static O *observer = [] {
    auto *o = new O();
    add_phase_observer(o);
    return o;
  }();
  (void)observer;
}

// Every phase name seen so far with its calls and total wall time (reports).
struct PhaseTotal {
  std::string name;
  uint64_t calls;
  double seconds;
};
std::vector<PhaseTotal> phase_totals();
// The innermost open phase's name ("" outside every phase).
std::string open_phase_name();

// The phase lock across a fork (alloc/runtime.cpp takes every lock in one order). In the child,
// which has no window thread, inferred iterations by windows end.
void phases_lock_for_fork();
void phases_unlock_after_fork(bool child);

}  // namespace hm
