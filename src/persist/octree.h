// PM-octree (Nguyen et al. (SC'17) §3): a persistent multi-version octree (Dim = 3) or quadtree (Dim = 2).
//
// Two versions are kept. V(i-1), the last persisted one, lies entirely in the pool (the
// persistent tier) and is never written. V(i), the working version, shares every unchanged
// subtree with it; changing an octant of V(i-1) copies its family, and the families above it up
// to a new root (copy-on-write); families V(i) allocated itself change in place. V(i)'s hot
// subtrees (C0) live on the fast tier within a budget, the rest (C1) in the pool. C0 is the top
// of the tree down to the hot subtrees, so its root is V(i)'s root. A persist merges C0 into C1
// (only what changed is written), commits with the pool's flush/fence protocol, turns the
// deletion marks of octants V(i) dropped into free space (the garbage collection before a new
// step), and then may transform the layout: feature-directed sampling finds the subtree the
// application will touch most, which then moves into C0 copy-on-write as it is written.
//
// A tree is used by one thread at a time (its counters and C0 bookkeeping are not shared-safe);
// the pool admits one process.
//
// Storage unit: a family, the 2^Dim children of one octant (like Gerris' oct), with each child's
// value and the offset of its own children (0 for a leaf). Pool offsets are relative to the
// pool's start, so a pool maps at any address; references to C0 carry a tag bit.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>
#include <boost/unordered/unordered_flat_set.hpp>

#include "persist/pool.h"
#include "persist/replica.h"
#include "persist/slot_space.h"
#include "tier/emul.h"

namespace hm::persist {

// The dimension (2 or 3) of the tree in a snapshot file. HM_EIO (unreadable), HM_EFORMAT.
int snapshot_dimension(const std::string &path, int *dim);

// How a tree uses the tiers (all optional).
struct OctreeOptions {
  uint64_t fast_bytes = 0;        // C0's budget on the fast tier; 0: every family in the pool
  double fast_threshold = 0.9;    // C0 fuller than this fraction of its budget: merge subtrees out
  double gc_threshold = 0.1;      // free pool space under this fraction: mark-and-sweep first
  bool transform = true;          // feature-directed transformation after each persist
  double t_transform = 1.5;       // Ratio_access needed to swap a C1 subtree into C0
  std::string replica;            // where each version's delta goes: a pool path or tcp://HOST:PORT
                                  // (a hetmem-replica server); "": none
  bool emulate_nvbm = false;      // charge pool accesses as the emulated `nvbm` device
  std::string note;               // kept in a new pool's header (a run's options); at most 1023 bytes
  bool census = false;            // count each step's writes per family (a hash-table update per
                                  // write): the transformation's hit rate and the most C0 could
                                  // have absorbed, in stats()
  int threads = 1;                // threads for 2:1 balance's ripple and restore's check (1 or 2;
                                  // more are used as 2)
  bool check_on_first_visit = true;  // restore: check the families as the first visit of every
                                     // leaf reads them (leaves, each_leaf), one pass over the pool;
                                     // false: before restore returns (two passes); see restore()
};

// What the tree did to the tiers since it was opened.
struct OctreeStats {
  uint64_t pool_writes = 0;        // family writes into the pool (persistent tier)
  uint64_t pool_write_bytes = 0;
  uint64_t pool_reads = 0;         // family reads from the pool
  uint64_t fast_writes = 0;        // family writes in C0
  uint64_t flushed_bytes = 0;      // bytes persists flushed (data and root slots)
  uint64_t merges = 0;             // C0 subtrees merged out because C0 was full
  uint64_t transforms = 0;         // hot subtrees swapped into C0
  uint64_t gc_runs = 0;            // mark-and-sweep collections
  uint64_t gc_freed = 0;           // slots they freed
  uint64_t replica_bytes = 0;      // bytes sent to the replica
  uint64_t fast_families = 0;      // C0 families now
  uint64_t fast_capacity = 0;      // C0 families the budget holds
  uint64_t pool_families = 0;      // pool slots in use (both versions)
  uint64_t emul_charged_ns = 0;    // delay charged by the nvbm emulation
  // With OctreeOptions::census, summed over the persisted steps (merges are not a step's writes):
  uint64_t step_writes = 0;        // family writes by the operations between persists (C0 and pool)
  uint64_t step_fast_writes = 0;   // those that went to C0
  uint64_t step_writes_bound = 0;  // the writes of each step's fast_capacity most-written families:
                                   // the most a C0 holding the same families through
                                   // a step could have taken
  uint64_t predicted = 0;          // sampled leaves the features selected (each names its family)
  uint64_t predicted_hit = 0;      // those whose family the next step then wrote
};

template <int Dim>
class Octree {
 public:
  static constexpr int kChildren = 1 << Dim;
  static constexpr int kMaxLevel = 20;

