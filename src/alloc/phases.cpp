// Phases and iterations (Ren et al. (ICS'21) §3): names, the stack of open phases, wall-time totals, the
// referenced-page sampler between begin and end, and the observers that the profiler and the
// placement runtime register.
#include "alloc/phases.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "alloc/access.h"
#include "alloc/hook.h"
#include "alloc/settings.h"
#include "alloc/sampler.h"
#include "base/error.h"
#include "hetmem/hetmem.h"
#include "tier/emul.h"

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

// Iterations inferred for a program that marks none (hm_iteration_infer_start): one phase of its
// own spans each iteration, kept at the bottom of the stack. The program's first own mark ends
// the inference for good, so that the two never interleave.
struct Inference {
  bool on = false;
  bool phase_open = false;     // the inferred phase is g_open[0]
  std::string phase;           // its name
  std::thread *window = nullptr;  // the window thread, when time windows end iterations
  bool stop = false;           // tells the window thread to end (guarded by g_phase_mutex)
  std::condition_variable wake;
};
// Never destroyed: a forked child that exits must not destroy a condition variable the parent's
// window thread was waiting on when it forked (the destruction would wait for that waiter forever).
alignas(Inference) unsigned char g_inference_storage[sizeof(Inference)];
Inference &g_inference = *new (g_inference_storage) Inference();

uint16_t phase_id_locked(const char *name) {
  for (size_t i = 1; i < g_phases.size(); ++i)
    if (g_phases[i].name == name) return static_cast<uint16_t>(i);
  if (g_phases.size() >= 65535) return 0;
  uint16_t id = static_cast<uint16_t>(g_phases.size());
  g_phases.push_back(PhaseTotals{name});
  notify([&](PhaseObserver &o) { o.phase_named(id, name); });
  return id;
}

void begin_locked(uint16_t id) {
  g_open.push_back(Open{id, g_iteration, prim::now_ns(), SampleMode::kNone});
  notify([&](PhaseObserver &o) { o.phase_begun(id); });
  const bool inferred = g_inference.on && g_phases[id].name == g_inference.phase;
  g_open.back().sample = sampler_begin(id, every_phase_wanted(), inferred);
}

void end_locked() {
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
}

void next_iteration_locked() {
  ++g_iteration;
  notify([&](PhaseObserver &o) { o.iteration_begun(g_iteration); });
}

// One inferred iteration ends and the next begins.
void inferred_boundary_locked() {
  if (!g_inference.phase_open || g_open.size() != 1) return;
  end_locked();
  next_iteration_locked();
  uint16_t id = phase_id_locked(g_inference.phase.c_str());
  if (id) begin_locked(id);
  g_inference.phase_open = id != 0;
}

// Ends the inference (the program marks phases itself, or hm_iteration_infer_stop). Returns the
// window thread to join outside the lock, if any.
std::thread *inference_end_locked() {
  if (!g_inference.on) return nullptr;
  // The inferred phase is the only one open: the program's first own mark ends the inference
  // before its phase is pushed.
  if (g_inference.phase_open && !g_open.empty()) end_locked();
  g_inference.phase_open = false;
  g_inference.on = false;
  g_inference.stop = true;
  g_inference.wake.notify_all();
  std::thread *t = g_inference.window;
  g_inference.window = nullptr;
  return t;
}

// The program's own mark: inference gives way. The window thread is detached rather than joined
// here (it may be waiting for the lock this caller holds); it ends at its next wake-up.
void program_marks_locked() {
  if (!g_inference.on) return;
  if (std::thread *t = inference_end_locked()) {
    t->detach();
    delete t;
  }
}

