/* An unchanged program for plans: plain malloc at five call sites, phases marked. A "field"
 * touched whole in every phase (hot), "particles" a quarter at a time (streaming), a "log" written
 * once and never again (cold), per-iteration temporaries (temporary), and a "pairlist" grown as a
 * std::vector grows (each larger copy made at the same site, the smaller freed at once), then kept
 * and touched whole every iteration: hot, although most of its allocations were short-lived
 * (a neighbour list such as GROMACS's). At the end it prints the
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

/* One call site for every step of the growth, as a container's reallocation has. */
static __attribute__((noinline)) char *grow(char *old, size_t old_bytes, size_t bytes) {
  char *p = malloc(bytes);
  if (p && old) memcpy(p, old, old_bytes);
  free(old);
  return p;
}

int main(void) {
  const size_t field_bytes = (size_t)24 << 20, particle_bytes = (size_t)96 << 20, log_bytes = (size_t)16 << 20;
  char *field = malloc(field_bytes);
  char *particles = malloc(particle_bytes);
  char *log = malloc(log_bytes);
  char *pairlist = NULL;
  size_t pairlist_bytes = 0;
  for (size_t n = (size_t)64 << 10; n <= ((size_t)16 << 20); n *= 2) {
    pairlist = grow(pairlist, pairlist_bytes, n);
    if (!pairlist) return 1;
    memset(pairlist + pairlist_bytes, 2, n - pairlist_bytes);
    pairlist_bytes = n;
  }
  if (!field || !particles || !log) return 1;
  memset(field, 1, field_bytes);
  memset(particles, 1, particle_bytes);
  memset(log, 1, log_bytes);
  const char *tmp_tier = "none";
  for (int it = 0; it < 6; ++it) {
    hm_phase_begin("push");
    memset(field, it, field_bytes);
    memset(pairlist, it, pairlist_bytes);
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
  printf("field %s\nparticles %s\nlog %s\ntemporary %s\npairlist %s\n", where(field), where(particles), where(log),
         tmp_tier, where(pairlist));
  int misplaced = check_nodes("field", field, field_bytes) + check_nodes("particles", particles, particle_bytes) +
                  check_nodes("log", log, log_bytes);
  free(field);
  free(particles);
  free(log);
  free(pairlist);
  return misplaced ? 1 : 0;
}
