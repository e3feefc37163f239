/* Many small allocations from one site (churn_small: N blocks of SIZE bytes, each freed at once but
 * every 1000th, kept to the end) and two 8 MiB arrays from another (churn_arrays), for the sampled
 * profile: counts known exactly, to compare the report's estimates with. Usage: churn N SIZE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

volatile unsigned long sink;

__attribute__((noinline)) static void *churn_small(size_t size) {
  char *p = malloc(size);
  p[0] = 1;
  return p;
}

__attribute__((noinline)) static void *churn_arrays(size_t size) {
  char *p = malloc(size);
  memset(p, 1, size);
  return p;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: churn N SIZE\n");
    return 2;
  }
  const long n = atol(argv[1]);
  const size_t size = (size_t)atol(argv[2]);
  void *a = churn_arrays(8 << 20), *b = churn_arrays(8 << 20);
  void **kept = calloc((size_t)n / 1000 + 1, sizeof *kept);
  long k = 0;
  for (long i = 0; i < n; ++i) {
    void *p = churn_small(size);
    sink += (unsigned long)((char *)p)[0];
    if (i % 1000 == 0) kept[k++] = p;
    else free(p);
  }
  while (k > 0) free(kept[--k]);
  free(kept);
  free(a);
  free(b);
  return 0;
}
