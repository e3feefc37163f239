/* Each OpenMP thread allocates 1000 blocks of 48 bytes at one site, then frees them. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

volatile unsigned long sink;

__attribute__((noinline)) void per_thread(void) {
  void *p[1000];
  for (int i = 0; i < 1000; ++i) {
    p[i] = malloc(48);
    sink += (unsigned long)p[i];
  }
  for (int i = 0; i < 1000; ++i) free(p[i]);
}

int main(void) {
  int threads = 0;
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    threads = omp_get_num_threads();
    per_thread();
  }
  printf("threads %d\n", threads);
  return 0;
}
