// The C interface of the persistent octree (include/hetmem/pm_octree.h): a handle holding an
// Octree<2> or an Octree<3>, with every call dispatched on the dimension.
#include "hetmem/pm_octree.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <type_traits>
#include <string>

#include "base/error.h"
#include "persist/octree.h"
#include "persist/pool.h"
#include "persist/replica.h"
#include "prim/prim.h"

using hm::fail;
using hm::persist::Octree;
using hm::persist::Pool;

struct pm_octree {
  int dim = 0;
  std::string note;
  std::unique_ptr<Octree<2>> quad;
  std::unique_ptr<Octree<3>> oct;
};

namespace {

template <class Leaf>
pm_leaf_t to_c(const Leaf &l) {
  return pm_leaf_t{{l.coord[0], l.coord[1], l.coord[2]}, l.level, l.value};
}

template <class Leaf>
Leaf from_c(const pm_leaf_t &l) {
  return Leaf{{l.coord[0], l.coord[1], l.coord[2]}, l.level, l.value};
}

// Calls `f` with the handle's tree, whichever its dimension.
template <class F>
auto with(pm_octree_t *t, F &&f) {
  return t->dim == 2 ? f(*t->quad) : f(*t->oct);
}
template <class F>
auto with(const pm_octree_t *t, F &&f) {
  return t->dim == 2 ? f(static_cast<const Octree<2> &>(*t->quad)) : f(static_cast<const Octree<3> &>(*t->oct));
}

int no_tree(const char *fn) { return fail(HM_EINVAL, "%s: the tree is NULL", fn); }

// Makes a handle from a pool: a new one (create), the last persisted version (restore) or a
// new one loaded from a snapshot file.
enum class Open { create, restore, snapshot };

// The C options as the tree's own.
hm::persist::OctreeOptions to_options(const pm_options_t *o) {
  hm::persist::OctreeOptions r;
  if (!o) return r;
  r.fast_bytes = o->fast_bytes;
  r.fast_threshold = o->fast_threshold;
  r.gc_threshold = o->gc_threshold;
  r.transform = o->transform != 0;
  r.t_transform = o->t_transform;
  r.replica = o->replica ? o->replica : "";
  r.emulate_nvbm = o->emulate_nvbm != 0;
  r.census = o->census != 0;
  r.threads = o->threads == 0 ? 1 : o->threads;
  r.check_on_first_visit = o->check_on_first_visit != 0;
  r.note = o->note ? o->note : "";
  return r;
}

template <int Dim>
int open_tree(const char *path, uint64_t bytes, Open how, pm_octree_t **out, const char *snapshot = nullptr,
              const pm_options_t *options = nullptr) {
  auto handle = std::make_unique<pm_octree>();
  handle->dim = Dim;
  std::unique_ptr<Octree<Dim>> tree;
  const hm::persist::OctreeOptions o = to_options(options);
  int rc = how == Open::create    ? Octree<Dim>::create(path, bytes, &tree, o)
           : how == Open::restore ? Octree<Dim>::restore(path, &tree, o)
                                  : Octree<Dim>::load_snapshot(snapshot, path, bytes, &tree, o);
  if (rc != HM_OK) return rc;
  handle->note = tree->pool().note();
  if constexpr (Dim == 2) handle->quad = std::move(tree);
  else handle->oct = std::move(tree);
  *out = handle.release();
  return HM_OK;
}

}  // namespace