  struct Leaf {
    uint32_t coord[3];  // integer coordinates of the lower corner, in units of 2^-kMaxLevel
    uint32_t level;     // 0: the whole domain
    double value;       // the application's data
  };
  // A child's family as a family stores it, in 32 bits: a pool offset in units of kUnit bytes,
  // or a C0 index with the top bit set; 0 for a leaf. Read and assigned as the 64-bit reference
  // the tree works with (a pool offset, or kFast | a C0 index). Half the size of a 64-bit
  // reference, it makes a 3D family 128 bytes (two cache lines, one pool slot) instead of 160 in a
  // 192-byte slot: restore checks, and a new subtree writes, a third fewer bytes. The cost: a pool
  // holds at most kMaxPoolBytes.
  struct ChildRef {
    uint32_t word;
    operator uint64_t() const {
      return (word & kFastBit) ? kFastRef | (word & ~kFastBit) : uint64_t{word} * kUnit;
    }
    ChildRef &operator=(uint64_t ref) {
      word = (ref & kFastRef) ? kFastBit | static_cast<uint32_t>(ref) : static_cast<uint32_t>(ref / kUnit);
      return *this;
    }
    static constexpr uint32_t kFastBit = uint32_t{1} << 31;
    static constexpr uint64_t kFastRef = uint64_t{1} << 63;
  };
  // The largest pool (and C0 index) a 32-bit child reference can name.
  static constexpr uint64_t kMaxPoolBytes = uint64_t{ChildRef::kFastBit} * kUnit;
  // The children of one octant.
  struct Family {
    uint32_t coord[3];             // lower corner of the parent octant
    uint32_t level;                // the children's level
    ChildRef child[kChildren];     // each child's own family; 0 for a leaf
    double value[kChildren];
    // Pool families only, set when a persist commits them: the version that wrote the family
    // (a version older than some of its families has had its space reused) and seal_of() of
    // everything above, so that a damaged family is detected rather than followed or returned.
    uint64_t stamp;
    uint64_t seal;
  };
  // The root object a commit names.
  struct Top {
    uint64_t child;   // the root octant's family (0: the root is a leaf)
    double value;     // the root leaf's value
    uint64_t leaves;
    uint64_t dim;
    uint64_t stamp;   // as a family's
    uint64_t seal;
  };
  static_assert(sizeof(Family) % 8 == 0 && sizeof(Top) % 8 == 0);
  static_assert(Dim != 3 || sizeof(Family) == 2 * kUnit, "a 3D family is two cache lines");
  using Feature = std::function<bool(const Leaf &)>;

