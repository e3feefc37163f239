/* Millions of small allocations from 2 threads, for the profiler-vs-heaptrack benchmark.
 *   alloc_heavy [operations per thread=1000000]   prints the seconds of the work */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long ops = 1000000;
volatile unsigned long sink;

static void *work(void *arg) {
  unsigned long x = (unsigned long)arg * 2654435761u + 1;
  void *live[256] = {0};
  for (long i = 0; i < ops; ++i) {
    x = x * 6364136223846793005ul + 1442695040888963407ul;
    int slot = (int)((x >> 33) & 255);
    free(live[slot]);
    live[slot] = malloc(16 + ((x >> 20) & 511));
    sink += (unsigned long)live[slot];
  }
  for (int i = 0; i < 256; ++i) free(live[i]);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 1) ops = atol(argv[1]);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  pthread_t t[2];
  for (long i = 0; i < 2; ++i) pthread_create(&t[i], NULL, work, (void *)(i + 1));
  for (int i = 0; i < 2; ++i) pthread_join(t[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%.6f\n", (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec));
  return 0;
}
