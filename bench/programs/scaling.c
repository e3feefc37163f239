/* The machine's own 2-thread scaling on a trivially parallel compute loop (no memory traffic),
 * the reference for the PIC code's scaling. Prints seconds. */
#include <math.h>
#include <omp.h>
#include <stdio.h>

int main(void) {
  double t0 = omp_get_wtime(), s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
  for (long i = 0; i < 200000000; ++i) s += sqrt((double)i) * 1e-9;
  printf("%.6f %g\n", omp_get_wtime() - t0, s);
  return 0;
}
