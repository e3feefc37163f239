/* A compute-bound program with phases, for the profiling-overhead benchmark: a 7-point Jacobi
 * stencil on an N^3 grid; each iteration has a "sweep" phase (several sweeps) and a "norm" phase.
 *   stencil [N=192] [iterations=8] [sweeps=4]        prints the seconds of the main loop */
#include <hetmem/hetmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 192, iters = argc > 2 ? atoi(argv[2]) : 8, sweeps = argc > 3 ? atoi(argv[3]) : 4;
  size_t cells = (size_t)n * n * n;
  double *u = malloc(cells * sizeof *u), *v = malloc(cells * sizeof *v);
  for (size_t i = 0; i < cells; ++i) u[i] = v[i] = (double)(i % 7);
  double t0 = now(), norm = 0;
  for (int it = 0; it < iters; ++it) {
    hm_phase_begin("sweep");
    for (int s = 0; s < sweeps; ++s) {
      for (int k = 1; k < n - 1; ++k)
        for (int j = 1; j < n - 1; ++j)
          for (int i = 1; i < n - 1; ++i) {
            size_t c = ((size_t)k * n + j) * n + i;
            v[c] = (u[c - 1] + u[c + 1] + u[c - n] + u[c + n] + u[c - (size_t)n * n] + u[c + (size_t)n * n]) / 6.0;
          }
      double *t = u;
      u = v;
      v = t;
    }
    hm_phase_end();
    hm_phase_begin("norm");
    double *scratch = malloc((size_t)n * sizeof *scratch);  /* a temporary per iteration */
    norm = 0;
    for (size_t i = 0; i < cells; ++i) norm += u[i] * u[i];
    scratch[0] = norm;
    free(scratch);
    hm_phase_end();
    hm_iteration_next();
  }
  printf("%.6f %g\n", now() - t0, norm);
  free(u);
  free(v);
  return 0;
}
