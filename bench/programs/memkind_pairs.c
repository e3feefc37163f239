/* memkind clients' hot path: allocate, touch the first and last byte, free; one size at a time,
 * through memkind's interface (whichever libmemkind is loaded: the system's or hetmem's). Prints
 * "KIND SIZE ns" per line; a kind the loaded library cannot serve prints "KIND SIZE unavailable".
 * With "omp" as argument, the same through OpenMP's default allocator (omp_alloc/omp_free), which
 * LLVM's runtime routes through memkind once it has loaded one. */
#include <memkind.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#ifdef WITH_OMP
#include <omp.h>
#endif

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv) {
  const size_t sizes[] = {64, 4096, 1 << 20, 64 << 20};
  const int iters[] = {1000000, 200000, 20000, 500};
#ifdef WITH_OMP
  if (argc > 1 && strcmp(argv[1], "omp") == 0) {
    for (int s = 0; s < 4; ++s) {
      double t0 = now();
      for (int i = 0; i < iters[s]; ++i) {
        volatile char *p = omp_alloc(sizes[s], omp_default_mem_alloc);
        p[0] = 1;
        p[sizes[s] - 1] = 1;
        omp_free((void *)p, omp_default_mem_alloc);
      }
      printf("omp_default %zu %.1f\n", sizes[s], (now() - t0) * 1e9 / iters[s]);
    }
    return 0;
  }
#endif
  (void)argc;
  (void)argv;
  struct {
    const char *name;
    memkind_t kind;
  } kinds[] = {{"DEFAULT", MEMKIND_DEFAULT}, {"REGULAR", MEMKIND_REGULAR}, {"HBW_PREFERRED", MEMKIND_HBW_PREFERRED}};
  for (int k = 0; k < 3; ++k)
    for (int s = 0; s < 4; ++s) {
      if (memkind_check_available(kinds[k].kind) != 0) {
        printf("%s %zu unavailable\n", kinds[k].name, sizes[s]);
        continue;
      }
      double t0 = now();
      for (int i = 0; i < iters[s]; ++i) {
        volatile char *p = memkind_malloc(kinds[k].kind, sizes[s]);
        p[0] = 1;
        p[sizes[s] - 1] = 1;
        memkind_free(kinds[k].kind, (void *)p);
      }
      printf("%s %zu %.1f\n", kinds[k].name, sizes[s], (now() - t0) * 1e9 / iters[s]);
    }
  return 0;
}