  ~Octree();
  // A new tree (one root leaf) in a new pool, committed as version 1.
  static int create(const std::string &path, uint64_t bytes, std::unique_ptr<Octree> *out,
                    const OctreeOptions &options = {});
  // The last committed version of an existing pool (pm_restore). With options.replica set and
  // the pool missing or unreadable, the replica is copied back first. Restore checks the header
  // and the root object; every committed family is checked (intact()) before any is followed or
  // returned. By default (options.check_on_first_visit) the first visit of every leaf checks them
  // as it reads them (one pass over the families instead of two), and any other first operation
  // checks them all first (settle()): damage is then refused by that operation and every later
  // one, with the HM_EFORMAT message a check before returning gives; a visit that meets it has
  // given only leaves of intact families, in order. With check_on_first_visit false, restore
  // checks every family before it returns and refuses damage itself.
  static int restore(const std::string &path, std::unique_ptr<Octree> *out, const OctreeOptions &options = {});

  // Splits every leaf for which refine(leaf) is true (one level); children inherit the value.
  // With `recursive`, the children made are offered to refine(leaf) in turn (as p4est's
  // recursive refinement): one pass builds the whole adapted tree.
  int refine(const std::function<bool(const Leaf &)> &refine, bool recursive = false);
  // Merges every family of leaves for which coarsen(family) is true into their parent, whose
  // value becomes the family's mean. With keep_balance, a family is merged only if no leaf
  // touching its parent is finer than the family (Gerris' rule), so a 2:1 balanced tree stays
  // balanced and balance() does not refine again what coarsening removed. With `recursive`, a
  // parent whose children were all merged is offered to coarsen() in the same pass (as p4est's
  // recursive coarsening), so one call coarsens by several levels. Predicates must not
  // call back into the tree.
  int coarsen(const std::function<bool(const Leaf *family)> &coarsen, bool keep_balance = false,
              bool recursive = false);
  // Sets the value of the leaf containing the point (coordinates in [0, 1)).
  int set_value(const double *point, double value);
  // 2:1 balance across faces, edges and corners: refines until no two touching leaves differ by
  // more than one level. Only refines, so a balanced tree is left unchanged. Its ripple runs on
  // options.threads (1 or 2) threads; the tree it makes is the same.
  int balance();
  // The threads balance() uses from now on (options.threads at creation or restore).
  void set_threads(int threads) { options_.threads = threads; }
  // Merges C0 into C1, commits the working version (pm_persistent), frees what V(i-1) alone
  // used, sends the delta to the replica, and transforms the layout.
  int persist();
  // A full mark-and-sweep of the pool (otherwise run when free space falls under the threshold).
  int collect();
  // The application's features for sampling (Nguyen et al. (SC'17) §3.3): true where it will work next.
  void set_features(Feature feature) { feature_ = std::move(feature); }

  // Snapshot files (the baseline that PM-octree replaces): the leaves in Morton order with the
  // tree's checksum, written to a temporary file, synced and renamed into place.
  int save_snapshot(const std::string &path) const;
  // A new pool at `pool_path` holding the snapshot's tree, persisted as its version 2. HM_EFORMAT
  // for a file that is not a snapshot of this dimension or whose leaves do not match its checksum
  // (the pool is then removed); HM_EIO when it cannot be read.
  static int load_snapshot(const std::string &path, const std::string &pool_path, uint64_t bytes,
                           std::unique_ptr<Octree> *out, const OctreeOptions &options = {});

