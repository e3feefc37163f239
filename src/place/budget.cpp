#include "place/budget.h"

#include "alloc/runtime.h"
#include "tier/tier.h"

namespace hm::place {

int fast_tier() { return role_tier(HM_FAST); }
int capacity_tier() { return role_tier(HM_CAPACITY); }

uint64_t fast_budget_limit() {
  TierHeap *h = heap_of(fast_tier());
  return h ? h->counters().budget.load() : 0;
}

uint64_t fast_budget_bytes() {
  const int t = fast_tier();
  if (!heap_of(t)) return 0;
  if (uint64_t budget = fast_budget_limit()) return budget;
  hm_tier_info_t info;
  return hm_tier_info(t, &info) == HM_OK ? info.capacity : 0;
}

}  // namespace hm::place
