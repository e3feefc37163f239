// Backings: where a tier's bytes come from (Umpire's "memory resource" layer). A backing maps
// extents (aligned address ranges with storage behind them) and can put storage for an extent at
// a fixed address, which is how an allocation changes tier without changing address.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "hetmem/hetmem.h"

namespace hm {

constexpr uint64_t kNoFileOffset = ~uint64_t{0};

struct Extent {
  void *addr = nullptr;
  size_t size = 0;
  uint64_t file_offset = kNoFileOffset;  // file backings: where the bytes live in the file
  bool guarded = false;                  // an inaccessible page on each side (anonymous only)
};

class Backing {
 public:
  virtual ~Backing() = default;
  // Maps a new extent of `size` bytes (a multiple of the page size) aligned to `align`.
  int map(size_t size, size_t align, Extent *out) { return do_map(size, align, out); }
  // Maps an extent between two inaccessible pages; backings that cannot map it plainly.
  virtual int map_guarded(size_t size, size_t align, Extent *out) { return do_map(size, align, out); }
  // Resizes a guarded extent to `size` bytes, keeping its pages (e->addr may change); HM_ENOTSUP
  // where the backing cannot, and on any failure the extent is as it was.
  virtual int resize_guarded(Extent *, size_t) { return HM_ENOTSUP; }
  // Moves a guarded extent's pages onto `to`, a larger guarded extent of this backing
  // (map_guarded), none copied; `from`'s address range is returned. HM_ENOTSUP where the backing
  // cannot; on any failure both are as they were.
  virtual int move_guarded(const Extent &, const Extent &) { return HM_ENOTSUP; }
  // Unmaps the extent's address range and releases its storage.
  int unmap(const Extent &e) { return do_unmap(e); }
  // Replaces whatever is at e.addr with this backing's storage `from` (same size), consuming
  // `from`'s temporary address range. Used by hm_move after copying into `from`.
  int install_at(const Extent &from, Extent *at) { return do_install_at(from, at); }
  // Releases storage only (the address range has already been replaced).
  virtual void release_storage(const Extent &) {}
  virtual bool is_file() const { return false; }
  virtual int numa_node() const { return -1; }
  virtual uint64_t capacity() const = 0;
  virtual std::string describe() const = 0;

 private:
  virtual int do_map(size_t size, size_t align, Extent *out) = 0;
  virtual int do_unmap(const Extent &e) = 0;
  virtual int do_install_at(const Extent &from, Extent *at) = 0;
};

// Anonymous memory, optionally bound to a NUMA node (node < 0: the kernel's default policy).
class AnonBacking final : public Backing {
 public:
  AnonBacking(int node, uint64_t capacity) : node_(node), capacity_(capacity) {}
  int numa_node() const override { return node_; }
  uint64_t capacity() const override { return capacity_; }
  std::string describe() const override;
  int map_guarded(size_t size, size_t align, Extent *out) override;
  int resize_guarded(Extent *e, size_t size) override;
  int move_guarded(const Extent &from, const Extent &to) override;

 private:
  int bind(void *p, size_t size);
  int do_map(size_t size, size_t align, Extent *out) override;
  int do_unmap(const Extent &e) override;
  int do_install_at(const Extent &from, Extent *at) override;
  int node_;
  uint64_t capacity_;
};

// A pool file mapped shared (MAP_SYNC where the file system is DAX). Space inside the file is
// handed out first-fit in 2 MiB units.
class FileBacking final : public Backing {
 public:
  static int open(const std::string &path, uint64_t size, FileBacking **out);
  ~FileBacking() override;
  bool is_file() const override { return true; }
  uint64_t capacity() const override { return size_; }
  std::string describe() const override;
  void release_storage(const Extent &e) override;
  bool map_sync() const { return map_sync_; }
  const std::string &path() const { return path_; }
  uint64_t free_bytes() const;

 private:
  FileBacking(std::string path, int fd, uint64_t size);
  int do_map(size_t size, size_t align, Extent *out) override;
  int do_unmap(const Extent &e) override;
  int do_install_at(const Extent &from, Extent *at) override;
  int take_range(uint64_t size, uint64_t *offset);
  void give_range(uint64_t offset, uint64_t size);

  std::string path_;
  int fd_;
  uint64_t size_;
  bool map_sync_ = false;
  mutable std::mutex mutex_;
  std::map<uint64_t, uint64_t> free_;  // offset -> length, coalesced
};

}  // namespace hm
