// PM-octree across the tiers (Nguyen et al. (SC'17) §3.2-3.4): merging C0 into C1, the persist point,
// garbage collection, the feature-directed transformation and replicas.
#include <algorithm>
#include <cstring>
#include <functional>

#include "base/error.h"
#include "hetmem/hetmem.h"
#include "persist/octree.h"

namespace hm::persist {

// Writes C0 family `ref` and its C0 descendants into the pool, each where it belongs: over its
// home if the working version allocated that, else in a new slot (the committed home gets a
// deletion mark). Unchanged families whose children stayed put are not written at all.
template <int Dim>
int Octree<Dim>::merge(uint64_t ref, uint64_t *home, bool *moved) {
  const uint64_t i = ref & ~kFast;
  Family image;
  std::memcpy(static_cast<void *>(&image), &fast_[i], sizeof image);
  bool changed = fast_dirty_[i] || fast_home_[i] == 0;
  for (int c = 0; c < kChildren; ++c)
    if (is_fast(image.child[c])) {
      bool mv = false;
      uint64_t kid = 0;
      int rc = merge(image.child[c], &kid, &mv);
      if (rc != HM_OK) return rc;
      image.child[c] = kid;
      changed |= mv;
    }
  const uint64_t old = fast_home_[i];
  *home = old;
  *moved = false;
  if (!changed) return HM_OK;
  uint64_t dst = old;
  if (!old || !slots_.fresh(old)) {
    int rc = slots_.allocate(&dst);
    if (rc != HM_OK) return rc;
    if (old) slots_.release(old);
  }
  std::memcpy(static_cast<void *>(pool_->template at<Family>(dst)), &image, sizeof image);
  pool_->template at<Family>(dst)->stamp = pool_->sequence() + 1;
  count_write(dst);
  fast_home_[i] = dst;
  fast_dirty_[i] = 0;
  *home = dst;
  *moved = dst != old;
  return HM_OK;
}

// Moves C0 subtree `ref` out to the pool: merged, then its C0 slots given back. `*home` is where
// its root now is; `*moved` whether that differs from the root's previous pool copy.
template <int Dim>
int Octree<Dim>::merge_out(uint64_t ref, uint64_t *home, bool *moved) {
  int rc = merge(ref, home, moved);
  if (rc == HM_OK) free_fast_subtree(ref);
  return rc;
}

// Gives the C0 slots of a merged subtree back (their pool copies are the live ones now).
template <int Dim>
void Octree<Dim>::free_fast_subtree(uint64_t ref) {
  const uint64_t i = ref & ~kFast;
  for (int c = 0; c < kChildren; ++c)
    if (is_fast(fast_[i].child[c])) free_fast_subtree(fast_[i].child[c]);
  fast_home_[i] = 0;
  fast_live_[i] = 0;
  fast_free_.push_back(i);
}

// C0 over its threshold: the subtrees written least per family are merged out until C0 is
// back to 70% of its budget (Nguyen et al. (SC'17) §3.2, merging scenario 1). Never the root family.
template <int Dim>
int Octree<Dim>::merge_out_if_full() {
  if (fast_cap_ == 0 || !is_fast(root_child_)) return HM_OK;
  // The threshold applies to what new families may take (the reserve is for forced parents).
  const uint64_t used = fast_cap_ - fast_free_.size(), usable = fast_cap_ - (kMaxLevel + 2);
  if (used < options_.fast_threshold * usable) return HM_OK;
  struct Candidate {
    uint64_t parent, ref, size, hits;
    int index;
  };
  std::vector<Candidate> all;
  std::function<std::pair<uint64_t, uint64_t>(uint64_t)> measure = [&](uint64_t ref) {
    const uint64_t i = ref & ~kFast;
    uint64_t size = 1, hits = fast_hits_[i];
    for (int c = 0; c < kChildren; ++c)
      if (is_fast(fast_[i].child[c])) {
        const size_t at = all.size();
        all.push_back({ref, fast_[i].child[c], 0, 0, c});
        auto [s, h] = measure(fast_[i].child[c]);
        all[at].size = s;
        all[at].hits = h;
        size += s;
        hits += h;
      }
    return std::make_pair(size, hits);
  };
  measure(root_child_);
  std::sort(all.begin(), all.end(), [](const Candidate &a, const Candidate &b) {
    return a.hits * b.size < b.hits * a.size || (a.hits * b.size == b.hits * a.size && a.size > b.size);
  });
  const uint64_t target = static_cast<uint64_t>(0.7 * options_.fast_threshold * usable);
  for (const Candidate &k : all) {
    if (fast_cap_ - fast_free_.size() <= target) break;
    Family &parent = fast_[k.parent & ~kFast];
    if (!fast_live_[k.parent & ~kFast]) continue;  // inside a subtree merged out already
    uint64_t home = 0;
    bool moved = false;
    int rc = merge_out(k.ref, &home, &moved);
    if (rc != HM_OK) return rc;
    parent.child[k.index] = home;
    if (moved) fast_dirty_[k.parent & ~kFast] = 1;
    ++stats_.merges;
  }
  // Reset the write counts, so the next choice reflects recent use.
  std::fill(fast_hits_.begin(), fast_hits_.end(), 0);
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::persist() {
  if (int rc = settle(); rc != HM_OK) return rc;
  close_census();
  // Merge C0 into C1 (no garbage collection meanwhile), then the new root object.
  merging_ = true;
  uint64_t root = root_child_, top = 0;
  int rc = HM_OK;
  if (is_fast(root_child_)) {
    bool moved = false;
    rc = merge(root_child_, &root, &moved);
  }
  if (rc == HM_OK) rc = slots_.allocate(&top);
  if (rc != HM_OK) {
    merging_ = false;
    return after_change(rc, "persist");
  }
  Top *t = pool_->template at<Top>(top);
  std::memset(static_cast<void *>(t), 0, sizeof(Top));
  t->child = root;
  t->value = root_value_;
  t->leaves = leaves_;
  t->dim = Dim;
  count_write(top);
  if (pool_->root() != 0) slots_.release(pool_->root());
  seal_fresh(top, pool_->sequence() + 1);
  slots_.each_fresh([&](uint64_t off) { pool_->written(pool_->template at<char>(off), sizeof(Family)); });
  const uint64_t flushed = pool_->flushed_bytes();
  if ((rc = pool_->commit(top)) != HM_OK) {
    merging_ = false;
    return after_change(rc, "persist");
  }
  stats_.flushed_bytes += pool_->flushed_bytes() - flushed;
  rc = sync_replica();
  // The deletion marks of V(i-1) are free now: the collection before the next step.
  slots_.committed();
  merging_ = false;
  transform();
  charge();
  return rc;
}

// The census of the step that ends (OctreeOptions::census): which of the families the features
// pointed at it wrote, and how many writes its fast_capacity most-written families took.
template <int Dim>
void Octree<Dim>::close_census() {
  if (!options_.census) return;
  for (uint64_t key : predicted_) stats_.predicted_hit += census_.contains(key) ? 1 : 0;
  stats_.predicted += predicted_.size();
  predicted_.clear();
  std::vector<uint32_t> counts;
  counts.reserve(census_.size());
  for (const auto &[key, n] : census_) counts.push_back(n);
  const size_t k = std::min<size_t>(fast_cap_, counts.size());
  std::nth_element(counts.begin(), counts.begin() + k, counts.end(), std::greater<>());
  for (size_t i = 0; i < k; ++i) stats_.step_writes_bound += counts[i];
  census_.clear();
}

// Every pool family this version wrote, and its root object, get the version's stamp and their
// seal: the last writes before the commit flushes them.
template <int Dim>
void Octree<Dim>::seal_fresh(uint64_t top, uint64_t stamp) {
  slots_.each_fresh([&](uint64_t off) {
    if (off == top) {
      Top *t = pool_->template at<Top>(off);
      t->stamp = stamp;
      t->seal = seal_of(*t);
    } else {
      Family *f = pool_->template at<Family>(off);
      f->stamp = stamp;
      f->seal = seal_of(*f);
    }
  });
}

// Back to the last persisted version: C0 is emptied, what the working version allocated is free.
template <int Dim>
int Octree<Dim>::reset_to_committed() {
  pool_->rollback();
  slots_.rolled_back();
  if (fast_cap_) {
    fast_free_.clear();
    for (uint64_t i = fast_cap_; i-- > 0;) fast_free_.push_back(i);
    std::fill(fast_home_.begin(), fast_home_.end(), 0);
    std::fill(fast_live_.begin(), fast_live_.end(), 0);
  }
  const Top *t = pool_->template at<Top>(pool_->root());
  root_child_ = t->child;
  root_value_ = t->value;
  leaves_ = t->leaves;
  return HM_OK;
}

template <int Dim>
void Octree<Dim>::mark(uint64_t ref, std::vector<bool> &live) const {
  if (ref == 0) return;
  if (is_fast(ref)) {
    const uint64_t i = ref & ~kFast;
    if (fast_home_[i]) live[slots_.index(fast_home_[i])] = true;
    for (int c = 0; c < kChildren; ++c) mark(fast_[i].child[c], live);
    return;
  }
  if (live[slots_.index(ref)]) return;  // shared with a version already marked
  live[slots_.index(ref)] = true;
  const Family *f = read(ref);
  for (int c = 0; c < kChildren; ++c) mark(f->child[c], live);
}

// Mark-and-sweep (Nguyen et al. (SC'17) §3.2): everything the last persisted version, the working version
// and C0's homes reach is live; the rest of the pool below its top is free.
template <int Dim>
int Octree<Dim>::collect() {
  if (int rc = settle(); rc != HM_OK) return rc;
  if (merging_) return HM_OK;
  std::vector<bool> live(slots_.slots_below_top(), false);
  if (pool_->root() != 0) {
    live[slots_.index(pool_->root())] = true;
    mark(pool_->template at<Top>(pool_->root())->child, live);
  }
  mark(root_child_, live);
  stats_.gc_freed += slots_.rebuild([&](uint64_t off) { return live[slots_.index(off)]; });
  ++stats_.gc_runs;
  charge();
  return HM_OK;
}

template <int Dim>
void Octree<Dim>::maybe_collect() {
  if (!merging_ && slots_.available() < options_.gc_threshold * slots_.capacity_slots()) collect();
}

// The depth of the tree: its deepest leaf's level.
template <int Dim>
uint32_t Octree<Dim>::depth() const {
  uint32_t deepest = 0;
  std::function<void(uint64_t)> walk = [&](uint64_t ref) {
    const Family *f = read(ref);
    deepest = std::max(deepest, f->level);
    for (int c = 0; c < kChildren; ++c)
      if (f->child[c]) walk(f->child[c]);
  };
  if (root_child_) walk(root_child_);
  return deepest;
}

// Feature-directed sampling (Nguyen et al. (SC'17) §3.3): the share of N_sample = min(100, leaves) leaves of
// the subtree that the application's features select.
template <int Dim>
double Octree<Dim>::sample(const Leaf &subtree, uint64_t ref, std::mt19937_64 &rng) const {
  if (ref == 0) return feature_(subtree) ? 1 : 0;
  std::vector<Leaf> few;
  bool small = true;
  std::function<void(uint64_t)> gather = [&](uint64_t r) {
    const Family *f = read(r);
    for (int c = 0; c < kChildren && small; ++c) {
      if (f->child[c]) {
        gather(f->child[c]);
        continue;
      }
      Leaf l = child_leaf(f, c);
      few.push_back(l);
      if (few.size() > 100) small = false;
    }
  };
  gather(ref);
  int hits = 0;
  // The family a selected leaf is in: what the features predict the next step will write.
  const auto selected = [&](const Leaf &l) {
    const bool yes = feature_(l);
    if (yes && options_.census) predicted_.push_back(hot_key(l.coord, l.level - 1));
    return yes;
  };
  if (small) {
    for (const Leaf &l : few) hits += selected(l) ? 1 : 0;
    return static_cast<double>(hits) / few.size();
  }
  // A random descent per sample: a random child at each level down to a leaf.
  for (int s = 0; s < 100; ++s) {
    uint64_t r = ref;
    for (;;) {
      const Family *f = read(r);
      const int c = static_cast<int>(rng() % kChildren);
      if (f->child[c]) {
        r = f->child[c];
        continue;
      }
      Leaf l = child_leaf(f, c);
      hits += selected(l) ? 1 : 0;
      break;
    }
  }
  return hits / 100.0;
}

template <int Dim>
uint64_t Octree<Dim>::families_below(uint64_t ref) const {
  uint64_t n = 1;
  const Family *f = read(ref);
  for (int c = 0; c < kChildren; ++c)
    if (f->child[c]) n += families_below(f->child[c]);
  return n;
}

// After a persist: pick the subtrees C0 is for. Subtrees are taken at level L_sub = depth -
// floor(log_fanout(C0's octants)) (Eq. 1). Adaptive trees are sparse, so one subtree of that level
// holds far less than C0 can; the hottest subtrees (by sampled access frequency) are taken
// until their families fill 70% of what C0 may use. They replace the current ones when the ratio
// of the two sets' frequencies exceeds T_transform. Without the transformation (or without
// features) C0 keeps the first subtrees in Morton order for good, the locality-oblivious layout
// of Nguyen et al. (SC'17) Fig. 5a.
template <int Dim>
void Octree<Dim>::transform() {
  if (fast_cap_ == 0 || root_child_ == 0) return;
  const bool sampling = options_.transform && feature_;
  if (hot_chosen_ && !sampling) return;
  int fanout_levels = 0;  // floor(log_fanout(C0's octants)), in integers: exact at whole powers
  for (uint64_t n = uint64_t{fast_cap_} * kChildren; n >= kChildren; n /= kChildren) ++fanout_levels;
  // Eq. 1 assumes full subtrees; when C0 holds the whole tree (with room to grow), the whole
  // tree is its subtree.
  const uint64_t families = (leaves_ - 1) / (kChildren - 1), usable = fast_cap_ - (kMaxLevel + 2);
  const double room = 0.7 * options_.fast_threshold * usable;
  const int lsub = families <= room ? 0
                                    : std::min(19, std::max(0, static_cast<int>(depth()) -
                                                                   fanout_levels));
  struct Candidate {
    Leaf octant;
    uint64_t ref;
    double share;   // of its leaves the features select
    uint64_t size;  // families
    double freq() const { return share * size; }  // expected families accessed
  };
  std::vector<Candidate> subtrees;
  std::function<void(uint64_t)> collect_level = [&](uint64_t ref) {
    const Family *f = read(ref);
    for (int c = 0; c < kChildren; ++c) {
      if (!f->child[c]) continue;
      if (static_cast<int>(f->level) == lsub) {
        Leaf l = child_leaf(f, c);
        subtrees.push_back({l, f->child[c], 0, 0});
      } else {
        collect_level(f->child[c]);
      }
    }
  };
  if (lsub == 0) subtrees.push_back({Leaf{{0, 0, 0}, 0, 0}, root_child_, 0, 0});
  else collect_level(root_child_);
  if (subtrees.empty()) return;
  for (Candidate &c : subtrees) c.size = families_below(c.ref);
  // Fills C0's room with candidates in the given order.
  auto fill = [&](std::vector<Candidate> &order, std::vector<Leaf> *hot, double *freq) {
    uint64_t used = 0;
    *freq = 0;
    for (const Candidate &c : order) {
      if (used + c.size > room || (sampling && c.share == 0)) continue;
      used += c.size;
      *freq += c.freq();
      hot->push_back(c.octant);
    }
  };
  std::vector<Leaf> chosen;
  double chosen_freq = 0;
  if (!sampling) {
    fill(subtrees, &chosen, &chosen_freq);
    if (chosen.empty()) chosen.push_back(subtrees.front().octant);
    set_hot(std::move(chosen));
    hot_chosen_ = true;
    drop_cold();
    return;
  }
  std::mt19937_64 rng(pool_->sequence());
  double current_freq = 0;
  for (Candidate &c : subtrees) {
    c.share = sample(c.octant, c.ref, rng);
    uint32_t at[3] = {c.octant.coord[0], c.octant.coord[1], c.octant.coord[2]};
    if (hot_chosen_ && hot_level_ == c.octant.level && hot_keys_.count(hot_key(at, c.octant.level))) current_freq += c.freq();
  }
  std::stable_sort(subtrees.begin(), subtrees.end(), [](const Candidate &a, const Candidate &b) {
    return a.share > b.share || (a.share == b.share && a.size > b.size);
  });
  fill(subtrees, &chosen, &chosen_freq);
  if (chosen.empty()) return;
  const double ratio = current_freq > 0 ? chosen_freq / current_freq : HUGE_VAL;
  if (hot_chosen_ && ratio <= options_.t_transform) return;
  set_hot(std::move(chosen));
  hot_chosen_ = true;
  ++stats_.transforms;
  drop_cold();
}

// Right after a merge every C0 family is clean: those outside the hot subtrees leave C0 (their
// pool copies are current), so the new hot subtree can come in copy-on-write as it is written.
template <int Dim>
void Octree<Dim>::drop_cold() {
  if (!is_fast(root_child_)) return;
  std::function<void(uint64_t)> walk = [&](uint64_t ref) {
    Family &f = fast_[ref & ~kFast];
    for (int c = 0; c < kChildren; ++c) {
      if (!is_fast(f.child[c])) continue;
      const Family &g = fast_[f.child[c] & ~kFast];
      if (fast_eligible(g.coord, g.level - 1)) {
        walk(f.child[c]);
        continue;
      }
      const uint64_t home = fast_home_[f.child[c] & ~kFast];
      free_fast_subtree(f.child[c]);
      f.child[c] = home;
    }
  };
  walk(root_child_);
}

// Replicas (Nguyen et al. (SC'17) §3.4): after the primary's commit, the slots the version wrote go to the
// same offsets of the replica, which then commits the same root under the same sequence number.
// A replica that missed a version (it was attached later, or a crash fell between the two
// commits) receives everything below the top instead.
template <int Dim>
int Octree<Dim>::sync_replica() {
  if (!replica_) return HM_OK;
  Ranges ranges;
  if (replica_->sequence() + 1 != pool_->sequence()) {
    ranges.emplace_back(kHeaderBytes, pool_->top() - kHeaderBytes);
  } else {
    slots_.each_fresh([&](uint64_t off) { ranges.emplace_back(off, sizeof(Family)); });
    std::sort(ranges.begin(), ranges.end());
  }
  int rc = replica_->send(*pool_, ranges, pool_->root(), pool_->top(), pool_->sequence());
  if (rc != HM_OK) return rc;
  for (const auto &r : ranges) stats_.replica_bytes += r.second;
  return HM_OK;
}

template <int Dim>
OctreeStats Octree<Dim>::stats() const {
  OctreeStats s = stats_;
  s.fast_capacity = fast_cap_;
  s.fast_families = fast_cap_ - fast_free_.size();
  s.pool_families = slots_.in_use();
  return s;
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


template class Octree<2>;
template class Octree<3>;

}  // namespace hm::persist
