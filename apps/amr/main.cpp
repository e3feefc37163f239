// hetmem-amr: drives a persistent octree the way an adaptive flow solver does. An interface moves
// (spheres along a circle, or a droplet pinching off a jet); every step refines the leaves it
// crosses, coarsens complete families away from it, restores 2:1 balance, sets the values of the
// leaves the "solver" works on, and persists. Per-routine times and what the tree did to the
// tiers are printed as a table and written as JSON; --restore continues a run.
#include <hetmem/pm_octree.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "hetmem/hetmem.h"
#include "sqlite_store.h"

namespace {

struct Options {
  int dim = 3;
  int steps = 100;
  int level = 6;
  int spheres = 1;
  double radius = 0.15;
  std::string pool;
  uint64_t pool_mib = 1024;
  bool restore = false;
  bool overwrite = false;
  std::string json;
  int progress = 10;
  bool droplet = false;
  uint64_t fast_kib = 4096;
  bool transform = true;
  std::string replica;
  bool emulate = false;
  bool census = false;
  int threads = 1;
  std::string store = "pm";  // pm, incore or sqlite
  int snapshot_every = 10;
  std::vector<std::string> given;  // the options on the command line
  bool was_given(const std::string &flag) const { return std::find(given.begin(), given.end(), flag) != given.end(); }
};

const char kUsage[] =
    "usage: hetmem-amr [options]\n"
    "  --dim N         2 (quadtree) or 3 (octree); default 3\n"
    "  --steps N       steps to run (one persist each); default 100\n"
    "  --level N       finest level at the interface, 2..12; default 6\n"
    "  --spheres N     spheres moving along a circle, 1..16; default 1\n"
    "  --radius R      sphere radius, 0 < R < 0.5; default 0.15\n"
    "  --shape S       spheres (default) or droplet (a droplet pinching off a jet)\n"
    "  --fast-kib N    C0: fast-tier KiB for hot subtrees (0: none); default 4096\n"
    "  --no-transform  keep C0 where it first was (no feature-directed sampling)\n"
    "  --replica R     send each version's delta to a second pool: a path, or\n"
    "                  tcp://HOST:PORT for a hetmem-replica server on another host;\n"
    "                  --restore fetches from it when the pool file is gone\n"
    "  --emulate-nvbm  charge pool accesses as the emulated nvbm device (Nguyen et al. (SC'17))\n"
    "  --census        count each step's writes per family: the transformation's prediction hit\n"
    "                  rate and the most C0 could have absorbed (costs time; for measurements)\n"
    "  --threads N     threads for 2:1 balance and the restore's check, 1 or 2 (the tree is\n"
    "                  the same on either); default 1\n"
    "  --store S       pm (default): the persistent octree, a persist every step;\n"
    "                  incore: the tree in DRAM, a snapshot file (POOL.snap) every\n"
    "                  --snapshot-every steps (Gerris-like); sqlite: the leaves in a\n"
    "                  Morton-keyed SQLite B-tree (POOL.sqlite), a transaction per step\n"
    "                  (Etree-like out-of-core octree)\n"
    "  --snapshot-every N  steps between snapshots of --store incore; default 10\n"
    "  --pool PATH     pool file (on a DAX mount for real persistent memory);\n"
    "                  default $TMPDIR/hetmem-amr.pool\n"
    "  --pool-mib N    pool size for a new run; default 1024\n"
    "  --restore       continue from the pool's last persisted step, with the run's\n"
    "                  --dim, --level, --spheres, --radius and --shape (kept in the\n"
    "                  pool); a pool whose creating run stopped before its first\n"
    "                  version is started afresh\n"
    "  --overwrite     start a new run even if the pool file exists (its versions are lost)\n"
    "  --json FILE     write the timings as JSON\n"
    "  --progress N    a progress line every N steps (0: none); default 10\n";

[[noreturn]] void usage_error(const std::string &why) {
  std::fprintf(stderr, "hetmem-amr: %s (hetmem-amr --help lists the options)\n", why.c_str());
  std::exit(2);
}

long parse_int(const char *flag, const char *v, long lo, long hi) {
  char *end = nullptr;
  long x = v ? std::strtol(v, &end, 10) : 0;
  if (!v || !*v || *end || x < lo || x > hi)
    usage_error(std::string(flag) + " wants an integer in " + std::to_string(lo) + ".." + std::to_string(hi) +
                ", got '" + (v ? v : "") + "'");
  return x;
}

[[noreturn]] void path_error(const std::string &why) {
  std::fprintf(stderr, "hetmem-amr: %s\n", why.c_str());
  std::exit(2);
}

// Paths checked before the first step, so that a mistake costs no run: the pool must be a file,
// the replica another file than the pool, and the JSON file writable.
void check_paths(const Options &o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(o.pool, ec))
    path_error("--pool '" + o.pool + "' is a directory; name the pool file (for example " +
                (fs::path(o.pool) / "amr.pool").string() + ")");
  if (!o.replica.empty() && o.replica.rfind("tcp://", 0) != 0) {
    bool same = fs::exists(o.replica, ec) && fs::exists(o.pool, ec) ? fs::equivalent(o.replica, o.pool, ec)
                                                                      : fs::weakly_canonical(o.replica, ec) ==
                                                                            fs::weakly_canonical(o.pool, ec);
    if (same) path_error("--replica '" + o.replica + "' is the pool itself; a replica is a second file (or tcp://HOST:PORT)");
    if (fs::is_directory(o.replica, ec)) path_error("--replica '" + o.replica + "' is a directory; name a pool file");
  }
  if (!o.json.empty()) {
    fs::path json(o.json);
    fs::path dir = json.has_parent_path() ? json.parent_path() : fs::path(".");
    if (fs::is_directory(json, ec)) path_error("--json '" + o.json + "' is a directory; name a file");
    bool writable = fs::exists(json, ec) ? access(o.json.c_str(), W_OK) == 0
                                         : fs::is_directory(dir, ec) && access(dir.c_str(), W_OK) == 0;
    if (!writable)
      path_error("--json '" + o.json + "' cannot be written (" +
                  (fs::is_directory(dir, ec) ? "no permission" : "no directory '" + dir.string() + "'") + ")");
  }
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    o.given.push_back(a);
    const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
    auto take = [&] {
      if (!v) usage_error(a + " needs a value");
      ++i;
      return v;
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--version") {
      std::printf("hetmem-amr %s\n", hm_version());
      std::exit(0);
    } else if (a == "--dim") o.dim = static_cast<int>(parse_int("--dim", take(), 2, 3));
    else if (a == "--steps") o.steps = static_cast<int>(parse_int("--steps", take(), 1, 1000000));
    else if (a == "--level") o.level = static_cast<int>(parse_int("--level", take(), 2, 12));
    else if (a == "--spheres") o.spheres = static_cast<int>(parse_int("--spheres", take(), 1, 16));
    else if (a == "--pool-mib") o.pool_mib = static_cast<uint64_t>(parse_int("--pool-mib", take(), 1, 1 << 24));
    else if (a == "--progress") o.progress = static_cast<int>(parse_int("--progress", take(), 0, 1000000));
    else if (a == "--pool") o.pool = take();
    else if (a == "--json") o.json = take();
    else if (a == "--restore") o.restore = true;
    else if (a == "--fast-kib") o.fast_kib = static_cast<uint64_t>(parse_int("--fast-kib", take(), 0, 1l << 30));
    else if (a == "--no-transform") o.transform = false;
    else if (a == "--replica") o.replica = take();
    else if (a == "--emulate-nvbm") o.emulate = true;
    else if (a == "--census") o.census = true;
    else if (a == "--threads") o.threads = static_cast<int>(parse_int("--threads", take(), 1, 2));
    else if (a == "--snapshot-every") o.snapshot_every = static_cast<int>(parse_int("--snapshot-every", take(), 1, 1000000));
    else if (a == "--store") {
      o.store = take();
      if (o.store != "pm" && o.store != "incore" && o.store != "sqlite")
        usage_error("--store is pm, incore or sqlite, got '" + o.store + "'");
    }
    else if (a == "--shape") {
      std::string v = take();
      if (v != "spheres" && v != "droplet") usage_error("--shape is spheres or droplet, got '" + v + "'");
      o.droplet = v == "droplet";
    }
    else if (a == "--overwrite") o.overwrite = true;
    else if (a == "--radius") {
      const char *r = take();
      char *end = nullptr;
      o.radius = std::strtod(r, &end);
      if (!*r || *end || !(o.radius > 0 && o.radius < 0.5)) usage_error(std::string("--radius wants 0 < R < 0.5, got '") + r + "'");
    } else {
      usage_error("unknown option '" + a + "'");
    }
  }
  if (o.restore && o.overwrite) usage_error("--restore and --overwrite exclude each other");
  if (o.store != "pm" && (o.restore || !o.replica.empty()))
    usage_error("--restore and --replica need --store pm (the baselines start a new run each time)");
  if (o.pool.empty()) {
    const char *dir = std::getenv("TMPDIR");
    o.pool = std::string(dir && *dir ? dir : "/tmp") + "/hetmem-amr.pool";
  }
  check_paths(o);
  return o;
}

