#include "persist/pool.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/options.h"
#include "hetmem/hetmem.h"
#include "prim/prim.h"

namespace hm::persist {
namespace {

constexpr char kMagic[8] = {'H', 'M', 'P', 'O', 'O', 'L', '1', '\0'};
constexpr uint32_t kVersion = 1;

uint64_t header_checksum(const PoolHeader &h) {
  return Pool::checksum(&h, offsetof(PoolHeader, checksum));
}

uint64_t slot_checksum(const RootSlot &s) { return Pool::checksum(&s, offsetof(RootSlot, checksum)); }

bool slot_valid(const RootSlot &s, uint64_t pool_bytes) {
  return s.sequence != 0 && s.checksum == slot_checksum(s) && s.top >= kHeaderBytes && s.top <= pool_bytes &&
         s.root < s.top;
}

// Why a header is not one this hetmem reads ("" if it is).
std::string header_problem(const PoolHeader &h) {
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return "not a hetmem persistent pool (wrong magic)";
  if (h.version != kVersion)
    return "format version " + std::to_string(h.version) + "; this hetmem reads version " + std::to_string(kVersion);
  if (h.checksum != header_checksum(h)) return "header checksum mismatch (the header is damaged)";
  return "";
}

// The creator's note, "" when its checksum fails (a damaged note is no note).
std::string note_of(const PoolHeader &h) {
  if (h.note_checksum != Pool::checksum(h.note, sizeof h.note)) return "";
  return std::string(h.note, strnlen(h.note, sizeof h.note));
}

}  // namespace

uint64_t Pool::checksum(const void *data, size_t bytes) {
  // FNV-1a, 64 bit: enough to tell a torn or damaged record from a written one.
  uint64_t h = 1469598103934665603ull;
  auto *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

int Pool::map(int fd, uint64_t bytes) {
  void *p = nullptr;
  bool synced = false;
  int rc = prim::map_file(fd, bytes, true, &p, &synced);
  if (rc != HM_OK) return rc;
  base_ = static_cast<char *>(p);
  // With HM_PM_THP=1, 2 MiB folios where the file system offers them (ext4, XFS; tmpfs only when
  // mounted huge=always or within_size, as allocate() preallocates its pages through no mapping
  // that could take the advice). Not by default: a new pool's first writes then fault once per
  // 2 MiB instead of once per 4 KiB page (a random tree's first refinement: 1,590 faults down to
  // 4, about 1.6 times as fast), but a store into a clean folio dirties all of it, so every later
  // persist writes back whole 2 MiB folios. Measured on ext4: ten persists of a local refinement
  // of a 1.8 million-leaf tree 107 against 19 MB to the disk and 37-47 against 16-18 ms; hetmem-amr
  // at level 7, 136 against 21 MB over 30 steps. A first refinement happens once, persists every
  // step. On DAX there is no page cache (the file system maps 2 MiB pages itself).
  long thp = 0;
  if (option_int(Option::kPmThp, &thp) == HM_OK && thp != 0) prim::advise_huge(base_, bytes, true);
  map_sync_ = synced;
  bytes_ = bytes;
  return HM_OK;
}

int Pool::create(const std::string &path, uint64_t bytes, std::unique_ptr<Pool> *out, const std::string &content,
                 const std::string &note) {
  if (content.size() >= sizeof PoolHeader{}.content)
    return fail(HM_EINVAL, "persistent pool '%s': content name '%s' is longer than 15 characters", path.c_str(),
                content.c_str());
  if (note.size() >= sizeof PoolHeader{}.note)
    return fail(HM_EINVAL, "persistent pool '%s': its note has %zu bytes, at most %zu fit in the header", path.c_str(),
                note.size(), sizeof PoolHeader{}.note - 1);
  if (bytes < 16 * kHeaderBytes)
    return fail(HM_EINVAL, "persistent pool '%s': %s is too small (at least 64 KiB)", path.c_str(),
                format_size(bytes).c_str());
  bytes = round_up(bytes, kUnit);
  std::unique_ptr<Pool> pool(new Pool());
  pool->path_ = path;
  // A pool this one replaces stays whole, and closed to other openers, until the new one takes
  // its path.
  int guard = -1;
  uint64_t guard_size = 0;
  if (prim::path_exists(path) && prim::open_existing(path, &guard, &guard_size) == HM_OK) {
    if (prim::lock_file(guard) != HM_OK) {
      prim::close_fd(guard);
      return fail(HM_EBUSY, "persistent pool '%s' is open in another process", path.c_str());
    }
    pool->guard_fd_ = guard;
  }
  const std::string staging = staging_path(path);
  int fd = -1;
  if (int rc = prim::create_staging_file(staging, bytes, &fd); rc != HM_OK)
    return rc == HM_EBUSY ? fail(HM_EBUSY, "persistent pool '%s' is being created by another process ('%s' is locked)",
                                 path.c_str(), staging.c_str())
                          : fail(HM_EIO, "persistent pool '%s' cannot be created as '%s' (check the directory and "
                                 "free space)", path.c_str(), staging.c_str());
  pool->fd_ = fd;
  pool->staging_ = staging;
  if (pool->map(fd, bytes) != HM_OK) return fail(HM_EIO, "persistent pool '%s' cannot be mapped", path.c_str());
  PoolHeader *h = pool->at<PoolHeader>(0);
  std::memset(static_cast<void *>(h), 0, kHeaderBytes);
  std::memcpy(h->magic, kMagic, sizeof kMagic);
  h->version = kVersion;
  h->header_bytes = kHeaderBytes;
  h->pool_bytes = bytes;
  h->data_offset = kHeaderBytes;
  std::memcpy(h->content, content.data(), content.size());
  h->checksum = header_checksum(*h);
  std::memcpy(h->note, note.data(), note.size());
  h->note_checksum = checksum(h->note, sizeof h->note);
  pool->flush(0, kHeaderBytes);
  pool->fence();
  *out = std::move(pool);
  return HM_OK;
}

int Pool::publish() {
  if (prim::publish_file(fd_, staging_, path_) != HM_OK)
    return fail(HM_EIO, "persistent pool '%s': its first version is committed in '%s', which could not be renamed to "
                "its path", path_.c_str(), staging_.c_str());
  staging_.clear();
  if (guard_fd_ >= 0) prim::close_fd(guard_fd_);
  guard_fd_ = -1;
  return HM_OK;
}

int Pool::open(const std::string &path, std::unique_ptr<Pool> *out) {
  int fd = -1;
  uint64_t size = 0;
  if (prim::open_existing(path, &fd, &size) != HM_OK)
    return fail(HM_EIO, "persistent pool '%s' cannot be opened (missing, or not readable and writable)", path.c_str());
  auto reject = [&](int code, const std::string &why) {
    prim::close_fd(fd);
    return fail(code, "persistent pool '%s': %s; the file was left as it is", path.c_str(), why.c_str());
  };
  if (size < kHeaderBytes)
    return reject(HM_EFORMAT, "truncated: " + std::to_string(size) + " bytes, less than its 4096-byte header");
  if (prim::lock_file(fd) != HM_OK) {
    prim::close_fd(fd);
    return fail(HM_EBUSY, "persistent pool '%s' is open in another process (one writer at a time)", path.c_str());
  }
  std::unique_ptr<Pool> pool(new Pool());
  pool->path_ = path;
  if (pool->map(fd, size) != HM_OK) return reject(HM_EIO, "cannot be mapped");
  const PoolHeader &h = *pool->at<PoolHeader>(0);
  if (const std::string why = header_problem(h); !why.empty()) {
    prim::unmap(pool->base_, size);
    pool->base_ = nullptr;
    return reject(HM_EFORMAT, why);
  }
  if (h.pool_bytes > size) {
    uint64_t want = h.pool_bytes;
    prim::unmap(pool->base_, size);
    pool->base_ = nullptr;
    return reject(HM_EFORMAT, "truncated: the header says " + std::to_string(want) + " bytes, the file has " +
                                  std::to_string(size));
  }
  pool->fd_ = fd;
  pool->bytes_ = h.pool_bytes;
  for (int s = 0; s < 2; ++s)
    if (slot_valid(h.slots[s], h.pool_bytes) && h.slots[s].sequence > pool->committed_.sequence) {
      pool->committed_ = h.slots[s];
      pool->committed_slot_ = s;
    }
  for (int s = 0; s < 2; ++s) {
    const RootSlot &slot = h.slots[s];
    const bool written = slot.sequence || slot.root || slot.top || slot.checksum;
    if (!written || slot_valid(slot, h.pool_bytes)) continue;
    ++pool->damaged_slots_;
    // A damaged slot is the newer one unless its (possibly damaged) sequence says otherwise: the
    // slots alternate, so the one not in use was written last unless the last commit used it.
    if (pool->committed_slot_ < 0 || slot.sequence != pool->committed_.sequence - 1) pool->newest_slot_damaged_ = true;
  }
  pool->top_ = pool->committed_slot_ >= 0 ? pool->committed_.top : kHeaderBytes;
  // The committed data is about to be read whole (restore checks every family): its pages are
  // mapped in one call rather than faulted one by one. Only the data: a pool is mostly holes.
  prim::prefault(pool->base_, pool->top_);
  *out = std::move(pool);
  return HM_OK;
}

int Pool::inspect(const std::string &path, PoolInfo *info) {
  *info = PoolInfo{};
  if (!prim::path_exists(path)) {
    if (prim::path_exists(staging_path(path))) info->state = PoolInfo::State::creating;
    return HM_OK;
  }
  PoolHeader h;
  int fd = -1;
  uint64_t size = 0;
  if (prim::open_readonly(path, &fd, &size) != HM_OK)
    return fail(HM_EIO, "persistent pool '%s' cannot be read", path.c_str());
  const bool whole = size >= sizeof h && prim::read_at(fd, &h, sizeof h, 0) == HM_OK;
  prim::close_fd(fd);
  if (!whole)
    return fail(HM_EFORMAT, "persistent pool '%s': truncated: %llu bytes, less than its header", path.c_str(),
                static_cast<unsigned long long>(size));
  if (const std::string why = header_problem(h); !why.empty())
    return fail(HM_EFORMAT, "persistent pool '%s': %s", path.c_str(), why.c_str());
  info->state = PoolInfo::State::empty;
  bool damaged = false;
  for (const RootSlot &slot : h.slots) {
    if (slot_valid(slot, h.pool_bytes)) {
      if (slot.sequence > info->sequence) {
        info->sequence = slot.sequence;
        info->committed_bytes = slot.top;
        info->state = PoolInfo::State::committed;
      }
    } else if (slot.sequence || slot.root || slot.top || slot.checksum) {
      damaged = true;
    }
  }
  info->bytes = h.pool_bytes;
  info->file_bytes = size;
  info->content.assign(h.content, strnlen(h.content, sizeof h.content));
  info->note = note_of(h);
  // A damaged slot beside a valid one is a commit that a crash interrupted: the other version
  // stands. Without a valid one, no version can be trusted.
  if (damaged && info->state != PoolInfo::State::committed)
    return fail(HM_EFORMAT, "persistent pool '%s': damaged: its root slot is damaged and no committed version "
                "can be read", path.c_str());
  if (size < h.pool_bytes)
    return fail(HM_EFORMAT, "persistent pool '%s': truncated: the file has %llu bytes, its header says %llu%s",
                path.c_str(), static_cast<unsigned long long>(size), static_cast<unsigned long long>(h.pool_bytes),
                size < info->committed_bytes ? " (its committed data is cut off)" : "");
  return HM_OK;
}

std::string Pool::note() const { return note_of(*at<PoolHeader>(0)); }

std::string Pool::content() const {
  const PoolHeader &h = *at<PoolHeader>(0);
  return std::string(h.content, strnlen(h.content, sizeof h.content));
}

Pool::~Pool() {
  if (base_) prim::unmap(base_, bytes_);
  // A pool closed before its first commit was never a pool: its staging file goes (removed while
  // still locked, so no other creator is using it).
  if (!staging_.empty()) prim::remove_path(staging_);
  if (fd_ >= 0) prim::close_fd(fd_);
  if (guard_fd_ >= 0) prim::close_fd(guard_fd_);
}

int Pool::allocate(uint64_t bytes, uint64_t *offset) {
  uint64_t need = round_up(bytes, kUnit);
  if (need == 0 || top_ + need > bytes_) {
    *offset = 0;
    return fail(HM_ECAPACITY, "persistent pool '%s' is full: %s requested, %s free (the committed version is intact)",
                path_.c_str(), format_size(need).c_str(), format_size(bytes_ - top_).c_str());
  }
  if (top_ + need > backed_) {
    // Blocks for the space ahead, a chunk at a time: a full medium is an error here rather than a
    // SIGBUS at a store through the mapping. (Not its pages: mapping them in for writing would
    // dirty zeros that the next fdatasync writes out.) The chunk doubles with the backed space,
    // from 64 KiB up to 8 MiB: on ext4, new pages written through the mapping behind 64 KiB calls
    // cost about 1.5 times as much as behind 1-8 MiB calls, with runs several times slower. On a
    // DAX file system, whose blocks are zeroed as they are allocated, one call zeroes at most
    // 8 MiB. A medium without room for a chunk gives what this allocation needs, if it has that.
    constexpr uint64_t kMinChunk = uint64_t{64} << 10, kMaxChunk = uint64_t{8} << 20;
    const uint64_t chunk = std::clamp(backed_, kMinChunk, kMaxChunk);
    const uint64_t page = prim::kPageSize;
    const uint64_t from = std::max(backed_, top_) / page * page;
    const uint64_t least = std::min(bytes_, round_up(top_ + need, page));
    uint64_t to = std::min(bytes_, round_up(std::max(top_ + need, from + chunk), page));
    int rc = prim::back_file(fd_, from, to - from);
    if (rc == HM_ECAPACITY && to > least) rc = prim::back_file(fd_, from, (to = least) - from);  // the last blocks
    if (rc == HM_ECAPACITY) {
      *offset = 0;
      return fail(HM_ECAPACITY, "persistent pool '%s': its medium is full (%s could not be allocated at %s; the "
                  "committed version is intact)", path_.c_str(), format_size(to - from).c_str(),
                  format_size(from).c_str());
    }
    backed_ = rc == HM_OK ? to : bytes_;  // a file system without preallocation: faults as before
  }
  *offset = top_;
  top_ += need;
  return HM_OK;
}

int Pool::write(uint64_t offset, const void *a, uint64_t a_bytes, const void *b, uint64_t b_bytes) {
  if (offset < committed_.top || offset + a_bytes + b_bytes > top_)
    return fail(HM_EINVAL, "persistent pool '%s': a write at %llu of %llu bytes is outside the working version",
                path_.c_str(), static_cast<unsigned long long>(offset),
                static_cast<unsigned long long>(a_bytes + b_bytes));
  if (int rc = prim::write_two_at(fd_, a, a_bytes, b, b_bytes, offset); rc != HM_OK)
    return rc == HM_ECAPACITY ? fail(HM_ECAPACITY, "persistent pool '%s': its medium is full (%s could not be written "
                                     "at %s)", path_.c_str(), format_size(a_bytes + b_bytes).c_str(),
                                     format_size(offset).c_str())
                              : fail(HM_EIO, "persistent pool '%s': writing %s at %s failed", path_.c_str(),
                                     format_size(a_bytes + b_bytes).c_str(), format_size(offset).c_str());
  const uint64_t end = offset + a_bytes + b_bytes;
  // The kernel copies a write into a DAX file with non-temporal stores (copy_from_iter_flushcache):
  // no cache line of it is left to write back, only the commit's fence.
  if (map_sync_) {
    add_range(&through_, offset, end);
    return HM_OK;
  }
  add_range(&dirty_, offset, end);
  // The medium starts on the whole pages written while the writer goes on, so that the commit's
  // sync waits for the last of them only, where it would write them all. A page the next write
  // shares is left to the commit, not written twice.
  const uint64_t page = prim::kPageSize;
  const uint64_t from = round_up(offset, page), to = end / page * page;
  if (to > from) prim::start_writeback(fd_, from, to - from);
  return HM_OK;
}

void Pool::written(const void *p, uint64_t bytes) {
  const uint64_t off = offset_of(p);
  add_range(&dirty_, off, off + bytes);
}

void Pool::add_range(std::vector<std::pair<uint64_t, uint64_t>> *ranges, uint64_t from, uint64_t to) {
  if (!ranges->empty() && ranges->back().second >= from && ranges->back().first <= to) {
    ranges->back().first = std::min(ranges->back().first, from);
    ranges->back().second = std::max(ranges->back().second, to);
    return;
  }
  ranges->emplace_back(from, to);
}

int Pool::set_top(uint64_t top) {
  if (top < committed_.top || top > bytes_ || top % kUnit != 0)
    return fail(HM_EINVAL, "persistent pool '%s': top %llu is outside %llu..%llu", path_.c_str(),
                static_cast<unsigned long long>(top), static_cast<unsigned long long>(committed_.top),
                static_cast<unsigned long long>(bytes_));
  top_ = top;
  return HM_OK;
}

void Pool::flush(uint64_t offset, uint64_t bytes, bool cached) {
  flushed_bytes_ += bytes;
  if (observer_) observer_->on_flush(offset, bytes);
  // On a MAP_SYNC mapping, cache-line write-backs; elsewhere the page cache's dirty pages reach
  // the medium at the fence, all in one fdatasync (what this version wrote is all that is dirty).
  if (map_sync_ && cached) prim::flush_lines(base_ + offset, bytes);
}

void Pool::fence() {
  if (observer_) observer_->on_fence();
  if (map_sync_) prim::store_fence();
  else prim::sync_data(fd_);
}

int Pool::commit(uint64_t root, uint64_t sequence) {
  if (root != 0 && (root < kHeaderBytes || root >= top_))
    return fail(HM_EINVAL, "commit: root offset %llu is outside the data (%llu..%llu)",
                static_cast<unsigned long long>(root), static_cast<unsigned long long>(kHeaderBytes),
                static_cast<unsigned long long>(top_));
  // 1. Everything the new version wrote is durable before 2. the slot that names it. Ranges are
  // merged in offset order, so a line is flushed once (off MAP_SYNC they are counted in whole
  // pages, what the page cache writes back).
  std::sort(dirty_.begin(), dirty_.end());
  for (size_t i = 0, line_end = 0; i < dirty_.size(); ++i) {
    // Cache lines this version wrote (what reaches the medium on persistent memory).
    uint64_t lo = std::max<uint64_t>(dirty_[i].first & ~uint64_t{63}, line_end);
    uint64_t hi = (dirty_[i].second + 63) & ~uint64_t{63};
    if (hi > lo) written_line_bytes_ += hi - lo, line_end = hi;
  }
  if (!map_sync_)
    for (auto &r : dirty_) {
      r.first &= ~uint64_t{prim::kPageSize - 1};
      r.second = std::min(bytes_, (r.second + prim::kPageSize - 1) & ~uint64_t{prim::kPageSize - 1});
    }
  std::sort(dirty_.begin(), dirty_.end());
  for (size_t i = 0; i < dirty_.size();) {
    uint64_t lo = dirty_[i].first, hi = dirty_[i].second;
    for (++i; i < dirty_.size() && dirty_[i].first <= hi; ++i) hi = std::max(hi, dirty_[i].second);
    flush(lo, hi - lo);
  }
  for (auto &r : through_) {
    written_line_bytes_ += round_up(r.second, 64) - r.first / 64 * 64;
    flush(r.first, r.second - r.first, false);
  }
  fence();
  int slot = committed_slot_ == 0 ? 1 : 0;
  RootSlot next{sequence ? sequence : committed_.sequence + 1, root, top_, 0};
  next.checksum = slot_checksum(next);
  PoolHeader *h = at<PoolHeader>(0);
  h->slots[slot] = next;
  flush(offsetof(PoolHeader, slots) + slot * sizeof(RootSlot), sizeof(RootSlot));
  fence();
  committed_ = next;
  committed_slot_ = slot;
  dirty_.clear();
  through_.clear();
  return staging_.empty() ? HM_OK : publish();
}

void Pool::rollback() {
  top_ = committed_slot_ >= 0 ? committed_.top : kHeaderBytes;
  dirty_.clear();
  through_.clear();
}

}  // namespace hm::persist
