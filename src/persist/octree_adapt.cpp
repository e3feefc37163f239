// PM-octree adaptation: refine, coarsen (keeping 2:1 balance when asked), setting a leaf's value
// and 2:1 balance itself, each copy-on-write into the working version.
#include "persist/octree.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "base/error.h"
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


template class Octree<2>;
template class Octree<3>;

}  // namespace hm::persist