// The interface at step s. Spheres: sphere k's centre goes round a circle of radius 0.25 once per
// 100 steps. Droplet: a jet rises from the bottom face, a droplet detaches from it and moves up
// while it oscillates, every 100 steps (the axis is y in 2D, z in 3D).
struct Interface {
  int dim, level, spheres;
  double radius, centre[16][3];
  bool droplet = false;
  double jet_top = 0, drop_z = 0, drop_r = 0;
  void at(int step) {
    const double tau = (step % 100) / 100.0;
    for (int k = 0; k < spheres; ++k) {
      double phase = 2 * M_PI * (step / 100.0 + static_cast<double>(k) / spheres);
      centre[k][0] = 0.5 + 0.25 * std::cos(phase);
      centre[k][1] = 0.5 + 0.25 * std::sin(phase);
      centre[k][2] = 0.5;
    }
    jet_top = 0.25 + 0.1 * std::sin(2 * M_PI * tau);
    drop_z = 0.4 + 0.45 * tau;
    drop_r = 0.08 * (1 + 0.2 * std::sin(4 * M_PI * tau));
  }
  // Signed distance to the droplet and jet (negative inside).
  double droplet_phi(const double *x) const {
    const int up = dim - 1;
    double side = 0, drop = 0;
    for (int d = 0; d < dim; ++d) {
      const double dx = x[d] - 0.5, dz = x[d] - drop_z;
      if (d != up) side += dx * dx;
      drop += d == up ? dz * dz : dx * dx;
    }
    const double along = std::min(std::max(x[up], 0.0), jet_top) - x[up];
    const double jet = std::sqrt(side + along * along) - 0.05;
    return std::min(jet, std::sqrt(drop) - drop_r);
  }
  // Whether the interface passes through the leaf's box.
  bool crosses(const pm_leaf_t &l) const {
    const double size = std::ldexp(1.0, -static_cast<int>(l.level));
    if (droplet) {
      double c[3] = {0, 0, 0};
      for (int d = 0; d < dim; ++d) c[d] = std::ldexp(static_cast<double>(l.coord[d]), -20) + size / 2;
      return std::fabs(droplet_phi(c)) <= size * std::sqrt(static_cast<double>(dim)) / 2;
    }
    for (int k = 0; k < spheres; ++k) {
      double nearest = 0, farthest = 0;
      for (int d = 0; d < dim; ++d) {
        double lo = std::ldexp(static_cast<double>(l.coord[d]), -20) - centre[k][d], hi = lo + size;
        double n = lo > 0 ? lo : (hi < 0 ? hi : 0), f = std::max(std::fabs(lo), std::fabs(hi));
        nearest += n * n;
        farthest += f * f;
      }
      if (std::sqrt(nearest) <= radius && std::sqrt(farthest) >= radius) return true;
    }
    return false;
  }
};

