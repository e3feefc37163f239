#include "alloc/heap.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "alloc/hook.h"
#include "alloc/settings.h"
#include "base/error.h"
#include "base/options.h"
#include "prim/prim.h"
#include "tier/copy_ops.h"

namespace hm {

// ------------------------------------------------------------------------------------------
// Size classes: 16-byte steps to 128, then four classes per doubling up to 32 KiB. (Eight per
// doubling past 1 KiB wastes less of a block, sqlite's 4,368-byte page-cache entries 4,608 bytes
// against 5,120, and 1 MB less resident, but sqlite's first-level misses went from 11.8 M to
// 13.8 M with the pages' colours below; blocks one cache line longer than their class, so that
// side by side they start in every set, made no difference with the colours and cost memory.)
namespace {
constexpr int class_of(size_t s) {
  if (s <= 128) return s == 0 ? 0 : static_cast<int>((s + 15) >> 4) - 1;
  int lg = 63 - __builtin_clzll(s - 1);
  int sub = static_cast<int>((s - 1 - (size_t{1} << lg)) >> (lg - 2));
  return 8 + (lg - 7) * 4 + sub;
}

// The bytes of a block of class c: its largest request.
constexpr size_t bytes_of(int c) {
  if (c < 8) return static_cast<size_t>(c + 1) * 16;
  int lg = 7 + (c - 8) / 4, sub = (c - 8) % 4;
  return (size_t{1} << lg) + static_cast<size_t>(sub + 1) * (size_t{1} << (lg - 2));
}
static_assert(bytes_of(kClasses - 1) == kSmallMax && class_of(kSmallMax) == kClasses - 1);

// The alignment every block of class c keeps: a power of two's own (they serve aligned
// requests), at most a cache line for the others, whose pages start at a colour (refill).
constexpr size_t alignment_of(int c) {
  const size_t bytes = bytes_of(c), low = bytes & (~bytes + 1);
  return low == bytes || low < 64 ? low : 64;
}

// Up to 1 KiB every class boundary is a multiple of 16 bytes, so the class of a size there is a
// table's entry, indexed by the size in 16-byte steps. What the fast paths need of a class (its
// bytes, the most blocks a thread's bin keeps) sits side by side: one cache line for 8 classes.
constexpr size_t kTableMax = 1024;
struct ClassInfo {
  uint32_t bytes;
  uint32_t bin_limit;  // a bin holding this many gives a batch back to the central list
};
struct ClassTables {
  uint8_t of_steps[kTableMax / 16 + 1] = {};
  ClassInfo info[kClasses] = {};
  constexpr ClassTables() {
    for (size_t i = 0; i <= kTableMax / 16; ++i) of_steps[i] = static_cast<uint8_t>(class_of(i * 16));
    for (int c = 0; c < kClasses; ++c) {
      // Blocks moved between a thread cache and the central list at a time: about 16 KiB, 4 to 64.
      const size_t bytes = bytes_of(c), batch = 16384 / bytes < 4 ? 4 : (16384 / bytes > 64 ? 64 : 16384 / bytes);
      info[c] = ClassInfo{static_cast<uint32_t>(bytes), static_cast<uint32_t>(2 * batch)};
    }
  }
};
constexpr ClassTables kClassTables;

inline int size_class(size_t s) { return s <= kTableMax ? kClassTables.of_steps[(s + 15) >> 4] : class_of(s); }

inline size_t class_size(int c) { return kClassTables.info[c].bytes; }
inline uint32_t bin_limit(int cls) { return kClassTables.info[cls].bin_limit; }
inline uint32_t batch_for(int cls) { return bin_limit(cls) / 2; }

constexpr uint32_t kAllPagesFree = ~uint32_t{1};  // page 0 holds the segment header

size_t round_up(size_t v, size_t unit) { return (v + unit - 1) / unit * unit; }

}  // namespace

// A page's layout (Segment::page_class says what the page holds).
struct PageDesc {
  uint16_t first = 0;         // medium runs: index of the first page of the run this page belongs to
  uint16_t first_block = 0;   // small pages: the offset of the first block (its colour)
  uint32_t span = 0;          // medium runs: pages in the run (first page only)
  uint64_t usable = 0;        // medium runs: usable bytes (first page only)
  // Small pages, under their class's central lock: the page's blocks on the central list, how many
  // of its blocks are out (with the program or in a thread's cache), and its links in the class's
  // list of pages that have blocks on their lists.
  void *free = nullptr;
  uint32_t out = 0;
  PageDesc *prev = nullptr, *next = nullptr;
};

// Each page's use, in the segment header's first cache line beside its slot record: a free reads
// the class of its block there, not the page's descriptor.
constexpr uint8_t kPageUnused = 0xff;  // free, or page 0 (the header)
constexpr uint8_t kPageMedium = 0xfe;  // part of a medium run
static_assert(kClasses < kPageMedium, "a page's class fits in a byte");

struct Segment {
  SlotOwner owner;
  uint8_t page_class[kPagesPerSegment];  // the class of a small page's blocks, or kPageUnused/kPageMedium
  Extent extent;
  uint32_t free_mask;
  Segment *next;
  PageDesc pages[kPagesPerSegment];
};
static_assert(sizeof(Segment) <= kPageBytes, "segment header must fit in page 0");
static_assert(offsetof(Segment, page_class) + kPagesPerSegment <= 64, "a free reads one line of the header");

namespace {
// A segment starts on a kSlotSize boundary (new_segment maps it so), its header first: the
// segment of a block, and the descriptor of the page a block or a descriptor is in.
inline Segment *segment_of(const void *p) {
  return reinterpret_cast<Segment *>(reinterpret_cast<uintptr_t>(p) & ~(uintptr_t{kSlotSize} - 1));
}
inline PageDesc *page_of(void *block) {
  return &segment_of(block)->pages[(reinterpret_cast<uintptr_t>(block) & (kSlotSize - 1)) >> kPageShift];
}

// The class's list of pages with free blocks on their own lists.
inline void partial_push(PageDesc *&list, PageDesc *pd) {
  pd->prev = nullptr;
  pd->next = list;
  if (list) list->prev = pd;
  list = pd;
}
inline void partial_remove(PageDesc *&list, PageDesc *pd) {
  if (pd->prev) pd->prev->next = pd->next;
  else list = pd->next;
  if (pd->next) pd->next->prev = pd->prev;
  pd->prev = pd->next = nullptr;
}
}  // namespace

struct LargeBlock {
  SlotOwner owner;
  Extent extent;
  size_t usable;
  HugePool *pool;
  LargeBlock *next_free;
  // A block split across two tiers (TierHeap::split_to): [tail_offset, usable) lives on tail_tier
  // and is accounted there; tail_tier < 0: the whole block is on the owner's tier.
  int tail_tier;
  size_t tail_offset;
};

// ------------------------------------------------------------------------------------------
// Records for large blocks come from mmap'd chunks, never from malloc, so that the preload
// library can route malloc here without recursion.
namespace {
std::mutex g_meta_mutex;
LargeBlock *g_meta_free = nullptr;

// Records never handed out, in the newest chunk: taken in order, so a chunk is touched as far as
// it is used.
LargeBlock *g_meta_next = nullptr, *g_meta_end = nullptr;

LargeBlock *meta_alloc() {
  std::lock_guard<std::mutex> lock(g_meta_mutex);
  if (LargeBlock *lb = g_meta_free) {
    g_meta_free = lb->next_free;
    return lb;
  }
  if (g_meta_next == g_meta_end) {
    void *mem = nullptr;
    if (prim::map_anon(kPageBytes, prim::kPageSize, 0, &mem) != HM_OK) return nullptr;
    g_meta_next = static_cast<LargeBlock *>(mem);
    g_meta_end = g_meta_next + kPageBytes / sizeof(LargeBlock);
  }
  return g_meta_next++;
}

void meta_free(LargeBlock *lb) {
  std::lock_guard<std::mutex> lock(g_meta_mutex);
  lb->owner.kind = OwnerKind{0};
  lb->next_free = g_meta_free;
  g_meta_free = lb;
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Thread caches: per thread, per tier, per class, a short list of free blocks.
struct Bin {
  void *head;
  uint32_t count;
  void *pop() {  // of a bin that holds a block
    void *p = head;
    head = *static_cast<void **>(p);
    --count;
    return p;
  }
  void push(void *p) {
    *static_cast<void **>(p) = head;
    head = p;
    ++count;
  }
};
// Small-block event counts are kept per thread (written only by their thread, read by
// hm_tier_stats), so the fast path has no atomic read-modify-write. A tier's counts are side by
// side, those of the first tiers in the cache's first line with its epoch.
struct TierCounts {
  std::atomic<uint64_t> allocs, frees;
  // Small-block bytes allocated minus freed by this thread on tiers without a budget, not yet
  // added to the tier's in_use (published once past +-kPublishBytes).
  std::atomic<int64_t> pending;
};
struct ThreadCache {
  uint64_t epoch;
  ThreadCache *next, *prev;  // registry of live caches
  TierCounts counts[kMaxTiers];
  Bin bins[kMaxTiers][kClasses];
};
constexpr int64_t kPublishBytes = 64 << 10;

namespace {
std::mutex g_registry_mutex;
ThreadCache *g_registry = nullptr;

inline void bump(std::atomic<uint64_t> &c) { c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }

__thread ThreadCache *t_cache __attribute__((tls_model("initial-exec"))) = nullptr;
pthread_key_t g_cache_key;
pthread_once_t g_cache_key_once = PTHREAD_ONCE_INIT;

void flush_cache(ThreadCache *tc) {
  bool live = tc->epoch == runtime_epoch();
  {
    // Counts move to the tiers and the cache leaves the registry in one step, so that
    // hm_tier_stats never sees them twice or not at all.
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    for (int t = 0; t < kMaxTiers && live; ++t) {
      TierHeap *h = heap_of(t);
      if (!h) continue;
      const TierCounts &n = tc->counts[t];
      h->counters().allocs.fetch_add(n.allocs.load(std::memory_order_relaxed), std::memory_order_relaxed);
      h->counters().frees.fetch_add(n.frees.load(std::memory_order_relaxed), std::memory_order_relaxed);
      h->counters().in_use.fetch_add(static_cast<uint64_t>(n.pending.load(std::memory_order_relaxed)),
                                     std::memory_order_relaxed);
    }
    if (tc->prev) tc->prev->next = tc->next;
    else g_registry = tc->next;
    if (tc->next) tc->next->prev = tc->prev;
  }
  for (int t = 0; t < kMaxTiers && live; ++t) {
    TierHeap *h = heap_of(t);
    for (int c = 0; c < kClasses && h; ++c) {
      Bin &b = tc->bins[t][c];
      if (!b.head) continue;
      h->give_back(c, b.head, b.count);
      b = Bin{nullptr, 0};
    }
  }
  prim::unmap(tc, round_up(sizeof(ThreadCache), prim::kPageSize));
}

void cache_destructor(void *p) {
  t_cache = nullptr;
  flush_cache(static_cast<ThreadCache *>(p));
}

void make_cache_key() { pthread_key_create(&g_cache_key, cache_destructor); }

ThreadCache *thread_cache() {
  ThreadCache *tc = t_cache;
  if (__builtin_expect(tc != nullptr && tc->epoch == runtime_epoch(), 1)) return tc;
  if (tc) {  // the runtime was finalized and re-initialised: the cached blocks are gone
    std::memset(tc->bins, 0, sizeof tc->bins);
    for (TierCounts &n : tc->counts) {
      n.allocs.store(0, std::memory_order_relaxed);
      n.frees.store(0, std::memory_order_relaxed);
      n.pending.store(0, std::memory_order_relaxed);
    }
    tc->epoch = runtime_epoch();
    return tc;
  }
  void *mem = nullptr;
  if (prim::map_anon(round_up(sizeof(ThreadCache), prim::kPageSize), prim::kPageSize, 0, &mem) != HM_OK)
    return nullptr;
  // The mapping is zeroed: only the counts are constructed, not the bins of every tier and class
  // (10 KiB, three pages a short process would fault in for the one tier it uses).
  tc = new (mem) ThreadCache;
  tc->epoch = runtime_epoch();
  tc->prev = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    tc->next = g_registry;
    if (g_registry) g_registry->prev = tc;
    g_registry = tc;
  }
  pthread_once(&g_cache_key_once, make_cache_key);
  pthread_setspecific(g_cache_key, tc);
  t_cache = tc;
  return tc;
}

}  // namespace

// ------------------------------------------------------------------------------------------
TierHeap::~TierHeap() {
  g_heap_directory.budgeted.fetch_and(~(1u << id_));
  for (int i = 0; i < kRetainSlots; ++i)
    if (retained_[i].addr) tier_->backing->unmap(retained_[i]);
  Segment *s = segments_;
  while (s) {
    Segment *next = s->next;
    Extent e = s->extent;
    slot_map().clear(e.addr, e.size);
    tier_->backing->unmap(e);
    s = next;
  }
}

void TierHeap::lock_for_fork() {
  for (Central &c : central_) c.mutex.lock();
  segment_mutex_.lock();
  large_mutex_.lock();
  if (huge_2m_) huge_2m_->lock_for_fork();
  if (huge_1g_ && huge_1g_ != huge_2m_) huge_1g_->lock_for_fork();
}

void TierHeap::unlock_after_fork() {
  if (huge_1g_ && huge_1g_ != huge_2m_) huge_1g_->unlock_after_fork();
  if (huge_2m_) huge_2m_->unlock_after_fork();
  large_mutex_.unlock();
  segment_mutex_.unlock();
  for (Central &c : central_) c.mutex.unlock();
}

void heap_records_lock_for_fork() {
  g_registry_mutex.lock();
  g_meta_mutex.lock();
}

void heap_records_unlock_after_fork() {
  g_meta_mutex.unlock();
  g_registry_mutex.unlock();
}

bool TierHeap::charge(uint64_t n) {
  uint64_t budget = counters_.budget.load(std::memory_order_relaxed), now;
  if (budget == 0) {
    now = counters_.in_use.fetch_add(n, std::memory_order_relaxed) + n;
  } else {
    uint64_t cur = counters_.in_use.load(std::memory_order_relaxed);
    do {
      if (cur + n > budget) return false;
    } while (!counters_.in_use.compare_exchange_weak(cur, cur + n, std::memory_order_relaxed));
    now = cur + n;
  }
  uint64_t hw = counters_.high_water.load(std::memory_order_relaxed);
  while (now > hw && !counters_.high_water.compare_exchange_weak(hw, now, std::memory_order_relaxed)) {
  }
  return true;
}

void TierHeap::unwind(uint64_t n) {
  counters_.in_use.fetch_sub(n, std::memory_order_relaxed);
  counters_.failures.fetch_add(1, std::memory_order_relaxed);
}

void TierHeap::uncharge(uint64_t n) { counters_.in_use.fetch_sub(n, std::memory_order_relaxed); }

std::string TierHeap::budget_state() const {
  const uint64_t budget = counters_.budget.load(), used = counters_.in_use.load();
  return format_size(budget) + " budget, " + format_size(used) + " in use, " +
         format_size(budget > used ? budget - used : 0) + " remaining";
}

bool TierHeap::claim(uint64_t n) {
  if (!charge(n)) {
    counters_.failures.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  counters_.claimed.fetch_add(n, std::memory_order_relaxed);
  return true;
}

bool TierHeap::unclaim(uint64_t n) {
  uint64_t cur = counters_.claimed.load(std::memory_order_relaxed);
  do {
    if (n > cur) return false;
  } while (!counters_.claimed.compare_exchange_weak(cur, cur - n, std::memory_order_relaxed));
  uncharge(n);
  return true;
}

// The pending bytes' accounting is explained in heap.h (move_pending).
void TierHeap::publish_pending(int64_t bytes) {
  if (bytes > 0) charge(static_cast<uint64_t>(bytes));
  else counters_.in_use.fetch_sub(static_cast<uint64_t>(-bytes), std::memory_order_relaxed);
}

__attribute__((always_inline)) inline void TierHeap::move_pending(TierCounts &counts, int tier, int64_t delta) {
  int64_t v = counts.pending.load(std::memory_order_relaxed) + delta;
  if (__builtin_expect(v > kPublishBytes || v < -kPublishBytes, 0)) {
    heap_of(tier)->publish_pending(v);
    v = 0;
  }
  counts.pending.store(v, std::memory_order_relaxed);
}

inline bool TierHeap::charge_small(uint64_t n, ThreadCache *tc) {
  if (counters_.budget.load(std::memory_order_relaxed) != 0) return charge(n);
  move_pending(tc->counts[id_], id_, static_cast<int64_t>(n));
  return true;
}

inline void TierHeap::uncharge_small(uint64_t n, ThreadCache *tc) {
  if (counters_.budget.load(std::memory_order_relaxed) != 0) uncharge(n);
  else move_pending(tc->counts[id_], id_, -static_cast<int64_t>(n));
}

void TierHeap::set_budget(uint64_t bytes) {
  counters_.budget.store(bytes);
  if (bytes) g_heap_directory.budgeted.fetch_or(1u << id_);
  else g_heap_directory.budgeted.fetch_and(~(1u << id_));
}

void TierHeap::event_counts(uint64_t *allocs, uint64_t *frees, uint64_t *in_use) {
  uint64_t a = counters_.allocs.load(), f = counters_.frees.load();
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  uint64_t used = counters_.in_use.load();
  for (ThreadCache *tc = g_registry; tc; tc = tc->next) {
    if (tc->epoch != runtime_epoch()) continue;
    const TierCounts &n = tc->counts[id_];
    a += n.allocs.load(std::memory_order_relaxed);
    f += n.frees.load(std::memory_order_relaxed);
    used += static_cast<uint64_t>(n.pending.load(std::memory_order_relaxed));
  }
  *allocs = a - counters_.allocs_base.load();
  *frees = f - counters_.frees_base.load();
  if (in_use) *in_use = used;
}

void TierHeap::reset_event_counts() {
  uint64_t a, f, used;
  counters_.allocs_base.store(0);
  counters_.frees_base.store(0);
  event_counts(&a, &f, &used);
  counters_.high_water.store(used);
  counters_.allocs_base.store(a);
  counters_.frees_base.store(f);
}

// The common case of allocate: a small block from the thread's bin of its class, on a tier without
// a budget (its bytes go to the thread's pending count). nullptr, with nothing changed, when the
// general path must decide.
__attribute__((always_inline)) inline void *TierHeap::allocate_cached(int tier, size_t size, unsigned flags) {
  if (__builtin_expect(size > kSmallMax || (flags & (HM_MOVABLE | HM_HUGE | HM_GUARDED)), 0)) return nullptr;
  ThreadCache *tc = t_cache;
  if (__builtin_expect(!tc || tc->epoch != runtime_epoch() || tier_budgeted(tier), 0)) return nullptr;
  const int cls = size_class(size);
  Bin &b = tc->bins[tier][cls];
  if (!b.head) return nullptr;
  void *p = b.pop();
  TierCounts &counts = tc->counts[tier];
  bump(counts.allocs);
  const size_t charged = class_size(cls);
  move_pending(counts, tier, static_cast<int64_t>(charged));
  if (flags & HM_ZERO) std::memset(p, 0, charged);
  return p;
}

void *TierHeap::allocate(size_t size, size_t align, unsigned flags) {
  if (__builtin_expect(align <= 16, 1))
    if (void *p = allocate_cached(id_, size, flags)) return p;
  return allocate_general(size, align, flags);
}

void *TierHeap::allocate_general(size_t size, size_t align, unsigned flags) {
  if (align < 16) align = 16;
  bool own_mapping = (flags & (HM_MOVABLE | HM_HUGE | HM_GUARDED)) || size > kMediumMax || align > kPageBytes;
  void *p = nullptr;
  size_t charged = 0;
  if (!own_mapping && size <= kSmallMax && align <= 4096) {
    size_t want = align > 16 ? round_up(size ? size : 1, align) : size;
    int cls = size_class(want);
    if (alignment_of(cls) < align) {  // powers of two are class sizes and aligned as they are
      size_t pow2 = size_t{1} << (64 - __builtin_clzll(want - 1));
      cls = size_class(pow2);
    }
    if (cls < kClasses) {
      charged = class_size(cls);
      ThreadCache *tc = thread_cache();
      if (!tc) return fail_null(HM_ENOMEM, "cannot map a thread cache");
      if (!charge_small(charged, tc)) goto over_budget;
      p = allocate_small(cls, tc);
      if (!p) {
        uncharge_small(charged, tc);
        counters_.failures.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
      }
      if (flags & HM_ZERO) std::memset(p, 0, charged);
      return p;
    }
  }
  if (!own_mapping) {
    charged = round_up(size ? size : 1, kPageBytes);
    if (!charge(charged)) goto over_budget;
    p = allocate_medium(charged);
    if (!p) {
      unwind(charged);
      return nullptr;
    }
    if (flags & HM_ZERO) std::memset(p, 0, charged);
    return p;
  }
  charged = round_up(size ? size : 1, prim::kPageSize);
  if (!charge(charged)) goto over_budget;
  p = allocate_large(charged, align, flags);
  if (!p) unwind(charged);
  return p;

over_budget:
  counters_.failures.fetch_add(1, std::memory_order_relaxed);
  return fail_null(HM_EBUDGET, "tier '%s': request of %s does not fit its budget (%s)", tier_->name.c_str(),
                   format_size(size).c_str(), budget_state().c_str());
}

void *TierHeap::allocate_small(int cls, ThreadCache *tc) {
  Bin &b = tc->bins[id_][cls];
  if (!b.head) {
    void *head = nullptr;
    int got = refill(cls, &head, batch_for(cls));
    if (got <= 0) return nullptr;
    b.head = head;
    b.count = static_cast<uint32_t>(got);
  }
  void *p = b.pop();
  bump(tc->counts[id_].allocs);
  return p;
}

int TierHeap::refill(int cls, void **head, uint32_t want) {
  Central &c = central_[cls];
  size_t bs = class_size(cls);
  std::lock_guard<std::mutex> lock(c.mutex);
  // Blocks that came back first, a page at a time, from the page whose list was started last.
  void *first = nullptr;
  uint32_t n = 0;
  while (n < want && c.partial) {
    PageDesc *pd = c.partial;
    while (n < want && pd->free) {
      void *b = pd->free;
      pd->free = *static_cast<void **>(b);
      *static_cast<void **>(b) = first;
      first = b;
      ++pd->out;
      ++n;
    }
    if (!pd->free) partial_remove(c.partial, pd);
  }
  if (n > 0) {
    *head = first;
    return static_cast<int>(n);
  }
  // Blocks are carved from the class's current page only as they are handed out, so that a page
  // is touched (and faulted in) as far as it is used: a process that allocates a few blocks of
  // many classes touches a few KiB of each 64 KiB page, not all of them. A carving refill links
  // the blocks that start in one 4 KiB page (one block at least), not a whole batch: a batch of
  // 1 KiB blocks is four pages, each a fault (5 us in this VM) that a short process like make's
  // children may never use.
  if (c.carve == c.carve_end) {
    Segment *seg = nullptr;
    size_t page = 0;
    {
      std::lock_guard<std::mutex> segments(segment_mutex_);
      if (!take_pages(1, &seg, &page)) return -1;
      seg->page_class[page] = static_cast<uint8_t>(cls);
    }
    // The page's colour: its first block starts a few cache lines in, a number that follows the
    // page's place in the address space, within the room the blocks leave at the page's end (none
    // lost), in steps that keep every block aligned as its class promises. The caches index by
    // the low bits of an address: pages 64 KiB apart would put the first block of every class,
    // and the same block of each page of a class, in the same few sets, where a program that
    // keeps one object of each of many sizes at hand (sqlite's virtual machine) misses on them in
    // turn.
    const size_t unit = std::max<size_t>(alignment_of(cls), 64);
    const size_t colours = std::min<size_t>((kPageBytes % bs) / unit + 1, 64);
    const size_t address_page = (reinterpret_cast<uintptr_t>(seg->extent.addr) >> kPageShift) + page;
    const size_t first_block = address_page % colours * unit;
    seg->pages[page] =
        PageDesc{.first = static_cast<uint16_t>(page), .first_block = static_cast<uint16_t>(first_block)};
    c.carve = static_cast<char *>(seg->extent.addr) + page * kPageBytes + first_block;
    c.carve_end = c.carve + (kPageBytes - first_block) / bs * bs;
  }
  size_t left = static_cast<size_t>(c.carve_end - c.carve) / bs;
  const size_t to_page_end = prim::kPageSize - reinterpret_cast<uintptr_t>(c.carve) % prim::kPageSize;
  const size_t in_page = (to_page_end + bs - 1) / bs;  // the blocks that start before the page ends
  size_t carved = std::min({left, size_t{want}, in_page});
  char *base = c.carve;
  for (size_t i = 0; i + 1 < carved; ++i) *reinterpret_cast<void **>(base + i * bs) = base + (i + 1) * bs;
  *reinterpret_cast<void **>(base + (carved - 1) * bs) = nullptr;
  c.carve += carved * bs;
  page_of(base)->out += static_cast<uint32_t>(carved);
  *head = base;
  return static_cast<int>(carved);
}

void *TierHeap::give_back(int cls, void *head, uint32_t count) {
  Central &c = central_[cls];
  std::lock_guard<std::mutex> lock(c.mutex);
  const PageDesc *carving = c.carve != c.carve_end ? page_of(c.carve) : nullptr;
  void *b = head;
  for (uint32_t i = 0; i < count; ++i) {
    void *next = *static_cast<void **>(b);
    PageDesc *pd = page_of(b);
    if (pd->out == 0) {  // none of the page's blocks is out: this one was freed twice; not kept
      b = next;
      continue;
    }
    if (!pd->free) partial_push(c.partial, pd);
    *static_cast<void **>(b) = pd->free;
    pd->free = b;
    if (--pd->out == 0 && pd != carving) release_small_page(c, pd);
    b = next;
  }
  return b;
}

void TierHeap::release_small_page(Central &c, PageDesc *pd) {
  partial_remove(c.partial, pd);
  Segment *seg = segment_of(pd);
  const size_t page = static_cast<size_t>(pd - seg->pages);
  std::lock_guard<std::mutex> segments(segment_mutex_);
  seg->page_class[page] = kPageUnused;
  seg->pages[page] = PageDesc{};
  seg->free_mask |= 1u << page;
}

Segment *TierHeap::new_segment() {
  Extent e;
  if (tier_->backing->map(kSlotSize, kSlotSize, &e) != HM_OK) return nullptr;
  if (reinterpret_cast<uintptr_t>(e.addr) & (kSlotSize - 1)) {  // segment_of needs the alignment
    tier_->backing->unmap(e);
    fail(HM_ENOTSUP, "tier '%s': its backing mapped a segment off a 2 MiB boundary", tier_->name.c_str());
    return nullptr;
  }
  auto *seg = new (e.addr) Segment{};
  seg->owner = SlotOwner{OwnerKind::kSegment, id_};
  seg->extent = e;
  seg->free_mask = kAllPagesFree;
  std::memset(seg->page_class, kPageUnused, sizeof seg->page_class);
  if (!slot_map().set(e.addr, e.size, &seg->owner)) {
    tier_->backing->unmap(e);
    return nullptr;
  }
  seg->next = segments_;
  segments_ = seg;
  counters_.reserved.fetch_add(kSlotSize, std::memory_order_relaxed);
  counters_.undeclared_records.fetch_add(1, std::memory_order_relaxed);
  return seg;
}

bool TierHeap::take_pages(size_t count, Segment **out, size_t *first) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (Segment *s = segments_; s; s = s->next) {
      uint32_t runs = s->free_mask;
      for (size_t i = 1; i < count && runs; ++i) runs &= s->free_mask >> i;
      if (!runs) continue;
      size_t start = static_cast<size_t>(__builtin_ctz(runs));
      uint32_t bits = (count >= 32 ? ~0u : ((1u << count) - 1)) << start;
      s->free_mask &= ~bits;
      *out = s;
      *first = start;
      return true;
    }
    if (!new_segment()) {
      std::string why = hm_last_error();
      fail(hm_last_error_code() ? hm_last_error_code() : HM_ENOMEM, "tier '%s': cannot map a new 2 MiB segment: %s",
           tier_->name.c_str(), why.c_str());
      return false;
    }
  }
  return false;
}

void *TierHeap::allocate_medium(size_t bytes) {
  size_t pages = bytes / kPageBytes;
  std::lock_guard<std::mutex> lock(segment_mutex_);
  Segment *seg = nullptr;
  size_t first = 0;
  if (!take_pages(pages, &seg, &first)) return nullptr;
  for (size_t i = 0; i < pages; ++i) {
    seg->page_class[first + i] = kPageMedium;
    seg->pages[first + i] = PageDesc{.first = static_cast<uint16_t>(first)};
  }
  seg->pages[first].span = static_cast<uint32_t>(pages);
  seg->pages[first].usable = bytes;
  counters_.allocs.fetch_add(1, std::memory_order_relaxed);
  return static_cast<char *>(seg->extent.addr) + first * kPageBytes;
}

void TierHeap::release_medium(Segment *seg, size_t page) {
  std::lock_guard<std::mutex> lock(segment_mutex_);
  size_t span = seg->pages[page].span;
  for (size_t i = 0; i < span; ++i) {
    seg->page_class[page + i] = kPageUnused;
    seg->pages[page + i] = PageDesc{};
  }
  seg->free_mask |= (span >= 32 ? ~0u : ((1u << span) - 1)) << page;
}

// Objects of at least this size keep their first and last 2 MiB in small pages (advise_huge_pages).
constexpr size_t kSmallEndsBytes = size_t{512} << 20;

// Transparent huge pages for a fresh anonymous mapping of a large object (HM_THP). One of
// kSmallEndsBytes or more keeps its first and last 2 MiB unit in small pages, as the C library's
// mappings (and numpy's own arrays) have them, where the block's header leaves those units partly
// outside a whole aligned 2 MiB: a program that touches a few elements of a huge array faults in
// 4 KiB pages there, not two huge pages zeroed (numpy's np.empty of 1 GiB with its two ends
// written: 0.19 ms against 0.03 ms). One that touches the whole object pays for its first touch
// at most 4.7% more than with huge pages throughout (2 of 256 units or more in small pages, each
// about 7x the cost of a huge page to fault in this VM), and 2.3% more than numpy's own, which has
// one such unit. A guarded mapping (the profiler's) stays one mapping: huge pages throughout.
static void advise_huge_pages(const Extent &e, bool guarded) {
  if (!thp_enabled() || guarded || e.size < kSmallEndsBytes) {
    prim::advise_huge(e.addr, e.size, thp_enabled());
    return;
  }
  // The mapping starts on a 2 MiB boundary (kSlotSize); `last` is the offset of the unit that
  // holds its last byte.
  const size_t unit = prim::kHugePage2M, last = round_up(e.size, unit) - unit;
  char *base = static_cast<char *>(e.addr);
  prim::advise_huge(base, unit, false);  // also where THP is "always"
  prim::advise_huge(base + unit, last - unit, true);
  prim::advise_huge(base + last, e.size - last, false);
}

void *TierHeap::allocate_large(size_t len, size_t align, unsigned flags) {
  bool guarded = (flags & HM_GUARDED) && align <= prim::kPageSize;
  // Guarded mappings get transparent huge pages like every other large allocation (their 2 MiB-
  // aligned interior), but never hugetlb pages: they need a mapping of their own.
  bool want_huge = !(flags & HM_NO_HUGE) && len >= prim::kHugePage2M && !tier_->backing->is_file();
  Extent e;
  HugePool *pool = nullptr;
  bool fresh = false;
  if (want_huge && !guarded && tier_->kind == HM_KIND_DRAM && align <= prim::kHugePage2M) {
    HugePool *order[2] = {len >= prim::kHugePage1G ? huge_1g_ : nullptr, huge_2m_};
    for (HugePool *hp : order) {
      if (!hp) continue;
      void *p = hp->take(len);
      if (p) {
        e = Extent{p, round_up(len, hp->page_size()), kNoFileOffset};
        pool = hp;
        break;
      }
    }
  }
  if (!pool) {
    // A mapping freed earlier is reused: no mmap, no page faults, no munmap's TLB shootdown later.
    // A guarded one (the profiler's large objects, a mapping each so that the kernel reports their
    // referenced bytes) only for a guarded request, resized to it so that the mapping is still
    // exactly the object's: from half to twice its size, so that an array grown by copying into a
    // larger one (numpy's np.append, a vector's growth) keeps the pages its previous copies
    // faulted in, as the C library's heap does. Pages its previous object referenced since the
    // last sample count for the new one (both lived within that one sampling interval).
    std::unique_lock<std::mutex> lock(large_mutex_);
    int best = -1;
    const size_t pages = round_up(len, prim::kPageSize);
    auto distance = [&](const Extent &r) {
      const size_t have = round_up(r.size, prim::kPageSize);
      return have > pages ? have - pages : pages - have;
    };
    for (int i = 0; i < kRetainSlots; ++i) {
      const Extent &r = retained_[i];
      if (!r.addr || r.guarded != guarded) continue;
      // An anonymous mapping of any larger size serves (its head does, below); a file's up to twice
      // the request.
      const bool fits = guarded ? 2 * round_up(r.size, prim::kPageSize) >= pages && r.size <= 2 * len
                                : r.size >= len && (r.file_offset == kNoFileOffset || r.size <= 2 * len);
      const bool aligned = (reinterpret_cast<uintptr_t>(r.addr) & (align - 1)) == 0;
      if (!fits || !aligned) continue;
      if (best < 0 || (guarded ? distance(r) < distance(retained_[best]) : r.size < retained_[best].size)) best = i;
    }
    // None serves: the anonymous ones smaller than the request are returned to the OS, as many as
    // the new mapping will hold (largest first), before it is made. Pages kept for a size the
    // program has outgrown would otherwise be resident beside the new mapping (R's vectors, grown
    // from 2 to 8 MiB: 30 MiB more at its peak), where the C library's heap reuses a freed chunk
    // for a larger request by joining it to its neighbours.
    Extent outgrown[kRetainSlots];
    int n_outgrown = 0;
    if (best < 0 && !guarded) {
      auto outgrown_by_request = [len](const Extent &r) {
        return !r.guarded && r.file_offset == kNoFileOffset && r.size < len;
      };
      for (size_t dropped = 0; dropped < pages;) {
        const int largest = largest_retained(outgrown_by_request);
        if (largest < 0) break;
        outgrown[n_outgrown] = take_retained(largest);
        dropped += outgrown[n_outgrown++].size;
      }
    }
    if (best >= 0) {
      e = take_retained(best);
      // A larger anonymous mapping: the request takes its head, in whole 2 MiB slots (a large
      // block's unit), and the rest stays retained on its own, so that the pages a freed array
      // faulted in serve whatever size comes next, as a freed chunk of the C library's heap does.
      const size_t head = round_up(len, kSlotSize);
      if (!guarded && e.file_offset == kNoFileOffset && e.size > head) {
        retained_[best] = Extent{static_cast<char *>(e.addr) + head, e.size - head, kNoFileOffset, false};
        retained_bytes_ += e.size - head;
        e.size = head;
      }
    }
    lock.unlock();
    for (int i = 0; i < n_outgrown; ++i) unmap_reserved(outgrown[i]);
    if (e.addr && guarded && round_up(e.size, prim::kPageSize) != pages) {
      const size_t had = e.size;
      if (tier_->backing->resize_guarded(&e, len) == HM_OK) {
        counters_.reserved.fetch_add(e.size, std::memory_order_relaxed);
        counters_.reserved.fetch_sub(had, std::memory_order_relaxed);
      } else {  // not resizable here: returned, and a new one mapped below
        tier_->backing->unmap(e);
        counters_.reserved.fetch_sub(had, std::memory_order_relaxed);
        e = Extent{};
      }
    } else if (e.addr && guarded) {
      e.size = len;
    }
  }
  if (!pool && !e.addr) {
    size_t a = align > kSlotSize ? align : kSlotSize;
    int rc = guarded ? tier_->backing->map_guarded(len, a, &e) : tier_->backing->map(len, a, &e);
    if (rc != HM_OK) {
      std::string why = hm_last_error();  // the backing said what went wrong
      return fail_null(rc, "tier '%s': cannot allocate %s: %s", tier_->name.c_str(), format_size(len).c_str(),
                       why.c_str());
    }
    counters_.reserved.fetch_add(e.size, std::memory_order_relaxed);
    fresh = true;
    if (want_huge) advise_huge_pages(e, guarded);
  }
  LargeBlock *lb = meta_alloc();
  if (lb) lb->owner = SlotOwner{OwnerKind::kLarge, id_};
  if (!lb || !slot_map().set(e.addr, e.size, &lb->owner)) {
    if (lb) meta_free(lb);
    if (pool) pool->give(e.addr, e.size);
    else unmap_reserved(e);
    return fail_null(HM_ENOMEM, "cannot record a large block");
  }
  counters_.undeclared_records.fetch_add(1, std::memory_order_relaxed);
  lb->extent = e;
  lb->usable = len;
  lb->pool = pool;
  lb->tail_tier = -1;
  lb->tail_offset = 0;
  if (pool) counters_.huge_bytes.fetch_add(len, std::memory_order_relaxed);
  counters_.allocs.fetch_add(1, std::memory_order_relaxed);
  if ((flags & HM_ZERO) && !(fresh && !tier_->backing->is_file())) std::memset(e.addr, 0, len);
  return e.addr;
}

bool TierHeap::growable(const void *ptr, const SlotOwner *owner) {
  if (owner->kind != OwnerKind::kLarge || owner->is_tracked()) return false;
  auto *lb = reinterpret_cast<const LargeBlock *>(owner);
  return ptr == lb->extent.addr && lb->extent.guarded && !lb->pool && lb->tail_tier < 0;
}

void *TierHeap::grow_guarded(void *ptr, SlotOwner *owner, size_t size) {
  if (!growable(ptr, owner)) return nullptr;
  auto *lb = reinterpret_cast<LargeBlock *>(owner);
  const Extent from = lb->extent;
  const size_t had = lb->usable, want = round_up(size, prim::kPageSize);
  if (want <= had || !charge(want - had)) return nullptr;
  Extent to;
  if (tier_->backing->map_guarded(want, kSlotSize, &to) != HM_OK) {
    uncharge(want - had);
    return nullptr;
  }
  // Nothing moved: the old range's slots hold the record again (their leaves are mapped), the new
  // mapping and the growth's charge are given back.
  auto give_up = [&] {
    slot_map().set(from.addr, from.size, owner);
    tier_->backing->unmap(to);
    uncharge(want - had);
    return nullptr;
  };
  // The slot map holds the new range before the pages move there (a leaf it cannot map fails
  // here, with nothing moved); the old range's slots are other slots (each mapping starts on one).
  if (!slot_map().set(to.addr, to.size, owner)) return give_up();
  if (tier_->backing->move_guarded(from, to) != HM_OK) {
    slot_map().clear(to.addr, to.size);
    return give_up();
  }
  slot_map().clear(from.addr, from.size);
  // The moved mapping keeps its own flags: huge pages as a fresh guarded mapping of this size has.
  if (want >= prim::kHugePage2M) prim::advise_huge(to.addr, want, thp_enabled());
  counters_.reserved.fetch_add(to.size, std::memory_order_relaxed);
  counters_.reserved.fetch_sub(from.size, std::memory_order_relaxed);
  lb->extent = to;
  lb->usable = want;
  return to.addr;
}

bool TierHeap::declare(SlotOwner *owner) {
  if (owner->is_declared() || __atomic_exchange_n(&owner->declared, 1u, __ATOMIC_RELAXED) != 0) return false;
  counters_.undeclared_records.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

void TierHeap::release_large(LargeBlock *lb) {
  Extent e = lb->extent;
  slot_map().clear(e.addr, e.size);
  if (!lb->owner.is_declared()) counters_.undeclared_records.fetch_sub(1, std::memory_order_relaxed);
  const bool split = lb->tail_tier >= 0;
  if (split) {
    if (TierHeap *tail = heap_of(lb->tail_tier)) tail->uncharge(lb->usable - lb->tail_offset);
    uncharge(lb->tail_offset);
  } else {
    uncharge(lb->usable);
  }
  counters_.frees.fetch_add(1, std::memory_order_relaxed);
  if (lb->pool) {
    counters_.huge_bytes.fetch_sub(lb->usable, std::memory_order_relaxed);
    lb->pool->give(e.addr, e.size);
    meta_free(lb);
    return;
  }
  meta_free(lb);
  // Keep the mapping for reuse (no munmap, no page faults next time); to make room, the largest
  // retained mappings are returned to the OS first.
  Extent evicted[kRetainSlots];
  int n_evicted = 0;
  bool kept = false;
  // A split mapping's tail pages are bound to another node: not kept for this tier's reuse.
  if (e.size <= retain_limit() && !split) {
    std::lock_guard<std::mutex> lock(large_mutex_);
    // An anonymous mapping rejoins its retained neighbours: a head freed beside the tail it was
    // cut from (allocate_large) is one mapping again, for a request of the whole size.
    if (!e.guarded && e.file_offset == kNoFileOffset) {
      for (bool merged = true; merged;) {
        merged = false;
        for (int i = 0; i < kRetainSlots; ++i) {
          Extent &r = retained_[i];
          if (!r.addr || r.guarded || r.file_offset != kNoFileOffset) continue;
          char *ra = static_cast<char *>(r.addr), *ea = static_cast<char *>(e.addr);
          if (ra + r.size == ea) e.addr = ra;
          else if (ea + e.size != ra) continue;
          e.size += take_retained(i).size;
          merged = true;
        }
      }
    }
    while (e.size <= retain_limit() && retained_bytes_ + e.size > retain_limit()) {
      evicted[n_evicted++] = take_retained(largest_retained([](const Extent &) { return true; }));
    }
    int free_slot = -1;
    for (int i = 0; i < kRetainSlots && free_slot < 0; ++i)
      if (!retained_[i].addr) free_slot = i;
    if (free_slot >= 0 && e.size <= retain_limit()) {
      retained_[free_slot] = e;
      retained_bytes_ += e.size;
      kept = true;
    }
  }
  for (int i = 0; i < n_evicted; ++i) unmap_reserved(evicted[i]);
  if (!kept) unmap_reserved(e);
}

void TierHeap::unmap_reserved(const Extent &e) {
  tier_->backing->unmap(e);
  counters_.reserved.fetch_sub(e.size, std::memory_order_relaxed);
}

// The common case of release: a small block back to the thread's bin of its class, while the bin
// has room. false, with nothing changed, when the general path must decide (and check a bad
// pointer).
__attribute__((always_inline)) inline bool TierHeap::release_cached(void *ptr, SlotOwner *owner) {
  if (__builtin_expect(owner->kind != OwnerKind::kSegment || kHetmemDebug, 0)) return false;
  // A segment's record is its header, and its range starts where the segment does.
  const size_t page = (reinterpret_cast<uintptr_t>(ptr) - owner->begin) >> kPageShift;
  const int cls = reinterpret_cast<Segment *>(owner)->page_class[page];
  const int tier = owner->tier;
  ThreadCache *tc = t_cache;
  if (__builtin_expect(cls >= kClasses || !tc || tc->epoch != runtime_epoch() || tier_budgeted(tier), 0))
    return false;
  Bin &b = tc->bins[tier][cls];
  if (__builtin_expect(b.count >= bin_limit(cls), 0)) return false;
  TierCounts &counts = tc->counts[tier];
  move_pending(counts, tier, -static_cast<int64_t>(class_size(cls)));
  bump(counts.frees);
  b.push(ptr);
  return true;
}

void TierHeap::release(void *ptr, SlotOwner *owner) {
  if (!release_cached(ptr, owner)) release_general(ptr, owner);
}

void TierHeap::release_general(void *ptr, SlotOwner *owner) {
  if (owner->kind == OwnerKind::kLarge) {
    auto *lb = reinterpret_cast<LargeBlock *>(owner);
    if (ptr != lb->extent.addr) {
      fail(HM_ENOTOWNED, "hm_free(%p): points inside a block of tier '%s' but not at its start", ptr,
           tier_->name.c_str());
      return;
    }
    release_large(lb);
    return;
  }
  auto *seg = reinterpret_cast<Segment *>(owner);
  size_t off = static_cast<size_t>(static_cast<char *>(ptr) - static_cast<char *>(seg->extent.addr));
  size_t page = off >> kPageShift;
  const uint8_t page_class = seg->page_class[page];
  if (page_class == kPageMedium) {
    const PageDesc &pd = seg->pages[page];
    if (pd.first != page || (off & (kPageBytes - 1)) != 0) {
      fail(HM_ENOTOWNED, "hm_free(%p): not the start of a block of tier '%s'", ptr, tier_->name.c_str());
      return;
    }
    uncharge(pd.usable);
    counters_.frees.fetch_add(1, std::memory_order_relaxed);
    release_medium(seg, page);
    return;
  }
  const size_t in_page = off & (kPageBytes - 1), first_block = seg->pages[page].first_block;
  if (page_class >= kClasses ||
      (kHetmemDebug && (in_page < first_block || (in_page - first_block) % class_size(page_class) != 0))) {
    fail(HM_ENOTOWNED, "hm_free(%p): not the start of a block of tier '%s'", ptr, tier_->name.c_str());
    return;
  }
  const int cls = page_class;
  const size_t block_size = class_size(cls);
  ThreadCache *tc = thread_cache();
  if (!tc) {
    uncharge(block_size);
    counters_.frees.fetch_add(1, std::memory_order_relaxed);
    give_back(cls, ptr, 1);
    return;
  }
  uncharge_small(block_size, tc);
  bump(tc->counts[id_].frees);
  Bin &b = tc->bins[id_][cls];
  b.push(ptr);
  if (b.count > bin_limit(cls)) {
    const uint32_t batch = batch_for(cls);
    b.head = give_back(cls, b.head, batch);
    b.count -= batch;
  }
}

size_t TierHeap::usable_size(const void *ptr, SlotOwner *owner) {
  if (owner->kind == OwnerKind::kLarge) return reinterpret_cast<LargeBlock *>(owner)->usable;
  auto *seg = reinterpret_cast<Segment *>(owner);
  size_t page = static_cast<size_t>(static_cast<const char *>(ptr) - static_cast<char *>(seg->extent.addr)) >> kPageShift;
  const uint8_t page_class = seg->page_class[page];
  if (page_class == kPageMedium) return seg->pages[seg->pages[page].first].usable;
  return page_class < kClasses ? class_size(page_class) : 0;
}

bool TierHeap::split_view(const SlotOwner *owner, SplitView *out) {
  if (!owner || owner->kind != OwnerKind::kLarge) return false;
  auto *lb = reinterpret_cast<const LargeBlock *>(owner);
  if (lb->tail_tier < 0) return false;
  *out = SplitView{reinterpret_cast<uintptr_t>(lb->extent.addr), lb->usable, lb->tail_offset, lb->tail_tier};
  return true;
}

int TierHeap::split_to(void *ptr, SlotOwner *owner, TierHeap &tail, size_t tail_offset) {
  if (owner->kind != OwnerKind::kLarge)
    return fail(HM_ENOTSUP, "split %p: the allocation shares its pages with others (HM_MOVABLE or 1 MiB and more)", ptr);
  auto *lb = reinterpret_cast<LargeBlock *>(owner);
  if (ptr != lb->extent.addr) return fail(HM_EINVAL, "split %p: not the start of an allocation", ptr);
  if (lb->pool || tier_->backing->is_file() || tail.tier_->backing->is_file() || lb->extent.guarded)
    return fail(HM_ENOTSUP, "split %p: only anonymous mappings outside the hugetlb pool split across tiers", ptr);
  if (lb->tail_tier >= 0) return fail(HM_ENOTSUP, "split %p: already split across tiers", ptr);
  if (&tail == this || tail_offset == 0 || tail_offset >= lb->usable || tail_offset % prim::kPageSize != 0)
    return fail(HM_EINVAL, "split %p at %zu: the offset must be a whole page inside the allocation, to another tier",
                ptr, tail_offset);
  Tier *ht = tier_, *tt = tail.tier_;
  size_t len = lb->usable - tail_offset;
  char *at = static_cast<char *>(lb->extent.addr) + tail_offset;
  if (!tail.charge(len)) {
    tail.counters_.failures.fetch_add(1, std::memory_order_relaxed);
    return fail(HM_EBUDGET, "split %p: tier '%s' cannot take %s", ptr, tt->name.c_str(), format_size(len).c_str());
  }
  int rc = HM_OK;
  if (tt->node >= 0 && tt->node != ht->node && prim::numa_node_count() > 1)
    rc = prim::bind_node(at, lb->extent.size - tail_offset, tt->node, true);
  if (rc != HM_OK) {
    tail.unwind(len);
    return fail(rc, "split %p: binding %s to '%s' failed: %s", ptr, format_size(len).c_str(), tt->name.c_str(),
                hm_strerror(rc));
  }
  charge_move_in_place(*ht, *tt, at, len);  // like a move: the tail changes tier where it is
  uncharge(len);
  tail.counters_.moves_in.fetch_add(1, std::memory_order_relaxed);
  tail.counters_.bytes_copied_in.fetch_add(len, std::memory_order_relaxed);
  lb->tail_offset = tail_offset;
  lb->tail_tier = tt->id;
  return HM_OK;
}

int TierHeap::move_to(void *ptr, SlotOwner *owner, TierHeap &dst) {
  if (owner->kind != OwnerKind::kLarge)
    return fail(HM_ENOTSUP, "hm_move(%p): the allocation shares its pages with others; allocate it with "
                "HM_MOVABLE or make it at least 1 MiB", ptr);
  auto *lb = reinterpret_cast<LargeBlock *>(owner);
  if (ptr != lb->extent.addr) return fail(HM_EINVAL, "hm_move(%p): not the start of an allocation", ptr);
  if (lb->tail_tier >= 0) return fail(HM_ENOTSUP, "hm_move(%p): the allocation is split across two tiers", ptr);
  if (lb->pool) return fail(HM_ENOTSUP, "hm_move(%p): the allocation lives in the hugetlb pool", ptr);
  if (lb->extent.guarded && (tier_->backing->is_file() || dst.tier_->backing->is_file()))
    return fail(HM_ENOTSUP, "hm_move(%p): a guarded allocation moves between anonymous tiers only", ptr);
  if (&dst == this) return HM_OK;
  Tier *st = tier_, *dt = dst.tier_;
  size_t len = lb->usable;
  if (!dst.charge(len)) {
    dst.counters_.failures.fetch_add(1, std::memory_order_relaxed);
    return fail(HM_EBUDGET, "hm_move: tier '%s' cannot take %s (%s)", dt->name.c_str(), format_size(len).c_str(),
                dst.budget_state().c_str());
  }
  int rc = HM_OK;
  if (!st->backing->is_file() && !dt->backing->is_file()) {
    // Anonymous memory on both sides: the pages move to the destination node in place.
    if (dt->node >= 0 && dt->node != st->node && prim::numa_node_count() > 1)
      rc = prim::bind_node(lb->extent.addr, lb->extent.size, dt->node, true);
    if (rc == HM_OK) {
      charge_move_in_place(*st, *dt, lb->extent.addr, len);
    }
  } else {
    // A file on either side: copy into fresh storage of the destination, then map it at the
    // old address (mremap for anonymous memory, MAP_FIXED for a file).
    Extent tmp;
    rc = dt->backing->map(lb->extent.size, kSlotSize, &tmp);
    if (rc == HM_OK) {
      tier_copy(tmp.addr, lb->extent.addr, len, dt, st);
      Extent at = lb->extent;
      rc = dt->backing->install_at(tmp, &at);
      if (rc == HM_OK) {
        st->backing->release_storage(lb->extent);
        lb->extent = at;
      } else {
        dt->backing->unmap(tmp);
      }
    }
  }
  if (rc != HM_OK) {
    dst.unwind(len);
    return fail(rc, "hm_move(%p): moving %s from '%s' to '%s' failed: %s", ptr, format_size(len).c_str(),
                st->name.c_str(), dt->name.c_str(), hm_strerror(rc));
  }
  uncharge(len);
  counters_.reserved.fetch_sub(lb->extent.size, std::memory_order_relaxed);
  dst.counters_.reserved.fetch_add(lb->extent.size, std::memory_order_relaxed);
  dst.counters_.moves_in.fetch_add(1, std::memory_order_relaxed);
  dst.counters_.bytes_copied_in.fetch_add(len, std::memory_order_relaxed);
  if (!lb->owner.is_declared()) {
    counters_.undeclared_records.fetch_sub(1, std::memory_order_relaxed);
    dst.counters_.undeclared_records.fetch_add(1, std::memory_order_relaxed);
  }
  lb->owner.tier = dt->id;
  return HM_OK;
}

// ------------------------------------------------------------------------------------------
HugePool *HugePool::create(size_t bytes, size_t page_size) {
  size_t size = round_up(bytes, page_size);
  void *p = nullptr;
  if (size == 0 || prim::map_anon(size, page_size, page_size, &p) != HM_OK) return nullptr;
  auto *pool = new HugePool(static_cast<char *>(p), size, page_size);
  pool->run_off_[0] = 0;
  pool->run_len_[0] = size;
  pool->runs_ = 1;
  return pool;
}

HugePool::~HugePool() { prim::unmap(base_, size_); }

bool HugePool::owns(const void *p) const {
  auto *c = static_cast<const char *>(p);
  return c >= base_ && c < base_ + size_;
}

void *HugePool::take(size_t bytes) {
  size_t len = round_up(bytes, page_);
  std::lock_guard<std::mutex> lock(mutex_);
  for (int i = 0; i < runs_; ++i) {  // runs are kept sorted by offset: first fit
    if (run_len_[i] < len) continue;
    size_t off = run_off_[i];
    run_off_[i] += len;
    run_len_[i] -= len;
    if (run_len_[i] == 0) {
      for (int j = i; j + 1 < runs_; ++j) {
        run_off_[j] = run_off_[j + 1];
        run_len_[j] = run_len_[j + 1];
      }
      --runs_;
    }
    return base_ + off;
  }
  return nullptr;
}

void HugePool::give(void *ptr, size_t bytes) {
  size_t off = static_cast<size_t>(static_cast<char *>(ptr) - base_), len = round_up(bytes, page_);
  std::lock_guard<std::mutex> lock(mutex_);
  int i = 0;
  while (i < runs_ && run_off_[i] < off) ++i;
  bool merge_prev = i > 0 && run_off_[i - 1] + run_len_[i - 1] == off;
  bool merge_next = i < runs_ && off + len == run_off_[i];
  if (merge_prev && merge_next) {
    run_len_[i - 1] += len + run_len_[i];
    for (int j = i; j + 1 < runs_; ++j) {
      run_off_[j] = run_off_[j + 1];
      run_len_[j] = run_len_[j + 1];
    }
    --runs_;
  } else if (merge_prev) {
    run_len_[i - 1] += len;
  } else if (merge_next) {
    run_off_[i] = off;
    run_len_[i] += len;
  } else if (runs_ < kMaxRuns) {
    for (int j = runs_; j > i; --j) {
      run_off_[j] = run_off_[j - 1];
      run_len_[j] = run_len_[j - 1];
    }
    run_off_[i] = off;
    run_len_[i] = len;
    ++runs_;
  }  // else: the run table is full and these pages stay unused until finalize
}

}  // namespace hm

// The preload library's entry points for a program's own allocations (alloc/hook.h): the thread
// cache's fast paths inline, here beside them, with no check the caller has made already. Called
// inside the hook (hm_inside_hook set), a call is nothing the allocation observer records (it
// skips those), so the fast paths need not ask for one; outside it, the general paths decide.
void *hm_direct_alloc(int tier, size_t size) {
  if (__builtin_expect(hm::heap_of(tier) != nullptr && hm_inside_hook != 0, 1))
    if (void *p = hm::TierHeap::allocate_cached(tier, size, 0)) return p;
  return hm_tier_alloc(tier, size, 0, HM_PREFERRED);
}

int hm_direct_free(void *ptr) {
  hm::SlotOwner *owner = hm::slot_map().get(ptr);
  if (!owner) return 0;
  hm::TierHeap *h = hm::heap_of(owner->tier);
  // A record the placement runtime tracks has its release observed (hm_free_if_owned).
  if (__builtin_expect(h != nullptr && hm_inside_hook != 0 && !owner->is_tracked(), 1) &&
      hm::TierHeap::release_cached(ptr, owner))
    return 1;
  return hm_free_if_owned(ptr);
}

void *hm_direct_realloc(void *ptr, size_t size) {
  hm::SlotOwner *owner = hm::slot_map().get(ptr);
  hm::TierHeap *h = owner ? hm::heap_of(owner->tier) : nullptr;
  if (__builtin_expect(h != nullptr && hm_inside_hook != 0 && !owner->is_tracked() && size != 0, 1)) {
    const size_t old = hm::TierHeap::usable_size(ptr, owner);
    if (size <= old && size >= old / 2) return ptr;  // in place, as hm_realloc keeps it
    // A small block that outgrows its size class: moved inside the thread's cache on the same
    // tier, copied as hm_realloc copies (an emulated tier's copy charged).
    if (void *np = hm::TierHeap::allocate_cached(owner->tier, size, 0)) {
      hm::tier_copy(np, ptr, old < size ? old : size, h->tier(), h->tier());
      if (!hm::TierHeap::release_cached(ptr, owner)) hm_free_if_owned(ptr);
      return np;
    }
  }
  return hm_realloc(ptr, size);
}
