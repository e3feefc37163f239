"""numpy arrays on hetmem's tiers (NEP 49; docs/python.md).

    import numpy as np, hetmem.arrays as ha
    with ha.placed("capacity"):              # every array made in the block: on the capacity tier
        particles = np.zeros((10**7, 6))
    field = ha.zeros((256, 256, 256), tier="fast")
    ha.tier_of(particles)                    # 'emul:optane'
    ha.move(particles, "fast")               # same address, now on the fast tier
    ha.access(field, "rw")                   # declare a kernel's traffic to the emulated tier
    ha.stats()                               # per-tier accounting

A tier is a name `hetmem tiers` prints ("dram", "emul:cxl", "numa:1") or a role ("fast",
"capacity", "persistent"); an object class (for the placement policies) is an int from
`hetmem.arrays.define_class`. The handler is installed in numpy's context variable: it applies to
the calling thread (and asyncio task) until the block ends, and every array keeps the handler
that made it, so its data goes back to hetmem whenever it is freed.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import importlib.util
import os
from typing import Iterator

import numpy as np

from .lib import HetmemError, Library, build_dirs

_ACCESS = {"r": 1, "w": 2, "rw": 3}


def _extension():
    """The compiled handler module (build/python/_numpy_alloc*.so), loaded once."""
    global _EXT
    if _EXT is None:
        for d in build_dirs():
            for path in sorted(glob.glob(os.path.join(glob.escape(d), "python", "_numpy_alloc*.so"))):
                spec = importlib.util.spec_from_file_location("_numpy_alloc", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                _EXT = module
                return _EXT
        raise HetmemError("hetmem's numpy allocator is not built (scripts/setup.sh builds it when the Python that "
                          "runs hetmem has numpy and its headers)")
    return _EXT


_EXT = None
_LIB: Library | None = None
_HANDLERS: dict[tuple[int, int], object] = {}


def _lib() -> Library:
    global _LIB
    if _LIB is None:
        _LIB = Library()
        c = _LIB._c
        c.hm_ptr_tier.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        c.hm_move.argtypes = [ctypes.c_void_p, ctypes.c_int]
        c.hm_access.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
        c.hm_tier_find.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
        c.hm_class_define.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    return _LIB


def _tier_id(name: str) -> int:
    lib = _lib()
    tier = ctypes.c_int(-1)
    if lib._c.hm_tier_find(name.encode(), ctypes.byref(tier)) != 0:
        raise HetmemError(lib.last_error())  # names the known tiers
    return tier.value


def _handler(where: str | int):
    """The handler capsule for a tier name or a class handle, made once and kept (arrays hold it)."""
    if isinstance(where, int) and not isinstance(where, bool):
        key, name = (1, where), f"class {where}"
    elif isinstance(where, str):
        key, name = (0, _tier_id(where)), where
    else:
        raise HetmemError(f"a tier name (str) or an object class (int) is needed, got {where!r}")
    if key not in _HANDLERS:
        _HANDLERS[key] = _extension().handler(key[0], key[1], name)
    return _HANDLERS[key]


@contextlib.contextmanager
def placed(where: str | int) -> Iterator[None]:
    """Arrays allocated in the block (this thread and context) live on tier `where` (a name or
    role) or in object class `where` (an int from define_class)."""
    ext = _extension()
    previous = ext.set_handler(_handler(where))
    try:
        yield
    finally:
        ext.set_handler(previous)


def empty(shape, dtype=float, tier: str | int = "fast", order: str = "C") -> np.ndarray:
    with placed(tier):
        return np.empty(shape, dtype=dtype, order=order)


def zeros(shape, dtype=float, tier: str | int = "fast", order: str = "C") -> np.ndarray:
    with placed(tier):
        return np.zeros(shape, dtype=dtype, order=order)


def _data(array: np.ndarray) -> int:
    if not isinstance(array, np.ndarray):
        raise HetmemError(f"a numpy array is needed, got {type(array).__name__}")
    base = array
    while isinstance(base.base, np.ndarray):
        base = base.base
    return base.ctypes.data


def tier_of(array: np.ndarray) -> str | None:
    """The name of the tier holding the array's data; None when hetmem did not allocate it."""
    lib = _lib()
    tier = ctypes.c_int(-1)
    if lib._c.hm_ptr_tier(_data(array), ctypes.byref(tier)) != 0:
        return None
    return next(t.name for t in lib.tiers() if t.index == tier.value)


def move(array: np.ndarray, tier: str) -> None:
    """Moves the array's data to `tier` at the same address (arrays of 64 KiB or more)."""
    lib = _lib()
    if tier_of(array) is None:
        raise HetmemError("the array's data was not allocated by hetmem (make it inside hetmem.arrays.placed)")
    movable = _extension().MOVABLE_BYTES  # the size from which the handler gives an array its own mapping
    if array.nbytes < movable:
        raise HetmemError(f"only arrays of {movable >> 10} KiB or more can be moved ({array.nbytes} bytes)")
    if lib._c.hm_move(_data(array), _tier_id(tier)) != 0:
        raise HetmemError(lib.last_error())


def access(array: np.ndarray, how: str = "r") -> None:
    """Declares that a kernel reads ("r"), writes ("w") or updates ("rw") the whole array: the
    emulated tier charges it (docs/emulation.md)."""
    lib = _lib()
    if how not in _ACCESS:
        raise HetmemError(f"access '{how}': r, w or rw")
    if lib._c.hm_access(array.ctypes.data, array.nbytes, _ACCESS[how]) != 0:
        raise HetmemError(lib.last_error())


def define_class(name: str, kind: str = "hot", priority: int = 50) -> int:
    """An object class for the placement policies (docs/placement.md): kind metadata, temporary,
    hot, streaming or cold."""
    kinds = {"metadata": 0, "temporary": 1, "hot": 2, "streaming": 3, "cold": 4}
    if kind not in kinds:
        raise HetmemError(f"class kind '{kind}': {', '.join(kinds)}")
    lib = _lib()
    cls = ctypes.c_int(-1)
    if lib._c.hm_class_define(name.encode(), kinds[kind], priority, ctypes.byref(cls)) != 0:
        raise HetmemError(lib.last_error())
    return cls.value


def stats() -> dict[str, dict]:
    """Bytes in use and allocations per tier, as hetmem counts them."""
    lib = _lib()
    return {t.name: lib.stats(t.index) for t in lib.tiers()}
