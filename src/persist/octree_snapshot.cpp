// Snapshot files of a PM-octree: the baseline persistence replaces (Nguyen et al. (SC'17) §5: Gerris writes
// its tree to a file and reads it back at restart). Format in docs/pm-octree.md.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/error.h"
#include "hetmem/hetmem.h"
#include "persist/octree.h"
#include "prim/prim.h"

namespace hm::persist {

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
  SnapshotHeader h{};
  size_t got = 0;  // the header only
  if (prim::read_head(path, &h, sizeof h, &got) != HM_OK) return fail(HM_EIO, "snapshot '%s' cannot be read", path.c_str());
  int rc = check_snapshot_header(h, got, path);
  if (rc != HM_OK) return rc;
  *dim = static_cast<int>(h.dim);
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::save_snapshot(const std::string &path) const {
  if (int rc = settle(); rc != HM_OK) return rc;
  std::string bytes(sizeof(SnapshotHeader), '\0');
  uint64_t n = 0;
  each_settled_leaf([&](const Leaf &l) {
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

// Builds the subtree of octant (coord, level) from the leaves in Morton order starting at
// saved[*next]: a leaf when the next saved leaf is this octant, else a family of children.
template <int Dim>
int Octree<Dim>::build(const void *records, size_t count, size_t *next, const uint32_t *coord, uint32_t level,
                       uint64_t *kid, double *value) {
  const auto *saved = static_cast<const SnapshotLeaf *>(records);
  if (*next >= count) return fail(HM_EFORMAT, "the leaves do not cover the domain");
  const SnapshotLeaf &l = saved[*next];
  const int shift = kMaxLevel - static_cast<int>(level);
  bool inside = l.level >= level && l.level <= static_cast<uint32_t>(kMaxLevel);
  for (int d = 0; d < Dim && inside; ++d) inside = (l.coord[d] >> shift) == (coord[d] >> shift);
  if (!inside) return fail(HM_EFORMAT, "leaf %zu is out of Morton order or overlaps another", *next);
  if (l.level == level) {
    for (int d = 0; d < Dim; ++d)
      if (l.coord[d] != coord[d]) return fail(HM_EFORMAT, "leaf %zu is not aligned to its level", *next);
    *kid = 0;
    *value = l.value;
    ++*next;
    return HM_OK;
  }
  int rc = new_family(coord, level, kid);
  if (rc != HM_OK) return rc;
  uint64_t kids[kChildren];
  double values[kChildren];
  const uint32_t half = 1u << (kMaxLevel - level - 1);
  for (int c = 0; c < kChildren; ++c) {
    uint32_t at[3] = {coord[0], coord[1], coord[2]};
    for (int d = 0; d < Dim; ++d) at[d] += ((c >> d) & 1) ? half : 0;
    if ((rc = build(records, count, next, at, level + 1, &kids[c], &values[c])) != HM_OK) return rc;
  }
  Family *f = mut(*kid);
  std::copy(kids, kids + kChildren, f->child);
  std::memcpy(f->value, values, sizeof values);
  return HM_OK;
}

template <int Dim>
int Octree<Dim>::load_snapshot(const std::string &path, const std::string &pool_path, uint64_t bytes,
                               std::unique_ptr<Octree> *out, const OctreeOptions &options) {
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
  std::unique_ptr<Octree> tree;
  if ((rc = create(pool_path, bytes, &tree, options)) != HM_OK) return rc;
  auto refuse = [&](int code) {
    std::string why = hm_last_error();
    tree.reset();
    prim::remove_path(pool_path);
    return fail(code, "snapshot '%s': %s; no pool was made", path.c_str(), why.c_str());
  };
  size_t next = 0;
  const uint32_t origin[3] = {0, 0, 0};
  rc = tree->build(data.data() + sizeof h, h.leaves, &next, origin, 0, &tree->root_child_, &tree->root_value_);
  if (rc == HM_OK && next != h.leaves) rc = fail(HM_EFORMAT, "%zu leaves follow a complete tree", static_cast<size_t>(h.leaves - next));
  if (rc != HM_OK) return refuse(rc);
  tree->leaves_ = h.leaves;
  if (tree->checksum() != h.checksum) {
    fail(HM_EFORMAT, "its leaves do not match its checksum (the file is damaged)");
    return refuse(HM_EFORMAT);
  }
  if ((rc = tree->persist()) != HM_OK) return refuse(rc);
  *out = std::move(tree);
  return HM_OK;
}

template class Octree<2>;
template class Octree<3>;

}  // namespace hm::persist
