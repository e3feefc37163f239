#include "node.hpp"

#include <hetmem/hetmem.h>
#include <hwloc.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace pic {

namespace {

// The domain this rank takes: a launcher's binding inside one domain is kept; otherwise the
// rank's block of the node's domains with CPUs.
std::string bind(int local_rank, int on_node) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) return "no binding (hwloc cannot read the topology)";
  std::vector<hwloc_obj_t> domains;  // NUMA nodes with CPUs (memory-only ones are slow tiers)
  for (int i = 0; i < hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE); ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    if (!hwloc_bitmap_iszero(obj->cpuset)) domains.push_back(obj);
  }
  std::string done;
  hwloc_bitmap_t bound = hwloc_bitmap_alloc();
  if (domains.size() <= 1) {
    done = "one NUMA domain with CPUs: nothing to bind";
  } else {
    hwloc_get_cpubind(topo, bound, HWLOC_CPUBIND_PROCESS);
    hwloc_obj_t domain = nullptr;
    for (hwloc_obj_t d : domains)
      if (!hwloc_bitmap_iszero(bound) && hwloc_bitmap_isincluded(bound, d->cpuset)) domain = d;
    const bool kept = domain != nullptr;
    if (!domain) domain = domains[static_cast<size_t>(local_rank) * domains.size() / static_cast<size_t>(on_node)];
    bool ok = kept || hwloc_set_cpubind(topo, domain->cpuset, HWLOC_CPUBIND_PROCESS) == 0;
    ok = ok && hwloc_set_membind(topo, domain->nodeset, HWLOC_MEMBIND_BIND,
                                 HWLOC_MEMBIND_PROCESS | HWLOC_MEMBIND_BYNODESET) == 0;
    done = std::string(ok ? "" : "could not bind to ") + "NUMA domain " + std::to_string(domain->os_index) +
           (kept ? " (the launcher's binding)" : "");
  }
  hwloc_bitmap_free(bound);
  hwloc_topology_destroy(topo);
  return done;
}

}  // namespace

NodeShare share_node(const Comm &comm) {
  NodeShare share;
  if (!comm.parallel()) return share;
  MPI_Comm node;
  MPI_Comm_split_type(comm.handle(), MPI_COMM_TYPE_SHARED, comm.rank(), MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &share.local_rank);
  MPI_Comm_size(node, &share.on_node);
  MPI_Comm_free(&node);
  share.binding = bind(share.local_rank, share.on_node);
  return share;
}

int split_fast_budget(NodeShare *share) {
  if (share->on_node <= 1) return HM_OK;
  char v[64] = {};
  uint64_t bytes = 0;
  hm_tier_t fast = -1;
  // hm_init has read and checked it: the fast tier's budget is the node's until split here.
  if (hm_option_get("HM_FAST_BUDGET", v, sizeof v, nullptr, 0) != HM_OK || hm_size_parse(v, &bytes) != HM_OK ||
      bytes == 0 || hm_role_tier(HM_FAST, &fast) != HM_OK)
    return HM_OK;  // unlimited, or no fast tier
  const uint64_t each = bytes / static_cast<uint64_t>(share->on_node);
  int rc = hm_tier_set_budget(fast, each);
  if (rc != HM_OK) return rc;
  share->budget = std::string(v) + " for the node, " + std::to_string(each >> 20) + " MiB for each of its " +
                  std::to_string(share->on_node) + " ranks";
  return HM_OK;
}

}  // namespace pic