  // The leaves in Morton order. HM_OK, or HM_EFORMAT for a damaged pool found by the check on the
  // first visit after a restore (the leaves before the damage were given).
  [[nodiscard]] int leaves(const std::function<void(const Leaf &)> &visit) const;
  // leaves() with any callable, inlined into the traversal (a first visit of every leaf after a
  // restart pays no indirect call per leaf).
  template <class Visit>
  [[nodiscard]] int each_leaf(Visit &&visit) const {
    if (unchecked_) return each_leaf_checking(visit);
    if (!damage_.empty()) return refuse_damaged();
    each_settled_leaf(visit);
    return HM_OK;
  }
  // After a restore that checks on the first visit, before anything has checked the families:
  // checks them all now. HM_OK, or HM_EFORMAT naming the damage (then every later operation is
  // refused with it). Every operation but a visit calls it first; the queries that return no code
  // (find, neighbours, checksum, valid, balanced) then find nothing in a damaged tree.
  int settle() const;
  // As the root object records it (checked with the families).
  size_t leaf_count() const { return leaves_; }
  // The leaf containing a point in [0, 1)^Dim.
  bool find(const double *point, Leaf *out) const;
  // The leaves that touch `leaf` across a face, an edge or a corner (the leaf itself excluded);
  // the domain is not periodic.
  void neighbours(const Leaf &leaf, const std::function<void(const Leaf &)> &visit) const;
  // A checksum of the leaves (coordinates, levels, values) in Morton order: equal for equal trees
  // whatever the layout in the pool and the fast tier (0 for a damaged tree, see settle()).
  uint64_t checksum() const;
  // Leaves sorted, non-overlapping and covering the domain exactly; children aligned to levels;
  // offsets inside the pool; the leaf count as recorded.
  bool valid(std::string *why) const;
  // What restore checks, always (one pass over the committed version's families): every offset
  // inside the committed data and aligned to a slot, every level one below its parent's, every
  // family's seal intact and its stamp no newer than the version, the leaves covering the domain
  // once and as many as recorded. False with what is wrong and where. On options.threads = 2 the
  // top levels are checked on this thread, then two threads check the subtrees below in turn.
  bool intact(std::string *why) const;
  // No two touching leaves differ by more than one level.
  bool balanced() const;

  uint64_t version() const { return pool_->sequence(); }
  Pool &pool() { return *pool_; }
  OctreeStats stats() const;
  // The hot subtrees C0 is for (octants as leaves: coordinates and level; the root octant until
  // the first persist).
  std::vector<Leaf> hot_subtrees() const { return hot_; }
  // The pool's content tag: "octree2" for a quadtree, "octree3" for an octree, then the family
  // layout: ".2": families carry stamps and seals (pools of the first format, without them, are
  // refused); ".3": children are 32-bit references (pools of ".2", with 64-bit ones, are refused
  // by name).
  static const char *content_name() { return Dim == 2 ? "octree2.3" : "octree3.3"; }

