// libmemkind.so.0 from hetmem: memkind 1.14's interface (include/hetmem/memkind/) on hetmem's
// tiers, for programs and OpenMP runtimes that ask for memory kinds (docs/memkind.md). Written on
// hetmem's public C API, like any client (a kind is a role or a tier with allocation flags), and
// the bounds of the allocator's memory that the preload library reads too (alloc/hook.h).
//
// MEMKIND_DEFAULT is the C library's malloc: OpenMP runtimes route every default allocation
// through it once they have loaded memkind, and those stay where they would be (its blocks up to
// 32 KiB are kept for reuse by the thread that freed them, DefaultThreadCache, and its large blocks
// by the process, LargeDefaultBlocks: memkind's jemalloc keeps both). Every
// free finds the owner from the pointer (the allocator's bounds, then hetmem's slot map), so a
// pointer freed with the wrong kind, or with none, is still freed by the allocator that made it.
#include <errno.h>
#include <hetmem/hetmem.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

#include "alloc/hook.h"
#include "hetmem/memkind/hbwmalloc.h"
#include "hetmem/memkind/memkind.h"

namespace {

// Where a kind's memory comes from.
enum class Source { libc, role, tier, none };  // none: memkind's deprecated 1 GiB-page kinds

}  // namespace

struct memkind {
  memkind(const char *name_, Source source_, hm_role_t role_, unsigned flags_, bool needs_distinct_, bool predefined_)
      : name(name_), source(source_), role(role_), flags(flags_), needs_distinct(needs_distinct_),
        predefined(predefined_) {}
  const char *name;
  Source source;
  hm_role_t role;        // Source::role
  unsigned flags;        // HM_STRICT / HM_PREFERRED, HM_HUGE
  bool needs_distinct;   // only where the role's tier differs from the other role's (HBW, DAX_KMEM)
  bool predefined;
  std::atomic<int> tier{-2};  // resolved on first use: -1 unavailable, -2 not yet
  int unavailable = 0;        // the memkind error when it is unavailable
};

