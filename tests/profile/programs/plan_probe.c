/* An unchanged program for plans: plain malloc at four call sites, phases marked. A "field"
 * touched whole in every phase (hot), "particles" a quarter at a time (streaming), a "log" written
 * once and never again (cold), and per-iteration temporaries (temporary). At the end it prints the
 * role of the tier each one's memory is on ("libc" when hetmem does not own it).
 * With HM_PROBE_NODES="field=0 particles=1 log=1" (the real-tier guest) it also checks every page
 * of those objects with move_pages and exits 1 if any page is on another NUMA node. */
#include <hetmem/hetmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../probe_nodes.h"

static const char *where(const void *p) {
  hm_tier_t t, fast = -1, capacity = -1;
  if (hm_ptr_tier(p, &t) != HM_OK) return "libc";
  hm_role_tier(HM_FAST, &fast);
  hm_role_tier(HM_CAPACITY, &capacity);
  return t == fast ? "fast" : t == capacity ? "capacity" : "other";
}

int main(void) {
  const size_t field_bytes = (size_t)24 << 20, particle_bytes = (size_t)96 << 20, log_bytes = (size_t)16 << 20;
  char *field = malloc(field_bytes);
  char *particles = malloc(particle_bytes);
  char *log = malloc(log_bytes);
  if (!field || !particles || !log) return 1;
  memset(field, 1, field_bytes);
  memset(particles, 1, particle_bytes);
  memset(log, 1, log_bytes);
  const char *tmp_tier = "none";
  for (int it = 0; it < 6; ++it) {
    hm_phase_begin("push");
    memset(field, it, field_bytes);
    memset(particles + (it % 4) * (particle_bytes / 4), it, particle_bytes / 4);
    char *tmp = malloc((size_t)2 << 20);
    memset(tmp, it, (size_t)2 << 20);
    tmp_tier = where(tmp);
    free(tmp);
    hm_phase_end();
    hm_phase_begin("solve");
    memset(field, it + 1, field_bytes);
    hm_phase_end();
    hm_iteration_next();
  }
  printf("field %s\nparticles %s\nlog %s\ntemporary %s\n", where(field), where(particles), where(log), tmp_tier);
  int misplaced = check_nodes("field", field, field_bytes) + check_nodes("particles", particles, particle_bytes) +
                  check_nodes("log", log, log_bytes);
  free(field);
  free(particles);
  free(log);
  return misplaced ? 1 : 0;
}
