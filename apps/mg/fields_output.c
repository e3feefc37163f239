/* hetmem-mg's output: its fields as GRIB2 messages (ecCodes) archived into FDB5 through FDB's C API
 * (docs/fields.md), the producer of Weiland et al.'s (SC'19) IFS/FDB workflow. Each output step
 * archives every field level by level with MARS keys (class, expver, stream, date, time, type,
 * levtype=ml, levelist, step, param) and flushes at its end, which is when FDB makes the step
 * visible to consumers. The FDB configuration comes from FDB5_CONFIG_FILE, as for FDB's tools.
 *
 * Called from Fortran (main.f90) through bind(C); every function returns 0 or a non-zero code and
 * leaves a message for mg_fields_error(). */
#include <eccodes.h>
#include <fdb5/api/fdb_c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static fdb_handle_t *fdb;
static codes_handle *template_handle;
static char expver[8], date[16];
static char message[512];
static double *slice;
static long archived_fields, archived_bytes;

const char *mg_fields_error(void) { return message; }
long mg_fields_count(void) { return archived_fields; }
long mg_fields_bytes(void) { return archived_bytes; }

static int fdb_failed(int rc, const char *what) {
  snprintf(message, sizeof message, "FDB %s failed: %s", what, fdb_error_string(rc));
  return rc;
}

static int codes_failed(int rc, const char *what) {
  snprintf(message, sizeof message, "ecCodes: %s: %s", what, codes_get_error_message(rc));
  return rc ? rc : 1;
}

/* Opens FDB and prepares the GRIB template of an n x n slice on a regular latitude-longitude grid
 * (24 bits per value). `experiment` is the MARS expver (4 characters). */
int mg_fields_open(const char *experiment, int n) {
  if (strlen(experiment) != 4) {
    snprintf(message, sizeof message, "mg.output_expver = '%s': a MARS experiment version has 4 characters",
             experiment);
    return 1;
  }
  if (!getenv("FDB5_CONFIG_FILE")) {
    snprintf(message, sizeof message, "mg.output_interval needs an FDB configuration: set FDB5_CONFIG_FILE "
             "(hetmem fields and docs/fields.md write one)");
    return 1;
  }
  snprintf(expver, sizeof expver, "%s", experiment);
  const time_t now = time(NULL);
  strftime(date, sizeof date, "%Y%m%d", gmtime(&now));
  int rc = fdb_initialise();
  if (rc) return fdb_failed(rc, "initialisation");
  if ((rc = fdb_new_handle(&fdb))) return fdb_failed(rc, "open (check FDB5_CONFIG_FILE)");
  template_handle = codes_grib_handle_new_from_samples(NULL, "regular_ll_pl_grib2");
  if (!template_handle) return codes_failed(0, "the sample regular_ll_pl_grib2 is missing");
  /* In this order: the centre, then ECMWF's local section, which holds the MARS keys. */
  size_t len;
  if ((rc = codes_set_string(template_handle, "centre", "ecmf", (len = 4, &len)))) return codes_failed(rc, "centre");
  const struct { const char *key; long value; } locals[] = {{"setLocalDefinition", 1}, {"localDefinitionNumber", 1}};
  for (size_t i = 0; i < sizeof locals / sizeof *locals; ++i)
    if ((rc = codes_set_long(template_handle, locals[i].key, locals[i].value))) return codes_failed(rc, locals[i].key);
  const struct { const char *key; const char *value; } strings[] = {
      {"class", "rd"}, {"type", "fc"}, {"stream", "oper"}, {"expver", expver}, {"typeOfLevel", "hybrid"},
      {"stepUnits", "h"}};
  for (size_t i = 0; i < sizeof strings / sizeof *strings; ++i)
    if ((rc = codes_set_string(template_handle, strings[i].key, strings[i].value, (len = strlen(strings[i].value), &len))))
      return codes_failed(rc, strings[i].key);
  const struct { const char *key; long value; } longs[] = {
      {"dataDate", atol(date)}, {"dataTime", 0}, {"Ni", n}, {"Nj", n}, {"bitsPerValue", 24}};
  for (size_t i = 0; i < sizeof longs / sizeof *longs; ++i)
    if ((rc = codes_set_long(template_handle, longs[i].key, longs[i].value))) return codes_failed(rc, longs[i].key);
  const struct { const char *key; double value; } doubles[] = {
      {"latitudeOfFirstGridPointInDegrees", 90.0}, {"longitudeOfFirstGridPointInDegrees", 0.0},
      {"latitudeOfLastGridPointInDegrees", -90.0}, {"longitudeOfLastGridPointInDegrees", 360.0 * (n - 1) / n},
      {"iDirectionIncrementInDegrees", 360.0 / n}, {"jDirectionIncrementInDegrees", 180.0 / (n - 1)}};
  for (size_t i = 0; i < sizeof doubles / sizeof *doubles; ++i)
    if ((rc = codes_set_double(template_handle, doubles[i].key, doubles[i].value))) return codes_failed(rc, doubles[i].key);
  slice = malloc(sizeof(double) * (size_t)n * (size_t)n);
  if (!slice) {
    snprintf(message, sizeof message, "no memory for a %d x %d slice", n, n);
    return 1;
  }
  return 0;
}

