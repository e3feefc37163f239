/* An unchanged program for plans: plain malloc at four call sites, phases marked. A "field"
 * touched whole in every phase (hot), "particles" a quarter at a time (streaming), a "log" written
 * once and never again (cold), and per-iteration temporaries (temporary). At the end it prints the
 * role of the tier each one's memory is on ("libc" when hetmem does not own it).
 * With HM_PROBE_NODES="field=0 particles=1 log=1" (the real-tier guest) it also checks every page
 * of those objects with move_pages and exits 1 if any page is on another NUMA node. */
#include <hetmem/hetmem.h>
#include <numaif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *where(const void *p) {
  hm_tier_t t, fast = -1, capacity = -1;
  if (hm_ptr_tier(p, &t) != HM_OK) return "libc";
  hm_role_tier(HM_FAST, &fast);
  hm_role_tier(HM_CAPACITY, &capacity);
  return t == fast ? "fast" : t == capacity ? "capacity" : "other";
}

/* Pages of [p, p + bytes) not on `node` (move_pages without a target: it reports each page's node). */
static long misplaced_pages(const char *p, size_t bytes, int node) {
  enum { kBatch = 1024 };
  long bad = 0;
  for (size_t at = 0; at < bytes; at += (size_t)kBatch * 4096) {
    void *pages[kBatch];
    int status[kBatch];
    unsigned long n = 0;
    for (size_t a = at; a < bytes && n < kBatch; a += 4096) pages[n++] = (void *)(p + a);
    if (move_pages(0, n, pages, NULL, status, 0) != 0) return -1;
    for (unsigned long i = 0; i < n; ++i) bad += status[i] != node;
  }
  return bad;
}

static int check_nodes(const char *name, const char *p, size_t bytes) {
  const char *spec = getenv("HM_PROBE_NODES"), *at = spec ? strstr(spec, name) : NULL;
  if (!at || at[strlen(name)] != '=') return 0;
  int node = atoi(at + strlen(name) + 1);
  long bad = misplaced_pages(p, bytes, node);
  printf("pages %s: %zu on node %d expected, %ld elsewhere\n", name, bytes / 4096, node, bad);
  return bad != 0;
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
