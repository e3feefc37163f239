// Tiers: discovery, configuration (HM_TIERS) and the role -> tier map.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "hetmem/hetmem.h"
#include "tier/backing.h"
#include "tier/charge_model.h"
#include "tier/emul.h"

namespace hm {

constexpr int kMaxTiers = HM_MAX_TIERS;  // hetmem.h: the public arrays indexed by tier

struct Tier {
  int id = -1;
  std::string name;  // canonical spec: "dram", "numa:1", "emul:optane", "file:/p", "emul:cxl:file:/p"
  hm_tier_kind_t kind = HM_KIND_DRAM;
  int node = -1;
  unsigned roles = 0;
  std::unique_ptr<Backing> backing;
  const EmulProfile *profile = nullptr;  // emulated tiers only
  EmulState emul;
  // Emulated tiers: what turns the program's accesses into device traffic (charge_model.h).
  // Empty: every access reaches the device. Set before objects are placed (the memory-mode policy).
  std::unique_ptr<ChargeModel> charge_model;
  // Figures from discovery (hwloc / sysfs); measured and emulated figures are filled on demand.
  double read_bw_mbps = 0, write_bw_mbps = 0, latency_ns = 0;
  hm_perf_source_t perf_source = HM_PERF_NONE;
  bool is_pmem = false;
  std::string detail;

  bool emulated() const { return profile != nullptr; }
};

// The device traffic of reading and/or writing `bytes` bytes in order from `addr` on `t`: through
// the tier's charge model when it has one, else all of it.
inline DeviceVolume tier_device_range(Tier &t, const void *addr, uint64_t bytes, bool read, bool write) {
  if (t.charge_model) return t.charge_model->range(reinterpret_cast<uintptr_t>(addr), bytes, read, write);
  return DeviceVolume{read ? bytes : 0, write ? bytes : 0, 0};
}

// One parsed item of HM_TIERS or a tier name.
struct TierSpec {
  hm_tier_kind_t kind = HM_KIND_DRAM;
  int node = -1;
  std::string profile;   // emul
  std::string path;      // file, or emul backed by a file
  uint64_t size = 0;     // file pool size, 0 = HM_POOL_SIZE or the existing file's size
  std::string canonical;
};

// Parses "dram", "numa:N", "file:PATH[:SIZE]", "emul:PROFILE[:file:PATH[:SIZE]]".
// On error returns HM_EFORMAT and sets *error to a sentence naming what was wrong.
int parse_tier_spec(const std::string &text, TierSpec *spec, std::string *error);

// A node found by discovery.
struct NodeInfo {
  int os_index = 0;
  bool has_cpus = false;
  uint64_t capacity = 0;
  double read_bw_mbps = 0, write_bw_mbps = 0, latency_ns = 0;
  hm_perf_source_t perf_source = HM_PERF_NONE;
  int memory_tier = -1;  // kernel memory_tiering rank (smaller is faster), -1 if unknown
  int distance = 10;     // from the current node
  bool is_pmem = false;
  std::string subtype;   // hwloc subtype ("NVM", "HBM", "CXL-DRAM", ...)
  std::string how;       // which sources contributed
};
// hwloc memory attributes -> sysfs access0 initiators and memory tiers -> NUMA distances.
std::vector<NodeInfo> discover_nodes(int *local_node);

// The registry of this process's tiers.
int tiers_init();  // reads HM_TIERS and discovery; HM_EFORMAT/HM_EIO with a message on failure
void tiers_finalize();
int tier_count();
Tier *tier_get(int id);  // nullptr if out of range
int tier_find(const std::string &name, int *id);  // name or role name; HM_ENOTIER lists known names
int role_tier(hm_role_t role);  // -1 if unmapped
const char *role_name(hm_role_t role);
std::string known_tier_names();
// Fills the public description, measuring DRAM if emulated figures are needed.
void tier_describe(const Tier &t, hm_tier_info_t *info);

}  // namespace hm
