"""The project's shape: benchmark binaries that refuse what they do not know and write nothing into
the directory they run in, and a source tree that holds no run outputs."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build"))
BENCH_BINARIES = ["hetmem-bench-alloc", "hetmem-bench-tiers", "hetmem-bench-stream", "hetmem-bench-octree",
                  "hetmem-validate-emul"]


@pytest.mark.parametrize("name", BENCH_BINARIES)
def test_benchmark_binaries_print_usage_and_refuse_unknown_options(name, tmp_path):
    binary = BUILD / "bench" / name
    if not binary.exists():
        pytest.skip(f"{binary} not built (HM_ENABLE_BENCH=OFF)")
    ok = subprocess.run([str(binary), "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert ok.returncode == 0 and "usage:" in ok.stdout, ok.stderr
    bad = subprocess.run([str(binary), "--no-such-option"], capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert bad.returncode == 2
    assert "unknown option '--no-such-option'" in bad.stderr and "usage:" in bad.stderr
    assert list(tmp_path.iterdir()) == [], "a refused command line wrote a file"


def test_no_run_outputs_are_tracked():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT, check=True).stdout.split()
    outputs = [f for f in tracked if f.startswith("diags/") or ("/" not in f and f.endswith(".json"))
               or f.endswith((".hmtrace", ".csv"))]
    assert outputs == [], f"run outputs committed: {outputs}"


# The layers of src/ and the layers each may include (docs/architecture.md). A unit is a header
# and its source file; a unit's includes are those of both.
LAYERS = {
    "prim": set(),
    "base": {"prim"},
    "tier": {"prim", "base"},
    "alloc": {"prim", "base", "tier"},
    "profile": {"prim", "base", "tier", "alloc"},
    "place": {"prim", "base", "tier", "alloc"},
    "persist": {"prim", "base", "tier", "alloc"},
    "preload": {"prim", "base", "tier", "alloc", "profile", "place"},
    "compat": {"alloc"},  # clients of the public API (libmemkind, numpy's handler), and of alloc/hook.h's bounds
    "fields": {"prim", "base", "tier", "alloc", "persist"},  # the FDB5 store's field pools (in libhetmem)
    "fdb": {"fields"},  # the FDB5 store plugin (libhetmem-fdb.so): fields/hooks.h over libhetmem.so only
}


def _units() -> dict[str, set[str]]:
    import re
    units: dict[str, set[str]] = {}
    for path in sorted((ROOT / "src").rglob("*")):
        if path.suffix not in (".h", ".cpp"):
            continue
        unit = str(path.relative_to(ROOT / "src").with_suffix(""))
        includes = re.findall(r'^#include "([a-z_]+/[a-z_0-9]+)\.h"', path.read_text(), re.M)
        units.setdefault(unit, set()).update(i for i in includes if i.split("/")[0] in LAYERS and i != unit)
    return units


def test_every_layer_of_src_is_known_and_includes_only_the_layers_below_it():
    units = _units()
    layers = {u.split("/")[0] for u in units}
    assert layers <= set(LAYERS), f"layers not in the table (and docs/architecture.md): {layers - set(LAYERS)}"
    upward = [f"{u} includes {i}" for u, incs in units.items() for i in incs
              if i.split("/")[0] != u.split("/")[0] and i.split("/")[0] not in LAYERS[u.split("/")[0]]]
    assert upward == [], "includes against the layering:\n" + "\n".join(upward)


def test_no_two_units_of_src_depend_on_each_other():
    units = _units()
    # Tarjan's strongly connected components over the unit graph: any component of more than one
    # unit is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(u: str) -> None:
        index[u] = low[u] = len(index)
        stack.append(u)
        on_stack.add(u)
        for w in units.get(u, ()):
            if w not in units:
                continue
            if w not in index:
                visit(w)
                low[u] = min(low[u], low[w])
            elif w in on_stack:
                low[u] = min(low[u], index[w])
        if low[u] == index[u]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == u:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for u in units:
        if u not in index:
            visit(u)
    assert cycles == [], f"units that include each other (directly or around a loop): {cycles}"


def _needed(binary: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True, check=True).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


def test_the_allocation_layer_alone_links_neither_zstd_nor_openssl():
    binary = BUILD / "tests" / "alloc_layer_only"
    if not binary.exists():
        pytest.skip(f"{binary} not built (HM_ENABLE_TESTS=OFF)")
    needed = _needed(binary)
    assert "libc.so.6" in needed, needed
    heavy = [n for n in needed if n.startswith(("libzstd", "libcrypto", "libssl", "libz."))]
    assert heavy == [], f"the allocation layer pulls in {heavy}"


def test_a_program_linking_libhetmem_needs_only_libhetmem():
    binary = BUILD / "hetmem-tiers"
    if not binary.exists():
        pytest.skip(f"{binary} not built")
    needed = _needed(binary)
    assert "libhetmem.so.0" in needed
    assert [n for n in needed if not n.startswith(("libhetmem", "libc.so"))] == [], needed


def test_libhetmem_loads_openssl_only_when_a_replica_handshake_needs_it():
    # Every process the preload library starts in loads libhetmem's dependencies: libcrypto, which
    # only the replica protocol uses, is loaded by the first handshake instead, and hwloc, libnuma
    # and libunwind where they are needed (build/loaded-when-needed.txt names them).
    lib = BUILD / "libhetmem.so.0"
    if not lib.exists():
        pytest.skip(f"{lib} not built")
    needed = _needed(lib)
    assert "libc.so.6" in needed, needed
    assert [n for n in needed if n.startswith(("libcrypto", "libssl"))] == [], needed
    when_needed = (BUILD / "loaded-when-needed.txt").read_text().split()
    assert any(n.startswith("libnuma") for n in when_needed), when_needed
    assert set(needed) & set(when_needed) == set(), needed


def test_the_preloaded_libraries_load_no_math_library_and_run_no_cpuid_at_start_up():
    # What every process the preload library starts in pays before main: libm would be one more
    # library to map and relocate, and the compiler's CPU-feature constructor (__cpu_indicator_init,
    # linked by any __builtin_cpu_supports) runs a dozen CPUIDs, each a trip to the hypervisor in a
    # virtual machine (docs/benchmarks.md, the preload library's start-up).
    for name in ("libhetmem.so.0", "libhetmem_preload.so"):
        lib = BUILD / name
        if not lib.exists():
            pytest.skip(f"{lib} not built")
        needed = _needed(lib)
        assert [n for n in needed if n.startswith("libm.")] == [], (name, needed)
        symbols = subprocess.run(["nm", str(lib)], capture_output=True, text=True).stdout
        assert "__cpu_indicator_init" not in symbols, name


# System calls and the C library's file and environment functions: only src/prim/ calls them
# (and the preload library, whose job is to stand between a program and the C library, and the
# compat libraries, which stand in for memkind and are built apart from the layers).
OS_CALLS = {
    "mmap", "mmap64", "munmap", "mremap", "madvise", "mbind", "move_pages", "get_mempolicy", "set_mempolicy",
    "open", "open64", "openat", "close", "read", "write", "pread", "pread64", "pwrite", "pwrite64", "lseek",
    "stat", "fstat", "lstat", "unlink", "remove", "rename", "mkdir", "opendir", "readdir", "closedir", "fopen",
    "fopen64", "fclose", "fread", "fwrite", "fprintf", "dprintf", "vdprintf", "getenv", "setenv", "unsetenv",
    "secure_getenv", "fsync", "fdatasync", "ftruncate", "ftruncate64", "fallocate", "socket", "connect", "accept",
    "bind", "listen", "send", "recv", "fork", "clock_gettime", "syscall", "sysconf", "getpid", "gettid",
    "dlsym", "dlopen", "flock", "msync", "statfs", "getrusage",
}


def test_no_layer_but_prim_calls_the_os():
    if subprocess.run(["which", "gcc-nm"], capture_output=True).returncode != 0:
        pytest.skip("gcc-nm not installed")
    found = []
    for layer in LAYERS:
        if layer in ("prim", "preload", "compat"):
            continue
        target = "hetmem_fdb" if layer == "fields" else f"hetmem_{layer}_objects"
        objects = sorted((BUILD / "CMakeFiles" / f"{target}.dir").rglob("*.o"))
        if not objects and layer == "fields":
            continue  # built only where FDB5 is installed (scripts/setup.sh installs it)
        if not objects:
            pytest.skip(f"no objects of the {layer} layer in {BUILD}")
        for obj in objects:
            out = subprocess.run(["gcc-nm", "-u", str(obj)], capture_output=True, text=True, check=True).stdout
            calls = {line.split()[-1] for line in out.splitlines() if line.strip()} & OS_CALLS
            found += [f"{obj.name}: {c}" for c in sorted(calls)]
    assert found == [], "OS calls outside src/prim/:\n" + "\n".join(found)


def test_the_policy_lists_in_the_header_and_the_docs_are_the_registrys():
    """A new policy is one file and one registry row; the hand-written lists beside it (hetmem.h's
    comment, docs/placement.md's table) must name exactly the registry's policies."""
    import re
    import sys
    sys.path.insert(0, str(ROOT / "python"))
    from hetmem.lib import Library
    registry = [name for name, _ in Library(init=False).policies()]
    assert len(registry) >= 9, registry
    header = (ROOT / "include" / "hetmem" / "hetmem.h").read_text()
    block = header[header.index("Object classes and placement policies"):header.index("typedef enum hm_class_kind")]
    in_header = re.findall(r'^ \*\s+"([a-z+-]+)"\s', block, re.M)
    docs = (ROOT / "docs" / "placement.md").read_text()
    table = docs[docs.index("| policy | where classes go |"):]
    table = table[:table.index("\n\n")]
    in_docs = re.findall(r"^\| `([a-z+-]+)`", table, re.M)
    assert sorted(in_header) == sorted(registry), f"hetmem.h lists {in_header}, the registry has {registry}"
    assert sorted(in_docs) == sorted(registry), f"docs/placement.md lists {in_docs}, the registry has {registry}"
