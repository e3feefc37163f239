// Field data on hetmem's persistent tier, for the FDB5 store plugin (src/fdb/fdb_store.cpp, through fields/hooks.h).
// FDB's own protocol decides visibility: a field is archived (copied into a pool), the store is
// flushed (every pool this writer touched is committed: data durable, then the pool's root slot),
// and only then does FDB's catalogue write the index entry that makes the field visible. So a field
// a reader can find was committed, and a reader needs no lock: it reads the field from the pool
// (never mapped: a pool cut under it is an error, not a fault) and checks the field's record.
//
// Each writer process owns its pools (one at a time per database; a full one is committed and the
// next one started), named `<base>.<n>.hmpool` in the database's directory, so many writers archive
// into one database at once without sharing a file. A field is a 64-byte record (magic, length,
// XXH3 checksum of the data, checksum of the record) followed by the data, in 64-byte units:
//
//   [record][data .................][pad]  [record][data ...]...
//
// A reader refuses a pool whose header or only root slot is damaged, a field whose record or
// checksum does not match and a field past the end of a truncated pool, with a message naming the
// pool and the offset; it never returns such bytes as data, and never faults on a cut file.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "persist/pool.h"
#include "tier/emul.h"

namespace hm::fields {

// What a hetmem store is configured with (the `hetmem:` section of an FDB configuration).
struct StoreSettings {
  uint64_t pool_bytes = uint64_t{1} << 30;  // each pool file (sparse until written)
  const EmulProfile *emulate = nullptr;     // charge archive and retrieve as this device (emulated)
  bool verify = true;                       // check each field's checksum on retrieve
  int tier = -1;                            // count the fields written in this tier's budget (-1: none)
};

// Where an archived field lives.
struct FieldSpot {
  std::string pool;  // the pool's path (its final name, also before the pool's first commit)
  uint64_t offset = 0;
  uint64_t length = 0;
};

class FieldWriter {
 public:
  // Pools go to `directory`, named `base.<n>.hmpool` (`base` unique to this writer).
  FieldWriter(std::string directory, std::string base, StoreSettings settings);
  ~FieldWriter();
  FieldWriter(const FieldWriter &) = delete;
  FieldWriter &operator=(const FieldWriter &) = delete;

  // Copies `length` bytes into the current pool (a new one when it is full). `what` names the field
  // in errors. HM_ECAPACITY when the field is larger than a pool or the medium is full, HM_EBUDGET
  // when the budget of the tier the fields are counted in cannot hold it, HM_EIO, HM_EBUSY; on
  // error this field was not archived (hm_last_error() says why). The fields written stay counted
  // in that tier for the rest of the process: they hold room on its medium.
  //
  // Fields of up to kCombineField bytes are gathered in a buffer laid out as in the pool and
  // written with their neighbours, one write per kCombineBytes, as FDB's POSIX store buffers its
  // fields: on ext4 a write call costs more than copying 64 KiB. A failed write of that buffer
  // loses fields whose archive succeeded; it is returned by the call that wrote the buffer and by
  // every later archive and flush of this writer, so that none of them is ever flushed.
  int archive(const void *data, uint64_t length, const std::string &what, FieldSpot *out);
  // Makes every field archived so far durable (commits the pools written since the last flush).
  int flush();

  static constexpr uint64_t kCombineField = uint64_t{256} << 10;
  static constexpr uint64_t kCombineBytes = uint64_t{1} << 20;

 private:
  int next_pool();
  int place(uint64_t offset, const void *data, uint64_t length, const std::string &what);  // record and data
  int write_combined();  // the buffered fields into the pool

  std::string directory_, base_;
  StoreSettings settings_;
  std::unique_ptr<persist::Pool> pool_;
  bool dirty_ = false;
  int next_index_ = 0;
  // Fields not written yet, combined_size_ bytes from pool offset combined_at_. Made once and never
  // zeroed as a whole (a std::vector's resize would clear each field's room before it is copied
  // over, one more pass over every byte): only a field's pad is cleared.
  std::unique_ptr<char[]> combined_;
  uint64_t combined_size_ = 0, combined_at_ = 0;
  std::string lost_;  // why buffered fields could not be written (then every call fails)
  EmulState emul_;
};

// A field's bytes, read from its pool; they live as long as any view of them.
struct FieldView {
  std::shared_ptr<const void> storage;
  const char *data = nullptr;
  uint64_t length = 0;
};

struct PoolFile;

// The field at a spot, read into the caller's memory (the FDB store's retrieve handles). A read of
// the whole field goes straight into the caller's buffer with its record, in one system call, and
// is checked there before it returns (a damaged field fails the read, whatever it left in the
// buffer); a read of a part reads and checks the whole field into memory of its own once and
// copies from it. Either way no read succeeds before the field's record and, if `verify`, its
// checksum are checked. HM_EFORMAT for a damaged or truncated pool or field, HM_EIO when the pool
// cannot be read; the message names the pool and the offset. A pool truncated under the reader
// refuses the fields past the cut and serves the others.
class FieldReader {
 public:
  // Opens the field's pool (once per process, kept while its file exists) and checks that the spot
  // lies inside it; reads nothing of the field.
  int open(const FieldSpot &spot, bool verify);
  // `bytes` of the field's data from `position` (within its length) into `into`.
  int read(uint64_t position, void *into, uint64_t bytes);

 private:
  int read_checked(void *into);  // the record and the whole field's data into `into`, checked

  FieldSpot spot_;
  bool verify_ = true;
  std::shared_ptr<const PoolFile> pool_;
  std::unique_ptr<char[]> copy_;  // the whole field, once a part was asked for
};

// The whole field at `spot`, read and checked into memory of its own (FieldReader).
int read_field(const FieldSpot &spot, bool verify, FieldView *out);
// Charges a retrieve of `bytes` as `profile` (emulated persistent tier); returns the ns charged.
uint64_t charge_read(const EmulProfile &profile, uint64_t bytes);

// The pool naming rule, for wipe and the tools: whether `name` is a field pool, a pool's staging
// file (a writer that has not flushed yet, or was killed), or either.
bool is_committed_pool(const std::string &name);
bool is_staging_pool(const std::string &name);
bool is_field_pool(const std::string &name);
// Removes the staging files (`*.hmpool.creating`) in `directory` whose creator is gone (their lock
// is free): what a writer killed before its first flush leaves. Returns how many were removed.
int remove_abandoned_pools(const std::string &directory);

// The checksum of a field's data (XXH3, 64 bit).
uint64_t field_checksum(const void *data, uint64_t length);

constexpr const char *kPoolContent = "fdbfields1";
constexpr const char *kPoolSuffix = ".hmpool";

}  // namespace hm::fields
