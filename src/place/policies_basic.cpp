// The policies that only choose a tier at allocation: NUMA first-touch, the all-fast upper bound,
// the slow-only baseline and weighted interleave (docs/placement.md).
#include <atomic>

#include "place/policy.h"

namespace hm::place {
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

}  // namespace

const Policy &first_touch_policy() { return single<const FirstTouch>(); }
const Policy &all_fast_policy() { return single<const AllFast>(); }
const Policy &slow_only_policy() { return single<const SlowOnly>(); }
const Policy &interleave_policy() { return single<const Interleave>(); }

}  // namespace hm::place
