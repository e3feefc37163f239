/* Known allocation pattern for the interposer tests: counts and bytes per site and per function. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

volatile unsigned long sink;

__attribute__((noinline)) void make_blocks(void **out, int n) {
  for (int i = 0; i < n; ++i) {
    out[i] = malloc(100);
    sink += (unsigned long)out[i];
  }
}

__attribute__((noinline)) void *make_big(size_t n) {
  char *p = malloc(n);
  memset(p, 1, n);
  sink += (unsigned long)p[n - 1];
  return p;
}

int main(void) {
  void *blocks[1000];
  make_blocks(blocks, 1000);
  for (int i = 0; i < 1000; ++i) free(blocks[i]);
  void *big[3];
  for (int i = 0; i < 3; ++i) big[i] = make_big((size_t)8 << 20);
  for (int i = 0; i < 3; ++i) free(big[i]);
  void *c = calloc(10, 10);
  void *r = malloc(10);
  r = realloc(r, 20000);
  void *ra = reallocarray(NULL, 10, 30);
  void *pm = NULL;
  if (posix_memalign(&pm, 64, 640) != 0) return 1;
  void *aa = aligned_alloc(128, 1280);
  void *ma = memalign(256, 2560);
  void *va = valloc(5000);
  void *pv = pvalloc(5000);
  sink += malloc_usable_size(c) + (unsigned long)ra;
  void *all[] = {c, r, ra, pm, aa, ma, va, pv};
  for (int i = 0; i < 8; ++i) free(all[i]);
  return 0;
}
