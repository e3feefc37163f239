/* A program that uses only the allocation API, linked against the allocation layer alone
 * (hetmem::alloc): it must build and run without the profiler's or the persistent store's
 * libraries (zstd, OpenSSL), which tests/python/test_layout.py checks in its dynamic section. */
#include <hetmem/hetmem.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  if (hm_init() != HM_OK) {
    fprintf(stderr, "alloc_layer_only: %s\n", hm_last_error());
    return 1;
  }
  char *p = hm_alloc(HM_FAST, 1 << 20, 64, HM_PREFERRED);
  if (!p) {
    fprintf(stderr, "alloc_layer_only: %s\n", hm_last_error());
    return 1;
  }
  memset(p, 7, 1 << 20);
  hm_tier_t t = -1;
  int ok = hm_ptr_tier(p, &t) == HM_OK && t >= 0 && p[12345] == 7;
  hm_free(p);
  hm_finalize();
  printf("allocated, wrote and freed 1 MiB on tier %d\n", (int)t);
  return ok ? 0 : 1;
}
