/*
 * hetmem.h - the stable C API of hetmem.
 *
 * hetmem places a simulation's data on heterogeneous memory: a small fast tier (DRAM, HBM) and a
 * large capacity tier (far NUMA nodes, CXL expanders, persistent memory, or an emulated slow tier).
 * Code asks for memory by *role* (fast, capacity, persistent) or by named *tier*; configuration maps
 * roles to tiers (environment variable HM_TIERS, command `hetmem tiers`).
 *
 * Conventions
 *  - Functions that return `int` return 0 (HM_OK) on success or a negative HM_E* code;
 *    hm_strerror() explains a code and hm_last_error() gives the detailed message of the calling
 *    thread's last failure (which tier, how many bytes, what text was malformed, ...).
 *  - Allocation functions return NULL on failure and set the thread's last error; they never abort.
 *  - Every function initialises the library implicitly on first use (hm_init() is optional);
 *    if initialisation fails (for example a malformed HM_TIERS), every call fails with HM_EINIT and
 *    hm_last_error() names the offending variable and text.
 *  - All functions are thread-safe unless documented otherwise.
 */
#ifndef HETMEM_HETMEM_H
#define HETMEM_HETMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

#define HETMEM_VERSION_MAJOR 0
#define HETMEM_VERSION_MINOR 1
#define HETMEM_VERSION_PATCH 0

/* ---------------------------------------------------------------------------------------------
 * Error codes
 * ------------------------------------------------------------------------------------------- */
enum {
  HM_OK = 0,
  HM_ENOMEM = -1,     /* the operating system refused memory */
  HM_EBUDGET = -2,    /* a strict request exceeds the tier's budget */
  HM_EINVAL = -3,     /* an argument is invalid (details in hm_last_error()) */
  HM_ENOTIER = -4,    /* unknown tier or role, or no tier has the requested role */
  HM_EFORMAT = -5,    /* malformed configuration text or file */
  HM_EIO = -6,        /* a file could not be created, sized, mapped or synced */
  HM_ENOTSUP = -7,    /* the operation is not supported for this tier or allocation */
  HM_ENOTOWNED = -8,  /* the pointer was not allocated by hetmem */
  HM_EINIT = -9,      /* the library failed to initialise (see hm_last_error()) */
  HM_ECAPACITY = -10, /* the tier's backing (file pool, hugetlb pool) is full */
  HM_EBUSY = -11,     /* the resource (a persistent pool) is in use by another process */
  HM_EAUTH = -12      /* a peer (a replica server or primary) did not prove it holds the shared key */
};

/* Explains an error code in a few words. Never returns NULL. */
const char *hm_strerror(int code);
/* The library's version, "MAJOR.MINOR.PATCH" (the programs print it with --version). */
const char *hm_version(void);
/* The detailed message of the calling thread's most recent failure ("" if none). */
const char *hm_last_error(void);
/* The code of the calling thread's most recent failure (HM_OK if none). */
int hm_last_error_code(void);

/* ---------------------------------------------------------------------------------------------
 * Initialisation and options
 * ------------------------------------------------------------------------------------------- */

/* Reads the options (HM_* environment variables), discovers the tiers and maps roles to them.
 * Idempotent and thread-safe. Returns HM_OK or HM_EINIT/HM_EFORMAT/HM_EIO with a message naming
 * the variable and the offending text, for the caller to report (a failed implicit initialisation,
 * by the first call that needs hetmem, is printed to standard error instead). */
int hm_init(void);

/* Releases every tier and the memory they hold. Pointers from hetmem become invalid. Intended for
 * tests and for programs that want a clean exit; not needed otherwise. */
void hm_finalize(void);

/* Looks up an option by name ("HM_FAST_BUDGET"); writes its effective value and where it came
 * from ("default", "environment", "api") into the caller's buffers (either may be NULL). Does
 * not initialise hetmem: before hm_init it reads the environment as hm_init will.
 * Returns HM_EINVAL for an unknown name. */
int hm_option_get(const char *name, char *value, size_t value_len, char *source, size_t source_len);
/* The effective value of option `name` as hm_option_get writes it, without a copy: "" for an
 * option left empty, NULL for an unknown name. The text is hetmem's, valid while the option's
 * value is: that changes only when hm_init (the first, or the first after hm_finalize) reads an
 * environment in which the variable was changed. Does not initialise hetmem. */
const char *hm_option_text(const char *name);
/* Whether `value` is a value option `name` accepts (its kind: a size, 0 or 1, a number in its
 * range), as hm_init checks the environment: HM_OK, else HM_EFORMAT with "NAME='value': what is
 * expected" as hm_last_error() (HM_EINVAL for an unknown name). Does not initialise hetmem. */
int hm_option_check(const char *name, const char *value);
/* The effective value of a numeric option as a number: bytes for a size, 0 or 1 for a switch, NaN
 * for an integer option left unset (empty). HM_EFORMAT (message as above) for a malformed value,
 * HM_EINVAL for an unknown or a text option. Does not initialise hetmem. */
int hm_option_number(const char *name, double *value);
/* Reads a size as the options read it ("2G", "512MiB", "1.5k", "4096": K, M, G, T, binary) into
 * *bytes. HM_EINVAL, with hm_last_error() naming what is wrong, for anything else. Does not start
 * the runtime: a program may use it to compute options before hm_init. */
int hm_size_parse(const char *text, uint64_t *bytes);
/* Number of options, and the name and one-line documentation of option i (0 <= i < count). */
int hm_option_count(void);
int hm_option_info(int i, const char **name, const char **default_value, const char **doc);

/* ---------------------------------------------------------------------------------------------
 * Roles and tiers
 * ------------------------------------------------------------------------------------------- */