int refine_fn(const pm_leaf_t *l, void *arg) {
  auto *in = static_cast<Interface *>(arg);
  return static_cast<int>(l->level) < in->level && in->crosses(*l);
}
// The feature for the transformation: where the interface will be at the next step.
int feature_fn(const pm_leaf_t *l, void *arg) { return static_cast<Interface *>(arg)->crosses(*l); }

// The solver's touch: the leaves at the finest level near the interface get a new value.
struct Solve {
  Interface *in;
  std::vector<pm_leaf_t> touched;
};
void collect_fine(const pm_leaf_t *l, void *arg) {
  auto *s = static_cast<Solve *>(arg);
  if (static_cast<int>(l->level) == s->in->level) s->touched.push_back(*l);
}

int coarsen_fn(const pm_leaf_t *family, int count, void *arg) {
  auto *in = static_cast<Interface *>(arg);
  if (family[0].level <= 2) return 0;
  for (int c = 0; c < count; ++c)
    if (in->crosses(family[c])) return 0;
  return 1;
}

// The options that shape a run's tree, kept in its pool's note so that --restore continues the
// same problem.
std::string run_note(const Options &o) {
  char note[256];
  std::snprintf(note, sizeof note, "hetmem-amr run: dim=%d level=%d spheres=%d radius=%.17g shape=%s", o.dim, o.level,
                o.spheres, o.radius, o.droplet ? "droplet" : "spheres");
  return note;
}

