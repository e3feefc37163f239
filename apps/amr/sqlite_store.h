// The Etree-like baseline of hetmem-amr (Nguyen et al. (SC'17) §5): an out-of-core linear octree, its leaves
// in a SQLite B-tree keyed by the Morton code of their lower corner. Each step's adaptation is
// stored as the leaves it removed, added and changed, in one durable transaction.
#pragma once
#include <hetmem/pm_octree.h>
#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <vector>

namespace amr {

struct StoredLeaf {
  uint64_t key;  // Morton code of the lower corner (x in the lowest bit)
  uint32_t level;
  double value;
};

// The tree's leaves in Morton order, keyed for the store, into *out. HM_OK, or pm_leaves' error.
int stored_leaves(const pm_octree_t *tree, std::vector<StoredLeaf> *out);

class SqliteStore {
 public:
  ~SqliteStore();
  // Creates (replacing) the database at `path`. false with the reason in error().
  bool create(const std::string &path);
  // Makes the store hold `leaves` (sorted by key): deletes, inserts and updates in one
  // transaction, synchronous. Returns the rows it changed, or -1.
  long apply(const std::vector<StoredLeaf> &leaves);
  // Reads every leaf back in key order (a restart of an out-of-core octree reads its index).
  bool read_all(std::vector<StoredLeaf> *out);
  const std::string &error() const { return error_; }

 private:
  bool exec(const char *sql);
  sqlite3 *db_ = nullptr;
  std::vector<StoredLeaf> held_;
  std::string error_;
};

}  // namespace amr
