// Where a rank runs on its node (Ren et al. (ICS'21) §5): the ranks of a node share its NUMA domains and its
// fast tier. Done before hm_init, so that hetmem discovers the tiers from the rank's domain.
#pragma once

#include <string>

#include "domain.hpp"

namespace pic {

struct NodeShare {
  int local_rank = 0, on_node = 1;  // this rank among the ranks of its node
  std::string binding;              // what was bound, for the start-up report ("" with one rank)
  std::string budget;               // the fast budget's split ("" when unchanged)
};

// Binds this rank and its memory to one NUMA domain with CPUs (hwloc): the node's ranks spread in
// blocks over its domains. A binding the launcher already made inside one domain is kept (only
// memory follows it). With one domain nothing changes. Collective over comm; nothing for one
// process.
NodeShare share_node(const Comm &comm);

// After hm_init: HM_FAST_BUDGET, when set, is taken as the node's and split evenly between its
// ranks (hm_tier_set_budget on the fast tier); share->budget says how. HM_OK or hetmem's code.
int split_fast_budget(NodeShare *share);

}  // namespace pic
