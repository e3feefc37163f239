#include "tier/backing.h"

#include "base/error.h"
#include "base/options.h"
#include "hetmem/hetmem.h"
#include "prim/prim.h"

namespace hm {

namespace {
constexpr uint64_t kFileUnit = uint64_t{2} << 20;
uint64_t round_up(uint64_t v, uint64_t unit) { return (v + unit - 1) / unit * unit; }
}  // namespace

std::string AnonBacking::describe() const {
  return node_ < 0 ? "anonymous memory" : "anonymous memory bound to NUMA node " + std::to_string(node_);
}

int AnonBacking::bind(void *p, size_t size) {
  if (node_ < 0 || prim::numa_node_count() <= 1) return HM_OK;
  int rc = prim::bind_node(p, size, node_, false);
  return rc == HM_OK ? rc : fail(rc, "mbind to NUMA node %d refused (%s)", node_, hm_strerror(rc));
}

int AnonBacking::do_map(size_t size, size_t align, Extent *out) {
  void *p = nullptr;
  int rc = prim::map_anon(size, align, 0, &p);
  if (rc != HM_OK) return fail(rc, "mmap of %s refused (%s)", format_size(size).c_str(), hm_strerror(rc));
  if ((rc = bind(p, size)) != HM_OK) {
    prim::unmap(p, size);
    return rc;
  }
  *out = Extent{p, size, kNoFileOffset, false};
  return HM_OK;
}

int AnonBacking::map_guarded(size_t size, size_t align, Extent *out) {
  void *p = nullptr;
  int rc = prim::map_anon_guarded(size, align, &p);
  if (rc != HM_OK) return fail(rc, "mmap of %s refused (%s)", format_size(size).c_str(), hm_strerror(rc));
  if ((rc = bind(p, size)) != HM_OK) {
    prim::unmap_guarded(p, size);
    return rc;
  }
  *out = Extent{p, size, kNoFileOffset, true};
  return HM_OK;
}

int AnonBacking::resize_guarded(Extent *e, size_t size) {
  if (!e->guarded) return HM_ENOTSUP;
  void *p = nullptr;
  // The mapping keeps its NUMA binding (mremap keeps a mapping's policy, and it stays one mapping).
  if (int rc = prim::resize_guarded(e->addr, e->size, size, &p); rc != HM_OK) return rc;
  e->addr = p;
  e->size = size;
  return HM_OK;
}

int AnonBacking::move_guarded(const Extent &from, const Extent &to) {
  if (!from.guarded || !to.guarded || to.size < from.size) return HM_ENOTSUP;
  return prim::move_guarded(from.addr, from.size, to.addr, to.size);
}

int AnonBacking::do_unmap(const Extent &e) {
  return e.guarded ? prim::unmap_guarded(e.addr, e.size) : prim::unmap(e.addr, e.size);
}

int AnonBacking::do_install_at(const Extent &from, Extent *at) {
  int rc = prim::remap_fixed(from.addr, from.size, at->addr);
  if (rc == HM_OK) at->file_offset = kNoFileOffset;
  return rc;
}

FileBacking::FileBacking(std::string path, int fd, uint64_t size)
    : path_(std::move(path)), fd_(fd), size_(size) {
  free_[0] = size_ / kFileUnit * kFileUnit;
}

FileBacking::~FileBacking() { prim::close_fd(fd_); }

int FileBacking::open(const std::string &path, uint64_t size, FileBacking **out) {
  if (size != 0 && size < kFileUnit)
    return fail(HM_EINVAL, "file pool '%s': size %s is too small (at least 2 MiB)", path.c_str(),
                format_size(size).c_str());
  int fd = -1;
  uint64_t actual = 0;
  int rc = prim::open_pool_file(path, size, &fd, &actual);
  if (rc == HM_EINVAL)
    return fail(HM_EINVAL, "file pool '%s' is empty; give a size (file:%s:4G or HM_POOL_SIZE)", path.c_str(),
                path.c_str());
  if (rc != HM_OK)
    return fail(HM_EIO, "file pool '%s' cannot be created or sized to %s (check the directory exists and is "
                "writable, and the file system has room)", path.c_str(), format_size(size).c_str());
  if (actual < kFileUnit) {
    prim::close_fd(fd);
    return fail(HM_EINVAL, "file pool '%s' is %s, too small (at least 2 MiB)", path.c_str(),
                format_size(actual).c_str());
  }
  auto *b = new FileBacking(path, fd, actual);
  // Probe MAP_SYNC once so the tier can say whether stores are durable after a flush.
  void *probe = nullptr;
  if (prim::reserve(kFileUnit, kFileUnit, &probe) == HM_OK) {
    bool synced = false;
    if (prim::map_file_fixed(probe, kFileUnit, fd, 0, true, &synced) == HM_OK) b->map_sync_ = synced;
    prim::unmap(probe, kFileUnit);
  }
  *out = b;
  return HM_OK;
}

std::string FileBacking::describe() const {
  return "file pool " + path_ + " (" + format_size(size_) + (map_sync_ ? ", MAP_SYNC" : ", msync") + ")";
}

uint64_t FileBacking::free_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t sum = 0;
  for (auto &kv : free_) sum += kv.second;
  return sum;
}

int FileBacking::take_range(uint64_t size, uint64_t *offset) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    *offset = it->first;
    uint64_t rest = it->second - size, next = it->first + size;
    free_.erase(it);
    if (rest) free_[next] = rest;
    return HM_OK;
  }
  return HM_ECAPACITY;
}

void FileBacking::give_range(uint64_t offset, uint64_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = free_.emplace(offset, size).first;
  auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

int FileBacking::do_map(size_t size, size_t align, Extent *out) {
  uint64_t len = round_up(size, kFileUnit), off = 0;
  if (take_range(len, &off) != HM_OK)
    return fail(HM_ECAPACITY, "file pool '%s' is full: %s requested, %s free", path_.c_str(),
                format_size(len).c_str(), format_size(free_bytes()).c_str());
  void *addr = nullptr;
  int rc = prim::reserve(size, align, &addr);
  if (rc == HM_OK) {
    bool synced = false;
    rc = prim::map_file_fixed(addr, size, fd_, off, map_sync_, &synced);
    if (rc != HM_OK) prim::unmap(addr, size);
  }
  if (rc != HM_OK) {
    give_range(off, len);
    return fail(rc, "mapping %s of file pool '%s' failed (%s)", format_size(size).c_str(), path_.c_str(),
                hm_strerror(rc));
  }
  *out = Extent{addr, size, off};
  return HM_OK;
}

void FileBacking::release_storage(const Extent &e) {
  if (e.file_offset != kNoFileOffset) give_range(e.file_offset, round_up(e.size, kFileUnit));
}

int FileBacking::do_unmap(const Extent &e) {
  int rc = prim::unmap(e.addr, e.size);
  release_storage(e);
  return rc;
}

int FileBacking::do_install_at(const Extent &from, Extent *at) {
  bool synced = false;
  int rc = prim::map_file_fixed(at->addr, from.size, fd_, from.file_offset, map_sync_, &synced);
  if (rc != HM_OK) return rc;
  prim::unmap(from.addr, from.size);
  at->file_offset = from.file_offset;
  return HM_OK;
}

}  // namespace hm
