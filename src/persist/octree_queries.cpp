// PM-octree queries (leaves, neighbours, point location, checksum) and the invariant checks
// (intact, valid, balanced) that debug builds and HM_PM_CHECK=1 run after every operation.
#include "persist/octree.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "base/error.h"
#include "base/two_threads.h"
#include "hetmem/hetmem.h"

namespace hm::persist {

template <int Dim>
int Octree<Dim>::leaves(const std::function<void(const Leaf &)> &visit) const {
  return each_leaf(visit);
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
  if (root_child_ == 0 || settle() != HM_OK) return;
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
// below `octant` into it would break 2:1 balance). `path` holds the families from the root down
// to the one `octant` is a child of; the search starts at the lowest of them whose box holds
// everything touching `octant`. The tree may be half-way through a coarsen pass: every family
// reachable from the root is intact, either as it was or as changed.
template <int Dim>
bool Octree<Dim>::finer_leaf_touches(const Leaf &octant, const std::vector<uint64_t> &path) const {
  if (root_child_ == 0) return false;
  const uint32_t size = 1u << (kMaxLevel - octant.level), end = 1u << kMaxLevel;
  uint32_t lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
  for (int d = 0; d < Dim; ++d) lo[d] = octant.coord[d], hi[d] = octant.coord[d] + size;
  uint64_t from = root_child_;
  for (size_t i = path.size(); i-- > 1;) {
    const Family *a = read(path[i]);
    const uint32_t box = 2u << (kMaxLevel - a->level);  // the family's parent octant
    bool holds = true;
    for (int d = 0; d < Dim; ++d)
      holds &= (lo[d] > a->coord[d] || lo[d] == 0) && (hi[d] < a->coord[d] + box || hi[d] == end);
    if (holds) {
      from = path[i];
      break;
    }
  }
  return internal_touches(from, lo, hi, octant.level + 1);
}

// Whether an internal octant at `level` or finer, outside the box [lo, hi], touches it. Such an
// octant's leaves on its side facing the box are finer than `level`; no finer internal octant
// can touch the box without an internal ancestor at `level` that does, so the search stops at
// `level` and at the first one found, and never enters the box itself.
template <int Dim>
bool Octree<Dim>::internal_touches(uint64_t ref, const uint32_t *lo, const uint32_t *hi, uint32_t level) const {
  const Family *f = read(ref);
  const uint32_t size = 1u << (kMaxLevel - f->level);
  for (int c = 0; c < kChildren; ++c) {
    if (f->child[c] == 0) continue;
    bool meets = true, inside = true;
    for (int d = 0; d < Dim; ++d) {
      const uint32_t at = f->coord[d] + (((c >> d) & 1) ? size : 0);
      meets &= at <= hi[d] && at + size >= lo[d];
      inside &= at >= lo[d] && at + size <= hi[d];
    }
    if (!meets || inside) continue;
    if (f->level >= level || internal_touches(f->child[c], lo, hi, level)) return true;
  }
  return false;
}

template <int Dim>
bool Octree<Dim>::find(const double *point, Leaf *out) const {
  if (settle() != HM_OK) return false;
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
  if (settle() != HM_OK) return 0;
  uint64_t h = 1469598103934665603ull;
  each_settled_leaf([&](const Leaf &l) {
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
  const uint64_t version = pool_->sequence(), data_end = pool_->committed_top();
  struct Item {
    uint64_t ref;
    uint32_t coord[3];
    uint32_t level;  // the parent octant's level
  };
  // One thread's share: the leaves it met, the families it checked, the first damage it found (a
  // cache line of its own: the two threads count leaves at every family).
  struct alignas(64) Walk : Tally {
    uint64_t families = 0;
  };
  std::atomic<bool> damaged{false};
  // The subtree under an item, checked depth first (check_below: a sound family costs one branch;
  // branching on each condition made restore at 10^7 octants a quarter slower, 0.050 against
  // 0.038 s); stops early when the other thread found damage.
  auto walk = [&](Walk &w, const Item &it) {
    auto next = [&](uint64_t) { return (++w.families & 4095) != 0 || !damaged.load(std::memory_order_relaxed); };
    auto no_leaf = [](const Leaf &) {};
    if (check_below(w, it.ref, it.coord, it.level, version, data_end, next, no_leaf)) return true;
    if (!w.why.empty()) damaged = true;
    return false;
  };
  Walk first, second;
  uint64_t covered = 0, counted = 0;
  bool ok = true;
  if (root_child_ == 0) {
    covered = uint64_t{1} << (Dim * kMaxLevel);
    counted = 1;
  } else if (options_.threads < 2) {
    ok = walk(first, Item{root_child_, {0, 0, 0}, 0});
  } else {
    // On two threads: the top of the tree level by level on this one until there are kShares
    // subtrees, then both threads take them one at a time (their sizes differ; taking them in
    // turn keeps the two busy to the end).
    constexpr size_t kShares = 256;
    std::vector<Item> shares{{root_child_, {0, 0, 0}, 0}}, below;
    while (ok && !shares.empty() && shares.size() < kShares) {
      below.clear();
      for (const Item &it : shares) {
        const Family *f = sound_family(it.ref, it.coord, it.level, version, data_end);
        if (!(ok = f != nullptr)) {
          first.why = family_problem(it.ref, it.coord, it.level, version, data_end);
          break;
        }
        // Its leaves counted here, its child families checked at the next level.
        const uint32_t size = 1u << (kMaxLevel - f->level);
        uint64_t leaves = 0;
        for (int c = 0; c < kChildren; ++c) {
          if (f->child[c] == 0) {
            ++leaves;
            continue;
          }
          Item kid{f->child[c], {f->coord[0], f->coord[1], f->coord[2]}, f->level};
          for (int d = 0; d < Dim; ++d) kid.coord[d] += ((c >> d) & 1) ? size : 0;
          below.push_back(kid);
        }
        first.counted += leaves;
        first.covered += leaves << (Dim * (kMaxLevel - f->level));
      }
      shares.swap(below);
    }
    std::atomic<size_t> next{0};
    auto take = [&](Walk &w) {
      for (size_t i; (i = next.fetch_add(1)) < shares.size() && !damaged.load(std::memory_order_relaxed);)
        if (!walk(w, shares[i])) return;
    };
    if (ok && !shares.empty()) {
      on_two_threads([&] { take(first); }, [&] { take(second); });
      ok = !damaged;
    }
  }
  if (!ok) {
    if (why) *why = first.why.empty() ? second.why : first.why;
    return false;
  }
  covered += first.covered + second.covered;
  counted += first.counted + second.counted;
  const std::string problem = tally_problem(covered, counted);
  if (why) *why = problem;
  return problem.empty();
}

template <int Dim>
std::string Octree<Dim>::family_problem(uint64_t ref, const uint32_t *at, uint32_t level, uint64_t version,
                                        uint64_t data_end) const {
  auto say = [&](const std::string &what) { return what + " (family at offset " + std::to_string(ref) + ")"; };
  if (is_fast(ref) || ref < kHeaderBytes || (ref - kHeaderBytes) % kSlotBytes != 0 || ref + sizeof(Family) > data_end)
    return say("a child offset points outside the committed data");
  const Family *f = pool_->template at<Family>(ref);
  const bool sealed = f->seal == seal_of(*f);
  // A newer stamp: the slot was taken by a later version (sealed) or by the work after the last
  // persist (not sealed yet, at most two versions on).
  if (f->stamp > version && (sealed || f->stamp <= version + 2))
    return say("its space was reused by version " + std::to_string(f->stamp) + (sealed ? "" : " (unfinished)") +
               " since; this version is gone");
  if (!sealed) return say("a family fails its seal (damaged)");
  if (f->level != level + 1 || f->level > static_cast<uint32_t>(kMaxLevel))
    return say("a family is not one level below its parent");
  for (int d = 0; d < Dim; ++d)
    if (f->coord[d] != at[d]) return say("a family is not where its parent's index says");
  return say("a family fails its check");  // not reached: sound_family() tests the same conditions
}

template <int Dim>
std::string Octree<Dim>::tally_problem(uint64_t covered, uint64_t counted) const {
  if (covered != uint64_t{1} << (Dim * kMaxLevel)) return "the leaves do not cover the domain exactly once";
  if (counted != leaves_)
    return "the root object records " + std::to_string(leaves_) + " leaves, the tree has " + std::to_string(counted);
  return "";
}

template <int Dim>
int Octree<Dim>::checked(const std::string &why) const {
  unchecked_ = false;
  if (why.empty()) return HM_OK;
  damage_ = check_context_ + why;
  return refuse_damaged();
}

template <int Dim>
int Octree<Dim>::refuse_damaged() const {
  return fail(HM_EFORMAT, "%s", damage_.c_str());
}

template <int Dim>
int Octree<Dim>::settle() const {
  if (unchecked_) {
    std::string why;
    intact(&why);
    return checked(why);
  }
  return damage_.empty() ? HM_OK : refuse_damaged();
}

template <int Dim>
bool Octree<Dim>::valid(std::string *why) const {
  if (settle() != HM_OK) {
    if (why) *why = damage_;
    return false;
  }
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
    return ref >= kHeaderBytes && (ref - kHeaderBytes) % kSlotBytes == 0 && ref + sizeof(Family) <= pool_->top();
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
  if (settle() != HM_OK) return false;
  bool ok = true;
  each_settled_leaf([&](const Leaf &l) {
    if (!ok) return;
    neighbours(l, [&](const Leaf &n) { ok &= n.level + 1 >= l.level && l.level + 1 >= n.level; });
  });
  return ok;
}


template class Octree<2>;
template class Octree<3>;

}  // namespace hm::persist
