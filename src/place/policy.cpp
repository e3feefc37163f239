#include "place/policy.h"

#include <atomic>
#include <cstdio>

#include "alloc/runtime.h"
#include "base/options.h"
#include "place/spaces.h"
#include "tier/charge_model.h"
#include "tier/tier.h"

namespace hm::place {

int fast_tier() { return role_tier(HM_FAST); }
int capacity_tier() { return role_tier(HM_CAPACITY); }

uint64_t fast_budget_bytes() {
  int t = fast_tier();
  TierHeap *h = heap_of(t);
  if (!h) return 0;
  uint64_t budget = h->counters().budget.load();
  if (budget) return budget;
  hm_tier_info_t info;
  return hm_tier_info(t, &info) == HM_OK ? info.capacity : 0;
}

namespace {

// NUMA first-touch: the fast tier until its budget is used up, in allocation order, then the
// capacity tier (the preferred placement's fallback, counted).
class FirstTouch final : public Policy {
 public:
  const char *name() const override { return "first-touch"; }
  const char *doc() const override { return "the fast tier until its budget is used up, in allocation order"; }
  Placement place(const Request &) const override { return {fast_tier(), HM_PREFERRED}; }
  bool honours_class_interleave() const override { return true; }
};

// The upper bound: everything on the fast tier, strictly, for a footprint that fits.
class AllFast final : public Policy {
 public:
  const char *name() const override { return "all-fast"; }
  const char *doc() const override { return "everything on the fast tier (the upper bound; the footprint must fit)"; }
  Placement place(const Request &) const override { return {fast_tier(), HM_STRICT}; }
};

// WarpX-PM's Optane-only baseline: everything on the capacity tier.
class SlowOnly final : public Policy {
 public:
  const char *name() const override { return "slow-only"; }
  const char *doc() const override { return "everything on the capacity tier"; }
  Placement place(const Request &) const override { return {capacity_tier(), HM_PREFERRED}; }
};

// Optane's Memory Mode: all data on the capacity tier, behind a direct-mapped DRAM cache of the
// fast budget's size that the hardware manages. Emulated here by the capacity tier's charge model
// (tier/charge_model.h); a real capacity tier would need the hardware mode itself.
class MemoryMode final : public Policy {
 public:
  const char *name() const override { return "memory-mode"; }
  const char *doc() const override {
    return "everything on the capacity tier behind a direct-mapped DRAM cache of the fast budget's size (emulated)";
  }
  int activate(std::string *why) const override {
    Tier *cap = tier_get(capacity_tier());
    if (!cap) {
      *why = "memory-mode: no tier has the capacity role";
      return HM_ENOTIER;
    }
    if (!cap->emulated()) {
      *why = "memory-mode: the capacity tier '" + cap->name +
             "' is a real tier; its DRAM cache is the hardware's Memory Mode, which must be configured in the "
             "firmware (the emulation models it on emul: tiers only)";
      return HM_ENOTSUP;
    }
    uint64_t cache = fast_budget_bytes();
    if (!cap->charge_model) cap->charge_model = std::make_unique<DramCacheModel>(cache);
    return HM_OK;
  }
  Placement place(const Request &) const override { return {capacity_tier(), HM_PREFERRED}; }
};

// Weighted interleave across the fast and capacity tiers in the ratio of their read bandwidths
// (what Linux's MPOL_WEIGHTED_INTERLEAVE does with weights from HMAT): each object of 1 MiB or more
// split by page range in that ratio (classes.cpp), smaller ones whole, each going where the bytes
// placed so far fall furthest below their tier's share.
class Interleave final : public Policy {
 public:
  const char *name() const override { return "interleave"; }
  const char *doc() const override {
    return "the fast and capacity tiers in the ratio of their read bandwidths: large objects split by pages, "
           "small ones spread by bytes";
  }
  int activate(std::string *) const override {
    double f = bandwidth(fast_tier()), c = bandwidth(capacity_tier());
    share_fast_ = f > 0 && c > 0 ? f / (f + c) : 0.5;
    fast_bytes_ = total_bytes_ = 0;
    return HM_OK;
  }
  Placement place(const Request &r) const override {
    uint64_t total = total_bytes_.fetch_add(r.size) + r.size;
    uint64_t fast = fast_bytes_.load();
    if (static_cast<double>(fast + r.size) <= share_fast_ * static_cast<double>(total)) {
      fast_bytes_.fetch_add(r.size);
      return {fast_tier(), HM_PREFERRED};
    }
    return {capacity_tier(), HM_PREFERRED};
  }
  int object_fast_percent() const override { return static_cast<int>(share_fast_ * 100 + 0.5); }
  bool honours_class_interleave() const override { return true; }

