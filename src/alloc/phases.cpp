// Phases and iterations (seed 000 §3): names, the stack of open phases, wall-time totals, the
// referenced-page sampler between begin and end, and the observers that the profiler and the
// placement runtime register.
#include "alloc/phases.h"

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "alloc/access.h"
#include "alloc/hook.h"
#include "alloc/runtime.h"
#include "alloc/sampler.h"
#include "base/error.h"
#include "hetmem/hetmem.h"

namespace hm {
namespace {

struct Open {
  uint16_t phase;
  uint32_t iteration;
  uint64_t begin_ns;
  SampleMode sample;
};

struct PhaseTotals {
  std::string name;
  uint64_t calls = 0;
  uint64_t total_ns = 0;
};

std::mutex g_phase_mutex;
std::vector<PhaseTotals> g_phases(1, PhaseTotals{"(none)"});  // id 0: outside any phase
std::vector<Open> g_open;
uint32_t g_iteration = 0;

constexpr int kMaxObservers = 8;
PhaseObserver *g_observers[kMaxObservers] = {};
std::atomic<int> g_observer_count{0};

template <class Fn>
void notify(Fn fn) {
  int n = g_observer_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) fn(*g_observers[i]);
}

bool every_phase_wanted() {
  bool wanted = false;
  notify([&](PhaseObserver &o) { wanted = wanted || o.wants_every_phase_sampled(); });
  return wanted;
}

}  // namespace

std::vector<PhaseTotal> phase_totals() {
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  std::vector<PhaseTotal> out;
  for (size_t i = 1; i < g_phases.size(); ++i)
    out.push_back(PhaseTotal{g_phases[i].name, g_phases[i].calls, static_cast<double>(g_phases[i].total_ns) * 1e-9});
  return out;
}

std::string open_phase_name() {
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  return g_open.empty() ? std::string() : g_phases[g_open.back().phase].name;
}

void add_phase_observer(PhaseObserver *observer) {
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  int n = g_observer_count.load(std::memory_order_relaxed);
  if (n < kMaxObservers) {
    g_observers[n] = observer;
    g_observer_count.store(n + 1, std::memory_order_release);
  }
}

}  // namespace hm

using namespace hm;

extern "C" {

int hm_phase_begin(const char *name) {
  if (!name || !*name) return fail(HM_EINVAL, "hm_phase_begin: a phase needs a name");
  int rc = runtime_ensure();
  if (rc != HM_OK) return rc;
  InternalScope internal;
  try {
    std::lock_guard<std::mutex> lock(g_phase_mutex);
    uint16_t id = 0;
    for (size_t i = 1; i < g_phases.size(); ++i)
      if (g_phases[i].name == name) id = static_cast<uint16_t>(i);
    if (id == 0) {
      if (g_phases.size() >= 65535) return fail(HM_EINVAL, "hm_phase_begin: more than 65534 phase names");
      id = static_cast<uint16_t>(g_phases.size());
      g_phases.push_back(PhaseTotals{name});
      notify([&](PhaseObserver &o) { o.phase_named(id, name); });
    }
    g_open.push_back(Open{id, g_iteration, prim::now_ns(), SampleMode::kNone});
    notify([&](PhaseObserver &o) { o.phase_begun(id); });
    g_open.back().sample = sampler_begin(id, every_phase_wanted());
    return HM_OK;
  } catch (...) {
    return fail(HM_ENOMEM, "hm_phase_begin: out of memory");
  }
}

int hm_phase_end(void) {
  InternalScope internal;
  access_pay_pending();  // this thread's declarations belong to the phase that ends
  try {
    std::lock_guard<std::mutex> lock(g_phase_mutex);
    if (g_open.empty()) return fail(HM_EINVAL, "hm_phase_end: no phase is open (unbalanced begin/end)");
    Open open = g_open.back();
    g_open.pop_back();
    uint64_t end = prim::now_ns();
    std::vector<prim::MappingUse> mappings;
    sampler_end(open.phase, open.sample, &mappings);
    PhaseTotals &t = g_phases[open.phase];
    t.calls += 1;
    t.total_ns += end - open.begin_ns;
    PhaseEnd e{open.phase, g_open.empty() ? uint16_t{0} : g_open.back().phase, open.iteration,
               open.sample == SampleMode::kSampled, &mappings};
    notify([&](PhaseObserver &o) { o.phase_ended(e); });
    return HM_OK;
  } catch (...) {
    return fail(HM_ENOMEM, "hm_phase_end: out of memory");
  }
}

int hm_iteration_next(void) {
  InternalScope internal;
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  ++g_iteration;
  notify([&](PhaseObserver &o) { o.iteration_begun(g_iteration); });
  return HM_OK;
}

int hm_iteration_current(void) { return static_cast<int>(g_iteration); }

int hm_phase_stats(const char *name, uint64_t *calls, double *seconds) {
  if (!name) return fail(HM_EINVAL, "hm_phase_stats: name is NULL");
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  for (size_t i = 1; i < g_phases.size(); ++i)
    if (g_phases[i].name == name) {
      if (calls) *calls = g_phases[i].calls;
      if (seconds) *seconds = static_cast<double>(g_phases[i].total_ns) * 1e-9;
      return HM_OK;
    }
  return fail(HM_EINVAL, "hm_phase_stats: no phase named '%s'", name);
}

int hm_sampler_stats(hm_sampler_stats_t *stats) {
  if (!stats) return fail(HM_EINVAL, "hm_sampler_stats: stats is NULL");
  int rc = runtime_ensure();
  if (rc != HM_OK) return rc;
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  *stats = sampler_stats();
  return HM_OK;
}

}  // extern "C"
