"""ctypes bindings to libhetmem and the search for the project's binaries."""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from types import SimpleNamespace

# `Path` in annotations is pathlib's, imported by the functions that build one (annotations are not
# evaluated): `hetmem run` on every MPI rank imports this module, and pathlib costs it 3 ms.

PERF_SOURCES = {0: "unknown", 1: "hwloc", 2: "sysfs", 3: "measured", 4: "emulated"}
ROLES = ("fast", "capacity", "persistent")


class HetmemError(RuntimeError):
    """An error reported by libhetmem or by the search for it; the message says what to do."""


class Interrupted(BaseException):
    """SIGTERM (a batch scheduler's time limit, `timeout`): raised in the main thread so that every
    `with` block (temporary directories, child processes) is left as on Ctrl-C."""


class RunLog:
    """A progress line on stderr after each step of a long command, with the steps done, the total
    and the seconds since it started: what a batch job's log shows where no bar is drawn."""

    def __init__(self, name: str, total: int, unit: str = ""):
        import time
        self.name, self.total, self.unit, self.done, self._clock = name, total, unit, 0, time.monotonic
        self.started = self._clock()

    def step(self, what: str) -> None:
        self.done += 1
        counted = f"{self.done}/{self.total} {self.unit}".rstrip()
        print(f"{self.name}: {counted} done, the last: {what} ({self._clock() - self.started:.0f} s)",
              file=sys.stderr, flush=True)


class _TierInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 256),
        ("kind", ctypes.c_int),
        ("numa_node", ctypes.c_int),
        ("roles", ctypes.c_uint),
        ("capacity", ctypes.c_uint64),
        ("read_bw_mbps", ctypes.c_double),
        ("write_bw_mbps", ctypes.c_double),
        ("latency_ns", ctypes.c_double),
        ("perf_source", ctypes.c_int),
        ("is_persistent_memory", ctypes.c_int),
        ("map_sync", ctypes.c_int),
        ("detail", ctypes.c_char * 256),
    ]


class _TierStats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "budget", "in_use", "high_water", "reserved", "allocs", "frees", "fallbacks_in", "fallbacks_out",
        "failures", "moves_in", "bytes_copied_in", "emul_charged_ns", "huge_bytes")]


class _Calibration(ctypes.Structure):
    _fields_ = [
        ("read_bw_mbps", ctypes.c_double * 64),
        ("write_bw_mbps", ctypes.c_double * 64),
        ("copy_bw_mbps", ctypes.c_double * 64),
        ("threads", ctypes.c_int),
        ("latency_ns", ctypes.c_double),
        ("from_cache", ctypes.c_int),
        ("path", ctypes.c_char * 512),
        ("method", ctypes.c_int),
        ("measured_unix", ctypes.c_int64),
        ("cpu", ctypes.c_char * 128),
        ("gather_ns", ctypes.c_double),
    ]


