/* numpy's array data on hetmem's tiers (NEP 49, numpy >= 1.22): an allocator handler per tier or
 * object class, installed with PyDataMem_SetHandler in numpy's context variable. Each array keeps
 * the handler that made it, so its data is freed by hetmem whatever the context is by then. The
 * Python side is python/hetmem/arrays.py (docs/python.md). Written on hetmem's public C API. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#include <hetmem/hetmem.h>
#include <numpy/arrayobject.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Arrays of at least this many bytes get a mapping of their own, so that hetmem.move() can move
 * them between tiers at the same address. */
#define MOVABLE_BYTES ((size_t)64 << 10)

typedef struct {
  int is_class; /* 0: a tier handle; 1: an object class */
  int id;
  int slot; /* its small-array cache in each thread (0..CACHE_HANDLERS-1), -1: none */
} Place;

/* Arrays made and dropped in a loop: each thread keeps a few freed blocks per handler. Small ones
 * as numpy's own handler keeps its npy_alloc_cache, so that an array of a few bytes costs a cache
 * hit, not an allocator call: up to 1 KiB 7 blocks per 16-byte size, and (where numpy's own handler
 * calls the C library's malloc) up to 8 KiB 4 blocks per 256-byte size, 64 KiB of them at most.
 * Scratch arrays of 64 KiB to 4 MiB (each a mapping of its own, so that it can move) as the C
 * library's malloc reuses its heap for them: a few per thread, 16 MiB at most, reused by the same
 * page count. The blocks stay on the handler's tier (and counted in use there). Per thread, not
 * under the GIL, since numpy does not promise to hold it when it allocates; a thread's blocks go
 * back to hetmem when it ends. While a trace is written the caches are not used, so that every
 * array is an allocation in the trace. */
#define SMALL_MAX_BYTES 1024
#define SMALL_GRAIN 16
#define SMALL_DEPTH 7
#define CACHE_MAX_BYTES 8192
#define LARGE_GRAIN 256
#define LARGE_DEPTH 4
#define LARGE_TOTAL ((size_t)64 << 10)
#define SMALL_BUCKETS (SMALL_MAX_BYTES / SMALL_GRAIN)
#define CACHE_BUCKETS (SMALL_BUCKETS + (CACHE_MAX_BYTES - SMALL_MAX_BYTES) / LARGE_GRAIN)
#define CACHE_HANDLERS 16
#define SCRATCH_MAX_BYTES ((size_t)4 << 20)
#define SCRATCH_DEPTH 4
#define SCRATCH_TOTAL ((size_t)16 << 20)
#define PAGE_BYTES ((size_t)4096)

/* A bucket in one cache line: the count beside the blocks it counts. */
typedef struct {
  int count;
  void *block[SMALL_DEPTH];
} Bucket;

typedef struct {
  void *block[SCRATCH_DEPTH];
  size_t bytes[SCRATCH_DEPTH]; /* whole pages; 0: an empty entry */
  size_t total;
} Scratch;

typedef struct {
  Bucket buckets[CACHE_BUCKETS];
  size_t large_total; /* bytes in the buckets above SMALL_MAX_BYTES */
  Scratch scratch;
} HandlerCache;

typedef struct {
  HandlerCache *by_handler[CACHE_HANDLERS]; /* made on first use */
} ThreadCache;

/* One pointer: the static TLS a loaded module may use holds it (no __tls_get_addr per array). */
static __thread ThreadCache *t_cache __attribute__((tls_model("initial-exec")));
static pthread_key_t g_cache_key;
static pthread_once_t g_cache_once = PTHREAD_ONCE_INIT;
static int g_next_slot; /* handlers are made with the GIL held */

static void cache_release(void *value) {
  ThreadCache *tc = value;
  for (int h = 0; h < CACHE_HANDLERS; ++h) {
    HandlerCache *c = tc->by_handler[h];
    if (!c) continue;
    for (int b = 0; b < CACHE_BUCKETS; ++b)
      for (int i = 0; i < c->buckets[b].count; ++i) hm_free(c->buckets[b].block[i]);
    for (int i = 0; i < SCRATCH_DEPTH; ++i)
      if (c->scratch.bytes[i]) hm_free(c->scratch.block[i]);
    free(c);
  }
  free(tc);
}