/* A role is what code asks for; configuration maps each role to a tier. */
typedef enum hm_role {
  HM_FAST = 0,        /* small fast tier: DRAM, HBM */
  HM_CAPACITY = 1,    /* large slow tier: far NUMA node, CXL, KMEM-DAX PM, emulated */
  HM_PERSISTENT = 2,  /* a file-backed pool: App Direct persistent memory or a file */
  HM_ROLE_COUNT = 3
} hm_role_t;

/* Tier handle: a small integer, 0 <= tier < hm_tier_count() <= HM_MAX_TIERS. */
typedef int hm_tier_t;
/* The most tiers a process has (HM_TIERS beyond it is refused); arrays indexed by hm_tier_t have
 * this many entries. */
#define HM_MAX_TIERS 16

/* What backs a tier. */
typedef enum hm_tier_kind {
  HM_KIND_DRAM = 0,  /* the local NUMA node */
  HM_KIND_NUMA = 1,  /* a NUMA node given by number: CXL, KMEM-DAX persistent memory, HBM */
  HM_KIND_FILE = 2,  /* a pool mapped from a file (MAP_SYNC on a DAX file system when possible) */
  HM_KIND_EMUL = 3,  /* the emulated slow tier: ordinary memory plus a charged delay */
  HM_KIND_COUNT = 4
} hm_tier_kind_t;

/* "dram", "numa", "file", "emul"; "unknown" for anything else. */
const char *hm_tier_kind_name(hm_tier_kind_t kind);

/* Where a tier's bandwidth/latency figures came from. */
typedef enum hm_perf_source {
  HM_PERF_NONE = 0,      /* nothing known */
  HM_PERF_HWLOC = 1,     /* hwloc memory attributes (ACPI HMAT) */
  HM_PERF_SYSFS = 2,     /* kernel sysfs access0 initiators (ACPI HMAT) */
  HM_PERF_MEASURED = 3,  /* measured on this machine (calibration cache) */
  HM_PERF_EMULATED = 4   /* a fixed profile ratio applied to the measured DRAM figures */
} hm_perf_source_t;

typedef struct hm_tier_info {
  char name[256];            /* "dram", "numa:1", "emul:optane", "file:/var/tmp/hm.pool" */
  hm_tier_kind_t kind;
  int numa_node;             /* node the memory lives on, -1 for file tiers */
  unsigned roles;            /* bit (1u << role) for each role mapped to this tier */
  uint64_t capacity;         /* bytes the backing can hold (node size, pool size) */
  double read_bw_mbps;       /* MB/s (1e6 bytes/s), 0 if unknown */
  double write_bw_mbps;
  double latency_ns;         /* dependent-load latency, 0 if unknown */
  hm_perf_source_t perf_source;
  int is_persistent_memory;  /* hwloc says NVM / DAX, or a file pool on a DAX file system */
  int map_sync;              /* file tiers: mapped with MAP_SYNC (stores durable after flush) */
  char detail[256];          /* how it was discovered, profile name, backing file, ... */
} hm_tier_info_t;

/* Number of tiers known to this process. */
int hm_tier_count(void);
/* Describes a tier. HM_ENOTIER for an invalid handle. */
int hm_tier_info(hm_tier_t tier, hm_tier_info_t *info);
/* Finds a tier by name ("dram", "emul:optane", "numa:1", "file:/path") or by role name
 * ("fast", "capacity", "persistent"). HM_ENOTIER lists the known names in hm_last_error(). */
int hm_tier_find(const char *name, hm_tier_t *tier);
/* The tier a role maps to; HM_ENOTIER if no tier has the role. */
int hm_role_tier(hm_role_t role, hm_tier_t *tier);
/* Names of roles: "fast", "capacity", "persistent". */
const char *hm_role_name(hm_role_t role);

/* ---------------------------------------------------------------------------------------------
 * Budgets and statistics
 * ------------------------------------------------------------------------------------------- */

/* Sets how many bytes of a tier this process may hold (0 = unlimited). Lowering a budget below
 * what is in use is allowed; it only refuses new allocations. */
int hm_tier_set_budget(hm_tier_t tier, uint64_t bytes);

typedef struct hm_tier_stats {
  uint64_t budget;          /* 0 = unlimited */
  uint64_t in_use;          /* usable bytes of live allocations (exact), and claimed bytes */
  uint64_t high_water;      /* largest in_use since start or hm_stats_reset() */
  uint64_t reserved;        /* bytes mapped from the backing (in_use plus caches and metadata) */
  uint64_t allocs;          /* successful allocations placed on this tier */
  uint64_t frees;
  uint64_t fallbacks_in;    /* allocations placed here because a preferred tier was full */
  uint64_t fallbacks_out;   /* preferred allocations for this tier that went elsewhere */
  uint64_t failures;        /* allocations refused (strict over budget, backing full) and served
                               by no other tier: a preferred fallback is counted in fallbacks_out */
  uint64_t moves_in;        /* hm_move() calls that moved data onto this tier */
  uint64_t bytes_copied_in; /* bytes written to this tier by hm_copy()/hm_move() */
  uint64_t emul_charged_ns; /* delay charged by the emulated tier (0 on real tiers) */
  uint64_t huge_bytes;      /* bytes of live allocations served from the hugetlb pool */
} hm_tier_stats_t;

int hm_tier_stats(hm_tier_t tier, hm_tier_stats_t *stats);
/* Counts `bytes` that this process holds on `tier` outside hetmem's allocator (a file on the
 * tier's medium: the FDB store's field pools) in the tier's budget and statistics (in_use,
 * high_water), so that they and the process's allocations there share one budget. HM_EBUDGET,
 * with nothing counted, when the budget cannot hold them (hm_last_error() names the tier, the
 * request and what is left); HM_ENOTIER for an unknown tier. */
int hm_tier_claim(hm_tier_t tier, uint64_t bytes);
/* Gives back bytes counted by hm_tier_claim() (HM_EINVAL, with nothing changed, for more than
 * are claimed on the tier). */
