/* A persistent octree from C: refine around a sphere, balance, persist, "crash" (close without
 * persisting the last changes), restore, and carry on from the persisted version.
 * Usage: example_pm_octree [POOL_FILE]  (default: $TMPDIR or /tmp, hetmem-example.octree) */
#include <hetmem/pm_octree.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Split the leaves the sphere of radius 0.3 around the centre crosses, down to level 5. */
static int crosses_sphere(const pm_leaf_t *l, void *arg) {
  (void)arg;
  if (l->level >= 5) return 0;
  double size = ldexp(1.0, -(int)l->level), nearest = 0, farthest = 0;
  for (int d = 0; d < 3; ++d) {
    double lo = ldexp((double)l->coord[d], -20) - 0.5, hi = lo + size;
    double n = lo > 0 ? lo : (hi < 0 ? hi : 0), f = fabs(lo) > fabs(hi) ? fabs(lo) : fabs(hi);
    nearest += n * n;
    farthest += f * f;
  }
  return sqrt(nearest) <= 0.3 && sqrt(farthest) >= 0.3;
}

static void count_leaf(const pm_leaf_t *l, void *arg) {
  (void)l;
  ++*(uint64_t *)arg;
}

static int check(int rc, const char *what) {
  if (rc != HM_OK) fprintf(stderr, "example_pm_octree: %s: %s\n", what, hm_last_error());
  return rc != HM_OK;
}

int main(int argc, char **argv) {
  char path[4096];
  const char *dir = getenv("TMPDIR");
  if (argc > 1) snprintf(path, sizeof path, "%s", argv[1]);
  else snprintf(path, sizeof path, "%s/hetmem-example.octree", dir && *dir ? dir : "/tmp");

  pm_octree_t *tree = NULL;
  if (check(pm_create(path, 3, 64u << 20, &tree), "pm_create")) return 1;
  for (int pass = 0; pass < 5; ++pass)
    if (check(pm_refine(tree, crosses_sphere, NULL), "pm_refine")) return 1;
  if (check(pm_balance(tree), "pm_balance") || check(pm_persistent(tree), "pm_persistent")) return 1;
  uint64_t version = pm_version(tree), sum = pm_checksum(tree), leaves = pm_leaf_count(tree);
  printf("persisted version %llu: %llu leaves, checksum %016llx\n", (unsigned long long)version,
         (unsigned long long)leaves, (unsigned long long)sum);

  /* Work that is never persisted, then the process "crashes". */
  double p[3] = {0.1, 0.1, 0.1};
  if (check(pm_set_value(tree, p, 1.0), "pm_set_value")) return 1;
  pm_close(tree);

  if (check(pm_restore(path, &tree), "pm_restore")) return 1;
  /* The first visit checks each family as it reads it: a damaged pool is refused here
   * (HM_EFORMAT naming the damage), so read what pm_leaves returns. */
  uint64_t visited = 0;
  if (check(pm_leaves(tree, count_leaf, &visited), "pm_leaves")) return 1;
  printf("restored version %llu: %llu leaves, checksum %016llx\n", (unsigned long long)pm_version(tree),
         (unsigned long long)visited, (unsigned long long)pm_checksum(tree));
  int same = pm_version(tree) == version && visited == leaves && pm_checksum(tree) == sum && pm_valid(tree) == HM_OK;
  pm_leaf_t leaf;
  if (check(pm_find(tree, p, &leaf), "pm_find")) return 1;
  same = same && leaf.value == 0.0;
  if (check(pm_delete(tree), "pm_delete")) return 1;
  printf("%s\n", same ? "restore returned exactly the persisted version" : "RESTORE DIFFERS");
  return same ? 0 : 1;
}