/* Archives levels 1..n of one field: `field` is Fortran's field(0:n+1, 0:n+1, 0:n+1) with one
 * ghost layer; level k is the slice field(1:n, 1:n, k). */
int mg_fields_write(int step, int param, const double *field, int n) {
  const size_t side = (size_t)n + 2;
  char step_text[16], param_text[16], level_text[16];
  snprintf(step_text, sizeof step_text, "%d", step);
  snprintf(param_text, sizeof param_text, "%d", param);
  for (int k = 1; k <= n; ++k) {
    for (int j = 1; j <= n; ++j)
      memcpy(slice + (size_t)(j - 1) * n, field + ((size_t)k * side + (size_t)j) * side + 1, sizeof(double) * n);
    codes_handle *h = codes_handle_clone(template_handle);
    if (!h) return codes_failed(0, "cloning the template");
    int rc = codes_set_long(h, "level", k);
    if (!rc) rc = codes_set_long(h, "step", step);
    if (!rc) rc = codes_set_long(h, "paramId", param);
    if (!rc) rc = codes_set_double_array(h, "values", slice, (size_t)n * n);
    const void *msg = NULL;
    size_t bytes = 0;
    if (!rc) rc = codes_get_message(h, &msg, &bytes);
    if (rc) {
      codes_handle_delete(h);
      return codes_failed(rc, "encoding a level");
    }
    fdb_key_t *key;
    snprintf(level_text, sizeof level_text, "%d", k);
    fdb_new_key(&key);
    const char *pairs[][2] = {{"class", "rd"}, {"expver", expver}, {"stream", "oper"}, {"date", date},
                              {"time", "0000"}, {"domain", "g"}, {"type", "fc"}, {"levtype", "ml"},
                              {"step", step_text}, {"levelist", level_text}, {"param", param_text}};
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; ++i) fdb_key_add(key, pairs[i][0], pairs[i][1]);
    rc = fdb_archive(fdb, key, msg, bytes);
    fdb_delete_key(key);
    codes_handle_delete(h);
    if (rc) return fdb_failed(rc, "archive");
    ++archived_fields;
    archived_bytes += (long)bytes;
  }
  return 0;
}

/* The end of an output step: every field archived so far durable, then visible. */
int mg_fields_flush(void) {
  int rc = fdb_flush(fdb);
  return rc ? fdb_failed(rc, "flush") : 0;
}

void mg_fields_close(void) {
  if (fdb) fdb_delete_handle(fdb);
  if (template_handle) codes_handle_delete(template_handle);
  free(slice);
  fdb = NULL;
  template_handle = NULL;
  slice = NULL;
}