namespace {

constexpr unsigned kStrict = HM_STRICT, kPreferred = HM_PREFERRED, kHuge = HM_HUGE;

// The table (docs/memkind.md). "High bandwidth" and "lowest latency" are the fast role; DAX KMEM
// and "highest capacity" the capacity role; REGULAR and INTERLEAVE the DRAM tier of this node.
memkind g_kinds[] = {
    {"memkind_default", Source::libc, HM_FAST, 0, false, true},
    {"memkind_regular", Source::tier, HM_FAST, kStrict, false, true},
    {"memkind_hugetlb", Source::tier, HM_FAST, kStrict | kHuge, false, true},
    {"memkind_hbw", Source::role, HM_FAST, kStrict, true, true},
    {"memkind_hbw_all", Source::role, HM_FAST, kStrict, true, true},
    {"memkind_hbw_preferred", Source::role, HM_FAST, kPreferred, true, true},
    {"memkind_hbw_hugetlb", Source::role, HM_FAST, kStrict | kHuge, true, true},
    {"memkind_hbw_all_hugetlb", Source::role, HM_FAST, kStrict | kHuge, true, true},
    {"memkind_hbw_preferred_hugetlb", Source::role, HM_FAST, kPreferred | kHuge, true, true},
    {"memkind_hbw_interleave", Source::role, HM_FAST, kStrict, true, true},
    {"memkind_interleave", Source::tier, HM_FAST, kStrict, false, true},
    {"memkind_dax_kmem", Source::role, HM_CAPACITY, kStrict, true, true},
    {"memkind_dax_kmem_all", Source::role, HM_CAPACITY, kStrict, true, true},
    {"memkind_dax_kmem_preferred", Source::role, HM_CAPACITY, kPreferred, true, true},
    {"memkind_dax_kmem_interleave", Source::role, HM_CAPACITY, kStrict, true, true},
    {"memkind_highest_capacity", Source::role, HM_CAPACITY, kStrict, false, true},
    {"memkind_highest_capacity_preferred", Source::role, HM_CAPACITY, kPreferred, false, true},
    {"memkind_highest_capacity_local", Source::role, HM_CAPACITY, kStrict, false, true},
    {"memkind_highest_capacity_local_preferred", Source::role, HM_CAPACITY, kPreferred, false, true},
    {"memkind_lowest_latency_local", Source::role, HM_FAST, kStrict, false, true},
    {"memkind_lowest_latency_local_preferred", Source::role, HM_FAST, kPreferred, false, true},
    {"memkind_highest_bandwidth_local", Source::role, HM_FAST, kStrict, false, true},
    {"memkind_highest_bandwidth_local_preferred", Source::role, HM_FAST, kPreferred, false, true},
    {"memkind_hbw_gbtlb", Source::none, HM_FAST, kStrict, false, true},
    {"memkind_hbw_preferred_gbtlb", Source::none, HM_FAST, kPreferred, false, true},
    {"memkind_gbtlb", Source::none, HM_FAST, kStrict, false, true},
};
enum KindIndex {
  kDefault, kRegular, kHugetlb, kHbw, kHbwAll, kHbwPreferred, kHbwHugetlb, kHbwAllHugetlb,
  kHbwPreferredHugetlb, kHbwInterleave, kInterleave, kDaxKmem, kDaxKmemAll, kDaxKmemPreferred,
  kDaxKmemInterleave, kHighestCapacity, kHighestCapacityPreferred, kHighestCapacityLocal,
  kHighestCapacityLocalPreferred, kLowestLatencyLocal, kLowestLatencyLocalPreferred, kHighestBandwidthLocal,
  kHighestBandwidthLocalPreferred, kHbwGbtlb, kHbwPreferredGbtlb, kGbtlb, kKindCount
};
static_assert(sizeof g_kinds / sizeof g_kinds[0] == kKindCount, "one row per predefined kind");

std::mutex g_resolve_mutex;

// The kinds memkind_create_pmem made, for memkind_detect_kind (under g_resolve_mutex).
constexpr int kMaxPmemKinds = 64;
memkind *g_pmem_kinds[kMaxPmemKinds] = {};

// HM_MEMKIND: KIND=ROLE_OR_TIER overrides, comma-separated (HBW=emul:cxl,DAX_KMEM=capacity).
// Returns the override for a kind's short name ("HBW" for memkind_hbw), "" if none.
std::string override_for(const memkind &k) {
  char value[1024] = {};
  if (hm_option_get("HM_MEMKIND", value, sizeof value, nullptr, 0) != HM_OK || !*value) return "";
  std::string shortname = k.name + sizeof "memkind_" - 1;
  for (char &c : shortname) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  const std::string text = value;
  for (size_t at = 0; at <= text.size();) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(at, end - at);
    const size_t eq = item.find('=');
    if (eq != std::string::npos && item.substr(0, eq) == shortname) return item.substr(eq + 1);
    at = end + 1;
  }
  return "";
}

bool huge_pages_reserved() {
  char value[64] = {};
  uint64_t bytes = 0;
  return hm_option_get("HM_HUGETLB_POOL", value, sizeof value, nullptr, 0) == HM_OK &&
         hm_size_parse(value, &bytes) == HM_OK && bytes > 0;
}

// The tier a kind allocates on, resolved once (hetmem is initialised by the first call that needs
// it); -1 with k.unavailable set when this machine has no memory of the kind.
int resolve(memkind &k) {
  int t = k.tier.load(std::memory_order_acquire);
  if (t != -2) return t;
  std::lock_guard<std::mutex> lock(g_resolve_mutex);
  if ((t = k.tier.load(std::memory_order_relaxed)) != -2) return t;
  hm_tier_t tier = -1;
  int unavailable = 0;
  const std::string chosen = override_for(k);
  if (k.source == Source::none) {
    unavailable = MEMKIND_ERROR_UNAVAILABLE;  // deprecated by memkind itself, never available
  } else if (!chosen.empty()) {
    if (hm_tier_find(chosen.c_str(), &tier) != HM_OK) unavailable = MEMKIND_ERROR_ENVIRON;
  } else if (k.source == Source::tier) {
    if (hm_tier_find("dram", &tier) != HM_OK) unavailable = MEMKIND_ERROR_UNAVAILABLE;
  } else if (hm_role_tier(k.role, &tier) != HM_OK) {
    unavailable = MEMKIND_ERROR_UNAVAILABLE;
  } else if (k.needs_distinct) {
    // High-bandwidth memory is memory faster than the rest, DAX KMEM memory slower than DRAM:
    // with one tier for both roles there is neither.
    hm_tier_t other = -1;
    if (hm_role_tier(k.role == HM_FAST ? HM_CAPACITY : HM_FAST, &other) != HM_OK || other == tier)
      unavailable = MEMKIND_ERROR_UNAVAILABLE;
  }
  if (!unavailable && (k.flags & kHuge) && !huge_pages_reserved()) unavailable = MEMKIND_ERROR_HUGETLB;
  k.unavailable = unavailable;
  t = unavailable ? -1 : tier;
  k.tier.store(t, std::memory_order_release);
  return t;
}