void window_loop(double seconds) {
  // Every allocation of this thread to its very end (the thread's own state, freed after this
  // function returns) is the library's, never the program's: the flag is not dropped.
  ++hm_inside_hook;
  emul_defer_charges_on_this_thread();  // the program owes what its pages cost, not this thread
  const auto period = std::chrono::duration<double>(seconds);
  std::unique_lock<std::mutex> lock(g_phase_mutex);
  while (!g_inference.stop) {
    g_inference.wake.wait_for(lock, period, [] { return g_inference.stop; });
    if (g_inference.stop) break;
    inferred_boundary_locked();
  }
}

}  // namespace

void phases_lock_for_fork() { g_phase_mutex.lock(); }

void phases_unlock_after_fork(bool child) {
  if (child) {
    // The window thread does not exist in the child: its object is left alone, and the condition
    // variable it waited on is made anew (the parent's waiter is counted in it). The inferred
    // phase stays open and is ended by hm_iteration_infer_stop.
    new (&g_inference.wake) std::condition_variable();
    g_inference.window = nullptr;
  }
  g_phase_mutex.unlock();
}

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
  int rc = hm_init();
  if (rc != HM_OK) return rc;
  InternalScope internal;
  try {
    std::lock_guard<std::mutex> lock(g_phase_mutex);
    program_marks_locked();
    uint16_t id = phase_id_locked(name);
    if (id == 0) return fail(HM_EINVAL, "hm_phase_begin: more than 65534 phase names");
    begin_locked(id);
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
    program_marks_locked();
    if (g_open.empty()) return fail(HM_EINVAL, "hm_phase_end: no phase is open (unbalanced begin/end)");
    end_locked();
    return HM_OK;
  } catch (...) {
    return fail(HM_ENOMEM, "hm_phase_end: out of memory");
  }
}

int hm_iteration_next(void) {
  InternalScope internal;
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  program_marks_locked();
  next_iteration_locked();
  return HM_OK;
}

int hm_iteration_infer_start(const char *phase, double window_seconds) {
  if (!phase || !*phase) return fail(HM_EINVAL, "hm_iteration_infer_start: the inferred phase needs a name");
  if (!(window_seconds >= 0) || window_seconds > 3600)
    return fail(HM_EINVAL, "hm_iteration_infer_start: window %g s out of range (0, or up to 3600 s)", window_seconds);
  int rc = hm_init();
  if (rc != HM_OK) return rc;
  InternalScope internal;
  try {
    std::lock_guard<std::mutex> lock(g_phase_mutex);
    if (g_inference.on) return fail(HM_EINVAL, "hm_iteration_infer_start: iterations are already inferred");
    if (!g_open.empty() || g_iteration != 0)
      return fail(HM_EINVAL, "hm_iteration_infer_start: the program marks its own phases or iterations");
    uint16_t id = phase_id_locked(phase);
    if (id == 0) return fail(HM_EINVAL, "hm_iteration_infer_start: more than 65534 phase names");
    g_inference.on = true;
    g_inference.stop = false;
    g_inference.phase = phase;
    begin_locked(id);
    g_inference.phase_open = true;
    if (window_seconds > 0) g_inference.window = new std::thread(window_loop, window_seconds);
    return HM_OK;
  } catch (...) {
    g_inference.on = false;
    return fail(HM_ENOMEM, "hm_iteration_infer_start: out of memory or threads");
  }
}

int hm_iteration_infer_tick(void) {
  InternalScope internal;
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  if (!g_inference.on) return HM_EINVAL;
  inferred_boundary_locked();
  return HM_OK;
}

int hm_iteration_infer_stop(void) {
  InternalScope internal;
  std::thread *window = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_phase_mutex);
    window = inference_end_locked();
  }
  if (window) {
    window->join();
    delete window;
  }
  emul_pay_owed();  // what the window thread found and nobody paid yet
  return HM_OK;
}

int hm_iteration_inferred(void) {
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  return g_inference.on ? 1 : 0;
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
  int rc = hm_init();
  if (rc != HM_OK) return rc;
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  *stats = sampler_stats();
  return HM_OK;
}

}  // extern "C"
