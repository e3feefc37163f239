/* hetmem_demo: allocates on every tier this process has, the way a simulation would (fields on
 * the fast tier, particles on the capacity tier, a checkpoint buffer on the persistent tier,
 * temporaries in an iteration arena), moves one array between tiers, and prints the per-tier
 * accounting. Run it with the tiers you want, e.g.
 *   HM_TIERS="capacity=emul:optane,persistent=file:/var/tmp/hm-demo.pool:256M" hetmem_demo
 * (hetmem_demo --version: the library's version.)
 */
#define _POSIX_C_SOURCE 200809L
#include <hetmem/hetmem.h>
#include <time.h>
#include <stdio.h>
#include <string.h>

#define MiB ((size_t)1 << 20)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--version") == 0) {
    printf("hetmem_demo %s\n", hm_version());
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "usage: %s [--version]   (the tiers come from HM_TIERS)\n", argv[0]);
    return 2;
  }
  if (hm_init() != HM_OK) {  /* the configuration (HM_TIERS, a budget): bad input, status 2 */
    fprintf(stderr, "hetmem_demo: %s\n", hm_last_error());
    return 2;
  }
  printf("tiers:\n");
  for (hm_tier_t t = 0; t < hm_tier_count(); ++t) {
    hm_tier_info_t info;
    hm_tier_info(t, &info);
    printf("  %-28s roles:%s%s%s\n", info.name, info.roles & 1 ? " fast" : "", info.roles & 2 ? " capacity" : "",
           info.roles & 4 ? " persistent" : "");
  }

  /* Allocate something on every tier, by role where a role maps to it. */
  void *blocks[64] = {0};
  int nblocks = 0;
  for (hm_tier_t t = 0; t < hm_tier_count() && nblocks < 60; ++t) {
    size_t sizes[3] = {4096, 512 * 1024, 16 * MiB};
    for (int i = 0; i < 3; ++i) {
      void *p = hm_tier_alloc(t, sizes[i], 0, HM_STRICT | HM_MOVABLE);
      if (!p) {
        fprintf(stderr, "hetmem_demo: %s\n", hm_last_error());
        return 1;
      }
      memset(p, 1, sizes[i]);
      blocks[nblocks++] = p;
    }
  }

  /* Temporaries of one iteration in an arena on the fast tier. */
  hm_tier_t fast, cap;
  hm_role_tier(HM_FAST, &fast);
  hm_role_tier(HM_CAPACITY, &cap);
  hm_arena_t *arena;
  if (hm_arena_create(fast, MiB, 0, &arena) != HM_OK) {
    fprintf(stderr, "hetmem_demo: %s\n", hm_last_error());
    return 1;
  }
  for (int it = 0; it < 3; ++it) {
    for (int i = 0; i < 10000; ++i) hm_arena_alloc(arena, 256, 0);
    hm_arena_reset(arena);
  }
  hm_arena_stats_t as;
  hm_arena_stats(arena, &as);
  printf("\niteration arena: peak %llu bytes, %llu chunk(s), %llu resets\n", (unsigned long long)as.peak,
         (unsigned long long)as.chunks, (unsigned long long)as.resets);

  /* Move a 64 MiB array from the fast to the capacity tier and back, keeping its address. */
  size_t n = 64 * MiB;
  char *field = hm_alloc(HM_FAST, n, 0, HM_MOVABLE);
  memset(field, 7, n);
  double t0 = now_s();
  int rc = hm_move(field, cap);
  double t1 = now_s();
  rc = rc ? rc : hm_move(field, fast);
  double t2 = now_s();
  if (rc != HM_OK || field[n - 1] != 7) {
    fprintf(stderr, "hetmem_demo: move failed: %s\n", hm_last_error());
    return 1;
  }
  printf("moved 64 MiB fast -> capacity in %.1f ms and back in %.1f ms, same address %p\n", (t1 - t0) * 1e3,
         (t2 - t1) * 1e3, (void *)field);

  printf("\nper-tier accounting while everything is allocated:\n");
  fflush(stdout); /* hm_stats_print writes to the file descriptor directly */
  hm_stats_print(1);
  for (int i = 0; i < nblocks; ++i) hm_free(blocks[i]);
  hm_free(field);
  hm_arena_destroy(arena);
  printf("\nafter freeing everything:\n");
  fflush(stdout);
  hm_stats_print(1);
  for (hm_tier_t t = 0; t < hm_tier_count(); ++t) {
    hm_tier_stats_t s;
    hm_tier_stats(t, &s);
    if (s.in_use != 0) {
      fprintf(stderr, "hetmem_demo: tier %d still has %llu bytes in use\n", t, (unsigned long long)s.in_use);
      return 1;
    }
  }
  return 0;
}