int hm_tier_unclaim(hm_tier_t tier, uint64_t bytes);
/* Resets high-water marks to the current in_use and zeroes the event counters. */
void hm_stats_reset(void);
/* Prints a table of every tier's accounting to stderr (or the stream named by fd 1/2). */
void hm_stats_print(int fd);

/* ---------------------------------------------------------------------------------------------
 * Allocation
 * ------------------------------------------------------------------------------------------- */

/* Flags for hm_alloc()/hm_tier_alloc(). */
#define HM_PREFERRED 0u       /* default: if the tier is over budget, fall back along the chain */
#define HM_STRICT 1u          /* never fall back: NULL + HM_EBUDGET if the tier cannot hold it */
#define HM_ZERO 2u            /* zero the memory */
#define HM_MOVABLE 4u         /* give the allocation its own mapping so hm_move() can move it */
#define HM_HUGE 8u            /* prefer the hugetlb pool (else transparent huge pages) */
#define HM_NO_HUGE 16u        /* never use huge pages for this allocation */
#define HM_GUARDED 32u        /* own mapping between two inaccessible pages (anonymous tiers): the
                                 kernel then reports its Referenced bytes on their own (profiler) */

/* Allocates `size` bytes aligned to `align` (a power of two, 0 = 16) on the tier that `role` maps
 * to. With HM_PREFERRED, a tier over budget falls back along the chain fast -> capacity (the
 * fallback is counted); with HM_STRICT it fails with HM_EBUDGET and a message naming the tier, the
 * request and the remaining budget. Returns NULL (never aborts) on failure. */
void *hm_alloc(hm_role_t role, size_t size, size_t align, unsigned flags);
/* The same on a tier given by handle. */
void *hm_tier_alloc(hm_tier_t tier, size_t size, size_t align, unsigned flags);
/* malloc-like: allocates on the calling thread's current mode (see hm_mode_push), HM_PREFERRED. */
void *hm_malloc(size_t size);
void *hm_calloc(size_t count, size_t size);
/* Frees without naming the tier (constant time). NULL is ignored. A pointer hetmem does not own
 * is reported (HM_ENOTOWNED in hm_last_error()) and left alone; state is never corrupted. */
void hm_free(void *ptr);
/* Resizes keeping the tier. NULL ptr = hm_malloc; size 0 = free and return NULL. A block that
 * shrinks to half its size or more stays where it is; an HM_GUARDED block that grows moves its
 * pages onto a larger mapping (none copied); any other block that grows is copied. */
void *hm_realloc(void *ptr, size_t size);
/* Usable size of an allocation (>= requested), 0 for NULL or a pointer not owned by hetmem. */
size_t hm_usable_size(const void *ptr);
/* Which tier holds ptr (any address inside an allocation). HM_ENOTOWNED if not hetmem's. */
int hm_ptr_tier(const void *ptr, hm_tier_t *tier);
/* 1 if hetmem allocated ptr (any address inside an allocation), 0 otherwise, without recording an
 * error: the lookup hm_free makes, for code that frees memory of several allocators. */
int hm_owns(const void *ptr);

/* Moves an allocation to another tier keeping its address (mbind + MPOL_MF_MOVE between NUMA
 * tiers; copy and remap for file and emulated tiers). The allocation must have its own mapping:
 * allocations of 1 MiB or more, or any made with HM_MOVABLE. Budgets are honoured. */
int hm_move(void *ptr, hm_tier_t dst);

/* Copies n bytes between any two addresses through the tier copy table (key: source kind,
 * destination kind): a non-temporal copy for large buffers, plus the emulation charge when either
 * side is on an emulated tier. Addresses not owned by hetmem count as DRAM. */
int hm_copy(void *dst, const void *src, size_t n);

/* ---------------------------------------------------------------------------------------------
 * Scoped allocation mode (the model of hpp_set_mode): per thread, steers hm_malloc and the
 * preload library.
 * ------------------------------------------------------------------------------------------- */
int hm_mode_push(hm_role_t role);
int hm_mode_push_tier(hm_tier_t tier);
/* Pops the innermost mode. HM_EINVAL if the stack is empty. */
int hm_mode_pop(void);
/* The tier hm_malloc would use now. */
hm_tier_t hm_mode_current(void);

/* ---------------------------------------------------------------------------------------------
 * Iteration arenas: bump allocation for temporaries that die within an iteration.
 * ------------------------------------------------------------------------------------------- */
typedef struct hm_arena hm_arena_t;

#define HM_ARENA_CONCURRENT 1u /* several threads may allocate at once (atomic bump) */
#define HM_ARENA_STRICT 2u     /* chunks only on the arena's tier: NULL when its budget is full */

/* Creates an arena whose chunks live on `tier`; initial chunk of `initial_bytes` (0 = 1 MiB).
 * When the tier's budget cannot hold a new chunk, the chunk falls back along the role chain
 * (fast -> capacity), counted in hm_arena_stats().fallbacks, unless HM_ARENA_STRICT. */
int hm_arena_create(hm_tier_t tier, size_t initial_bytes, unsigned flags, hm_arena_t **arena);
/* Bump-allocates; grows by a new chunk when exhausted. align 0 = 16. NULL only if the tier
 * refuses the new chunk. */
void *hm_arena_alloc(hm_arena_t *arena, size_t size, size_t align);
/* Ends an iteration: every pointer from the arena becomes invalid. If the arena grew, its chunks
 * are merged into one chunk large enough for the peak, so later iterations do not grow. */
void hm_arena_reset(hm_arena_t *arena);
void hm_arena_destroy(hm_arena_t *arena);

/* An arena for the temporaries of a class (kind temporary): its chunks are placed where the active
 * policy puts the class's objects and count in the class's space (hetmem-static's temporary
 * space). Same flags as hm_arena_create; HM_ARENA_STRICT is the policy's to decide. */
int hm_arena_create_class(int cls, size_t initial_bytes, unsigned flags, hm_arena_t **arena);

