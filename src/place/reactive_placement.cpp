// The reactive baseline (Ren et al. (ICS'21) §6, like IAL): what the referenced-page sampler saw of each
// object with its own mapping during an iteration decides, at the iteration's end, which objects
// the fast tier holds next: the most used per byte, as many as the fast budget takes. Reactive by
// construction: it acts on the last iteration's use, sees only the phases the sampler's budget
// lets it read, and moves objects while the program waits.
#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "alloc/phases.h"
#include "base/error.h"
#include "base/options.h"
#include "place/mechanisms.h"
#include "place/objects.h"
#include "place/spaces.h"
#include "prim/prim.h"

namespace hm::place {
namespace {

// Objects of this size or more get their own mapping, so that the sampler reads their page use and
// they can move.
constexpr size_t kReactiveOwnMapping = size_t{64} << 10;

struct ReactiveState {
  std::mutex mutex;
  struct Use {
    uintptr_t end;
    uint64_t referenced;
  };
  std::map<uintptr_t, Use> referenced;  // mapping start -> its end and referenced bytes this iteration
  uint64_t promoted = 0, demoted = 0, moved_bytes = 0, rounds = 0;
  double move_seconds = 0;
};

ReactiveState &state() {
  static ReactiveState *s = new ReactiveState();
  return *s;
}

bool reacting() { return reactive_mechanism().active(); }

void react(uint32_t iteration) {
  ReactiveState &st = state();
  std::map<uintptr_t, ReactiveState::Use> seen;
  {
    std::lock_guard<std::mutex> lock(st.mutex);
    seen.swap(st.referenced);
  }
  if (seen.empty()) return;  // nothing sampled this iteration: nothing to act on
  const int fast = fast_tier(), cap = capacity_tier();
  if (fast < 0 || cap < 0) return;
  struct Candidate {
    Object o;
    double heat;  // referenced bytes per byte
  };
  std::vector<Candidate> movable;
  uint64_t pinned_fast = 0;  // fast bytes of objects that cannot move
  for (const Object &o : live_objects()) {
    if (o.tail_tier >= 0 || o.size < kReactiveOwnMapping) {
      pinned_fast += o.bytes_on(fast);
      continue;
    }
    const auto at = reinterpret_cast<uintptr_t>(o.ptr);
    // Every mapping the object spans: one of 512 MiB or more is three (its ends in small pages).
    auto it = seen.upper_bound(at);
    if (it != seen.begin() && at < std::prev(it)->second.end) --it;
    uint64_t ref = 0;
    for (; it != seen.end() && it->first < at + o.size; ++it) ref += it->second.referenced;
    movable.push_back({o, o.size ? static_cast<double>(ref) / static_cast<double>(o.size) : 0});
  }
  std::stable_sort(movable.begin(), movable.end(), [](const Candidate &a, const Candidate &b) { return a.heat > b.heat; });
  // The fast budget less what stays there anyway, filled with the hottest.
  const uint64_t budget = fast_budget_bytes();
  uint64_t room = budget > pinned_fast ? budget - pinned_fast : 0;
  std::vector<bool> want_fast(movable.size(), false);
  for (size_t i = 0; i < movable.size(); ++i)
    if (movable[i].heat > 0 && movable[i].o.size <= room) {
      want_fast[i] = true;
      room -= movable[i].o.size;
    }
  const uint64_t t0 = prim::now_ns();
  uint64_t promoted = 0, demoted = 0, bytes = 0;
  for (size_t i = 0; i < movable.size(); ++i)  // out first, so that what comes in finds room
    if (!want_fast[i] && movable[i].o.tier == fast && hm_move(movable[i].o.ptr, cap) == HM_OK &&
        object_moved(movable[i].o.ptr, cap, false))
      ++demoted, bytes += movable[i].o.size;
  for (size_t i = 0; i < movable.size(); ++i) {
    if (!want_fast[i] || movable[i].o.tier == fast) continue;
    const hm_space_t sp = space_of(movable[i].o.kind);
    if (!spaces().reserve(sp, movable[i].o.size)) continue;
    if (hm_move(movable[i].o.ptr, fast) == HM_OK && object_moved(movable[i].o.ptr, fast, true)) {
      ++promoted, bytes += movable[i].o.size;
    } else {
      spaces().release(sp, movable[i].o.size);
    }
  }
  std::lock_guard<std::mutex> lock(st.mutex);
  st.promoted += promoted, st.demoted += demoted, st.moved_bytes += bytes, ++st.rounds;
  st.move_seconds += static_cast<double>(prim::now_ns() - t0) * 1e-9;
  log(2, "reactive: after iteration %u: %llu objects promoted, %llu demoted (%s moved)", iteration,
      static_cast<unsigned long long>(promoted), static_cast<unsigned long long>(demoted), format_size(bytes).c_str());
}

class ReactivePlacement final : public PhaseObserver {
 public:
  void phase_ended(const PhaseEnd &end) override {
    if (!end.sampled || !end.mappings || !reacting()) return;
    ReactiveState &st = state();
    std::lock_guard<std::mutex> lock(st.mutex);
    for (const prim::MappingUse &m : *end.mappings)
      if (m.referenced_bytes) {
        ReactiveState::Use &u = st.referenced[m.start];
        u.end = m.end;
        u.referenced += m.referenced_bytes;
      }
  }
  void iteration_begun(uint32_t iteration) override {
    if (reacting() && iteration >= 1) react(iteration);
  }
  // Every phase sampled is what reacting costs the program (each sample clears and reads the
  // page tables' referenced bits). It can pay only while the capacity tier holds something that
  // might move up; with everything on the fast tier there is nothing to decide, and reactive
  // samples nothing of its own (an unlimited fast budget costs what first-touch costs).
  bool wants_every_phase_sampled() const override { return reacting() && capacity_holds_something(); }