extern "C" {

void pm_options_init(pm_options_t *o) {
  if (!o) return;
  std::memset(o, 0, sizeof *o);
  const hm::persist::OctreeOptions d;
  o->fast_threshold = d.fast_threshold;
  o->gc_threshold = d.gc_threshold;
  o->transform = d.transform;
  o->t_transform = d.t_transform;
  o->threads = d.threads;
  o->check_on_first_visit = d.check_on_first_visit;
}

int pm_create(const char *path, int dim, uint64_t bytes, pm_octree_t **out) {
  return pm_create_ex(path, dim, bytes, nullptr, out);
}

int pm_create_ex(const char *path, int dim, uint64_t bytes, const pm_options_t *options, pm_octree_t **out) {
  if (!path || !*path || !out) return fail(HM_EINVAL, "pm_create: the path and the result must be given");
  *out = nullptr;
  if (dim != 2 && dim != 3) return fail(HM_EINVAL, "pm_create: dimension %d; a tree has 2 or 3 dimensions", dim);
  try {
    return dim == 2 ? open_tree<2>(path, bytes, Open::create, out, nullptr, options)
                    : open_tree<3>(path, bytes, Open::create, out, nullptr, options);
  } catch (...) {
    return fail(HM_ENOMEM, "pm_create: out of memory");
  }
}

int pm_inspect(const char *path, pm_pool_info_t *info) {
  if (!path || !*path || !info) return fail(HM_EINVAL, "pm_inspect: the path and the result must be given");
  std::memset(info, 0, sizeof *info);
  hm::persist::PoolInfo found;
  const int rc = Pool::inspect(path, &found);
  using State = hm::persist::PoolInfo::State;
  info->state = found.state == State::missing    ? PM_POOL_MISSING
                : found.state == State::creating ? PM_POOL_CREATING
                : found.state == State::empty    ? PM_POOL_EMPTY
                                                 : PM_POOL_COMMITTED;
  info->version = found.sequence;
  info->bytes = found.bytes;
  info->dim = found.content == Octree<2>::content_name() ? 2 : found.content == Octree<3>::content_name() ? 3 : 0;
  std::snprintf(info->note, sizeof info->note, "%s", found.note.c_str());
  info->committed_bytes = found.committed_bytes;
  info->file_bytes = found.file_bytes;
  return rc;
}

int pm_restore(const char *path, pm_octree_t **out) { return pm_restore_ex(path, nullptr, out); }

int pm_restore_ex(const char *path, const pm_options_t *options, pm_octree_t **out) {
  if (!path || !*path || !out) return fail(HM_EINVAL, "pm_restore: the path and the result must be given");
  *out = nullptr;
  std::string content;
  {
    // Read what the pool holds (fetched from the replica first when the pool is gone and a
    // replica is named), then let it go: one opener at a time.
    int rc = hm::persist::ReplicaSink::fetch_if_missing(options && options->replica ? options->replica : "", path);
    if (rc != HM_OK) return rc;
    std::unique_ptr<Pool> pool;
    rc = Pool::open(path, &pool);
    if (rc != HM_OK) return rc;
    content = pool->content();
  }
  try {
    // "octreeD.L": a D-dimensional tree in family layout L (restore refuses a layout it does not read, by name).
    if (content.rfind("octree2.", 0) == 0) return open_tree<2>(path, 0, Open::restore, out, nullptr, options);
    if (content.rfind("octree3.", 0) == 0) return open_tree<3>(path, 0, Open::restore, out, nullptr, options);
    if (content == "octree2" || content == "octree3")
      return fail(HM_EFORMAT, "persistent pool '%s' holds a PM-octree of the first format (families without "
                  "version stamps and seals), which this hetmem does not restore; the file was left as it is "
                  "(recreate the tree, or load it from a snapshot with pm_snapshot_load)", path);
  } catch (...) {
    return fail(HM_ENOMEM, "pm_restore: out of memory");
  }
  return fail(HM_EFORMAT, "persistent pool '%s' holds %s, not an octree; the file was left as it is", path,
              content.empty() ? "no tree" : ("'" + content + "'").c_str());
}

int pm_set_features(pm_octree_t *t, pm_refine_fn feature, void *arg) {
  if (!t) return no_tree(__func__);
  with(t, [&](auto &tree) {
    using Leaf = typename std::remove_reference_t<decltype(tree)>::Leaf;
    if (!feature) tree.set_features(nullptr);
    else tree.set_features([feature, arg](const Leaf &l) {
      pm_leaf_t c = to_c(l);
      return feature(&c, arg) != 0;
    });
  });
  return HM_OK;
}

int pm_collect(pm_octree_t *t) {
  if (!t) return no_tree(__func__);
  return with(t, [](auto &tree) { return tree.collect(); });
}

int pm_stats(const pm_octree_t *t, pm_stats_t *out) {
  if (!t || !out) return fail(HM_EINVAL, "pm_stats: the tree and the result must be given");
  const hm::persist::OctreeStats s = with(t, [](const auto &tree) { return tree.stats(); });
  out->pool_writes = s.pool_writes;
  out->pool_write_bytes = s.pool_write_bytes;
  out->pool_reads = s.pool_reads;
  out->fast_writes = s.fast_writes;
  out->flushed_bytes = s.flushed_bytes;
  out->merges = s.merges;
  out->transforms = s.transforms;
  out->gc_runs = s.gc_runs;
  out->gc_freed = s.gc_freed;
  out->replica_bytes = s.replica_bytes;
  out->fast_families = s.fast_families;
  out->fast_capacity = s.fast_capacity;
  out->pool_families = s.pool_families;
  out->emul_charged_ns = s.emul_charged_ns;
  out->step_writes = s.step_writes;
  out->step_fast_writes = s.step_fast_writes;
  out->step_writes_bound = s.step_writes_bound;
  out->predicted = s.predicted;
  out->predicted_hit = s.predicted_hit;
  return HM_OK;
}

int pm_persistent(pm_octree_t *t) {
  if (!t) return no_tree(__func__);
  return with(t, [](auto &tree) { return tree.persist(); });
}

void pm_close(pm_octree_t *t) { delete t; }

int pm_delete(pm_octree_t *t) {
  if (!t) return no_tree(__func__);
  std::string path = with(t, [](auto &tree) { return tree.pool().path(); });
  delete t;
  if (hm::prim::remove_path(path) != HM_OK) return fail(HM_EIO, "pm_delete: the pool file '%s' could not be removed", path.c_str());
  return HM_OK;
}

int pm_snapshot_save(const pm_octree_t *t, const char *snapshot_path) {
  if (!t || !snapshot_path || !*snapshot_path)
    return fail(HM_EINVAL, "pm_snapshot_save: the tree and the snapshot path must be given");
  return with(t, [&](const auto &tree) { return tree.save_snapshot(snapshot_path); });
}

int pm_snapshot_load(const char *snapshot_path, const char *pool_path, uint64_t bytes, pm_octree_t **out) {
  if (!snapshot_path || !*snapshot_path || !pool_path || !*pool_path || !out)
    return fail(HM_EINVAL, "pm_snapshot_load: the snapshot path, the pool path and the result must be given");
  *out = nullptr;
  try {
    int dim = 0;
    int rc = hm::persist::snapshot_dimension(snapshot_path, &dim);
    if (rc != HM_OK) return rc;
    return dim == 2 ? open_tree<2>(pool_path, bytes, Open::snapshot, out, snapshot_path)
                    : open_tree<3>(pool_path, bytes, Open::snapshot, out, snapshot_path);
  } catch (...) {
    return fail(HM_ENOMEM, "pm_snapshot_load: out of memory");
  }
}

const char *pm_note(const pm_octree_t *t) { return t ? t->note.c_str() : ""; }

int pm_dim(const pm_octree_t *t) { return t ? t->dim : 0; }

uint64_t pm_version(const pm_octree_t *t) {
  return t ? with(t, [](const auto &tree) { return tree.version(); }) : 0;
}

int pm_refine_ex(pm_octree_t *t, pm_refine_fn refine, void *arg, unsigned flags) {
  if (!t || !refine) return fail(HM_EINVAL, "pm_refine: the tree and the predicate must be given");
  if (flags & ~unsigned{PM_RECURSIVE})
    return fail(HM_EINVAL, "pm_refine_ex: flags 0x%x: refinement takes only PM_RECURSIVE", flags);
  return with(t, [&](auto &tree) {
    return tree.refine(
        [&](const auto &leaf) {
          pm_leaf_t l = to_c(leaf);
          return refine(&l, arg) != 0;
        },
        (flags & PM_RECURSIVE) != 0);
  });
}

int pm_refine(pm_octree_t *t, pm_refine_fn refine, void *arg) { return pm_refine_ex(t, refine, arg, 0); }

namespace {
int coarsen_with(pm_octree_t *t, pm_coarsen_fn coarsen, void *arg, unsigned flags, const char *fn) {
  if (!t || !coarsen) return fail(HM_EINVAL, "%s: the tree and the predicate must be given", fn);
  if (flags & ~unsigned{PM_RECURSIVE | PM_KEEP_BALANCE})
    return fail(HM_EINVAL, "%s: flags 0x%x: coarsening takes PM_RECURSIVE and PM_KEEP_BALANCE", fn, flags);
  return with(t, [&](auto &tree) {
    using Tree = std::remove_reference_t<decltype(tree)>;
    return tree.coarsen(
        [&](const auto *family) {
          pm_leaf_t f[Tree::kChildren];
          for (int c = 0; c < Tree::kChildren; ++c) f[c] = to_c(family[c]);
          return coarsen(f, Tree::kChildren, arg) != 0;
        },
        (flags & PM_KEEP_BALANCE) != 0, (flags & PM_RECURSIVE) != 0);
  });
}
}  // namespace

int pm_coarsen(pm_octree_t *t, pm_coarsen_fn coarsen, void *arg) { return coarsen_with(t, coarsen, arg, 0, __func__); }

int pm_coarsen_balanced(pm_octree_t *t, pm_coarsen_fn coarsen, void *arg) {
  return coarsen_with(t, coarsen, arg, PM_KEEP_BALANCE, __func__);
}

int pm_coarsen_ex(pm_octree_t *t, pm_coarsen_fn coarsen, void *arg, unsigned flags) {
  return coarsen_with(t, coarsen, arg, flags, __func__);
}

int pm_balance(pm_octree_t *t) {
  if (!t) return no_tree(__func__);
  return with(t, [](auto &tree) { return tree.balance(); });
}

int pm_set_value(pm_octree_t *t, const double *point, double value) {
  if (!t || !point) return fail(HM_EINVAL, "pm_set_value: the tree and the point must be given");
  return with(t, [&](auto &tree) { return tree.set_value(point, value); });
}

int pm_find(const pm_octree_t *t, const double *point, pm_leaf_t *out) {
  if (!t || !point || !out) return fail(HM_EINVAL, "pm_find: the tree, the point and the result must be given");
  return with(t, [&](const auto &tree) {
    typename std::remove_reference_t<decltype(tree)>::Leaf leaf{};
    if (int rc = tree.settle(); rc != HM_OK) return rc;
    if (!tree.find(point, &leaf))
      return fail(HM_EINVAL, "pm_find: the point lies outside the unit domain [0, 1)^%d", t->dim);
    *out = to_c(leaf);
    return static_cast<int>(HM_OK);
  });
}

int pm_leaves(const pm_octree_t *t, pm_visit_fn visit, void *arg) {
  if (!t || !visit) return fail(HM_EINVAL, "pm_leaves: the tree and the visitor must be given");
  return with(t, [&](const auto &tree) {
    return tree.each_leaf([&](const auto &leaf) {
      pm_leaf_t l = to_c(leaf);
      visit(&l, arg);
    });
  });
}

int pm_neighbours(const pm_octree_t *t, const pm_leaf_t *leaf, pm_visit_fn visit, void *arg) {
  if (!t || !leaf || !visit) return fail(HM_EINVAL, "pm_neighbours: the tree, the leaf and the visitor must be given");
  if (leaf->level > 20) return fail(HM_EINVAL, "pm_neighbours: leaf level %u is beyond the deepest level 20", leaf->level);
  return with(t, [&](const auto &tree) {
    using Leaf = typename std::remove_reference_t<decltype(tree)>::Leaf;
    if (int rc = tree.settle(); rc != HM_OK) return rc;
    tree.neighbours(from_c<Leaf>(*leaf), [&](const Leaf &n) {
      pm_leaf_t l = to_c(n);
      visit(&l, arg);
    });
    return static_cast<int>(HM_OK);
  });
}

uint64_t pm_leaf_count(const pm_octree_t *t) {
  return t ? with(t, [](const auto &tree) { return static_cast<uint64_t>(tree.leaf_count()); }) : 0;
}

uint64_t pm_checksum(const pm_octree_t *t) {
  return t ? with(t, [](const auto &tree) { return tree.checksum(); }) : 0;
}

int pm_valid(const pm_octree_t *t) {
  if (!t) return no_tree(__func__);
  std::string why;
  bool ok = with(t, [&](const auto &tree) { return tree.valid(&why); });
  return ok ? HM_OK : fail(HM_EFORMAT, "the tree is not well formed: %s", why.c_str());
}

}  // extern "C"

namespace {

int replica_serve(const char *listen, const char *pool_path, const char *key_file, bool unauthenticated,
                  pm_replica_ready_fn ready, void *arg) {
  try {
    return hm::persist::serve_replicas(listen ? listen : "", pool_path ? pool_path : "", key_file ? key_file : "",
                                       unauthenticated, [&](const std::string &address, int port) {
                                         if (ready) ready(address.c_str(), port, arg);
                                       });
  } catch (...) {
    return hm::fail(HM_ENOMEM, "pm_replica_serve: out of memory");
  }
}

}  // namespace

int pm_replica_serve(const char *listen, const char *pool_path, const char *key_file, pm_replica_ready_fn ready,
                     void *arg) {
  return replica_serve(listen, pool_path, key_file, false, ready, arg);
}

int pm_replica_serve_unauthenticated(const char *listen, const char *pool_path, pm_replica_ready_fn ready, void *arg) {
  return replica_serve(listen, pool_path, nullptr, true, ready, arg);
}

const char *pm_replica_default_key(void) {
  static const std::string path = hm::persist::default_replica_key();
  return path.c_str();
}