typedef struct hm_arena_stats {
  uint64_t used;       /* bytes handed out since the last reset */
  uint64_t peak;       /* largest `used` seen at a reset or now */
  uint64_t capacity;   /* bytes of all chunks */
  uint64_t chunks;     /* number of chunks now */
  uint64_t grows;      /* times a chunk was added */
  uint64_t resets;
  uint64_t fallbacks;  /* chunks placed on another tier because the arena's tier was full */
} hm_arena_stats_t;
int hm_arena_stats(const hm_arena_t *arena, hm_arena_stats_t *stats);

/* ---------------------------------------------------------------------------------------------
 * Object classes and placement policies (Ren et al. (ICS'21) §4; docs/placement.md)
 *
 * Code says what a data object is for; the active policy (HM_POLICY, or hm_policy_select before
 * the first class allocation) decides which tier it lands on, so one binary runs under every
 * policy:
 *   "first-touch"   the default: the fast tier until its budget is used up, in allocation order,
 *                   then the capacity tier, as NUMA first-touch does;
 *   "all-fast"      everything on the fast tier, strictly (the upper bound; the footprint must fit);
 *   "slow-only"     everything on the capacity tier (WarpX-PM's Optane-only);
 *   "memory-mode"   everything on the capacity tier behind a modelled direct-mapped DRAM cache of
 *                   the fast budget's size (Optane Memory Mode; emulated capacity tiers only);
 *   "interleave"    the fast and capacity tiers in the ratio of their read bandwidths: objects of
 *                   1 MiB or more split by page range in that ratio, smaller ones spread by bytes;
 *   "hetmem-static" Ren et al. (ICS'21) §4.1: the fast tier divided into spaces (metadata, temporary,
 *                   migration, free); iteration 1 observes, then at its end the spaces are sized
 *                   and hot objects moved (same addresses) into the free space by priority;
 *   "hetmem-static+prefetch"  and kernels prefetch field data into the cache (§4.2);
 *   "hetmem"        and streamed tiles staged through the migration space by model-sized helper
 *                   threads (§4.3): the full runtime;
 *   "reactive"      first-touch, then after every iteration the objects with the most sampled page
 *                   use per byte promoted and the least used demoted (the IAL-like baseline).
 * ------------------------------------------------------------------------------------------- */
typedef enum hm_class_kind {
  HM_CLASS_METADATA = 0,   /* long-lived, small, accessed often: grid and tile bookkeeping */
  HM_CLASS_TEMPORARY = 1,  /* allocated and freed within one iteration */
  HM_CLASS_HOT = 2,        /* long-lived, used in every phase (fields); priority orders them */
  HM_CLASS_STREAMING = 3,  /* large, swept piece by piece (particle tiles) */
  HM_CLASS_COLD = 4,       /* rarely touched */
  HM_CLASS_KIND_COUNT = 5
} hm_class_kind_t;

typedef int hm_class_t;
/* The most classes a process defines (hm_class_define beyond it is refused). */
#define HM_MAX_CLASSES 256

/* Defines the class `name` (at most 63 bytes) of `kind`, or returns the one already defined under
 * that name (HM_EINVAL if it has another kind). `priority` orders hot classes (higher: placed
 * fast first); ignored for other kinds. */
int hm_class_define(const char *name, hm_class_kind_t kind, int priority, hm_class_t *cls);
/* HM_EINVAL, listing the defined classes, if there is no class of that name. */
int hm_class_find(const char *name, hm_class_t *cls);
/* Allocates for a class where the active policy places it. `flags` may add HM_ZERO, HM_MOVABLE,
 * HM_HUGE, HM_NO_HUGE; HM_PREFERRED/HM_STRICT are the policy's. NULL on failure (a message names
 * the class, the policy and the tier). Free with hm_free. */
void *hm_class_alloc(hm_class_t cls, size_t size, size_t align, unsigned flags);

typedef struct hm_class_info {
  char name[64];
  hm_class_kind_t kind;
  int priority;
  uint64_t allocs;                 /* allocations made for the class */
  uint64_t bytes;                  /* bytes requested by them */
  uint64_t bytes_on_tier[HM_MAX_TIERS];      /* of those, bytes placed on each tier (index: hm_tier_t) */
  uint64_t live_bytes_on_tier[HM_MAX_TIERS]; /* bytes of the class's live objects on each tier now
                                                (after static placement's moves) */
  uint64_t peak_bytes_on_tier[HM_MAX_TIERS]; /* the most of them live on each tier at once over the
                                                run (each tier's own peak: not at one moment) */
} hm_class_info_t;
/* Asks for a weighted interleave of each object of the class across the fast and capacity tiers:
 * `fast_percent` of its pages on the fast tier, the rest on the capacity tier (-1: none, the
 * default). Applies to objects of 1 MiB or more under first-touch, interleave and hetmem-static
 * (the policies that put everything on one tier ignore it): the object gets its own mapping, its
 * last fast_percent% of pages are bound to the fast tier (page-range binding on NUMA tiers; on an
 * emulated tier each part is charged on its own tier), as far as the fast tier and the class's
 * space have room. HM_EINVAL for a share outside -1..100. */
int hm_class_interleave(hm_class_t cls, int fast_percent);
/* The tier the active policy gives the class's next allocation (its first choice: a preferred
 * placement can still fall back). For code that must pick a tier itself, such as an arena. */
int hm_class_tier(hm_class_t cls, hm_tier_t *tier);
int hm_class_count(void);
int hm_class_info(hm_class_t cls, hm_class_info_t *info);

/* The fast tier's spaces under hetmem-static (Ren et al. (ICS'21) §4): sub-budgets of the fast budget with
 * their own accounting, never exceeded. Other policies keep the accounting (budget 0: not sized). */
