// A persistent multi-version octree (Dim = 3) or quadtree (Dim = 2) in a persistent pool (seed 003,
// first part). The committed version V(i-1) is never written: changing an octant of it copies the
// octant, and its ancestors up to a new root (copy-on-write), into the working version V(i);
// octants the working version allocated itself are changed in place. Unchanged subtrees are
// shared between versions. `persist()` commits V(i) with the pool's flush/fence protocol;
// `restore()` (opening the pool) returns exactly the last committed version.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "persist/pool.h"

namespace hm::persist {

// The dimension (2 or 3) of the tree in a snapshot file. HM_EIO (unreadable), HM_EFORMAT.
int snapshot_dimension(const std::string &path, int *dim);

template <int Dim>
class Octree {
 public:
  static constexpr int kChildren = 1 << Dim;
  static constexpr int kMaxLevel = 20;

  struct Node {
    uint32_t coord[3];           // integer coordinates of the lower corner, in units of 2^-kMaxLevel
    uint32_t level;              // 0: the whole domain
    uint64_t child[kChildren];   // pool offsets; all 0 for a leaf
    double value;                // the application's data for a leaf
  };
  struct Leaf {
    uint32_t coord[3];
    uint32_t level;
    double value;
  };

  // A new tree (one root leaf) in a new pool, committed as version 1.
  static int create(const std::string &path, uint64_t bytes, std::unique_ptr<Octree> *out);
  // The last committed version of an existing pool (pm_restore).
  static int restore(const std::string &path, std::unique_ptr<Octree> *out);

  // Splits every leaf for which refine(leaf) is true (one level); children inherit the value.
  int refine(const std::function<bool(const Leaf &)> &refine);
  // Merges every family of leaves for which coarsen(family) is true into their parent.
  int coarsen(const std::function<bool(const Leaf *family)> &coarsen);
  // Sets the value of the leaf containing the point (coordinates in [0, 1)).
  int set_value(const double *point, double value);
  // Commits the working version (pm_persistent).
  int persist();

  // Snapshot files (the baseline that PM-octree replaces): the leaves in Morton order with the
  // tree's checksum, written to a temporary file, synced and renamed into place.
  int save_snapshot(const std::string &path) const;
  // A new pool at `pool_path` holding the snapshot's tree, persisted as its version 2. HM_EFORMAT
  // for a file that is not a snapshot of this dimension or whose leaves do not match its checksum
  // (the pool is then removed); HM_EIO when it cannot be read.
  static int load_snapshot(const std::string &path, const std::string &pool_path, uint64_t bytes,
                           std::unique_ptr<Octree> *out);

  void leaves(const std::function<void(const Leaf &)> &visit) const;
  size_t leaf_count() const;
  // The leaf containing a point in [0, 1)^Dim.
  bool find(const double *point, Leaf *out) const;
  // The leaves that touch `leaf` across a face, an edge or a corner (the leaf itself excluded);
  // the domain is not periodic.
  void neighbours(const Leaf &leaf, const std::function<void(const Leaf &)> &visit) const;
  // 2:1 balance across faces, edges and corners: refines until no two touching leaves differ by
  // more than one level. Only refines, so a balanced tree is left unchanged.
  int balance();
  // A checksum of the leaves (coordinates, levels, values) in Morton order: equal for equal trees
  // whatever the layout in the pool.
  uint64_t checksum() const;
  // Leaves sorted, non-overlapping and covering the domain exactly; children aligned to levels.
  bool valid(std::string *why) const;

  uint64_t version() const { return pool_->sequence(); }
  Pool &pool() { return *pool_; }

 private:
  explicit Octree(std::unique_ptr<Pool> pool) : pool_(std::move(pool)) {}
  // The pool's content tag: "octree2" for a quadtree, "octree3" for an octree.
  static const char *content_name() { return Dim == 2 ? "octree2" : "octree3"; }
  Node *node(uint64_t off) const { return pool_->at<Node>(off); }
  bool committed(uint64_t off) const { return off < pool_->committed_top(); }
  int writable(uint64_t off, uint64_t *out);       // a copy in V(i) if off belongs to V(i-1)
  int new_node(uint64_t *off);
  // Rebuilds the path of changed subtrees below `off`; returns the (possibly new) offset.
  int refine_below(uint64_t off, const std::function<bool(const Leaf &)> &refine, bool *changed, uint64_t *out);
  int coarsen_below(uint64_t off, const std::function<bool(const Leaf *)> &coarsen, bool *changed, uint64_t *out);
  void leaves_below(uint64_t off, const std::function<void(const Leaf &)> &visit) const;
  void touching_below(uint64_t off, const uint32_t *lo, const uint32_t *hi,
                      const std::function<void(const Leaf &)> &visit) const;
  template <class Below>
  int through_children(uint64_t off, bool *changed, uint64_t *out, const Below &below);

  std::unique_ptr<Pool> pool_;
  uint64_t root_ = 0;  // the working version's root
};

}  // namespace hm::persist
