/* The hetmem store through FDB's C API (fdb5/api/fdb_c.h), as a C program would use it: archive
 * fields with explicit keys, flush, list (every field in a hetmem pool), retrieve and compare byte
 * for byte, archive the same keys again and purge the older pool, then wipe the database and find
 * nothing. The configuration is FDB5_CONFIG_FILE. Prints one line per failed check; exit status is
 * the number of failures (tests/fields/test_fields.py runs it). */
#include <fdb5/api/fdb_c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FIELDS = 6, BYTES = 20000 };
static int failures;

#define CHECK(cond, ...)                        \
  do {                                          \
    if (!(cond)) {                              \
      fprintf(stderr, "FAILED: " __VA_ARGS__);  \
      fputc('\n', stderr);                      \
      ++failures;                               \
    }                                           \
  } while (0)

static const char *db_keys[][2] = {{"class", "rd"}, {"expver", "hmca"}, {"stream", "oper"}, {"date", "20261125"},
                                   {"time", "0000"}, {"domain", "g"}, {"type", "fc"}, {"levtype", "ml"},
                                   {"step", "0"}, {"param", "130"}};

static void fill(char *data, int field, int round) {
  for (int i = 0; i < BYTES; ++i) data[i] = (char)((i * 31 + field * 7 + round * 13) & 0xff);
}

static int archive_all(fdb_handle_t *fdb, int round) {
  char data[BYTES], level[8];
  for (int f = 0; f < FIELDS; ++f) {
    fdb_key_t *key;
    fdb_new_key(&key);
    for (size_t k = 0; k < sizeof db_keys / sizeof *db_keys; ++k) fdb_key_add(key, db_keys[k][0], db_keys[k][1]);
    snprintf(level, sizeof level, "%d", f + 1);
    fdb_key_add(key, "levelist", level);
    fill(data, f, round);
    int rc = fdb_archive(fdb, key, data, BYTES);
    fdb_delete_key(key);
    if (rc != FDB_SUCCESS) return rc;
  }
  return fdb_flush(fdb);
}

static fdb_request_t *request(int with_levels) {
  fdb_request_t *req;
  fdb_new_request(&req);
  for (size_t k = 0; k < sizeof db_keys / sizeof *db_keys; ++k) {
    if (!with_levels && k >= 6) break; /* the database's keys only */
    const char *v[] = {db_keys[k][1]};
    fdb_request_add(req, db_keys[k][0], v, 1);
  }
  if (with_levels) {
    const char *levels[] = {"1", "2", "3", "4", "5", "6"};
    fdb_request_add(req, "levelist", levels, FIELDS);
  }
  return req;
}

static int count_listed(fdb_handle_t *fdb, int *in_pools) {
  fdb_request_t *req = request(1);
  fdb_listiterator_t *it;
  int n = 0;
  *in_pools = 0;
  if (fdb_list(fdb, req, &it, false, 3) == FDB_SUCCESS) {
    while (fdb_listiterator_next(it) == FDB_SUCCESS) {
      const char *uri;
      size_t off, len;
      fdb_listiterator_attrs(it, &uri, &off, &len);
      ++n;
      *in_pools += strstr(uri, ".hmpool") != NULL && len == BYTES;
    }
    fdb_delete_listiterator(it);
  }
  fdb_delete_request(req);
  return n;
}

int main(void) {
  if (fdb_initialise() != FDB_SUCCESS) return 100;
  fdb_handle_t *fdb;
  CHECK(fdb_new_handle(&fdb) == FDB_SUCCESS, "fdb_new_handle");
  CHECK(archive_all(fdb, 0) == FDB_SUCCESS, "archive and flush");
  int in_pools = 0;
  CHECK(count_listed(fdb, &in_pools) == FIELDS, "list finds %d fields", FIELDS);
  CHECK(in_pools == FIELDS, "every field is in a hetmem pool (%d are)", in_pools);
  fdb_delete_handle(fdb);

  /* Retrieve through a new handle, every field's bytes. */
  fdb_new_handle(&fdb);
  fdb_request_t *req = request(1);
  fdb_datareader_t *dr;
  fdb_new_datareader(&dr);
  CHECK(fdb_retrieve(fdb, req, dr) == FDB_SUCCESS, "fdb_retrieve");
  long size = 0, got = 0;
  fdb_datareader_open(dr, &size);
  CHECK(size == (long)FIELDS * BYTES, "retrieved %ld bytes, expected %d", size, FIELDS * BYTES);
  char *all = malloc((size_t)FIELDS * BYTES), expect[BYTES];
  fdb_datareader_read(dr, all, (long)FIELDS * BYTES, &got);
  fdb_datareader_close(dr);
  fdb_delete_datareader(dr);
  fdb_delete_request(req);
  /* The fields come back in some order: each must be one of those written. */
  for (int f = 0; f < FIELDS && got == size; ++f) {
    int match = 0;
    for (int g = 0; g < FIELDS; ++g) {
      fill(expect, g, 0);
      match |= memcmp(all + (size_t)f * BYTES, expect, BYTES) == 0;
    }
    CHECK(match, "retrieved field %d matches a field written", f);
  }
  free(all);

  /* The same keys again: the first pool's fields are all superseded, and purge removes it. */
  CHECK(archive_all(fdb, 1) == FDB_SUCCESS, "archive again");
  fdb_delete_handle(fdb);
  fdb_new_handle(&fdb);
  req = request(0);
  fdb_purge_iterator_t *pit;
  int purged = 0;
  CHECK(fdb_purge(fdb, req, true, false, &pit) == FDB_SUCCESS, "fdb_purge");
  fdb_purge_element_t *pel;
  while (fdb_purge_iterator_next(pit, &pel) == FDB_SUCCESS) {
    const char *text;
    fdb_purge_element_string(pel, &text);
    purged += strstr(text, ".hmpool") != NULL;
    fdb_delete_purge_element(pel);
  }
  fdb_delete_purge_iterator(pit);
  CHECK(purged > 0, "purge names the superseded pool");
  CHECK(count_listed(fdb, &in_pools) == FIELDS, "after purge, %d fields listed", FIELDS);

  /* Wipe the database: nothing is left to list. */
  fdb_wipe_iterator_t *wit;
  CHECK(fdb_wipe(fdb, req, true, false, false, &wit) == FDB_SUCCESS, "fdb_wipe");
  fdb_wipe_element_t *wel;
  while (fdb_wipe_iterator_next(wit, &wel) == FDB_SUCCESS) fdb_delete_wipe_element(wel);
  fdb_delete_wipe_iterator(wit);
  fdb_delete_request(req);
  fdb_delete_handle(fdb);
  fdb_new_handle(&fdb);
  CHECK(count_listed(fdb, &in_pools) == 0, "after wipe, nothing listed");
  fdb_delete_handle(fdb);
  return failures;
}
