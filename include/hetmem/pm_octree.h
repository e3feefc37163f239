/* hetmem PM-octree: a persistent multi-version quadtree/octree (Nguyen et al. (SC'17)), C interface.
 *
 * A tree lives in a persistent pool file (on a DAX file system for real persistent memory, any
 * file system otherwise). The last persisted version is never written; changes go to a working
 * version by copy-on-write, and pm_persistent() commits it atomically. After a crash at any
 * instant, pm_restore() returns exactly the last persisted version.
 *
 * Coordinates of a leaf are integers in units of 2^-20 of the unit domain [0, 1)^dim; level 0 is
 * the whole domain. Every function returns HM_OK or a negative HM_E* code, with the reason in
 * hm_last_error(). */
#ifndef HETMEM_PM_OCTREE_H
#define HETMEM_PM_OCTREE_H

#include <stddef.h>
#include <stdint.h>

#include "hetmem/hetmem.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

typedef struct pm_octree pm_octree_t;

typedef struct pm_leaf {
  uint32_t coord[3]; /* lower corner, units of 2^-20 (coord[2] is 0 in 2D) */
  uint32_t level;    /* 0: the whole domain; at most 20 */
  double value;      /* the application's value for this leaf */
} pm_leaf_t;

/* Refine predicate: non-zero splits the leaf by one level. */
typedef int (*pm_refine_fn)(const pm_leaf_t *leaf, void *arg);
/* Coarsen predicate: given a complete family (4 leaves in 2D, 8 in 3D), non-zero merges it. */
typedef int (*pm_coarsen_fn)(const pm_leaf_t *family, int count, void *arg);
typedef void (*pm_visit_fn)(const pm_leaf_t *leaf, void *arg);

/* How a tree uses the tiers (Nguyen et al. (SC'17) §3). Start from pm_options_init(). */
typedef struct pm_options {
  uint64_t fast_bytes;     /* C0: bytes of the fast tier for hot subtrees; 0 (default): none */
  double fast_threshold;   /* C0 fuller than this share of its budget: subtrees merge out (0.9) */
  double gc_threshold;     /* free pool space under this share: mark-and-sweep first (0.1) */
  int transform;           /* feature-directed transformation after each persist (1) */
  double t_transform;      /* access ratio needed to swap a subtree into C0 (1.5) */
  const char *replica;     /* a second pool that receives each version's delta; NULL: none */
  int emulate_nvbm;        /* charge pool accesses as the emulated `nvbm` device (0) */
  const char *note;        /* pm_create_ex: kept in the new pool's header for pm_note and
                              pm_inspect (a run's options, say); at most 1023 bytes. NULL: none */
  int census;              /* count each step's writes per family (a hash-table update per write)
                              for the census fields of pm_stats_t (0) */
  int threads;             /* threads for pm_balance and pm_restore's check (1 or 2; more are
                              used as 2; 0: 1); the balanced tree, and what the check accepts
                              or refuses, are the same on any count (1) */
  int check_on_first_visit;  /* pm_restore_ex: check the families as the first pm_leaves reads
                                them, one pass over the pool instead of two; any other first call
                                checks them all first. A damaged pool is then refused by that call
                                and every later one with the message a check before returning
                                gives (HM_EFORMAT); a pm_leaves that meets the damage has visited
                                only leaves of intact families before it. 0: pm_restore_ex checks
                                every family before it returns and refuses damage itself (1) */
} pm_options_t;

/* What is at a pool's path (pm_inspect). A pool appears at its path only once its first version
 * is durable: until then it is PATH.creating, and a creator killed before that leaves only it. */
typedef enum pm_pool_state {
  PM_POOL_MISSING = 0,   /* nothing at the path */
  PM_POOL_CREATING = 1,  /* only PATH.creating: its creator stopped before the first version */
  PM_POOL_EMPTY = 2,     /* a pool without a committed version (written by an older hetmem) */
  PM_POOL_COMMITTED = 3  /* a pool with at least one committed version */
} pm_pool_state_t;

typedef struct pm_pool_info {
  pm_pool_state_t state;
  uint64_t version;  /* the last committed version; 0: none */
  uint64_t bytes;    /* the pool's size */
  int dim;           /* 2 or 3 for a PM-octree pool this hetmem restores; 0 for anything else
                        (an older layout included: pm_restore names it) */
  char note[1024];   /* the note given at creation, NUL-terminated ("" if none or damaged) */
  uint64_t committed_bytes;  /* the end of the last committed version's data (0: none) */
  uint64_t file_bytes;       /* the file's size (below `bytes`: truncated) */
} pm_pool_info_t;

