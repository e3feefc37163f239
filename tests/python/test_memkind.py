"""hetmem's libmemkind from outside: a program built against the system's memkind runs unchanged on
hetmem's kinds, OpenMP memory spaces (clang, LLVM's runtime) land on hetmem's tiers, HM_MEMKIND
overrides the table, and `hetmem run --memkind` is all it takes (docs/memkind.md)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build"))
PROGRAMS = ROOT / "tests" / "compat" / "programs"
MEMKIND_DIR = BUILD / "memkind"


def env(extra=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("HM_") and k != "LD_LIBRARY_PATH"}
    e["HM_CALIBRATION"] = str(BUILD / "calibration.test")
    e.update(extra or {})
    return e


def hetmem(*args, extra=None):
    return subprocess.run([sys.executable, "-m", "hetmem", *args], capture_output=True, text=True,
                          env=env(extra), cwd=ROOT / "python", timeout=300)


def lines(text):
    return dict(line.split(": ", 1) if ": " in line else line.rsplit(" ", 1) for line in text.splitlines() if line)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    if not Path("/usr/include/memkind.h").exists():
        pytest.skip("the system's memkind headers are not installed (Debian: libmemkind-dev)")
    out = tmp_path_factory.mktemp("memkind") / "client"
    subprocess.run(["cc", "-O1", str(PROGRAMS / "system_memkind_client.c"), "-o", str(out), "-lmemkind"], check=True)
    return out


@pytest.fixture(scope="module")
def omp_program():
    built = BUILD / "tests" / "programs" / "omp_spaces"  # clang -fopenmp, where clang is installed
    if not built.exists():
        pytest.skip("omp_spaces is not built: clang with LLVM's OpenMP runtime is not installed (Debian: clang "
                    "libomp-dev)")
    return built


def test_a_program_built_against_the_systems_memkind_runs_unchanged_on_hetmem(client):
    plain = subprocess.run([str(client)], capture_output=True, text=True, env=env(), timeout=60)
    assert plain.returncode == 0, plain.stderr
    assert "dax_kmem_available -1" in plain.stdout, "the system's memkind: no DAX KMEM memory on this machine"
    r = hetmem("run", "--memkind", "--", str(client))
    assert r.returncode == 0, r.stderr
    got = lines(r.stdout)
    assert got["version"] == "1014000"
    assert got["dax_kmem_available"] == "0", "hetmem's capacity tier is the DAX KMEM kind"
    assert got["dax_kmem_malloc"] == "ok" and got["hbw_posix_memalign"] == "0" and got["default_malloc"] == "default"


def test_openmp_memory_spaces_land_on_hetmems_tiers(omp_program):
    plain = subprocess.run([str(omp_program)], capture_output=True, text=True, env=env(), timeout=60)
    assert plain.returncode == 0, plain.stderr
    assert lines(plain.stdout) == {"large_cap": "not hetmem", "high_bw": "not hetmem", "default": "not hetmem"}
    r = hetmem("run", "--memkind", "--", str(omp_program))
    assert r.returncode == 0, r.stderr
    # The test tiers: fast = DRAM, capacity = the emulated Optane tier (the default without a slower node).
    assert lines(r.stdout) == {"large_cap": "emul:optane", "high_bw": "dram", "default": "not hetmem"}, r.stdout


def test_hm_memkind_overrides_the_table_and_a_bad_override_is_named(omp_program, client):
    r = hetmem("run", "--memkind", "--", str(omp_program),
               extra={"HM_MEMKIND": "HBW=capacity,HBW_PREFERRED=capacity", "HM_TIERS": "capacity=emul:cxl"})
    assert r.returncode == 0, r.stderr
    got = lines(r.stdout)
    assert got["high_bw"] == "emul:cxl" and got["large_cap"] == "emul:cxl", r.stdout
    r = hetmem("run", "--memkind", "--", str(client), extra={"HM_MEMKIND": "DAX_KMEM=nosuchtier"})
    assert r.returncode == 0, r.stderr
    assert lines(r.stdout)["dax_kmem_available"] == "-12", "MEMKIND_ERROR_ENVIRON: the override names no tier"
