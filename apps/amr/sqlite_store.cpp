#include "sqlite_store.h"

#include <cstdio>

namespace amr {

namespace {

uint64_t morton(const pm_leaf_t &l, int dim) {
  uint64_t key = 0;
  for (int bit = 0; bit < 20; ++bit)
    for (int d = 0; d < dim; ++d) key |= static_cast<uint64_t>((l.coord[d] >> bit) & 1u) << (bit * dim + d);
  return key;
}

struct Collect {
  int dim;
  std::vector<StoredLeaf> *out;
};

void collect(const pm_leaf_t *l, void *arg) {
  auto *c = static_cast<Collect *>(arg);
  c->out->push_back(StoredLeaf{morton(*l, c->dim), l->level, l->value});
}

}  // namespace

int stored_leaves(const pm_octree_t *tree, std::vector<StoredLeaf> *out) {
  out->clear();
  out->reserve(pm_leaf_count(tree));
  Collect c{pm_dim(tree), out};
  return pm_leaves(tree, collect, &c);  // Morton order already
}

SqliteStore::~SqliteStore() {
  if (db_) sqlite3_close(db_);
}

bool SqliteStore::exec(const char *sql) {
  char *msg = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &msg) == SQLITE_OK) return true;
  error_ = std::string(sql) + ": " + (msg ? msg : "error");
  sqlite3_free(msg);
  return false;
}

bool SqliteStore::create(const std::string &path) {
  std::remove(path.c_str());
  std::remove((path + "-wal").c_str());
  if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) {
    error_ = "cannot open '" + path + "': " + sqlite3_errmsg(db_);
    return false;
  }
  held_.clear();
  return exec("PRAGMA journal_mode=WAL") && exec("PRAGMA synchronous=FULL") &&
         exec("CREATE TABLE leaves (key INTEGER PRIMARY KEY, level INTEGER NOT NULL, value REAL NOT NULL)");
}

long SqliteStore::apply(const std::vector<StoredLeaf> &leaves) {
  sqlite3_stmt *del = nullptr, *put = nullptr;
  if (!exec("BEGIN") ||
      sqlite3_prepare_v2(db_, "DELETE FROM leaves WHERE key = ?", -1, &del, nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO leaves (key, level, value) VALUES (?, ?, ?)", -1, &put, nullptr) !=
          SQLITE_OK) {
    if (error_.empty()) error_ = sqlite3_errmsg(db_);
    sqlite3_finalize(del);
    sqlite3_finalize(put);
    return -1;
  }
  long changed = 0;
  bool ok = true;
  auto run = [&](sqlite3_stmt *s) {
    ok &= sqlite3_step(s) == SQLITE_DONE;
    sqlite3_reset(s);
    ++changed;
  };
  // A merge of the held leaves and the new ones, both in key order.
  size_t i = 0, j = 0;
  while (ok && (i < held_.size() || j < leaves.size())) {
    if (j == leaves.size() || (i < held_.size() && held_[i].key < leaves[j].key)) {
      sqlite3_bind_int64(del, 1, static_cast<sqlite3_int64>(held_[i++].key));
      run(del);
      continue;
    }
    const StoredLeaf &n = leaves[j++];
    const bool same_key = i < held_.size() && held_[i].key == n.key;
    const bool same = same_key && held_[i].level == n.level && held_[i].value == n.value;
    if (same_key) ++i;
    if (same) continue;
    sqlite3_bind_int64(put, 1, static_cast<sqlite3_int64>(n.key));
    sqlite3_bind_int(put, 2, static_cast<int>(n.level));
    sqlite3_bind_double(put, 3, n.value);
    run(put);
  }
  sqlite3_finalize(del);
  sqlite3_finalize(put);
  if (!ok) {
    error_ = sqlite3_errmsg(db_);
    exec("ROLLBACK");
    return -1;
  }
  if (!exec("COMMIT")) return -1;
  held_ = leaves;
  return changed;
}

bool SqliteStore::read_all(std::vector<StoredLeaf> *out) {
  sqlite3_stmt *s = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT key, level, value FROM leaves ORDER BY key", -1, &s, nullptr) != SQLITE_OK) {
    error_ = sqlite3_errmsg(db_);
    return false;
  }
  out->clear();
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW)
    out->push_back(StoredLeaf{static_cast<uint64_t>(sqlite3_column_int64(s, 0)),
                              static_cast<uint32_t>(sqlite3_column_int(s, 1)), sqlite3_column_double(s, 2)});
  sqlite3_finalize(s);
  if (rc != SQLITE_DONE) error_ = sqlite3_errmsg(db_);
  return rc == SQLITE_DONE;
}

}  // namespace amr
