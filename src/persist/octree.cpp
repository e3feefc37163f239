// PM-octree: opening, the adaptation operations and the queries. The tiers (C0, merging,
// transformation, garbage collection, replicas) are in octree_tiers.cpp; snapshot files in
// octree_snapshot.cpp.
#include "persist/octree.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "base/options.h"
#include "hetmem/hetmem.h"
#include "prim/prim.h"

namespace hm::persist {
namespace {

constexpr uint64_t round_up(uint64_t n, uint64_t unit) { return (n + unit - 1) / unit * unit; }

// Invariant checks after every operation and recovery: on in debug builds and with HM_PM_CHECK=1.
bool checks_on() {
#ifndef NDEBUG
  return true;
#else
  static const bool on = [] {
    long value = 0;
    return option_int(Option::kPmCheck, &value) == HM_OK && value != 0;
  }();
  return on;
#endif
}

}  // namespace

template <int Dim>
Octree<Dim>::Octree(std::unique_ptr<Pool> pool, const OctreeOptions &options)
    : pool_(std::move(pool)),
      options_(options),
      slots_(*pool_, round_up(std::max(sizeof(Family), sizeof(Top)), kUnit)) {
  set_hot({Leaf{{0, 0, 0}, 0, 0}});  // until the first transformation, all of the tree
}

template <int Dim>
Octree<Dim>::~Octree() {
  if (fast_) hm_free(fast_);
}

// The fast-tier arena for C0 and the replica, whatever the tree was opened by.
template <int Dim>
int Octree<Dim>::setup() {
  fast_cap_ = options_.fast_bytes / sizeof(Family);
  if (options_.fast_bytes > 0 && fast_cap_ < 4 * (kMaxLevel + 2))
    return fail(HM_EINVAL, "PM-octree: a fast-tier budget of %llu bytes holds %llu families; give 0 (no C0) or at least %zu bytes",
                static_cast<unsigned long long>(options_.fast_bytes), static_cast<unsigned long long>(fast_cap_),
                4 * (kMaxLevel + 2) * sizeof(Family));
  if (!(options_.fast_threshold > 0 && options_.fast_threshold <= 1))
    return fail(HM_EINVAL, "PM-octree: fast_threshold %g is outside (0, 1]", options_.fast_threshold);
  if (!(options_.gc_threshold >= 0 && options_.gc_threshold < 1))
    return fail(HM_EINVAL, "PM-octree: gc_threshold %g is outside [0, 1)", options_.gc_threshold);
  if (!(options_.t_transform > 0)) return fail(HM_EINVAL, "PM-octree: t_transform %g must be positive", options_.t_transform);
  if (fast_cap_ > 0) {
    // Strict: C0 on the capacity tier would be C0 in name only (every "fast" write as slow as the
    // pool's), so a full fast tier is an error naming the budget rather than a silent fallback.
    fast_ = static_cast<Family *>(hm_alloc(HM_FAST, fast_cap_ * sizeof(Family), 64, HM_STRICT));
    if (!fast_)
      return fail(HM_EBUDGET, "PM-octree: no room for C0 (%s) on the fast tier: %s; lower fast_bytes (--fast-kib) "
                  "or raise HM_FAST_BUDGET",
                  format_size(fast_cap_ * sizeof(Family)).c_str(), hm_last_error());
    fast_home_.assign(fast_cap_, 0);
    fast_dirty_.assign(fast_cap_, 0);
    fast_hits_.assign(fast_cap_, 0);
    fast_live_.assign(fast_cap_, 0);
    fast_free_.clear();
    for (uint64_t i = fast_cap_; i-- > 0;) fast_free_.push_back(i);
  }
  if (!options_.replica.empty()) {
    std::unique_ptr<ReplicaSink> replica;
    int rc = ReplicaSink::open(options_.replica, *pool_, &replica);
    if (rc != HM_OK) return rc;
    replica_ = std::move(replica);
  }
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::create(const std::string &path, uint64_t bytes, std::unique_ptr<Octree> *out,
                        const OctreeOptions &options) {
  std::unique_ptr<Pool> pool;
  int rc = Pool::create(path, bytes, &pool, content_name());
  if (rc != HM_OK) return rc;
  std::unique_ptr<Octree> tree(new Octree(std::move(pool), options));
  if ((rc = tree->setup()) != HM_OK || (rc = tree->persist()) != HM_OK) {
    tree.reset();
    prim::remove_path(path);
    return rc;
  }
  *out = std::move(tree);
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::restore(const std::string &path, std::unique_ptr<Octree> *out, const OctreeOptions &options) {
  if (int rc = ReplicaSink::fetch_if_missing(options.replica, path); rc != HM_OK) return rc;
  std::unique_ptr<Pool> pool;
  int rc = Pool::open(path, &pool);
  if (rc != HM_OK) return rc;
  if (pool->content() != content_name())
    return fail(HM_EFORMAT, "persistent pool '%s' holds %s, not a %dD tree (%s)", path.c_str(),
                pool->content().empty() ? "no tree" : ("'" + pool->content() + "'").c_str(), Dim, content_name());
  const uint64_t top = pool->root();
  // Which version this is, and why it may not be the newest: said with every refusal.
  const uint64_t version = pool->sequence();
  const std::string which =
      pool->newest_slot_damaged()
          ? "the newest root slot is damaged, so the version before it (" + std::to_string(version) + ") was tried: "
          : "version " + std::to_string(version) + ": ";
  if (top == 0) {
    if (pool->damaged_slots())
      return fail(HM_EFORMAT, "persistent pool '%s': %s root slot(s) damaged and no intact version to restore",
                  path.c_str(), pool->damaged_slots() == 2 ? "both" : "a");
    return fail(HM_EFORMAT, "persistent pool '%s' holds no committed tree", path.c_str());
  }
  std::unique_ptr<Octree> tree(new Octree(std::move(pool), options));
  if (top < kHeaderBytes || (top - kHeaderBytes) % tree->slots_.slot_bytes() != 0 ||
      top + sizeof(Top) > tree->pool_->committed_top())
    return fail(HM_EFORMAT, "persistent pool '%s': %sits root offset is outside the data", path.c_str(), which.c_str());
  const Top *t = tree->pool_->template at<Top>(top);
  if (t->seal != seal_of(*t) || t->dim != Dim)
    return fail(HM_EFORMAT, "persistent pool '%s': %sits root object (offset %llu) fails its seal (%s)", path.c_str(),
                which.c_str(), static_cast<unsigned long long>(top),
                tree->pool_->newest_slot_damaged() ? "its space was reused since, or it is damaged" : "damaged");
  if (t->stamp > version)
    return fail(HM_EFORMAT, "persistent pool '%s': %sits root object's space was reused by version %llu since; "
                "no intact version is left", path.c_str(), which.c_str(), static_cast<unsigned long long>(t->stamp));
  tree->root_child_ = t->child;
  tree->root_value_ = t->value;
  tree->leaves_ = t->leaves;
  // Always: no traversal may follow a damaged offset or return a damaged value.
  std::string why;
  if (!tree->intact(&why))
    return fail(HM_EFORMAT, "persistent pool '%s': %s%s", path.c_str(), which.c_str(), why.c_str());
  if ((rc = tree->setup()) != HM_OK) return rc;
  if (checks_on() && !tree->valid(&why))
    return fail(HM_EFORMAT, "persistent pool '%s': the restored tree is not valid: %s", path.c_str(), why.c_str());
  if (tree->pool_->newest_slot_damaged())
    log(0, "persistent pool '%s': the newest root slot is damaged; restored the version before it (%llu), which is "
        "intact (the last persist's work is lost)", path.c_str(), static_cast<unsigned long long>(version));
  *out = std::move(tree);
  return HM_OK;
}

template <int Dim>
const typename Octree<Dim>::Family *Octree<Dim>::read(uint64_t ref) const {
  if (is_fast(ref)) return &fast_[ref & ~kFast];
  ++stats_.pool_reads;
  ++uncharged_;
  return pool_->template at<Family>(ref);
}

template <int Dim>
void Octree<Dim>::count_write(uint64_t ref) {
  if (is_fast(ref)) {
    ++stats_.fast_writes;
    return;
  }
  ++stats_.pool_writes;
  stats_.pool_write_bytes += sizeof(Family);
  ++uncharged_;
}

template <int Dim>
void Octree<Dim>::charge() const {
  if (!options_.emulate_nvbm || uncharged_ == 0) return;
  static const EmulProfile *nvbm = emul_profile("nvbm");
  stats_.emul_charged_ns += emul_charge(*nvbm, emul_state_, 0, 0, uncharged_, kEmulDeclared);
  uncharged_ = 0;
}

// A key for an octant of level <= 19 in the set of hot subtrees and their ancestors.
template <int Dim>
uint64_t Octree<Dim>::hot_key(const uint32_t *coord, uint32_t level) {
  // level in the top 5 bits, then the corner in units of the level's size (3 x 19 bits at most).
  uint64_t key = uint64_t{level} << 59;
  const int shift = kMaxLevel - static_cast<int>(level);
  for (int d = 0; d < Dim; ++d) key |= static_cast<uint64_t>(coord[d] >> shift) << (19 * d);
  return key;
}

template <int Dim>
void Octree<Dim>::set_hot(std::vector<Leaf> hot) {
  hot_ = std::move(hot);
  hot_keys_.clear();
  hot_level_ = 0;
  for (const Leaf &h : hot_) {
    hot_level_ = h.level;
    for (uint32_t l = 0; l <= h.level; ++l) {
      uint32_t c[3] = {0, 0, 0};
      const uint32_t mask = l == 0 ? 0 : ~((1u << (kMaxLevel - l)) - 1);
      for (int d = 0; d < Dim; ++d) c[d] = h.coord[d] & mask;
      hot_keys_.insert(hot_key(c, l));
    }
  }
}

// Where a family may live: C0 when the octant whose children it holds overlaps a hot subtree
// (inside one, or an ancestor of one), so that C0 is closed upwards.
template <int Dim>
bool Octree<Dim>::fast_eligible(const uint32_t *coord, uint32_t level) const {
  if (fast_cap_ == 0) return false;
  const uint32_t l = std::min(level, hot_level_);
  uint32_t c[3] = {0, 0, 0};
  const uint32_t mask = l == 0 ? 0 : ~((1u << (kMaxLevel - l)) - 1);
  for (int d = 0; d < Dim; ++d) c[d] = coord[d] & mask;
  return hot_keys_.count(hot_key(c, l)) != 0;
}

// Room in C0; a family that must join C0 because a child is there (`forced`) may use the reserve
// kept for such chains up to the root.
template <int Dim>
bool Octree<Dim>::fast_room(bool forced) const {
  if (fast_free_.empty()) return false;
  return forced || fast_free_.size() > static_cast<uint64_t>(kMaxLevel + 2);
}

template <int Dim>
int Octree<Dim>::fast_take(uint64_t *ref) {
  const uint64_t i = fast_free_.back();
  fast_free_.pop_back();
  fast_home_[i] = 0;
  fast_dirty_[i] = 1;
  fast_hits_[i] = 1;
  fast_live_[i] = 1;
  *ref = i | kFast;
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::new_family(const uint32_t *coord, uint32_t level, uint64_t *out) {
  int rc = HM_OK;
  if (fast_eligible(coord, level) && fast_room(false)) rc = fast_take(out);
  else rc = slots_.allocate(out);
  if (rc != HM_OK) return rc;
  Family *f = mut(*out);
  std::memset(static_cast<void *>(f), 0, sizeof(Family));
  for (int d = 0; d < Dim; ++d) f->coord[d] = coord[d];
  f->level = level + 1;
  if (!is_fast(*out)) f->stamp = pool_->sequence() + 1;  // a reused slot shows it at once
  count_write(*out);
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::writable(uint64_t ref, uint64_t *out) {
  if (is_fast(ref)) {
    const uint64_t i = ref & ~kFast;
    fast_dirty_[i] = 1;
    ++fast_hits_[i];
    count_write(ref);
    *out = ref;
    return HM_OK;
  }
  const Family *f = read(ref);
  const uint32_t parent_level = f->level - 1;
  if (fast_eligible(f->coord, parent_level) && fast_room(false)) {
    // Into C0, copy-on-write; the pool copy stays its home until the merge.
    uint64_t c = 0;
    fast_take(&c);
    std::memcpy(static_cast<void *>(mut(c)), f, sizeof(Family));
    fast_home_[c & ~kFast] = ref;
    count_write(c);
    *out = c;
    return HM_OK;
  }
  if (slots_.fresh(ref)) {
    count_write(ref);
    *out = ref;
    return HM_OK;
  }
  uint64_t copy = 0;
  int rc = slots_.allocate(&copy);
  if (rc != HM_OK) return rc;
  std::memcpy(static_cast<void *>(mut(copy)), f, sizeof(Family));
  mut(copy)->stamp = pool_->sequence() + 1;
  slots_.release(ref);  // a deletion mark: V(i-1) still has it
  count_write(copy);
  *out = copy;
  return HM_OK;
}

template <int Dim>
void Octree<Dim>::drop_family(uint64_t ref) {
  if (is_fast(ref)) {
    const uint64_t i = ref & ~kFast;
    if (fast_home_[i]) slots_.release(fast_home_[i]);
    fast_home_[i] = 0;
    fast_live_[i] = 0;
    fast_free_.push_back(i);
    return;
  }
  slots_.release(ref);
}

// Points family `ref` (made writable) at new children `kids`, with `edit` for the values. A C0
// child under a family that had to stay in the pool is merged out first, so C0 stays closed
// upwards.
template <int Dim>
template <class Edit>
int Octree<Dim>::relink(uint64_t ref, uint64_t *kids, uint64_t *out, const Edit &edit) {
  bool want_fast = false;
  for (int c = 0; c < kChildren; ++c) want_fast |= is_fast(kids[c]);
  uint64_t w = 0;
  int rc = HM_OK;
  if (want_fast && !is_fast(ref) && fast_room(true)) {
    // A child joined C0: so does its parent.
    const Family *f = read(ref);
    fast_take(&w);
    std::memcpy(static_cast<void *>(mut(w)), f, sizeof(Family));
    fast_home_[w & ~kFast] = ref;
    count_write(w);
  } else if ((rc = writable(ref, &w)) != HM_OK) {
    return rc;
  }
  if (!is_fast(w))
    for (int c = 0; c < kChildren; ++c)
      if (is_fast(kids[c])) {
        bool moved = false;
        uint64_t home = 0;
        if ((rc = merge_out(kids[c], &home, &moved)) != HM_OK) return rc;
        kids[c] = home;
      }
  Family *g = mut(w);
  for (int c = 0; c < kChildren; ++c) g->child[c] = kids[c];
  edit(g);
  *out = w;
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::refine_family(uint64_t ref, const std::function<bool(const Leaf &)> &fn, bool *changed, uint64_t *out) {
  const Family *f = read(ref);
  uint64_t kids[kChildren];
  bool any = false;
  for (int c = 0; c < kChildren; ++c) {
    kids[c] = f->child[c];
    if (kids[c] != 0) {
      bool ch = false;
      int rc = refine_family(kids[c], fn, &ch, &kids[c]);
      if (rc != HM_OK) return rc;
      any |= ch;
      continue;
    }
    Leaf leaf = child_leaf(f, c);
    if (leaf.level >= static_cast<uint32_t>(kMaxLevel) || !fn(leaf)) continue;
    int rc = new_family(leaf.coord, leaf.level, &kids[c]);
    if (rc != HM_OK) return rc;
    Family *g = mut(kids[c]);
    for (int k = 0; k < kChildren; ++k) g->value[k] = leaf.value;
    leaves_ += kChildren - 1;
    any = true;
  }
  *changed = any;
  *out = ref;
  if (!any) return HM_OK;
  return relink(ref, kids, out, [](Family *) {});
}

template <int Dim>
int Octree<Dim>::refine(const std::function<bool(const Leaf &)> &fn) {
  maybe_collect();
  int rc = HM_OK;
  if (root_child_ == 0) {
    Leaf root{{0, 0, 0}, 0, root_value_};
    if (fn(root)) {
      uint64_t f = 0;
      if ((rc = new_family(root.coord, 0, &f)) == HM_OK) {
        for (int k = 0; k < kChildren; ++k) mut(f)->value[k] = root_value_;
        root_child_ = f;
        leaves_ = kChildren;
      }
    }
  } else {
    bool changed = false;
    uint64_t root = root_child_;
    if ((rc = refine_family(root_child_, fn, &changed, &root)) == HM_OK) root_child_ = root;
  }
  return after_change(rc, "refine");
}

template <int Dim>
int Octree<Dim>::coarsen_family(uint64_t ref, const std::function<bool(const Leaf *)> &fn, bool keep_balance,
                                bool *changed, uint64_t *out) {
  const Family *f = read(ref);
  uint64_t kids[kChildren];
  double values[kChildren];
  bool any = false;
  for (int c = 0; c < kChildren; ++c) {
    kids[c] = f->child[c];
    values[c] = f->value[c];
    if (kids[c] == 0) continue;
    const Family *g = read(kids[c]);
    bool family = true;
    for (int k = 0; k < kChildren; ++k) family &= g->child[k] == 0;
    if (!family) {
      bool ch = false;
      int rc = coarsen_family(kids[c], fn, keep_balance, &ch, &kids[c]);
      if (rc != HM_OK) return rc;
      any |= ch;
      continue;
    }
    Leaf leaves[kChildren];
    double mean = 0;
    const uint32_t size = 1u << (kMaxLevel - g->level);
    for (int k = 0; k < kChildren; ++k) {
      leaves[k] = Leaf{{g->coord[0], g->coord[1], g->coord[2]}, g->level, g->value[k]};
      for (int d = 0; d < Dim; ++d) leaves[k].coord[d] += ((k >> d) & 1) ? size : 0;
      mean += g->value[k] / kChildren;
    }
    if (!fn(leaves)) continue;
    if (keep_balance) {
      Leaf parent = leaves[0];
      parent.level -= 1;
      if (finer_leaf_touches(parent)) continue;
    }
    drop_family(kids[c]);
    kids[c] = 0;
    values[c] = mean;
    leaves_ -= kChildren - 1;
    any = true;
  }
  *changed = any;
  *out = ref;
  if (!any) return HM_OK;
  return relink(ref, kids, out, [&](Family *g) { std::memcpy(g->value, values, sizeof values); });
}

template <int Dim>
int Octree<Dim>::coarsen(const std::function<bool(const Leaf *)> &fn, bool keep_balance) {
  maybe_collect();
  int rc = HM_OK;
  if (root_child_ != 0) {
    const Family *f = read(root_child_);
    bool family = true;
    for (int k = 0; k < kChildren; ++k) family &= f->child[k] == 0;
    if (family) {
      Leaf leaves[kChildren];
      double mean = 0;
      const uint32_t size = 1u << (kMaxLevel - 1);
      for (int k = 0; k < kChildren; ++k) {
        leaves[k] = Leaf{{0, 0, 0}, 1, f->value[k]};
        for (int d = 0; d < Dim; ++d) leaves[k].coord[d] = ((k >> d) & 1) ? size : 0;
        mean += f->value[k] / kChildren;
      }
      if (fn(leaves)) {  // level-1 leaves: nothing touching the root can be finer than 2:1 allows
        drop_family(root_child_);
        root_child_ = 0;
        root_value_ = mean;
        leaves_ = 1;
      }
    } else {
      bool changed = false;
      uint64_t root = root_child_;
      if ((rc = coarsen_family(root_child_, fn, keep_balance, &changed, &root)) == HM_OK) root_child_ = root;
    }
  }
  return after_change(rc, "coarsen");
}

// Descends to the leaf at (coord, level) (or, with level < 0, the leaf containing coord) and
// lets edit(kid, value) change its entry (the child reference, 0 for a leaf, and the value) in a
// writable copy of its family, then relinks the path up to the root copy-on-write. edit_root()
// is called instead when the root is that leaf. `*found` tells whether such a leaf exists.
template <int Dim>
template <class Edit, class EditRoot>
int Octree<Dim>::edit_leaf(const uint32_t *coord, int level, bool *found, const Edit &edit, const EditRoot &edit_root) {
  *found = false;
  if (root_child_ == 0) {
    if (level > 0) return HM_OK;
    *found = true;
    return edit_root();
  }
  std::array<std::pair<uint64_t, int>, kMaxLevel + 1> path;
  int depth = 0;
  uint64_t ref = root_child_;
  for (;;) {
    const Family *f = read(ref);
    const int c = child_index(f, coord);
    path[depth++] = {ref, c};
    if (f->child[c] == 0) {
      if (level >= 0 && f->level != static_cast<uint32_t>(level)) return HM_OK;
      break;
    }
    if (level >= 0 && f->level == static_cast<uint32_t>(level)) return HM_OK;  // not a leaf
    ref = f->child[c];
  }
  *found = true;
  // The leaf's family, then each ancestor pointing at its (possibly new) child.
  uint64_t kids[kChildren];
  double values[kChildren];
  auto [leaf_family, leaf_index] = path[depth - 1];
  std::memcpy(kids, read(leaf_family)->child, sizeof kids);
  std::memcpy(values, read(leaf_family)->value, sizeof values);
  int rc = edit(&kids[leaf_index], &values[leaf_index]);
  if (rc != HM_OK) return rc;
  rc = relink(leaf_family, kids, &ref, [&](Family *g) { std::memcpy(g->value, values, sizeof values); });
  if (rc != HM_OK) return rc;
  for (int i = depth - 2; i >= 0; --i) {
    auto [r, c] = path[i];
    if (read(r)->child[c] == ref) return HM_OK;  // changed in place: the path above is as it was
    std::memcpy(kids, read(r)->child, sizeof kids);
    kids[c] = ref;
    if ((rc = relink(r, kids, &ref, [](Family *) {})) != HM_OK) return rc;
  }
  root_child_ = ref;
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::set_value(const double *point, double value) {
  uint32_t at[3] = {0, 0, 0};
  for (int d = 0; d < Dim; ++d) {
    if (!(point[d] >= 0 && point[d] < 1)) return fail(HM_EINVAL, "set_value: the point lies outside [0, 1)");
    at[d] = static_cast<uint32_t>(point[d] * (1u << kMaxLevel));
  }
  maybe_collect();
  bool found = false;
  int rc = edit_leaf(
      at, -1, &found,
      [&](uint64_t *, double *v) -> int {
        *v = value;
        return HM_OK;
      },
      [&] {
        root_value_ = value;
        return HM_OK;
      });
  return after_change(rc, "set_value");
}

// Splits one leaf (if it is still one); its children are appended to `children`.
template <int Dim>
int Octree<Dim>::split_leaf(const Leaf &leaf, std::vector<Leaf> *children) {
  bool found = false;
  auto split = [&](uint64_t *kid, double value) -> int {
    int rc = new_family(leaf.coord, leaf.level, kid);
    if (rc != HM_OK) return rc;
    for (int k = 0; k < kChildren; ++k) mut(*kid)->value[k] = value;
    return HM_OK;
  };
  int rc = edit_leaf(
      leaf.coord, static_cast<int>(leaf.level), &found, [&](uint64_t *kid, double *v) { return split(kid, *v); },
      [&] { return split(&root_child_, root_value_); });
  if (rc != HM_OK || !found) return rc;
  leaves_ += kChildren - 1;
  const uint32_t half = 1u << (kMaxLevel - leaf.level - 1);
  for (int k = 0; k < kChildren; ++k) {
    Leaf child{{leaf.coord[0], leaf.coord[1], leaf.coord[2]}, leaf.level + 1, leaf.value};
    for (int d = 0; d < Dim; ++d) child.coord[d] += ((k >> d) & 1) ? half : 0;
    children->push_back(child);
  }
  return HM_OK;
}

// 2:1 balance holds when, for every family with a leaf among its children (level l), the octants
// of level l-1 around its parent all exist (as leaves or refined): every leaf that could touch
// those children lies in that neighbourhood. One pass over the tree (neighbours found from the
// nearest common ancestor on the path) lists the octants missing; splitting the leaves that
// cover them may leave new octants missing around the leaves split, which are checked in turn.
// Calls visit(corner) for each octant of `level` touching the octant at `corner`, inside the
// domain and outside the octant's parent (its siblings always exist: families are complete).
template <int Dim>
template <class Visit>
void Octree<Dim>::around(const uint32_t *corner, uint32_t level, const Visit &visit) {
  const uint32_t size = 1u << (kMaxLevel - level);
  const int parent_shift = kMaxLevel - static_cast<int>(level) + 1;
  int delta[3] = {-1, -1, Dim == 3 ? -1 : 0};
  for (;;) {
    bool inside = true, sibling = true;
    std::array<uint32_t, 3> q{0, 0, 0};
    for (int d = 0; d < Dim; ++d) {
      const int64_t x = static_cast<int64_t>(corner[d]) + static_cast<int64_t>(delta[d]) * size;
      inside &= x >= 0 && x < (int64_t{1} << kMaxLevel);
      q[d] = static_cast<uint32_t>(x);
      sibling &= (q[d] >> parent_shift) == (corner[d] >> parent_shift);
    }
    if (inside && !sibling) visit(q);
    int d = 0;
    for (; d < Dim && ++delta[d] > 1; ++d) delta[d] = -1;
    if (d == Dim) return;
  }
}

template <int Dim>
void Octree<Dim>::balance_requests(uint64_t ref, std::array<uint64_t, kMaxLevel + 2> &path,
                                   std::vector<std::pair<std::array<uint32_t, 3>, uint32_t>> &out) const {
  const Family *f = read(ref);
  path[f->level] = ref;
  bool leaf_child = false;
  for (int c = 0; c < kChildren; ++c) {
    if (f->child[c] == 0) leaf_child = true;
    else balance_requests(f->child[c], path, out);
  }
  if (!leaf_child || f->level < 2) return;
  const uint32_t level = f->level - 1;  // the parent octant's
  around(f->coord, level, [&](const std::array<uint32_t, 3> &q) {
    // The lowest family on the path whose box holds q, then down to level `level`.
    uint32_t k = level - 1;
    for (; k > 1; --k) {
      const Family *a = read(path[k]);
      const uint32_t box = 2u << (kMaxLevel - k);
      bool holds = true;
      for (int d = 0; d < Dim; ++d) holds &= q[d] >= a->coord[d] && q[d] < a->coord[d] + box;
      if (holds) break;
    }
    const Family *g = read(path[k]);
    for (;;) {
      const int c = child_index(g, q.data());
      if (g->level == level) break;  // the octant exists
      if (g->child[c] == 0) {
        out.emplace_back(q, level);  // a leaf coarser than `level` covers it
        break;
      }
      g = read(g->child[c]);
    }
  });
}

template <int Dim>
int Octree<Dim>::balance() {
  maybe_collect();
  std::vector<std::pair<std::array<uint32_t, 3>, uint32_t>> wanted, next;
  std::array<uint64_t, kMaxLevel + 2> path{};
  if (root_child_) balance_requests(root_child_, path, wanted);
  int rc = HM_OK;
  std::vector<Leaf> made;
  while (!wanted.empty() && rc == HM_OK) {
    next.clear();
    for (const auto &[q, level] : wanted) {
      // Split the leaf covering q until the octant of `level` exists; each leaf split needs its
      // own neighbourhood at its level.
      for (;;) {
        Leaf leaf{};
        leaf_at(q.data(), &leaf);
        if (leaf.level >= level) break;
        made.clear();
        if ((rc = split_leaf(leaf, &made)) != HM_OK) break;
        if (leaf.level < 1) continue;
        around(leaf.coord, leaf.level, [&](const std::array<uint32_t, 3> &p) {
          Leaf n{};
          leaf_at(p.data(), &n);
          if (n.level < leaf.level) next.emplace_back(p, leaf.level);
        });
      }
      if (rc != HM_OK) break;
    }
    wanted.swap(next);
  }
  return after_change(rc, "balance");
}

// The end of every changing operation: on failure the working version goes back to the last
// persisted one (nothing half-made stays); otherwise C0 is merged out if it is too full, the
// emulated device is charged, and debug builds check the invariants.
template <int Dim>
int Octree<Dim>::after_change(int rc, const char *op) {
  if (rc != HM_OK) {
    std::string why = hm_last_error();
    reset_to_committed();
    return fail(rc, "%s (the working version went back to version %llu)", why.c_str(),
                static_cast<unsigned long long>(version()));
  }
  rc = merge_out_if_full();
  charge();
  if (rc != HM_OK) return rc;
  if (checks_on()) {
    std::string why;
    if (!valid(&why)) {
      log(0, "PM-octree invariant broken after %s: %s", op, why.c_str());
      std::abort();
    }
    if (std::strcmp(op, "balance") == 0 && !balanced()) {
      log(0, "PM-octree not 2:1 balanced after balance");
      std::abort();
    }
  }
  return HM_OK;
}

template <int Dim>
void Octree<Dim>::leaves_below(uint64_t ref, const std::function<void(const Leaf &)> &visit) const {
  const Family *f = read(ref);
  for (int c = 0; c < kChildren; ++c) {
    if (f->child[c] != 0) {
      leaves_below(f->child[c], visit);
      continue;
    }
    Leaf leaf = child_leaf(f, c);
    visit(leaf);
  }
}

template <int Dim>
void Octree<Dim>::leaves(const std::function<void(const Leaf &)> &visit) const {
  if (root_child_ == 0) visit(Leaf{{0, 0, 0}, 0, root_value_});
  else leaves_below(root_child_, visit);
  charge();
}

// Leaves under family `ref` whose closed box meets the closed box [lo, hi].
template <int Dim>
void Octree<Dim>::touching_below(uint64_t ref, const uint32_t *lo, const uint32_t *hi,
                                 const std::function<void(const Leaf &)> &visit) const {
  const Family *f = read(ref);
  const uint32_t size = 1u << (kMaxLevel - f->level);
  for (int c = 0; c < kChildren; ++c) {
    Leaf leaf{{f->coord[0], f->coord[1], f->coord[2]}, f->level, f->value[c]};
    bool meets = true;
    for (int d = 0; d < Dim; ++d) {
      leaf.coord[d] += ((c >> d) & 1) ? size : 0;
      meets &= leaf.coord[d] <= hi[d] && leaf.coord[d] + size >= lo[d];
    }
    if (!meets) continue;
    if (f->child[c] != 0) touching_below(f->child[c], lo, hi, visit);
    else visit(leaf);
  }
}

template <int Dim>
void Octree<Dim>::neighbours(const Leaf &leaf, const std::function<void(const Leaf &)> &visit) const {
  if (root_child_ == 0) return;
  const uint32_t size = 1u << (kMaxLevel - leaf.level);
  uint32_t lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
  for (int d = 0; d < Dim; ++d) lo[d] = leaf.coord[d], hi[d] = leaf.coord[d] + size;
  touching_below(root_child_, lo, hi, [&](const Leaf &l) {
    bool self = l.level == leaf.level;
    for (int d = 0; d < Dim; ++d) self &= l.coord[d] == leaf.coord[d];
    if (!self) visit(l);
  });
}

// Whether a leaf more than one level finer than `octant` touches it (so merging the family
// below `octant` into it would break 2:1 balance). The tree may be half-way through a coarsen
// pass: every family reachable from the root is intact, either as it was or as changed.
template <int Dim>
bool Octree<Dim>::finer_leaf_touches(const Leaf &octant) const {
  const uint32_t size = 1u << (kMaxLevel - octant.level);
  uint32_t lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
  for (int d = 0; d < Dim; ++d) lo[d] = octant.coord[d], hi[d] = octant.coord[d] + size;
  bool finer = false;
  touching_below(root_child_, lo, hi, [&](const Leaf &l) {
    bool inside = true;
    for (int d = 0; d < Dim; ++d) inside &= l.coord[d] >= lo[d] && l.coord[d] < hi[d];
    finer |= !inside && l.level > octant.level + 1;
  });
  return finer;
}

template <int Dim>
bool Octree<Dim>::find(const double *point, Leaf *out) const {
  uint32_t at[3] = {0, 0, 0};
  for (int d = 0; d < Dim; ++d) {
    if (!(point[d] >= 0 && point[d] < 1)) return false;
    at[d] = static_cast<uint32_t>(point[d] * (1u << kMaxLevel));
  }
  leaf_at(at, out);
  return true;
}

template <int Dim>
void Octree<Dim>::leaf_at(const uint32_t *at, Leaf *out) const {
  if (root_child_ == 0) {
    *out = Leaf{{0, 0, 0}, 0, root_value_};
    return;
  }
  uint64_t ref = root_child_;
  for (;;) {
    const Family *f = read(ref);
    const uint32_t size = 1u << (kMaxLevel - f->level);
    const int c = child_index(f, at);
    if (f->child[c] != 0) {
      ref = f->child[c];
      continue;
    }
    *out = Leaf{{f->coord[0], f->coord[1], f->coord[2]}, f->level, f->value[c]};
    for (int d = 0; d < Dim; ++d) out->coord[d] += ((c >> d) & 1) ? size : 0;
    return;
  }
}

template <int Dim>
uint64_t Octree<Dim>::checksum() const {
  uint64_t h = 1469598103934665603ull;
  leaves([&](const Leaf &l) {
    unsigned char bytes[4 * Dim + 4 + 8];
    std::memcpy(bytes, l.coord, 4 * Dim);
    std::memcpy(bytes + 4 * Dim, &l.level, 4);
    std::memcpy(bytes + 4 * Dim + 4, &l.value, 8);
    for (unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
  });
  return h;
}

template <int Dim>
bool Octree<Dim>::intact(std::string *why) const {
  const uint64_t version = pool_->sequence(), data_end = pool_->committed_top(), slot = slots_.slot_bytes();
  struct Item {
    uint64_t ref;
    uint32_t coord[3];
    uint32_t level;  // the parent octant's level
  };
  std::vector<Item> stack;
  uint64_t covered = 0, counted = 0;
  auto say = [&](const std::string &what, uint64_t ref) {
    if (why) *why = what + " (family at offset " + std::to_string(ref) + ")";
    return false;
  };
  if (root_child_ == 0) {
    covered = uint64_t{1} << (Dim * kMaxLevel);
    counted = 1;
  } else {
    stack.push_back({root_child_, {0, 0, 0}, 0});
  }
  while (!stack.empty()) {
    const Item it = stack.back();
    stack.pop_back();
    if (is_fast(it.ref) || it.ref < kHeaderBytes || (it.ref - kHeaderBytes) % slot != 0 || it.ref + sizeof(Family) > data_end)
      return say("a child offset points outside the committed data", it.ref);
    const Family *f = pool_->template at<Family>(it.ref);
    const bool sealed = f->seal == seal_of(*f);
    // A newer stamp: the slot was taken by a later version (sealed) or by the work after the last
    // persist (not sealed yet, at most two versions on).
    if (f->stamp > version && (sealed || f->stamp <= version + 2))
      return say("its space was reused by version " + std::to_string(f->stamp) + (sealed ? "" : " (unfinished)") +
                     " since; this version is gone",
                 it.ref);
    if (!sealed) return say("a family fails its seal (damaged)", it.ref);
    if (f->level != it.level + 1 || f->level > static_cast<uint32_t>(kMaxLevel))
      return say("a family is not one level below its parent", it.ref);
    const uint32_t size = 1u << (kMaxLevel - f->level);
    for (int d = 0; d < Dim; ++d)
      if (f->coord[d] != it.coord[d] || f->coord[d] % (2 * size) != 0)
        return say("a family is not where its parent's index says", it.ref);
    for (int c = 0; c < kChildren; ++c) {
      if (f->child[c] == 0) {
        covered += uint64_t{1} << (Dim * (kMaxLevel - f->level));
        ++counted;
        continue;
      }
      Item kid{f->child[c], {f->coord[0], f->coord[1], f->coord[2]}, f->level};
      for (int d = 0; d < Dim; ++d) kid.coord[d] += ((c >> d) & 1) ? size : 0;
      stack.push_back(kid);
    }
  }
  if (covered != uint64_t{1} << (Dim * kMaxLevel)) {
    if (why) *why = "the leaves do not cover the domain exactly once";
    return false;
  }
  if (counted != leaves_) {
    if (why) *why = "the root object records " + std::to_string(leaves_) + " leaves, the tree has " + std::to_string(counted);
    return false;
  }
  return true;
}

template <int Dim>
bool Octree<Dim>::valid(std::string *why) const {
  // Offsets and levels are checked before they are followed, so a damaged pool is reported, not
  // read out of bounds; levels grow by one per step down, which bounds the recursion.
  bool ok = true;
  uint64_t covered = 0, counted = 0;
  auto bad = [&](const char *reason) {
    if (ok && why) *why = reason;
    ok = false;
  };
  auto in_range = [&](uint64_t ref) {
    if (is_fast(ref)) return (ref & ~kFast) < fast_cap_ && fast_live_[ref & ~kFast] != 0;
    return ref >= kHeaderBytes && (ref - kHeaderBytes) % slots_.slot_bytes() == 0 && ref + sizeof(Family) <= pool_->top();
  };
  std::function<void(uint64_t, const uint32_t *, uint32_t)> check = [&](uint64_t ref, const uint32_t *coord, uint32_t level) {
    if (!in_range(ref)) return bad("a child offset points outside the pool's data");
    const Family *f = read(ref);
    if (f->level != level + 1 || f->level > static_cast<uint32_t>(kMaxLevel)) return bad("a family is not one level below its parent");
    for (int d = 0; d < Dim; ++d)
      if (f->coord[d] != coord[d]) return bad("a family is not where its parent's index says");
    const uint32_t size = 1u << (kMaxLevel - f->level);
    for (int d = 0; d < Dim; ++d)
      if (f->coord[d] % (2 * size) != 0) return bad("an octant is not aligned to its level");
    for (int c = 0; c < kChildren; ++c) {
      uint32_t at[3] = {f->coord[0], f->coord[1], f->coord[2]};
      for (int d = 0; d < Dim; ++d) at[d] += ((c >> d) & 1) ? size : 0;
      if (f->child[c] != 0) {
        if (is_fast(f->child[c]) && !is_fast(ref)) return bad("a pool family points into C0 (C0 must be closed upwards)");
        check(f->child[c], at, f->level);
        if (!ok) return;
      } else {
        covered += uint64_t{1} << (Dim * (kMaxLevel - f->level));
        ++counted;
      }
    }
  };
  if (root_child_ == 0) {
    covered = uint64_t{1} << (Dim * kMaxLevel);
    counted = 1;
  } else {
    const uint32_t origin[3] = {0, 0, 0};
    check(root_child_, origin, 0);
  }
  if (ok && covered != uint64_t{1} << (Dim * kMaxLevel)) bad("the leaves do not cover the domain exactly once");
  if (ok && counted != leaves_) bad("the leaf count recorded differs from the leaves in the tree");
  return ok;
}

template <int Dim>
bool Octree<Dim>::balanced() const {
  bool ok = true;
  leaves([&](const Leaf &l) {
    if (!ok) return;
    neighbours(l, [&](const Leaf &n) { ok &= n.level + 1 >= l.level && l.level + 1 >= n.level; });
  });
  return ok;
}

template class Octree<2>;
template class Octree<3>;

}  // namespace hm::persist
