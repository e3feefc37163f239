// hetmem-bench-octree: the PM-octree figures of Nguyen et al. (SC'17) §5, measured in one run.
//   restart     restoring a tree of >= 10^7 octants from its pool and visiting every leaf, in a fresh
//               process with the page cache warm and cold, vs loading it from a snapshot and vs
//               p4est's p8est_load of the same octants
//   persist     bytes a persist writes after a step changing <= 5% of the leaves vs a snapshot's
//   adapt       refine and 2:1 balance throughput (octants per second, one core) on three trees,
//               against p4est on the same trees (compared leaf by leaf) when libp4est is available
// Pools and snapshots go to --dir (default $TMPDIR); on an ordinary file system the figures are
// DRAM page-cache figures, on a DAX mount they are persistent memory's.
#include <fcntl.h>
#include <malloc.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "harness.h"
#include "hetmem/hetmem.h"
#include "persist/octree.h"

#ifdef HM_HAVE_P4EST
#include <p4est_base.h>
#include <p8est.h>
#include <p8est_extended.h>
#endif

using hm::persist::Octree;
using Tree = Octree<3>;
using Leaf = Tree::Leaf;

extern char **environ;

namespace {

struct Args {
  std::vector<std::string> child;  // --restart-child KIND PATH SCRATCH BYTES (internal)
  bool quick = false;
  bool restart_only = false;  // only the restart figures (the slowest to change, quickest to rerun)
  bool adapt_only = false;    // only the refine and balance figures against p4est
  bool no_p4est = false;      // with restart_only: no p8est_load and no MPI (a guest without an MPI runtime)
  std::vector<std::string> ranks;  // --p4est-balance SHAPE LEVEL ROUNDS (run under mpirun)
  std::string json;  // default: results/hetmem-bench-octree.json in the build tree
  std::string dir;
};

[[noreturn]] void die(const char *what) {
  std::fprintf(stderr, "hetmem-bench-octree: %s: %s\n", what, hm_last_error());
  std::exit(1);
}

// The sphere of radius 0.3 around (cx, 0.5, 0.5): whether its surface crosses a box.
bool crosses(const double *lo, double size, double cx) {
  const double centre[3] = {cx, 0.5, 0.5};
  double nearest = 0, farthest = 0;
  for (int d = 0; d < 3; ++d) {
    const double a = lo[d] - centre[d], b = a + size;
    const double n = a > 0 ? a : (b < 0 ? b : 0), f = std::max(std::fabs(a), std::fabs(b));
    nearest += n * n;
    farthest += f * f;
  }
  return std::sqrt(nearest) <= 0.3 && std::sqrt(farthest) >= 0.3;
}

std::unique_ptr<Tree> make(const std::string &path, uint64_t bytes) {
  unlink(path.c_str());
  std::unique_ptr<Tree> t;
  if (Tree::create(path, bytes, &t) != HM_OK) die(path.c_str());
  return t;
}

// The trees the adaptation is measured on, as predicates on an octant (lower corner in [0, 1)^3,
// edge length, level), the same for both codes: the sphere's surface, the droplet and jet of
// hetmem-amr --shape droplet at its first step, and a random refinement (uniform to level 3, then
// each octant refined with probability 0.3 from a hash of its corner and level).
enum class Shape { sphere, droplet, random };
const char *shape_name(Shape s) { return s == Shape::sphere ? "sphere" : s == Shape::droplet ? "droplet" : "random"; }
int shape_level(Shape s, bool quick) { return s == Shape::random ? (quick ? 8 : 10) : (quick ? 7 : 9); }

double droplet_phi(const double *x) {  // signed distance to the droplet and jet (apps/amr, step 0)
  const double jet_top = 0.25, drop_z = 0.4, drop_r = 0.08;
  const double side = (x[0] - 0.5) * (x[0] - 0.5) + (x[1] - 0.5) * (x[1] - 0.5);
  const double along = std::min(std::max(x[2], 0.0), jet_top) - x[2];
  return std::min(std::sqrt(side + along * along) - 0.05, std::sqrt(side + (x[2] - drop_z) * (x[2] - drop_z)) - drop_r);
}

bool refines(Shape s, const double *lo, double size, uint64_t key) {
  if (s == Shape::sphere) return crosses(lo, size, 0.5);
  if (s == Shape::droplet) {
    const double c[3] = {lo[0] + size / 2, lo[1] + size / 2, lo[2] + size / 2};
    return std::fabs(droplet_phi(c)) <= size * std::sqrt(3.0) / 2;
  }
  uint64_t z = key + 0x9E3779B97F4A7C15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return size > 0.125 || (z >> 11) * 0x1.0p-53 < 0.3;
}

// An octant's key for the random tree: corner in units of 2^-20 and level.
uint64_t octant_key(const uint32_t *c, int level) {
  return uint64_t{c[0]} | uint64_t{c[1]} << 20 | uint64_t{c[2]} << 40 | uint64_t(level) << 60;
}

// A hash of the leaves in order (corner in units of 2^-20, level): equal for the same tree.
struct LeafHash {
  uint64_t h = 1469598103934665603ull, n = 0;
  void add(const uint32_t *c, int level) {
    for (uint64_t w : {uint64_t{c[0]}, uint64_t{c[1]}, uint64_t{c[2]}, uint64_t(level)}) h = (h ^ w) * 1099511628211ull;
    ++n;
  }
};

// The times of one round on one tree: the first refinement (into a new pool or heap), the balance,
// and the same refinement again after the tree was coarsened back to its root (into space the
// first one left mapped, as in a simulation's later steps).
struct AdaptTimes {
  double refine_s = 0, balance_s = 0, again_s = 0;
  double balance1_s = 0, balance2_s = 0;  // balance again (into mapped pages) on 1 and on 2 threads
  uint64_t refine_top = 0;                 // the pool's top after the first refinement
  long refine_faults = 0;                  // pages the kernel supplied during the first refinement
};

// The refinement predicate of `shape` to `level` for the PM-octree.
auto refine_fn(Shape shape, int level) {
  return [shape, level](const Leaf &x) {
    if (static_cast<int>(x.level) >= level) return false;
    constexpr double unit = 0x1p-20;  // the corner's unit (as p4est's wrapper: a multiply, no libm call)
    const double lo[3] = {x.coord[0] * unit, x.coord[1] * unit, x.coord[2] * unit};
    return refines(shape, lo, static_cast<double>(1u << (20 - x.level)) * unit,
                   octant_key(x.coord, static_cast<int>(x.level)));
  };
}

// Refine `shape` to its level in one recursive pass (as p4est does), then balance, then coarsen to
// the root and refine again. The leaves before balancing go to *refined, a hash of the balanced
// tree's leaves to *hash.
AdaptTimes adapt(Tree &t, Shape shape, int level, uint64_t *refined, LeafHash *hash) {
  const auto fn = refine_fn(shape, level);
  const auto tree_hash = [&] {
    LeafHash h;
    if (t.leaves([&](const Leaf &l) { h.add(l.coord, static_cast<int>(l.level)); }) != HM_OK) die("leaves");
    return h;
  };
  const auto to_root = [&] {
    if (t.coarsen([](const Leaf *) { return true; }, false, true) != HM_OK || t.leaf_count() != 1)
      die("coarsen to the root");
  };
  AdaptTimes r;
  malloc_trim(0);  // the heap's free pages back, as before p4est's first refinement
  const long faults = bench::minor_faults();
  double t0 = bench::now();
  if (t.refine(fn, true) != HM_OK) die("refine");
  double t1 = bench::now();
  r.refine_faults = bench::minor_faults() - faults;
  *refined = t.leaf_count();
  r.refine_top = t.pool().top();
  if (t.balance() != HM_OK) die("balance");
  const double t2 = bench::now();
  r.refine_s = t1 - t0;
  r.balance_s = t2 - t1;
  *hash = tree_hash();
  const uint64_t balanced = t.leaf_count();
  to_root();
  t0 = bench::now();
  if (t.refine(fn, true) != HM_OK) die("refine again");
  r.again_s = bench::now() - t0;
  if (t.leaf_count() != *refined) die("refine again: a different tree");
  // Balance again on 2 threads, then (coarsened and refined once more) on 1: both into pages
  // mapped before, so that the two differ only in the threads.
  for (int threads : {2, 1}) {
    if (threads == 1) {
      to_root();
      if (t.refine(fn, true) != HM_OK) die("refine a third time");
    }
    t.set_threads(threads);
    t0 = bench::now();
    if (t.balance() != HM_OK) die("balance again");
    (threads == 2 ? r.balance2_s : r.balance1_s) = bench::now() - t0;
    const LeafHash h = tree_hash();
    if (h.h != hash->h || h.n != hash->n || t.leaf_count() != balanced) die("balance again: a different tree");
  }
  t.set_threads(1);
  return r;
}

// The first refinement into a new pool whose pages up to `top` were written in before the clock
// started (MADV_POPULATE_WRITE): what the first refinement costs without the kernel supplying
// the pool's new pages. Returns its time; *page_us: what supplying them cost, a page.
double refine_into_provisioned(const std::string &path, Shape shape, int level, uint64_t top, double *page_us) {
  auto t = make(path, uint64_t{8} << 30);
  char *base = t->pool().template at<char>(0);
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE (Linux 5.14)
  double t0 = bench::now();
  if (madvise(base, top, kPopulateWrite) != 0)  // an older kernel: a store into every page
    for (uint64_t at = 0; at < top; at += 4096) *static_cast<volatile char *>(base + at) = base[at];
  *page_us = (bench::now() - t0) * 1e6 / (static_cast<double>(top) / 4096);
  t0 = bench::now();
  if (t->refine(refine_fn(shape, level), true) != HM_OK) die("refine");
  const double s = bench::now() - t0;
  t.reset();
  unlink(path.c_str());
  return s;
}

// Refine around the sphere to `level`, pass by pass, then balance (the persist figures' tree).
void adapt_sphere(Tree &t, int level) {
  uint64_t refined = 0;
  LeafHash unused;
  adapt(t, Shape::sphere, level, &refined, &unused);
}

#ifdef HM_HAVE_P4EST
Shape g_shape = Shape::sphere;
int g_level = 0;
// A quadrant's corner in the PM-octree's unit (p4est's is 2^-P8EST_MAXLEVEL, 2^-19: twice ours).
void p8_corner(const p8est_quadrant_t *q, uint32_t *c) {
  c[0] = static_cast<uint32_t>(q->x) << (20 - P8EST_MAXLEVEL);
  c[1] = static_cast<uint32_t>(q->y) << (20 - P8EST_MAXLEVEL);
  c[2] = static_cast<uint32_t>(q->z) << (20 - P8EST_MAXLEVEL);
}

// Adds this rank's quadrants, in order, to a hash of the leaves.
void hash_quadrants(p8est_t *p, LeafHash *hash) {
  sc_array_t *quadrants = &p8est_tree_array_index(p->trees, 0)->quadrants;
  for (size_t i = 0; i < quadrants->elem_count; ++i) {
    const p8est_quadrant_t *q = p8est_quadrant_array_index(quadrants, i);
    uint32_t c[3];
    p8_corner(q, c);
    hash->add(c, q->level);
  }
}

int p8_refine(p8est_t *, p4est_topidx_t, p8est_quadrant_t *q) {
  if (q->level >= g_level) return 0;
  const double root = P8EST_ROOT_LEN;
  const double lo[3] = {q->x / root, q->y / root, q->z / root};
  uint32_t c[3];
  p8_corner(q, c);
  return refines(g_shape, lo, P8EST_QUADRANT_LEN(q->level) / root, octant_key(c, q->level));
}

int p8_coarsen_all(p8est_t *, p4est_topidx_t, p8est_quadrant_t *[]) { return 1; }

// p4est on the same tree: recursive refinement with the same predicate, then full balance, then
// recursive coarsening to the root and the same refinement again. The first refinement goes into
// memory new to the process, as the PM-octree's goes into a new pool's pages: the heap's free pages
// (what an earlier tree left) go back to the kernel first (before both sides' first refinements),
// or p4est's first refinement of a small tree after a large one would find its memory mapped (no
// page faults) and ours would not.
struct P4estRun {
  double refine_s, balance_s, again_s, balance_again_s;
  long refine_faults;  // pages the kernel supplied during the first refinement
  uint64_t refined, balanced;
  LeafHash hash;
};
P4estRun p4est_adapt(Shape shape, int level) {
  g_shape = shape;
  g_level = level;
  p8est_connectivity_t *conn = p8est_connectivity_new_unitcube();
  p8est_t *p = p8est_new(sc_MPI_COMM_WORLD, conn, 0, nullptr, nullptr);
  P4estRun r{};
  malloc_trim(0);
  const long faults = bench::minor_faults();
  double t0 = bench::now();
  p8est_refine(p, 1, p8_refine, nullptr);
  double t1 = bench::now();
  r.refine_faults = bench::minor_faults() - faults;
  r.refined = static_cast<uint64_t>(p->global_num_quadrants);
  p8est_balance(p, P8EST_CONNECT_FULL, nullptr);
  r.balance_s = bench::now() - t1;
  r.refine_s = t1 - t0;
  r.balanced = static_cast<uint64_t>(p->global_num_quadrants);
  hash_quadrants(p, &r.hash);
  p8est_coarsen(p, 1, p8_coarsen_all, nullptr);
  if (p->global_num_quadrants != 1) die("p8est_coarsen to the root");
  t0 = bench::now();
  p8est_refine(p, 1, p8_refine, nullptr);
  r.again_s = bench::now() - t0;
  if (static_cast<uint64_t>(p->global_num_quadrants) != r.refined) die("p8est_refine again: a different tree");
  t0 = bench::now();
  p8est_balance(p, P8EST_CONNECT_FULL, nullptr);
  r.balance_again_s = bench::now() - t0;
  if (static_cast<uint64_t>(p->global_num_quadrants) != r.balanced) die("p8est_balance again: a different tree");
  p8est_destroy(p);
  p8est_connectivity_destroy(conn);
  return r;
}

// p4est's balance on every rank of MPI_COMM_WORLD (run under mpirun by `hetmem bench octree`):
// per round, the tree refined on rank 0, partitioned evenly, then balanced, timed from a barrier
// to the slowest rank's end. Rank 0 prints each round's seconds, then the balanced tree's leaf
// count and hash (the ranks' leaves hashed in order, the state handed from rank to rank).
int p4est_balance_ranks(Shape shape, int level, int rounds) {
  g_shape = shape;
  g_level = level;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  LeafHash hash;
  uint64_t balanced = 0;
  for (int round = 0; round < rounds; ++round) {
    p8est_connectivity_t *conn = p8est_connectivity_new_unitcube();
    p8est_t *p = p8est_new(MPI_COMM_WORLD, conn, 0, nullptr, nullptr);
    p8est_refine(p, 1, p8_refine, nullptr);
    p8est_partition(p, 0, nullptr);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = bench::now();
    p8est_balance(p, P8EST_CONNECT_FULL, nullptr);
    double mine = bench::now() - t0, slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) std::printf("round %.6f\n", slowest);
    balanced = static_cast<uint64_t>(p->global_num_quadrants);
    if (round == rounds - 1) {
      uint64_t state[2] = {hash.h, hash.n};
      if (rank > 0) MPI_Recv(state, 2, MPI_UINT64_T, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      hash.h = state[0];
      hash.n = state[1];
      hash_quadrants(p, &hash);
      state[0] = hash.h;
      state[1] = hash.n;
      if (rank + 1 < size) MPI_Send(state, 2, MPI_UINT64_T, rank + 1, 0, MPI_COMM_WORLD);
      if (rank == size - 1 && size > 1) MPI_Send(state, 2, MPI_UINT64_T, 0, 1, MPI_COMM_WORLD);
      if (rank == 0 && size > 1) MPI_Recv(state, 2, MPI_UINT64_T, size - 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      hash.h = state[0];
      hash.n = state[1];
    }
    p8est_destroy(p);
    p8est_connectivity_destroy(conn);
  }
  if (rank == 0)
    std::printf("ranks %d balanced %llu hash %llu %llu\n", size, static_cast<unsigned long long>(balanced),
                static_cast<unsigned long long>(hash.h), static_cast<unsigned long long>(hash.n));
  return 0;
}
#endif

// The restart measured as a user meets it: a new process (this program again, with --restart-child)
// restores and visits every leaf, and prints its two times and the leaf count.
struct RestartTimes {
  double open_s = 0, total_s = 0;
  uint64_t leaves = 0;
};

// Drops a file's pages from the page cache (written back first), so that the next reader reads
// the device: the cold-cache case.
void drop_cached(const std::string &path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

RestartTimes run_child(const std::vector<std::string> &args) {
  int out[2];
  if (pipe(out) != 0) die("pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  std::vector<char *> argv;
  static std::string self = "/proc/self/exe";
  argv.push_back(self.data());
  std::vector<std::string> copy = args;
  for (auto &a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ) != 0) die("spawn");
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  std::string text;
  char buf[256];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  RestartTimes t;
  unsigned long long leaves = 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
      std::sscanf(text.c_str(), "%lf %lf %llu", &t.open_s, &t.total_s, &leaves) != 3)
    die(("restart child " + args[1] + " failed: " + text).c_str());
  t.leaves = leaves;
  return t;
}

// The child: one restart of `kind` ("pm": the default, the check on the first visit; "pm-before":
// the check before restore returns; "pm-before-2": that check on 2 threads; "snapshot", "p4est")
// from `path`; `scratch` is where a snapshot load builds its pool. Prints "open_s total_s leaves".
int restart_child(const std::string &kind, const std::string &path, const std::string &scratch, uint64_t bytes) {
  std::unique_ptr<Tree> t;
  uint64_t n = 0;
  double t0 = bench::now(), t1 = 0;
  if (kind == "pm" || kind == "pm-before" || kind == "pm-before-2") {
    hm::persist::OctreeOptions o;
    o.threads = kind == "pm-before-2" ? 2 : 1;
    o.check_on_first_visit = kind == "pm";
    if (Tree::restore(path, &t, o) != HM_OK) die("restore");
    t1 = bench::now();
    // a first visit: every value read
    if (t->each_leaf([&](const Leaf &l) { n += l.value == l.value ? 1 : 0; }) != HM_OK) die("visit");
  } else if (kind == "snapshot") {
    unlink(scratch.c_str());
    if (Tree::load_snapshot(path, scratch, bytes, &t) != HM_OK) die("load");
    t1 = bench::now();
    if (t->each_leaf([&](const Leaf &l) { n += l.value == l.value ? 1 : 0; }) != HM_OK) die("visit");
    t.reset();
    unlink(scratch.c_str());
#ifdef HM_HAVE_P4EST
  } else if (kind == "p4est") {
    p8est_connectivity_t *conn = nullptr;
    p8est_t *p = p8est_load(path.c_str(), sc_MPI_COMM_WORLD, 0, 0, nullptr, &conn);
    if (!p) die("p8est_load");
    t1 = bench::now();
    for (p4est_topidx_t tree = p->first_local_tree; tree <= p->last_local_tree; ++tree) {
      sc_array_t *quadrants = &p8est_tree_array_index(p->trees, tree)->quadrants;
      for (size_t q = 0; q < quadrants->elem_count; ++q)  // a first visit: every octant read
        n += p8est_quadrant_array_index(quadrants, q)->level >= 0 ? 1 : 0;
    }
    const double total = bench::now() - t0;
    p8est_destroy(p);
    p8est_connectivity_destroy(conn);
    std::printf("%.9f %.9f %llu\n", t1 - t0, total, static_cast<unsigned long long>(n));
    return 0;
#endif
  } else {
    return 2;
  }
  std::printf("%.9f %.9f %llu\n", t1 - t0, bench::now() - t0, static_cast<unsigned long long>(n));
  return 0;
}

#ifdef HM_HAVE_P4EST
double g_fraction = 0;
int g_uniform = 0;
int p8_restart_refine(p8est_t *, p4est_topidx_t, p8est_quadrant_t *q) {
  const double centre = (q->x + 0.5 * P8EST_QUADRANT_LEN(q->level)) / static_cast<double>(P8EST_ROOT_LEN);
  return q->level == g_uniform && centre < g_fraction;
}

// The restart tree in p4est: uniform to `uniform`, then the octants whose centre lies below
// `fraction` in x once more (the PM tree's refinement), saved with p8est_save.
uint64_t p4est_restart_file(const std::string &path, int uniform, double fraction) {
  g_uniform = uniform;
  g_fraction = fraction;
  p8est_connectivity_t *conn = p8est_connectivity_new_unitcube();
  p8est_t *p = p8est_new_ext(sc_MPI_COMM_WORLD, conn, 0, uniform, 1, 0, nullptr, nullptr);
  p8est_refine(p, 0, p8_restart_refine, nullptr);
  const uint64_t n = static_cast<uint64_t>(p->global_num_quadrants);
  p8est_save(path.c_str(), p, 0);
  p8est_destroy(p);
  p8est_connectivity_destroy(conn);
  return n;
}
#endif

}  // namespace

int main(int argc, char **argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--quick") a.quick = true;
    else if (s == "--restart-only") a.restart_only = true;
    else if (s == "--adapt-only") a.adapt_only = true;
    else if (s == "--no-p4est") a.no_p4est = true;
    else if (s == "--p4est-balance" && i + 3 < argc) a.ranks.assign(argv + i + 1, argv + i + 4), i += 3;
    else if (s == "--json" && i + 1 < argc) a.json = argv[++i];
    else if (s == "--dir" && i + 1 < argc) a.dir = argv[++i];
    else if (s == "--restart-child" && i + 4 < argc) a.child.assign(argv + i + 1, argv + i + 5), i += 4;
    else if (s == "--version") {
      bench::print_version(argv[0]);
      return 0;
    } else {
      const bool help = s == "--help" || s == "-h";
      if (!help) std::fprintf(stderr, "unknown option '%s'\n", s.c_str());
      std::fprintf(help ? stdout : stderr, "usage: hetmem-bench-octree [--quick] [--restart-only [--no-p4est] | --adapt-only] [--json FILE] "
                   "[--dir DIR]\n");
      return help ? 0 : 2;
    }
  }
  if (a.restart_only && a.adapt_only) {
    std::fprintf(stderr, "--restart-only and --adapt-only exclude each other\n");
    return 2;
  }
  if (a.no_p4est && !a.restart_only) {
    std::fprintf(stderr, "--no-p4est goes with --restart-only (refine and balance are measured against p4est)\n");
    return 2;
  }
  if (a.json.empty()) a.json = bench::results_path("hetmem-bench-octree.json");
  if (a.dir.empty()) a.dir = std::getenv("TMPDIR") && *std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  const std::string base = a.dir + "/hetmem-bench-octree-" + std::to_string(getpid());
  const std::string pool = base + ".pool", pool2 = base + ".loaded.pool", snap = base + ".snap";
  // MPI and p4est, for what uses p4est. A restart child of the PM-octree or the snapshot runs
  // without them, as a code that does not use MPI would (Open MPI's singleton start-up had run
  // beside the timed restore).
  const auto start_p4est = [&] {
#ifdef HM_HAVE_P4EST
    sc_MPI_Init(&argc, &argv);
    sc_init(sc_MPI_COMM_WORLD, 0, 0, nullptr, SC_LP_SILENT);
    p4est_init(nullptr, SC_LP_SILENT);
#endif
  };
  const auto stop_p4est = [] {
#ifdef HM_HAVE_P4EST
    sc_finalize();
    sc_MPI_Finalize();
#endif
  };
  if (!a.child.empty()) {
    const bool p4est = a.child[0] == "p4est";
    if (p4est) start_p4est();
    int rc = restart_child(a.child[0], a.child[1], a.child[2], std::strtoull(a.child[3].c_str(), nullptr, 10));
    if (p4est) stop_p4est();
    return rc;
  }
  if (!a.no_p4est) start_p4est();
  if (!a.ranks.empty()) {
    int rc = 2;
#ifdef HM_HAVE_P4EST
    const std::string &name = a.ranks[0];
    const Shape shape = name == "sphere" ? Shape::sphere : name == "droplet" ? Shape::droplet : Shape::random;
    if (name != "sphere" && name != "droplet" && name != "random") {
      std::fprintf(stderr, "--p4est-balance: unknown tree '%s' (sphere, droplet, random)\n", name.c_str());
    } else {
      rc = p4est_balance_ranks(shape, std::atoi(a.ranks[1].c_str()), std::max(1, std::atoi(a.ranks[2].c_str())));
    }
    stop_p4est();
#else
    std::fprintf(stderr, "--p4est-balance: p4est is not built in\n");
#endif
    return rc;
  }
  bench::Json j;
  j.open().str("benchmark", "hetmem-bench-octree").str("directory", a.dir).boolean("quick", a.quick);
  std::printf("hetmem-bench-octree: pools in %s (%s)\n", a.dir.c_str(),
              "not emulated: the pool's file system sets the speed");
  // With HM_PM_THP=1 pools map 2 MiB folios where the file system offers them; in a VM whose
  // host takes back free 2 MiB blocks, a round that draws its folios from such blocks is slower
  // (on a 2-core VM: the sphere's first refinement 56-84 ms against 17 in 7 of 25 rounds; none
  // with reporting off).
  char pm_thp[32] = "0";
  hm_option_get("HM_PM_THP", pm_thp, sizeof pm_thp, nullptr, 0);
  const bool huge_pools = std::atol(pm_thp) != 0;  // as the pool reads it: any non-zero number
  const int reporting = bench::free_page_reporting_order();
  j.num("free_page_reporting_order", reporting).boolean("pm_thp", huge_pools);
  if (huge_pools) std::printf("  pools mapped with 2 MiB folios (HM_PM_THP=%s)\n", pm_thp);
  if (huge_pools && reporting >= 0 && reporting <= 9)
    std::printf("  this VM reports free memory in blocks of 2^%d pages to its host (virtio-balloon free page\n"
                "  reporting): a 2 MiB folio taken from such a block faults in the host on first touch, so single\n"
                "  rounds that make new pool pages can be slower by tens of ms (the spreads show them)\n",
                reporting);
  std::printf("\n");

