// Phases and iterations: hm_phase_begin/hm_phase_end/hm_iteration_next. A phase records its wall
// time and, when the sampler takes it (profile/sampler.h), the bytes the kernel reports as
// referenced during it for every large object. The same sample is the emulated tier's third
// charge point: referenced bytes of emulated memory whose accesses nobody declares (DESIGN.md).
#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "alloc/access.h"
#include "alloc/hook.h"
#include "alloc/runtime.h"
#include "base/error.h"
#include "hetmem/hetmem.h"
#include "prim/prim.h"
#include "profile/profiler.h"
#include "profile/sampler.h"

namespace hm::profile {
namespace {

struct Open {
  uint16_t phase;
  uint32_t iteration;
  uint64_t begin_ns;  // profile::now() at the start
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

}  // namespace
}  // namespace hm::profile

using namespace hm;
using namespace hm::profile;

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
      if (active()) {
        uint32_t pid = id;
        write_record(trace::kPhaseName, &pid, sizeof pid, name, std::strlen(name));
      }
    }
    g_open.push_back(Open{id, g_iteration, now(), SampleMode::kNone});
    g_open.back().sample = sampler_begin(id);
    set_current_phase(id);
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
    uint64_t end = now();
    std::vector<trace::ObjectReference> objects;
    sampler_end(open.phase, open.sample, &objects);
    PhaseTotals &t = g_phases[open.phase];
    t.calls += 1;
    t.total_ns += end - open.begin_ns;
    if (active()) {
      uint32_t phase_word = open.phase | (open.sample == SampleMode::kSampled ? trace::kPhaseSampled : 0u);
      trace::PhaseHeader ph{phase_word, open.iteration, open.begin_ns, end,
                            static_cast<uint32_t>(prim::thread_id()), static_cast<uint32_t>(objects.size())};
      write_record(trace::kPhase, &ph, sizeof ph, objects.data(), objects.size() * sizeof(trace::ObjectReference));
    }
    set_current_phase(g_open.empty() ? 0 : g_open.back().phase);
    return HM_OK;
  } catch (...) {
    return fail(HM_ENOMEM, "hm_phase_end: out of memory");
  }
}

int hm_iteration_next(void) {
  InternalScope internal;
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  ++g_iteration;
  if (active()) {
    flush(false);
    trace::IterationRecord r{g_iteration, 0, now()};
    write_record(trace::kIteration, &r, sizeof r);
  }
  return HM_OK;
}

int hm_iteration_current(void) { return static_cast<int>(g_iteration); }

int hm_sampler_stats(hm_sampler_stats_t *stats) {
  if (!stats) return fail(HM_EINVAL, "hm_sampler_stats: stats is NULL");
  int rc = runtime_ensure();
  if (rc != HM_OK) return rc;
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  *stats = sampler_stats();
  return HM_OK;
}

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

}  // extern "C"
