/* numpy's array data on hetmem's tiers (NEP 49, numpy >= 1.22): an allocator handler per tier or
 * object class, installed with PyDataMem_SetHandler in numpy's context variable. Each array keeps
 * the handler that made it, so its data is freed by hetmem whatever the context is by then. The
 * Python side is python/hetmem/arrays.py (docs/python.md). Written on hetmem's public C API. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#include <hetmem/hetmem.h>
#include <numpy/arrayobject.h>
#include <stdint.h>
#include <string.h>

/* Arrays of at least this many bytes get a mapping of their own, so that hetmem.move() can move
 * them between tiers at the same address. */
#define MOVABLE_BYTES ((size_t)64 << 10)

typedef struct {
  int is_class; /* 0: a tier handle; 1: an object class */
  int id;
} Place;

static void *place_alloc(const Place *p, size_t size, unsigned flags) {
  if (size == 0) size = 1;
  if (size >= MOVABLE_BYTES) flags |= HM_MOVABLE;
  return p->is_class ? hm_class_alloc(p->id, size, 64, flags) : hm_tier_alloc(p->id, size, 64, flags);
}

/* While a trace is written, an array's allocation is named by the Python line that made it (its
 * native stack, all libpython and numpy frames, names nothing of the program). Only with the GIL
 * held: numpy may allocate scratch space without it. */
static void *named_alloc(const Place *p, size_t size, unsigned flags) {
  if (!hm_profile_active() || !PyGILState_Check()) return place_alloc(p, size, flags);
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

static void *h_malloc(void *ctx, size_t size) { return named_alloc(ctx, size, HM_PREFERRED); }

static void *h_calloc(void *ctx, size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) return NULL;
  return named_alloc(ctx, bytes, HM_PREFERRED | HM_ZERO);
}

static void *h_realloc(void *ctx, void *ptr, size_t size) {
  if (!ptr) return h_malloc(ctx, size);
  return hm_realloc(ptr, size ? size : 1); /* keeps the tier */
}

static void h_free(void *ctx, void *ptr, size_t size) {
  (void)ctx;
  (void)size;
  hm_free(ptr);
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
  PyObject *m = PyModule_Create(&module);
  /* hetmem.arrays.move's threshold is this one. */
  if (m && PyModule_AddObject(m, "MOVABLE_BYTES", PyLong_FromSize_t(MOVABLE_BYTES)) != 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
