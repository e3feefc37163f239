// The built-in mechanisms of the placement runtime (place/policy.h), one unit each; the policies
// that use them name them.
#pragma once
#include "place/policy.h"

namespace hm::place {

Mechanism &static_placement_mechanism();  // static_placement.cpp: spaces sized, hot objects settled
Mechanism &streaming_mechanism();         // stream.cpp: streamed tiles staged by helper threads
Mechanism &prefetch_mechanism();          // prefetch.cpp: the prefetch distance model
Mechanism &reactive_mechanism();          // reactive_placement.cpp: promotions and demotions per iteration
Mechanism &dram_cache_mechanism();        // memory_mode.cpp: the DRAM cache's charge model

}  // namespace hm::place