typedef enum hm_space {
  HM_SPACE_METADATA = 0,   /* metadata objects: long-lived, small, hot */
  HM_SPACE_TEMPORARY = 1,  /* temporaries and class arenas: sized from iteration 1's peak, grown on demand */
  HM_SPACE_MIGRATION = 2,  /* staging buffers for streamed data (HM_MIGRATION_SPACE) */
  HM_SPACE_FREE = 3,       /* the rest: hot objects by priority */
  HM_SPACE_COUNT = 4
} hm_space_t;

typedef struct hm_space_stats {
  uint64_t budget;       /* bytes the space may hold (0 until sized: only the fast budget limits) */
  uint64_t in_use;       /* bytes of the space's objects on the fast tier now */
  uint64_t high_water;   /* largest in_use */
  uint64_t objects;      /* live objects in the space */
  uint64_t grows;        /* times the space grew on demand (taking unused room of the free space) */
  uint64_t grown_bytes;
  uint64_t overflows;    /* objects of the space's kind placed on the capacity tier: no room */
  int sized;             /* 1 once static placement has sized the spaces */
} hm_space_stats_t;
/* HM_EINVAL for an unknown space. */
int hm_space_stats(hm_space_t space, hm_space_stats_t *stats);
/* "metadata", "temporary", "migration", "free". */
const char *hm_space_name(hm_space_t space);

/* What static placement did at the end of the observed iteration (hetmem-static). */
typedef struct hm_placement_stats {
  int settled;              /* 1 once the spaces are sized and hot objects moved */
  int settle_iteration;     /* the iteration it happened at the end of */
  uint64_t promoted;        /* hot objects moved to the fast tier, and their bytes */
  uint64_t promoted_bytes;
  uint64_t demoted;         /* hot objects moved to the capacity tier, and their bytes */
  uint64_t demoted_bytes;
  uint64_t unmovable;       /* objects that should have moved and could not (no own mapping, budget) */
  uint64_t split;           /* 1 if the object at the free space's boundary was split by page range */
  uint64_t split_fast_bytes; /* its bytes on the fast tier */
  double settle_seconds;    /* time the moves took */
  int error;                /* HM_OK, or the code of a problem (the fast budget below the spaces' minimum) */
  char message[256];        /* that problem, with the numbers */
} hm_placement_stats_t;
int hm_placement_stats(hm_placement_stats_t *stats);

/* The memory-mode policy's DRAM cache model: blocks hit, missed (filled from the slow device) and
 * written back dirty, since the policy was activated. HM_ENOTSUP when memory-mode is not active. */
typedef struct hm_dram_cache_stats {
  uint64_t hits, misses, writebacks;
  uint64_t block_bytes;    /* the model's block size */
  uint64_t blocks;         /* its number of blocks (direct-mapped sets) */
} hm_dram_cache_stats_t;
int hm_dram_cache_stats(hm_dram_cache_stats_t *stats);

/* What the reactive policy did: rounds of promotion and demotion (one per iteration with sampled
 * page use), the objects moved each way, their bytes and the time the moves took. */
typedef struct hm_reactive_stats {
  uint64_t rounds, promoted, demoted, moved_bytes;
  double move_seconds;
} hm_reactive_stats_t;
int hm_reactive_stats(hm_reactive_stats_t *stats);

/* ---------------------------------------------------------------------------------------------
 * Streamed tile containers (Ren et al. (ICS'21) §4.3; docs/streaming.md). A stream owns `tiles` allocations
 * of a class (their homes, placed by the policy: the capacity tier under "hetmem"). A kernel sweeps
 * a range of tiles batch by batch: hm_stream_next() hands out the next batch once it is staged,
 * hm_stream_acquire() gives a tile's working copy, hm_stream_release() returns it, saying whether
 * the kernel modified it. Under the "hetmem" policy, once the spaces are sized, batches are staged
 * in the migration space by helper threads (batch i+1 copied in and the modified tiles of batch
 * i-1 written back while batch i is computed, their number chosen by the model of docs/streaming.md
 * or HM_HELPERS); under every other policy a tile's working copy is its home. Either way the
 * kernel sees the same bytes, so results do not depend on the policy.
 * Tiles must not be resized while a sweep is running; one sweep at a time per process.
 * ------------------------------------------------------------------------------------------- */
typedef struct hm_stream hm_stream_t;
/* HM_EINVAL for an unknown class or zero tiles. Tiles start empty (0 bytes, NULL home). */
int hm_stream_create(hm_class_t cls, size_t tiles, hm_stream_t **stream);
/* A stream whose tiles live on one tier (no class): never staged, its tiles are used at home. */
int hm_stream_create_on_tier(hm_tier_t tier, size_t tiles, hm_stream_t **stream);
/* Frees every tile's home (a running sweep is ended first; modified tiles are written back). */
void hm_stream_destroy(hm_stream_t *stream);
size_t hm_stream_tiles(const hm_stream_t *stream);
/* (Re)allocates a tile's home to `bytes` keeping its first min(old, new) bytes, like realloc;
 * returns the new home, or NULL (HM_EBUSY during a sweep, HM_EINVAL past the end, or the
 * allocation's failure) with the old home untouched. 0 bytes frees the home. */
void *hm_stream_resize(hm_stream_t *stream, size_t tile, size_t bytes);
void *hm_stream_home(const hm_stream_t *stream, size_t tile);
size_t hm_stream_bytes(const hm_stream_t *stream, size_t tile);
/* Starts a sweep over tiles [first, last), in that order. HM_EBUSY if a sweep is running in this
 * process; HM_EBUDGET, naming the tile and the space, when staging is on and one tile does not fit
 * a third of the migration space. */
int hm_stream_sweep(hm_stream_t *stream, size_t first, size_t last);
/* Ends the current batch (its modified tiles go back home) and waits for the next one to be
 * staged: 1 with the batch in [*first, *last), 0 when the sweep is over (everything written back),
 * HM_EINVAL if a tile of the batch is still acquired or no sweep is running. */
