#include "alloc/settings.h"

#include "tier/tier.h"

namespace hm {

std::atomic<uint64_t> g_runtime_epoch{1};

TierHeap *g_heaps[HM_MAX_TIERS] = {};

AllocSettings g_alloc_settings;

void heap_install(int tier, TierHeap *heap) {
  if (tier >= 0 && tier < kMaxTiers) g_heaps[tier] = heap;
}

}  // namespace hm
