// Persistent pools: a file (on a DAX file system, persistent memory) that holds versions of a
// data structure and commits a new one atomically. Pointers inside the pool are offsets, so a
// pool maps at any address. Layout (docs/persistent-pool.md):
//
//   [0, 4096)      header: magic, format version, sizes, header checksum, two root slots, and a
//                  note its creator keeps there (a run's options), with its own checksum
//   [4096, size)   data, handed out in 64-byte units above the committed top
//
// A commit flushes what the working version wrote, fences, writes the root slot not holding the
// latest version (sequence + 1, root offset, top, checksum), flushes and fences again. Opening
// takes the valid slot with the highest sequence, so a crash at any instant leaves exactly the
// old or the new version. On a MAP_SYNC mapping flushes are cache-line write-backs; on another
// file system the fence is an fdatasync of the file (what the working version wrote is all that is dirty).
//
// Creation is atomic: a new pool is written under a staging name (PATH.creating) and renamed to
// its path by its first commit, so a pool found at a path always holds a committed version, and a
// creator killed at any instant leaves the path as it was (a pool it was replacing included).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace hm::persist {

constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kUnit = 64;
// n rounded up to a multiple of unit.
constexpr uint64_t round_up(uint64_t n, uint64_t unit) { return (n + unit - 1) / unit * unit; }

struct RootSlot {
  uint64_t sequence;  // 0: never written
  uint64_t root;      // offset of the version's root object (0: none)
  uint64_t top;       // end of the data the version uses
  uint64_t checksum;  // of the three fields above
};

struct PoolHeader {
  char magic[8];          // "HMPOOL1\0"
  uint32_t version;       // format version: 1
  uint32_t header_bytes;  // 4096
  uint64_t pool_bytes;    // the whole file
  uint64_t data_offset;   // 4096
  char content[16];       // what the pool holds, NUL-padded ("octree3"); empty for a bare pool
  uint64_t checksum;      // of the fields above
  RootSlot slots[2];
  char note[1024];        // the creator's note, NUL-terminated; empty if none
  uint64_t note_checksum;
};
static_assert(sizeof(PoolHeader) <= kHeaderBytes);

// What a pool's header says, read without opening the pool (Pool::inspect).
struct PoolInfo {
  enum class State { missing, creating, empty, committed };
  State state = State::missing;  // creating: only a staging file exists (its creator stopped
                                 // before the first version); empty: no committed version
  uint64_t sequence = 0;         // the last committed version
  uint64_t committed_bytes = 0;  // the end of its data (0: none)
  uint64_t bytes = 0;            // the pool's size, as its header says
  uint64_t file_bytes = 0;       // the file's size
  std::string content, note;
};

// What a pool reports of its flushes and fences (the crash tests record them).
class PersistObserver {
 public:
  virtual ~PersistObserver() = default;
  virtual void on_flush(uint64_t offset, uint64_t bytes) = 0;
  virtual void on_fence() = 0;
};

class Pool {
 public:
  // Creates a pool of `bytes` (at least 64 KiB) holding `content` (at most 15 characters) with
  // `note` (at most 1023 bytes), both kept in the header. It appears at `path` with its first
  // commit, replacing what was there; until then it is PATH.creating. HM_EIO when the file cannot
  // be created, HM_EBUSY when another process has `path` open or is creating it.
  static int create(const std::string &path, uint64_t bytes, std::unique_ptr<Pool> *out,
                    const std::string &content = "", const std::string &note = "");
  // Reads the header of the pool at `path` (or of its staging file) without opening it for
  // writing: HM_OK with info->state missing, creating, empty or committed; HM_EFORMAT when the
  // file is not a pool this hetmem reads, or is damaged: its header, its only root slot, or
  // truncated below its size (the message says why; *info has what could be read).
  static int inspect(const std::string &path, PoolInfo *info);
  // The staging name a pool has until its first commit.
  static std::string staging_path(const std::string &path) { return path + ".creating"; }
  // Opens an existing pool: HM_EFORMAT (wrong magic, version or checksum, truncated), HM_EBUSY
  // (another process has it open), HM_EIO. The file is never modified by a failed open.
  static int open(const std::string &path, std::unique_ptr<Pool> *out);
  ~Pool();

  template <class T>
  T *at(uint64_t offset) const {
    return reinterpret_cast<T *>(base_ + offset);
  }
  uint64_t offset_of(const void *p) const { return static_cast<uint64_t>(static_cast<const char *>(p) - base_); }

