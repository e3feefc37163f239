"""The benchmarks of ``hetmem bench``: one row each (name, what it measures, how to run it).

Adding a benchmark adds a row here; the command line's choices and help come from this table.
Every runner takes the JSON results path, whether to run the quick variant and the console to
print on, and returns the exit status (1 when a target is NOT MET, as each benchmark documents).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from .lib import find_program, run_program


@dataclass(frozen=True)
class Benchmark:
    name: str
    doc: str
    run: Callable[[str, bool, Any], int]


def _binary(name: str, quick_args: list[str]) -> Callable[[str, bool, Any], int]:
    """A benchmark that is one of the build's binaries, writing its JSON to --json PATH."""
    def run(out: str, quick: bool, _console: Any) -> int:
        return run_program([find_program(name), "--json", out] + (quick_args if quick else []))
    return run


def _module(module: str, function: str = "main", console: bool = False) -> Callable[[str, bool, Any], int]:
    """A benchmark written in Python: `function(out, quick[, console])` of python/hetmem/MODULE.py,
    imported when run (matplotlib and friends load only for the benchmark that needs them)."""
    def run(out: str, quick: bool, con: Any) -> int:
        fn = getattr(importlib.import_module(f".{module}", __package__), function)
        return fn(out, quick, con) if console else fn(out, quick)
    return run


BENCHMARKS: list[Benchmark] = [
    Benchmark("alloc", "allocation, free, arena, copy and emulation figures",
              _binary("hetmem-bench-alloc", ["--quick"])),
    Benchmark("emul", "the emulated tier's bookkeeping overhead (PIC, stencil) and its fidelity to the model",
              _module("bench_emul")),
    Benchmark("profiler", "profiling overhead, heaptrack comparison, rules-only cost", _module("bench_profiler")),
    Benchmark("pic", "the WarpX comparison problem, ns per particle-step for 1 and 2 threads (with --ranks: over "
              "MPI ranks, with the exchanges' split and messages)", _module("bench_pic")),
    Benchmark("octree", "PM-octree restart, persist bytes, refine/balance vs p4est, transformation, per-step time "
              "vs snapshot and SQLite baselines", _module("bench_octree")),
    Benchmark("placement", "every policy on the PIC code's 1.2 GiB rung with a fast budget of 25% of it, and the "
              "helper and prefetch sweeps (Figures 12 and 11)", _module("compare", "bench", console=True)),
    Benchmark("stream", "the streaming engine's staging copies against the machine's non-temporal copies",
              _binary("hetmem-bench-stream", ["--mib", "64"])),
    Benchmark("mg", "hetmem-mg against hypre's PFMG on the same problem, and with 4 KiB pages, THP and a hugetlb "
              "pool", _module("bench_mg")),
    Benchmark("memkind", "hetmem's libmemkind against memkind 1.14, OpenMP's default allocator with it loaded, numpy "
              "arrays with hetmem's allocator against numpy's own", _module("bench_memkind")),
    Benchmark("overhead", "what hetmem's machinery costs a program it cannot speed up, every tier DRAM: the "
              "real-program suite plain, under its plan, its rules and profiled; the hetmem command's start-up",
              _module("bench_overhead", console=True)),
    Benchmark("fields", "FDB5's POSIX store against the hetmem store: GiB/s archived, flush latency, consumers' "
              "latency and cost, on tmpfs and disk; hetmem-mg's workflow with 2 product generators",
              _module("bench_fields")),
    Benchmark("unchanged", "real Debian programs in every mode (crashes, hangs, output), profiling LAMMPS against "
              "heaptrack, compare --plan on LAMMPS and a numpy code", _module("bench_unchanged", console=True)),
]


def find(name: str) -> Benchmark:
    for b in BENCHMARKS:
        if b.name == name:
            return b
    raise KeyError(name)
