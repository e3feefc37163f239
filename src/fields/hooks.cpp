// The C functions of fields/hooks.h, over field_pools.
#include "fields/hooks.h"

#include <new>
#include <string>

#include "base/error.h"
#include "fields/field_pools.h"
#include "hetmem/hetmem.h"

using namespace hm;
using namespace hm::fields;

struct hm_field_writer {
  FieldWriter writer;
  std::string pool;  // where the last field went
};

struct hm_field_reader {
  FieldReader reader;
};

namespace {
const EmulProfile *profile_of(const hm_field_device_t *device) { return reinterpret_cast<const EmulProfile *>(device); }
}  // namespace

HM_HOOK_API const hm_field_device_t *hm_field_device(const char *name) {
  return name ? reinterpret_cast<const hm_field_device_t *>(emul_profile(name)) : nullptr;
}

HM_HOOK_API const char *hm_field_device_names(void) { return emul_profile_names(); }

HM_HOOK_API int hm_field_writer_open(const char *directory, const char *base, uint64_t pool_bytes,
                                     const hm_field_device_t *device, int tier, hm_field_writer_t **out) {
  if (!directory || !base || !out) return fail(HM_EINVAL, "hm_field_writer_open: a directory, a name and an out pointer are needed");
  if (pool_bytes < persist::kHeaderBytes + 2 * persist::kUnit)
    return fail(HM_EINVAL, "hm_field_writer_open: pools of %llu bytes hold no field", static_cast<unsigned long long>(pool_bytes));
  StoreSettings settings;
  settings.pool_bytes = pool_bytes;
  settings.emulate = profile_of(device);
  if (tier != -1) {
    hm_tier_info_t info;
    if (int rc = hm_tier_info(tier, &info); rc != HM_OK) return rc;
    settings.tier = tier;
  }
  try {  // nothing is thrown through a C function
    *out = new hm_field_writer{FieldWriter(directory, base, settings), {}};
  } catch (...) {
    return fail(HM_ENOMEM, "hm_field_writer_open: out of memory");
  }
  return HM_OK;
}

HM_HOOK_API int hm_field_archive(hm_field_writer_t *w, const void *data, uint64_t length, const char *what,
                                 const char **pool, uint64_t *offset) {
  if (!w || (!data && length) || !pool || !offset) return fail(HM_EINVAL, "hm_field_archive: a writer, the data and out pointers are needed");
  FieldSpot spot;
  try {
    if (int rc = w->writer.archive(data, length, what ? what : "(unnamed)", &spot); rc != HM_OK) return rc;
    w->pool = std::move(spot.pool);
  } catch (...) {
    return fail(HM_ENOMEM, "hm_field_archive: out of memory");
  }
  *pool = w->pool.c_str();
  *offset = spot.offset;
  return HM_OK;
}

HM_HOOK_API int hm_field_flush(hm_field_writer_t *w) { return w ? w->writer.flush() : HM_OK; }

HM_HOOK_API void hm_field_writer_close(hm_field_writer_t *w) { delete w; }

HM_HOOK_API int hm_field_reader_open(const char *pool, uint64_t offset, uint64_t length, int verify,
                                     hm_field_reader_t **out) {
  if (!pool || !out) return fail(HM_EINVAL, "hm_field_reader_open: a pool and an out pointer are needed");
  auto *r = new (std::nothrow) hm_field_reader;
  if (!r) return fail(HM_ENOMEM, "hm_field_reader_open: out of memory");
  int rc = HM_OK;
  try {
    rc = r->reader.open(FieldSpot{pool, offset, length}, verify != 0);
  } catch (...) {
    rc = fail(HM_ENOMEM, "hm_field_reader_open: out of memory");
  }
  if (rc != HM_OK) {
    delete r;
    return rc;
  }
  *out = r;
  return HM_OK;
}

HM_HOOK_API int hm_field_reader_read(hm_field_reader_t *reader, uint64_t position, void *into, uint64_t bytes) {
  if (!reader || (!into && bytes)) return fail(HM_EINVAL, "hm_field_reader_read: a reader and a buffer are needed");
  return reader->reader.read(position, into, bytes);
}

HM_HOOK_API void hm_field_reader_close(hm_field_reader_t *reader) { delete reader; }

HM_HOOK_API void hm_field_charge_read(const hm_field_device_t *device, uint64_t bytes) {
  if (device) charge_read(*profile_of(device), bytes);
}

HM_HOOK_API int hm_field_pool_name(const char *name) {
  if (!name) return 0;
  if (is_committed_pool(name)) return HM_FIELD_POOL_COMMITTED;
  return is_staging_pool(name) ? HM_FIELD_POOL_STAGING : 0;
}

HM_HOOK_API int hm_field_remove_abandoned(const char *directory) {
  return directory ? remove_abandoned_pools(directory) : 0;
}
