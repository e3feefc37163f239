"""`hetmem bench memkind`: the interfaces codes already use, against what they had (docs/memkind.md).

1. memkind's interface: allocate, touch, free of 64 B to 64 MiB through memkind_malloc/free, the
   same program run alternately on Debian's libmemkind 1.14 and on hetmem's (target: at least as
   fast, in every round);
2. OpenMP's default allocator (omp_alloc/omp_free, clang, LLVM's runtime) with hetmem's libmemkind
   loaded against without it (target: at most 10% overhead, in every round);
3. numpy: np.empty + touch + free of 8 B to 1 GiB inside hetmem.arrays.placed("fast") against
   numpy's own allocator.
DRAM only, nothing emulated. Ratios carry the spread of the rounds (python/hetmem/verdicts.py)."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from . import verdicts
from .lib import HetmemError, find_memkind_dir, repo_root

SOURCE = repo_root() / "bench" / "programs" / "memkind_pairs.c"


def _build(tmp: str) -> tuple[str, str | None]:
    if not Path("/usr/include/memkind.h").exists():
        raise HetmemError("the system's memkind is needed as the reference (Debian: libmemkind-dev)")
    plain = os.path.join(tmp, "memkind_pairs")
    subprocess.run(["cc", "-O2", str(SOURCE), "-o", plain, "-lmemkind"], check=True)
    omp = None
    if shutil.which("clang"):
        omp = os.path.join(tmp, "memkind_pairs_omp")
        subprocess.run(["clang", "-O2", "-fopenmp", "-DWITH_OMP", str(SOURCE), "-o", omp, "-lmemkind"], check=True)
    return plain, omp


def _run(cmd: list[str], hetmem: bool) -> dict[str, float | None]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_") and k != "LD_LIBRARY_PATH"}
    if hetmem:
        env["LD_LIBRARY_PATH"] = find_memkind_dir()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    rows = {}
    for line in out.splitlines():
        kind, size, ns = line.split()
        rows[f"{kind} {size}"] = None if ns == "unavailable" else float(ns)
    return rows


def _numpy_rounds(rounds: int) -> dict[int, tuple[list[float], list[float]]]:
    import numpy as np
    from . import arrays
    sizes = [8, 64 << 10, 1 << 20, 64 << 20, 1 << 30]
    result = {s: ([], []) for s in sizes}

    def timed(size: int, placed: bool) -> float:
        n = max(1, min(100000, (256 << 20) // size))
        ctx = arrays.placed("fast") if placed else None
        if ctx:
            ctx.__enter__()
        try:
            t0 = time.perf_counter()
            for _ in range(n):
                a = np.empty(size, dtype=np.uint8)
                a[0] = 1
                a[-1] = 1
                del a
            return (time.perf_counter() - t0) * 1e9 / n
        finally:
            if ctx:
                ctx.__exit__(None, None, None)

    for _ in range(rounds):
        for s in sizes:
            result[s][0].append(timed(s, False))
            result[s][1].append(timed(s, True))
    return result


def main(out: str, quick: bool) -> int:
    rounds = 3 if quick else 5
    with tempfile.TemporaryDirectory(prefix="hetmem-bench-memkind-") as tmp:
        plain, omp = _build(tmp)
        system, ours, omp_without, omp_with = [], [], [], []
        for _ in range(rounds):
            system.append(_run([plain], False))
            ours.append(_run([plain], True))
            if omp:
                omp_without.append(_run([omp, "omp"], False))
                omp_with.append(_run([omp, "omp"], True))
    result = {"benchmark": "hetmem-bench-memkind", "rounds": rounds, "emulated": False, "memkind": [], "openmp": [],
              "numpy": []}
    print(f"hetmem bench memkind: allocate + touch + free, ns per pair, medians of {rounds} alternating rounds "
          f"(spread: the rounds' ratios); DRAM, not emulated")
    print(f"  {'memkind_malloc/free':28s} {'memkind 1.14':>13s} {'hetmem':>10s} {'hetmem / memkind':>28s}  target: at most 1.0")
    worst = []
    for key in ours[0]:
        theirs = [r[key] for r in system]
        mine = [r[key] for r in ours]
        if None in mine:
            continue
        if None in theirs:
            print(f"  {key:28s} {'unavailable':>13s} {statistics.median(mine):10.1f}   (memkind 1.14 has no such "
                  f"memory on this machine)")
            result["memkind"].append({"case": key, "memkind_ns": None, "hetmem_ns": mine})
            continue
        r = verdicts.ratio(mine, theirs, paired=True)
        verdict = verdicts.at_most(r, 1.0)
        worst.append(verdict)
        print(f"  {key:28s} {statistics.median(theirs):13.1f} {statistics.median(mine):10.1f} "
              f"{r.text(2):>28s}  {verdict}")
        result["memkind"].append({"case": key, "memkind_ns": theirs, "hetmem_ns": mine, **r.as_dict(), "verdict": verdict})
    if omp_with:
        print(f"  {'omp_alloc/omp_free (default)':28s} {'without':>13s} {'with':>10s} {'with / without':>28s}  target: at most 1.10")
        for key in omp_with[0]:
            without = [r[key] for r in omp_without]
            with_ = [r[key] for r in omp_with]
            r = verdicts.ratio(with_, without, paired=True)
            verdict = verdicts.at_most(r, 1.10)
            print(f"  {key:28s} {statistics.median(without):13.1f} {statistics.median(with_):10.1f} "
                  f"{r.text(2):>28s}  {verdict}")
            result["openmp"].append({"case": key, "without_ns": without, "with_ns": with_, **r.as_dict(), "verdict": verdict})
    else:
        print("  OpenMP: not measured (clang is not installed; Debian: clang libomp-dev)")
    numpy_rounds = _numpy_rounds(rounds)
    print(f"  {'numpy np.empty + touch + del':28s} {'numpy':>13s} {'hetmem':>10s} {'hetmem / numpy':>28s}")
    for size, (theirs, mine) in numpy_rounds.items():
        r = verdicts.ratio(mine, theirs, paired=True)
        print(f"  {size:>28d} {statistics.median(theirs):13.1f} {statistics.median(mine):10.1f} "
              f"{r.text(2):>28s}")
        result["numpy"].append({"bytes": size, "numpy_ns": theirs, "hetmem_ns": mine, **r.as_dict()})
    result["memkind_verdict"] = verdicts.all_of(worst) if worst else "NOT MET"
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"memkind interface, every size at least as fast as memkind 1.14: {result['memkind_verdict']}")
    print(f"results: {out}")
    return 0
