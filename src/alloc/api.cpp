// The C API over the tier registry and the per-tier heaps (initialisation and the process-wide
// settings are in runtime.cpp).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "alloc/hook.h"
#include "alloc/runtime.h"
#include "base/error.h"
#include "base/options.h"
#include "prim/prim.h"
#include "tier/copy_ops.h"

__thread int hm_inside_hook __attribute__((tls_model("initial-exec"))) = 0;
__thread int hm_modes_open __attribute__((tls_model("initial-exec"))) = 0;

namespace hm {

namespace {

// Tells the observer about an allocation, unless the preload library is handling the call (it
// records the event itself, with the C function that was called).
inline void notify(const void *ptr, size_t size, bool is_free, const void *caller) {
  AllocObserver o = alloc_observer();
  if (__builtin_expect(o != nullptr, 0) && ptr && !hm_inside_hook) o(ptr, size, is_free, caller);
}

constexpr int kModeDepth = 32;
// The thread's mode stack, in a block of its own (prim::thread_block: not in the static TLS
// block), mapped by its first hm_mode_push.
thread_local int *t_modes = nullptr;
prim::ThreadBlockKey g_modes_key;

int tier_of_role(hm_role_t role, int *tier) {
  if (role < 0 || role >= HM_ROLE_COUNT)
    return fail(HM_ENOTIER, "unknown role %d (roles: HM_FAST, HM_CAPACITY, HM_PERSISTENT)", static_cast<int>(role));
  int t = role_tier(role);
  if (t < 0)
    return fail(HM_ENOTIER, "no tier has the role '%s' (set it with HM_TIERS=%s=...; known tiers: %s)",
                role_name(role), role_name(role), known_tier_names().c_str());
  *tier = t;
  return HM_OK;
}

// Why a request cannot be served at all: no such tier, a bad alignment or size.
__attribute__((noinline)) void *refuse(int tier, size_t size, size_t align) {
  if (!heap_of(tier)) return fail_null(HM_ENOTIER, "unknown tier %d (known: %s)", tier, known_tier_names().c_str());
  if (align & (align - 1)) return fail_null(HM_EINVAL, "alignment %zu is not a power of two", align);
  return fail_null(HM_EINVAL, "size %zu is larger than the address space", size);
}

__attribute__((noinline)) void *fall_back(TierHeap *first, size_t size, size_t align, unsigned flags);

// Preferred allocations fall back fast -> capacity and capacity -> fast; persistent never does.
inline void *alloc_chain(int tier, size_t size, size_t align, unsigned flags) {
  TierHeap *first = heap_of(tier);
  if (__builtin_expect(!first || (align & (align - 1)) || size > (size_t{1} << 47), 0)) return refuse(tier, size, align);
  void *p = first->allocate(size, align, flags);
  return __builtin_expect(p != nullptr, 1) ? p : fall_back(first, size, align, flags);
}

// The first tier refused: the next tiers of the chain, for a preferred allocation.
void *fall_back(TierHeap *first, size_t size, size_t align, unsigned flags) {
  void *p = nullptr;
  if ((flags & HM_STRICT) || first->tier()->backing->is_file()) return p;
  int chain[2] = {role_tier(HM_CAPACITY), role_tier(HM_FAST)};
  if (first->tier()->roles & (1u << HM_CAPACITY)) std::swap(chain[0], chain[1]);
  for (int t : chain) {
    TierHeap *h = heap_of(t);
    if (!h || h == first || h->tier()->backing->is_file()) continue;
    p = h->allocate(size, align, flags);
    if (p) {
      // The first tier counted a refusal; the request was served: it is a fallback instead.
      first->counters().failures.fetch_sub(1, std::memory_order_relaxed);
      first->counters().fallbacks_out.fetch_add(1, std::memory_order_relaxed);
      h->counters().fallbacks_in.fetch_add(1, std::memory_order_relaxed);
      log(2, "fallback: %zu bytes for '%s' placed on '%s'", size, first->tier()->name.c_str(), h->tier()->name.c_str());
      return p;
    }
  }
  return nullptr;
}

int current_tier() { return hm_modes_open > 0 ? t_modes[hm_modes_open - 1] : default_tier(); }

// The heap of `tier` for a C function that names one, the runtime started; nullptr with *rc the
// error (HM_ENOTIER listing the known tiers).
TierHeap *named_heap(hm_tier_t tier, int *rc) {
  if ((*rc = runtime_ensure()) != HM_OK) return nullptr;
  TierHeap *h = heap_of(tier);
  if (!h) *rc = fail(HM_ENOTIER, "unknown tier %d (known: %s)", tier, known_tier_names().c_str());
  return h;
}

}  // namespace

void modes_reset() { hm_modes_open = 0; }

}  // namespace hm