// Takes the run's options from its pool's note. An option given on the command line that differs
// is refused by name: restoring with another problem would re-adapt the tree to it in one step.
void adopt_run_options(Options &o, const std::string &note) {
  if (note.rfind("hetmem-amr run:", 0) != 0) {
    std::fprintf(stderr, "hetmem-amr: the pool '%s' keeps no run options (an older pool); continuing with the "
                 "options given\n", o.pool.c_str());
    return;
  }
  Options kept = o;
  char shape[16] = "";
  if (std::sscanf(note.c_str(), "hetmem-amr run: dim=%d level=%d spheres=%d radius=%lf shape=%15s", &kept.dim,
                  &kept.level, &kept.spheres, &kept.radius, shape) != 5)
    path_error("the pool '" + o.pool + "' keeps run options this hetmem-amr cannot read: '" + note + "'");
  kept.droplet = std::string(shape) == "droplet";
  const std::string mine = run_note(o), theirs = run_note(kept);
  for (const char *flag : {"--dim", "--level", "--spheres", "--radius", "--shape"}) {
    const std::string key = std::string(flag + 2) + "=";
    auto value = [&](const std::string &n) {
      const size_t at = n.find(key) + key.size();
      return n.substr(at, n.find(' ', at) - at);
    };
    if (o.was_given(flag) && value(mine) != value(theirs))
      path_error(std::string(flag) + " " + value(mine) + " differs from the run's " + value(theirs) + " kept in '" +
                 o.pool + "'; drop " + flag + " to continue the run, or start a new one with --overwrite");
  }
  o.dim = kept.dim, o.level = kept.level, o.spheres = kept.spheres, o.radius = kept.radius, o.droplet = kept.droplet;
}

// What to do with the pool path of a --store pm run before anything is created: continue it
// (--restore), start afresh, or refuse. A pool without a committed version, or only the staging
// file of a creator killed before its first version, holds nothing to lose: it is started afresh.
void settle_pool(Options &o) {
  pm_pool_info_t info;
  if (pm_inspect(o.pool.c_str(), &info) != HM_OK) {
    if (o.restore) return;  // pm_restore names what is wrong
    if (!o.overwrite)
      path_error(std::string(hm_last_error()) + "; name another --pool, or --overwrite replaces it");
    return;
  }
  if (info.state == PM_POOL_CREATING || info.state == PM_POOL_EMPTY) {
    std::printf("hetmem-amr: '%s' holds no committed version (its run stopped while creating it); starting afresh\n",
                o.pool.c_str());
    o.restore = false;
    return;
  }
  if (info.state == PM_POOL_COMMITTED && !o.restore && !o.overwrite)
    path_error("the pool '" + o.pool + "' exists; --restore continues it, --overwrite starts over");
}

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int fail(const char *what) {
  std::fprintf(stderr, "hetmem-amr: %s: %s\n", what, hm_last_error());
  return 1;
}

// The sqlite baseline's step: the tree's leaves written to the database; false once the error
// is reported.
bool store_leaves(amr::SqliteStore &db, const pm_octree_t *tree) {
  std::vector<amr::StoredLeaf> leaves;
  if (amr::stored_leaves(tree, &leaves) != HM_OK) {
    fail("sqlite");
    return false;
  }
  if (db.apply(leaves) >= 0) return true;
  std::fprintf(stderr, "hetmem-amr: sqlite: %s\n", db.error().c_str());
  return false;
}

}  // namespace