 private:
  static double bandwidth(int tier) {
    hm_tier_info_t info;
    if (tier < 0 || hm_tier_info(tier, &info) != HM_OK) return 0;
    if (info.read_bw_mbps > 0) return info.read_bw_mbps;
    hm_calibration_t cal;  // DRAM without figures from discovery: the calibration's
    return info.kind == HM_KIND_DRAM && hm_calibration_get(&cal) == HM_OK ? cal.read_bw_mbps[0] : 0;
  }
  mutable double share_fast_ = 0.5;
  mutable std::atomic<uint64_t> fast_bytes_{0}, total_bytes_{0};
};

// Ren et al. (ICS'21) §4.1: metadata and temporaries in their spaces of the fast tier, hot objects in the
// free space by priority (placed in allocation order while iteration 1 is observed, then moved
// into priority order at its end: static_placement.cpp), streamed and cold data on the capacity
// tier. Hot objects get their own mappings so that they can move at the same address. Once the
// spaces are sized, streamed objects allocated from then on may use the room hot objects leave in
// the free space (they never displace a hot object, and never move).
class HetmemStatic : public Policy {
 public:
  const char *name() const override { return "hetmem-static"; }
  const char *doc() const override {
    return "spaces in the fast tier: metadata and temporaries pinned, hot objects by priority after iteration 1";
  }
  int activate(std::string *why) const override {
    TierHeap *h = heap_of(fast_tier());
    hm_tier_info_t info;
    if (!h || hm_tier_info(fast_tier(), &info) != HM_OK) {
      *why = "hetmem-static: no tier has the fast role";
      return HM_ENOTIER;
    }
    uint64_t budget = h->counters().budget.load();
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
        return {spaces().sized() && spaces().free_room() >= r.size ? fast_tier() : capacity_tier(), HM_PREFERRED};
      default: return {capacity_tier(), HM_PREFERRED};
    }
  }
  bool settles() const override { return true; }
  bool honours_class_interleave() const override { return true; }
};

// Static placement plus the model-guided cache prefetch of field data (Ren et al. (ICS'21) §4.2).
class HetmemStaticPrefetch final : public HetmemStatic {
 public:
  const char *name() const override { return "hetmem-static+prefetch"; }
  const char *doc() const override { return "hetmem-static, and kernels prefetch field data k units ahead (model)"; }
  bool prefetches() const override { return true; }
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
    if (r.kind == HM_CLASS_STREAMING) return {capacity_tier(), HM_PREFERRED};
    return HetmemStatic::place(r);
  }
  bool prefetches() const override { return true; }
  bool streams() const override { return true; }
};

// The reactive baseline of Ren et al. (ICS'21) §6 (IAL-like): objects go where first-touch puts them, each
// large one in its own mapping; after every iteration the objects the referenced-page sampler saw
// used most (per byte) are promoted to the fast tier and the least used demoted
// (reactive_placement.cpp): after the fact, from sampled page use, with the moves on the critical
// path.
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
  bool reacts() const override { return true; }
  bool honours_class_interleave() const override { return true; }
};

const FirstTouch kFirstTouch;
const AllFast kAllFast;
const SlowOnly kSlowOnly;
const MemoryMode kMemoryMode;
const Interleave kInterleave;
const HetmemStatic kHetmemStatic;
const HetmemStaticPrefetch kHetmemStaticPrefetch;
const Hetmem kHetmem;
const Reactive kReactive;
const Policy *const kPolicies[] = {&kFirstTouch,   &kAllFast,       &kSlowOnly, &kMemoryMode, &kInterleave,
                                   &kHetmemStatic, &kHetmemStaticPrefetch, &kHetmem, &kReactive};

}  // namespace

const Policy *policy_find(const std::string &name) {
  for (const Policy *p : kPolicies)
    if (name == p->name()) return p;
  return nullptr;
}

std::string policy_names() {
  std::string out;
  for (const Policy *p : kPolicies) out += std::string(out.empty() ? "" : ", ") + p->name();
  return out;
}

}  // namespace hm::place