class _PoolInfo(ctypes.Structure):  # pm_pool_info_t (include/hetmem/pm_octree.h)
    _fields_ = [
        ("state", ctypes.c_int),
        ("version", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("dim", ctypes.c_int),
        ("note", ctypes.c_char * 1024),
        ("committed_bytes", ctypes.c_uint64),
        ("file_bytes", ctypes.c_uint64),
    ]


POOL_STATES = {0: "missing", 1: "creating", 2: "empty", 3: "committed"}


class Tier(SimpleNamespace):
    """One tier as libhetmem describes it: index, name, kind, numa_node, roles (list of ROLES),
    capacity (bytes), read_bw_mbps, write_bw_mbps, latency_ns, figures (where the figures came
    from: PERF_SOURCES), persistent_memory, map_sync, detail. (A namespace, not a dataclass: the
    dataclasses module alone is a sixth of the command's start-up.)"""

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


@functools.lru_cache(maxsize=None)  # asked several times a command; the answer cannot change
def installed_home() -> str | None:
    """PREFIX/lib/hetmem when this package runs from an install (`cmake --install`), else None."""
    try:
        from . import _installed  # noqa: F401  (written by the install only)
    except ImportError:
        return None
    return repo_root()


def _installed_dir(name: str) -> str | None:
    home = installed_home()
    if home is None:
        return None
    from . import _installed
    return os.path.realpath(os.path.join(home, getattr(_installed, name)))


# The search for the build tree and its files works on strings with os.path, not pathlib (above).
def build_dirs() -> list[str]:
    """Where to look for the build tree: $HETMEM_BUILD_DIR, then <repo>/build, or the install's
    hetmem home (laid out as the build tree: bench/, python/, fdb/)."""
    dirs = []
    if os.environ.get("HETMEM_BUILD_DIR"):
        dirs.append(os.environ["HETMEM_BUILD_DIR"])
    home = installed_home()
    dirs.append(home if home is not None else os.path.join(repo_root(), "build"))
    return dirs


def source_file(relative: str) -> Path:
    """A file of the source tree that a command reads (a benchmark's program it compiles): from the
    repository, or the copy an install keeps in its hetmem home."""
    from pathlib import Path
    home = installed_home()
    return Path(home if home is not None else repo_root()) / relative


def results_dir() -> Path:
    """Where results files go unless a command is told otherwise: $HETMEM_RESULTS_DIR, else
    results/ in the build tree (never the source tree), or hetmem-results/ in the current directory
    when running from an install. Created on demand."""
    from pathlib import Path
    explicit = os.environ.get("HETMEM_RESULTS_DIR")
    if explicit:
        d = Path(explicit)
    elif installed_home() is not None:
        d = Path.cwd() / "hetmem-results"
    else:
        d = Path(next((b for b in build_dirs() if os.path.isdir(b)), build_dirs()[0])) / "results"
    d.mkdir(parents=True, exist_ok=True)
    return d


def find_library() -> str:
    explicit = os.environ.get("HETMEM_LIB")
    if explicit:
        if not os.path.isfile(explicit):
            raise HetmemError(f"HETMEM_LIB={explicit}: no such file")
        return explicit
    installed = _installed_dir("LIBDIR")
    for d in build_dirs() + ([installed] if installed else []):
        candidate = os.path.join(d, "libhetmem.so")
        if os.path.isfile(candidate):
            return candidate
    import ctypes.util  # only when no build directory has it (it costs the command's start-up 6 ms)
    system = ctypes.util.find_library("hetmem")
    if system:
        return system
    raise HetmemError("libhetmem.so not found: build the project (scripts/run does it) or set HETMEM_LIB "
                      "or HETMEM_BUILD_DIR")


def find_preload() -> str:
    """libhetmem_preload.so: next to the libhetmem.so in use."""
    explicit = os.environ.get("HETMEM_PRELOAD")
    if explicit:
        return explicit
    lib = find_library()
    for d in (os.path.dirname(lib), *build_dirs()):
        candidate = os.path.join(d, "libhetmem_preload.so")
        if os.path.isfile(candidate):
            return os.path.realpath(candidate)
    raise HetmemError("libhetmem_preload.so not found next to libhetmem.so: build the project (scripts/run)")


def preload_value(existing: str | None = None) -> str:
    """What LD_PRELOAD is set to for a program run under hetmem: libhetmem.so.0, then the preload
    library, then what LD_PRELOAD already held. libhetmem.so.0 comes first although the preload
    library needs it anyway: the dynamic loader then finds it loaded, instead of looking for it
    along the preload library's RUNPATH (26 failed system calls in each process started)."""
    preload = find_preload()
    runtime = os.path.join(os.path.dirname(preload), "libhetmem.so.0")
    value = (f"{runtime}:" if os.path.isfile(runtime) else "") + preload
    return value + (":" + existing if existing else "")


def find_memkind_dir() -> str:
    """The directory of hetmem's libmemkind.so.0 (docs/memkind.md): put it first on
    LD_LIBRARY_PATH and memkind clients and OpenMP runtimes load hetmem's memkind."""
    candidates = [os.path.join(d, "memkind") for d in build_dirs()]
    candidates.append(os.path.join(os.path.dirname(os.path.realpath(find_library())), "hetmem-memkind"))
    for c in candidates:
        if os.path.exists(os.path.join(c, "libmemkind.so.0")):
            return os.path.realpath(c)
    raise HetmemError("hetmem's libmemkind.so.0 not found: build the project (scripts/setup.sh)")


def find_bench_program(name: str) -> str:
    """A helper program the benchmarks run (built into <build>/bench)."""
    for d in build_dirs():
        p = os.path.join(d, "bench", name)
        if os.path.isfile(p):
            return p
    raise HetmemError(f"{name} not found: build the project (scripts/setup.sh)")


def run_program(cmd: list[str], env: dict | None = None) -> int:
    """Runs a project binary, streaming its output; returns its exit status."""
    import subprocess
    try:
        return subprocess.call(cmd, env=env)
    except OSError as exc:
        raise HetmemError(f"cannot run {cmd[0]}: {exc}") from None


def find_program(name: str) -> str:
    """A binary of the project: from the build tree (bench/, examples/), the install's bin, or PATH."""
    installed = _installed_dir("BINDIR")
    for d in build_dirs() + ([installed] if installed else []):
        for sub in ("bench", "examples", "apps/pic", "apps/amr", "apps/mg", "apps/replica", "."):
            candidate = os.path.join(d, sub, name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    import shutil
    found = shutil.which(name)
    if found:
        return found
    raise HetmemError(f"{name} not found: build the project (scripts/run does it) or put it on PATH")


def mpi_env(env: dict) -> dict:
    """`env` with what Open MPI needs to run here: ranks may outnumber the cores, and as root it
    refuses to start unless told."""
    env = dict(env, OMPI_MCA_rmaps_base_oversubscribe="1")
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def mpirun_prefix(ranks: int) -> list[str]:
    """The mpirun command that starts `ranks` processes (oversubscribed, unbound)."""
    import shutil
    mpirun = shutil.which("mpirun")
    if not mpirun:
        raise HetmemError("mpirun is not installed (Debian: openmpi-bin); scripts/setup.sh installs it")
    return [mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]


class Library:
    """The loaded libhetmem, initialised (reads HM_* variables, discovers tiers) unless `init` is
    False (what needs no tiers: the policies, sizes, tier kind names)."""

    def __init__(self, path: str | None = None, init: bool = True):
        self.path = path or find_library()
        try:
            self._c = ctypes.CDLL(self.path)
        except OSError as exc:
            raise HetmemError(f"cannot load {self.path}: {exc}") from None
        c = self._c
        c.hm_init.restype = ctypes.c_int
        c.hm_last_error.restype = ctypes.c_char_p
        c.hm_strerror.restype = ctypes.c_char_p
        c.hm_strerror.argtypes = [ctypes.c_int]
        c.hm_version.restype = ctypes.c_char_p
        c.hm_tier_count.restype = ctypes.c_int
        c.hm_tier_info.argtypes = [ctypes.c_int, ctypes.POINTER(_TierInfo)]
        c.hm_tier_stats.argtypes = [ctypes.c_int, ctypes.POINTER(_TierStats)]
        c.hm_option_count.restype = ctypes.c_int
        c.hm_option_info.argtypes = [ctypes.c_int] + [ctypes.POINTER(ctypes.c_char_p)] * 3
        c.hm_option_get.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                    ctypes.c_size_t]
        c.hm_rules_check.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        c.hm_option_check.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        c.hm_calibration_get.argtypes = [ctypes.POINTER(_Calibration)]
        c.hm_policy_select.argtypes = [ctypes.c_char_p]
        c.hm_calibration_problem.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        c.hm_policy_count.restype = ctypes.c_int
        c.hm_policy_info.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p)]
        c.hm_size_parse.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64)]
        c.hm_tier_kind_name.restype = ctypes.c_char_p
        c.hm_tier_kind_name.argtypes = [ctypes.c_int]
        c.pm_inspect.argtypes = [ctypes.c_char_p, ctypes.POINTER(_PoolInfo)]
        c.hm_elf_functions_named.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                             ctypes.c_char_p, ctypes.c_size_t]
        c.hm_elf_demangle.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        if not init:
            return
        rc = c.hm_init()
        if rc != 0:
            # Why it could not start (HM_TIERS, budgets): hm_init leaves the saying to its caller.
            raise HetmemError(self.last_error() or c.hm_strerror(rc).decode())

    def last_error(self) -> str:
        return (self._c.hm_last_error() or b"").decode(errors="replace")

    def version(self) -> str:
        return self._c.hm_version().decode()

    def tiers(self) -> list[Tier]:
        out = []
        for i in range(self._c.hm_tier_count()):
            info = _TierInfo()
            if self._c.hm_tier_info(i, ctypes.byref(info)) != 0:
                raise HetmemError(self.last_error())
            out.append(Tier(
                index=i, name=info.name.decode(), kind=self._c.hm_tier_kind_name(info.kind).decode(), numa_node=info.numa_node,
                roles=[r for bit, r in enumerate(ROLES) if info.roles & (1 << bit)], capacity=info.capacity,
                read_bw_mbps=info.read_bw_mbps, write_bw_mbps=info.write_bw_mbps, latency_ns=info.latency_ns,
                figures=PERF_SOURCES.get(info.perf_source, "?"),
                persistent_memory=bool(info.is_persistent_memory), map_sync=bool(info.map_sync),
                detail=info.detail.decode(errors="replace")))
        return out

    def stats(self, tier: int) -> dict:
        s = _TierStats()
        if self._c.hm_tier_stats(tier, ctypes.byref(s)) != 0:
            raise HetmemError(self.last_error())
        return {name: getattr(s, name) for name, _ in _TierStats._fields_}

    def calibration_summary(self) -> str:
        """How the DRAM figures the emulated tiers scale were made, and any reason to distrust them."""
        import time

        cal = _Calibration()
        if self._c.hm_calibration_get(ctypes.byref(cal)) != 0:
            raise HetmemError(self.last_error())
        method = {1: "quick (one thread)", 2: "full"}.get(cal.method, "unknown method")
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(cal.measured_unix)) if cal.measured_unix else "unknown"
        text = (f"{method}, 1..{cal.threads} threads, measured {when} on {cal.cpu.decode(errors='replace') or '?'} "
                f"({cal.path.decode(errors='replace')})")
        buf = ctypes.create_string_buffer(512)
        if self._c.hm_calibration_problem(buf, 512) == 1:
            text += "\n  warning: " + buf.value.decode(errors="replace")
        return text

    def policies(self) -> list[tuple[str, str]]:
        """Every placement policy, (name, one-line description), in the library's order."""
        out = []
        for i in range(self._c.hm_policy_count()):
            name, doc = ctypes.c_char_p(), ctypes.c_char_p()
            if self._c.hm_policy_info(i, ctypes.byref(name), ctypes.byref(doc)) != 0:
                raise HetmemError(self.last_error())
            out.append((name.value.decode(), doc.value.decode()))
        return out

    def parse_size(self, text: str) -> int:
        """'512M', '1.5G', '4096' -> bytes, as HM_FAST_BUDGET and every size option read them."""
        value = ctypes.c_uint64()
        if self._c.hm_size_parse(text.encode(), ctypes.byref(value)) != 0:
            raise HetmemError(self.last_error())
        return value.value

    def check_policy(self, name: str) -> str | None:
        """None if `name` is a placement policy, else the message listing the policies."""
        if self._c.hm_policy_select(name.encode()) == 0:
            return None
        return self.last_error()

    def check_option(self, name: str, value: str) -> str | None:
        """None if `value` is a value the option accepts (the library's own check, as hm_init
        makes it), else the message: NAME='value': what is expected."""
        if self._c.hm_option_check(name.encode(), value.encode()) == 0:
            return None
        return self.last_error()

    def check_rules(self, path: str) -> str | None:
        """None if the rules file is valid, else the message (FILE:LINE:COLUMN: what)."""
        buf = ctypes.create_string_buffer(1024)
        if self._c.hm_rules_check(path.encode(), buf, 1024) == 0:
            return None
        return buf.value.decode(errors="replace")

    def inspect_pool(self, path: str) -> dict:
        """What the persistent pool at `path` holds, as the library reads its header (pm_inspect):
        state (missing, creating, empty, committed, or damaged with `problem` saying why: its
        header, its only root slot, or truncated), version, bytes, committed_bytes, file_bytes."""
        info = _PoolInfo()
        rc = self._c.pm_inspect(path.encode(), ctypes.byref(info))
        out = {"state": POOL_STATES.get(info.state, "damaged"), "version": info.version, "bytes": info.bytes,
               "committed_bytes": info.committed_bytes, "file_bytes": info.file_bytes, "problem": ""}
        if rc != 0:
            out.update(state="damaged", problem=self.last_error() or self._c.hm_strerror(rc).decode())
        return out

    def functions_named(self, path: str, function: str) -> tuple[list[str], list[str]]:
        """The symbols of the ELF file `path` that are `function` (the symbol, or a C++ name with or
        without its parameters): those it calls through the dynamic linker (a PLT slot), and those
        it exports. ([], []) for a file that is not a 64-bit ELF object. The reader the preload
        library hooks with (src/prim/elf.cpp)."""
        calls, exports = ctypes.create_string_buffer(1 << 16), ctypes.create_string_buffer(1 << 16)
        if self._c.hm_elf_functions_named(path.encode(), function.encode(), calls, len(calls), exports,
                                          len(exports)) != 0:
            return [], []
        return calls.value.decode(errors="replace").split(), exports.value.decode(errors="replace").split()

    def demangle(self, symbol: str) -> str:
        """A C++ symbol's name (LAMMPS_NS::Neighbor::decide()); any other symbol as it is."""
        buf = ctypes.create_string_buffer(4096)
        self._c.hm_elf_demangle(symbol.encode(), buf, len(buf))
        return buf.value.decode(errors="replace")

    def options(self) -> list[dict]:
        out = []
        for i in range(self._c.hm_option_count()):
            name, default, doc = ctypes.c_char_p(), ctypes.c_char_p(), ctypes.c_char_p()
            self._c.hm_option_info(i, ctypes.byref(name), ctypes.byref(default), ctypes.byref(doc))
            value, source = ctypes.create_string_buffer(4096), ctypes.create_string_buffer(32)
            self._c.hm_option_get(name.value, value, 4096, source, 32)
            out.append({"name": name.value.decode(), "value": value.value.decode(), "source": source.value.decode(),
                        "default": default.value.decode(), "doc": doc.value.decode()})
        return out


def load(path: str | None = None) -> Library:
    return Library(path)


_plain: Library | None = None


def plain_library() -> Library:
    """The library loaded once without initialising it: for what needs no tiers."""
    global _plain
    if _plain is None:
        _plain = Library(init=False)
    return _plain
