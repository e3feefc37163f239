#include "alloc/settings.h"

#include "tier/tier.h"

namespace hm {

HeapDirectory g_heap_directory;

AllocSettings g_alloc_settings;

void heap_install(int tier, TierHeap *heap) {
  if (tier >= 0 && tier < kMaxTiers) g_heap_directory.heaps[tier] = heap;
}

}  // namespace hm