  // 1. Refine and balance throughput on three trees, PM-octree and p4est runs interleaved (one of
  // each per round, so that both see the same machine), the balanced trees compared leaf by leaf.
  if (!a.restart_only) {
    const int reps = a.quick ? 3 : 5;
    std::printf("adapt: refine, then 2:1 balance (faces, edges, corners), one core; medians of %d interleaved rounds "
                "(spread: the rounds' extremes)\n", reps);
    std::printf("  %-8s %5s %10s %10s %12s %11s %12s %11s %12s %11s %9s\n", "tree", "level", "refined", "balanced",
                "refine Mo/s", "p4est Mo/s", "again Mo/s", "p4est Mo/s", "balance Mo/s", "p4est Mo/s", "same tree");
    j.open_array("adapt");
    std::vector<std::string> verdicts;
    std::string notes;
    for (Shape shape : {Shape::sphere, Shape::droplet, Shape::random}) {
      const int level = shape_level(shape, a.quick);
      std::vector<double> ref, bal, again, bal1, bal2, pref, pbal, pagain, pbal_again, provisioned, page_us;
      uint64_t refined = 0, balanced = 0, provisioned_bytes = 0;
      std::vector<double> faults, pfaults;  // pages supplied during the first refinements
      LeafHash mine;
#ifdef HM_HAVE_P4EST
      P4estRun p{};
#endif
      for (int rep = 0; rep < reps; ++rep) {
        {
          auto t = make(pool, uint64_t{8} << 30);
          const AdaptTimes at = adapt(*t, shape, level, &refined, &mine);
          ref.push_back(at.refine_s);
          bal.push_back(at.balance_s);
          again.push_back(at.again_s);
          bal1.push_back(at.balance1_s);
          bal2.push_back(at.balance2_s);
          faults.push_back(static_cast<double>(at.refine_faults));
          balanced = t->leaf_count();
          t.reset();
          unlink(pool.c_str());
          double us = 0;
          provisioned.push_back(refine_into_provisioned(pool, shape, level, at.refine_top, &us));
          provisioned_bytes = at.refine_top;
          page_us.push_back(us);
        }
#ifdef HM_HAVE_P4EST
        p = p4est_adapt(shape, level);
        pref.push_back(p.refine_s);
        pbal.push_back(p.balance_s);
        pagain.push_back(p.again_s);
        pbal_again.push_back(p.balance_again_s);
        pfaults.push_back(static_cast<double>(p.refine_faults));
#endif
      }
      const double rr = refined / bench::median(ref), br = balanced / bench::median(bal);
      const double ra = refined / bench::median(again);
      j.open().str("tree", shape_name(shape)).num("level", level).num("refined_octants", refined);
      j.num("balanced_octants", balanced).num("refine_octants_per_s", rr).num("balance_octants_per_s", br);
      j.num("refine_again_octants_per_s", ra);
#ifdef HM_HAVE_P4EST
      const double pr = p.refined / bench::median(pref), pb = p.balanced / bench::median(pbal);
      const double pa = p.refined / bench::median(pagain);
      const bool same = p.hash.n == mine.n && p.hash.h == mine.h && p.refined == refined;
      // PM-octree over p4est: p4est's time over ours for the same octants, round by round.
      const bench::Ratio refine_vs = bench::ratio(pref, ref, true), balance_vs = bench::ratio(pbal, bal, true);
      const bench::Ratio again_vs = bench::ratio(pagain, again, true);
      const char *rv = bench::at_least(refine_vs, 1.5), *bv = bench::at_least(balance_vs, 1.0);
      verdicts.insert(verdicts.end(), {rv, bv, same ? "MET" : "NOT MET"});
      std::printf("  %-8s %5d %10llu %10llu %12.2f %11.2f %12.2f %11.2f %12.2f %11.2f %9s\n", shape_name(shape), level,
                  static_cast<unsigned long long>(refined), static_cast<unsigned long long>(balanced), rr / 1e6, pr / 1e6,
                  ra / 1e6, pa / 1e6, br / 1e6, pb / 1e6, same ? "yes" : "NO");
      char line[512];
      std::snprintf(line, sizeof line,
                    "  %s: PM-octree / p4est refine %.2f (spread %.2f-%.2f; asked >= 1.5: %s), again %.2f (spread "
                    "%.2f-%.2f: %s), balance %.2f (spread %.2f-%.2f; asked >= 1.0: %s; moonshot 1.5: %s)\n",
                    shape_name(shape), refine_vs.value, refine_vs.low, refine_vs.high, rv, again_vs.value, again_vs.low,
                    again_vs.high, bench::at_least(again_vs, 1.5), balance_vs.value, balance_vs.low, balance_vs.high, bv,
                    bench::at_least(balance_vs, 1.5));
      notes += line;
      // Balance again (into pages mapped before) on 1 and on 2 threads, and p4est's on one rank.
      const bench::Ratio threads_vs = bench::ratio(bal1, bal2, true), two_vs = bench::ratio(pbal_again, bal2, true);
      const bench::Ratio one_vs = bench::ratio(pbal_again, bal1, true);
      std::snprintf(line, sizeof line,
                    "  %s: balance again, 1 thread %.2f Mo/s, 2 threads %.2f Mo/s, p4est (1 rank) %.2f Mo/s: 2 threads / 1 "
                    "thread %.2f (spread %.2f-%.2f); / p4est: 1 thread %.2f (spread %.2f-%.2f: %s), 2 threads %.2f "
                    "(spread %.2f-%.2f: %s)\n",
                    shape_name(shape), balanced / bench::median(bal1) / 1e6, balanced / bench::median(bal2) / 1e6,
                    p.balanced / bench::median(pbal_again) / 1e6, threads_vs.value, threads_vs.low, threads_vs.high,
                    one_vs.value, one_vs.low, one_vs.high, bench::at_least(one_vs, 1.0), two_vs.value, two_vs.low,
                    two_vs.high, bench::at_least(two_vs, 1.0));
      notes += line;
      verdicts.insert(verdicts.end(), {bench::at_least(one_vs, 1.0), bench::at_least(two_vs, 1.0)});
      // The first refinements' new pages, and ours without the kernel supplying them (written in first).
      std::snprintf(line, sizeof line,
                    "  %s: first refine's new pages (minor faults) PM-octree %.0f, p4est %.0f; into a new pool's pages "
                    "written in before (%.1f MiB, %.2f us a page, not timed) %.2f Mo/s\n",
                    shape_name(shape), bench::median(faults), bench::median(pfaults),
                    static_cast<double>(provisioned_bytes) / 1048576, bench::median(page_us),
                    refined / bench::median(provisioned) / 1e6);
      notes += line;
      j.num("new_page_us", bench::median(page_us));
      j.num("refine_provisioned_octants_per_s", refined / bench::median(provisioned));
      j.num("refine_new_pages", bench::median(faults)).num("p4est_refine_new_pages", bench::median(pfaults));
      j.num("balance_again_1_thread_octants_per_s", balanced / bench::median(bal1));
      j.open_array("balance_again_2_threads_s");
      for (double v : bal2) j.num("", v);
      j.close();
      j.open_array("refine_s");  // the first refinement, round by round (ours, then p4est's)
      for (double v : ref) j.num("", v);
      j.close();
      j.open_array("p4est_refine_s");
      for (double v : pref) j.num("", v);
      j.close();
      j.str("balanced_hash", std::to_string(mine.h) + " " + std::to_string(mine.n));
      j.num("balance_again_2_threads_octants_per_s", balanced / bench::median(bal2));
      j.num("p4est_balance_again_octants_per_s", p.balanced / bench::median(pbal_again));
      j.ratio("balance_2_threads_vs_1", threads_vs).ratio("balance_2_threads_vs_p4est", two_vs);
      j.num("p4est_refine_octants_per_s", pr).num("p4est_balance_octants_per_s", pb).boolean("same_tree_as_p4est", same);
      j.num("p4est_refine_again_octants_per_s", pa).ratio("refine_again_vs_p4est", again_vs);
      j.ratio("refine_vs_p4est", refine_vs).ratio("balance_vs_p4est", balance_vs);
      j.str("refine_verdict", rv).str("balance_verdict", bv);
#else
      std::printf("  %-8s %5d %10llu %10llu %12.2f %11s %12.2f %11s %12.2f %11s %9s\n", shape_name(shape), level,
                  static_cast<unsigned long long>(refined), static_cast<unsigned long long>(balanced), rr / 1e6, "-",
                  ra / 1e6, "-", br / 1e6, "-", "-");
      std::printf("  %s: first refine into a new pool's pages written in before (%.1f MiB, %.2f us a page, not timed) "
                  "%.2f Mo/s\n", shape_name(shape), static_cast<double>(provisioned_bytes) / 1048576,
                  bench::median(page_us), refined / bench::median(provisioned) / 1e6);
#endif
      j.close();
    }
    j.close();
#ifdef HM_HAVE_P4EST
    std::printf("%s  same tree: the balanced trees' leaves (corner, level) hashed in Morton order and compared\n"
                "  refine: into memory new to each, a new pool (its pages new to the page cache) or p4est's heap,\n"
                "  each process's heap first giving its free pages back (malloc_trim(0)); again: the same\n"
                "  refinement after coarsening to the root,\n"
                "  into pages the first one mapped (as a simulation's later steps); balance again: after that\n"
                "  refinement, the PM-octree on 1 and on 2 threads (each checked to make the same tree)\n",
                notes.c_str());
    std::printf("  all adapt targets (balance >= 1.0x on 1 and 2 threads and refine >= 1.5x p4est 2.2 in every round, same\n"
                "  trees): %s (p4est on one MPI rank here; `hetmem bench octree` adds it on 2 ranks)\n\n",
                bench::all_of(verdicts).c_str());
    j.str("adapt_verdict", bench::all_of(verdicts));
#else
    std::printf("  p4est: not built in (install libp4est-dev and rebuild)\n\n");
#endif
  }