static void cache_key_create(void) {
  if (pthread_key_create(&g_cache_key, cache_release) != 0) g_next_slot = CACHE_HANDLERS; /* no caches */
}

/* The calling thread's caches for a handler; NULL when it has none and none can be made. */
static HandlerCache *cache_of(const Place *p) {
  if (p->slot < 0) return NULL;
  if (!t_cache) {
    pthread_once(&g_cache_once, cache_key_create);
    ThreadCache *tc = calloc(1, sizeof *tc);
    if (!tc || pthread_setspecific(g_cache_key, tc) != 0) {
      free(tc);
      return NULL;
    }
    t_cache = tc;
  }
  HandlerCache **c = &t_cache->by_handler[p->slot];
  if (!*c) *c = calloc(1, sizeof **c);
  return *c;
}

/* Whether a trace is written (hm_profile_watch keeps it): read for every array, where a call into
 * the library for hm_profile_active cost a tenth of a small array's time. */
static volatile int g_profiling;

/* The bucket of a size up to CACHE_MAX_BYTES, and the bytes each block in it holds: any block
 * of a bucket serves any size of it. */
static inline int bucket_of(size_t size) {
  if (size <= SMALL_MAX_BYTES) return size ? (int)((size - 1) / SMALL_GRAIN) : 0;
  return SMALL_BUCKETS + (int)((size - SMALL_MAX_BYTES - 1) / LARGE_GRAIN);
}

static inline size_t bucket_bytes(int bucket) {
  if (bucket < SMALL_BUCKETS) return (size_t)(bucket + 1) * SMALL_GRAIN;
  return SMALL_MAX_BYTES + (size_t)(bucket - SMALL_BUCKETS + 1) * LARGE_GRAIN;
}

/* The bucket of a size up to CACHE_MAX_BYTES when the thread's cache for the handler exists and
 * no trace is written: the path of an array made and dropped in a loop, without a call. */
static inline Bucket *cached_bucket(const Place *p, size_t size, HandlerCache **cache) {
  ThreadCache *tc = t_cache;
  HandlerCache *c = tc && p->slot >= 0 ? tc->by_handler[p->slot] : NULL;
  if (!c || g_profiling) return NULL;
  *cache = c;
  return &c->buckets[bucket_of(size)];
}

/* Where a size is cached: a bucket (bucket >= 0), scratch blocks of whole pages (pages > 0), or
 * neither. `bytes` is what is allocated for it: the bucket's or the pages' whole size, so that any
 * cached block serves any size of its bucket or page count. */
typedef struct {
  int bucket;
  size_t pages;
  size_t bytes;
} Cached;

static Cached cached_as(size_t size) {
  Cached c = {-1, 0, size};
  if (size <= CACHE_MAX_BYTES) {
    c.bucket = bucket_of(size);
    c.bytes = bucket_bytes(c.bucket);
  } else if (size >= MOVABLE_BYTES && size <= SCRATCH_MAX_BYTES) {
    c.pages = c.bytes = (size + PAGE_BYTES - 1) & ~(PAGE_BYTES - 1);
  }
  return c;
}

static void profiling_changed(int active) { g_profiling = active; }

static void *place_alloc(const Place *p, size_t size, unsigned flags) {
  if (size == 0) size = 1;
  if (size >= MOVABLE_BYTES) flags |= HM_MOVABLE;
  return p->is_class ? hm_class_alloc(p->id, size, 64, flags) : hm_tier_alloc(p->id, size, 64, flags);
}

/* While a trace is written, an array's allocation is named by the Python line that made it (its
 * native stack, all libpython and numpy frames, names nothing of the program). Only with the GIL
 * held: numpy may allocate scratch space without it. */
