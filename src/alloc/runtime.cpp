// The allocation runtime: initialisation from the options (tiers, heaps, budgets, huge-page
// pools), the process-wide settings the layers read, and finalisation.
#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

#include "alloc/runtime.h"
#include "alloc/phases.h"
#include "base/error.h"
#include "base/options.h"
#include "prim/prim.h"
#include "tier/copy_ops.h"

namespace hm {

void modes_reset();  // api.cpp: the calling thread's hm_mode_push stack

std::atomic<int> g_runtime_state{0};

namespace {

std::mutex g_init_mutex;
int g_init_code = HM_OK;
char g_init_message[512];
HugePool *g_huge_2m = nullptr, *g_huge_1g = nullptr;
int g_default_tier = 0;

std::atomic<AllocObserver> g_observer{nullptr};

// Fork safety: every lock of this layer is taken before a fork, in the order the code nests them
// (the phase lock, under which observers allocate; then the heaps; then the slot map's), and
// released on both sides after it. A child thus never inherits a lock held by a thread it does
// not have, whether it goes on allocating or execs.
void fork_prepare() {
  phases_lock_for_fork();
  heap_records_lock_for_fork();
  for (int t = 0; t < kMaxTiers; ++t)
    if (TierHeap *h = heap_of(t)) h->lock_for_fork();
  SlotMap::lock_for_fork();
}

void fork_release(bool child) {
  SlotMap::unlock_after_fork();
  for (int t = kMaxTiers - 1; t >= 0; --t)
    if (TierHeap *h = heap_of(t)) h->unlock_after_fork();
  heap_records_unlock_after_fork();
  phases_unlock_after_fork(child);
}

void install_fork_handlers() {
  static const bool installed = pthread_atfork(fork_prepare, [] { fork_release(false); },
                                               [] { fork_release(true); }) == 0;
  (void)installed;
}

int init_locked() {
  options_load();
  long verbose = 0, emul = 1, thp = 1;
  int rc;
  if ((rc = options_check()) != HM_OK) return rc;
  if ((rc = option_int(Option::kVerbose, &verbose)) != HM_OK) return rc;
  set_log_level(static_cast<int>(verbose));
  if ((rc = option_int(Option::kEmul, &emul)) != HM_OK) return rc;
  emul_set_enabled(emul != 0);
  if ((rc = option_int(Option::kThp, &thp)) != HM_OK) return rc;
  g_alloc_settings.thp = thp != 0;
  if ((rc = option_number(Option::kSampleBudget, &g_alloc_settings.sample_budget)) != HM_OK) return rc;
  uint64_t nt = 0, pool_2m = 0, pool_1g = 0, dummy = 0;
  if ((rc = option_size(Option::kNtThreshold, &nt)) != HM_OK) return rc;
  set_nt_threshold(nt);
  if ((rc = option_size(Option::kRetain, &g_alloc_settings.retain)) != HM_OK) return rc;
  if ((rc = option_size(Option::kHugetlbPool, &pool_2m)) != HM_OK) return rc;
  if ((rc = option_size(Option::kHugetlb1G, &pool_1g)) != HM_OK) return rc;
  if ((rc = option_size(Option::kPoolSize, &dummy)) != HM_OK) return rc;
  const Option budget_options[HM_ROLE_COUNT] = {Option::kFastBudget, Option::kCapacityBudget, Option::kPersistentBudget};
  uint64_t budgets[HM_ROLE_COUNT] = {};
  for (int r = 0; r < HM_ROLE_COUNT; ++r)
    if ((rc = option_size(budget_options[r], &budgets[r])) != HM_OK) return rc;

  install_fork_handlers();
  if ((rc = tiers_init()) != HM_OK) return rc;
  for (int i = 0; i < tier_count(); ++i) heap_install(i, new TierHeap(tier_get(i)));
  for (int r = 0; r < HM_ROLE_COUNT; ++r) {
    TierHeap *h = heap_of(role_tier(static_cast<hm_role_t>(r)));
    if (h && budgets[r]) h->set_budget(budgets[r]);
  }
  if (pool_2m) {
    g_huge_2m = HugePool::create(pool_2m, prim::kHugePage2M);
    if (!g_huge_2m)
      log(1, "HM_HUGETLB_POOL=%s: the kernel has %llu free 2 MiB pages; using transparent huge pages instead",
          format_size(pool_2m).c_str(), static_cast<unsigned long long>(prim::hugetlb_free_pages(prim::kHugePage2M)));
  }
  if (pool_1g) {
    g_huge_1g = HugePool::create(pool_1g, prim::kHugePage1G);
    if (!g_huge_1g)
      log(1, "HM_HUGETLB_1G=%s: no 1 GiB pages are free; using 2 MiB pages instead", format_size(pool_1g).c_str());
  }
  int fast = role_tier(HM_FAST);
  if (fast >= 0) heap_of(fast)->set_huge_pools(g_huge_2m, g_huge_1g);

  const std::string &def = option_text(Option::kDefaultRole);
  g_default_tier = fast;
  if (!def.empty()) {
    int id = -1;
    if (tier_find(def, &id) != HM_OK)
      return fail(HM_EFORMAT, "HM_DEFAULT_ROLE='%s': %s", def.c_str(), hm_last_error());
    g_default_tier = id;
  }
  return HM_OK;
}

}  // namespace

int runtime_start(bool caller_reports) {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  int s = g_runtime_state.load(std::memory_order_acquire);
  if (s == 0) {
    int rc;
    try {
      rc = init_locked();
    } catch (...) {
      rc = fail(HM_EINIT, "initialisation failed: out of memory");
    }
    if (rc != HM_OK) {
      g_init_code = rc;
      std::snprintf(g_init_message, sizeof g_init_message, "%s", hm_last_error());
      if (!caller_reports) log(0, "%s", g_init_message);
      g_runtime_state.store(2, std::memory_order_release);
      return rc;
    }
    g_runtime_state.store(1, std::memory_order_release);
    return HM_OK;
  }
  if (s == 2) return fail(HM_EINIT, "hetmem is not initialised: %s", g_init_message);
  return HM_OK;
}

void runtime_finalize() {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (g_runtime_state.load() == 1) {
    for (int t = 0; t < kMaxTiers; ++t) {
      delete heap_of(t);
      heap_install(t, nullptr);
    }
    delete g_huge_2m;
    delete g_huge_1g;
    g_huge_2m = g_huge_1g = nullptr;
    tiers_finalize();
    slot_map().reset();
    calibration_forget();
  }
  options_forget();
  g_heap_directory.epoch.fetch_add(1);
  g_runtime_state.store(0, std::memory_order_release);
  modes_reset();
}

void set_alloc_observer(AllocObserver observer) { g_observer.store(observer); }

AllocObserver alloc_observer() { return g_observer.load(std::memory_order_relaxed); }

namespace {
std::atomic<ReleaseObserver> g_release_observer{nullptr};
std::atomic<ClassChunkAlloc> g_class_chunk_alloc{nullptr};
constexpr int kMaxStatsSections = 4;
std::atomic<StatsSection> g_stats_sections[kMaxStatsSections] = {};
}  // namespace

void set_release_observer(ReleaseObserver observer) { g_release_observer.store(observer); }

void mark_tracked(const void *ptr) {
  SlotOwner *o = slot_map().get(ptr);
  if (o && !o->is_tracked()) __atomic_store_n(&o->tracked, 1u, __ATOMIC_RELAXED);
}

void notify_release(void *ptr, SlotOwner *owner) {
  if (!owner->is_tracked()) return;
  ReleaseObserver o = g_release_observer.load(std::memory_order_acquire);
  if (o) o(ptr, TierHeap::usable_size(ptr, owner));
}

void add_stats_section(StatsSection section) {
  for (auto &s : g_stats_sections) {
    StatsSection expected = nullptr;
    if (s.load() == section || s.compare_exchange_strong(expected, section)) return;
  }
}

void print_stats_sections(int fd) {
  for (auto &s : g_stats_sections)
    if (StatsSection f = s.load()) f(fd);
}

void set_class_chunk_alloc(ClassChunkAlloc alloc) { g_class_chunk_alloc.store(alloc); }
ClassChunkAlloc class_chunk_alloc() { return g_class_chunk_alloc.load(); }
int default_tier() { return g_default_tier; }

}  // namespace hm