using namespace hm;

#define HM_GUARD_INT(body)                                           \
  try {                                                              \
    body                                                             \
  } catch (...) {                                                    \
    return fail(HM_ENOMEM, "internal allocation failed in %s", __func__); \
  }

extern "C" {

int hm_init(void) { return runtime_ensure(/*caller_reports=*/true); }
void hm_finalize(void) { runtime_finalize(); }

int hm_option_count(void) { return option_count(); }

int hm_option_info(int i, const char **name, const char **default_value, const char **doc) {
  if (i < 0 || i >= option_count()) return fail(HM_EINVAL, "option index %d out of range", i);
  const OptionSpec &s = option_spec(i);
  if (name) *name = s.name;
  if (default_value) *default_value = s.default_value;
  if (doc) *doc = s.doc;
  return HM_OK;
}

int hm_size_parse(const char *text, uint64_t *bytes) {
  HM_GUARD_INT({
    if (!text || !bytes) return fail(HM_EINVAL, "hm_size_parse: text and bytes must be given");
    std::string why;
    if (!parse_size(text, bytes, &why)) return fail(HM_EINVAL, "size '%s': %s", text, why.c_str());
    return HM_OK;
  })
}

const char *hm_option_text(const char *name) {
  try {
    const std::string *text = name ? option_text(name, nullptr) : nullptr;
    return text ? text->c_str() : nullptr;
  } catch (...) {
    return nullptr;  // the first read of the environment could not copy a value
  }
}

int hm_option_check(const char *name, const char *value) {
  HM_GUARD_INT({
    Option id;
    if (!option_find(name, &id)) return fail(HM_EINVAL, "unknown option '%s' (see `hetmem options`)", name ? name : "(null)");
    if (!value) return fail(HM_EINVAL, "hm_option_check: value is NULL");
    return option_check(id, value);
  })
}

int hm_option_number(const char *name, double *value) {
  HM_GUARD_INT({
    Option id;
    if (!option_find(name, &id)) return fail(HM_EINVAL, "unknown option '%s' (see `hetmem options`)", name ? name : "(null)");
    if (!value) return fail(HM_EINVAL, "hm_option_number: value is NULL");
    return option_number(id, value);
  })
}

int hm_option_get(const char *name, char *value, size_t value_len, char *source, size_t source_len) {
  HM_GUARD_INT({
    // Reads the environment if nothing has yet; never initialises the tiers (the preload library
    // asks at every program's start whether it has anything to do).
    if (!name) return fail(HM_EINVAL, "hm_option_get: name is NULL");
    OptionSource src;
    const std::string *text = option_text(name, &src);
    if (!text) return fail(HM_EINVAL, "unknown option '%s' (see `hetmem options`)", name);
    if (value && value_len) std::snprintf(value, value_len, "%s", text->c_str());
    if (source && source_len) std::snprintf(source, source_len, "%s", option_source_name(src));
    return HM_OK;
  })
}

int hm_tier_count(void) { return runtime_ensure() == HM_OK ? tier_count() : 0; }

int hm_tier_info(hm_tier_t tier, hm_tier_info_t *info) {
  HM_GUARD_INT({
    int rc = runtime_ensure();
    if (rc != HM_OK) return rc;
    Tier *t = tier_get(tier);
    if (!t) return fail(HM_ENOTIER, "unknown tier %d (known: %s)", tier, known_tier_names().c_str());
    if (!info) return fail(HM_EINVAL, "hm_tier_info: info is NULL");
    tier_describe(*t, info);
    return HM_OK;
  })
}

int hm_tier_find(const char *name, hm_tier_t *tier) {
  HM_GUARD_INT({
    int rc = runtime_ensure();
    if (rc != HM_OK) return rc;
    if (!name || !tier) return fail(HM_EINVAL, "hm_tier_find: name and tier must not be NULL");
    return tier_find(name, tier);
  })
}

int hm_role_tier(hm_role_t role, hm_tier_t *tier) {
  HM_GUARD_INT({
    int rc = runtime_ensure();
    if (rc != HM_OK) return rc;
    if (!tier) return fail(HM_EINVAL, "hm_role_tier: tier is NULL");
    return tier_of_role(role, tier);
  })
}

const char *hm_role_name(hm_role_t role) { return role_name(role); }

const char *hm_tier_kind_name(hm_tier_kind_t kind) {
  static const char *const kNames[HM_KIND_COUNT] = {"dram", "numa", "file", "emul"};
  return kind >= 0 && kind < HM_KIND_COUNT ? kNames[kind] : "unknown";
}

int hm_tier_set_budget(hm_tier_t tier, uint64_t bytes) {
  int rc = HM_OK;
  TierHeap *h = named_heap(tier, &rc);
  if (!h) return rc;
  h->set_budget(bytes);
  return HM_OK;
}

int hm_tier_claim(hm_tier_t tier, uint64_t bytes) {
  int rc = HM_OK;
  TierHeap *h = named_heap(tier, &rc);
  if (!h) return rc;
  if (h->claim(bytes)) return HM_OK;
  return fail(HM_EBUDGET, "tier '%s': a claim of %s does not fit its budget (%s)", h->tier()->name.c_str(),
              format_size(bytes).c_str(), h->budget_state().c_str());
}

int hm_tier_unclaim(hm_tier_t tier, uint64_t bytes) {
  int rc = HM_OK;
  TierHeap *h = named_heap(tier, &rc);
  if (!h) return rc;
  if (h->unclaim(bytes)) return HM_OK;
  return fail(HM_EINVAL, "hm_tier_unclaim: %s is more than tier '%s' has claimed (%s)", format_size(bytes).c_str(),
              h->tier()->name.c_str(), format_size(h->counters().claimed.load()).c_str());
}

int hm_tier_stats(hm_tier_t tier, hm_tier_stats_t *s) {
  int rc = HM_OK;
  TierHeap *h = named_heap(tier, &rc);
  if (!h) return rc;
  if (!s) return fail(HM_EINVAL, "hm_tier_stats: stats is NULL");
  TierCounters &c = h->counters();
  s->budget = c.budget.load();
  h->event_counts(&s->allocs, &s->frees, &s->in_use);
  // The exact in_use seen here raises the high-water mark (small-block bytes reach the shared
  // counter in steps; see TierHeap::charge_small).
  uint64_t hw = c.high_water.load();
  while (s->in_use > hw && !c.high_water.compare_exchange_weak(hw, s->in_use)) {
  }
  s->high_water = hw > s->in_use ? hw : s->in_use;
  s->reserved = c.reserved.load();
  s->fallbacks_in = c.fallbacks_in.load();
  s->fallbacks_out = c.fallbacks_out.load();
  s->failures = c.failures.load();
  s->moves_in = c.moves_in.load();
  s->bytes_copied_in = c.bytes_copied_in.load();
  s->emul_charged_ns = h->tier()->emul.charged_ns.load();
  s->huge_bytes = c.huge_bytes.load();
  return HM_OK;
}

void hm_stats_reset(void) {
  if (runtime_ensure() != HM_OK) return;
  for (int i = 0; i < tier_count(); ++i) {
    TierHeap *h = heap_of(i);
    if (!h) continue;
    TierCounters &c = h->counters();
    h->reset_event_counts();
    c.fallbacks_in = 0;
    c.fallbacks_out = 0;
    c.failures = 0;
    c.moves_in = 0;
    c.bytes_copied_in = 0;
    h->tier()->emul.reset();
  }
}

void hm_stats_print(int fd) {
  if (runtime_ensure() != HM_OK) return;
  if (fd != 1) fd = 2;
  int width = 4;
  for (int i = 0; i < tier_count(); ++i) width = std::max(width, static_cast<int>(tier_get(i)->name.size()));
  prim::print_fd(fd, "%-*s %-10s %12s %12s %12s %12s %9s %9s %9s %9s %9s %9s\n", width, "tier", "roles", "budget",
          "in use", "high water", "reserved", "allocs", "frees", "fallbk-in", "fallbk-out", "refused", "moves-in");
  for (int i = 0; i < tier_count(); ++i) {
    hm_tier_stats_t s;
    hm_tier_stats(i, &s);
    Tier *t = tier_get(i);
    std::string roles;
    for (int r = 0; r < HM_ROLE_COUNT; ++r)
      if (t->roles & (1u << r)) roles += std::string(roles.empty() ? "" : ",") + role_name(static_cast<hm_role_t>(r));
    prim::print_fd(fd, "%-*s %-10s %12s %12s %12s %12s %9llu %9llu %9llu %9llu %9llu %9llu\n", width, t->name.c_str(),
            roles.empty() ? "-" : roles.c_str(), s.budget ? format_size(s.budget).c_str() : "unlimited",
            format_size(s.in_use).c_str(), format_size(s.high_water).c_str(), format_size(s.reserved).c_str(),
            static_cast<unsigned long long>(s.allocs), static_cast<unsigned long long>(s.frees),
            static_cast<unsigned long long>(s.fallbacks_in), static_cast<unsigned long long>(s.fallbacks_out),
            static_cast<unsigned long long>(s.failures), static_cast<unsigned long long>(s.moves_in));
  }
  for (int i = 0; i < tier_count(); ++i) {
    Tier *t = tier_get(i);
    if (!t->emulated()) continue;
    hm_emul_stats_t e;
    if (hm_emul_stats(i, &e) != HM_OK) continue;
    prim::print_fd(fd, "%-*s emulated: charged %.3f s (copies %.3f, declared %.3f, sampled %.3f); %s read, %s written%s\n",
            width, t->name.c_str(), (e.charged_ns[0] + e.charged_ns[1] + e.charged_ns[2]) * 1e-9,
            e.charged_ns[HM_EMUL_COPY] * 1e-9, e.charged_ns[HM_EMUL_DECLARED] * 1e-9,
            e.charged_ns[HM_EMUL_SAMPLED] * 1e-9,
            format_size(e.read_bytes[0] + e.read_bytes[1] + e.read_bytes[2]).c_str(),
            format_size(e.write_bytes[0] + e.write_bytes[1] + e.write_bytes[2]).c_str(),
            e.charges ? "" : " (nothing charged: HM_EMUL=0 or a profile without cost)");
  }
  print_stats_sections(fd);
}

void *hm_tier_alloc(hm_tier_t tier, size_t size, size_t align, unsigned flags) {
  if (runtime_ensure() != HM_OK) return nullptr;
  void *p = alloc_chain(tier, size, align, flags);
  notify(p, size, false, __builtin_return_address(0));
  return p;
}

void *hm_alloc(hm_role_t role, size_t size, size_t align, unsigned flags) {
  if (runtime_ensure() != HM_OK) return nullptr;
  int tier = -1;
  if (tier_of_role(role, &tier) != HM_OK) return nullptr;
  void *p = alloc_chain(tier, size, align, flags);
  notify(p, size, false, __builtin_return_address(0));
  return p;
}

void *hm_malloc(size_t size) {
  if (runtime_ensure() != HM_OK) return nullptr;
  void *p = alloc_chain(current_tier(), size, 16, HM_PREFERRED);
  notify(p, size, false, __builtin_return_address(0));
  return p;
}

void *hm_calloc(size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total))
    return fail_null(HM_EINVAL, "hm_calloc(%zu, %zu): size overflows", count, size);
  if (runtime_ensure() != HM_OK) return nullptr;
  void *p = alloc_chain(current_tier(), total, 16, HM_PREFERRED | HM_ZERO);
  notify(p, total, false, __builtin_return_address(0));
  return p;
}

