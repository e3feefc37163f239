// Tier discovery: hwloc memory attributes first, then the kernel's sysfs (HMAT access0 initiators,
// memory tiers), then NUMA distances and CPU-less nodes.
#include <hwloc.h>

#include <cstdlib>

#include "base/error.h"
#include "prim/prim.h"
#include "tier/tier.h"

namespace hm {
namespace {

constexpr double kMiBps = 1.048576;  // hwloc reports MiB/s; hetmem uses MB/s

// hwloc is loaded (RTLD_LOCAL) the first time a machine has something for it to tell apart, not
// linked: every process the preload library starts in would otherwise pay for loading it and
// libudev, though a machine with one node never calls it. The functions discovery uses, by name.
#define HM_HWLOC_FUNCTIONS(X)                                                                       \
  X(hwloc_topology_init) X(hwloc_topology_destroy) X(hwloc_topology_load) X(hwloc_topology_set_flags) \
  X(hwloc_topology_set_cache_types_filter) X(hwloc_topology_set_icache_types_filter)                 \
  X(hwloc_topology_set_io_types_filter) X(hwloc_topology_get_topology_cpuset) X(hwloc_get_cpubind)   \
  X(hwloc_bitmap_alloc) X(hwloc_bitmap_copy) X(hwloc_bitmap_free) X(hwloc_get_type_depth)           \
  X(hwloc_get_nbobjs_by_depth) X(hwloc_get_obj_by_depth) X(hwloc_memattr_get_value)

// hwloc's functions from the library this was compiled against (HM_HWLOC_SONAME), or nullptr
// when it cannot be loaded: discovery then goes on from the kernel's sysfs alone.
HM_LIBRARY_FUNCTIONS(Hwloc, hwloc, HM_HWLOC_SONAME, HM_HWLOC_FUNCTIONS)

// hwloc.h's inline helpers, over the loaded functions.
int numa_node_count(const Hwloc &h, hwloc_topology_t topo) {
  int depth = h.hwloc_get_type_depth(topo, HWLOC_OBJ_NUMANODE);
  if (depth == HWLOC_TYPE_DEPTH_UNKNOWN || depth == HWLOC_TYPE_DEPTH_MULTIPLE) return 0;
  return static_cast<int>(h.hwloc_get_nbobjs_by_depth(topo, depth));
}

hwloc_obj_t numa_node(const Hwloc &h, hwloc_topology_t topo, unsigned i) {
  return h.hwloc_get_obj_by_depth(topo, h.hwloc_get_type_depth(topo, HWLOC_OBJ_NUMANODE), i);
}

void from_hwloc(std::vector<NodeInfo> &nodes) {
  // What hwloc adds to the kernel's sysfs tells nodes apart (DAX and NVM subtypes, memory
  // attributes per initiator). With one node there is nothing to tell apart, and starting hwloc
  // (about 3 ms, most of it loading its I/O plugins) would be paid by every process that the
  // preload library starts in: a build or a shell script runs thousands.
  if (nodes.size() < 2) return;
  const Hwloc *loaded = hwloc();
  if (!loaded) {
    for (auto &node : nodes) node.how += "hwloc (" HM_HWLOC_SONAME ") could not be loaded; ";
    return;
  }
  const Hwloc &h = *loaded;
  hwloc_topology_t topo;
  if (h.hwloc_topology_init(&topo) != 0) return;
  // Only the NUMA nodes and their attributes are read: no caches or I/O objects, and no probing
  // that rebinds the process's threads while the program may be running.
  h.hwloc_topology_set_cache_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
  h.hwloc_topology_set_icache_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
  h.hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
  h.hwloc_topology_set_flags(topo, HWLOC_TOPOLOGY_FLAG_DONT_CHANGE_BINDING);
  if (h.hwloc_topology_load(topo) != 0) {
    h.hwloc_topology_destroy(topo);
    return;
  }
  hwloc_cpuset_t here = h.hwloc_bitmap_alloc();
  if (h.hwloc_get_cpubind(topo, here, HWLOC_CPUBIND_PROCESS) != 0)
    h.hwloc_bitmap_copy(here, h.hwloc_topology_get_topology_cpuset(topo));
  hwloc_location loc;
  loc.type = HWLOC_LOCATION_TYPE_CPUSET;
  loc.location.cpuset = here;
  int n = numa_node_count(h, topo);
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t obj = numa_node(h, topo, static_cast<unsigned>(i));
    for (auto &node : nodes) {
      if (node.os_index != static_cast<int>(obj->os_index)) continue;
      if (obj->subtype) node.subtype = obj->subtype;
      const char *dax = hwloc_obj_get_info_by_name(obj, "DAXType");
      if ((dax && std::string(dax) == "NVM") || node.subtype == "NVM" || node.subtype == "CXL-NVM")
        node.is_pmem = true;
      hwloc_uint64_t v = 0;
      bool any = false;
      if (h.hwloc_memattr_get_value(topo, HWLOC_MEMATTR_ID_READ_BANDWIDTH, obj, &loc, 0, &v) == 0 && v) {
        node.read_bw_mbps = static_cast<double>(v) * kMiBps;
        any = true;
      }
      if (h.hwloc_memattr_get_value(topo, HWLOC_MEMATTR_ID_WRITE_BANDWIDTH, obj, &loc, 0, &v) == 0 && v) {
        node.write_bw_mbps = static_cast<double>(v) * kMiBps;
        any = true;
      }
      if (!node.read_bw_mbps &&
          h.hwloc_memattr_get_value(topo, HWLOC_MEMATTR_ID_BANDWIDTH, obj, &loc, 0, &v) == 0 && v) {
        node.read_bw_mbps = node.write_bw_mbps = static_cast<double>(v) * kMiBps;
        any = true;
      }
      if (h.hwloc_memattr_get_value(topo, HWLOC_MEMATTR_ID_READ_LATENCY, obj, &loc, 0, &v) == 0 && v) {
        node.latency_ns = static_cast<double>(v);
        any = true;
      } else if (h.hwloc_memattr_get_value(topo, HWLOC_MEMATTR_ID_LATENCY, obj, &loc, 0, &v) == 0 && v) {
        node.latency_ns = static_cast<double>(v);
        any = true;
      }
      if (any) {
        node.perf_source = HM_PERF_HWLOC;
        node.how += "hwloc memattrs; ";
      }
      if (!node.subtype.empty()) node.how += "hwloc subtype " + node.subtype + "; ";
    }
  }
  h.hwloc_bitmap_free(here);
  h.hwloc_topology_destroy(topo);
}

double read_number(const std::string &path) {
  std::string s;
  if (!prim::read_text(path, &s)) return 0;
  return std::strtod(s.c_str(), nullptr);
}

void from_sysfs(std::vector<NodeInfo> &nodes) {
  for (auto &node : nodes) {
    std::string base = "/sys/devices/system/node/node" + std::to_string(node.os_index) + "/access0/initiators/";
    // One look for the directory where the firmware describes no node (most machines): each
    // missing file costs a path walk in sysfs, and every process the preload library starts pays it.
    if (node.perf_source == HM_PERF_NONE && prim::path_exists(base)) {
      double rb = read_number(base + "read_bandwidth"), wb = read_number(base + "write_bandwidth");
      double rl = read_number(base + "read_latency");
      if (rb > 0 || rl > 0) {
        node.read_bw_mbps = rb;
        node.write_bw_mbps = wb > 0 ? wb : rb;
        node.latency_ns = rl;
        node.perf_source = HM_PERF_SYSFS;
        node.how += "sysfs access0 initiators; ";
      }
    }
  }
  // The kernel's memory tiers rank nodes against each other: a single node has none to rank
  // against, and listing them costs every process about 40 us of sysfs reads.
  if (nodes.size() < 2) return;
  std::string tiers;
  if (!prim::list_dir("/sys/devices/virtual/memory_tiering", &tiers)) return;
  for (const std::string &name : prim::split(tiers, '\n')) {
    if (name.rfind("memory_tier", 0) != 0) continue;
    int rank = std::atoi(name.c_str() + 11);
    std::string list;
    if (!prim::read_text("/sys/devices/virtual/memory_tiering/" + name + "/nodelist", &list) &&
        !prim::read_text("/sys/devices/virtual/memory_tiering/" + name + "/nodes", &list))
      continue;
    for (int id : prim::parse_id_list(list))
      for (auto &node : nodes)
        if (node.os_index == id) {
          node.memory_tier = rank;
          node.how += "kernel " + name + "; ";
        }
  }
}

}  // namespace

std::vector<NodeInfo> discover_nodes(int *local_node) {
  std::vector<NodeInfo> nodes;
  int count = prim::numa_node_count();
  *local_node = prim::current_node();
  std::vector<int> ids = prim::online_nodes();
  if (ids.empty())
    for (int i = 0; i < count; ++i) ids.push_back(i);
  for (int id : ids) {
    NodeInfo n;
    n.os_index = id;
    n.has_cpus = ids.size() == 1 || prim::node_has_cpus(id);  // a single node holds every CPU
    uint64_t fr = 0;
    prim::node_size(id, &n.capacity, &fr);
    n.distance = prim::node_distance(*local_node, id);
    nodes.push_back(n);
  }
  from_hwloc(nodes);
  from_sysfs(nodes);
  for (auto &n : nodes) {
    n.how += "distance " + std::to_string(n.distance) + (n.has_cpus ? "" : ", no CPUs");
  }
  return nodes;
}

}  // namespace hm
