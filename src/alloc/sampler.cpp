#include "alloc/sampler.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "alloc/heap.h"
#include "alloc/settings.h"
#include "prim/prim.h"
#include "tier/emul.h"

namespace hm {
namespace {

// The inferred windows a profiler gets sampled regardless of the budget: the two after the first,
// which is the run's start-up.
constexpr uint32_t kFirstForcedWindow = 2, kLastForcedWindow = 3;

// What the last sample of a phase name found, and what it cost.
struct PhaseSample {
  bool seen = false;
  uint32_t instances = 0;  // instances begun
  uint32_t samples = 0;    // of them, sampled
  uint64_t undeclared[kMaxTiers] = {};  // referenced bytes of undeclared emulated memory
  uintptr_t at[kMaxTiers] = {};          // where the first such mapping starts (charge models)
  uint64_t cost_ns = 0;                 // own time plus the estimated cost to the program
};

std::vector<PhaseSample> g_samples;  // by phase id (guarded by the phase mutex)
bool g_in_flight = false;            // a sample is open (phases nest; one sample at a time)
uint64_t g_begin_own_ns = 0;         // the open sample's clear time
const uint64_t g_start_ns = prim::now_ns();  // the budget counts run time from the library's load
uint64_t g_spent_ns = 0;             // estimated total cost so far
double g_page_cost_ns = -1;          // per 4 KiB page touched after a clear; < 0: not measured
hm_sampler_stats_t g_stats{};
std::string g_smaps_text;  // the last sample's smaps, its pages kept for the next

bool emulation_wants() {
  if (!emul_enabled()) return false;
  for (int t = 0; t < tier_count(); ++t) {
    if (!tier_get(t)->emulated()) continue;
    TierCounters &c = heap_of(t)->counters();
    if (c.undeclared_records.load(std::memory_order_relaxed) > 0 && c.in_use.load(std::memory_order_relaxed) > 0)
      return true;
  }
  return false;
}

// The cost of one accessed-bit update on a 4 KiB page: time to touch 1024 pages again after a
// clear, over touching them again without one. Measured once, at the first sample, around the
// clear that sample needs anyway. Not fewer pages: 128 measured about half the cost (60-100 ns
// against 105-240 ns here), a budget built on that samples more than it can afford, and with 128
// a run of `hetmem tiers --validate` put an emulated tier's sampled row 50% over its model.
// The probe's pages are populated writable in one call (MADV_POPULATE_WRITE): touched first by a
// read they took two faults each (the zero page, then its copy), 2,048 in all. Their cost, 2-3 ms
// in this VM, is the first sample's.
void clear_with_page_cost() {
  if (g_page_cost_ns >= 0) {
    prim::clear_referenced();
    return;
  }
  constexpr size_t kPages = 1024, kBytes = kPages * prim::kPageSize;
  void *mem = nullptr;
  if (prim::map_anon(kBytes, prim::kPageSize, 0, &mem) != HM_OK) {
    g_page_cost_ns = 0;
    prim::clear_referenced();
    return;
  }
  prim::advise_huge(mem, kBytes, false);
  prim::populate_write(mem, kBytes);
  volatile char *p = static_cast<volatile char *>(mem);
  auto touch = [&] {
    uint64_t t0 = prim::now_ns();
    for (size_t i = 0; i < kPages; ++i) p[i * prim::kPageSize] = static_cast<char>(p[i * prim::kPageSize] + 1);
    return prim::now_ns() - t0;
  };
  touch();
  uint64_t warm = touch();
  prim::clear_referenced();
  uint64_t cold = touch();
  g_page_cost_ns = cold > warm ? static_cast<double>(cold - warm) / kPages : 0;
  prim::unmap(mem, kBytes);
}

// Referenced bytes of the undeclared records of emulated tiers inside one mapping: the mapping's
// referenced bytes shared out over its 2 MiB slots (adjacent mappings merge, so one can hold
// several records).
void attribute(const prim::MappingUse &m, uint64_t *undeclared, uintptr_t *at) {
  const uintptr_t slot = kSlotSize;
  uintptr_t first = m.start & ~(slot - 1);
  uint64_t slots = 0, counted[kMaxTiers] = {};
  bool any = false;
  for (uintptr_t a = first; a < m.end; a += slot) {
    ++slots;
    SlotOwner *owner = slot_map().get(reinterpret_cast<void *>(a));
    if (!owner || owner->is_declared()) continue;
    int tier = TierHeap::tier_at(owner, a);  // a block split across tiers: the slot's own tier
    Tier *t = tier_get(tier);
    if (t && t->emulated()) {
      ++counted[tier];
      any = true;
    }
  }
  if (!any) return;
  for (int t = 0; t < kMaxTiers; ++t)
    if (counted[t]) {
      if (!undeclared[t]) at[t] = m.start;
      undeclared[t] += m.referenced_bytes * counted[t] / slots;
    }
}

// The sampler knows how many bytes of a tier were referenced, not which: a charge model (memory
// mode) sees them as one read from the start of the first mapping that held them.
void charge(const uint64_t *bytes, const uintptr_t *at) {
  for (int t = 0; t < tier_count(); ++t)
    if (bytes[t]) {
      Tier *tier = tier_get(t);
      if (!tier->emulated()) continue;
      DeviceVolume v = tier_device_range(*tier, reinterpret_cast<const void *>(at[t]), bytes[t], true, false);
      emul_charge(*tier->profile, tier->emul, v.read, v.write, v.dependent, kEmulSampled);
    }
}

}  // namespace

SampleMode sampler_begin(uint16_t phase, bool every_phase, bool inferred) {
  if (g_in_flight) return SampleMode::kNested;
  bool profile = every_phase, emulation = emulation_wants();
  if (!profile && !emulation) {
    ++g_stats.phases_skipped;
    return SampleMode::kNone;
  }
  if (g_samples.size() <= phase) g_samples.resize(phase + size_t{1});
  PhaseSample &ps = g_samples[phase];
  const uint32_t instance = ++ps.instances;
  uint64_t now = prim::now_ns();
  double allowed = sample_budget() * static_cast<double>(now - g_start_ns);
  // The profiler needs every phase name sampled: the first instance regardless of the budget. An
  // iteration inferred by time windows gets its second and third instances instead: its first is
  // the run's start-up (arrays being filled, all of them referenced), which says nothing of the
  // steady state, and a run of half a second would otherwise be sampled in its steady state once
  // or not at all. Not more: a sample costs 10-20 ms in a process of 600 mappings (reading smaps;
  // each of LAMMPS's MPI ranks here), and four forced samples of each rank and of the launcher
  // made a profiled 0.7 s run over two ranks 1.18x its plain time (1.07x with none). The emulated
  // tier only needs its charges, which a phase never sampled yet takes from none (nothing
  // charged) until the budget allows.
  const bool forced = profile && (inferred ? instance >= kFirstForcedWindow && instance <= kLastForcedWindow
                                           : ps.samples == 0 && (instance & (instance - 1)) == 0);
  if (profile && inferred && instance < kFirstForcedWindow && !emulation) return SampleMode::kCarried;
  uint64_t expected = ps.seen ? ps.cost_ns : (g_stats.phases_sampled ? g_spent_ns / g_stats.phases_sampled : 0);
  if (!forced && static_cast<double>(g_spent_ns + expected) > allowed) return SampleMode::kCarried;
  clear_with_page_cost();
  g_begin_own_ns = prim::now_ns() - now;
  g_in_flight = true;
  return SampleMode::kSampled;
}

void sampler_end(uint16_t phase, SampleMode mode, std::vector<prim::MappingUse> *mappings) {
  if (mode == SampleMode::kCarried) {
    const PhaseSample *ps = phase < g_samples.size() && g_samples[phase].seen ? &g_samples[phase] : nullptr;
    bool anything = ps && std::any_of(ps->undeclared, ps->undeclared + kMaxTiers, [](uint64_t b) { return b > 0; });
    if (anything && emulation_wants()) {
      ++g_stats.phases_carried;
      charge(ps->undeclared, ps->at);
    } else {
      ++g_stats.phases_skipped;  // its last sample found no undeclared memory in use (or none yet)
    }
    return;
  }
  if (mode != SampleMode::kSampled) return;
  uint64_t t0 = prim::now_ns();
  uint64_t undeclared[kMaxTiers] = {};
  uintptr_t at[kMaxTiers] = {};
  uint64_t small_pages = 0;  // referenced 4 KiB pages: what the clear costs the program
  prim::for_each_mapping(
      [&](const prim::MappingUse &m) {
        mappings->push_back(m);
        if (m.referenced_bytes == 0) return;
        small_pages += (m.referenced_bytes - std::min(m.referenced_bytes, m.anon_huge_bytes)) / prim::kPageSize;
        attribute(m, undeclared, at);
      },
      &g_smaps_text);
  uint64_t own = g_begin_own_ns + (prim::now_ns() - t0);
  uint64_t inflicted = static_cast<uint64_t>(static_cast<double>(small_pages) * std::max(0.0, g_page_cost_ns));
  PhaseSample &ps = g_samples[phase];
  ps.seen = true;
  ++ps.samples;
  std::copy(undeclared, undeclared + kMaxTiers, ps.undeclared);
  std::copy(at, at + kMaxTiers, ps.at);
  ps.cost_ns = own + inflicted;
  g_spent_ns += ps.cost_ns;
  g_in_flight = false;
  ++g_stats.phases_sampled;
  g_stats.own_ns += own;
  g_stats.inflicted_ns += inflicted;
  charge(undeclared, at);
}

hm_sampler_stats_t sampler_stats() {
  hm_sampler_stats_t s = g_stats;
  s.page_cost_ns = std::max(0.0, g_page_cost_ns);
  s.budget = sample_budget();
  return s;
}

}  // namespace hm
