// The policies of hetmem's own runtime (WarpX-PM, Ren et al., ICS'21, §4): static placement
// (hetmem-static), with cache prefetch (hetmem-static+prefetch), and with streamed data staged
// through the migration space (hetmem). Their mechanisms live in static_placement.cpp,
// prefetch.cpp and stream.cpp.
#include "base/error.h"
#include "base/options.h"
#include "place/mechanisms.h"
#include "place/spaces.h"
#include "place/stream.h"

namespace hm::place {
namespace {

// Ren et al. (ICS'21) §4.1: metadata and temporaries in their spaces of the fast tier, hot objects in the
// free space by priority (placed in allocation order while iteration 1 is observed, then moved
// into priority order at its end: static_placement.cpp), streamed and cold data on the capacity
// tier. Hot objects get their own mappings so that they can move at the same address. When the
// spaces are sized, the room hot objects leave in the free space takes the streamed objects of
// iteration 1 that are large enough to move (kMovableStreamed), in allocation order
// (promote_streamed, static_placement.cpp); streamed objects allocated later are placed in what is
// left of it as they come. Neither ever displaces a hot object.
class HetmemStatic : public Policy {
 public:
  const char *name() const override { return "hetmem-static"; }
  const char *doc() const override {
    return "spaces in the fast tier: metadata and temporaries pinned, hot objects by priority after iteration 1";
  }
  int activate(std::string *why) const override {
    hm_tier_info_t info;
    if (fast_tier() < 0 || hm_tier_info(fast_tier(), &info) != HM_OK) {
      *why = "hetmem-static: no tier has the fast role";
      return HM_ENOTIER;
    }
    const uint64_t budget = fast_budget_limit();
    if (budget && info.capacity && budget > info.capacity) {
      *why = "hetmem-static: the fast budget (" + format_size(budget) + ") is larger than the fast tier '" +
             info.name + "' (" + format_size(info.capacity) + "); set HM_FAST_BUDGET to at most its capacity";
      return HM_EINVAL;
    }
    return HM_OK;
  }
  Placement place(const Request &r) const override {
    switch (r.kind) {
      case HM_CLASS_METADATA:
      case HM_CLASS_TEMPORARY: return {fast_tier(), HM_PREFERRED};
      case HM_CLASS_HOT: return {fast_tier(), HM_PREFERRED | HM_MOVABLE};
      case HM_CLASS_STREAMING:
        if (spaces().sized()) return {spaces().free_room() >= r.size ? fast_tier() : capacity_tier(), HM_PREFERRED};
        return streamed_at_home(r);
      default: return {capacity_tier(), HM_PREFERRED};
    }
  }
  std::vector<Mechanism *> mechanisms() const override { return {&static_placement_mechanism()}; }
  bool honours_class_interleave() const override { return true; }

 protected:
  // A streamed object at home on the capacity tier, movable (when large enough for a mapping of
  // its own) into the room that hot objects leave when the spaces are sized (static_placement.cpp).
  static Placement streamed_at_home(const Request &r) {
    return {capacity_tier(), HM_PREFERRED | (r.size >= kMovableStreamed ? HM_MOVABLE : 0u)};
  }
};

// Static placement plus the model-guided cache prefetch of field data (Ren et al. (ICS'21) §4.2).
class HetmemStaticPrefetch final : public HetmemStatic {
 public:
  const char *name() const override { return "hetmem-static+prefetch"; }
  const char *doc() const override { return "hetmem-static, and kernels prefetch field data k units ahead (model)"; }
  std::vector<Mechanism *> mechanisms() const override {
    return {&static_placement_mechanism(), &prefetch_mechanism()};
  }
};

// WarpX-PM's full runtime: static placement, cache prefetch, and streamed data staged through the
// migration space by model-sized helper threads (§4.3). Streamed objects live on the capacity tier
// (their home); the migration space defaults to an eighth of the fast budget.
class Hetmem final : public HetmemStatic {
 public:
  const char *name() const override { return "hetmem"; }
  const char *doc() const override {
    return "hetmem-static + prefetch + streamed tiles staged through the migration space by helper threads";
  }
  Placement place(const Request &r) const override {
    // Streamed objects live at home on the capacity tier for staging, unless the helper model
    // declined staging everywhere: then as static placement places them.
    if (r.kind == HM_CLASS_STREAMING && !(spaces().sized() && staging_declined())) return streamed_at_home(r);
    return HetmemStatic::place(r);
  }
  std::vector<Mechanism *> mechanisms() const override {
    return {&static_placement_mechanism(), &prefetch_mechanism(), &streaming_mechanism()};
  }
};

}  // namespace

const Policy &hetmem_static_policy() { return single<const HetmemStatic>(); }
const Policy &hetmem_static_prefetch_policy() { return single<const HetmemStaticPrefetch>(); }
const Policy &hetmem_policy() { return single<const Hetmem>(); }

}  // namespace hm::place