 private:
  static bool capacity_holds_something() {
    const int cap = capacity_tier();
    hm_tier_stats_t s{};
    return cap >= 0 && hm_tier_stats(cap, &s) == HM_OK && s.in_use > 0;
  }
};

hm_reactive_stats_t reactive_stats() {
  ReactiveState &st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  hm_reactive_stats_t out{};
  out.rounds = st.rounds;
  out.promoted = st.promoted;
  out.demoted = st.demoted;
  out.moved_bytes = st.moved_bytes;
  out.move_seconds = st.move_seconds;
  return out;
}

class ReactiveMechanism final : public Mechanism {
 public:
  const char *name() const override { return "reactive"; }
  void reset() override {
    ReactiveState &st = state();
    std::lock_guard<std::mutex> lock(st.mutex);
    st.referenced.clear();
    st.promoted = st.demoted = st.moved_bytes = st.rounds = 0;
    st.move_seconds = 0;
  }
  int activate(std::string *) override {
    add_phase_observer_once<ReactivePlacement>();
    return HM_OK;
  }
  void summarise(nlohmann::json &placement) const override {
    if (!active()) return;
    const hm_reactive_stats_t rs = reactive_stats();
    placement["reactive"] = {{"rounds", rs.rounds}, {"promoted", rs.promoted}, {"demoted", rs.demoted},
                             {"moved_bytes", rs.moved_bytes}, {"move_seconds", rs.move_seconds}};
  }
};

// The policy: objects go where first-touch puts them, each large one in its own mapping so that the
// sampler reads its page use and it can move; the mechanism below moves them after every iteration.
class Reactive final : public Policy {
 public:
  const char *name() const override { return "reactive"; }
  const char *doc() const override {
    return "first-touch, then after every iteration the objects with the most sampled page use per byte promoted, "
           "the least used demoted (IAL-like)";
  }
  Placement place(const Request &r) const override {
    return {fast_tier(), HM_PREFERRED | (r.size >= kReactiveOwnMapping ? HM_MOVABLE : 0u)};
  }
  std::vector<Mechanism *> mechanisms() const override { return {&reactive_mechanism()}; }
  bool honours_class_interleave() const override { return true; }
};


}  // namespace

Mechanism &reactive_mechanism() { return single<ReactiveMechanism>(); }

const Policy &reactive_policy() { return single<const Reactive>(); }

}  // namespace hm::place

extern "C" int hm_reactive_stats(hm_reactive_stats_t *stats) {
  if (!stats) return hm::fail(HM_EINVAL, "hm_reactive_stats: NULL stats");
  *stats = hm::place::reactive_stats();
  return HM_OK;
}