int hm_stream_next(hm_stream_t *stream, size_t *first, size_t *last);
/* The working copy of a tile of the current batch. HM_EINVAL for a tile outside the batch or one
 * already acquired. Different threads may acquire and release different tiles at once. */
int hm_stream_acquire(hm_stream_t *stream, size_t tile, void **data);
/* Returns an acquired tile; `modified` != 0 writes it back home. HM_EINVAL if it is not acquired. */
int hm_stream_release(hm_stream_t *stream, size_t tile, int modified);
/* Ends a sweep early (what was modified is written back). HM_OK when none is running. */
int hm_stream_sweep_end(hm_stream_t *stream);

typedef struct hm_stream_stats {
  int staging;               /* 1 when the last sweep staged batches (else tiles were used at home) */
  int helpers;               /* helper threads of the last staged sweep */
  uint64_t sweeps, batches;
  uint64_t tiles_in, bytes_in;    /* tiles copied into the migration space, and their bytes */
  uint64_t tiles_out, bytes_out;  /* modified tiles written back home, and their bytes */
  uint64_t released_clean;       /* tiles released unmodified (not written back) */
  double wait_seconds;       /* time the kernel waited for a batch to be staged (copies not hidden) */
  double compute_seconds;    /* time between a batch handed out and the next call */
  double copy_seconds;       /* helper time spent copying */
  uint64_t slot_bytes;       /* bytes of each of the three staging slots */
} hm_stream_stats_t;
int hm_stream_stats(const hm_stream_t *stream, hm_stream_stats_t *stats);

/* The helper model's last decision for a sweep of phase `phase` (a name given to hm_phase_begin,
 * or "" for sweeps outside phases), with its inputs (docs/streaming.md). HM_EINVAL if that phase
 * has had no staged sweep yet. */
typedef struct hm_helper_model {
  char phase[64];
  int helpers;               /* the model's choice (or HM_HELPERS when set) */
  int overridden;            /* 1: HM_HELPERS decided */
  double data_in, data_out;  /* bytes per interval (batch) */
  double t_comp;             /* seconds per interval, measured with the batch staged */
  double bw_comp, bw_max;    /* bytes/s */
  int thrd_max, thrd_comp;
  double t_cp;               /* predicted copy time per interval at the choice */
  double t_predicted;        /* predicted interval time at the choice */
  char binding[96];          /* the constraint that decided */
  double t_inplace;          /* seconds an interval takes with its tiles at home: the rest of the
                                measuring sweep (its third batch on), worked on at home as one
                                batch, scaled to an interval; its second batch alone when it has
                                no third; 0 if not measured */
  int stage;                 /* 1: later sweeps stage; 0: staging is predicted not to pay (the
                                predicted interval is not 5% below t_inplace), or a staged sweep
                                after the decision took longer per interval than t_inplace: tiles
                                stay at home */
  double t_staged_seen;      /* seconds per interval of the first staged sweep after the decision,
                                as it ran with the helpers copying (0: none timed yet) */
} hm_helper_model_t;
int hm_helper_model(const char *phase, hm_helper_model_t *model);

/* Copy bandwidth between the fast and capacity tiers with 1..n helper threads, in MB/s, as the
 * helper model uses it (measured once per machine, tier set and calibration, cached next to the calibration).
 * `in`: capacity -> fast; `out`: fast -> capacity. Writes at most `max` entries; returns how many. */
int hm_copy_bandwidth(double *in, double *out, int max);

/* Cache prefetch of field data (Ren et al. (ICS'21) §4.2): how many units (particles) ahead a kernel should
 * prefetch in phase `phase`. 0 when the active policy does not prefetch ("hetmem-static+prefetch"
 * and "hetmem" do) or when every hot object is on the fast tier (nothing to hide);
 * HM_PREFETCH_DISTANCE overrides (out of 0..64: a message, and 0). `ns_per_unit` is the kernel's measured time per
 * unit (0: not yet known, the last figure for the phase is used). */
int hm_prefetch_distance(const char *phase, double ns_per_unit);

/* Writes the run summary to `path` (JSON, replaced atomically; docs/placement.md#the-run-summary):
 * every tier with its budget, in-use bytes, high water, fallbacks, moves and emulation charges;
 * every object class with the bytes it allocated on each tier and its live bytes on each tier; the
 * spaces, static placement and the memory-mode cache model; every phase's calls and seconds; the
 * wall time of each iteration (from the first class allocation to each hm_iteration_next); the
 * emulator's own time. `extra_json`, NULL or a JSON object, adds the caller's members at the top
 * level. HM_EFORMAT if extra_json is not a JSON object, HM_EIO if the file cannot be written. */
int hm_summary_write(const char *path, const char *extra_json);

/* Checks a placement-rules file (docs/profiler.md, `hetmem run --rules`) without installing it:
 * HM_OK, or HM_EFORMAT with "FILE:LINE:COLUMN: what is wrong" written to `error` (error_len
 * bytes, may be 0), HM_EIO if the file cannot be read, HM_ENOTIER for a rule naming an unknown
 * tier. Initialises hetmem (the tiers are needed to check tier names). */
int hm_rules_check(const char *path, char *error, size_t error_len);

/* The active policy's name ("first-touch", ...). */
const char *hm_policy_name(void);
/* The policies hetmem has, for listing them (`hetmem compare`, `hetmem policies`): their number,
 * and the name and a one-line description of policy `index` (0 <= index < hm_policy_count()).
 * HM_EINVAL for an index out of range or NULL out-parameters. */
int hm_policy_count(void);
int hm_policy_info(int index, const char **name, const char **doc);
/* Selects the policy for this process. HM_EINVAL, listing the policies, for an unknown name;
 * HM_EBUSY once a class allocation has been made under another policy; HM_ENOTSUP for
 * memory-mode when the capacity tier is not emulated (real hardware needs its own Memory Mode). */
int hm_policy_select(const char *name);

