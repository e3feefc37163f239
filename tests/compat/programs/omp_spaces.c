/* OpenMP memory spaces as a code asks for them: omp_alloc with the predefined large-capacity,
 * high-bandwidth and default allocators. Prints, per allocator, the hetmem tier holding the memory
 * ("not hetmem" for the C library's). Built with clang -fopenmp (LLVM's runtime loads memkind).
 * With HM_PROBE_NODES="large_cap=1 high_bw=0" (the real-tier NUMA guest) it also checks every page
 * with move_pages and exits 1 if any is on another node. */
#include <hetmem/hetmem.h>
#include <omp.h>
#include <stdio.h>

#include "../../probe_nodes.h"

int main(void) {
  const struct {
    const char *name;
    omp_allocator_handle_t allocator;
    size_t bytes;
  } cases[] = {{"large_cap", omp_large_cap_mem_alloc, 4 << 20},
               {"high_bw", omp_high_bw_mem_alloc, 4 << 20},
               {"default", omp_default_mem_alloc, 1000}};
  int misplaced = 0;
  for (int i = 0; i < 3; ++i) {
    char *p = omp_alloc(cases[i].bytes, cases[i].allocator);
    if (!p) {
      printf("%s: NULL\n", cases[i].name);
      continue;
    }
    for (size_t b = 0; b < cases[i].bytes; b += 4096) p[b] = 1;
    misplaced += check_nodes(cases[i].name, p, cases[i].bytes);
    hm_tier_t tier;
    hm_tier_info_t info;
    if (hm_ptr_tier(p, &tier) == HM_OK && hm_tier_info(tier, &info) == HM_OK)
      printf("%s: %s\n", cases[i].name, info.name);
    else
      printf("%s: not hetmem\n", cases[i].name);
    omp_free(p, cases[i].allocator);
  }
  return misplaced ? 1 : 0;
}
