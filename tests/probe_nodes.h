/* Page-by-page NUMA checks for the programs the real-tier guests run (C, no hetmem needed): with
 * HM_PROBE_NODES="NAME=NODE ..." in the environment, check_nodes(NAME, p, bytes) prints how many
 * pages of the object are off their expected node and returns 1 if any is. */
#ifndef HETMEM_TESTS_PROBE_NODES_H
#define HETMEM_TESTS_PROBE_NODES_H
#include <numaif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
#endif
