/* An array grown by realloc, 1 MiB at a time from 1 MiB to 48 MiB, its contents checked at every
 * step: under the profiler (a mapping of its own per large object) it must keep its pages, not be
 * copied into a new mapping at each growth. Prints "grown ok" and the minor page faults of the
 * growth loop; exit 1 if the contents were lost.
 *   grows */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static long minor_faults(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

int main(void) {
  const size_t step = 1u << 20;
  size_t have = step;
  unsigned char *p = malloc(have);
  if (!p) return 1;
  memset(p, 1, have);
  long before = minor_faults();
  for (int i = 2; i <= 48; ++i) {
    unsigned char *q = realloc(p, (size_t)i * step);
    if (!q) return 1;
    for (size_t k = 0; k < have; k += 4096)
      if (q[k] != (unsigned char)(k / step + 1)) {
        printf("contents lost at %zu after growing to %d MiB\n", k, i);
        return 1;
      }
    memset(q + have, i, step);
    p = q;
    have = (size_t)i * step;
  }
  printf("grown ok\n%ld\n", minor_faults() - before);
  free(p);
  return 0;
}
