// The process's tiers: built once from discovery and HM_TIERS.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <tuple>

#include "base/error.h"
#include "base/options.h"
#include "prim/prim.h"
#include "tier/tier.h"

namespace hm {
namespace {

// Plain pointers, deleted only by tiers_finalize: the tiers must outlive every exit-time
// destructor of the program and its libraries, whose frees still reach them through the preload
// library (a static array of owners would be destroyed first).
Tier *g_tiers[kMaxTiers] = {};
int g_count = 0;
int g_roles[HM_ROLE_COUNT] = {-1, -1, -1};
int g_local_node = 0;
const char *kRoleNames[HM_ROLE_COUNT] = {"fast", "capacity", "persistent"};

int add_tier(std::unique_ptr<Tier> t, std::string *error) {
  if (g_count >= kMaxTiers) {
    *error = "too many tiers (at most " + std::to_string(kMaxTiers) + ")";
    return HM_EINVAL;
  }
  t->id = g_count;
  g_tiers[g_count] = t.release();
  return g_count++;
}

int find_by_name(const std::string &name) {
  for (int i = 0; i < g_count; ++i)
    if (g_tiers[i]->name == name) return i;
  return -1;
}

// Creates (or finds) the tier a spec names.
int tier_from_spec(const TierSpec &spec, std::string *error) {
  std::string name = spec.canonical;
  if (spec.kind == HM_KIND_NUMA && spec.node == g_local_node) name = "dram";
  int found = find_by_name(name);
  if (found >= 0) return found;
  auto t = std::make_unique<Tier>();
  t->name = name;
  t->kind = spec.kind;
  if (spec.kind == HM_KIND_NUMA) {
    uint64_t total = 0, fr = 0;
    if (spec.node >= prim::numa_node_count() || prim::node_size(spec.node, &total, &fr) != HM_OK) {
      *error = "numa:" + std::to_string(spec.node) + ": no such NUMA node (this machine has nodes 0-" +
               std::to_string(prim::numa_node_count() - 1) + ")";
      return HM_ENOTIER;
    }
    t->node = spec.node;
    t->backing = std::make_unique<AnonBacking>(spec.node, total);
    t->detail = "NUMA node " + std::to_string(spec.node) + " from configuration";
  } else if (spec.kind == HM_KIND_FILE || !spec.path.empty()) {
    uint64_t size = spec.size;
    if (size == 0) {
      int rc = option_size(Option::kPoolSize, &size);
      if (rc != HM_OK) {
        *error = hm_last_error();
        return rc;
      }
    }
    FileBacking *fb = nullptr;
    int rc = FileBacking::open(spec.path, size, &fb);
    if (rc != HM_OK) {
      *error = hm_last_error();
      return rc;
    }
    t->backing.reset(fb);
    t->detail = fb->describe();
  } else {
    uint64_t total = 0, fr = 0;
    prim::node_size(g_local_node, &total, &fr);
    t->node = g_local_node;
    t->backing = std::make_unique<AnonBacking>(g_local_node, total);
  }
  if (spec.kind == HM_KIND_EMUL) {
    t->profile = emul_profile(spec.profile.c_str());
    t->detail = std::string("emulated ") + t->profile->name + " on " + t->backing->describe() + "; " +
                t->profile->source;
  }
  return add_tier(std::move(t), error);
}

int parse_size_suffix(const std::string &text, std::string *path, uint64_t *size, std::string *bad_size) {
  // "PATH" or "PATH:SIZE": the last ':'-separated part is a size if it parses as one; one that starts
  // with a digit and does not (":4Q") is a malformed size, not part of the path.
  auto colon = text.rfind(':');
  *path = text;
  *size = 0;
  if (colon != std::string::npos) {
    const std::string tail = text.substr(colon + 1);
    std::string err;
    uint64_t s = 0;
    if (parse_size(tail, &s, &err)) {
      *path = text.substr(0, colon);
      *size = s;
    } else if (!tail.empty() && std::isdigit(static_cast<unsigned char>(tail[0]))) {
      *bad_size = tail;
      return HM_EFORMAT;
    }
  }
  return path->empty() ? HM_EFORMAT : HM_OK;
}

}  // namespace

int parse_tier_spec(const std::string &text, TierSpec *spec, std::string *error) {
  *spec = TierSpec{};
  const std::string kinds = "known kinds: dram, numa:N, file:PATH[:SIZE], emul:PROFILE[:file:PATH[:SIZE]] "
                            "with profiles " + std::string(emul_profile_names());
  if (text == "dram") {
    spec->kind = HM_KIND_DRAM;
    spec->canonical = "dram";
    return HM_OK;
  }
  if (text.rfind("numa:", 0) == 0) {
    const char *s = text.c_str() + 5;
    char *end = nullptr;
    long n = std::strtol(s, &end, 10);
    if (!*s || *end || n < 0 || n > 1023) {
      *error = "'" + text + "': expected numa:N with a node number";
      return HM_EFORMAT;
    }
    spec->kind = HM_KIND_NUMA;
    spec->node = static_cast<int>(n);
    spec->canonical = "numa:" + std::to_string(n);
    return HM_OK;
  }
  if (text.rfind("file:", 0) == 0) {
    spec->kind = HM_KIND_FILE;
    std::string bad_size;
    if (parse_size_suffix(text.substr(5), &spec->path, &spec->size, &bad_size) != HM_OK) {
      *error = bad_size.empty() ? "'" + text + "': expected file:PATH or file:PATH:SIZE"
                                : "'" + text + "': '" + bad_size + "' is not a size (examples: 512M, 4G, 1.5GiB)";
      return HM_EFORMAT;
    }
    spec->canonical = "file:" + spec->path;
    return HM_OK;
  }
  if (text.rfind("emul:", 0) == 0) {
    spec->kind = HM_KIND_EMUL;
    std::string rest = text.substr(5);
    auto colon = rest.find(':');
    spec->profile = rest.substr(0, colon);
    if (!emul_profile(spec->profile.c_str())) {
      *error = "'" + text + "': unknown emulation profile '" + spec->profile + "' (profiles: " +
               emul_profile_names() + ")";
      return HM_EFORMAT;
    }
    spec->canonical = "emul:" + spec->profile;
    if (colon != std::string::npos) {
      std::string backing = rest.substr(colon + 1), bad_size;
      if (backing.rfind("file:", 0) != 0 ||
          parse_size_suffix(backing.substr(5), &spec->path, &spec->size, &bad_size) != HM_OK) {
        *error = bad_size.empty()
                     ? "'" + text + "': an emulated tier is backed by anonymous memory or by file:PATH[:SIZE]"
                     : "'" + text + "': '" + bad_size + "' is not a size (examples: 512M, 4G, 1.5GiB)";
        return HM_EFORMAT;
      }
      spec->canonical += ":file:" + spec->path;
    }
    return HM_OK;
  }
  *error = "unknown tier '" + text + "' (" + kinds + ")";
  return HM_ENOTIER;
}

int tiers_init() {
  std::string error;
  std::vector<NodeInfo> nodes = discover_nodes(&g_local_node);
  // Every NUMA node is a tier: the local one is "dram", the others "numa:N".
  const NodeInfo *slow = nullptr;
  for (const auto &n : nodes) {
    auto t = std::make_unique<Tier>();
    bool local = n.os_index == g_local_node;
    t->name = local ? "dram" : "numa:" + std::to_string(n.os_index);
    t->kind = local ? HM_KIND_DRAM : HM_KIND_NUMA;
    t->node = n.os_index;
    t->backing = std::make_unique<AnonBacking>(n.os_index, n.capacity);
    t->read_bw_mbps = n.read_bw_mbps;
    t->write_bw_mbps = n.write_bw_mbps;
    t->latency_ns = n.latency_ns;
    t->perf_source = n.perf_source;
    t->is_pmem = n.is_pmem;
    t->detail = "NUMA node " + std::to_string(n.os_index) + ": " + n.how;
    if (!local) {
      // The capacity role goes to the slowest-looking other node: a higher kernel memory tier,
      // then lower bandwidth, then no CPUs, then larger distance, then larger capacity.
      auto key = [](const NodeInfo &x) {
        return std::make_tuple(x.memory_tier, -x.read_bw_mbps, !x.has_cpus, x.distance, x.capacity);
      };
      if (!slow || key(n) > key(*slow)) slow = &n;
    }
    if (add_tier(std::move(t), &error) < 0) return fail(HM_EINIT, "%s", error.c_str());
  }
  g_roles[HM_FAST] = find_by_name("dram");
  if (slow) g_roles[HM_CAPACITY] = find_by_name("numa:" + std::to_string(slow->os_index));

  // HM_TIERS overrides the roles it names and adds the tiers it lists.
  const std::string &text = option_text(Option::kTiers);
  bool capacity_set = false;
  if (!text.empty()) {
    for (const std::string &item : prim::split(text, ',')) {
      if (item.empty()) continue;
      std::string role, spec_text = item;
      auto eq = item.find('=');
      if (eq != std::string::npos) {
        role = item.substr(0, eq);
        spec_text = item.substr(eq + 1);
      }
      int role_id = -1;
      for (int r = 0; r < HM_ROLE_COUNT; ++r)
        if (role == kRoleNames[r]) role_id = r;
      if (eq != std::string::npos && role.empty())
        return fail(HM_EFORMAT, "HM_TIERS='%s': '%s' has '=' with no role before it (roles: fast, capacity, persistent)",
                    text.c_str(), item.c_str());
      if (!role.empty() && role_id < 0)
        return fail(HM_EFORMAT, "HM_TIERS='%s': unknown role '%s' (roles: fast, capacity, persistent)",
                    text.c_str(), role.c_str());
      TierSpec spec;
      int rc = parse_tier_spec(spec_text, &spec, &error);
      if (rc != HM_OK) return fail(HM_EFORMAT, "HM_TIERS='%s': %s", text.c_str(), error.c_str());
      int id = tier_from_spec(spec, &error);
      if (id < 0) return fail(id == HM_EIO ? HM_EIO : HM_EFORMAT, "HM_TIERS='%s': %s", text.c_str(), error.c_str());
      if (role_id >= 0) g_roles[role_id] = id;
      if (role_id == HM_CAPACITY) capacity_set = true;
    }
  }
  // Machines without a slower node get the emulated Optane tier as capacity (DESIGN.md).
  if (g_roles[HM_CAPACITY] < 0 && !capacity_set) {
    TierSpec spec;
    parse_tier_spec("emul:optane", &spec, &error);
    int id = tier_from_spec(spec, &error);
    if (id < 0) return fail(HM_EINIT, "%s", error.c_str());
    g_roles[HM_CAPACITY] = id;
    g_tiers[id]->detail += " (default: this machine has no slower NUMA node)";
  }
  for (int r = 0; r < HM_ROLE_COUNT; ++r)
    if (g_roles[r] >= 0) g_tiers[g_roles[r]]->roles |= 1u << r;
  for (int i = 0; i < g_count; ++i)
    log(2, "tier %d %s: %s", i, g_tiers[i]->name.c_str(), g_tiers[i]->detail.c_str());
  return HM_OK;
}

void tiers_finalize() {
  for (int i = 0; i < g_count; ++i) {
    delete g_tiers[i];
    g_tiers[i] = nullptr;
  }
  g_count = 0;
  for (int &r : g_roles) r = -1;
}

int tier_count() { return g_count; }
Tier *tier_get(int id) { return id >= 0 && id < g_count ? g_tiers[id] : nullptr; }
int role_tier(hm_role_t role) { return role >= 0 && role < HM_ROLE_COUNT ? g_roles[role] : -1; }
const char *role_name(hm_role_t role) { return role >= 0 && role < HM_ROLE_COUNT ? kRoleNames[role] : "?"; }

std::string known_tier_names() {
  std::string s;
  for (int i = 0; i < g_count; ++i) s += (i ? ", " : "") + g_tiers[i]->name;
  for (int r = 0; r < HM_ROLE_COUNT; ++r)
    if (g_roles[r] >= 0) s += std::string(", ") + kRoleNames[r];
  return s;
}

int tier_find(const std::string &name, int *id) {
  for (int r = 0; r < HM_ROLE_COUNT; ++r)
    if (name == kRoleNames[r]) {
      if (g_roles[r] < 0)
        return fail(HM_ENOTIER, "no tier has the role '%s' (set it with HM_TIERS=%s=...; known tiers: %s)",
                    name.c_str(), name.c_str(), known_tier_names().c_str());
      *id = g_roles[r];
      return HM_OK;
    }
  std::string canonical = name, error;
  TierSpec spec;
  if (parse_tier_spec(name, &spec, &error) == HM_OK) {
    canonical = spec.canonical;
    if (spec.kind == HM_KIND_NUMA && spec.node == g_local_node) canonical = "dram";
  }
  int found = find_by_name(canonical);
  if (found < 0)
    return fail(HM_ENOTIER, "unknown tier '%s' (known: %s)", name.c_str(), known_tier_names().c_str());
  *id = found;
  return HM_OK;
}

void tier_describe(const Tier &t, hm_tier_info_t *info) {
  *info = hm_tier_info_t{};
  std::snprintf(info->name, sizeof info->name, "%s", t.name.c_str());
  info->kind = t.kind;
  info->numa_node = t.backing->is_file() ? -1 : t.node;
  info->roles = t.roles;
  info->capacity = t.backing->capacity();
  info->is_persistent_memory = t.is_pmem;
  if (t.backing->is_file()) {
    auto *fb = static_cast<const FileBacking *>(t.backing.get());
    info->map_sync = fb->map_sync();
    info->is_persistent_memory = fb->map_sync();
  }
  std::snprintf(info->detail, sizeof info->detail, "%s", t.detail.c_str());
  info->read_bw_mbps = t.read_bw_mbps;
  info->write_bw_mbps = t.write_bw_mbps;
  info->latency_ns = t.latency_ns;
  info->perf_source = t.perf_source;
  bool local_memory = t.kind == HM_KIND_DRAM || (t.emulated() && !t.backing->is_file());
  if (info->perf_source == HM_PERF_NONE && (local_memory || t.emulated())) {
    const hm_calibration_t &cal = calibration();
    info->read_bw_mbps = calibration_bw(cal.read_bw_mbps, cal.threads, cal.threads);
    info->write_bw_mbps = calibration_bw(cal.write_bw_mbps, cal.threads, cal.threads);
    info->latency_ns = cal.latency_ns;
    info->perf_source = HM_PERF_MEASURED;
  }
  if (t.emulated()) {
    info->read_bw_mbps *= t.profile->read_bw;
    info->write_bw_mbps *= t.profile->write_bw;
    info->latency_ns *= t.profile->random_latency;
    info->perf_source = HM_PERF_EMULATED;
  }
}

}  // namespace hm
