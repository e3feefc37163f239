#include "alloc/settings.h"

#include "tier/tier.h"

namespace hm {

std::atomic<uint64_t> g_runtime_epoch{1};

namespace {
TierHeap *g_heaps[kMaxTiers] = {};
}  // namespace

AllocSettings g_alloc_settings;

TierHeap *heap_of(int tier) { return tier >= 0 && tier < kMaxTiers ? g_heaps[tier] : nullptr; }

void heap_install(int tier, TierHeap *heap) {
  if (tier >= 0 && tier < kMaxTiers) g_heaps[tier] = heap;
}

}  // namespace hm
