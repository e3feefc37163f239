/* memkind.h from hetmem: the memkind 1.14 interface that applications and OpenMP runtimes use,
 * implemented on hetmem's tiers (docs/memkind.md). Build against it with
 * -I<prefix>/include/hetmem/memkind and link -lmemkind from hetmem's memkind directory; a program
 * built against the system's memkind runs unchanged with hetmem's library in its place.
 *
 * A kind maps to a hetmem role or tier (the table in docs/memkind.md; HM_MEMKIND overrides it).
 * Budgets, fallback, accounting, the emulated tiers and the profiler all apply. A kind hetmem cannot
 * honour on this machine answers memkind_check_available with memkind's own error and its
 * allocations return NULL: never a silent substitute. Error codes and values are memkind's. */
#ifndef HETMEM_MEMKIND_H
#define HETMEM_MEMKIND_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

typedef struct memkind *memkind_t;

enum memkind_const {
  MEMKIND_MAX_KIND = 512,
  MEMKIND_ERROR_MESSAGE_SIZE = 128,
  MEMKIND_PMEM_MIN_SIZE = (1024 * 1024 * 16)
};

enum {
  MEMKIND_ERROR_UNAVAILABLE = -1,            /* the kind's memory does not exist here */
  MEMKIND_ERROR_MBIND = -2,
  MEMKIND_ERROR_MMAP = -3,
  MEMKIND_ERROR_MALLOC = -6,
  MEMKIND_ERROR_ENVIRON = -12,               /* a malformed HM_MEMKIND */
  MEMKIND_ERROR_INVALID = -13,               /* a bad argument (NULL kind, missing directory) */
  MEMKIND_ERROR_TOOMANY = -15,
  MEMKIND_ERROR_BADOPS = -17,
  MEMKIND_ERROR_HUGETLB = -18,               /* no hugetlb pages reserved (HM_HUGETLB_POOL) */
  MEMKIND_ERROR_MEMTYPE_NOT_AVAILABLE = -20,
  MEMKIND_ERROR_OPERATION_FAILED = -21,
  MEMKIND_ERROR_ARENAS_CREATE = -22,
  MEMKIND_ERROR_RUNTIME = -255
};

/* The predefined kinds (data objects, as in memkind). */
extern memkind_t MEMKIND_REGULAR;
extern memkind_t MEMKIND_DEFAULT;
extern memkind_t MEMKIND_HUGETLB;
extern memkind_t MEMKIND_HBW;
extern memkind_t MEMKIND_HBW_ALL;
extern memkind_t MEMKIND_HBW_PREFERRED;
extern memkind_t MEMKIND_HBW_HUGETLB;
extern memkind_t MEMKIND_HBW_ALL_HUGETLB;
extern memkind_t MEMKIND_HBW_PREFERRED_HUGETLB;
extern memkind_t MEMKIND_HBW_INTERLEAVE;
extern memkind_t MEMKIND_INTERLEAVE;
extern memkind_t MEMKIND_DAX_KMEM;
extern memkind_t MEMKIND_DAX_KMEM_ALL;
extern memkind_t MEMKIND_DAX_KMEM_PREFERRED;
extern memkind_t MEMKIND_DAX_KMEM_INTERLEAVE;
extern memkind_t MEMKIND_HIGHEST_CAPACITY;
extern memkind_t MEMKIND_HIGHEST_CAPACITY_PREFERRED;
extern memkind_t MEMKIND_HIGHEST_CAPACITY_LOCAL;
extern memkind_t MEMKIND_HIGHEST_CAPACITY_LOCAL_PREFERRED;
extern memkind_t MEMKIND_LOWEST_LATENCY_LOCAL;
extern memkind_t MEMKIND_LOWEST_LATENCY_LOCAL_PREFERRED;
extern memkind_t MEMKIND_HIGHEST_BANDWIDTH_LOCAL;
extern memkind_t MEMKIND_HIGHEST_BANDWIDTH_LOCAL_PREFERRED;
/* Deprecated by memkind (1 GiB pages): present for programs that name them, never available. */
extern memkind_t MEMKIND_HBW_GBTLB;
extern memkind_t MEMKIND_HBW_PREFERRED_GBTLB;
extern memkind_t MEMKIND_GBTLB;

/* memkind's version as major * 1000000 + minor * 1000 + patch: the interface implemented (1.14.0). */
int memkind_get_version(void);
/* A message for a memkind error code (at most `size` bytes, NUL-terminated). */
void memkind_error_message(int err, char *msg, size_t size);
/* 0 when the kind's memory exists here; else MEMKIND_ERROR_UNAVAILABLE, _HUGETLB or _INVALID. */
int memkind_check_available(memkind_t kind);
/* The kind holding ptr (an address an allocation of this library returned): the first kind of the
 * table on the tier hetmem placed it (a pmem kind for its file tier); MEMKIND_DEFAULT for memory
 * hetmem does not own; NULL for NULL. */
memkind_t memkind_detect_kind(void *ptr);

void *memkind_malloc(memkind_t kind, size_t size);
void *memkind_calloc(memkind_t kind, size_t num, size_t size);
/* 0, EINVAL (alignment not a power of two multiple of sizeof(void *)) or ENOMEM. */
int memkind_posix_memalign(memkind_t kind, void **memptr, size_t alignment, size_t size);
void *memkind_realloc(memkind_t kind, void *ptr, size_t size);
/* Frees memory of any kind (the kind may be NULL): hetmem's or the C library's. */
void memkind_free(memkind_t kind, void *ptr);
size_t memkind_malloc_usable_size(memkind_t kind, void *ptr);

/* A file-backed kind in `dir` of at most `max_size` bytes (0: the tier's size; else at least
 * MEMKIND_PMEM_MIN_SIZE, enforced: the kind's allocations fail beyond it): the hetmem file tier
 * configured in `dir` (HM_TIERS=persistent=file:DIR/POOL:SIZE), whose pool file is the
 * configuration's and stays when the kind is destroyed (memkind makes a temporary file instead).
 * Kinds in one directory share that tier and the smallest limit. MEMKIND_ERROR_INVALID for a
 * directory that does not exist or cannot be written, or a size below the minimum;
 * MEMKIND_ERROR_MEMTYPE_NOT_AVAILABLE where no file tier is configured there. */
int memkind_create_pmem(const char *dir, size_t max_size, memkind_t *kind);
/* Destroys a kind made by memkind_create_pmem (its allocations become invalid); the predefined
 * kinds cannot be destroyed (MEMKIND_ERROR_OPERATION_FAILED). */
int memkind_destroy_kind(memkind_t kind);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
