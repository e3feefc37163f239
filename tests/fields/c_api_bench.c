/* A writer through FDB's C API, for the DAX guest (tests/realtier/guest.py, recipe pmem-fields),
 * where pyfdb and Python are not: STEPS steps of FIELDS fields of BYTES bytes, a flush after each,
 * then every field of the last step retrieved and compared byte for byte. The configuration is
 * FDB5_CONFIG_FILE, the same program for both stores. Prints one line:
 *
 *   c_api_bench: store=LABEL bytes=B fields=F steps=S gib_s=G flush_ms=M map_sync=0|1|- verified=N
 *
 * GiB/s is all data over the wall time, flushes included (as hetmem bench fields); flush_ms is the
 * median flush. map_sync says whether a hetmem pool is mapped with MAP_SYNC in this process (the
 * "sf" flag in /proc/self/smaps), "-" when no pool is mapped (FDB's POSIX store). With
 * HM_EXPECT_MAP_SYNC=1, a pool mapped without it is a failure. Exit status: the failures. */
#include <fdb5/api/fdb_c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void fill(char *data, long bytes, int step, int field) {
  for (long i = 0; i < bytes; ++i) data[i] = (char)((i * 31 + field * 7 + step * 13) & 0xff);
}

static const char *db_keys[][2] = {{"class", "rd"}, {"expver", "hmdx"}, {"stream", "oper"}, {"date", "20261125"},
                                   {"time", "0000"}, {"domain", "g"},     {"type", "fc"},    {"levtype", "ml"},
                                   {"param", "130"}};

static fdb_key_t *field_key(int step, int field) {
  fdb_key_t *key;
  char s[16], l[16];
  fdb_new_key(&key);
  for (size_t k = 0; k < sizeof db_keys / sizeof *db_keys; ++k) fdb_key_add(key, db_keys[k][0], db_keys[k][1]);
  snprintf(s, sizeof s, "%d", step);
  snprintf(l, sizeof l, "%d", field + 1);
  fdb_key_add(key, "step", s);
  fdb_key_add(key, "levelist", l);
  return key;
}

/* 1 when every mapping of a hetmem pool carries VM_SYNC ("sf"), 0 when one does not, -1 when no
 * pool is mapped. */
static int pool_map_sync(void) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[1024];
  int in_pool = 0, found = -1;
  unsigned long lo, hi;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {  /* a mapping's first line, its path last */
      in_pool = strstr(line, ".hmpool") != NULL;
    } else if (in_pool && strncmp(line, "VmFlags:", 8) == 0) {
      const int sync = strstr(line, " sf") != NULL;
      found = found == -1 ? sync : found && sync;
      in_pool = 0;
    }
  }
  fclose(f);
  return found;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: c_api_bench STORE_LABEL BYTES FIELDS STEPS (FDB5_CONFIG_FILE names the FDB)\n");
    return 2;
  }
  const char *label = argv[1];
  const long bytes = atol(argv[2]);
  const int fields = atoi(argv[3]), steps = atoi(argv[4]);
  if (bytes <= 0 || fields <= 0 || steps <= 0 || fields > 9999) {
    fprintf(stderr, "c_api_bench: BYTES, FIELDS (at most 9999) and STEPS must be positive\n");
    return 2;
  }
  if (fdb_initialise() != FDB_SUCCESS) return 100;
  fdb_handle_t *fdb;
  if (fdb_new_handle(&fdb) != FDB_SUCCESS) return 101;
  char *data = malloc((size_t)bytes), *back = malloc((size_t)bytes * fields);
  double *flush_s = malloc(sizeof(double) * (size_t)steps);
  int failures = 0;
  const double t0 = now();
  for (int s = 0; s < steps && !failures; ++s) {
    for (int f = 0; f < fields; ++f) {
      fill(data, bytes, s, f);
      fdb_key_t *key = field_key(s, f);
      if (fdb_archive(fdb, key, data, (size_t)bytes) != FDB_SUCCESS) {
        fprintf(stderr, "FAILED: archive step %d field %d\n", s, f);
        ++failures;
      }
      fdb_delete_key(key);
    }
    const double t1 = now();
    if (fdb_flush(fdb) != FDB_SUCCESS) {
      fprintf(stderr, "FAILED: flush step %d\n", s);
      ++failures;
    }
    flush_s[s] = now() - t1;
  }
  const double wall = now() - t0;
  const int map_sync = pool_map_sync();

  /* The last step back, through a new handle. */
  int verified = 0;
  fdb_handle_t *reader;
  fdb_new_handle(&reader);
  fdb_request_t *req;
  fdb_new_request(&req);
  for (size_t k = 0; k < sizeof db_keys / sizeof *db_keys; ++k) {
    const char *v[] = {db_keys[k][1]};
    fdb_request_add(req, db_keys[k][0], v, 1);
  }
  char step_text[16];
  snprintf(step_text, sizeof step_text, "%d", steps - 1);
  const char *step_v[] = {step_text};
  fdb_request_add(req, "step", step_v, 1);
  const char **levels = malloc(sizeof(char *) * (size_t)fields);
  for (int f = 0; f < fields; ++f) {
    char *l = malloc(8);
    snprintf(l, 8, "%d", f + 1);
    levels[f] = l;
  }
  fdb_request_add(req, "levelist", levels, (size_t)fields);
  fdb_datareader_t *dr;
  fdb_new_datareader(&dr);
  long size = 0, got = 0;
  if (!failures && fdb_retrieve(reader, req, dr) == FDB_SUCCESS && fdb_datareader_open(dr, &size) == FDB_SUCCESS &&
      size == bytes * fields && fdb_datareader_read(dr, back, size, &got) == FDB_SUCCESS && got == size) {
    /* FDB returns the fields in its own order: each must be one of the step's. */
    for (int f = 0; f < fields; ++f) {
      int match = 0;
      for (int g = 0; g < fields && !match; ++g) {
        fill(data, bytes, steps - 1, g);
        match = memcmp(back + (size_t)f * (size_t)bytes, data, (size_t)bytes) == 0;
      }
      verified += match;
    }
    fdb_datareader_close(dr);
  }
  if (verified != fields) {
    fprintf(stderr, "FAILED: %d of the last step's %d fields read back as written (%ld bytes retrieved)\n", verified,
            fields, size);
    ++failures;
  }
  const char *expect = getenv("HM_EXPECT_MAP_SYNC");
  if (expect && strcmp(expect, "1") == 0 && strcmp(label, "hetmem") == 0 && map_sync != 1) {
    fprintf(stderr, "FAILED: %s\n", map_sync < 0 ? "no hetmem pool is mapped" : "a hetmem pool is mapped without MAP_SYNC");
    ++failures;
  }
  qsort(flush_s, (size_t)steps, sizeof *flush_s, compare_doubles);
  printf("c_api_bench: store=%s bytes=%ld fields=%d steps=%d gib_s=%.4f flush_ms=%.3f map_sync=%s verified=%d\n", label,
         bytes, fields, steps, (double)bytes * fields * steps / wall / (1 << 30), flush_s[steps / 2] * 1e3,
         map_sync < 0 ? "-" : map_sync ? "1" : "0", verified);
  for (int f = 0; f < fields; ++f) free((void *)levels[f]);
  free(levels);
  fdb_delete_datareader(dr);
  fdb_delete_request(req);
  fdb_delete_handle(reader);
  fdb_delete_handle(fdb);
  free(data);
  free(back);
  free(flush_s);
  return failures;
}