/* What a tree did to the tiers since it was opened. */
typedef struct pm_stats {
  uint64_t pool_writes;      /* family writes into the pool (persistent tier) */
  uint64_t pool_write_bytes;
  uint64_t pool_reads;       /* family reads from the pool */
  uint64_t fast_writes;      /* family writes in C0 */
  uint64_t flushed_bytes;    /* bytes persists flushed */
  uint64_t merges;           /* C0 subtrees merged out because C0 was full */
  uint64_t transforms;       /* hot subtrees swapped into C0 */
  uint64_t gc_runs, gc_freed;
  uint64_t replica_bytes;    /* bytes sent to the replica */
  uint64_t fast_families, fast_capacity, pool_families;
  uint64_t emul_charged_ns;  /* delay charged by the nvbm emulation */
  /* With pm_options_t.census, summed over the persisted steps (a merge's writes are not a step's): */
  uint64_t step_writes;        /* family writes by the operations between persists (C0 and pool) */
  uint64_t step_fast_writes;   /* those that went to C0 */
  uint64_t step_writes_bound;  /* each step's writes to its fast_capacity most-written families: the
                                  most a C0 holding the same families through a step
                                  could have taken */
  uint64_t predicted;          /* sampled leaves the features selected (the transformation) */
  uint64_t predicted_hit;      /* those whose family the next step then wrote */
} pm_stats_t;

void pm_options_init(pm_options_t *options);

/* Creates a pool file of `bytes` at `path` holding a tree of dimension `dim` (2 or 3) with one
 * root leaf, persisted as version 1. HM_EINVAL (bad dim, size or arguments; `bytes` above 128 GiB,
 * what a family's 32-bit child references can name), HM_EIO, HM_EBUSY. */
int pm_create(const char *path, int dim, uint64_t bytes, pm_octree_t **out);
/* pm_create with options (NULL: the defaults). HM_ENOMEM when the fast tier has no room for C0. */
int pm_create_ex(const char *path, int dim, uint64_t bytes, const pm_options_t *options, pm_octree_t **out);
/* Opens a pool and returns its last persisted version; the dimension is read from the pool.
 * HM_EFORMAT (not a tree pool, a damaged header or root object), HM_EBUSY (open elsewhere),
 * HM_EIO. The families are checked as the first pm_leaves reads them (or by any other first
 * call): damage found there is refused by that call and every later one (HM_EFORMAT), so check
 * what pm_leaves returns. pm_restore_ex with check_on_first_visit = 0 checks them before it
 * returns. */
int pm_restore(const char *path, pm_octree_t **out);
/* Reads the header of the pool at `path` without opening it (a pool open elsewhere can be
 * inspected). HM_OK with info->state saying what is there; HM_EFORMAT when the file is not a pool
 * this hetmem reads or is damaged (its header, its only root slot, or truncated below its size;
 * the reason in hm_last_error(), *info has what could be read), HM_EIO when it cannot be read. */
int pm_inspect(const char *path, pm_pool_info_t *info);
/* pm_restore with options. With options->replica set and the pool file missing, the replica's
 * last version is copied back to `path` and restored; a replica is attached either way. With
 * options->check_on_first_visit = 0 every family is checked before it returns. */
int pm_restore_ex(const char *path, const pm_options_t *options, pm_octree_t **out);
/* The application's features for the transformation: non-zero where it will work next (its
 * refine predicate for the next step, say). NULL turns sampling off. */
int pm_set_features(pm_octree_t *tree, pm_refine_fn feature, void *arg);
/* A mark-and-sweep of the pool now (it also runs by itself when free space runs low). */
int pm_collect(pm_octree_t *tree);
int pm_stats(const pm_octree_t *tree, pm_stats_t *out);
/* Commits the working version: after it returns, a crash restores this version. */
int pm_persistent(pm_octree_t *tree);
/* Closes the tree; the pool file keeps the last persisted version. NULL is ignored. */
void pm_close(pm_octree_t *tree);
/* Closes the tree and removes its pool file with every version in it. */
int pm_delete(pm_octree_t *tree);

/* Snapshot files, the baseline that persistence replaces: the leaves and a checksum, written to a
 * temporary file, synced and renamed into place. */
int pm_snapshot_save(const pm_octree_t *tree, const char *snapshot_path);
/* A new pool at `pool_path` (`bytes`) holding the snapshot's tree, of the snapshot's dimension.
 * HM_EFORMAT for a damaged or foreign file (no pool is left behind), HM_EIO when unreadable. */
int pm_snapshot_load(const char *snapshot_path, const char *pool_path, uint64_t bytes, pm_octree_t **out);