/* ---------------------------------------------------------------------------------------------
 * Phases and iterations (Ren et al. (ICS'21) §3): mark the stretches of the main loop. Cheap when nobody
 * profiles; with the profiler recording, each phase writes its wall time and, for every large
 * object, the bytes the kernel reports as referenced during it. Referenced bytes of mappings on
 * emulated tiers are charged at the phase end (the emulated tier's third charge point).
 * ------------------------------------------------------------------------------------------- */
int hm_phase_begin(const char *name);   /* phases nest; HM_EINVAL for an empty name */
int hm_phase_end(void);                 /* HM_EINVAL if no phase is open */
int hm_iteration_next(void);            /* the main loop moves to its next iteration */
int hm_iteration_current(void);
/* Calls and total seconds of the phase named `name` in this process. */
int hm_phase_stats(const char *name, uint64_t *calls, double *seconds);

/* Iterations of a program that marks none (programs that cannot change: the preload library
 * starts this when it profiles, applies rules or writes a run summary). One phase named `phase`
 * spans each inferred iteration, so the profiler records lifetimes and referenced bytes per
 * iteration and the referenced-page sampler charges emulated tiers once per iteration (within
 * HM_SAMPLE_BUDGET). `window_seconds` > 0: a helper thread ends an iteration every window (its
 * sampler charges are owed by the program and paid by the program's threads at their next
 * allocator call, hm_emul_pay_owed, or at hm_iteration_infer_stop); 0: iterations end only at
 * hm_iteration_infer_tick (called on each entry into a function of the program). The program's
 * own first hm_phase_begin/end or hm_iteration_next ends the inference for good.
 * HM_EINVAL: an empty name, a window outside [0, 3600] s, inference already on, or the program
 * already marks phases or iterations. */
int hm_iteration_infer_start(const char *phase, double window_seconds);
int hm_iteration_infer_tick(void);   /* HM_EINVAL when no inference is on */
int hm_iteration_infer_stop(void);   /* ends the last inferred iteration; pays what is owed */
int hm_iteration_inferred(void);     /* 1 while iterations are inferred */
/* Waits off, on the calling thread, the emulated-tier charges owed by the program (see above).
 * Returns the nanoseconds waited; costs one relaxed load when nothing is owed. */
uint64_t hm_emul_pay_owed(void);

/* ---------------------------------------------------------------------------------------------
 * The heap profiler (what `hetmem profile` turns on through the preload library). Records the
 * allocations and frees that reach hetmem or the preload hooks into a trace file (format:
 * docs/trace-format.md): size, time, thread, call site (stack_depth return addresses, symbolised
 * offline), phase. Objects of large_threshold bytes or more get per-phase referenced bytes. Every
 * allocation of HM_PROFILE_SAMPLE bytes (64 KiB) or more, or of large_threshold or more, is
 * recorded with its free; a smaller one with probability 1 - exp(-size / HM_PROFILE_SAMPLE), and
 * its free if it was (HM_PROFILE_SAMPLE=0: every allocation and free). The report scales them.
 * ------------------------------------------------------------------------------------------- */
int hm_profile_start(const char *path, int stack_depth, uint64_t large_threshold);
int hm_profile_stop(void);
/* 1 while this process writes a trace (hm_profile_start, or `hetmem profile`), else 0. */
int hm_profile_active(void);
/* Calls on_change(hm_profile_active()) now, and on_change(1) / on_change(0) each time this process
 * starts or stops writing a trace: for code that must know on a path too hot for a call per use
 * (numpy's handler keeps its array caches out of a trace). At most 4 functions; HM_ECAPACITY
 * beyond, HM_EINVAL for NULL. Registering a function again is HM_OK and calls it again. */
int hm_profile_watch(void (*on_change)(int active));
/* Names the call site of the calling thread's next allocations, until called again with NULL: the
 * trace records them under this name instead of their return addresses. For interpreters, whose
 * native stacks say nothing of the source: hetmem.arrays names a numpy array by its Python file and
 * line ("stencil.py:42"). HM_EINVAL for a name of more than 255 bytes. */
int hm_profile_site_name(const char *name);

/* ---------------------------------------------------------------------------------------------
 * The emulated slow tier (docs/emulation.md)
 *
 * A tier of kind emul:PROFILE is ordinary memory for which hetmem charges, as real time on the
 * thread that caused the access, what the emulated device would cost beyond DRAM:
 *   extra = R (1/bw_read_slow - 1/bw_read_dram) + W (1/bw_write_slow - 1/bw_write_dram)
 *         + N (lat_slow - lat_dram)
 * for R bytes read, W bytes written and N dependent accesses, with the device bandwidth shared by
 * the threads charging the tier at the same time. The access volume comes from (1) hetmem's own
 * copies and moves, (2) accesses the program declares with hm_access(), (3) for memory whose
 * accesses nobody declares, the pages referenced during a phase, sampled at a bounded rate.
 * On real tiers (NUMA nodes, DAX files) nothing is charged and these calls cost a lookup.
 * ------------------------------------------------------------------------------------------- */

/* What a kernel does to the bytes it declares (hm_access, hm_access_scattered). */
#define HM_ACCESS_READ 1u       /* reads them */
#define HM_ACCESS_WRITE 2u      /* writes them */
#define HM_ACCESS_RW 3u         /* reads and writes each byte (read-modify-write) */
#define HM_ACCESS_DEPENDENT 4u  /* hm_access_scattered only: each access waits for the previous one
                                   (pointer chasing); charged the device's extra latency too */

/* Declares that the calling thread's kernel touched `bytes` bytes of the allocation holding `ptr`
 * in order (streaming), reading, writing or both (`how`). The bytes need not be contiguous: a
 * kernel that reads a box of a 3D array declares the box's volume. On an emulated tier the
 * extra device time is charged on the calling thread (small charges are gathered per thread and
 * paid once they reach a microsecond, and at the next phase end); elsewhere nothing happens.
 * Declared allocations are left out of referenced-page sampling, so nothing is charged twice:
 * declaring covers the allocation's own mapping (1 MiB or more, or HM_MOVABLE), or the 2 MiB
 * segment that smaller allocations share. Returns HM_OK, also for memory hetmem does not own
 * (which counts as DRAM); HM_EINVAL for a NULL ptr or a `how` without READ or WRITE. */
