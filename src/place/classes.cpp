// Object classes (hm_class_*): the registry the C++ named allocators, the Fortran module and the
// PIC code allocate through, and the per-class record of where the active policy put each byte.
// Which policy places them, and its mechanisms, is policy.cpp's business.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "alloc/runtime.h"
#include "base/error.h"
#include "base/options.h"
#include "hetmem/hetmem.h"
#include "place/classes.h"
#include "place/objects.h"
#include "place/policy.h"
#include "tier/tier.h"
#include "place/spaces.h"
#include "prim/prim.h"

namespace hm::place {
namespace {

constexpr int kMaxClasses = HM_MAX_CLASSES;
constexpr int kTierSlots = kMaxTiers;  // a tier id is below it (the registry holds at most so many)

struct ClassRecord {
  char name[64] = {};
  hm_class_kind_t kind = HM_CLASS_COLD;
  int priority = 0;
  std::atomic<uint64_t> allocs{0}, bytes{0};
  std::atomic<uint64_t> bytes_on_tier[kTierSlots] = {};
  std::atomic<int> fast_percent{-1};  // hm_class_interleave: share of each object on the fast tier
};

const char *const kKindNames[HM_CLASS_KIND_COUNT] = {"metadata", "temporary", "hot", "streaming", "cold"};

std::mutex g_mutex;
ClassRecord g_classes[kMaxClasses];
std::atomic<int> g_count{0};
std::atomic<uint64_t> g_seq{0};

std::string class_names() {
  std::string out;
  for (int i = 0; i < g_count.load(); ++i) out += std::string(out.empty() ? "" : ", ") + g_classes[i].name;
  return out.empty() ? "none defined" : out;
}

void *class_chunk(int cls, size_t size, size_t align, unsigned flags) { return hm_class_alloc(cls, size, align, flags); }

// Objects this large of a class with its own interleave ratio are split by page range.
constexpr size_t kInterleaveMin = size_t{1} << 20;

// An allocation for class c refused below: the heap's own message, with the class and the policy.
void *refused(const ClassRecord &c, const Policy *policy) {
  std::string why = hm_last_error();
  return fail_null(hm_last_error_code(), "class '%s' (%s) under policy %s: %s", c.name, kKindNames[c.kind],
                   policy->name(), why.c_str());
}

// A new object of the class: its placement record and the class's counts.
void record(hm_class_t cls, ClassRecord &c, void *p, size_t size, int tier, bool in_space) {
  object_add(Object{p, cls, c.kind, c.priority, size, tier, in_space, g_seq.fetch_add(1, std::memory_order_relaxed)});
  c.allocs.fetch_add(1, std::memory_order_relaxed);
  c.bytes.fetch_add(size, std::memory_order_relaxed);
}

// A weighted interleave of one object (the class's own, hm_class_interleave, or the interleave
// policy's): the object is allocated on the capacity tier in its own mapping, then its last
// `percent`% of pages move to the fast tier (page-range binding on NUMA tiers; each part charged
// on its own tier when emulated), as far as the fast tier and the class's space have room (else
// it stays whole on the capacity tier, counted as the space's overflow).
void *interleaved_alloc(hm_class_t cls, ClassRecord &c, const Policy *policy, size_t size, size_t align,
                        unsigned flags, int percent) {
  const int fast = fast_tier(), cap = capacity_tier();
  policy_mark_used();
  void *p = hm_tier_alloc(cap, size, align, (flags & ~HM_STRICT) | HM_PREFERRED | HM_MOVABLE);
  if (!p) return refused(c, policy);
  hm_tier_t got = cap;
  hm_ptr_tier(p, &got);
  record(cls, c, p, size, got, false);
  // The records count the requested size; the heap splits the usable (page-rounded) size.
  const size_t usable = hm_usable_size(p);
  const uint64_t fast_bytes = static_cast<uint64_t>(size) * percent / 100 / prim::kPageSize * prim::kPageSize;
  const hm_space_t space = space_of(c.kind);
  bool split = false;
  if (got == cap && fast_bytes > 0 && spaces().reserve(space, fast_bytes)) {  // a refusal counts itself
    split = alloc_split(p, fast, usable - fast_bytes) == HM_OK && object_split(p, fast, fast_bytes, true);
    if (!split) {
      spaces().release(space, fast_bytes);
      spaces().overflowed(space);
    }
  }
  uint64_t on_fast = split ? fast_bytes : 0;
  if (got >= 0 && got < kTierSlots) c.bytes_on_tier[got].fetch_add(size - on_fast, std::memory_order_relaxed);
  if (fast < kTierSlots) c.bytes_on_tier[fast].fetch_add(on_fast, std::memory_order_relaxed);
  return p;
}

const bool g_chunks_installed = [] {
  set_class_chunk_alloc(class_chunk);
  return true;
}();

}  // namespace

const char *class_kind_name(hm_class_kind_t kind) {
  return kind >= 0 && kind < HM_CLASS_KIND_COUNT ? kKindNames[kind] : "unknown";
}

int class_kind_of(const std::string &name) {
  for (int k = 0; k < HM_CLASS_KIND_COUNT; ++k)
    if (name == kKindNames[k]) return k;
  return -1;
}

}  // namespace hm::place