int main(int argc, char **argv) {
  Options o = parse(argc, argv);
  const bool pm = o.store == "pm";
  if (pm) settle_pool(o);
  pm_options_t options;
  pm_options_init(&options);
  options.fast_bytes = o.fast_kib << 10;
  options.transform = o.transform;
  options.replica = o.replica.empty() ? nullptr : o.replica.c_str();
  options.emulate_nvbm = o.emulate;
  options.census = o.census;
  options.threads = o.threads;
  double t_construct = 0, t_adapt = 0, t_balance = 0, t_solve = 0, t_persist = 0, t_restore = 0;
  // The baselines keep the tree in DRAM (a pool on /dev/shm that is never persisted).
  const std::string work = std::string(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/hetmem-amr-" +
                           std::to_string(getpid()) + ".pool";
  const std::string snapshot = o.pool + ".snap";
  uint64_t snapshot_sum = 0;
  amr::SqliteStore db;
  pm_octree_t *tree = nullptr;
  int first = 0;
  bool construct = true;
  auto t0 = Clock::now();
  if (o.restore) {
    // The run's first operation is a refinement, which checks every family first anyway: checked
    // before restore returns, damage is named as the restore's.
    pm_options_t checked_now = options;
    checked_now.check_on_first_visit = 0;
    if (pm_restore_ex(o.pool.c_str(), &checked_now, &tree) != HM_OK) return fail("--restore");
    if (o.was_given("--dim") && pm_dim(tree) != o.dim) {
      std::fprintf(stderr, "hetmem-amr: the pool holds a %dD tree; run with --dim %d\n", pm_dim(tree), pm_dim(tree));
      pm_close(tree);
      return 2;
    }
    adopt_run_options(o, pm_note(tree));
    t_restore = since(t0);
    first = static_cast<int>(pm_version(tree)) - 2;  // version 2 is step 0
    construct = first < 0;  // only pm_create's empty tree was persisted
    std::printf("restored %s: version %llu (%s), %llu leaves, in %.3f s\n", o.pool.c_str(),
                static_cast<unsigned long long>(pm_version(tree)),
                construct ? "its run stopped before constructing the tree; constructing it"
                          : ("step " + std::to_string(first)).c_str(),
                static_cast<unsigned long long>(pm_leaf_count(tree)), t_restore);
    ++first;
  } else if (!pm && std::filesystem::exists(o.pool) && !o.overwrite) {
    std::fprintf(stderr, "hetmem-amr: the pool '%s' exists; --restore continues it, --overwrite starts over\n",
                 o.pool.c_str());
    return 2;
  } else if (pm) {
    // A pool replaced with --overwrite stays whole until the new one's first version is durable.
    const std::string note = run_note(o);
    options.note = note.c_str();
    const int rc = pm_create_ex(o.pool.c_str(), o.dim, o.pool_mib << 20, &options, &tree);
    options.note = nullptr;
    // With the options checked, the one argument creation can still refuse is a C0 budget too
    // small for the tree's deepest path: bad input, named by its flag.
    if (rc == HM_EINVAL && o.fast_kib > 0) path_error("--fast-kib " + std::to_string(o.fast_kib) + ": " + hm_last_error());
    if (rc != HM_OK) return fail("creating the pool");
    std::printf("pool: %s (%llu MiB, sparse; kept for --restore, --overwrite starts over)\n", o.pool.c_str(),
                static_cast<unsigned long long>(o.pool_mib));
  } else if (pm_create(work.c_str(), o.dim, o.pool_mib << 20, &tree) != HM_OK) {
    return fail("creating the in-memory tree");
  } else if (o.store == "sqlite" && !db.create(o.pool + ".sqlite")) {
    std::fprintf(stderr, "hetmem-amr: sqlite: %s\n", db.error().c_str());
    return 1;
  }
  Interface in{o.dim, o.level, o.spheres, o.radius, {}};
  in.droplet = o.droplet;
  Interface next = in;  // the interface one step ahead: the transformation's feature
  if (construct) {
    in.at(0);
    if (pm_refine_ex(tree, refine_fn, &in, PM_RECURSIVE) != HM_OK) return fail("construct");
    if (pm_balance(tree) != HM_OK) return fail("construct");
    if (pm && pm_persistent(tree) != HM_OK) return fail("construct");
    if (o.store == "sqlite" && !store_leaves(db, tree)) return 1;
    t_construct = since(t0);
    const std::string around = o.droplet ? "the droplet and jet" : std::to_string(o.spheres) + " sphere(s)";
    std::printf("constructed a %dD tree to level %d around %s: %llu leaves in %.3f s\n", o.dim, o.level, around.c_str(),
                static_cast<unsigned long long>(pm_leaf_count(tree)), t_construct);
    first = 1;
  }
  const int last = first + o.steps - 1;
  pm_set_features(tree, feature_fn, &next);
  Solve solve{&in, {}};
  for (int step = first; step <= last; ++step) {
    in.at(step);
    next.at(step + 1);
    auto t = Clock::now();
    // One recursive refinement and one recursive coarsening (Gerris' rule, finest level first)
    // reach the adapted tree.
    if (pm_refine_ex(tree, refine_fn, &in, PM_RECURSIVE) != HM_OK) return fail("refine");
    if (pm_coarsen_ex(tree, coarsen_fn, &in, PM_RECURSIVE | PM_KEEP_BALANCE) != HM_OK) return fail("coarsen");
    t_adapt += since(t);
    t = Clock::now();
    if (pm_balance(tree) != HM_OK) return fail("balance");
    t_balance += since(t);
    // The solver: the finest leaves (at the interface) are updated twice, as the finest level
    // sub-cycles against the next coarser one.
    t = Clock::now();
    solve.touched.clear();
    if (pm_leaves(tree, collect_fine, &solve) != HM_OK) return fail("solve");
    for (int sweep = 0; sweep < 2; ++sweep)
      for (const pm_leaf_t &l : solve.touched) {
        double c[3] = {0, 0, 0};
        for (int d = 0; d < o.dim; ++d) c[d] = std::ldexp(l.coord[d] + 0.5 * (1u << (20 - l.level)), -20);
        if (pm_set_value(tree, c, step + 0.5 * sweep) != HM_OK) return fail("solve");
      }
    t_solve += since(t);
    t = Clock::now();
    if (pm) {
      if (pm_persistent(tree) != HM_OK) return fail("persist");
    } else if (o.store == "incore") {
      if ((step - first + 1) % o.snapshot_every == 0) {
        if (pm_snapshot_save(tree, snapshot.c_str()) != HM_OK) return fail("snapshot");
        snapshot_sum = pm_checksum(tree);
      }
    } else if (!store_leaves(db, tree)) {
      return 1;
    }
    t_persist += since(t);
    if (o.progress && ((step - first + 1) % o.progress == 0 || step == last))
      std::printf("step %5d/%d: %llu leaves, version %llu\n", step, last,
                  static_cast<unsigned long long>(pm_leaf_count(tree)), static_cast<unsigned long long>(pm_version(tree)));
    std::fflush(stdout);
  }
  const uint64_t leaves = pm_leaf_count(tree), version = pm_version(tree), sum = pm_checksum(tree);
  pm_stats_t st;
  pm_stats(tree, &st);
  // Restore what was persisted, as a restart would, and check it is the tree the run persisted
  // last: the pool's last version, the last snapshot, or the database's leaves.
  bool same = true;
  double t_final_restore = 0;
  if (pm) {
    pm_close(tree);
    auto t = Clock::now();
    if (pm_restore_ex(o.pool.c_str(), &options, &tree) != HM_OK) return fail("restore");
    t_final_restore = since(t);
    same = pm_version(tree) == version && pm_checksum(tree) == sum && pm_valid(tree) == HM_OK;
    pm_close(tree);
  } else if (o.store == "incore") {
    pm_delete(tree);
    if (snapshot_sum) {
      pm_octree_t *loaded = nullptr;
      auto t = Clock::now();
      if (pm_snapshot_load(snapshot.c_str(), work.c_str(), o.pool_mib << 20, &loaded) != HM_OK) return fail("restore");
      t_final_restore = since(t);
      same = pm_checksum(loaded) == snapshot_sum;
      pm_delete(loaded);
    }
  } else {
    std::vector<amr::StoredLeaf> now;
    if (amr::stored_leaves(tree, &now) != HM_OK) return fail("restore");
    pm_delete(tree);
    std::vector<amr::StoredLeaf> back;
    auto t = Clock::now();
    if (!db.read_all(&back)) {
      std::fprintf(stderr, "hetmem-amr: sqlite: %s\n", db.error().c_str());
      return 1;
    }
    t_final_restore = since(t);
    same = back.size() == now.size();
    for (size_t i = 0; same && i < now.size(); ++i)
      same = back[i].key == now[i].key && back[i].level == now[i].level && back[i].value == now[i].value;
  }
  if (!same) {
    std::fprintf(stderr, "hetmem-amr: the restored tree differs from the persisted one\n");
    return 1;
  }
  const int n = o.steps;
  std::printf("\n%-16s %12s %14s\n", "routine", "total s", "per step ms");
  std::printf("%-16s %12.4f %14s\n", "construct", t_construct, "-");
  std::printf("%-16s %12.4f %14.3f\n", "refine/coarsen", t_adapt, 1e3 * t_adapt / n);
  std::printf("%-16s %12.4f %14.3f\n", "balance", t_balance, 1e3 * t_balance / n);
  std::printf("%-16s %12.4f %14.3f\n", "solve", t_solve, 1e3 * t_solve / n);
  std::printf("%-16s %12.4f %14.3f\n", pm ? "persist" : o.store == "incore" ? "snapshot" : "sqlite commit", t_persist,
              1e3 * t_persist / n);
  std::printf("%-16s %12.4f %14s\n", "restore", t_final_restore, "-");
  const bool restored = pm || o.store == "sqlite" || snapshot_sum != 0;
  std::printf("final: %s %llu, %llu leaves; %s\n", pm ? "version" : "step",
              static_cast<unsigned long long>(pm ? version : last), static_cast<unsigned long long>(leaves),
              restored ? "restore returned exactly the persisted tree"
                       : "no snapshot was written (fewer steps than --snapshot-every), nothing to restore");
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  if (pm)
    std::printf("tiers: %llu family writes to the pool (%s), %llu in C0 (%llu of %llu families), %llu merges, "
              "%llu transformations, %.1f MiB flushed, %llu collections%s%s\n",
              u(st.pool_writes), o.emulate ? "emulated nvbm" : "not emulated", u(st.fast_writes), u(st.fast_families),
              u(st.fast_capacity), u(st.merges), u(st.transforms), st.flushed_bytes / 1048576.0, u(st.gc_runs),
              o.replica.empty() ? "" : ", replica ", o.replica.empty() ? "" : (std::to_string(st.replica_bytes >> 10) + " KiB sent").c_str());
  if (pm && o.census && st.step_writes > 0)
    std::printf("census: the steps wrote %llu families, %.1f%% of it in C0; a C0 holding the same %llu families through a step "
                "could have taken at "
                "most %.1f%% (each step's most-written families); the features' sampled leaves: %.1f%% of their "
                "families written by the next step (%llu samples)\n",
                u(st.step_writes), 100.0 * st.step_fast_writes / st.step_writes, u(st.fast_capacity),
                100.0 * st.step_writes_bound / st.step_writes,
                st.predicted ? 100.0 * st.predicted_hit / st.predicted : 0.0, u(st.predicted));
  if (!o.json.empty()) {
    FILE *f = std::fopen(o.json.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "hetmem-amr: cannot write '%s'\n", o.json.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\"store\": \"%s\", \"dim\": %d, \"level\": %d, \"spheres\": %d, \"steps\": %d, \"leaves\": %llu, \"version\": %llu,\n"
                 " \"seconds\": {\"construct\": %.6f, \"refine_coarsen\": %.6f, \"balance\": %.6f, \"solve\": %.6f, "
                 "\"persist\": %.6f, \"restore\": %.6f},\n"
                 " \"tiers\": {\"emulated\": %s, \"pool_writes\": %llu, \"fast_writes\": %llu, \"merges\": %llu, "
                 "\"transforms\": %llu, \"flushed_bytes\": %llu, \"gc_runs\": %llu, \"replica_bytes\": %llu, "
                 "\"emul_charged_ns\": %llu, \"fast_capacity\": %llu, \"step_writes\": %llu, "
                 "\"step_fast_writes\": %llu, \"step_writes_bound\": %llu, \"predicted\": %llu, \"predicted_hit\": %llu}}\n",
                 o.store.c_str(), o.dim, o.level, o.spheres, n, u(leaves), u(version), t_construct, t_adapt, t_balance, t_solve, t_persist,
                 t_final_restore, o.emulate ? "true" : "false", u(st.pool_writes), u(st.fast_writes), u(st.merges),
                 u(st.transforms), u(st.flushed_bytes), u(st.gc_runs), u(st.replica_bytes), u(st.emul_charged_ns),
                 u(st.fast_capacity), u(st.step_writes), u(st.step_fast_writes), u(st.step_writes_bound), u(st.predicted),
                 u(st.predicted_hit));
    std::fclose(f);
  }
  return 0;
}