namespace {
inline void release_owned(void *ptr, TierHeap *h, SlotOwner *owner, const void *caller) {
  if (alloc_observer()) notify(ptr, TierHeap::usable_size(ptr, owner), true, caller);
  notify_release(ptr, owner);
  h->release(ptr, owner);
}
}  // namespace

void hm_free(void *ptr) {
  if (!ptr) return;
  SlotOwner *owner = nullptr;
  TierHeap *h = heap_for(ptr, &owner);
  if (!h) {
    fail(HM_ENOTOWNED, "hm_free(%p): not allocated by hetmem; left alone", ptr);
    return;
  }
  release_owned(ptr, h, owner, __builtin_return_address(0));
}

int hm_free_if_owned(void *ptr) {
  SlotOwner *owner = nullptr;
  TierHeap *h = ptr ? heap_for(ptr, &owner) : nullptr;
  if (!h) return 0;
  release_owned(ptr, h, owner, __builtin_return_address(0));
  return 1;
}

void *hm_grow_guarded(void *ptr, size_t size) {
  SlotOwner *owner = nullptr;
  TierHeap *h = ptr ? heap_for(ptr, &owner) : nullptr;
  return h ? h->grow_guarded(ptr, owner, size) : nullptr;
}

int hm_growable(const void *ptr) {
  SlotOwner *owner = nullptr;
  return ptr && heap_for(ptr, &owner) && TierHeap::growable(ptr, owner);
}

