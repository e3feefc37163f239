/* Median nanoseconds per malloc/free pair (sizes 16..4096), for the rules-only overhead benchmark.
 *   pairs [pairs per repetition=200000] [repetitions=15] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 200000;
  int reps = argc > 2 ? atoi(argv[2]) : 15;
  double t[64];
  if (reps > 64) reps = 64;
  for (int r = 0; r < reps; ++r) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; ++i) {
      void *p = malloc(16 + (size_t)(i & 4079));
      sink += (unsigned long)p;
      free(p);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    t[r] = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)n;
  }
  qsort(t, (size_t)reps, sizeof t[0], cmp);
  printf("%.2f\n", t[reps / 2]);
  return 0;
}
