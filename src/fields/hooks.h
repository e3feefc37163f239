// The field pools as the FDB store plugin (src/fdb/, libhetmem-fdb.so) reaches them: C functions
// exported from libhetmem.so (not part of the public API). The plugin links the shared library, so
// a process that loads both (hetmem-mg archiving through FDB, a Python program with pyfdb and
// hetmem's arrays) holds one runtime: one option table, tier registry, calibration, budget and
// error state. Errors: the HM_* codes, with hm_last_error() saying why.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifndef HM_HOOK_API
#define HM_HOOK_API extern "C" __attribute__((visibility("default")))
#endif

typedef struct hm_field_writer hm_field_writer_t;
typedef struct hm_field_reader hm_field_reader_t;
typedef struct hm_field_device hm_field_device_t;

// An emulated device by its profile's name ("optane", "cxl", ...), NULL for an unknown name; and
// the names it knows, ", "-separated.
HM_HOOK_API const hm_field_device_t *hm_field_device(const char *name);
HM_HOOK_API const char *hm_field_device_names(void);

// A writer of fields into pools of `pool_bytes` in `directory`, named `base.<n>.hmpool`; archives
// are charged as `device` when not NULL, and the fields written are counted in the budget of
// `tier` when it is not -1 (fields::FieldWriter).
HM_HOOK_API int hm_field_writer_open(const char *directory, const char *base, uint64_t pool_bytes,
                                     const hm_field_device_t *device, int tier, hm_field_writer_t **out);
// Archives one field; `what` names it in errors. *pool (the writer's, valid until its next call)
// and *offset say where its data lies.
HM_HOOK_API int hm_field_archive(hm_field_writer_t *writer, const void *data, uint64_t length, const char *what,
                                 const char **pool, uint64_t *offset);
HM_HOOK_API int hm_field_flush(hm_field_writer_t *writer);
HM_HOOK_API void hm_field_writer_close(hm_field_writer_t *writer);

// A reader of the field at `offset` (`length` bytes) of `pool` (fields::FieldReader): its pool is
// opened and the spot checked; hm_field_reader_read copies `bytes` of its data from `position`
// into `into`, the whole field checked before any of it is handed out.
HM_HOOK_API int hm_field_reader_open(const char *pool, uint64_t offset, uint64_t length, int verify,
                                     hm_field_reader_t **out);
HM_HOOK_API int hm_field_reader_read(hm_field_reader_t *reader, uint64_t position, void *into, uint64_t bytes);
HM_HOOK_API void hm_field_reader_close(hm_field_reader_t *reader);
// Charges a retrieve of `bytes` as `device`.
HM_HOOK_API void hm_field_charge_read(const hm_field_device_t *device, uint64_t bytes);

// The pool naming rule: HM_FIELD_POOL_COMMITTED, HM_FIELD_POOL_STAGING (a writer that has not
// flushed yet, or was killed) or 0 for any other file name.
enum { HM_FIELD_POOL_COMMITTED = 1, HM_FIELD_POOL_STAGING = 2 };
HM_HOOK_API int hm_field_pool_name(const char *name);
// Removes the staging files in `directory` whose creator is gone; returns how many.
HM_HOOK_API int hm_field_remove_abandoned(const char *directory);
