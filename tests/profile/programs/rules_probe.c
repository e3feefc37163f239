/* Prints where each of its allocations landed ("libc" or the hetmem tier), for the rules tests:
 * particles_alloc(4M), field_alloc(4M), malloc(100), malloc(2.5M), and a block of 1000 bytes that
 * grown_realloc grows to 4M (its contents checked), and a chain: a block of 24 bytes that realloc
 * grows 8 bytes at a time to 4 KiB, then shrinks to 16 bytes (its contents checked at each step). */
#include <hetmem/hetmem.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) void *particles_alloc(size_t n) { return malloc(n); }
__attribute__((noinline)) void *field_alloc(size_t n) { return malloc(n); }
__attribute__((noinline)) void *grown_realloc(void *p, size_t n) { return realloc(p, n); }

static void where(const char *what, void *p) {
  hm_tier_t t;
  hm_tier_info_t info;
  if (hm_ptr_tier(p, &t) == HM_OK && hm_tier_info(t, &info) == HM_OK) printf("%s %s\n", what, info.name);
  else printf("%s libc\n", what);
}

int main(void) {
  void *a = particles_alloc((size_t)4 << 20), *b = field_alloc((size_t)4 << 20), *c = malloc(100);
  void *d = malloc((size_t)5 << 19);
  unsigned char *e = malloc(1000);
  for (int i = 0; i < 1000; ++i) e[i] = (unsigned char)i;
  e = grown_realloc(e, (size_t)4 << 20);
  for (int i = 0; i < 1000; ++i)
    if (e[i] != (unsigned char)i) {
      printf("grown contents-lost\n");
      return 1;
    }
  unsigned char *chain = malloc(24);
  for (int i = 0; i < 24; ++i) chain[i] = (unsigned char)(i * 7);
  for (size_t n = 32; n <= 4096; n += 8) {
    chain = realloc(chain, n);
    for (size_t i = 0; i < n - 8; ++i)
      if (chain[i] != (unsigned char)(i * 7)) {
        printf("chain contents-lost\n");
        return 1;
      }
    for (size_t i = n - 8; i < n; ++i) chain[i] = (unsigned char)(i * 7);
  }
  chain = realloc(chain, 16);
  for (int i = 0; i < 16; ++i)
    if (chain[i] != (unsigned char)(i * 7)) {
      printf("chain contents-lost\n");
      return 1;
    }
  where("particles", a);
  where("field", b);
  where("small", c);
  where("medium", d);
  where("grown", e);
  where("chain", chain);
  free(a);
  free(b);
  free(c);
  free(d);
  free(e);
  free(chain);
  return 0;
}