static void *named_alloc(const Place *p, size_t size, unsigned flags) {
  if (!g_profiling || !PyGILState_Check()) return place_alloc(p, size, flags);
  char name[256] = "";
  /* The innermost frame outside numpy's and hetmem.arrays' own Python code (np.ones, ha.zeros):
   * the program's line. */
  PyFrameObject *frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  for (int depth = 0; frame && depth < 32 && !name[0]; ++depth) {
    PyCodeObject *code = PyFrame_GetCode(frame);
    const char *file = PyUnicode_AsUTF8(code->co_filename);
    if (!file) PyErr_Clear();
    else if (!strstr(file, "/numpy/") && !strstr(file, "hetmem/arrays.py"))
      snprintf(name, sizeof name, "%s:%d", file, PyFrame_GetLineNumber(frame));
    Py_DECREF(code);
    PyFrameObject *back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  if (name[0]) hm_profile_site_name(name);
  void *ptr = place_alloc(p, size, flags);
  if (name[0]) hm_profile_site_name(NULL);
  return ptr;
}

/* An allocation the thread's bucket did not serve: a scratch block of its page count, or a new
 * block (a cached size at its bucket's or pages' whole size, the bucket filled by frees). */
static __attribute__((noinline)) void *uncached_alloc(const Place *p, size_t size, unsigned flags) {
  const Cached k = cached_as(size);
  if ((k.bucket < 0 && !k.pages) || g_profiling) return named_alloc(p, size, flags);
  HandlerCache *c = k.pages ? cache_of(p) : NULL;
  void *ptr = NULL;
  if (c) {
    for (int i = 0; i < SCRATCH_DEPTH && !ptr; ++i)
      if (c->scratch.bytes[i] == k.pages) {
        ptr = c->scratch.block[i];
        c->scratch.bytes[i] = 0;
        c->scratch.total -= k.pages;
      }
  }
  if (!ptr) return named_alloc(p, k.bytes, flags);
  if (flags & HM_ZERO) memset(ptr, 0, size);
  return ptr;
}

/* A block from the thread's bucket (no stack frame, no call), else uncached_alloc. */
static inline void *cached_alloc(const Place *p, size_t size, unsigned flags) {
  HandlerCache *c;
  Bucket *b = size <= CACHE_MAX_BYTES ? cached_bucket(p, size, &c) : NULL;
  if (b && b->count > 0) {
    void *ptr = b->block[--b->count];
    if (size > SMALL_MAX_BYTES) c->large_total -= bucket_bytes((int)(b - c->buckets));
    if (flags & HM_ZERO) memset(ptr, 0, size);
    return ptr;
  }
  return uncached_alloc(p, size, flags);
}

/* numpy turns a NULL into a MemoryError that gives no reason; hetmem has one (a budget, a full
 * file tier, the tier's name), and says it on stderr, one line per refused array. */
static __attribute__((noinline, cold)) void say_refused(size_t size) {
  char line[640];
  int n = snprintf(line, sizeof line, "hetmem.arrays: an array of %zu bytes was refused: %s\n", size, hm_last_error());
  if (n > 0) {
    ssize_t ignored = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    (void)ignored;
  }
}

static inline void *said(void *ptr, size_t size) {
  if (__builtin_expect(!ptr, 0)) say_refused(size);
  return ptr;
}

static void *h_malloc(void *ctx, size_t size) { return said(cached_alloc(ctx, size, HM_PREFERRED), size); }

static void *h_calloc(void *ctx, size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) return NULL;
  return said(cached_alloc(ctx, bytes, HM_PREFERRED | HM_ZERO), bytes);
}

static void *h_realloc(void *ctx, void *ptr, size_t size) {
  if (!ptr) return h_malloc(ctx, size);
  /* A size that may later be cached is rounded up as the cache rounds it (keeps the tier). */
  return said(hm_realloc(ptr, cached_as(size).bytes), size);
}

/* Keeps a freed block in the thread's cache when there is room (making the cache at the first);
 * false otherwise. */
