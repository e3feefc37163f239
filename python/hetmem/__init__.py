"""hetmem: heterogeneous-memory placement for large simulations (Python side).

The C library does the work; this package finds it, describes the tiers of the machine, and runs
the benchmarks and demonstrations behind the ``hetmem`` command.
"""

__all__ = ["HetmemError", "Library", "load"]
__version__ = "0.1.0"


def __getattr__(name: str):
    """The library's bindings, imported at first use: `hetmem run` on every MPI rank starts a
    Python interpreter, and each module it does not import is start-up it does not pay."""
    if name in __all__:
        from . import lib
        return getattr(lib, name)
    raise AttributeError(f"module 'hetmem' has no attribute {name!r}")
