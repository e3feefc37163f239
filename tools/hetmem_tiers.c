/* hetmem-tiers: the tier table of `hetmem tiers`, from C, for machines or guests without Python.
 *   hetmem-tiers [--json | --version]
 * Exit status 0, or 2 with the library's message if initialisation fails (bad HM_TIERS, ...). */
#include <hetmem/hetmem.h>
#include <stdio.h>
#include <string.h>

static const char *kKinds[] = {"dram", "numa", "file", "emul"};
static const char *kSources[] = {"unknown", "hwloc", "sysfs", "measured", "emulated"};

static void roles_text(unsigned roles, char *out, size_t n) {
  out[0] = '\0';
  for (int r = 0; r < HM_ROLE_COUNT; ++r)
    if (roles & (1u << r)) {
      if (out[0]) strncat(out, ",", n - strlen(out) - 1);
      strncat(out, hm_role_name((hm_role_t)r), n - strlen(out) - 1);
    }
  if (!out[0]) snprintf(out, n, "-");
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--version") == 0) {
    printf("hetmem-tiers %s\n", hm_version());
    return 0;
  }
  int json = argc == 2 && strcmp(argv[1], "--json") == 0;
  if (argc > 1 && !json) {
    fprintf(stderr, "usage: %s [--json | --version]\n", argv[0]);
    return 2;
  }
  if (hm_init() != HM_OK) {
    fprintf(stderr, "hetmem-tiers: %s\n", hm_last_error());
    return 2;
  }
  if (json) printf("[\n");
  else
    printf("%-28s %-20s %-6s %4s %12s %10s %10s %10s %-9s %s\n", "tier", "role", "kind", "node", "capacity MiB",
           "read MB/s", "write MB/s", "latency ns", "figures", "pm");
  for (hm_tier_t t = 0; t < hm_tier_count(); ++t) {
    hm_tier_info_t i;
    hm_tier_info(t, &i);
    char roles[64];
    roles_text(i.roles, roles, sizeof roles);
    if (json) {
      printf("  {\"name\": \"%s\", \"roles\": \"%s\", \"kind\": \"%s\", \"numa_node\": %d, \"capacity\": %llu, "
             "\"read_bw_mbps\": %.1f, \"write_bw_mbps\": %.1f, \"latency_ns\": %.1f, \"figures\": \"%s\", "
             "\"persistent_memory\": %s, \"map_sync\": %s}%s\n",
             i.name, roles, kKinds[i.kind], i.numa_node, (unsigned long long)i.capacity, i.read_bw_mbps,
             i.write_bw_mbps, i.latency_ns, kSources[i.perf_source], i.is_persistent_memory ? "true" : "false",
             i.map_sync ? "true" : "false", t + 1 < hm_tier_count() ? "," : "");
    } else {
      printf("%-28s %-20s %-6s %4d %12llu %10.0f %10.0f %10.0f %-9s %s\n", i.name, roles, kKinds[i.kind],
             i.numa_node, (unsigned long long)(i.capacity >> 20), i.read_bw_mbps, i.write_bw_mbps, i.latency_ns,
             kSources[i.perf_source], i.is_persistent_memory ? "yes" : "no");
    }
  }
  if (json) printf("]\n");
  else
    for (hm_tier_t t = 0; t < hm_tier_count(); ++t) {
      hm_tier_info_t i;
      hm_tier_info(t, &i);
      printf("  %s: %s\n", i.name, i.detail);
    }
  return 0;
}
