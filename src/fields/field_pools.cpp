#include "fields/field_pools.h"

// XXH3 compiled in (header only): libhetmem.so needs no libxxhash at start-up. Its AVX2 loop is
// compiled beside the baseline one and chosen at run time (xxHash's own x86 dispatch scheme):
// the hash is the same either way, about 3 times as fast on a long field (800 KiB: 13 against
// 41 us), which is a few % of archiving it.
#define XXH_INLINE_ALL
#if defined(__x86_64__)
#define XXH_X86DISPATCH
#define XXH_DISPATCH_AVX2 1
#define XXH_TARGET_AVX2 __attribute__((__target__("avx2")))
#include <immintrin.h>
#endif
#include <xxhash.h>

#include <cstring>
#include <map>
#include <mutex>

#include "base/error.h"
#include "base/options.h"
#include "hetmem/hetmem.h"
#include "prim/prim.h"

namespace hm::fields {
namespace {

constexpr char kRecordMagic[8] = {'H', 'M', 'F', 'I', 'E', 'L', 'D', '1'};

struct FieldRecord {
  char magic[8];
  uint64_t length;
  uint64_t data_checksum;
  uint64_t reserved[4];
  uint64_t record_checksum;  // of the fields above
};
static_assert(sizeof(FieldRecord) == persist::kUnit);

uint64_t record_checksum(const FieldRecord &r) { return XXH3_64bits(&r, offsetof(FieldRecord, record_checksum)); }

std::string at_text(const FieldSpot &s) {
  return "pool '" + s.pool + "' at offset " + std::to_string(s.offset) + " (" + std::to_string(s.length) + " bytes)";
}

}  // namespace

#if defined(__x86_64__)
namespace {
__attribute__((__target__("avx2"), noinline)) uint64_t long_checksum_avx2(const void *data, size_t length) {
  return XXH3_hashLong_64b_internal(data, length, XXH3_kSecret, sizeof(XXH3_kSecret), XXH3_accumulate_512_avx2,
                                    XXH3_scrambleAcc_avx2);
}
}  // namespace
#endif

uint64_t field_checksum(const void *data, uint64_t length) {
#if defined(__x86_64__)
  if (length > XXH3_MIDSIZE_MAX && prim::cpu_has(prim::CpuFeature::kAvx2)) return long_checksum_avx2(data, length);
#endif
  return XXH3_64bits(data, length);
}

namespace {
// A name that is more than the suffix and ends with it.
bool named(const std::string &name, const std::string &suffix) {
  return name.size() > suffix.size() && name.ends_with(suffix);
}
}  // namespace

bool is_committed_pool(const std::string &name) { return named(name, kPoolSuffix); }
bool is_staging_pool(const std::string &name) { return named(name, persist::Pool::staging_path(kPoolSuffix)); }
bool is_field_pool(const std::string &name) { return is_committed_pool(name) || is_staging_pool(name); }

FieldWriter::FieldWriter(std::string directory, std::string base, StoreSettings settings)
    : directory_(std::move(directory)), base_(std::move(base)), settings_(settings) {}

FieldWriter::~FieldWriter() {
  // Unflushed fields are not visible (FDB writes no index entry for them), so they need not be
  // kept; what was committed stays. A pool never committed removes its staging file.
  pool_.reset();
}

int FieldWriter::next_pool() {
  if (int rc = write_combined(); rc != HM_OK) return rc;
  if (pool_ && dirty_) {
    if (int rc = pool_->commit(0); rc != HM_OK) return rc;
  }
  pool_.reset();
  const std::string path = directory_ + "/" + base_ + "." + std::to_string(next_index_++) + kPoolSuffix;
  if (int rc = persist::Pool::create(path, settings_.pool_bytes, &pool_, kPoolContent); rc != HM_OK) return rc;
  dirty_ = false;
  return HM_OK;
}

int FieldWriter::write_combined() {
  if (!lost_.empty()) return fail(HM_EIO, "%s", lost_.c_str());
  if (combined_size_ == 0) return HM_OK;
  const uint64_t at = combined_at_, bytes = combined_size_;
  const int rc = pool_->write(at, combined_.get(), bytes, nullptr, 0);
  combined_size_ = 0;
  if (rc == HM_OK) return HM_OK;
  lost_ = "hetmem store: fields archived into pool '" + pool_->path() + "' at offsets " + std::to_string(at) + ".." +
          std::to_string(at + bytes) + " could not be written (" + hm_last_error() +
          "); they and every field after them are never flushed by this writer";
  return fail(rc, "%s", lost_.c_str());
}

int FieldWriter::archive(const void *data, uint64_t length, const std::string &what, FieldSpot *out) {
  if (!lost_.empty()) return fail(HM_EIO, "%s", lost_.c_str());
  const uint64_t need = sizeof(FieldRecord) + length;
  if (need > settings_.pool_bytes - persist::kHeaderBytes)
    return fail(HM_ECAPACITY, "hetmem store: field %s has %llu bytes, more than a pool of %s holds (hetmem.pool_bytes "
                "in the FDB configuration); nothing was archived", what.c_str(),
                static_cast<unsigned long long>(length), format_size(settings_.pool_bytes).c_str());
  if (!pool_)
    if (int rc = next_pool(); rc != HM_OK) return rc;
  uint64_t offset = 0;
  if (pool_->allocate(need, &offset) != HM_OK) {
    // Full: commit this pool and start the next one.
    if (int rc = next_pool(); rc != HM_OK) return rc;
    if (int rc = pool_->allocate(need, &offset); rc != HM_OK) return rc;
  }
  // The field's room on the medium, in the budget of the tier it is counted in (one budget with
  // the process's own allocations there).
  const uint64_t held = persist::round_up(need, persist::kUnit);
  if (settings_.tier >= 0 && hm_tier_claim(settings_.tier, held) != HM_OK) {
    const std::string why = hm_last_error();
    pool_->set_top(offset);
    return fail(HM_EBUDGET, "hetmem store: field %s (%llu bytes) not archived: %s (hetmem.tier in the FDB "
                "configuration)", what.c_str(), static_cast<unsigned long long>(length), why.c_str());
  }
  const int rc = place(offset, data, length, what);
  if (rc != HM_OK) {
    if (settings_.tier >= 0) hm_tier_unclaim(settings_.tier, held);
    return rc;
  }
  dirty_ = true;
  if (settings_.emulate) emul_charge(*settings_.emulate, emul_, 0, need, 0, kEmulCopy);
  out->pool = pool_->path();
  out->offset = offset + sizeof(FieldRecord);
  out->length = length;
  return HM_OK;
}

int FieldWriter::place(uint64_t offset, const void *data, uint64_t length, const std::string &what) {
  const uint64_t need = sizeof(FieldRecord) + length;
  FieldRecord r{};
  std::memcpy(r.magic, kRecordMagic, sizeof kRecordMagic);
  r.length = length;
  r.data_checksum = field_checksum(data, length);
  r.record_checksum = record_checksum(r);
  if (need <= kCombineField) {
    // Behind the buffered fields (the pool allocates in order), else after writing them.
    if (combined_size_ != 0 && combined_at_ + combined_size_ != offset)
      if (int rc = write_combined(); rc != HM_OK) return rc;
    if (!combined_) {
      combined_.reset(new (std::nothrow) char[kCombineBytes + kCombineField]);
      if (!combined_) {
        pool_->set_top(offset);  // as for a failed write, below
        return fail(HM_ENOMEM, "hetmem store: field %s not archived: out of memory", what.c_str());
      }
    }
    if (combined_size_ == 0) combined_at_ = offset;
    char *at = combined_.get() + combined_size_;
    const uint64_t room = persist::round_up(need, persist::kUnit);
    std::memcpy(at, &r, sizeof r);
    std::memcpy(at + sizeof r, data, length);
    std::memset(at + need, 0, room - need);  // the pad is zeros, as in a new pool
    combined_size_ += room;
    if (combined_size_ >= kCombineBytes)
      if (int rc = write_combined(); rc != HM_OK) return rc;
  } else if (int rc = pool_->write(offset, &r, sizeof r, data, length); rc != HM_OK) {
    const std::string why = hm_last_error();
    pool_->set_top(offset);  // the space goes back to the next field; nothing refers to it
    return fail(rc, "hetmem store: field %s (%llu bytes) not archived: %s", what.c_str(),
                static_cast<unsigned long long>(length), why.c_str());
  }
  return HM_OK;
}

int FieldWriter::flush() {
  if (int rc = write_combined(); rc != HM_OK) return rc;
  if (!pool_ || !dirty_) return HM_OK;
  if (int rc = pool_->commit(0); rc != HM_OK) return rc;
  dirty_ = false;
  return HM_OK;
}

// A pool open for reading: read with pread, not mapped, so that a pool truncated under a reader
// is an error for the fields past the cut (a short read), never a SIGBUS in the host program.
struct PoolFile {
  int fd = -1;
  uint64_t bytes = 0;  // the pool's size, as its header says
  ~PoolFile() {
    if (fd >= 0) prim::close_fd(fd);
  }
};

namespace {

std::mutex pool_files_mutex;
std::map<std::string, std::shared_ptr<const PoolFile>> &pool_files() {
  static auto *m = new std::map<std::string, std::shared_ptr<const PoolFile>>();
  return *m;
}

int pool_file(const std::string &path, std::shared_ptr<const PoolFile> *out) {
  std::lock_guard<std::mutex> lock(pool_files_mutex);
  auto &all = pool_files();
  if (auto it = all.find(path); it != all.end()) {
    *out = it->second;
    return HM_OK;
  }
  persist::PoolInfo info;
  if (int rc = persist::Pool::inspect(path, &info); rc != HM_OK) {
    // A truncated pool with a committed version is still read: each field is checked against
    // the file's size when it is read, and those before the cut are served.
    const bool truncated = info.state == persist::PoolInfo::State::committed && info.file_bytes < info.bytes;
    const std::string why = hm_last_error();
    if (!truncated) return fail(rc, "hetmem store: %s", why.c_str());
  } else if (info.state != persist::PoolInfo::State::committed) {
    return fail(HM_EFORMAT, "hetmem store: pool '%s' %s", path.c_str(),
                info.state == persist::PoolInfo::State::missing ? "does not exist (wiped or purged?)"
                                                                : "holds no committed fields");
  }
  if (info.content != kPoolContent)
    return fail(HM_EFORMAT, "hetmem store: '%s' is a hetmem pool holding '%s', not FDB fields", path.c_str(),
                info.content.c_str());
  auto f = std::make_shared<PoolFile>();
  uint64_t size = 0;
  if (prim::open_readonly(path, &f->fd, &size) != HM_OK)
    return fail(HM_EIO, "hetmem store: pool '%s' cannot be opened for reading", path.c_str());
  f->bytes = info.bytes;
  // Pools of wiped databases are forgotten, so that a long-running reader does not keep them.
  if (all.size() >= 64)
    for (auto it = all.begin(); it != all.end();) it = prim::path_exists(it->first) ? std::next(it) : all.erase(it);
  all[path] = f;
  *out = std::move(f);
  return HM_OK;
}

}  // namespace

int FieldReader::open(const FieldSpot &spot, bool verify) {
  spot_ = spot;
  verify_ = verify;
  copy_.reset();
  if (int rc = pool_file(spot.pool, &pool_); rc != HM_OK) return rc;
  if (spot.offset < persist::kHeaderBytes + sizeof(FieldRecord) || spot.offset % persist::kUnit != 0 ||
      spot.offset > pool_->bytes || spot.length > pool_->bytes - spot.offset)
    return fail(HM_EFORMAT, "hetmem store: %s lies outside the pool (%llu bytes): the index does not match the pool",
                at_text(spot).c_str(), static_cast<unsigned long long>(pool_->bytes));
  return HM_OK;
}

int FieldReader::read(uint64_t position, void *into, uint64_t bytes) {
  if (!pool_) return fail(HM_EINVAL, "hetmem store: a field read before it was opened");
  if (position > spot_.length || bytes > spot_.length - position)
    return fail(HM_EINVAL, "hetmem store: %s: %llu bytes from %llu are past the field's end", at_text(spot_).c_str(),
                static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(position));
  if (position == 0 && bytes == spot_.length && !copy_) return read_checked(into);
  if (!copy_) {
    std::unique_ptr<char[]> copy(new (std::nothrow) char[spot_.length]);
    if (!copy) return fail(HM_ENOMEM, "hetmem store: %s: no memory to read the field into", at_text(spot_).c_str());
    if (int rc = read_checked(copy.get()); rc != HM_OK) return rc;
    copy_ = std::move(copy);
  }
  std::memcpy(into, copy_.get() + position, bytes);
  return HM_OK;
}

int FieldReader::read_checked(void *into) {
  const uint64_t start = spot_.offset - sizeof(FieldRecord);
  FieldRecord r;
  if (prim::read_two_at(pool_->fd, &r, sizeof r, into, spot_.length, start) != HM_OK) {
    uint64_t now = 0;
    if (prim::file_size(pool_->fd, &now) == HM_OK && now < start + sizeof r + spot_.length)
      return fail(HM_EFORMAT, "hetmem store: %s: the pool is truncated (the file has %llu bytes); the field is not "
                  "returned", at_text(spot_).c_str(), static_cast<unsigned long long>(now));
    return fail(HM_EIO, "hetmem store: %s cannot be read", at_text(spot_).c_str());
  }
  if (std::memcmp(r.magic, kRecordMagic, sizeof kRecordMagic) != 0 || r.record_checksum != record_checksum(r))
    return fail(HM_EFORMAT, "hetmem store: %s: the field's record is damaged; the field is not returned",
                at_text(spot_).c_str());
  if (r.length != spot_.length)
    return fail(HM_EFORMAT, "hetmem store: %s: the pool holds a field of %llu bytes there; the index does not match",
                at_text(spot_).c_str(), static_cast<unsigned long long>(r.length));
  if (verify_ && field_checksum(into, spot_.length) != r.data_checksum)
    return fail(HM_EFORMAT, "hetmem store: %s: the data fails its checksum (damaged); the field is not returned",
                at_text(spot_).c_str());
  return HM_OK;
}

int read_field(const FieldSpot &spot, bool verify, FieldView *out) {
  FieldReader reader;
  if (int rc = reader.open(spot, verify); rc != HM_OK) return rc;
  std::shared_ptr<char[]> buffer(new (std::nothrow) char[spot.length]);
  if (!buffer) return fail(HM_ENOMEM, "hetmem store: %s: no memory to read the field into", at_text(spot).c_str());
  if (int rc = reader.read(0, buffer.get(), spot.length); rc != HM_OK) return rc;
  out->data = buffer.get();
  out->length = spot.length;
  out->storage = std::shared_ptr<const void>(std::move(buffer), out->data);
  return HM_OK;
}

uint64_t charge_read(const EmulProfile &profile, uint64_t bytes) {
  static EmulState state;
  return emul_charge(profile, state, bytes, 0, 0, kEmulCopy);
}

int remove_abandoned_pools(const std::string &directory) {
  std::string names;
  if (!prim::list_dir(directory, &names)) return 0;
  int removed = 0;
  for (const std::string &name : prim::split(names, '\n')) {
    if (!is_staging_pool(name)) continue;
    const std::string path = directory + "/" + name;
    int fd = -1;
    uint64_t size = 0;
    if (prim::open_existing(path, &fd, &size) != HM_OK) continue;
    // A live creator holds the staging file's lock; a killed one's lock went with it.
    if (prim::lock_file(fd) == HM_OK && prim::remove_path(path)) ++removed;
    prim::close_fd(fd);
  }
  return removed;
}

}  // namespace hm::fields