 private:
  static constexpr uint64_t kFast = ChildRef::kFastRef;
  // A slot holds a family or the root object. A constant, so that checking a reference's place
  // is a mask, not a division (restore checks every committed family's).
  static constexpr uint64_t kSlotBytes = round_up(std::max(sizeof(Family), sizeof(Top)), kUnit);
  Octree(std::unique_ptr<Pool> pool, const OctreeOptions &options);
  // A 64-bit sum of the object's words, each times its own odd constant: any change to a single
  // word (so any flipped byte or bit) changes it.
  template <class Object>
  static uint64_t seal_of(const Object &o) {
    constexpr size_t kWords = sizeof(Object) / 8 - 1;  // every word but the seal itself
    const auto *bytes = reinterpret_cast<const unsigned char *>(&o);
    uint64_t h[4] = {0x9E3779B97F4A7C15ull, 0, 0, 0};  // four sums: independent multiplies
    // Unrolled whole, the four sums stay in registers and the constants fold: restore seals
    // every committed family, and the rolled loop kept the sums on the stack.
#pragma GCC unroll 32
    for (size_t i = 0; i < kWords; ++i) {
      uint64_t w;
      std::memcpy(&w, bytes + 8 * i, 8);
      h[i % 4] += w * (0xD6E8FEB86659FD93ull + 2 * i * 0x9E3779B97F4A7C15ull);
    }
    return h[0] + h[1] + h[2] + h[3];
  }
  void seal_fresh(uint64_t top, uint64_t stamp);
  int setup();
  static bool is_fast(uint64_t ref) { return (ref & kFast) != 0; }
  // Whether every child of a family is a leaf.
  static bool leaves_only(const Family *f) {
    bool family = true;
    for (int c = 0; c < kChildren; ++c) family &= f->child[c] == 0;
    return family;
  }
  // Child c of a family as a leaf (its corner, level and value).
  static Leaf child_leaf(const Family *f, int c) {
    Leaf l{{f->coord[0], f->coord[1], f->coord[2]}, f->level, f->value[c]};
    const uint32_t size = 1u << (kMaxLevel - f->level);
    for (int d = 0; d < Dim; ++d) l.coord[d] += ((c >> d) & 1) ? size : 0;
    return l;
  }
  // A family of leaves as coarsening offers it (its children as leaves into `leaves`); returns the
  // mean of their values, the value of the leaf they merge into.
  static double family_leaves(const Family *f, Leaf *leaves) {
    double mean = 0;
    for (int k = 0; k < kChildren; ++k) {
      leaves[k] = child_leaf(f, k);
      mean += f->value[k] / kChildren;
    }
    return mean;
  }
  // The index of the child of a family that holds point `at`.
  static int child_index(const Family *f, const uint32_t *at) {
    const uint32_t size = 1u << (kMaxLevel - f->level);
    int c = 0;
    for (int d = 0; d < Dim; ++d)
      if (at[d] >= f->coord[d] + size) c |= 1 << d;
    return c;
  }
  const Family *read(uint64_t ref) const;
  // A family without counting or charging the read: for threads that share the tree read-only.
  const Family *family_at(uint64_t ref) const {
    return is_fast(ref) ? &fast_[ref & ~kFast] : pool_->template at<Family>(ref);
  }
  Family *mut(uint64_t ref) { return const_cast<Family *>(read(ref)); }
  // A reference to a family that may be written: C0 families and fresh pool families as they are,
  // a committed family copied (into C0 if it lies in a hot subtree and C0 has room).
  int writable(uint64_t ref, uint64_t *out);
  // A new family for the children of octant (coord, level).
  int new_family(const uint32_t *coord, uint32_t level, uint64_t *out);
  void drop_family(uint64_t ref);
  bool fast_eligible(const uint32_t *coord, uint32_t level) const;
  bool fast_room(bool forced) const;
  int fast_take(uint64_t *ref);
  // Writes C0 family `ref` (and its C0 descendants) into the pool; returns its pool offset.
  int merge(uint64_t ref, uint64_t *home, bool *moved);
  int merge_out(uint64_t ref, uint64_t *home, bool *moved);
  void free_fast_subtree(uint64_t ref);
  int merge_out_if_full();
  void transform();
  void drop_cold();
  void set_hot(std::vector<Leaf> hot);
  static uint64_t hot_key(const uint32_t *coord, uint32_t level);
  uint64_t families_below(uint64_t ref) const;
  uint32_t depth() const;
  double sample(const Leaf &subtree, uint64_t ref, std::mt19937_64 &rng) const;
  void count_write(uint64_t ref);
  void close_census();
  void device_access(uint64_t ref) const;
  void charge() const;
  int after_change(int rc, const char *op);
  int reset_to_committed();
  template <class Edit, class EditRoot>
  int edit_leaf(const uint32_t *coord, int level, bool *found, const Edit &edit, const EditRoot &edit_root);
  template <class Edit>
  int relink(uint64_t ref, uint64_t *kids, uint64_t *out, const Edit &edit);
  void maybe_collect();
  int refine_family(uint64_t ref, const std::function<bool(const Leaf &)> &fn, bool recursive, bool *changed,
                    uint64_t *out);
  int grow(const Leaf &leaf, const std::function<bool(const Leaf &)> &fn, uint64_t *out);
  static const std::function<bool(const Leaf &)> &one_level();
  int coarsen_family(uint64_t ref, const std::function<bool(const Leaf *)> &fn, bool keep_balance, bool recursive,
                     uint32_t only_level, std::vector<uint64_t> &path, bool *changed,
                     uint64_t *out);
  bool finer_leaf_touches(const Leaf &octant, const std::vector<uint64_t> &path) const;
  bool internal_touches(uint64_t ref, const uint32_t *lo, const uint32_t *hi, uint32_t level) const;
  void leaf_at(const uint32_t *at, Leaf *out) const;
  template <class Visit>
  void each_leaf_below(uint64_t ref, Visit &visit) const {
    const Family *f = read(ref);
    for (int c = 0; c < kChildren; ++c) {
      if (f->child[c] != 0) each_leaf_below(f->child[c], visit);
      else visit(child_leaf(f, c));
    }
  }
  // Committed family `ref`, the children of the octant at corner `at` one level below `level`,
  // with its place, stamp, seal, level and corner checked against the committed version and data
  // end: the family, or null when any is wrong (family_problem says which). Every condition is
  // folded into one flag, so a sound family costs one branch; the corner's alignment needs no
  // test (the root's is 0 and a child's follows from its parent's).
  const Family *sound_family(uint64_t ref, const uint32_t *at, uint32_t level, uint64_t version,
                             uint64_t data_end) const {
    bool bad = is_fast(ref) || ref < kHeaderBytes || (ref - kHeaderBytes) % kSlotBytes != 0 ||
               ref + sizeof(Family) > data_end;
    const Family *f = bad ? nullptr : pool_->template at<Family>(ref);
    if (!bad) {
      bad = (f->seal != seal_of(*f)) | (f->stamp > version) | (f->level != level + 1) |
            (f->level > static_cast<uint32_t>(kMaxLevel));
      for (int d = 0; d < Dim; ++d) bad |= f->coord[d] != at[d];
    }
    return bad ? nullptr : f;
  }
  // What sound_family() found wrong, and where (called when it refused the family).
  std::string family_problem(uint64_t ref, const uint32_t *at, uint32_t level, uint64_t version,
                             uint64_t data_end) const;
  // What is wrong with the leaves a check counted ("" when they cover the domain once and match
  // the root object's count).
  std::string tally_problem(uint64_t covered, uint64_t counted) const;
  // What a check counted: the leaves met, the share of the domain they cover (in units of the
  // finest octant), and the first damage found ("" for none).
  struct Tally {
    uint64_t covered = 0, counted = 0;
    std::string why;
  };
  // The committed subtree under family `ref` (the children of the octant at corner `at` one level
  // below `level`), checked depth first in child order (recursion: at most kMaxLevel deep): each
  // family with sound_family(), then next(ref) (false: stop here), then leaf(leaf) for each of its
  // leaves and the same for each child family. False at damage (t.why says what and where) or
  // when next() stopped it.
  template <class Next, class OnLeaf>
  bool check_below(Tally &t, uint64_t ref, const uint32_t *at, uint32_t level, uint64_t version,
                   uint64_t data_end, Next &next, OnLeaf &leaf) const {
    const Family *f = sound_family(ref, at, level, version, data_end);
    if (f == nullptr) {
      t.why = family_problem(ref, at, level, version, data_end);
      return false;
    }
    if (!next(ref)) return false;
    const uint32_t size = 1u << (kMaxLevel - f->level);
    uint64_t leaves = 0;
    for (int c = 0; c < kChildren; ++c) {
      if (f->child[c] == 0) {
        ++leaves;
        leaf(child_leaf(f, c));
        continue;
      }
      uint32_t kid[3] = {f->coord[0], f->coord[1], f->coord[2]};
      for (int d = 0; d < Dim; ++d) kid[d] += ((c >> d) & 1) ? size : 0;
      if (!check_below(t, f->child[c], kid, f->level, version, data_end, next, leaf)) return false;
    }
    t.counted += leaves;
    t.covered += leaves << (Dim * (kMaxLevel - f->level));
    return true;
  }
  // Every leaf in Morton order, once settle() has found the families intact.
  template <class Visit>
  void each_settled_leaf(Visit &&visit) const {
    if (root_child_ == 0) visit(Leaf{{0, 0, 0}, 0, root_value_});
    else each_leaf_below(root_child_, visit);
    charge();
  }
  // The first visit after a restore that checks on the first visit: each family checked as the
  // visit reaches it, before its leaves are given.
  template <class Visit>
  int each_leaf_checking(Visit &visit) const {
    Tally t;
    auto next = [&](uint64_t ref) {  // counted and charged as the visit's read()
      ++stats_.pool_reads;
      device_access(ref);
      return true;
    };
    const uint32_t origin[3] = {0, 0, 0};
    if (root_child_ == 0) {
      t.covered = uint64_t{1} << (Dim * kMaxLevel);
      t.counted = 1;
      if ((t.why = tally_problem(t.covered, t.counted)).empty()) visit(Leaf{{0, 0, 0}, 0, root_value_});
    } else if (check_below(t, root_child_, origin, 0, pool_->sequence(), pool_->committed_top(), next, visit)) {
      t.why = tally_problem(t.covered, t.counted);
    }
    charge();
    return checked(t.why);
  }
  // The end of a check (why: "" when the families are intact): HM_OK, or HM_EFORMAT with the
  // restore's message, kept for every later operation.
  int checked(const std::string &why) const;
  int refuse_damaged() const;
  void touching_below(uint64_t ref, const uint32_t *lo, const uint32_t *hi,
                      const std::function<void(const Leaf &)> &visit) const;
  void mark(uint64_t ref, std::vector<bool> &live) const;
  int sync_replica();
  int build(const void *records, size_t count, size_t *next, const uint32_t *coord, uint32_t level, uint64_t *kid,
            double *value);