size_t hm_usable_size(const void *ptr) {
  SlotOwner *owner = nullptr;
  if (!ptr || !heap_for(ptr, &owner)) return 0;
  return TierHeap::usable_size(ptr, owner);
}

int hm_owns(const void *ptr) {
  SlotOwner *owner = nullptr;
  return ptr && heap_for(ptr, &owner) ? 1 : 0;
}

int hm_ptr_tier(const void *ptr, hm_tier_t *tier) {
  SlotOwner *owner = nullptr;
  TierHeap *h = ptr ? heap_for(ptr, &owner) : nullptr;
  if (!h) return fail(HM_ENOTOWNED, "%p is not memory allocated by hetmem", ptr);
  if (tier) *tier = TierHeap::tier_at(owner, reinterpret_cast<uintptr_t>(ptr));
  return HM_OK;
}

void *hm_realloc(void *ptr, size_t size) {
  if (!ptr) return hm_malloc(size);
  if (size == 0) {
    hm_free(ptr);
    return nullptr;
  }
  SlotOwner *owner = nullptr;
  TierHeap *h = heap_for(ptr, &owner);
  if (!h) return fail_null(HM_ENOTOWNED, "hm_realloc(%p): not allocated by hetmem; left alone", ptr);
  size_t old = TierHeap::usable_size(ptr, owner);
  if (size <= old && size >= old / 2) return ptr;
  if (void *grown = size > old ? h->grow_guarded(ptr, owner, size) : nullptr) {
    notify(ptr, old, true, __builtin_return_address(0));
    notify(grown, size, false, __builtin_return_address(0));
    return grown;
  }
  void *np = alloc_chain(h->tier()->id, size, 16, HM_PREFERRED);
  if (!np) return nullptr;  // the old block stays valid, as realloc promises
  notify(ptr, old, true, __builtin_return_address(0));
  notify(np, size, false, __builtin_return_address(0));
  SlotOwner *nowner = nullptr;
  TierHeap *nh = heap_for(np, &nowner);
  tier_copy(np, ptr, old < size ? old : size, nh->tier(), h->tier());
  notify_release(ptr, owner);
  h->release(ptr, owner);
  return np;
}

}  // extern "C"

