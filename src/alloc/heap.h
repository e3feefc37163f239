// The per-tier heap: small blocks in size classes (thread caches over central lists), medium
// blocks as runs of 64 KiB pages inside 2 MiB segments, large blocks as their own mappings
// (movable, huge-page capable), all accounted exactly against the tier's budget.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "alloc/slot_map.h"
#include "hetmem/hetmem.h"
#include "tier/tier.h"

namespace hm {

constexpr size_t kPageShift = 16;
constexpr size_t kPageBytes = size_t{1} << kPageShift;           // 64 KiB
constexpr size_t kPagesPerSegment = kSlotSize / kPageBytes;      // 32, page 0 holds the header
constexpr size_t kSmallMax = 32 * 1024;                          // largest size class
constexpr size_t kMediumMax = size_t{1} << 20;                   // larger: own mapping
constexpr int kClasses = 40;

struct TierCounters {
  std::atomic<uint64_t> budget{0}, in_use{0}, high_water{0}, reserved{0};
  std::atomic<uint64_t> claimed{0};  // of in_use: bytes held outside the heap (hm_tier_claim)
  std::atomic<uint64_t> allocs{0}, frees{0}, fallbacks_in{0}, fallbacks_out{0}, failures{0};
  std::atomic<uint64_t> moves_in{0}, bytes_copied_in{0}, huge_bytes{0};
  std::atomic<uint64_t> allocs_base{0}, frees_base{0};  // event counts at the last reset
  // Live records (segments, large blocks) whose accesses nobody has declared: the referenced-page
  // sampler is needed on an emulated tier only while this is above zero.
  std::atomic<int64_t> undeclared_records{0};
};

class HugePool;
struct ThreadCache;
struct TierCounts;
struct Segment;
struct PageDesc;
struct LargeBlock;

class TierHeap {
 public:
  explicit TierHeap(Tier *tier) : tier_(tier), id_(tier->id) {}
  ~TierHeap();
  TierHeap(const TierHeap &) = delete;
  TierHeap &operator=(const TierHeap &) = delete;

  // Allocates on this tier only. Returns nullptr with HM_EBUDGET when the budget cannot hold
  // the request, HM_ENOMEM/HM_ECAPACITY when the backing refuses; the error is recorded.
  void *allocate(size_t size, size_t align, unsigned flags);
  // Frees a block this heap owns (`owner` from the slot map).
  void release(void *ptr, SlotOwner *owner);
  // The common cases of allocate and release alone: a small block from, or back to, the thread's
  // cache, on tier `tier` (release: the owner's) when it has no budget; nullptr / false, with
  // nothing changed, where the general path must decide. They read the heap directory, the
  // thread's cache and the segment header's first cache line, not the heap itself. Defined inline
  // in heap.cpp, for its own entry points (allocate, release, hm_direct_alloc, hm_direct_free).
  static void *allocate_cached(int tier, size_t size, unsigned flags);
  static bool release_cached(void *ptr, SlotOwner *owner);
  static size_t usable_size(const void *ptr, SlotOwner *owner);
  // Grows a guarded large block (the profiler's objects: a mapping each) to `size` bytes without
  // copying: its pages move onto a larger guarded mapping (mremap), as the C library grows its
  // mmapped chunks, so a growing array keeps the pages it faulted in and is not copied at each
  // growth. The new address, or nullptr (nothing changed: the caller copies) when the block is
  // not a guarded one of its own (split, huge pool, tracked by placement), `size` is not larger,
  // the budget cannot hold the growth, or the backing refuses.
  void *grow_guarded(void *ptr, SlotOwner *owner, size_t size);
  // Whether grow_guarded can grow this block (it can still fail on the budget or the backing).
  static bool growable(const void *ptr, const SlotOwner *owner);
  // Every lock of this heap, taken before a fork and released after it on both sides, so that a
  // child never inherits one held by a thread it does not have (alloc/runtime.cpp).
  void lock_for_fork();
  void unlock_after_fork();
  // Moves the pages [tail_offset, end) of a large block (its own mapping) to tier `tail`, keeping
  // the address: bound to its node on NUMA tiers, accounted in its budget, charged there when
  // emulated. For the object at the free space's boundary and a class's interleave.
  int split_to(void *ptr, SlotOwner *owner, TierHeap &tail, size_t tail_offset);
  struct SplitView {
    uintptr_t base;
    size_t usable, tail_offset;
    int tail_tier;
  };
  // True, with the split, if owner is a block split across two tiers.
  static bool split_view(const SlotOwner *owner, SplitView *out);
  // The tier holding address `addr` of the record `owner` (the tail's tier past a split).
  static int tier_at(const SlotOwner *owner, uintptr_t addr) {
    SplitView sv;
    return split_view(owner, &sv) && addr >= sv.base + sv.tail_offset ? sv.tail_tier : owner->tier;
  }
  // Marks the record as declared (hm_access); true the first time.
  bool declare(SlotOwner *owner);
  int move_to(void *ptr, SlotOwner *owner, TierHeap &dst);

  // Bytes held on the tier outside this heap (hm_tier_claim), in its budget and in_use; false,
  // with nothing counted and a refusal recorded, when the budget cannot hold them.
  bool claim(uint64_t bytes);
  // Gives back claimed bytes; false, with nothing changed, for more than are claimed.
  bool unclaim(uint64_t bytes);