/* Replica server (hetmem-replica, docs/replica.md): listens on `listen` ("ADDRESS:PORT", a port
 * of 0 picks a free one; "[::1]:PORT" for IPv6) and keeps the replica of its primaries in
 * `pool_path`, serving up to 16 connections at once. Every primary must prove it holds the shared
 * key in `key_file`, and the server proves it in return; NULL is the default key file,
 * pm_replica_default_key(), made (32 random bytes, owner-only) if it is missing. A malformed
 * request, a wrong key or a client too slow for its deadline ends that connection, never the
 * server. Calls `ready` (may be NULL) with the address and port once listening, then serves until
 * the process ends. Returns only on an error before serving: HM_EINVAL (malformed `listen`),
 * HM_EAUTH (a key file others can read or shorter than 16 bytes, no HOME for the default one),
 * HM_EIO. */
typedef void (*pm_replica_ready_fn)(const char *address, int port, void *arg);
int pm_replica_serve(const char *listen, const char *pool_path, const char *key_file, pm_replica_ready_fn ready,
                     void *arg);
/* The same without a key: anyone who can connect may overwrite or fetch the replica. Only a
 * loopback `listen` address is accepted (HM_EAUTH otherwise). */
int pm_replica_serve_unauthenticated(const char *listen, const char *pool_path, pm_replica_ready_fn ready, void *arg);
/* The default key file of servers and primaries: $HOME/.hetmem/replica.key ("" without HOME). A
 * primary with no HM_REPLICA_KEY uses it when it exists. */
const char *pm_replica_default_key(void);

int pm_dim(const pm_octree_t *tree);
/* The note the pool was created with ("" if none); valid until pm_close. */
const char *pm_note(const pm_octree_t *tree);
/* The last persisted version's number (1 after pm_create). */
uint64_t pm_version(const pm_octree_t *tree);

int pm_refine(pm_octree_t *tree, pm_refine_fn refine, void *arg);
int pm_coarsen(pm_octree_t *tree, pm_coarsen_fn coarsen, void *arg);
/* pm_coarsen that merges a family only if no leaf touching its parent is finer than the family
 * (Gerris' rule): a 2:1 balanced tree stays balanced, and pm_balance does not refine again what
 * was just coarsened. The predicates must not call back into the tree. */
int pm_coarsen_balanced(pm_octree_t *tree, pm_coarsen_fn coarsen, void *arg);
/* Flags of pm_refine_ex and pm_coarsen_ex. */
enum {
  PM_RECURSIVE = 1,    /* refine: the children made are offered to the predicate in turn;
                          coarsen: a parent whose children were all merged is offered in the same
                          pass (as p4est's recursive refinement and coarsening): one call adapts
                          by several levels */
  PM_KEEP_BALANCE = 2  /* coarsen: Gerris' rule, as pm_coarsen_balanced */
};
/* pm_refine and pm_coarsen with flags (PM_RECURSIVE, PM_KEEP_BALANCE); HM_EINVAL for others. */
int pm_refine_ex(pm_octree_t *tree, pm_refine_fn refine, void *arg, unsigned flags);
int pm_coarsen_ex(pm_octree_t *tree, pm_coarsen_fn coarsen, void *arg, unsigned flags);
/* 2:1 balance across faces, edges and corners (refines only). */
int pm_balance(pm_octree_t *tree);
/* Sets the value of the leaf containing `point` (dim coordinates in [0, 1)). */
int pm_set_value(pm_octree_t *tree, const double *point, double value);
/* The leaf containing `point`; HM_EINVAL when the point is outside [0, 1)^dim. */
int pm_find(const pm_octree_t *tree, const double *point, pm_leaf_t *out);
/* Visits the leaves in Morton order. HM_EFORMAT for a damaged pool found by the check on the
 * first visit after pm_restore (the leaves before the damage were visited). */
#if defined(__GNUC__)
__attribute__((warn_unused_result))
#endif
int pm_leaves(const pm_octree_t *tree, pm_visit_fn visit, void *arg);
/* Visits the leaves touching `leaf` across a face, an edge or a corner. */
int pm_neighbours(const pm_octree_t *tree, const pm_leaf_t *leaf, pm_visit_fn visit, void *arg);
/* The leaf count the root object records (after pm_restore, before the first visit confirms it). */
uint64_t pm_leaf_count(const pm_octree_t *tree);
/* A checksum of the leaves, equal for equal trees whatever their layout in the pool; 0 for a
 * damaged pool (pm_valid then says why). */
uint64_t pm_checksum(const pm_octree_t *tree);
/* HM_OK when the tree is well formed; otherwise HM_EFORMAT and the reason in hm_last_error(). */
int pm_valid(const pm_octree_t *tree);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif /* HETMEM_PM_OCTREE_H */