static __attribute__((noinline)) int cache_keep(const Place *p, void *ptr, size_t size) {
  const Cached k = cached_as(size);
  if ((k.bucket < 0 && !k.pages) || g_profiling) return 0;
  HandlerCache *c = cache_of(p);
  if (!c) return 0;
  if (k.bucket >= 0) {
    const int large = k.bucket >= SMALL_BUCKETS;
    Bucket *b = &c->buckets[k.bucket];
    if (b->count >= (large ? LARGE_DEPTH : SMALL_DEPTH) || (large && c->large_total + k.bytes > LARGE_TOTAL)) return 0;
    b->block[b->count++] = ptr;
    if (large) c->large_total += k.bytes;
    return 1;
  }
  if (c->scratch.total + k.pages > SCRATCH_TOTAL) return 0;
  for (int i = 0; i < SCRATCH_DEPTH; ++i)
    if (!c->scratch.bytes[i]) {
      c->scratch.block[i] = ptr;
      c->scratch.bytes[i] = k.pages;
      c->scratch.total += k.pages;
      return 1;
    }
  return 0;
}

static void h_free(void *ctx, void *ptr, size_t size) {
  if (!ptr) return;
  HandlerCache *c;
  Bucket *b = size <= SMALL_MAX_BYTES ? cached_bucket(ctx, size, &c) : NULL;
  if (b && b->count < SMALL_DEPTH) {
    b->block[b->count++] = ptr;
    return;
  }
  if (!cache_keep(ctx, ptr, size)) hm_free(ptr);
}

static void destroy_handler(PyObject *capsule) {
  PyDataMem_Handler *h = PyCapsule_GetPointer(capsule, "mem_handler");
  if (h) {
    PyMem_RawFree(h->allocator.ctx);
    PyMem_RawFree(h);
  }
}

/* handler(is_class, id, name) -> a "mem_handler" capsule placing on that tier or class. */
static PyObject *make_handler(PyObject *self, PyObject *args) {
  (void)self;
  int is_class, id;
  const char *name;
  if (!PyArg_ParseTuple(args, "iis", &is_class, &id, &name)) return NULL;
  PyDataMem_Handler *h = PyMem_RawCalloc(1, sizeof *h);
  Place *place = PyMem_RawMalloc(sizeof *place);
  if (!h || !place) {
    PyMem_RawFree(h);
    PyMem_RawFree(place);
    return PyErr_NoMemory();
  }
  place->is_class = is_class;
  place->id = id;
  place->slot = g_next_slot < CACHE_HANDLERS ? g_next_slot++ : -1;
  snprintf(h->name, sizeof h->name, "hetmem %s", name);
  h->version = 1;
  h->allocator.ctx = place;
  h->allocator.malloc = h_malloc;
  h->allocator.calloc = h_calloc;
  h->allocator.realloc = h_realloc;
  h->allocator.free = h_free;
  PyObject *capsule = PyCapsule_New(h, "mem_handler", destroy_handler);
  if (!capsule) {
    PyMem_RawFree(place);
    PyMem_RawFree(h);
  }
  return capsule;
}

/* set_handler(capsule) -> the handler it replaces (numpy's context variable: this thread, this
 * context). */
static PyObject *set_handler(PyObject *self, PyObject *capsule) {
  (void)self;
  return PyDataMem_SetHandler(capsule);
}

static PyObject *get_handler(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyDataMem_GetHandler();
}

static PyMethodDef methods[] = {
    {"handler", make_handler, METH_VARARGS, "handler(is_class, id, name): a numpy allocator handler on a tier or class"},
    {"set_handler", set_handler, METH_O, "installs a handler in numpy's context; returns the one it replaces"},
    {"get_handler", get_handler, METH_NOARGS, "the handler numpy allocates with in this context"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_numpy_alloc", "numpy arrays on hetmem's tiers", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__numpy_alloc(void) {
  import_array();
  if (hm_profile_watch(profiling_changed) != HM_OK) {
    PyErr_Format(PyExc_RuntimeError, "hetmem's numpy handler: %s", hm_last_error());
    return NULL;
  }
  PyObject *m = PyModule_Create(&module);
  /* hetmem.arrays.move's threshold is this one. */
  if (m && PyModule_AddObject(m, "MOVABLE_BYTES", PyLong_FromSize_t(MOVABLE_BYTES)) != 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