using namespace hm;
using namespace hm::place;

extern "C" {

int hm_class_define(const char *name, hm_class_kind_t kind, int priority, hm_class_t *cls) {
  if (!name || !*name || !cls) return fail(HM_EINVAL, "hm_class_define: a class needs a name and an out-parameter");
  if (std::strlen(name) >= sizeof(ClassRecord{}.name))
    return fail(HM_EINVAL, "hm_class_define: the name '%s' is longer than 63 bytes", name);
  if (kind < 0 || kind >= HM_CLASS_KIND_COUNT)
    return fail(HM_EINVAL, "hm_class_define('%s'): kind %d is not one of metadata, temporary, hot, streaming, cold",
                name, static_cast<int>(kind));
  std::lock_guard<std::mutex> lock(g_mutex);
  int n = g_count.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i)
    if (std::strcmp(g_classes[i].name, name) == 0) {
      if (g_classes[i].kind != kind)
        return fail(HM_EINVAL, "hm_class_define('%s'): already defined as %s, not %s", name,
                    kKindNames[g_classes[i].kind], kKindNames[kind]);
      *cls = i;
      return HM_OK;
    }
  if (n == kMaxClasses) return fail(HM_EINVAL, "hm_class_define('%s'): more than %d classes", name, kMaxClasses);
  ClassRecord &c = g_classes[n];
  std::snprintf(c.name, sizeof c.name, "%s", name);
  c.kind = kind;
  c.priority = priority;
  g_count.store(n + 1, std::memory_order_release);
  *cls = n;
  return HM_OK;
}

int hm_class_find(const char *name, hm_class_t *cls) {
  if (!name || !cls) return fail(HM_EINVAL, "hm_class_find: NULL argument");
  for (int i = 0; i < g_count.load(std::memory_order_acquire); ++i)
    if (std::strcmp(g_classes[i].name, name) == 0) {
      *cls = i;
      return HM_OK;
    }
  return fail(HM_EINVAL, "no class named '%s' (classes: %s)", name, class_names().c_str());
}

void *hm_class_alloc(hm_class_t cls, size_t size, size_t align, unsigned flags) {
  int rc = HM_OK;
  const Policy *policy = placing_policy(&rc);
  if (!policy) return nullptr;
  if (cls < 0 || cls >= g_count.load(std::memory_order_acquire))
    return fail_null(HM_EINVAL, "hm_class_alloc: %d is not a defined class", cls);
  ClassRecord &c = g_classes[cls];
  const int fast = fast_tier();
  // A class's own interleave ratio, else the policy's (interleave), splits a large object by pages.
  const int own = c.fast_percent.load(std::memory_order_relaxed);
  const int percent = own >= 0 && policy->honours_class_interleave() ? own : policy->object_fast_percent();
  if (percent >= 0 && percent < 100 && size >= kInterleaveMin && capacity_tier() >= 0 && fast >= 0)
    return interleaved_alloc(cls, c, policy, size, align, flags, percent);
  Placement where = policy->place(Request{c.kind, c.priority, size});
  if (where.tier < 0)
    return fail_null(HM_ENOTIER, "class '%s' under policy %s: no tier has the role the policy asks for", c.name,
                     policy->name());
  // On the fast tier the object takes room in its space; a sized space that is full sends it to
  // the capacity tier (counted as the space's overflow).
  const hm_space_t space = space_of(c.kind);
  bool reserved = false;
  if (where.tier == fast) {
    reserved = spaces().reserve(space, size);
    if (!reserved) {
      int cap = capacity_tier();
      if (where.flags & HM_STRICT || cap < 0)
        return fail_null(HM_EBUDGET, "class '%s' (%s) under policy %s: the %s space is full (%s of %s)", c.name,
                         kKindNames[c.kind], policy->name(), hm_space_name(space),
                         format_size(spaces().in_use(space)).c_str(), format_size(spaces().budget(space)).c_str());
      where.tier = cap;
    }
  }
  policy_mark_used();
  void *p = hm_tier_alloc(where.tier, size, align, (flags & ~HM_STRICT) | where.flags);
  if (!p) {
    if (reserved) spaces().release(space, size);
    return refused(c, policy);
  }
  hm_tier_t got = where.tier;
  hm_ptr_tier(p, &got);
  if (reserved && got != fast) {  // the fast tier's own budget sent it on
    spaces().release(space, size);
    spaces().overflowed(space);
    reserved = false;
  }
  record(cls, c, p, size, got, reserved);
  if (got >= 0 && got < kTierSlots) c.bytes_on_tier[got].fetch_add(size, std::memory_order_relaxed);
  return p;
}