  // 2. A persist after a small step against a snapshot's bytes. Two kinds of step: a local
  // refinement (a feature appears: the leaves within rho of a point on the sphere go one level
  // deeper, then 2:1 balance; rho halves until at most 5% of the leaves change) and a solver
  // update (the values of 5% of the leaves, a contiguous stretch in Morton order).
  if (!a.restart_only && !a.adapt_only) {
    const int level = a.quick ? 7 : 9;
    auto t = make(pool, uint64_t{4} << 30);
    adapt_sphere(*t, level);
    if (t->persist() != HM_OK) die("persist");
    using Key = std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>;
    auto keys = [&] {
      std::vector<Key> k;
      if (t->leaves([&](const Leaf &l) { k.emplace_back(l.coord[0], l.coord[1], l.coord[2], l.level); }) != HM_OK)
        die("leaves");
      return k;
    };
    const std::vector<Key> before = keys();
    const size_t leaves = before.size();
    const uint64_t snapshot_bytes = 32 + 24 * leaves;
    double rho = 0.2, changed = 1;
    uint64_t refine_bytes = 0;
    for (; rho > 1e-4; rho /= 2) {
      const double p[3] = {0.8, 0.5, 0.5};
      auto near = [&](const Leaf &l) {
        double d2 = 0;
        for (int d = 0; d < 3; ++d) {
          const double c = std::ldexp(l.coord[d] + 0.5 * (1u << (20 - l.level)), -20) - p[d];
          d2 += c * c;
        }
        return d2 < rho * rho;
      };
      if (t->refine([&](const Leaf &l) { return static_cast<int>(l.level) == level && near(l); }) != HM_OK ||
          t->balance() != HM_OK)
        die("local refinement");
      std::vector<Key> after = keys(), diff;
      std::set_symmetric_difference(before.begin(), before.end(), after.begin(), after.end(), std::back_inserter(diff));
      changed = static_cast<double>(diff.size()) / leaves;
      if (changed <= 0.05 && changed > 0) {
        const uint64_t w0 = t->pool().written_line_bytes();
        if (t->persist() != HM_OK) die("persist");
        refine_bytes = t->pool().written_line_bytes() - w0;
        break;
      }
      t.reset();  // back to the persisted version
      if (Tree::restore(pool, &t) != HM_OK) die("restore");
    }
    // The solver step: 5% of the leaves, in Morton order from the middle of the tree.
    std::vector<std::array<double, 3>> centres;
    const int rc = t->leaves([&](const Leaf &l) {
      std::array<double, 3> c;
      for (int d = 0; d < 3; ++d) c[d] = std::ldexp(l.coord[d] + 0.5 * (1u << (20 - l.level)), -20);
      centres.push_back(c);
    });
    if (rc != HM_OK) die("leaves");
    const size_t from = centres.size() / 2, count = centres.size() / 20;
    for (size_t i = from; i < from + count; ++i)
      if (t->set_value(centres[i].data(), 1.0 + i) != HM_OK) die("set_value");
    const uint64_t w0 = t->pool().written_line_bytes();
    if (t->persist() != HM_OK) die("persist");
    const uint64_t update_bytes = t->pool().written_line_bytes() - w0;
    std::printf("persist: %zu leaves (sphere to level %d); a snapshot is %.1f KiB\n", leaves, level, snapshot_bytes / 1024.0);
    std::printf("  %-44s %10.1f KiB  %5.1f%% of a snapshot\n",
                ("local refinement (" + std::to_string(100 * changed).substr(0, 4) + "% of the leaves change)").c_str(),
                refine_bytes / 1024.0, 100.0 * refine_bytes / snapshot_bytes);
    std::printf("  %-44s %10.1f KiB  %5.1f%% of a snapshot\n", "new values for 5% of the leaves", update_bytes / 1024.0,
                100.0 * update_bytes / snapshot_bytes);
    const bool persist_met = refine_bytes <= 0.10 * snapshot_bytes && update_bytes <= 0.10 * snapshot_bytes;
    std::printf("  (asked: at most 10%%; bytes are the cache lines the persist flushes): %s\n\n",
                persist_met ? "MET" : "NOT MET");
    j.open("persist").num("leaves", leaves).num("snapshot_bytes", snapshot_bytes);
    j.num("refine_changed_fraction", changed).num("refine_persist_bytes", refine_bytes);
    j.num("refine_ratio", static_cast<double>(refine_bytes) / snapshot_bytes);
    j.num("update_fraction", static_cast<double>(count) / leaves).num("update_persist_bytes", update_bytes);
    j.num("update_ratio", static_cast<double>(update_bytes) / snapshot_bytes).close();
    t.reset();
    unlink(pool.c_str());
  }

