/* Lifetimes and sizes for Table 2: 4 iterations; in each, temporaries of 0.5, 1.5 and 3 MiB freed
 * in the same iteration (short-lived); a 10 MiB array allocated in iteration 0 lives to the end,
 * and a 20 MiB one allocated in every iteration is freed in the next (long-lived). */
#include <hetmem/hetmem.h>
#include <stdlib.h>
#include <string.h>

volatile unsigned long sink;

static void *touch(size_t n) {
  char *p = malloc(n);
  memset(p, 1, 4096);
  sink += (unsigned long)p[0];
  return p;
}

int main(void) {
  const size_t MiB = 1 << 20;
  void *keep = touch(10 * MiB), *carry = NULL;
  for (int it = 0; it < 4; ++it) {
    hm_phase_begin("work");
    void *a = touch(MiB / 2), *b = touch(3 * MiB / 2), *c = touch(3 * MiB);
    free(a);
    free(b);
    free(c);
    void *next = touch(20 * MiB);
    free(carry);
    carry = next;
    hm_phase_end();
    hm_iteration_next();
  }
  free(carry);
  free(keep);
  return 0;
}