  // Space for the working version, above everything committed. HM_ECAPACITY (and offset 0) when
  // the pool is full; the committed versions are untouched.
  int allocate(uint64_t bytes, uint64_t *offset);
  // Writes `a` then `b` at `offset` (space the working version allocated) through the file rather
  // than the mapping: one copy, no page faults, and a full medium is an error (HM_ECAPACITY, naming
  // the pool), where a store through the mapping into a hole would be a SIGBUS. Marked written;
  // off MAP_SYNC its whole pages start on their way to the medium at once, so that the commit's
  // sync waits only for what is still under way. On MAP_SYNC the kernel's copy into the DAX file
  // bypasses the CPU caches (non-temporal stores), so the commit fences it without write-backs.
  int write(uint64_t offset, const void *a, uint64_t a_bytes, const void *b = nullptr, uint64_t b_bytes = 0);
  // Marks [p, p + bytes) as written by the working version (flushed at the commit).
  void written(const void *p, uint64_t bytes);
  // Makes the working version the committed one, with `root` as its root object. Its sequence
  // number is the last one plus 1, or `sequence` when given (a replica follows its primary).
  int commit(uint64_t root, uint64_t sequence = 0);
  // Moves the top of the working version (a replica takes its primary's); at least the
  // committed top, at most the capacity.
  int set_top(uint64_t top);
  // Bytes flushed by commits since the pool was opened (what persisting has written).
  uint64_t flushed_bytes() const { return flushed_bytes_; }
  // Cache-line bytes the committed versions wrote (the data, without the msync page rounding).
  uint64_t written_line_bytes() const { return written_line_bytes_; }
  // Forgets everything the working version allocated since the last commit.
  void rollback();

  // Root slots that hold something but fail their checksum or bounds (0, 1 or 2), and whether the
  // damaged one was written after the slot in use (its sequence, if readable, is higher): then the
  // version restored is not the newest one committed.
  int damaged_slots() const { return damaged_slots_; }
  bool newest_slot_damaged() const { return newest_slot_damaged_; }
  uint64_t root() const { return committed_.root; }
  uint64_t sequence() const { return committed_.sequence; }
  uint64_t top() const { return top_; }
  uint64_t committed_top() const { return committed_.top; }
  uint64_t capacity() const { return bytes_; }
  bool map_sync() const { return map_sync_; }
  const std::string &path() const { return path_; }
  // What the pool holds and its creator's note, as given at creation (the note is empty if its
  // checksum fails).
  std::string content() const;
  std::string note() const;
  void set_observer(PersistObserver *o) { observer_ = o; }

  static uint64_t checksum(const void *data, size_t bytes);

 private:
  Pool() = default;
  // Makes [offset, offset + bytes) durable at the next fence; `cached`: written through the
  // mapping, so that on MAP_SYNC its cache lines need writing back.
  void flush(uint64_t offset, uint64_t bytes, bool cached = true);
  // Adds [from, to) to `ranges`, joined to the last one where they touch or overlap (a field after
  // its record, a node after its neighbour).
  static void add_range(std::vector<std::pair<uint64_t, uint64_t>> *ranges, uint64_t from, uint64_t to);
  void fence();
  int map(int fd, uint64_t bytes);

  int publish();

  std::string path_;
  std::string staging_;  // the staging file while unpublished (before the first commit)
  int guard_fd_ = -1;    // the pool being replaced, locked until the new one takes its path
  int fd_ = -1;
  char *base_ = nullptr;
  uint64_t bytes_ = 0;
  bool map_sync_ = false;
  RootSlot committed_{};
  int committed_slot_ = -1;
  int damaged_slots_ = 0;
  bool newest_slot_damaged_ = false;
  uint64_t top_ = kHeaderBytes;
  uint64_t backed_ = 0;  // the file's blocks are allocated below this offset
  std::vector<std::pair<uint64_t, uint64_t>> dirty_;  // [offset, end) written since the last commit
  std::vector<std::pair<uint64_t, uint64_t>> through_;  // of them, copied past the caches (MAP_SYNC writes)
  uint64_t flushed_bytes_ = 0;
  uint64_t written_line_bytes_ = 0;
  PersistObserver *observer_ = nullptr;
};

}  // namespace hm::persist
