// Optane's Memory Mode (the memory-mode policy): all data on the capacity tier, behind a
// direct-mapped DRAM cache of the fast budget's size that the hardware manages. Emulated here by
// the capacity tier's charge model (tier/charge_model.h), which the DRAM cache mechanism installs;
// a real capacity tier would need the hardware mode itself.
#include <memory>

#include <nlohmann/json.hpp>

#include "alloc/runtime.h"
#include "base/error.h"
#include "place/mechanisms.h"
#include "tier/charge_model.h"
#include "tier/tier.h"

namespace hm::place {
namespace {

DramCacheModel *installed_model() {
  Tier *cap = tier_get(capacity_tier());
  return cap ? dynamic_cast<DramCacheModel *>(cap->charge_model.get()) : nullptr;
}

class DramCache final : public Mechanism {
 public:
  const char *name() const override { return "dram-cache"; }
  int activate(std::string *why) override {
    Tier *cap = tier_get(capacity_tier());
    if (!cap) {
      *why = "memory-mode: no tier has the capacity role";
      return HM_ENOTIER;
    }
    if (!cap->charge_model) cap->charge_model = std::make_unique<DramCacheModel>(fast_budget_bytes());
    return HM_OK;
  }
  void deactivate() override {
    if (Tier *cap = tier_get(capacity_tier())) cap->charge_model.reset();
  }
  void summarise(nlohmann::json &placement) const override {
    const DramCacheModel *model = active_policy() ? installed_model() : nullptr;
    if (!model) return;
    const DramCacheStats s = model->stats();
    placement["dram_cache"] = {{"hits", s.hits}, {"misses", s.misses}, {"writebacks", s.writebacks},
                               {"block_bytes", s.block}, {"blocks", s.blocks}};
  }
};

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
    return HM_OK;
  }
  Placement place(const Request &) const override { return {capacity_tier(), HM_PREFERRED}; }
  std::vector<Mechanism *> mechanisms() const override { return {&dram_cache_mechanism()}; }
};

}  // namespace

Mechanism &dram_cache_mechanism() { return single<DramCache>(); }

const Policy &memory_mode_policy() { return single<const MemoryMode>(); }

}  // namespace hm::place

extern "C" int hm_dram_cache_stats(hm_dram_cache_stats_t *stats) {
  if (!stats) return hm::fail(HM_EINVAL, "hm_dram_cache_stats: stats is NULL");
  int rc = hm::runtime_ensure();
  if (rc != HM_OK) return rc;
  hm::DramCacheModel *model = hm::place::installed_model();
  if (!model) return hm::fail(HM_ENOTSUP, "hm_dram_cache_stats: the memory-mode policy is not active");
  hm::DramCacheStats s = model->stats();
  *stats = hm_dram_cache_stats_t{s.hits, s.misses, s.writebacks, s.block, s.blocks};
  return HM_OK;
}
