// PM-octree adaptation: refine, coarsen (keeping 2:1 balance when asked), setting a leaf's value
// and 2:1 balance itself, each copy-on-write into the working version.
#include "persist/octree.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>
#include <boost/unordered/unordered_flat_set.hpp>

#include "base/error.h"
#include "base/two_threads.h"
#include "hetmem/hetmem.h"

namespace hm::persist {

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

// grow()'s predicate for a split of one level: no child is split further.
template <int Dim>
const std::function<bool(const typename Octree<Dim>::Leaf &)> &Octree<Dim>::one_level() {
  static const std::function<bool(const Leaf &)> none = [](const Leaf &) { return false; };
  return none;
}

// Splits `leaf` (accepted by the predicate) into a new family and, recursively, every child the
// predicate accepts, each family written once: its children are decided before it is linked, so
// a fresh subtree needs no copy-on-write relinking on the way up (the recursive refinement's
// common case).
template <int Dim>
int Octree<Dim>::grow(const Leaf &leaf, const std::function<bool(const Leaf &)> &fn, uint64_t *out) {
  int rc = new_family(leaf.coord, leaf.level, out);
  if (rc != HM_OK) return rc;
  leaves_ += kChildren - 1;
  uint64_t kids[kChildren] = {};
  bool any = false, fast_kid = false;
  const uint32_t half = 1u << (kMaxLevel - leaf.level - 1);
  for (int c = 0; c < kChildren; ++c) {
    Leaf child{{leaf.coord[0], leaf.coord[1], leaf.coord[2]}, leaf.level + 1, leaf.value};
    for (int d = 0; d < Dim; ++d) child.coord[d] += ((c >> d) & 1) ? half : 0;
    if (child.level >= static_cast<uint32_t>(kMaxLevel) || !fn(child)) continue;
    if ((rc = grow(child, fn, &kids[c])) != HM_OK) return rc;
    any = true;
    fast_kid |= is_fast(kids[c]);
  }
  Family *g = mut(*out);
  for (int k = 0; k < kChildren; ++k) g->value[k] = leaf.value;
  if (!any) return HM_OK;
  // A child in C0 under a family in the pool: relink keeps C0 closed upwards.
  if (fast_kid && !is_fast(*out)) return relink(*out, kids, out, [](Family *) {});
  for (int c = 0; c < kChildren; ++c) g->child[c] = kids[c];
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::refine_family(uint64_t ref, const std::function<bool(const Leaf &)> &fn, bool recursive, bool *changed,
                               uint64_t *out) {
  const Family *f = read(ref);
  uint64_t kids[kChildren];
  bool any = false;
  for (int c = 0; c < kChildren; ++c) {
    kids[c] = f->child[c];
    if (kids[c] != 0) {
      bool ch = false;
      int rc = refine_family(kids[c], fn, recursive, &ch, &kids[c]);
      if (rc != HM_OK) return rc;
      any |= ch;
      continue;
    }
    Leaf leaf = child_leaf(f, c);
    if (leaf.level >= static_cast<uint32_t>(kMaxLevel) || !fn(leaf)) continue;
    any = true;
    if (int rc = grow(leaf, recursive ? fn : one_level(), &kids[c]); rc != HM_OK) return rc;
  }
  *changed = any;
  *out = ref;
  if (!any) return HM_OK;
  return relink(ref, kids, out, [](Family *) {});
}

template <int Dim>
int Octree<Dim>::refine(const std::function<bool(const Leaf &)> &fn, bool recursive) {
  if (int rc = settle(); rc != HM_OK) return rc;
  maybe_collect();
  int rc = HM_OK;
  if (root_child_ == 0) {
    const Leaf root{{0, 0, 0}, 0, root_value_};
    if (fn(root)) {
      uint64_t f = 0;
      leaves_ = 1;
      if ((rc = grow(root, recursive ? fn : one_level(), &f)) == HM_OK) root_child_ = f;
    }
  } else {
    bool changed = false;
    uint64_t root = root_child_;
    if ((rc = refine_family(root_child_, fn, recursive, &changed, &root)) == HM_OK) root_child_ = root;
  }
  return after_change(rc, "refine");
}

template <int Dim>
int Octree<Dim>::coarsen_family(uint64_t ref, const std::function<bool(const Leaf *)> &fn, bool keep_balance,
                                bool recursive, uint32_t only_level, std::vector<uint64_t> &path, bool *changed,
                                uint64_t *out) {
  const Family *f = read(ref);
  uint64_t kids[kChildren];
  double values[kChildren];
  bool any = false;
  path.push_back(ref);
  for (int c = 0; c < kChildren; ++c) kids[c] = f->child[c], values[c] = f->value[c];
  for (int c = 0; c < kChildren; ++c) {
    if (kids[c] == 0) continue;
    // only_level: the pass merges the families of leaves at that level only.
    const Family *g = read(kids[c]);
    const uint32_t kid_level = g->level;
    if (!leaves_only(g)) {
      bool ch = false;
      int rc = HM_OK;
      if (only_level == 0 || kid_level < only_level)
        rc = coarsen_family(kids[c], fn, keep_balance, recursive, only_level, path, &ch, &kids[c]);
      if (rc != HM_OK) return rc;
      any |= ch;
      // Recursive: a family whose children were all just merged is offered in the same pass.
      if (!recursive || !ch || !leaves_only(g = read(kids[c]))) continue;
    } else if (only_level != 0 && kid_level != only_level) {
      continue;
    }
    Leaf leaves[kChildren];
    const double mean = family_leaves(g, leaves);
    if (!fn(leaves)) continue;
    if (keep_balance) {
      Leaf parent = leaves[0];
      parent.level -= 1;
      if (finer_leaf_touches(parent, path)) continue;
    }
    drop_family(kids[c]);
    kids[c] = 0;
    values[c] = mean;
    leaves_ -= kChildren - 1;
    any = true;
  }
  path.pop_back();
  *changed = any;
  *out = ref;
  if (!any) return HM_OK;
  return relink(ref, kids, out, [&](Family *g) { std::memcpy(g->value, values, sizeof values); });
}

template <int Dim>
int Octree<Dim>::coarsen(const std::function<bool(const Leaf *)> &fn, bool keep_balance, bool recursive) {
  if (int rc = settle(); rc != HM_OK) return rc;
  maybe_collect();
  int rc = HM_OK;
  if (root_child_ == 0) return after_change(rc, "coarsen");
  bool changed = false;
  std::vector<uint64_t> path;  // the families from the root down to the one coarsen_family is in
  if (!leaves_only(read(root_child_))) {
    uint64_t root = root_child_;
    if (keep_balance && recursive) {
      // Finest level first: whether a family may merge depends only on finer octants, so once
      // every finer family has merged that could, one pass per level reaches the fixed point
      // (the recursive pass in Morton order would leave families kept by a finer neighbour
      // that merged after them).
      for (uint32_t level = depth(); level >= 2 && rc == HM_OK; --level) {
        bool ch = false;
        if ((rc = coarsen_family(root_child_, fn, true, false, level, path, &ch, &root)) == HM_OK) root_child_ = root;
        changed |= ch;
      }
    } else if ((rc = coarsen_family(root_child_, fn, keep_balance, recursive, 0, path, &changed, &root)) == HM_OK) {
      root_child_ = root;
    }
    if (rc != HM_OK || !recursive || !changed || !leaves_only(read(root_child_))) return after_change(rc, "coarsen");
  }
  Leaf leaves[kChildren];
  const double mean = family_leaves(read(root_child_), leaves);
  if (fn(leaves)) {  // level-1 leaves: nothing touching the root can be finer than 2:1 allows
    drop_family(root_child_);
    root_child_ = 0;
    root_value_ = mean;
    leaves_ = 1;
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
  std::copy(read(leaf_family)->child, read(leaf_family)->child + kChildren, kids);
  std::memcpy(values, read(leaf_family)->value, sizeof values);
  int rc = edit(&kids[leaf_index], &values[leaf_index]);
  if (rc != HM_OK) return rc;
  rc = relink(leaf_family, kids, &ref, [&](Family *g) { std::memcpy(g->value, values, sizeof values); });
  if (rc != HM_OK) return rc;
  for (int i = depth - 2; i >= 0; --i) {
    auto [r, c] = path[i];
    if (read(r)->child[c] == ref) return HM_OK;  // changed in place: the path above is as it was
    std::copy(read(r)->child, read(r)->child + kChildren, kids);
    kids[c] = ref;
    if ((rc = relink(r, kids, &ref, [](Family *) {})) != HM_OK) return rc;
  }
  root_child_ = ref;
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::set_value(const double *point, double value) {
  if (int rc = settle(); rc != HM_OK) return rc;
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

// 2:1 balance (faces, edges, corners) as a condition on internal octants: a leaf at level l
// touches the level l-1 octants around its parent P on its own side, so the tree is balanced when,
// for every internal octant O at level k >= 2, the neighbours of O's parent (level k-1) on O's
// side (up to 3^Dim - 1 of them, those O's children could touch) are internal too. The ripple
// runs from the finest level to the coarsest, as in p4est's balance (Isaac, Burstedde, Ghattas,
// IPDPS 2012): at level k, each octant with internal children asks for the neighbours on their
// sides; a neighbour not yet internal becomes so, with the ancestors it needs, which asks again
// at their (coarser) levels, so one sweep suffices. The tree is only read while the ripple runs;
// the leaves it splits are then split once each, their new subtrees built whole and linked in
// copy-on-write.
namespace {

constexpr int kKeyBits = 20;  // Octree::kMaxLevel: a corner's coordinates fit 20 bits each

inline uint64_t corner_key(const uint32_t *c) {
  return uint64_t{c[0]} | uint64_t{c[1]} << kKeyBits | uint64_t{c[2]} << (2 * kKeyBits);
}

// A corner key's Morton code (x, y, z bits interleaved, x lowest): the tree's own order.
inline uint64_t morton(uint64_t key) {
  uint64_t m = 0;
  for (int b = 0; b < kKeyBits; ++b)
    for (int d = 0; d < 3; ++d) m |= ((key >> (d * kKeyBits + b)) & 1) << (3 * b + d);
  return m;
}

}  // namespace

// The neighbour offsets (-1, 0, 1 per direction, as an index into the 3^Dim block) that a child
// at position c of an octant can touch: 0 or the side c lies on, in each direction.
template <int Dim>
static std::array<uint32_t, (1 << Dim)> side_offsets() {
  std::array<uint32_t, (1 << Dim)> table{};
  for (int c = 0; c < (1 << Dim); ++c)
    for (int o = 0; o < (Dim == 3 ? 27 : 9); ++o) {
      bool ok = true;
      int rest = o;
      for (int d = 0; d < Dim; ++d, rest /= 3) {
        const int delta = rest % 3 - 1, side = ((c >> d) & 1) ? 1 : -1;
        ok &= delta == 0 || delta == side;
      }
      if (ok && o != (Dim == 3 ? 13 : 4)) table[c] |= 1u << o;
    }
  return table;
}

template <int Dim>
int Octree<Dim>::balance() {
  if (int rc = settle(); rc != HM_OK) return rc;
  maybe_collect();
  if (root_child_ == 0) return after_change(HM_OK, "balance");  // one leaf
  using Want = std::pair<uint64_t, uint32_t>;  // an internal octant's corner key, its internal children (a mask)
  std::array<std::vector<Want>, kMaxLevel + 1> listed;              // from the tree, in Morton order
  std::array<boost::unordered_flat_map<uint64_t, uint32_t>, kMaxLevel + 1> asked;  // from the ripple
  std::array<boost::unordered_flat_set<uint64_t>, kMaxLevel + 1> made;    // octants the ripple made internal
  std::vector<Leaf> roots;                                         // the tree leaves it splits

  // The tree's internal octants at levels >= 1 with internal children.
  std::function<void(uint64_t)> gather = [&](uint64_t ref) {
    const Family *f = read(ref);
    uint32_t mask = 0;
    for (int c = 0; c < kChildren; ++c) mask |= f->child[c] ? 1u << c : 0;
    if (mask && f->level >= 2) listed[f->level - 1].emplace_back(corner_key(f->coord), mask);
    for (int c = 0; c < kChildren; ++c)
      if (f->child[c]) gather(f->child[c]);
  };
  gather(root_child_);

  // One worker of the ripple. Alone, it records straight into made/asked/roots. With two, each
  // serves half of a level's requests (in Morton order) into its own sets, reading what earlier
  // levels made, and the halves are merged before the next level: the same octants are made,
  // whatever the split. The tree is only read while the ripple runs (with two workers through
  // family_at, which touches no tree state; their reads are counted afterwards).
  struct Worker {
    // The families on the last query's path (path[t]: the one whose parent octant is at level t):
    // neighbours asked one after another are near each other, so a query climbs a little and
    // descends a little rather than starting at the root.
    std::array<uint64_t, kMaxLevel + 1> path{};
    int cached = 0;
    uint64_t reads = 0;
    std::array<boost::unordered_flat_set<uint64_t>, kMaxLevel + 1> own_made;
    std::array<boost::unordered_flat_map<uint64_t, uint32_t>, kMaxLevel + 1> own_asked;
    std::vector<Leaf> own_roots;
    bool shared = false;  // alone: into the tree-wide sets
  };
  auto contains = [](const Family *f, const uint32_t *q, int level) {
    const int shift = kMaxLevel - level;
    bool in = true;
    for (int d = 0; d < Dim; ++d) in &= (q[d] >> shift) == (f->coord[d] >> shift);
    return in;
  };
  // Two workers only where a level has enough requests to pay for a thread; never with the nvbm
  // emulation, whose charge follows each read in order.
  const bool two = options_.threads >= 2 && !options_.emulate_nvbm;
  auto look = [&](Worker &w, uint64_t ref) {
    if (!two) return read(ref);
    w.reads += is_fast(ref) ? 0 : 1;
    return family_at(ref);
  };
  // Makes the octant at corner q of level j internal if it is not: returns nothing, records what
  // it made and what that asks.
  auto ensure_internal = [&](Worker &w, const uint32_t *q, int j) {
    auto &path = w.path;
    int t = std::min(w.cached, j);
    while (t > 0 && !contains(look(w, path[t]), q, t)) --t;
    int leaf_level = -1;
    for (;;) {
      if (t == j) return;  // a family whose parent octant is the one asked: internal already
      const Family *f = look(w, path[t]);
      const uint64_t kid = f->child[child_index(f, q)];
      if (kid == 0) {
        leaf_level = t + 1;
        break;
      }
      path[++t] = kid;
      w.cached = t;
    }
    w.cached = t;
    uint32_t a[3] = {0, 0, 0};
    for (int level = j; level >= leaf_level; --level) {
      const uint32_t size = 1u << (kMaxLevel - level);
      for (int d = 0; d < Dim; ++d) a[d] = q[d] & ~(size - 1);
      const uint64_t key = corner_key(a);
      // Made earlier, with its ancestors.
      if (w.shared ? !made[level].insert(key).second
                   : made[level].contains(key) || !w.own_made[level].insert(key).second)
        return;
      if (level == leaf_level)
        (w.shared ? roots : w.own_roots).push_back(Leaf{{a[0], a[1], a[2]}, static_cast<uint32_t>(level), 0});
      // It is an internal child of its parent now: the parent asks for its neighbours on that side.
      if (level >= 2) {
        uint32_t p[3] = {0, 0, 0};
        int c = 0;
        for (int d = 0; d < Dim; ++d) {
          p[d] = a[d] & ~(2 * size - 1);
          c |= ((a[d] & size) ? 1 : 0) << d;
        }
        (w.shared ? asked : w.own_asked)[level - 1][corner_key(p)] |= 1u << c;
      }
    }
  };
  static const std::array<uint32_t, (1 << Dim)> sides = side_offsets<Dim>();
  constexpr int kOffsets = Dim == 3 ? 27 : 9;
  auto serve = [&](Worker &w, uint64_t key, uint32_t mask, int level) {
    uint32_t offsets = 0;
    for (int c = 0; c < kChildren; ++c)
      if (mask & (1u << c)) offsets |= sides[static_cast<size_t>(c)];
    const uint32_t corner[3] = {static_cast<uint32_t>(key & ((1u << kKeyBits) - 1)),
                                static_cast<uint32_t>((key >> kKeyBits) & ((1u << kKeyBits) - 1)),
                                static_cast<uint32_t>(key >> (2 * kKeyBits))};
    const int64_t size = int64_t{1} << (kMaxLevel - level), end = int64_t{1} << kMaxLevel;
    for (int o = 0; o < kOffsets; ++o) {
      if (!(offsets & (1u << o))) continue;
      uint32_t q[3] = {0, 0, 0};
      bool inside = true;
      for (int d = 0, rest = o; d < Dim; ++d, rest /= 3) {
        const int64_t x = corner[d] + (rest % 3 - 1) * size;
        inside &= x >= 0 && x < end;
        q[d] = static_cast<uint32_t>(x);
      }
      if (inside) ensure_internal(w, q, level);
    }
  };
  constexpr size_t kSplitAt = 4096;
  std::array<Worker, 2> workers;
  workers[0].shared = true;
  for (Worker &w : workers) w.path[0] = root_child_;
  std::vector<Want> order;  // a level's requests: the tree's, then the ripple's in Morton order
  std::vector<std::pair<uint64_t, Want>> ripple;
  for (int level = kMaxLevel; level >= 1; --level) {
    order.assign(listed[level].begin(), listed[level].end());
    ripple.clear();
    for (const auto &[key, mask] : asked[level]) ripple.push_back({morton(key), {key, mask}});
    std::sort(ripple.begin(), ripple.end(), [](const auto &x, const auto &y) { return x.first < y.first; });
    for (const auto &r : ripple) order.push_back(r.second);
    if (!two || order.size() < kSplitAt) {
      for (const auto &[key, mask] : order) serve(workers[0], key, mask, level);
      continue;
    }
    // Both halves read the tree-wide sets as they stand and record into their own; then merged.
    const size_t half = order.size() / 2;
    workers[0].shared = false;
    auto serve_range = [&](Worker &w, size_t from, size_t to) {
      for (size_t i = from; i < to; ++i) serve(w, order[i].first, order[i].second, level);
    };
    on_two_threads([&] { serve_range(workers[0], 0, half); }, [&] { serve_range(workers[1], half, order.size()); });
    workers[0].shared = true;
    for (Worker &w : workers) {
      for (const Leaf &leaf : w.own_roots)  // a leaf both halves split is split once
        if (!made[leaf.level].contains(corner_key(leaf.coord))) roots.push_back(leaf);
      w.own_roots.clear();
      for (int l = 0; l <= kMaxLevel; ++l) {
        made[l].insert(w.own_made[l].begin(), w.own_made[l].end());
        w.own_made[l].clear();
        for (const auto &[key, mask] : w.own_asked[l]) asked[l][key] |= mask;
        w.own_asked[l].clear();
      }
    }
  }
  stats_.pool_reads += workers[0].reads + workers[1].reads;

  // Split each tree leaf the ripple made internal, once, with the subtree below it built whole.
  const std::function<bool(const Leaf &)> made_internal = [&](const Leaf &octant) {
    return made[octant.level].contains(corner_key(octant.coord));
  };
  int rc = HM_OK;
  for (const Leaf &leaf : roots) {
    bool found = false;
    rc = edit_leaf(
        leaf.coord, static_cast<int>(leaf.level), &found,
        [&](uint64_t *kid, double *v) {
          return grow(Leaf{{leaf.coord[0], leaf.coord[1], leaf.coord[2]}, leaf.level, *v}, made_internal, kid);
        },
        [&] { return grow(Leaf{{0, 0, 0}, 0, root_value_}, made_internal, &root_child_); });
    if (rc != HM_OK) break;
  }
  return after_change(rc, "balance");
}

template class Octree<2>;
template class Octree<3>;

}  // namespace hm::persist
