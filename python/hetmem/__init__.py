"""hetmem: heterogeneous-memory placement for large simulations (Python side).

The C library does the work; this package finds it, describes the tiers of the machine, and runs
the benchmarks and demonstrations behind the ``hetmem`` command.
"""

from .lib import HetmemError, Library, load

__all__ = ["HetmemError", "Library", "load"]
__version__ = "0.1.0"