namespace hm {
int alloc_split(void *ptr, int tier, size_t tail_offset) {
  TierHeap *to = heap_of(tier);
  if (!to) return fail(HM_ENOTIER, "split: unknown tier %d", tier);
  SlotOwner *owner = nullptr;
  TierHeap *from = ptr ? heap_for(ptr, &owner) : nullptr;
  if (!from) return fail(HM_ENOTOWNED, "split %p: not allocated by hetmem", ptr);
  return from->split_to(ptr, owner, *to, tail_offset);
}
}  // namespace hm

extern "C" {

int hm_move(void *ptr, hm_tier_t dst) {
  int rc = runtime_ensure();
  if (rc != HM_OK) return rc;
  TierHeap *to = heap_of(dst);
  if (!to) return fail(HM_ENOTIER, "hm_move: unknown tier %d (known: %s)", dst, known_tier_names().c_str());
  SlotOwner *owner = nullptr;
  TierHeap *from = ptr ? heap_for(ptr, &owner) : nullptr;
  if (!from) return fail(HM_ENOTOWNED, "hm_move(%p): not allocated by hetmem", ptr);
  return from->move_to(ptr, owner, *to);
}

int hm_copy(void *dst, const void *src, size_t n) {
  if (n == 0) return HM_OK;
  if (!dst || !src) return fail(HM_EINVAL, "hm_copy: NULL address");
  int rc = runtime_ensure();
  if (rc != HM_OK) return rc;
  SlotOwner *so = nullptr, *dO = nullptr;
  TierHeap *sh = heap_for(src, &so), *dh = heap_for(dst, &dO);
  tier_copy(dst, src, n, dh ? dh->tier() : nullptr, sh ? sh->tier() : nullptr);
  if (dh) dh->counters().bytes_copied_in.fetch_add(n, std::memory_order_relaxed);
  return HM_OK;
}

int hm_mode_push(hm_role_t role) {
  int rc = runtime_ensure();
  if (rc != HM_OK) return rc;
  int tier = -1;
  if ((rc = tier_of_role(role, &tier)) != HM_OK) return rc;
  return hm_mode_push_tier(tier);
}

int hm_mode_push_tier(hm_tier_t tier) {
  int rc = runtime_ensure();
  if (rc != HM_OK) return rc;
  if (!heap_of(tier)) return fail(HM_ENOTIER, "hm_mode_push_tier: unknown tier %d (known: %s)", tier,
                                  known_tier_names().c_str());
  if (hm_modes_open >= kModeDepth) return fail(HM_EINVAL, "hm_mode_push: more than %d nested modes", kModeDepth);
  if (!t_modes && !(t_modes = static_cast<int *>(prim::thread_block(&g_modes_key, sizeof(int) * kModeDepth))))
    return fail(HM_ENOMEM, "hm_mode_push: no memory for the thread's modes");
  t_modes[hm_modes_open++] = tier;
  return HM_OK;
}

int hm_mode_pop(void) {
  if (hm_modes_open == 0) return fail(HM_EINVAL, "hm_mode_pop: no mode to pop (unbalanced push/pop)");
  --hm_modes_open;
  return HM_OK;
}

int hm_mode_depth(void) { return hm_modes_open; }

hm_tier_t hm_mode_current(void) {
  if (runtime_ensure() != HM_OK) return -1;
  return current_tier();
}

int hm_calibration_get(hm_calibration_t *cal) {
  int rc = runtime_ensure();
  if (rc != HM_OK) return rc;
  if (!cal) return fail(HM_EINVAL, "hm_calibration_get: cal is NULL");
  *cal = calibration();
  return HM_OK;
}

int hm_calibration_store(const hm_calibration_t *cal) {
  int rc = runtime_ensure();
  if (rc != HM_OK) return rc;
  if (!cal) return fail(HM_EINVAL, "hm_calibration_store: cal is NULL");
  return calibration_replace(*cal);
}

int hm_calibration_problem(char *buf, size_t len) {
  int rc = runtime_ensure();
  if (rc != HM_OK) return rc;
  std::string problem = calibration_problem(calibration());
  if (buf && len) std::snprintf(buf, len, "%s", problem.c_str());
  return problem.empty() ? 0 : 1;
}

}  // extern "C"