  std::unique_ptr<Pool> pool_;
  OctreeOptions options_;
  SlotSpace slots_;
  // The working version's root (a C0 reference, a pool offset, or 0 for a root leaf).
  uint64_t root_child_ = 0;
  double root_value_ = 0;
  uint64_t leaves_ = 1;
  // C0 on the fast tier: families, each with its home in the pool (0: none yet), whether it
  // changed since it was merged, and how often it was written (to merge the least used out).
  Family *fast_ = nullptr;
  uint64_t fast_cap_ = 0;
  std::vector<uint64_t> fast_home_;
  std::vector<uint8_t> fast_dirty_;
  std::vector<uint32_t> fast_hits_;
  std::vector<uint8_t> fast_live_;
  std::vector<uint64_t> fast_free_;
  std::vector<Leaf> hot_;
  // The hot subtrees' roots and all their ancestors, keyed by level and corner (hot_key).
  std::unordered_set<uint64_t> hot_keys_;
  uint32_t hot_level_ = 0;
  bool merging_ = false;
  bool hot_chosen_ = false;
  Feature feature_;
  std::unique_ptr<ReplicaSink> replica_;
  mutable OctreeStats stats_;
  // With options_.census: this step's writes per family (keyed by its parent octant, hot_key),
  // and the families of the sampled leaves the features selected after the last persist.
  boost::unordered_flat_map<uint64_t, uint32_t> census_;
  mutable std::vector<uint64_t> predicted_;
  mutable uint64_t uncharged_ = 0;
  mutable EmulState emul_state_;
  // The nvbm emulation's model of the CPU cache in front of the device (device_access): the
  // family each entry holds, by a hash of its offset.
  static constexpr uint64_t kEmulCacheBytes = uint64_t{32} << 20;  // a 32 MiB last-level cache
  mutable std::vector<uint64_t> emul_cache_;
  // Restored to be checked on the first visit and not checked yet; the damage a check found ("": none),
  // and what its message starts with ("persistent pool 'P': version N: ").
  mutable bool unchecked_ = false;
  mutable std::string damage_;
  std::string check_context_;
};

}  // namespace hm::persist