std::atomic<int> g_hbw_policy{0};            // 0: not set (HBW_POLICY_PREFERRED)
std::atomic<bool> g_hbw_allocated{false};

// Freed MEMKIND_DEFAULT blocks of 32 MiB or more, kept for the next such request. The C library
// maps every block that large and unmaps it when it is freed (32 MiB is its largest mmap
// threshold), so a program (or an OpenMP runtime) that allocates a large default block every step
// pays a mapping and its page faults each time, where memkind's jemalloc keeps the memory. The
// blocks stay the C library's (free, realloc and malloc_usable_size work on them) and stay where
// they would be; at most HM_RETAIN bytes are kept, as hetmem's own tiers keep. The large blocks
// handed out are known by address (up to kLive at once), so a free of any other block costs one
// load, and a large block freed with the C library's free is simply not kept.
class LargeDefaultBlocks {
 public:
  static constexpr size_t kMin = size_t{32} << 20;

  // A kept block of at least `size` bytes and at most twice that, or nullptr.
  void *take(size_t size) {
    if (kept_.load(std::memory_order_relaxed) == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    int best = -1;
    for (int i = 0; i < kSlots; ++i)
      if (block_[i] && bytes_[i] >= size && bytes_[i] / 2 <= size && (best < 0 || bytes_[i] < bytes_[best])) best = i;
    if (best < 0) return nullptr;
    void *p = block_[best];
    block_[best] = nullptr;
    kept_bytes_ -= bytes_[best];
    kept_.fetch_sub(1, std::memory_order_relaxed);
    return p;
  }

  // Remembers a large block handed out, so that its free keeps it (when there is a free place).
  void handed_out(void *p) {
    for (std::atomic<void *> &slot : live_) {
      void *empty = nullptr;
      if (slot.compare_exchange_strong(empty, p)) {
        live_count_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    }
  }

  // Whether a large block may be out (then a free asks `keep`).
  bool any_out() const { return live_count_.load(std::memory_order_relaxed) != 0; }

  // Keeps `p` if it is a large block handed out and there is room (the largest kept blocks are
  // freed to make it); false: the caller frees it.
  __attribute__((noinline)) bool keep(void *p) {
    if (!forget(p)) return false;
    const size_t bytes = malloc_usable_size(p);  // (a block freed by free() left its address behind)
    if (bytes < kMin || bytes > limit()) return false;
    void *evicted[kSlots];
    int n_evicted = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      int slot = -1;
      for (;;) {
        int largest = -1;
        for (int i = 0; i < kSlots; ++i) {
          if (!block_[i] && slot < 0) slot = i;
          if (block_[i] && (largest < 0 || bytes_[i] > bytes_[largest])) largest = i;
        }
        if (slot >= 0 && kept_bytes_ + bytes <= limit()) break;
        evicted[n_evicted++] = block_[largest];
        kept_bytes_ -= bytes_[largest];
        block_[largest] = nullptr;
        kept_.fetch_sub(1, std::memory_order_relaxed);
        if (slot < 0) slot = largest;
      }
      block_[slot] = p;
      bytes_[slot] = bytes;
      kept_bytes_ += bytes;
      kept_.fetch_add(1, std::memory_order_relaxed);
    }
    for (int i = 0; i < n_evicted; ++i) free(evicted[i]);
    return true;
  }

  // Forgets `p` as a large block handed out (realloc moves it): whether it was one.
  bool forget(void *p) {
    if (live_count_.load(std::memory_order_relaxed) == 0) return false;
    for (std::atomic<void *> &slot : live_) {
      void *expected = p;
      if (slot.load(std::memory_order_relaxed) == p && slot.compare_exchange_strong(expected, nullptr)) {
        live_count_.fetch_sub(1, std::memory_order_relaxed);
        return true;
      }
    }
    return false;
  }

 private:
  static constexpr int kSlots = 8, kLive = 16;

  // HM_RETAIN, read at the first large default block freed (0 keeps none).
  static uint64_t limit() {
    static const uint64_t bytes = [] {
      char value[64];
      uint64_t b = 0;
      if (hm_option_get("HM_RETAIN", value, sizeof value, nullptr, 0) != HM_OK || hm_size_parse(value, &b) != HM_OK)
        return uint64_t{0};
      return b;
    }();
    return bytes;
  }

  std::mutex mutex_;
  void *block_[kSlots] = {};
  size_t bytes_[kSlots] = {};
  uint64_t kept_bytes_ = 0;
  std::atomic<int> kept_{0};
  std::atomic<void *> live_[kLive] = {};
  std::atomic<int> live_count_{0};
};

LargeDefaultBlocks g_large_default;

// Freed MEMKIND_DEFAULT blocks of up to 32 KiB, kept by the thread that freed them for its next
// request of the same size class, as memkind's jemalloc keeps small blocks in a thread cache. The
// C library's own thread cache stops at 1 KiB, so a block of 4 KiB made and freed in a loop took
// its general path (1.4-1.6x memkind's time). The blocks stay the C library's: free(), realloc()
// and malloc_usable_size() take them, and what a thread keeps (at most kDepth a class, kBytes in
// all) goes back to the C library when the thread ends. A block is kept in the class its usable
// size fills, so any block of a class serves any request of it.
namespace default_classes {

// 16 B steps to 128 B, then four to each doubling, up to kMax.
constexpr size_t kMax = size_t{32} << 10;
constexpr int kCount = 40;

constexpr size_t bound_of(int cls) {
  return cls < 8 ? size_t{16} * (cls + 1)
                 : (size_t{1} << (7 + (cls - 8) / 4)) + (size_t((cls - 8) % 4 + 1) << (5 + (cls - 8) / 4));
}
static_assert(bound_of(kCount - 1) == kMax, "the last class ends at kMax");

struct Bounds {
  size_t size[kCount];
};
constexpr Bounds kBounds = [] {
  Bounds b{};
  for (int c = 0; c < kCount; ++c) b.size[c] = bound_of(c);
  return b;
}();

// The class serving a request of `size` bytes (at most kMax).
inline int for_request(size_t size) {
  if (size <= 128) return size ? static_cast<int>((size - 1) >> 4) : 0;
  const int octave = 63 - __builtin_clzll(size - 1);  // 2^octave < size <= 2^(octave+1)
  return 8 + (octave - 7) * 4 + static_cast<int>(((size - 1) >> (octave - 2)) & 3);
}

// The largest class a block of `usable` bytes serves whole; -1: too small or too large to keep.
inline int for_block(size_t usable) {
  if (usable < 16 || usable >= kMax + kMax / 4) return -1;
  if (usable >= kMax) return kCount - 1;
  const int cls = for_request(usable);
  return kBounds.size[cls] == usable ? cls : cls - 1;
}

}  // namespace default_classes

class DefaultThreadCache {
 public:
  static constexpr size_t kMax = default_classes::kMax;

