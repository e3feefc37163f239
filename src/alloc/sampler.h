// The referenced-page sampler, shared by the emulated tier (its third charge point: memory whose
// accesses nobody declares) and, through the phase observers, the profiler (per-phase referenced
// bytes of large objects).
// A sample clears the kernel's referenced bits at a phase begin and reads them at its end. That
// costs the clear and the read, and afterwards every 4 KiB page the program touches again (an
// accessed-bit update the hardware makes slowly, worse in virtual machines); transparent huge
// pages cost 512 times less. So phases are sampled at a bounded rate: only while the sampler's
// estimated cost stays under HM_SAMPLE_BUDGET of the run time (counted from the library's load),
// except that a recording profiler gets the first instance of every phase name regardless, and of
// iterations inferred by time windows instances 2 and 3 instead (the first window is the run's
// start-up: a profiler alone does not sample it). An
// instance that is not sampled charges the emulated tier what the last sample of the same phase
// name found (nothing before its first sample).
#pragma once
#include <cstdint>
#include <vector>

#include "hetmem/hetmem.h"
#include "prim/prim.h"

namespace hm {

enum class SampleMode : uint8_t {
  kNone,     // nothing needs referenced bytes (no profile, no undeclared emulated memory)
  kSampled,  // referenced bits cleared at the begin, read at the end
  kCarried,  // over budget: the emulated tier is charged the last sample of this phase name
  kNested,   // inside a sampled phase: that sample covers it
};

// Both are called with the phase mutex held, in begin/end order. `every_phase`: an observer needs
// every phase name sampled (regardless of the budget: the first instance, or instances 2 and 3 of
// an `inferred` iteration).
SampleMode sampler_begin(uint16_t phase, bool every_phase, bool inferred);
// `mappings` receives every mapping with its referenced bytes when the instance was sampled.
void sampler_end(uint16_t phase, SampleMode mode, std::vector<prim::MappingUse> *mappings);
hm_sampler_stats_t sampler_stats();

}  // namespace hm
