#include "persist/octree.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <vector>

#include "base/error.h"
#include "prim/prim.h"
#include "hetmem/hetmem.h"

namespace hm::persist {

template <int Dim>
int Octree<Dim>::new_node(uint64_t *off) {
  int rc = pool_->allocate(sizeof(Node), off);
  if (rc != HM_OK) return rc;
  std::memset(static_cast<void *>(node(*off)), 0, sizeof(Node));
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::writable(uint64_t off, uint64_t *out) {
  if (!committed(off)) {
    *out = off;
    return HM_OK;
  }
  uint64_t copy = 0;
  int rc = new_node(&copy);
  if (rc != HM_OK) return rc;
  std::memcpy(static_cast<void *>(node(copy)), node(off), sizeof(Node));
  pool_->written(node(copy), sizeof(Node));
  *out = copy;
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::create(const std::string &path, uint64_t bytes, std::unique_ptr<Octree> *out) {
  std::unique_ptr<Pool> pool;
  int rc = Pool::create(path, bytes, &pool, content_name());
  if (rc != HM_OK) return rc;
  std::unique_ptr<Octree> tree(new Octree(std::move(pool)));
  if ((rc = tree->new_node(&tree->root_)) != HM_OK) return rc;
  tree->pool_->written(tree->node(tree->root_), sizeof(Node));
  if ((rc = tree->persist()) != HM_OK) return rc;
  *out = std::move(tree);
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::restore(const std::string &path, std::unique_ptr<Octree> *out) {
  std::unique_ptr<Pool> pool;
  int rc = Pool::open(path, &pool);
  if (rc != HM_OK) return rc;
  if (pool->content() != content_name())
    return fail(HM_EFORMAT, "persistent pool '%s' holds %s, not a %dD tree (%s)", path.c_str(),
                pool->content().empty() ? "no tree" : ("'" + pool->content() + "'").c_str(), Dim, content_name());
  if (pool->root() == 0) return fail(HM_EFORMAT, "persistent pool '%s' holds no committed tree", path.c_str());
  std::unique_ptr<Octree> tree(new Octree(std::move(pool)));
  tree->root_ = tree->pool_->root();
  *out = std::move(tree);
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::persist() {
  return pool_->commit(root_);
}

// Applies `below` to each child; if any child changed, the parent (copied out of V(i-1) if it
// belongs there) points at the new children.
template <int Dim>
template <class Below>
int Octree<Dim>::through_children(uint64_t off, bool *changed, uint64_t *out, const Below &below) {
  uint64_t kids[kChildren];
  bool any = false;
  for (int c = 0; c < kChildren; ++c) {
    bool ch = false;
    int rc = below(node(off)->child[c], &ch, &kids[c]);
    if (rc != HM_OK) return rc;
    any |= ch;
  }
  if (!any) return HM_OK;
  uint64_t w = 0;
  int rc = writable(off, &w);
  if (rc != HM_OK) return rc;
  for (int c = 0; c < kChildren; ++c) node(w)->child[c] = kids[c];
  pool_->written(node(w), sizeof(Node));
  *changed = true;
  *out = w;
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::refine_below(uint64_t off, const std::function<bool(const Leaf &)> &refine, bool *changed,
                              uint64_t *out) {
  const Node *n = node(off);
  *changed = false;
  *out = off;
  if (n->child[0] == 0) {
    Leaf leaf{{n->coord[0], n->coord[1], n->coord[2]}, n->level, n->value};
    if (n->level >= static_cast<uint32_t>(kMaxLevel) || !refine(leaf)) return HM_OK;
    uint64_t w = 0;
    int rc = writable(off, &w);
    if (rc != HM_OK) return rc;
    const uint32_t half = 1u << (kMaxLevel - leaf.level - 1);
    for (int c = 0; c < kChildren; ++c) {
      uint64_t co = 0;
      if ((rc = new_node(&co)) != HM_OK) return rc;
      Node *child = node(co);
      for (int d = 0; d < Dim; ++d) child->coord[d] = leaf.coord[d] + (((c >> d) & 1) ? half : 0);
      child->level = leaf.level + 1;
      child->value = leaf.value;
      pool_->written(child, sizeof(Node));
      node(w)->child[c] = co;
    }
    pool_->written(node(w), sizeof(Node));
    *changed = true;
    *out = w;
    return HM_OK;
  }
  return through_children(off, changed, out, [&](uint64_t child, bool *ch, uint64_t *o) {
    return refine_below(child, refine, ch, o);
  });
}

template <int Dim>
int Octree<Dim>::refine(const std::function<bool(const Leaf &)> &fn) {
  bool changed = false;
  uint64_t root = root_;
  int rc = refine_below(root_, fn, &changed, &root);
  if (rc != HM_OK) {
    pool_->rollback();  // nothing half-made stays in the working version
    return rc;
  }
  root_ = root;
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::coarsen_below(uint64_t off, const std::function<bool(const Leaf *)> &fn, bool *changed,
                               uint64_t *out) {
  const Node *n = node(off);
  *changed = false;
  *out = off;
  if (n->child[0] == 0) return HM_OK;
  bool family = true;
  for (int c = 0; c < kChildren; ++c) family &= node(n->child[c])->child[0] == 0;
  if (family) {
    Leaf leaves[kChildren];
    double mean = 0;
    for (int c = 0; c < kChildren; ++c) {
      const Node *k = node(n->child[c]);
      leaves[c] = Leaf{{k->coord[0], k->coord[1], k->coord[2]}, k->level, k->value};
      mean += k->value / kChildren;
    }
    if (!fn(leaves)) return HM_OK;
    uint64_t w = 0;
    int rc = writable(off, &w);
    if (rc != HM_OK) return rc;
    for (int c = 0; c < kChildren; ++c) node(w)->child[c] = 0;
    node(w)->value = mean;
    pool_->written(node(w), sizeof(Node));
    *changed = true;
    *out = w;
    return HM_OK;
  }
  return through_children(off, changed, out, [&](uint64_t child, bool *ch, uint64_t *o) {
    return coarsen_below(child, fn, ch, o);
  });
}

template <int Dim>
int Octree<Dim>::coarsen(const std::function<bool(const Leaf *)> &fn) {
  bool changed = false;
  uint64_t root = root_;
  int rc = coarsen_below(root_, fn, &changed, &root);
  if (rc != HM_OK) {
    pool_->rollback();
    return rc;
  }
  root_ = root;
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::set_value(const double *point, double value) {
  for (int d = 0; d < Dim; ++d)
    if (!(point[d] >= 0 && point[d] < 1)) return fail(HM_EINVAL, "set_value: the point lies outside [0, 1)");
  // The path from the root to the leaf, then copies from the leaf upwards where needed.
  std::vector<std::pair<uint64_t, int>> path;
  uint64_t off = root_;
  while (node(off)->child[0] != 0) {
    const Node *n = node(off);
    const uint32_t half = 1u << (kMaxLevel - n->level - 1);
    int c = 0;
    for (int d = 0; d < Dim; ++d) {
      uint32_t x = static_cast<uint32_t>(point[d] * (1u << kMaxLevel));
      if (x >= n->coord[d] + half) c |= 1 << d;
    }
    path.emplace_back(off, c);
    off = n->child[c];
  }
  uint64_t w = 0;
  int rc = writable(off, &w);
  if (rc != HM_OK) return rc;
  node(w)->value = value;
  pool_->written(node(w), sizeof(Node));
  // Walk up: a parent already in V(i) that points at w needs nothing; otherwise it is copied (or
  // changed in place) to point at the new child.
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    if (node(it->first)->child[it->second] == w) return HM_OK;
    uint64_t p = 0;
    if ((rc = writable(it->first, &p)) != HM_OK) return rc;
    node(p)->child[it->second] = w;
    pool_->written(node(p), sizeof(Node));
    w = p;
  }
  root_ = w;
  return HM_OK;
}

template <int Dim>
void Octree<Dim>::leaves_below(uint64_t off, const std::function<void(const Leaf &)> &visit) const {
  const Node *n = node(off);
  if (n->child[0] == 0) {
    visit(Leaf{{n->coord[0], n->coord[1], n->coord[2]}, n->level, n->value});
    return;
  }
  for (int c = 0; c < kChildren; ++c) leaves_below(n->child[c], visit);
}

template <int Dim>
void Octree<Dim>::leaves(const std::function<void(const Leaf &)> &visit) const {
  leaves_below(root_, visit);
}

// Leaves under `off` whose closed box meets the closed box [lo, hi].
template <int Dim>
void Octree<Dim>::touching_below(uint64_t off, const uint32_t *lo, const uint32_t *hi,
                                 const std::function<void(const Leaf &)> &visit) const {
  const Node *n = node(off);
  const uint32_t size = 1u << (kMaxLevel - n->level);
  for (int d = 0; d < Dim; ++d)
    if (n->coord[d] > hi[d] || n->coord[d] + size < lo[d]) return;
  if (n->child[0] == 0) {
    visit(Leaf{{n->coord[0], n->coord[1], n->coord[2]}, n->level, n->value});
    return;
  }
  for (int c = 0; c < kChildren; ++c) touching_below(n->child[c], lo, hi, visit);
}

template <int Dim>
void Octree<Dim>::neighbours(const Leaf &leaf, const std::function<void(const Leaf &)> &visit) const {
  const uint32_t size = 1u << (kMaxLevel - leaf.level);
  uint32_t lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
  for (int d = 0; d < Dim; ++d) lo[d] = leaf.coord[d], hi[d] = leaf.coord[d] + size;
  touching_below(root_, lo, hi, [&](const Leaf &l) {
    bool self = l.level == leaf.level;
    for (int d = 0; d < Dim; ++d) self &= l.coord[d] == leaf.coord[d];
    if (!self) visit(l);
  });
}

template <int Dim>
int Octree<Dim>::balance() {
  // Ripple refinement: split every leaf that touches one more than a level finer, until none does.
  // A coarser leaf touching a finer one covers the whole contact, so each pass is exact.
  using Key = std::array<uint32_t, 4>;
  auto key = [](const Leaf &l) { return Key{l.coord[0], l.coord[1], l.coord[2], l.level}; };
  for (;;) {
    std::set<Key> split;
    leaves([&](const Leaf &l) {
      if (l.level < 2) return;
      neighbours(l, [&](const Leaf &n) {
        if (n.level + 1 < l.level) split.insert(key(n));
      });
    });
    if (split.empty()) return HM_OK;
    int rc = refine([&](const Leaf &l) { return split.count(key(l)) != 0; });
    if (rc != HM_OK) return rc;
  }
}

namespace {
constexpr char kSnapshotMagic[8] = {'H', 'M', 'O', 'C', 'T', 'S', 'N', '1'};
struct SnapshotHeader {
  char magic[8];
  uint32_t dim;
  uint32_t record_bytes;
  uint64_t leaves;
  uint64_t checksum;  // Octree::checksum() of the saved tree
};
struct SnapshotLeaf {
  uint32_t coord[3];
  uint32_t level;
  double value;
};
// The header's own checks: long enough, the magic, a dimension of 2 or 3.
int check_snapshot_header(const SnapshotHeader &h, size_t have, const std::string &path) {
  if (have < sizeof h || std::memcmp(h.magic, kSnapshotMagic, sizeof h.magic) != 0)
    return fail(HM_EFORMAT, "'%s' is not a hetmem octree snapshot (wrong magic)", path.c_str());
  if (h.dim != 2 && h.dim != 3) return fail(HM_EFORMAT, "snapshot '%s' is damaged: dimension %u", path.c_str(), h.dim);
  return HM_OK;
}
}  // namespace

int snapshot_dimension(const std::string &path, int *dim) {
  std::ifstream in(path, std::ios::binary);  // the header only
  if (!in) return fail(HM_EIO, "snapshot '%s' cannot be read", path.c_str());
  SnapshotHeader h{};
  in.read(reinterpret_cast<char *>(&h), sizeof h);
  int rc = check_snapshot_header(h, static_cast<size_t>(in.gcount()), path);
  if (rc != HM_OK) return rc;
  *dim = static_cast<int>(h.dim);
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::save_snapshot(const std::string &path) const {
  std::string bytes(sizeof(SnapshotHeader), '\0');
  uint64_t n = 0;
  leaves([&](const Leaf &l) {
    SnapshotLeaf r{{l.coord[0], l.coord[1], l.coord[2]}, l.level, l.value};
    bytes.append(reinterpret_cast<const char *>(&r), sizeof r);
    ++n;
  });
  SnapshotHeader h{};
  std::memcpy(h.magic, kSnapshotMagic, sizeof h.magic);
  h.dim = Dim;
  h.record_bytes = sizeof(SnapshotLeaf);
  h.leaves = n;
  h.checksum = checksum();
  std::memcpy(bytes.data(), &h, sizeof h);
  if (!prim::write_text_atomic(path, bytes))
    return fail(HM_EIO, "snapshot '%s' could not be written (check the directory and free space)", path.c_str());
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::load_snapshot(const std::string &path, const std::string &pool_path, uint64_t bytes,
                               std::unique_ptr<Octree> *out) {
  std::string data;
  if (!prim::read_text(path, &data)) return fail(HM_EIO, "snapshot '%s' cannot be read", path.c_str());
  SnapshotHeader h{};
  std::memcpy(&h, data.data(), std::min(sizeof h, data.size()));
  int rc = check_snapshot_header(h, data.size(), path);
  if (rc != HM_OK) return rc;
  if (h.dim != Dim) return fail(HM_EFORMAT, "snapshot '%s' holds a %uD tree, not a %dD one", path.c_str(), h.dim, Dim);
  if (h.record_bytes != sizeof(SnapshotLeaf) || h.leaves == 0 ||
      (data.size() - sizeof h) / sizeof(SnapshotLeaf) != h.leaves || (data.size() - sizeof h) % sizeof(SnapshotLeaf))
    return fail(HM_EFORMAT, "snapshot '%s' is truncated or damaged: its header says %llu leaves in %zu bytes",
                path.c_str(), static_cast<unsigned long long>(h.leaves), data.size());
  std::vector<SnapshotLeaf> saved(h.leaves);
  std::memcpy(saved.data(), data.data() + sizeof h, h.leaves * sizeof(SnapshotLeaf));
  // Every ancestor of a saved leaf is an inner octant: refine level by level until none is left.
  using Key = std::array<uint32_t, 4>;
  std::set<Key> inner;
  for (const SnapshotLeaf &l : saved) {
    if (l.level > kMaxLevel)
      return fail(HM_EFORMAT, "snapshot '%s' is damaged: a leaf at level %u", path.c_str(), l.level);
    for (uint32_t a = 0; a < l.level; ++a) {
      const uint32_t mask = ~((1u << (kMaxLevel - a)) - 1);
      inner.insert(Key{l.coord[0] & mask, l.coord[1] & mask, Dim == 3 ? l.coord[2] & mask : 0, a});
    }
  }
  std::unique_ptr<Octree> tree;
  rc = create(pool_path, bytes, &tree);
  if (rc != HM_OK) return rc;
  auto refuse = [&](int code) {
    std::string why = hm_last_error();
    tree.reset();
    std::remove(pool_path.c_str());
    return fail(code, "%s", why.c_str());
  };
  for (uint32_t level = 0; level < kMaxLevel && rc == HM_OK; ++level)
    rc = tree->refine([&](const Leaf &l) {
      return l.level == level && inner.count(Key{l.coord[0], l.coord[1], Dim == 3 ? l.coord[2] : 0, l.level}) != 0;
    });
  for (size_t i = 0; i < saved.size() && rc == HM_OK; ++i) {
    double centre[3] = {0, 0, 0};
    for (int d = 0; d < Dim; ++d)
      centre[d] = std::ldexp(saved[i].coord[d] + 0.5 * (1u << (kMaxLevel - saved[i].level)), -kMaxLevel);
    rc = tree->set_value(centre, saved[i].value);
  }
  if (rc != HM_OK) return refuse(rc);
  if (tree->checksum() != h.checksum) {
    fail(HM_EFORMAT, "snapshot '%s' is damaged: its leaves do not match its checksum; no pool was made", path.c_str());
    return refuse(HM_EFORMAT);
  }
  if ((rc = tree->persist()) != HM_OK) return refuse(rc);
  *out = std::move(tree);
  return HM_OK;
}

template <int Dim>
size_t Octree<Dim>::leaf_count() const {
  size_t n = 0;
  leaves([&](const Leaf &) { ++n; });
  return n;
}

template <int Dim>
bool Octree<Dim>::find(const double *point, Leaf *out) const {
  for (int d = 0; d < Dim; ++d)
    if (!(point[d] >= 0 && point[d] < 1)) return false;
  uint64_t off = root_;
  while (node(off)->child[0] != 0) {
    const Node *n = node(off);
    const uint32_t half = 1u << (kMaxLevel - n->level - 1);
    int c = 0;
    for (int d = 0; d < Dim; ++d)
      if (static_cast<uint32_t>(point[d] * (1u << kMaxLevel)) >= n->coord[d] + half) c |= 1 << d;
    off = n->child[c];
  }
  const Node *n = node(off);
  *out = Leaf{{n->coord[0], n->coord[1], n->coord[2]}, n->level, n->value};
  return true;
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
bool Octree<Dim>::valid(std::string *why) const {
  // Every child sits where its index says, one level down; the leaves cover the domain once.
  uint64_t covered = 0;
  bool ok = true;
  // Offsets and levels are checked before they are followed, so a damaged pool is reported, not
  // read out of bounds; levels grow by one per step down, which bounds the recursion.
  auto in_data = [&](uint64_t off) {
    return off >= kHeaderBytes && off % kUnit == 0 && off + sizeof(Node) <= pool_->top();
  };
  std::function<void(uint64_t)> check = [&](uint64_t off) {
    const Node *n = node(off);
    if (n->level > kMaxLevel) {
      ok = false;
      if (why) *why = "an octant's level is beyond the deepest level";
      return;
    }
    const uint32_t size = 1u << (kMaxLevel - n->level);
    for (int d = 0; d < Dim; ++d)
      if (n->coord[d] % size != 0) {
        ok = false;
        if (why) *why = "an octant is not aligned to its level";
      }
    if (n->child[0] == 0) {
      for (int c = 1; c < kChildren; ++c)
        if (n->child[c] != 0) {
          ok = false;
          if (why) *why = "a leaf has some children";
        }
      covered += uint64_t{1} << (Dim * (kMaxLevel - n->level));
      return;
    }
    for (int c = 0; c < kChildren; ++c) {
      if (!in_data(n->child[c])) {
        ok = false;
        if (why) *why = "a child offset points outside the pool's data";
        return;
      }
      const Node *k = node(n->child[c]);
      bool placed = k->level == n->level + 1;
      for (int d = 0; d < Dim; ++d) placed &= k->coord[d] == n->coord[d] + (((c >> d) & 1) ? size / 2 : 0);
      if (!placed) {
        ok = false;
        if (why) *why = "a child is not where its index says";
        return;
      }
      check(n->child[c]);
    }
  };
  if (!in_data(root_)) {
    if (why) *why = "the root offset points outside the pool's data";
    return false;
  }
  check(root_);
  if (ok && covered != uint64_t{1} << (Dim * kMaxLevel)) {
    ok = false;
    if (why) *why = "the leaves do not cover the domain exactly once";
  }
  return ok;
}

template class Octree<2>;
template class Octree<3>;

}  // namespace hm::persist