  // A kept block of size class `cls` (default_classes::for_request), or nullptr.
  static void *take(int cls) {
    Bins *bins = t_bins;
    if (!bins) return nullptr;
    Bin &bin = bins->bin[cls];
    if (bin.count == 0) return nullptr;
    bins->bytes -= default_classes::kBounds.size[cls];
    return bin.block[--bin.count];
  }

  // Keeps `p`, a C library block, for the calling thread; false when it does not fit (the caller
  // frees it).
  static bool keep(void *p) {
    const int cls = default_classes::for_block(malloc_usable_size(p));
    if (cls < 0) return false;
    Bins *bins = t_bins ? t_bins : make_bins();
    if (!bins) return false;
    Bin &bin = bins->bin[cls];
    const size_t bytes = default_classes::kBounds.size[cls];
    if (bin.count == kDepth || bins->bytes + bytes > kBytes) return false;
    bin.block[bin.count++] = p;
    bins->bytes += bytes;
    return true;
  }

 private:
  static constexpr int kDepth = 8;
  static constexpr size_t kBytes = size_t{512} << 10;

  struct Bin {
    void *block[kDepth];
    int count;
  };
  struct Bins {
    Bin bin[default_classes::kCount];
    size_t bytes;
  };

  static void release_bins(void *value) {
    Bins *bins = static_cast<Bins *>(value);
    if (t_bins == bins) t_bins = nullptr;
    for (Bin &bin : bins->bin)
      for (int i = 0; i < bin.count; ++i) free(bin.block[i]);
    free(bins);
  }

