// The tiers the placement runtime places on and the fast budget: the one reading of both that
// every unit of place/ uses.
#pragma once
#include <cstdint>

namespace hm::place {

int fast_tier();  // -1 if no tier has the role
int capacity_tier();
// The fast tier's budget as set (HM_FAST_BUDGET, hm_tier_set_budget); 0: unlimited.
uint64_t fast_budget_limit();
// The bytes the fast tier may hold: its budget, else its capacity when unlimited (0: no fast tier).
uint64_t fast_budget_bytes();

}  // namespace hm::place