  // "B budget, U in use, R remaining", for the messages of requests the budget refuses.
  std::string budget_state() const;

  Tier *tier() const { return tier_; }
  // Sets the budget (0: none); small blocks of a budgeted tier are charged one by one.
  void set_budget(uint64_t bytes);
  // Allocations and frees since start or the last reset (thread caches included).
  void event_counts(uint64_t *allocs, uint64_t *frees, uint64_t *in_use = nullptr);
  void reset_event_counts();
  TierCounters &counters() { return counters_; }
  void set_huge_pools(HugePool *pool_2m, HugePool *pool_1g) {
    huge_2m_ = pool_2m;
    huge_1g_ = pool_1g;
  }
  // Refills a thread cache bin (internal: used by the thread cache).
  int refill(int cls, void **head, uint32_t want);
  // Gives the first `count` blocks of the chain at `head` back to the class's pages; returns the
  // rest of the chain.
  void *give_back(int cls, void *head, uint32_t count);

 private:
  bool charge(uint64_t bytes);
  void uncharge(uint64_t bytes);
  void unwind(uint64_t bytes);  // takes back a charge whose allocation failed
  __attribute__((noinline)) void *allocate_general(size_t size, size_t align, unsigned flags);
  __attribute__((noinline)) void release_general(void *ptr, SlotOwner *owner);
  void *allocate_small(int cls, ThreadCache *tc);
  bool charge_small(uint64_t bytes, ThreadCache *tc);
  void uncharge_small(uint64_t bytes, ThreadCache *tc);
  // Small blocks on a tier without a budget are accounted in the thread's pending bytes, published
  // to in_use in steps of kPublishBytes: no atomic on the fast path. hm_tier_stats adds the
  // pending bytes, so in_use stays exact; the high-water mark moves at publication, so for small
  // blocks it may lag the true peak by at most kPublishBytes per thread. With a budget every byte
  // is checked.
  static void move_pending(TierCounts &counts, int tier, int64_t delta);
  void publish_pending(int64_t bytes);
  void *allocate_medium(size_t size);
  void *allocate_large(size_t size, size_t align, unsigned flags);
  void release_medium(Segment *seg, size_t page);
  void release_large(LargeBlock *lb);
  Segment *new_segment();
  bool take_pages(size_t count, Segment **seg, size_t *first);

  Tier *tier_;
  const int id_;  // tier_->id, without a load of the tier
  TierCounters counters_;
  HugePool *huge_2m_ = nullptr, *huge_1g_ = nullptr;

  // A class's free blocks are kept by page, on each page's own list: a page whose blocks have all
  // come back returns to its segment, for any class or a medium run, instead of staying the
  // class's (a program that once needed many blocks of one size and later of others would hold
  // the pages of every size it ever used).
  struct Central {
    std::mutex mutex;
    PageDesc *partial = nullptr;  // the pages with blocks on their own lists (doubly linked)
    // The part of the class's newest page no block has been carved from yet (the page is not
    // returned while some is left).
    char *carve = nullptr, *carve_end = nullptr;
  } central_[kClasses];
  // Under c.mutex: returns a page of c's class none of whose blocks is out to its segment.
  void release_small_page(Central &c, PageDesc *pd);

  std::mutex segment_mutex_;
  Segment *segments_ = nullptr;

  static constexpr int kRetainSlots = 32;
  std::mutex large_mutex_;
  Extent retained_[kRetainSlots] = {};
  uint64_t retained_bytes_ = 0;
  // Under large_mutex_: the largest kept mapping of those `eligible` accepts (-1 if none), and a
  // kept mapping taken out of its slot.
  template <class Eligible>
  int largest_retained(Eligible eligible) const {
    int largest = -1;
    for (int i = 0; i < kRetainSlots; ++i)
      if (retained_[i].addr && eligible(retained_[i]) && (largest < 0 || retained_[i].size > retained_[largest].size))
        largest = i;
    return largest;
  }
  // A large mapping returned to the OS, and no longer counted as reserved.
  void unmap_reserved(const Extent &e);
  Extent take_retained(int slot) {
    const Extent e = retained_[slot];
    retained_[slot] = Extent{};
    retained_bytes_ -= e.size;
    return e;
  }
};

// Pre-reserved hugetlb pages handed out first fit (Christgau (2021), hppmalloc).
class HugePool {
 public:
  static HugePool *create(size_t bytes, size_t page_size);  // nullptr if the kernel has no pages
  ~HugePool();
  void *take(size_t bytes);  // rounded up to the page size; nullptr when no run is free
  void give(void *ptr, size_t bytes);
  bool owns(const void *ptr) const;
  void lock_for_fork() { mutex_.lock(); }
  void unlock_after_fork() { mutex_.unlock(); }
  size_t page_size() const { return page_; }
  size_t total() const { return size_; }

 private:
  HugePool(char *base, size_t size, size_t page) : base_(base), size_(size), page_(page) {}
  char *base_;
  size_t size_, page_;
  std::mutex mutex_;
  static constexpr int kMaxRuns = 256;
  size_t run_off_[kMaxRuns] = {}, run_len_[kMaxRuns] = {};
  int runs_ = 0;
};

// The locks of the heaps' shared records (thread-cache registry, large-block records).
void heap_records_lock_for_fork();
void heap_records_unlock_after_fork();

}  // namespace hm