  __attribute__((noinline)) static Bins *make_bins() {
    static pthread_key_t key;
    static const bool keyed = pthread_key_create(&key, release_bins) == 0;
    if (!keyed) return nullptr;
    Bins *bins = static_cast<Bins *>(calloc(1, sizeof(Bins)));
    if (!bins) return nullptr;
    if (pthread_setspecific(key, bins) != 0) {
      free(bins);
      return nullptr;
    }
    return t_bins = bins;
  }

  // One pointer in static TLS: the cache's path costs no __tls_get_addr.
  static __thread Bins *t_bins;
};
__thread DefaultThreadCache::Bins *DefaultThreadCache::t_bins __attribute__((tls_model("initial-exec"))) = nullptr;

// Every allocation but a default one the thread's cache serves (allocate).
__attribute__((noinline)) void *allocate_general(memkind_t kind, size_t size, size_t align, bool zero) {
  if (!kind) return nullptr;
  if (kind->source == Source::libc) {
    if (size >= LargeDefaultBlocks::kMin && align <= 16) {
      // calloc's fresh mapping is zero already: a kept block would need clearing.
      void *p = zero ? nullptr : g_large_default.take(size);
      if (!p) p = zero ? calloc(1, size) : malloc(size);
      if (p) g_large_default.handed_out(p);
      return p;
    }
    if (align <= 16) {
      // A small request the thread's cache could not serve is made at its class's size, so that
      // the block serves the class when it is freed (its usable size fills the class).
      if (size <= DefaultThreadCache::kMax) size = default_classes::kBounds.size[default_classes::for_request(size)];
      return zero ? calloc(1, size) : malloc(size);
    }
    void *p = nullptr;
    if (posix_memalign(&p, align, size) != 0) return nullptr;
    if (zero) memset(p, 0, size);
    return p;
  }
  const int tier = resolve(*kind);
  if (tier < 0) return nullptr;
  return hm_tier_alloc(tier, size ? size : 1, align, kind->flags | (zero ? HM_ZERO : 0));
}

inline void *allocate(memkind_t kind, size_t size, size_t align, bool zero) {
  if (kind == &g_kinds[kDefault] && size <= DefaultThreadCache::kMax && align <= 16)
    if (void *p = DefaultThreadCache::take(default_classes::for_request(size))) return zero ? memset(p, 0, size) : p;
  return allocate_general(kind, size, align, zero);
}

inline void release(void *p) {
  if (!p) return;
  // hetmem's block: freed with one look-up of the slot map (hm_owns and hm_free would take two).
  if (hm_within_owned_bounds(p) && hm_free_if_owned(p)) return;
  if (!DefaultThreadCache::keep(p) && (!g_large_default.any_out() || !g_large_default.keep(p))) free(p);
}

memkind_t hbw_kind(hbw_pagesize_t pagesize = HBW_PAGESIZE_4KB) {
  g_hbw_allocated.store(true, std::memory_order_relaxed);
  const int policy = g_hbw_policy.load(std::memory_order_relaxed);
  const bool huge = pagesize != HBW_PAGESIZE_4KB;
  switch (policy) {
    case HBW_POLICY_BIND:
    case HBW_POLICY_BIND_ALL: return &g_kinds[huge ? kHbwHugetlb : kHbw];
    case HBW_POLICY_INTERLEAVE: return &g_kinds[kHbwInterleave];
    default: return &g_kinds[huge ? kHbwPreferredHugetlb : kHbwPreferred];
  }
}

}  // namespace