int hm_access(const void *ptr, size_t bytes, unsigned how);

/* Declares `count` accesses of `size` bytes each at scattered places of the allocation holding
 * `ptr` (gathers, scatters, hash lookups): each moves the whole cache lines it touches. With
 * HM_ACCESS_DEPENDENT they are a chain (each address comes from the previous load) and each is
 * also charged the device's extra latency. Same returns as hm_access. */
int hm_access_scattered(const void *ptr, uint64_t count, size_t size, unsigned how);

/* Charges, as real time on the calling thread, the difference between the emulated device of
 * `tier` and DRAM for `read_bytes` read, `write_bytes` written and `dependent_accesses`
 * pointer-chasing accesses (counted as declared). No-op (returns 0) on a non-emulated tier.
 * Writes the charged delay in nanoseconds to *charged_ns when not NULL. Prefer hm_access(), which
 * finds the tier and keeps the allocation out of sampling. */
int hm_emul_charge(hm_tier_t tier, uint64_t read_bytes, uint64_t write_bytes,
                   uint64_t dependent_accesses, uint64_t *charged_ns);

/* Where a charge's access volume came from. */
typedef enum hm_emul_source {
  HM_EMUL_COPY = 0,      /* hm_copy, hm_move, hm_realloc: exact */
  HM_EMUL_DECLARED = 1,  /* hm_access, hm_access_scattered, hm_emul_charge */
  HM_EMUL_SAMPLED = 2,   /* pages referenced during a phase (measured or carried over) */
  HM_EMUL_SOURCES = 3
} hm_emul_source_t;

/* What an emulated tier charged since start or hm_stats_reset(), per source. */
typedef struct hm_emul_stats {
  uint64_t charged_ns[HM_EMUL_SOURCES];   /* modelled device delay charged */
  uint64_t read_bytes[HM_EMUL_SOURCES];   /* volume charged */
  uint64_t write_bytes[HM_EMUL_SOURCES];
  uint64_t accesses[HM_EMUL_SOURCES];     /* dependent accesses charged */
  int charges;                            /* 0: the profile charges nothing (emul:dram) or HM_EMUL=0 */
} hm_emul_stats_t;
/* HM_ENOTIER for an invalid handle; all zero for a tier that is not emulated. */
int hm_emul_stats(hm_tier_t tier, hm_emul_stats_t *stats);

/* The referenced-page sampler shared by the profiler and the emulated tier: at a phase begin it
 * clears the kernel's referenced bits (/proc/self/clear_refs), at the phase end it reads them
 * (/proc/self/smaps). Both cost time, and so does every 4 KiB page the program touches again
 * afterwards, so phases are sampled at a bounded rate (HM_SAMPLE_BUDGET, a fraction of the run
 * time, counted from the library's load); a recording profiler gets the first instance of every
 * phase name regardless. */
typedef struct hm_sampler_stats {
  uint64_t phases_sampled;    /* phase instances whose referenced pages were read */
  uint64_t phases_carried;    /* instances charged with the last sample of the same phase name */
                              /* (one that found undeclared memory in use) */
  uint64_t phases_skipped;    /* instances charged nothing: no undeclared memory on an emulated tier
                                 (or its last sample found none in use), and no profile recording */
  uint64_t own_ns;            /* time spent clearing and reading the kernel's bits */
  uint64_t inflicted_ns;      /* estimate of what the cleared bits cost the program afterwards */
  double page_cost_ns;        /* the estimate's cost per 4 KiB page touched after a clear */
  double budget;              /* HM_SAMPLE_BUDGET */
} hm_sampler_stats_t;
int hm_sampler_stats(hm_sampler_stats_t *stats);

/* How the DRAM figures of a calibration were made. */
#define HM_CALIBRATION_UNKNOWN 0  /* a cache file written by an older hetmem */
#define HM_CALIBRATION_QUICK 1    /* measured on first use: one thread, about half a second */
#define HM_CALIBRATION_FULL 2     /* `hetmem tiers --bench`: every thread count, STREAM sizes */

/* The DRAM figures the emulation uses, from the calibration cache (measured quickly on first use
 * if absent or made on another machine). A run that charges with a quick, old or partial
 * calibration says so on stderr once. */
typedef struct hm_calibration {
  double read_bw_mbps[64];   /* index t-1: aggregate read bandwidth with t threads */
  double write_bw_mbps[64];
  double copy_bw_mbps[64];   /* bytes copied (counted once) per second */
  int threads;               /* entries filled */
  double latency_ns;         /* dependent-load latency */
  int from_cache;            /* 1 if read from the cache file, 0 if just measured */
  char path[512];            /* the cache file */
  int method;                /* HM_CALIBRATION_QUICK, _FULL or _UNKNOWN */
  int64_t measured_unix;     /* when it was measured (seconds since 1970; 0 if unknown) */
  char cpu[128];             /* the CPU model it was measured on */
  double gather_ns;          /* one thread, independent random 8-byte loads: time per load (the
                                memory-level parallelism is latency_ns / gather_ns) */
} hm_calibration_t;
int hm_calibration_get(hm_calibration_t *cal);
/* Replaces the calibration with new figures and writes the cache file (method as given, 0 = full;
 * the time and CPU are filled in). */
int hm_calibration_store(const hm_calibration_t *cal);
/* Writes to buf (when not NULL) a sentence saying why the calibration should not be trusted
 * (quick, older than 30 days, fewer threads than cores), or "" if it can be; returns 1 if there is
 * such a problem, 0 if not, or a negative code. */
int hm_calibration_problem(char *buf, size_t len);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif /* HETMEM_HETMEM_H */
