// The class registry's internal side: what the object records and static placement need of it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "place/policy.h"

namespace hm::place {

// "metadata", "temporary", "hot", "streaming", "cold"; and the kind of such a name (-1 if none).
const char *class_kind_name(hm_class_kind_t kind);
int class_kind_of(const std::string &name);
// Adds `delta` bytes to the live bytes of class `cls` on `tier`.
void class_live_add(int cls, int tier, int64_t delta);
// The active policy once activated for this initialisation of the library (nullptr before).
const Policy *active_policy();

// Static placement (static_placement.cpp): installs the iteration observer once; settle() runs at
// the end of the observed iteration; stats and reset for the C API.
void static_placement_install();
void static_placement_reset();
hm_placement_stats_t static_placement_stats();
// Streaming (stream.cpp): forgets the helper model's decisions and the copy bandwidth measured
// under the previous initialisation.
void streaming_reset();
// The phases the helper model has decided for, and the live streams' counters summed (summary).
std::vector<std::string> helper_model_phases();
hm_stream_stats_t streaming_totals();
// The largest tile of the live streams of a class (the migration space's default follows it).
uint64_t largest_streamed_tile();
// The reactive baseline (reactive_placement.cpp): its iteration observer, reset and counters.
void reactive_placement_install();
void reactive_placement_reset();
hm_reactive_stats_t reactive_placement_stats();
// The run summary's iteration clock (summary.cpp) starts with the placement runtime.
void iteration_clock_start();

}  // namespace hm::place