extern "C" {

memkind_t MEMKIND_DEFAULT = &g_kinds[kDefault];
memkind_t MEMKIND_REGULAR = &g_kinds[kRegular];
memkind_t MEMKIND_HUGETLB = &g_kinds[kHugetlb];
memkind_t MEMKIND_HBW = &g_kinds[kHbw];
memkind_t MEMKIND_HBW_ALL = &g_kinds[kHbwAll];
memkind_t MEMKIND_HBW_PREFERRED = &g_kinds[kHbwPreferred];
memkind_t MEMKIND_HBW_HUGETLB = &g_kinds[kHbwHugetlb];
memkind_t MEMKIND_HBW_ALL_HUGETLB = &g_kinds[kHbwAllHugetlb];
memkind_t MEMKIND_HBW_PREFERRED_HUGETLB = &g_kinds[kHbwPreferredHugetlb];
memkind_t MEMKIND_HBW_INTERLEAVE = &g_kinds[kHbwInterleave];
memkind_t MEMKIND_INTERLEAVE = &g_kinds[kInterleave];
memkind_t MEMKIND_DAX_KMEM = &g_kinds[kDaxKmem];
memkind_t MEMKIND_DAX_KMEM_ALL = &g_kinds[kDaxKmemAll];
memkind_t MEMKIND_DAX_KMEM_PREFERRED = &g_kinds[kDaxKmemPreferred];
memkind_t MEMKIND_DAX_KMEM_INTERLEAVE = &g_kinds[kDaxKmemInterleave];
memkind_t MEMKIND_HIGHEST_CAPACITY = &g_kinds[kHighestCapacity];
memkind_t MEMKIND_HIGHEST_CAPACITY_PREFERRED = &g_kinds[kHighestCapacityPreferred];
memkind_t MEMKIND_HIGHEST_CAPACITY_LOCAL = &g_kinds[kHighestCapacityLocal];
memkind_t MEMKIND_HIGHEST_CAPACITY_LOCAL_PREFERRED = &g_kinds[kHighestCapacityLocalPreferred];
memkind_t MEMKIND_LOWEST_LATENCY_LOCAL = &g_kinds[kLowestLatencyLocal];
memkind_t MEMKIND_LOWEST_LATENCY_LOCAL_PREFERRED = &g_kinds[kLowestLatencyLocalPreferred];
memkind_t MEMKIND_HIGHEST_BANDWIDTH_LOCAL = &g_kinds[kHighestBandwidthLocal];
memkind_t MEMKIND_HIGHEST_BANDWIDTH_LOCAL_PREFERRED = &g_kinds[kHighestBandwidthLocalPreferred];
memkind_t MEMKIND_HBW_GBTLB = &g_kinds[kHbwGbtlb];
memkind_t MEMKIND_HBW_PREFERRED_GBTLB = &g_kinds[kHbwPreferredGbtlb];
memkind_t MEMKIND_GBTLB = &g_kinds[kGbtlb];

int memkind_get_version(void) { return 1 * 1000000 + 14 * 1000 + 0; }

void memkind_error_message(int err, char *msg, size_t size) {
  if (!msg || !size) return;
  const char *text = nullptr;
  switch (err) {
    case MEMKIND_ERROR_UNAVAILABLE: text = "<memkind> Requested memory kind is not available"; break;
    case MEMKIND_ERROR_MBIND: text = "<memkind> Call to mbind() failed"; break;
    case MEMKIND_ERROR_MMAP: text = "<memkind> Call to mmap() failed"; break;
    case MEMKIND_ERROR_MALLOC: text = "<memkind> Call to malloc() failed"; break;
    case MEMKIND_ERROR_ENVIRON: text = "<memkind> Error parsing environment variable (HM_MEMKIND names an unknown tier)"; break;
    case MEMKIND_ERROR_INVALID: text = "<memkind> Invalid input arguments to memkind routine"; break;
    case MEMKIND_ERROR_TOOMANY: text = "<memkind> Attempted to initialize more than maximum (512) number of kinds"; break;
    case MEMKIND_ERROR_BADOPS: text = "<memkind> memkind_ops structure is poorly formed (missing or incorrect functions)"; break;
    case MEMKIND_ERROR_HUGETLB: text = "<memkind> unable to allocate huge pages (hetmem: set HM_HUGETLB_POOL)"; break;
    case MEMKIND_ERROR_MEMTYPE_NOT_AVAILABLE: text = "<memkind> Requested memory type is not available"; break;
    case MEMKIND_ERROR_OPERATION_FAILED: text = "<memkind> Operation failed"; break;
    case MEMKIND_ERROR_ARENAS_CREATE: text = "<memkind> Call to jemalloc's arenas.create () failed"; break;
    default: break;
  }
  if (text) std::snprintf(msg, size, "%s", text);
  else std::snprintf(msg, size, "<memkind> Undefined error number: %d", err);
}

int memkind_check_available(memkind_t kind) {
  if (!kind) return MEMKIND_ERROR_INVALID;
  if (kind->source == Source::libc) return 0;
  return resolve(*kind) < 0 ? kind->unavailable : 0;
}

memkind_t memkind_detect_kind(void *ptr) {
  hm_tier_t tier;
  if (!ptr) return nullptr;  // as memkind
  if (!hm_is_hetmems(ptr) || hm_ptr_tier(ptr, &tier) != HM_OK) return MEMKIND_DEFAULT;
  {
    std::lock_guard<std::mutex> lock(g_resolve_mutex);
    for (memkind *k : g_pmem_kinds)
      if (k && k->tier.load() == tier) return k;
  }
  for (memkind &k : g_kinds)
    if (k.source != Source::libc && resolve(k) == tier) return &k;
  return MEMKIND_DEFAULT;
}

void *memkind_malloc(memkind_t kind, size_t size) { return allocate(kind, size, 0, false); }

void *memkind_calloc(memkind_t kind, size_t num, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(num, size, &bytes)) return nullptr;
  return allocate(kind, bytes, 0, true);
}

