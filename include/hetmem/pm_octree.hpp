// hetmem PM-octree, C++ layer over include/hetmem/pm_octree.h (docs/pm-octree.md).
//
// hm::PmOctree owns a pm_octree_t (closed by the destructor, the pool file kept); errors throw
// hm::Error with hetmem's message. Predicates and visitors are any callables:
//
//   auto tree = hm::PmOctree::restore_or_create("/mnt/pmem/run.octree", 3, 1ull << 30);
//   tree.refine([&](const pm_leaf_t &l) { return l.level < 8 && near(l); });
//   tree.coarsen_balanced([&](const pm_leaf_t *family, int n) { return far(family[0]); });
//   tree.balance();
//   tree.persist();
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "hetmem/hetmem.hpp"
#include "hetmem/pm_octree.h"

namespace hm {

class PmOctree {
 public:
  // A new pool with one root leaf (version 1).
  static PmOctree create(const std::string &path, int dim, uint64_t bytes, const pm_options_t *options = nullptr) {
    pm_octree_t *t = nullptr;
    check(pm_create_ex(path.c_str(), dim, bytes, options, &t));
    return PmOctree(t);
  }
  // The last persisted version of an existing pool (or of its replica, see pm_restore_ex). Its
  // families are checked by the first call that reads them, which throws HM_EFORMAT on damage
  // (options->check_on_first_visit = 0: checked here).
  static PmOctree restore(const std::string &path, const pm_options_t *options = nullptr) {
    pm_octree_t *t = nullptr;
    check(pm_restore_ex(path.c_str(), options, &t));
    return PmOctree(t);
  }
  // Restores the pool when it exists, else creates it: the first run and every restart alike.
  static PmOctree restore_or_create(const std::string &path, int dim, uint64_t bytes,
                                    const pm_options_t *options = nullptr) {
    pm_octree_t *t = nullptr;
    if (pm_restore_ex(path.c_str(), options, &t) == HM_OK) return PmOctree(t);
    if (hm_last_error_code() != HM_EIO) throw Error(hm_last_error_code());  // there, but not restorable
    return create(path, dim, bytes, options);
  }

  PmOctree(PmOctree &&o) noexcept : tree_(std::exchange(o.tree_, nullptr)) {}
  PmOctree &operator=(PmOctree &&o) noexcept {
    if (this != &o) {
      pm_close(tree_);
      tree_ = std::exchange(o.tree_, nullptr);
    }
    return *this;
  }
  PmOctree(const PmOctree &) = delete;
  PmOctree &operator=(const PmOctree &) = delete;
  ~PmOctree() { pm_close(tree_); }

  // flags: PM_RECURSIVE (the children made are offered to `refine` in turn).
  template <class Refine>
  void refine(Refine &&refine, unsigned flags = 0) {
    check(pm_refine_ex(tree_, &call_leaf<Refine>, arg(refine), flags));
  }
  // flags: PM_RECURSIVE (parents whose children were merged are offered in the same pass),
  // PM_KEEP_BALANCE (as coarsen_balanced).
  template <class Coarsen>
  void coarsen(Coarsen &&coarsen, unsigned flags = 0) {
    check(pm_coarsen_ex(tree_, &call_family<Coarsen>, arg(coarsen), flags));
  }
  template <class Coarsen>
  void coarsen_balanced(Coarsen &&coarsen) {
    check(pm_coarsen_balanced(tree_, &call_family<Coarsen>, arg(coarsen)));
  }
  void balance() { check(pm_balance(tree_)); }
  void persist() { check(pm_persistent(tree_)); }
  void collect() { check(pm_collect(tree_)); }
  void set_value(const double *point, double value) { check(pm_set_value(tree_, point, value)); }
  pm_leaf_t find(const double *point) const {
    pm_leaf_t l{};
    check(pm_find(tree_, point, &l));
    return l;
  }
  template <class Visit>
  void leaves(Visit &&visit) const {
    check(pm_leaves(tree_, &call_visit<Visit>, arg(visit)));
  }
  template <class Visit>
  void neighbours(const pm_leaf_t &leaf, Visit &&visit) const {
    check(pm_neighbours(tree_, &leaf, &call_visit<Visit>, arg(visit)));
  }
  // The features for the transformation; the callable must outlive the tree's use of it.
  template <class Feature>
  void set_features(Feature &feature) {
    check(pm_set_features(tree_, &call_leaf<Feature>, arg(feature)));
  }
  void save_snapshot(const std::string &path) const { check(pm_snapshot_save(tree_, path.c_str())); }
  bool valid() const { return pm_valid(tree_) == HM_OK; }
  pm_stats_t stats() const {
    pm_stats_t s{};
    check(pm_stats(tree_, &s));
    return s;
  }
  int dim() const { return pm_dim(tree_); }
  uint64_t version() const { return pm_version(tree_); }
  uint64_t leaf_count() const { return pm_leaf_count(tree_); }
  uint64_t checksum() const { return pm_checksum(tree_); }
  pm_octree_t *get() const { return tree_; }

 private:
  explicit PmOctree(pm_octree_t *t) : tree_(t) {}
  template <class F>
  static void *arg(F &f) {
    return const_cast<void *>(static_cast<const void *>(&f));
  }
  template <class F>
  static int call_leaf(const pm_leaf_t *l, void *f) {
    return (*static_cast<std::remove_reference_t<F> *>(f))(*l) ? 1 : 0;
  }
  template <class F>
  static int call_family(const pm_leaf_t *family, int count, void *f) {
    return (*static_cast<std::remove_reference_t<F> *>(f))(family, count) ? 1 : 0;
  }
  template <class F>
  static void call_visit(const pm_leaf_t *l, void *f) {
    (*static_cast<std::remove_reference_t<F> *>(f))(*l);
  }
  pm_octree_t *tree_;
};

}  // namespace hm
