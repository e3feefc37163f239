// PM-octree: opening and restoring a tree, reading and copying families (copy-on-write), and the
// end of every changing operation. The adaptation operations are in octree_adapt.cpp, the
// queries and invariant checks in octree_queries.cpp, the tiers (C0, merging, transformation,
// garbage collection, replicas) in octree_tiers.cpp, snapshot files in octree_snapshot.cpp.
#include "persist/octree.h"

#include <algorithm>
#include <array>
#include <bit>
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
      slots_(*pool_, kSlotBytes) {
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
  if (fast_cap_ >= ChildRef::kFastBit)
    return fail(HM_EINVAL, "PM-octree: a fast-tier budget of %s is more than C0 can index (%s)",
                format_size(options_.fast_bytes).c_str(), format_size(ChildRef::kFastBit * sizeof(Family)).c_str());
  if (options_.fast_bytes > 0 && fast_cap_ < 4 * (kMaxLevel + 2))
    return fail(HM_EINVAL, "PM-octree: a fast-tier budget of %llu bytes holds %llu families; give 0 (no C0) or at least %zu bytes",
                static_cast<unsigned long long>(options_.fast_bytes), static_cast<unsigned long long>(fast_cap_),
                4 * (kMaxLevel + 2) * sizeof(Family));
  if (!(options_.fast_threshold > 0 && options_.fast_threshold <= 1))
    return fail(HM_EINVAL, "PM-octree: fast_threshold %g is outside (0, 1]", options_.fast_threshold);
  if (!(options_.gc_threshold >= 0 && options_.gc_threshold < 1))
    return fail(HM_EINVAL, "PM-octree: gc_threshold %g is outside [0, 1)", options_.gc_threshold);
  if (options_.threads < 1) return fail(HM_EINVAL, "PM-octree: threads %d must be at least 1", options_.threads);
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
  if (bytes > kMaxPoolBytes)
    return fail(HM_EINVAL, "PM-octree pool '%s': %s asked, at most %s (its families name their children by 32-bit "
                "offsets)", path.c_str(), format_size(bytes).c_str(), format_size(kMaxPoolBytes).c_str());
  std::unique_ptr<Pool> pool;
  int rc = Pool::create(path, bytes, &pool, content_name(), options.note);
  if (rc != HM_OK) return rc;
  // The first persist publishes the pool at its path; a failure before it leaves the path as it
  // was (the staging file goes with the pool).
  std::unique_ptr<Octree> tree(new Octree(std::move(pool), options));
  if ((rc = tree->setup()) != HM_OK || (rc = tree->persist()) != HM_OK) return rc;
  *out = std::move(tree);
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::restore(const std::string &path, std::unique_ptr<Octree> *out, const OctreeOptions &options) {
  if (int rc = ReplicaSink::fetch_if_missing(options.replica, path); rc != HM_OK) return rc;
  std::unique_ptr<Pool> pool;
  int rc = Pool::open(path, &pool);
  if (rc != HM_OK) return rc;
  const std::string older = std::string(content_name()).substr(0, 8);  // "octree3." without the layout
  if (pool->content() != content_name() && pool->content().rfind(older, 0) == 0)
    return fail(HM_EFORMAT, "persistent pool '%s' holds a %dD tree in an older layout ('%s'; this version reads '%s'): "
                "restore it with the hetmem that wrote it and save a snapshot (pm_snapshot_save), then load that",
                path.c_str(), Dim, pool->content().c_str(), content_name());
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
  // Always: no traversal may follow a damaged offset or return a damaged value. Checked here, or
  // with check_on_first_visit by the first visit or operation (settle(); the invariant checks
  // then run after the first change, as after every change).
  tree->check_context_ = "persistent pool '" + path + "': " + which;
  tree->unchecked_ = true;
  if (!options.check_on_first_visit && (rc = tree->settle()) != HM_OK) return rc;
  if ((rc = tree->setup()) != HM_OK) return rc;
  std::string why;
  if (checks_on() && !tree->unchecked_ && !tree->valid(&why))
    return fail(HM_EFORMAT, "persistent pool '%s': the restored tree is not valid: %s", path.c_str(), why.c_str());
  if (tree->pool_->newest_slot_damaged())
    log(0, "persistent pool '%s': the newest root slot is damaged; restored the version before it (%llu), which is "
        "intact (the last persist's work is lost)", path.c_str(), static_cast<unsigned long long>(version));
  *out = std::move(tree);
  return HM_OK;
}

template <int Dim>
const typename Octree<Dim>::Family *Octree<Dim>::read(uint64_t ref) const {
  if (!is_fast(ref)) {
    ++stats_.pool_reads;
    device_access(ref);
  }
  return family_at(ref);
}

// With the nvbm emulation: an access to pool family `ref` reaches the device only when the
// family is not in the CPU's cache, modelled as a direct-mapped cache of whole families of
// kEmulCacheBytes (fewer hits than a real set-associative cache of that size: the model charges
// more, never less). Each miss is charged as one device access at the end of the operation.
template <int Dim>
void Octree<Dim>::device_access(uint64_t ref) const {
  if (!options_.emulate_nvbm) return;
  if (emul_cache_.empty()) emul_cache_.assign(std::bit_floor(kEmulCacheBytes / sizeof(Family)), 0);
  uint64_t &line = emul_cache_[(ref * 0x9E3779B97F4A7C15ull >> 20) & (emul_cache_.size() - 1)];
  if (line == ref) return;
  line = ref;
  ++uncharged_;
}

template <int Dim>
void Octree<Dim>::count_write(uint64_t ref) {
  if (options_.census && !merging_) {
    const Family *f = family_at(ref);  // the census counts, it does not read
    ++census_[hot_key(f->coord, f->level - 1)];
    ++stats_.step_writes;
    stats_.step_fast_writes += is_fast(ref) ? 1 : 0;
  }
  if (is_fast(ref)) {
    ++stats_.fast_writes;
    return;
  }
  ++stats_.pool_writes;
  stats_.pool_write_bytes += sizeof(Family);
  device_access(ref);
}

template <int Dim>
void Octree<Dim>::charge() const {
  if (!options_.emulate_nvbm || uncharged_ == 0) return;
  static const EmulProfile *nvbm = emul_profile("nvbm");
  stats_.emul_charged_ns += emul_charge(*nvbm, emul_state_, 0, 0, uncharged_, kEmulDeclared);
  uncharged_ = 0;
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

template class Octree<2>;
template class Octree<3>;

}  // namespace hm::persist
