/* Touches known fractions of known arrays in known phases: phase "a" writes the first quarter of
 * A; phase "b" writes all of B and reads half of C. Each array is 64 MiB. */
#include <hetmem/hetmem.h>
#include <stdlib.h>
#include <string.h>

volatile unsigned long sink;

int main(void) {
  const size_t n = (size_t)64 << 20;
  char *A = malloc(n), *B = malloc(n), *C = malloc(n);
  memset(A, 1, n);
  memset(B, 1, n);
  memset(C, 1, n);
  for (int it = 0; it < 3; ++it) {
    hm_phase_begin("a");
    memset(A, 2, n / 4);
    hm_phase_end();
    hm_phase_begin("b");
    memset(B, 3, n);
    unsigned long s = 0;
    for (size_t i = 0; i < n / 2; i += 4096) s += (unsigned char)C[i];
    sink += s;
    hm_phase_end();
    hm_iteration_next();
  }
  free(A);
  free(B);
  free(C);
  return 0;
}
