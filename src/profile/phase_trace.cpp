// The profiler's view of phases and iterations (alloc/phases.h): phase names, one record per phase
// instance with the referenced bytes of every large object when the sampler took the instance,
// and iteration marks; and the current phase that each recorded event carries.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "alloc/phases.h"
#include "profile/profiler.h"

namespace hm::profile {
namespace {

class PhaseTrace final : public PhaseObserver {
 public:
  void phase_named(uint16_t phase, const char *name) override {
    if (!active()) return;
    uint32_t id = phase;
    write_record(trace::kPhaseName, &id, sizeof id, name, std::strlen(name));
  }

  void phase_begun(uint16_t phase) override {
    open_.push_back(now());
    set_current_phase(phase);
  }

  void phase_ended(const PhaseEnd &e) override {
    uint64_t begin = open_.empty() ? 0 : open_.back();
    if (!open_.empty()) open_.pop_back();
    set_current_phase(e.enclosing);
    if (!active()) return;
    std::vector<trace::ObjectReference> objects;
    if (e.sampled) objects = referenced_objects(*e.mappings);
    uint32_t word = e.phase | (e.sampled ? trace::kPhaseSampled : 0u);
    trace::PhaseHeader ph{word, e.iteration, begin, now(), static_cast<uint32_t>(prim::thread_id()),
                          static_cast<uint32_t>(objects.size())};
    write_record(trace::kPhase, &ph, sizeof ph, objects.data(), objects.size() * sizeof(trace::ObjectReference));
  }

  void iteration_begun(uint32_t iteration) override {
    if (!active()) return;
    flush(false);
    trace::IterationRecord r{iteration, 0, now()};
    write_record(trace::kIteration, &r, sizeof r);
  }

  bool wants_every_phase_sampled() const override { return active() && large_object_count() > 0; }

 private:
  // The large objects' referenced bytes: each has a mapping of its own (HM_GUARDED).
  static std::vector<trace::ObjectReference> referenced_objects(const std::vector<prim::MappingUse> &mappings) {
    std::vector<std::pair<uintptr_t, size_t>> large = large_objects();
    std::sort(large.begin(), large.end());
    std::vector<trace::ObjectReference> out;
    for (const prim::MappingUse &m : mappings) {
      auto it = std::lower_bound(large.begin(), large.end(), std::make_pair(m.start, size_t{0}));
      for (; it != large.end() && it->first < m.end; ++it)
        out.push_back({it->first, it->second, std::min<uint64_t>(m.referenced_bytes, it->second)});
    }
    return out;
  }

  std::vector<uint64_t> open_;  // begin times of the open phases (the phase lock guards it)
};

}  // namespace

void install_phase_trace() {
  static PhaseTrace *trace = [] {
    auto *t = new PhaseTrace();  // lives as long as the process: phases may end during exit
    add_phase_observer(t);
    return t;
  }();
  (void)trace;
}

}  // namespace hm::profile
