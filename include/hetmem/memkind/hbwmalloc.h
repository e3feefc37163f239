/* hbwmalloc.h from hetmem: memkind's high-bandwidth interface on hetmem's fast tier
 * (docs/memkind.md). "High bandwidth" is hetmem's fast role; the fallback policy decides what
 * happens when its budget is full. Values and error codes are memkind 1.14's. */
#ifndef HETMEM_HBWMALLOC_H
#define HETMEM_HBWMALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

typedef enum {
  HBW_POLICY_BIND = 1,        /* the fast tier only: NULL (ENOMEM) when its budget is full */
  HBW_POLICY_PREFERRED = 2,   /* the fast tier, else fall back (the default) */
  HBW_POLICY_INTERLEAVE = 3,  /* the fast tier's nodes interleaved: one fast tier, the fast tier */
  HBW_POLICY_BIND_ALL = 4     /* as BIND */
} hbw_policy_t;

typedef enum {
  HBW_PAGESIZE_4KB = 1,
  HBW_PAGESIZE_2MB = 2,
  HBW_PAGESIZE_1GB_STRICT = 3,
  HBW_PAGESIZE_1GB = 4,
  HBW_PAGESIZE_MAX_VALUE
} hbw_pagesize_t;

enum { HBW_TOUCH_PAGES = (1 << 0) };

hbw_policy_t hbw_get_policy(void);
/* Once, before the first allocation: EPERM afterwards or on a second call, EINVAL for another
 * value. */
int hbw_set_policy(hbw_policy_t mode);
/* 0 when hetmem has a fast tier distinct from its capacity tier; ENODEV otherwise. */
int hbw_check_available(void);
/* 0 when all of [addr, addr + size) is on the fast tier, -1 when some is not; EINVAL for a NULL
 * address, a size of 0 or unknown flags; EFAULT for memory hetmem does not own. */
int hbw_verify_memory_region(void *addr, size_t size, int flags);
void *hbw_malloc(size_t size);
void *hbw_calloc(size_t num, size_t size);
int hbw_posix_memalign(void **memptr, size_t alignment, size_t size);
int hbw_posix_memalign_psize(void **memptr, size_t alignment, size_t size, hbw_pagesize_t pagesize);
void *hbw_realloc(void *ptr, size_t size);
void hbw_free(void *ptr);
size_t hbw_malloc_usable_size(void *ptr);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
