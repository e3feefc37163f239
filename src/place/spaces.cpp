#include "place/spaces.h"

#include <cstdio>

#include "base/error.h"
#include "base/options.h"

namespace hm::place {
namespace {

constexpr uint64_t kRound = uint64_t{1} << 20;  // spaces are sized in whole MiB
uint64_t round_up(uint64_t v) { return (v + kRound - 1) / kRound * kRound; }

const char *const kSpaceNames[HM_SPACE_COUNT] = {"metadata", "temporary", "migration", "free"};

void raise_high_water(std::atomic<uint64_t> &hw, uint64_t v) {
  uint64_t cur = hw.load(std::memory_order_relaxed);
  while (v > cur && !hw.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

}  // namespace

hm_space_t space_of(hm_class_kind_t kind) {
  switch (kind) {
    case HM_CLASS_METADATA: return HM_SPACE_METADATA;
    case HM_CLASS_TEMPORARY: return HM_SPACE_TEMPORARY;
    default: return HM_SPACE_FREE;
  }
}

bool Spaces::reserve(hm_space_t space, uint64_t bytes) {
  Counters &c = s_[space];
  if (!sized()) {  // only the fast tier's own budget limits
    c.in_use.fetch_add(bytes, std::memory_order_acq_rel);
    return true;
  }
  // Sized spaces lend and check under one lock, so that a reservation and a transfer of budget
  // never interleave (each would be right alone and the two together exceed a budget).
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t used = c.in_use.load(std::memory_order_relaxed), budget = c.budget.load(std::memory_order_relaxed);
  if (used + bytes > budget && !grow_locked(space, used + bytes - budget)) {
    c.overflows.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  c.in_use.fetch_add(bytes, std::memory_order_acq_rel);
  return true;
}

void Spaces::confirm(hm_space_t space) {
  raise_high_water(s_[space].high_water, s_[space].in_use.load(std::memory_order_relaxed));
}

void Spaces::release(hm_space_t space, uint64_t bytes) { s_[space].in_use.fetch_sub(bytes, std::memory_order_acq_rel); }

uint64_t Spaces::free_room() const {
  uint64_t b = s_[HM_SPACE_FREE].budget.load(), u = s_[HM_SPACE_FREE].in_use.load();
  return b > u ? b - u : 0;
}

// The temporary and metadata spaces grow on demand (Ren et al. (ICS'21) §4.1: "increases the temporary space
// on demand") by whole MiB taken from the free space's unused room; the free space never lends
// what its objects hold. Called with mutex_ held.
bool Spaces::grow_locked(hm_space_t space, uint64_t short_by) {
  if (space != HM_SPACE_TEMPORARY && space != HM_SPACE_METADATA) return false;
  Counters &f = s_[HM_SPACE_FREE];
  uint64_t fb = f.budget.load(std::memory_order_relaxed), fu = f.in_use.load(std::memory_order_relaxed);
  uint64_t room = fb > fu ? fb - fu : 0;
  if (room < short_by) return false;
  uint64_t want = round_up(short_by), take = want <= room ? want : short_by;
  f.budget.fetch_sub(take, std::memory_order_relaxed);
  s_[space].budget.fetch_add(take, std::memory_order_relaxed);
  s_[space].grows.fetch_add(1, std::memory_order_relaxed);
  s_[space].grown_bytes.fetch_add(take, std::memory_order_relaxed);
  return true;
}

int Spaces::size(uint64_t fast_budget, uint64_t migration, uint64_t *free_budget, std::string *why) {
  uint64_t meta = round_up(in_use(HM_SPACE_METADATA));
  uint64_t temp = round_up(s_[HM_SPACE_TEMPORARY].high_water.load());
  uint64_t mig = round_up(migration);
  uint64_t need = meta + temp + mig;
  int rc = HM_OK;
  if (need > fast_budget) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "the fast budget (%s) is smaller than the spaces' minimum: metadata %s + temporary %s "
                  "+ migration %s = %s; hot objects go to the capacity tier",
                  format_size(fast_budget).c_str(), format_size(meta).c_str(), format_size(temp).c_str(),
                  format_size(mig).c_str(), format_size(need).c_str());
    *why = buf;
    rc = HM_EBUDGET;
  }
  *free_budget = need < fast_budget ? fast_budget - need : 0;
  s_[HM_SPACE_METADATA].budget.store(meta > in_use(HM_SPACE_METADATA) ? meta : in_use(HM_SPACE_METADATA));
  s_[HM_SPACE_TEMPORARY].budget.store(temp > in_use(HM_SPACE_TEMPORARY) ? temp : in_use(HM_SPACE_TEMPORARY));
  s_[HM_SPACE_MIGRATION].budget.store(mig > in_use(HM_SPACE_MIGRATION) ? mig : in_use(HM_SPACE_MIGRATION));
  // From here the budgets hold: high-water marks count from now.
  for (int s = HM_SPACE_METADATA; s < HM_SPACE_FREE; ++s) s_[s].high_water.store(s_[s].in_use.load());
  return rc;
}

uint64_t Spaces::give_to_free(hm_space_t space) {
  if (space == HM_SPACE_FREE) return 0;
  std::lock_guard<std::mutex> lock(mutex_);
  Counters &c = s_[space];
  const uint64_t b = c.budget.load(std::memory_order_relaxed), u = c.in_use.load(std::memory_order_relaxed);
  const uint64_t give = b > u ? b - u : 0;
  c.budget.fetch_sub(give, std::memory_order_relaxed);
  s_[HM_SPACE_FREE].budget.fetch_add(give, std::memory_order_relaxed);
  return give;
}

void Spaces::size_free(uint64_t budget) {
  std::lock_guard<std::mutex> lock(mutex_);
  // What hot objects still hold on the fast tier (objects that could not move) stays accounted:
  // the budget is never below it.
  uint64_t held = in_use(HM_SPACE_FREE);
  s_[HM_SPACE_FREE].budget.store(budget > held ? budget : held);
  s_[HM_SPACE_FREE].high_water.store(held);
  sized_.store(true, std::memory_order_release);
}

hm_space_stats_t Spaces::stats(hm_space_t space) const {
  const Counters &c = s_[space];
  hm_space_stats_t s{};
  s.sized = sized();
  s.budget = s.sized ? c.budget.load() : 0;
  s.in_use = c.in_use.load();
  s.high_water = c.high_water.load();
  s.objects = c.objects.load();
  s.grows = c.grows.load();
  s.grown_bytes = c.grown_bytes.load();
  s.overflows = c.overflows.load();
  return s;
}

void Spaces::reset() {
  for (Counters &c : s_) c.budget = c.in_use = c.high_water = c.objects = c.grows = c.grown_bytes = c.overflows = 0;
  sized_.store(false);
}

Spaces &spaces() {
  static Spaces *s = new Spaces();  // lives as long as the process: frees may come during exit
  return *s;
}

}  // namespace hm::place

extern "C" const char *hm_space_name(hm_space_t space) {
  return space >= 0 && space < HM_SPACE_COUNT ? hm::place::kSpaceNames[space] : "unknown";
}