int hm_class_interleave(hm_class_t cls, int fast_percent) {
  if (cls < 0 || cls >= g_count.load(std::memory_order_acquire))
    return fail(HM_EINVAL, "hm_class_interleave: %d is not a defined class", cls);
  if (fast_percent < -1 || fast_percent > 100)
    return fail(HM_EINVAL, "hm_class_interleave('%s', %d): give a share of 0 to 100 percent (-1: none)",
                g_classes[cls].name, fast_percent);
  g_classes[cls].fast_percent.store(fast_percent, std::memory_order_relaxed);
  return HM_OK;
}

int hm_class_tier(hm_class_t cls, hm_tier_t *tier) {
  int rc = HM_OK;
  const Policy *policy = placing_policy(&rc);
  if (!policy) return rc;
  if (!tier || cls < 0 || cls >= g_count.load(std::memory_order_acquire))
    return fail(HM_EINVAL, "hm_class_tier: %d is not a defined class (or tier is NULL)", cls);
  const ClassRecord &c = g_classes[cls];
  Placement where = policy->place(Request{c.kind, c.priority, 0});
  if (where.tier < 0)
    return fail(HM_ENOTIER, "class '%s' under policy %s: no tier has the role the policy asks for",
                g_classes[cls].name, policy->name());
  *tier = where.tier;
  return HM_OK;
}

int hm_class_count(void) { return g_count.load(std::memory_order_acquire); }

int hm_class_info(hm_class_t cls, hm_class_info_t *info) {
  if (!info) return fail(HM_EINVAL, "hm_class_info: info is NULL");
  if (cls < 0 || cls >= g_count.load(std::memory_order_acquire))
    return fail(HM_EINVAL, "hm_class_info: %d is not a defined class", cls);
  const ClassRecord &c = g_classes[cls];
  *info = hm_class_info_t{};
  std::snprintf(info->name, sizeof info->name, "%s", c.name);
  info->kind = c.kind;
  info->priority = c.priority;
  info->allocs = c.allocs.load();
  info->bytes = c.bytes.load();
  for (int t = 0; t < kTierSlots; ++t) {
    info->bytes_on_tier[t] = c.bytes_on_tier[t].load();
    int64_t live = class_live_bytes(cls, t), peak = class_peak_bytes(cls, t);
    info->live_bytes_on_tier[t] = live > 0 ? static_cast<uint64_t>(live) : 0;
    info->peak_bytes_on_tier[t] = peak > 0 ? static_cast<uint64_t>(peak) : 0;
  }
  return HM_OK;
}

int hm_space_stats(hm_space_t space, hm_space_stats_t *stats) {
  if (!stats) return fail(HM_EINVAL, "hm_space_stats: stats is NULL");
  if (space < 0 || space >= HM_SPACE_COUNT)
    return fail(HM_EINVAL, "hm_space_stats: %d is not a space (0..%d: metadata, temporary, migration, free)",
                static_cast<int>(space), HM_SPACE_COUNT - 1);
  *stats = spaces().stats(space);
  return HM_OK;
}

}  // extern "C"