  // 3. Restart in a fresh process: restore from the pool against loading the snapshot and p8est_load.
  if (!a.adapt_only) {
    const uint64_t want = a.quick ? 200000 : 10000000;
    int u = 0;
    while (uint64_t{1} << (3 * (u + 1)) <= want) ++u;
    const uint64_t uniform = uint64_t{1} << (3 * u), extra = want > uniform ? (want - uniform + 6) / 7 : 0;
    const double fraction = static_cast<double>(extra) / uniform;
    const uint64_t bytes = (want / 7 + 1024) * 192 * 2 + (64 << 20);
    double t0 = bench::now();
    auto t = make(pool, bytes);
    for (int l = 0; l < u; ++l)
      if (t->refine([](const Leaf &) { return true; }) != HM_OK) die("build");
    if (t->refine([&](const Leaf &x) { return std::ldexp(x.coord[0] + 0.5 * (1u << (20 - x.level)), -20) < fraction; }) != HM_OK)
      die("build");
    if (t->persist() != HM_OK) die("persist");
    const double build_s = bench::now() - t0;
    const uint64_t leaves = t->leaf_count();
    t0 = bench::now();
    if (t->save_snapshot(snap) != HM_OK) die("snapshot");
    const double save_s = bench::now() - t0;
    t.reset();
    const std::string p4 = base + ".p8est";
    bool have_p4est = false;
#ifdef HM_HAVE_P4EST
    if (!a.no_p4est) {
      if (p4est_restart_file(p4, u, fraction) != leaves) die("the p4est tree differs from the PM tree");
      have_p4est = true;
    }
#endif
    // The files written above reach the disk first: write-back running beside a timed restart
    // would take its time from whichever side it fell on.
    sync();
    // Each restart in a new process; warm: the files as the writer left them in the page cache;
    // cold: their pages dropped first (the device is read). Three of each, interleaved; medians.
    struct Case {
      const char *kind, *file;
    };
    const std::vector<Case> cases = {
        {"pm", pool.c_str()}, {"pm-before", pool.c_str()}, {"pm-before-2", pool.c_str()}, {"snapshot", snap.c_str()},
        {"p4est", p4.c_str()}};
    // [warm/cold][pm open, pm total, snapshot, p4est, pm checking before returning open, total,
    //             the same on 2 threads open, total]
    std::array<std::array<std::vector<double>, 8>, 2> times;
    for (int cold = 0; cold < 2; ++cold)
      for (int rep = 0; rep < 3; ++rep)
        for (const Case &c : cases) {
          if (std::string(c.kind) == "p4est" && !have_p4est) continue;
          if (cold) drop_cached(c.file);
          RestartTimes rt = run_child({"--restart-child", c.kind, c.file, pool2, std::to_string(bytes)});
          if (rt.leaves != leaves) die("a restart child saw another leaf count");
          auto &slot = times[static_cast<size_t>(cold)];
          if (std::string(c.kind) == "pm") slot[0].push_back(rt.open_s), slot[1].push_back(rt.total_s);
          else if (std::string(c.kind) == "pm-before") slot[4].push_back(rt.open_s), slot[5].push_back(rt.total_s);
          else if (std::string(c.kind) == "pm-before-2") slot[6].push_back(rt.open_s), slot[7].push_back(rt.total_s);
          else if (std::string(c.kind) == "snapshot") slot[2].push_back(rt.total_s);
          else slot[3].push_back(rt.total_s);
        }
    auto med = [&](int cold, int what) {
      const auto &v = times[static_cast<size_t>(cold)][static_cast<size_t>(what)];
      return v.empty() ? 0.0 : bench::median(v);
    };
    auto file_mib = [](const std::string &path) {
      struct stat st {};
      return stat(path.c_str(), &st) == 0 ? st.st_blocks * 512.0 / 1048576 : 0.0;
    };
    std::printf("restart: %llu octants (built in %.1f s, snapshot written in %.2f s); each restart in a fresh process\n",
                static_cast<unsigned long long>(leaves), build_s, save_s);
    std::printf("  files: pool %.0f MiB on disk, snapshot %.0f MiB", file_mib(pool), file_mib(snap));
    if (have_p4est) std::printf(", p4est %.0f MiB", file_mib(p4));
    std::printf("\n");
    std::printf("  %-40s %12s %12s\n", "", "warm cache", "cold cache");
    const char *names[8] = {"pm_restore (open, map, check the root)", "pm_restore + first visit, checking",
                            "load the snapshot + visit every leaf", "p8est_load + visit every octant",
                            "pm_restore checking before returning", "  + visit every leaf",
                            "pm_restore checking on 2 threads", "  + visit every leaf"};
    for (int w : {0, 1, 4, 5, 6, 7, 2, 3}) {
      if (w == 3 && !have_p4est) continue;
      std::printf("  %-40s %10.4f s %10.4f s\n", names[w], med(0, w), med(1, w));
    }
    // Snapshot and p8est_load over the restore + visit (index `total` of times), round by round.
    struct Against {
      bench::Ratio warm, cold, p4_warm, p4_cold;
    };
    auto against = [&](size_t total, const char *label) {
      const Against r{bench::ratio(times[0][2], times[0][total]), bench::ratio(times[1][2], times[1][total]),
                      bench::ratio(times[0][3], times[0][total]), bench::ratio(times[1][3], times[1][total])};
      std::printf("  snapshot / (%s): warm %.1fx (spread %.1f-%.1f; asked: at least 20x in every round): %s; "
                  "cold %.1fx (spread %.1f-%.1f)\n", label, r.warm.value, r.warm.low, r.warm.high,
                  bench::at_least(r.warm, 20), r.cold.value, r.cold.low, r.cold.high);
      if (have_p4est)
        std::printf("  p8est_load / (%s): warm %.1fx (spread %.1f-%.1f; asked: at least 10x in every round): %s; "
                    "cold %.1fx (spread %.1f-%.1f)\n", label, r.p4_warm.value, r.p4_warm.low, r.p4_warm.high,
                    bench::at_least(r.p4_warm, 10), r.p4_cold.value, r.p4_cold.low, r.p4_cold.high);
      return r;
    };
    const Against first_visit = against(1, "restore + first visit, checking");
    const Against before = against(5, "restore checking before returning + visit");
    const Against before_two = against(7, "restore checking on 2 threads + visit");
    unlink(pool.c_str());
    unlink(pool2.c_str());
    unlink(snap.c_str());
    unlink(p4.c_str());
    j.open("restart").num("octants", leaves).boolean("fresh_process", true);
    for (int c = 0; c < 2; ++c) {
      j.open(c ? "cold" : "warm").num("restore_s", med(c, 0)).num("restore_visit_s", med(c, 1));
      j.num("restore_check_before_returning_s", med(c, 4)).num("restore_visit_check_before_returning_s", med(c, 5));
      j.num("restore_check_on_2_threads_s", med(c, 6)).num("restore_visit_check_on_2_threads_s", med(c, 7));
      j.num("snapshot_load_visit_s", med(c, 2));
      if (have_p4est) j.num("p8est_load_visit_s", med(c, 3));
      j.close();
    }
    // The default restore (the check on the first visit) under the plain keys, the check before
    // returning under "check_before_returning", on 2 threads under "check_on_2_threads".
    auto ratios = [&](const Against &r) {
      j.ratio("speedup", r.warm);
      j.num("speedup_cold", r.cold.value).str("verdict", bench::at_least(r.warm, 20));
      if (have_p4est) {
        j.ratio("vs_p8est_load", r.p4_warm).num("vs_p8est_load_cold", r.p4_cold.value);
        j.str("vs_p8est_load_verdict", bench::at_least(r.p4_warm, 10));
      }
    };
    ratios(first_visit);
    j.open("check_before_returning");
    ratios(before);
    j.close().open("check_on_2_threads");
    ratios(before_two);
    j.close().close();
  }
  j.close();
  if (!j.write(a.json)) {
    std::fprintf(stderr, "hetmem-bench-octree: cannot write '%s'\n", a.json.c_str());
    return 1;
  }
  if (!a.no_p4est) stop_p4est();
  return 0;
}