int memkind_posix_memalign(memkind_t kind, void **memptr, size_t alignment, size_t size) {
  if (!memptr) return EINVAL;
  *memptr = nullptr;
  if (!kind || alignment < sizeof(void *) || (alignment & (alignment - 1))) return EINVAL;
  void *p = allocate(kind, size, alignment, false);
  if (!p) return ENOMEM;
  *memptr = p;
  return 0;
}

void *memkind_realloc(memkind_t kind, void *ptr, size_t size) {
  // memkind's rules: no kind and no pointer is EINVAL; size 0 frees and returns NULL.
  if (!ptr && !kind) {
    errno = EINVAL;
    return nullptr;
  }
  if (size == 0) {
    release(ptr);
    return nullptr;
  }
  if (!ptr) return memkind_malloc(kind, size);
  if (!hm_is_hetmems(ptr)) {
    g_large_default.forget(ptr);
    return realloc(ptr, size);
  }
  if (!kind || kind->source == Source::libc) return hm_realloc(ptr, size);  // stays on its tier
  // Another kind: the data moves to that kind's memory.
  void *fresh = memkind_malloc(kind, size);
  if (!fresh) return nullptr;
  const size_t old = hm_usable_size(ptr);
  memcpy(fresh, ptr, old < size ? old : size);
  hm_free(ptr);
  return fresh;
}

void memkind_free(memkind_t, void *ptr) { release(ptr); }

size_t memkind_malloc_usable_size(memkind_t, void *ptr) {
  if (!ptr) return 0;
  return hm_is_hetmems(ptr) ? hm_usable_size(ptr) : malloc_usable_size(ptr);
}

int memkind_create_pmem(const char *dir, size_t max_size, memkind_t *kind) {
  if (!dir || !kind) return MEMKIND_ERROR_INVALID;
  *kind = nullptr;
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK) != 0) return MEMKIND_ERROR_INVALID;
  if (max_size != 0 && max_size < MEMKIND_PMEM_MIN_SIZE) return MEMKIND_ERROR_INVALID;
  // hetmem's file tiers are configured, not created on the fly: the kind is the file tier that
  // lives in `dir` (HM_TIERS=persistent=file:DIR/pool:SIZE).
  std::string want = dir;
  while (want.size() > 1 && want.back() == '/') want.pop_back();
  for (int t = 0; t < hm_tier_count(); ++t) {
    hm_tier_info_t info;
    if (hm_tier_info(t, &info) != HM_OK || info.kind != HM_KIND_FILE) continue;
    std::string path = info.name + sizeof "file:" - 1;
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos || path.substr(0, slash ? slash : 1) != want) continue;
    // memkind's max_size: the kind's allocations fail beyond it. The tier's budget (strict, so
    // nothing falls back elsewhere); kinds that share the tier share the smallest limit.
    if (max_size != 0) {
      hm_tier_stats_t stats;
      if (hm_tier_stats(t, &stats) != HM_OK) return MEMKIND_ERROR_MEMTYPE_NOT_AVAILABLE;
      if ((stats.budget == 0 || max_size < stats.budget) && hm_tier_set_budget(t, max_size) != HM_OK)
        return MEMKIND_ERROR_INVALID;
    }
    auto *k = new (std::nothrow) memkind{"memkind_pmem", Source::tier, HM_PERSISTENT, kStrict, false, false};
    if (!k) return MEMKIND_ERROR_MALLOC;
    k->tier.store(t);
    std::lock_guard<std::mutex> lock(g_resolve_mutex);
    for (memkind *&slot : g_pmem_kinds)
      if (!slot) {
        slot = k;
        *kind = k;
        return 0;
      }
    delete k;
    return MEMKIND_ERROR_TOOMANY;
  }
  return MEMKIND_ERROR_MEMTYPE_NOT_AVAILABLE;
}

int memkind_destroy_kind(memkind_t kind) {
  if (!kind) return MEMKIND_ERROR_INVALID;
  if (kind->predefined) return MEMKIND_ERROR_OPERATION_FAILED;
  std::lock_guard<std::mutex> lock(g_resolve_mutex);
  for (memkind *&slot : g_pmem_kinds)
    if (slot == kind) {
      slot = nullptr;
      delete kind;
      return 0;
    }
  return MEMKIND_ERROR_INVALID;  // not a kind of this library
}

// --- hbwmalloc ---------------------------------------------------------------------------------

hbw_policy_t hbw_get_policy(void) {
  const int p = g_hbw_policy.load();
  return p ? static_cast<hbw_policy_t>(p) : HBW_POLICY_PREFERRED;
}

int hbw_set_policy(hbw_policy_t mode) {
  if (mode != HBW_POLICY_BIND && mode != HBW_POLICY_PREFERRED && mode != HBW_POLICY_INTERLEAVE &&
      mode != HBW_POLICY_BIND_ALL)
    return EINVAL;
  if (g_hbw_allocated.load()) return EPERM;  // memkind's rule: before the first allocation
  int unset = 0;
  return g_hbw_policy.compare_exchange_strong(unset, mode) ? 0 : EPERM;
}

int hbw_check_available(void) { return memkind_check_available(MEMKIND_HBW) == 0 ? 0 : ENODEV; }

int hbw_verify_memory_region(void *addr, size_t size, int flags) {
  if (!addr || size == 0 || (flags & ~HBW_TOUCH_PAGES)) return EINVAL;
  hm_tier_t tier, fast;
  if (hm_ptr_tier(addr, &tier) != HM_OK) return EFAULT;
  hm_tier_t last;
  if (hm_ptr_tier(static_cast<char *>(addr) + size - 1, &last) != HM_OK) return EFAULT;
  if (hm_role_tier(HM_FAST, &fast) != HM_OK) return -1;
  return tier == fast && last == fast ? 0 : -1;
}

void *hbw_malloc(size_t size) { return memkind_malloc(hbw_kind(), size); }
void *hbw_calloc(size_t num, size_t size) { return memkind_calloc(hbw_kind(), num, size); }

int hbw_posix_memalign(void **memptr, size_t alignment, size_t size) {
  return memkind_posix_memalign(hbw_kind(), memptr, alignment, size);
}

int hbw_posix_memalign_psize(void **memptr, size_t alignment, size_t size, hbw_pagesize_t pagesize) {
  if (pagesize < HBW_PAGESIZE_4KB || pagesize >= HBW_PAGESIZE_MAX_VALUE) return EINVAL;
  return memkind_posix_memalign(hbw_kind(pagesize), memptr, alignment, size);
}

void *hbw_realloc(void *ptr, size_t size) { return memkind_realloc(hbw_kind(), ptr, size); }
void hbw_free(void *ptr) { release(ptr); }
size_t hbw_malloc_usable_size(void *ptr) { return memkind_malloc_usable_size(nullptr, ptr); }

}  // extern "C"
