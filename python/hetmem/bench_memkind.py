"""`hetmem bench memkind`: the interfaces codes already use, against what they had (docs/memkind.md).

1. memkind's interface: allocate, touch, free of 64 B to 64 MiB through memkind_malloc/free, the
   same program run alternately on Debian's libmemkind 1.14 and on hetmem's (target: at least as
   fast, in every round);
2. OpenMP's default allocator (omp_alloc/omp_free, clang, LLVM's runtime) with hetmem's libmemkind
   loaded against without it (target: at most 5% overhead, in every round);
3. numpy: np.empty + touch, np.ones and np.empty alone, 8 B to 1 GiB, inside
   hetmem.arrays.placed("fast") against numpy's own allocator (target: at most 1.05x, in every round).
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
from .lib import HetmemError, find_memkind_dir, source_file

SOURCE = source_file("bench/programs/memkind_pairs.c")


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


# Processes per measurement, their median taken: one process's figure for a small block can differ
# from the next one's by 2x (hetmem's DEFAULT 4 KiB pair 8-18 ns here, address randomisation off
# or on), which a single process a round would pass into the round's ratio whole.
PROCESSES = 3


def _run(cmd: list[str], hetmem: bool) -> dict[str, float | None]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_") and k != "LD_LIBRARY_PATH"}
    if hetmem:
        env["LD_LIBRARY_PATH"] = find_memkind_dir()
    runs: dict[str, list[float | None]] = {}
    for _ in range(PROCESSES):
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
        for line in out.splitlines():
            kind, size, ns = line.split()
            runs.setdefault(f"{kind} {size}", []).append(None if ns == "unavailable" else float(ns))
    return {key: None if None in ns else statistics.median(ns) for key, ns in runs.items()}


NUMPY_SIZES = [8, 4096, 1 << 20, 64 << 20, 1 << 30]
NUMPY_TARGET = 1.05  # hetmem's handler at most this much slower than numpy's own, in every round
OPENMP_TARGET = 1.05  # omp_alloc/omp_free with hetmem's libmemkind loaded against without it


def _numpy_op(op: str, size: int):
    """One array of `size` bytes made and dropped: np.empty + touch of its two ends, np.ones, or
    np.empty alone (the loop of a program that makes scratch arrays)."""
    import numpy as np
    if op == "np.empty + touch":
        def once():
            a = np.empty(size, dtype=np.uint8)
            a[0] = 1
            a[-1] = 1
    elif op == "np.ones":
        def once():
            np.ones(size, dtype=np.uint8)
    else:
        def once():
            np.empty(size, dtype=np.uint8)
    return once


def numpy_handler(rounds: int) -> list[dict]:
    """numpy's own allocator against hetmem's handler (arrays.placed("fast")), alternating, ns per
    array: each case's ratio paired by round, with its verdict against NUMPY_TARGET."""
    from . import arrays
    rows = []
    for op in ("np.empty + touch", "np.ones", "np.empty in a loop"):
        for size in NUMPY_SIZES:
            once = _numpy_op(op, size)
            # About 0.1 s a measurement: many small arrays, few large ones (np.ones writes them).
            budget = (64 << 20) if op == "np.ones" else (256 << 20)
            n = max(2, min(100000, budget // size))
            theirs, mine = [], []

            def timed() -> float:
                t0 = time.perf_counter()
                for _ in range(n):
                    once()
                return (time.perf_counter() - t0) * 1e9 / n

            timed()  # the first of each case pays page faults both will not see again
            for _ in range(rounds):
                theirs.append(timed())
                with arrays.placed("fast"):
                    mine.append(timed())
            r = verdicts.ratio(mine, theirs, paired=True)
            rows.append({"case": op, "bytes": size, "numpy_ns": theirs, "hetmem_ns": mine, **r.as_dict(),
                         "target": NUMPY_TARGET, "verdict": verdicts.at_most(r, NUMPY_TARGET)})
    return rows


def print_numpy(rows: list[dict], say=print) -> None:
    say(f"  {'numpy array, bytes':28s} {'numpy ns':>13s} {'hetmem ns':>10s} {'hetmem / numpy':>28s}  "
        f"target: at most {NUMPY_TARGET}")
    for row in rows:
        r = verdicts.Ratio(row["ratio"], *row["spread"])
        say(f"  {row['case'] + ' ' + str(row['bytes']):28s} {statistics.median(row['numpy_ns']):13.1f} "
            f"{statistics.median(row['hetmem_ns']):10.1f} {r.text(2):>28s}  {row['verdict']}")


def measure(rounds: int) -> dict:
    """The three comparisons: memkind's interface, OpenMP's default allocator, numpy's handler."""
    with tempfile.TemporaryDirectory(prefix="hetmem-bench-memkind-") as tmp:
        plain, omp = _build(tmp)
        system, ours, omp_without, omp_with = [], [], [], []
        for _ in range(rounds):
            system.append(_run([plain], False))
            ours.append(_run([plain], True))
            if omp:
                omp_without.append(_run([omp, "omp"], False))
                omp_with.append(_run([omp, "omp"], True))
    result = {"rounds": rounds, "emulated": False, "memkind": [], "openmp": [], "numpy": []}
    for key in ours[0]:
        theirs = [r[key] for r in system]
        mine = [r[key] for r in ours]
        if None in mine:
            continue
        if None in theirs:
            result["memkind"].append({"case": key, "memkind_ns": None, "hetmem_ns": mine})
            continue
        r = verdicts.ratio(mine, theirs, paired=True)
        result["memkind"].append({"case": key, "memkind_ns": theirs, "hetmem_ns": mine, **r.as_dict(),
                                  "target": 1.0, "verdict": verdicts.at_most(r, 1.0)})
    for key in (omp_with[0] if omp_with else []):
        without = [r[key] for r in omp_without]
        with_ = [r[key] for r in omp_with]
        r = verdicts.ratio(with_, without, paired=True)
        result["openmp"].append({"case": key, "without_ns": without, "with_ns": with_, **r.as_dict(),
                                 "target": OPENMP_TARGET, "verdict": verdicts.at_most(r, OPENMP_TARGET)})
    result["openmp_measured"] = bool(omp)
    result["numpy"] = numpy_handler(rounds)
    for part in ("memkind", "openmp", "numpy"):
        judged = [row["verdict"] for row in result[part] if "verdict" in row]
        result[f"{part}_verdict"] = verdicts.all_of(judged) if judged else "NOT MET"
    return result


def report(result: dict, say=print) -> None:
    say(f"  {'memkind_malloc/free':28s} {'memkind 1.14':>13s} {'hetmem':>10s} {'hetmem / memkind':>28s}  "
        "target: at most 1.0")
    for row in result["memkind"]:
        mine = statistics.median(row["hetmem_ns"])
        if row["memkind_ns"] is None:
            say(f"  {row['case']:28s} {'unavailable':>13s} {mine:10.1f}   (memkind 1.14 has no such memory on "
                "this machine)")
            continue
        r = verdicts.Ratio(row["ratio"], *row["spread"])
        say(f"  {row['case']:28s} {statistics.median(row['memkind_ns']):13.1f} {mine:10.1f} {r.text(2):>28s}  "
            f"{row['verdict']}")
    if result["openmp_measured"]:
        say(f"  {'omp_alloc/omp_free (default)':28s} {'without':>13s} {'with':>10s} {'with / without':>28s}  "
            f"target: at most {OPENMP_TARGET}")
        for row in result["openmp"]:
            r = verdicts.Ratio(row["ratio"], *row["spread"])
            say(f"  {row['case']:28s} {statistics.median(row['without_ns']):13.1f} "
                f"{statistics.median(row['with_ns']):10.1f} {r.text(2):>28s}  {row['verdict']}")
    else:
        say("  OpenMP: not measured (clang is not installed; Debian: clang libomp-dev)")
    print_numpy(result["numpy"], say)
    say(f"memkind interface at least as fast as memkind 1.14: {result['memkind_verdict']}; OpenMP's allocator with "
        f"hetmem's libmemkind within {OPENMP_TARGET}x: {result['openmp_verdict']}; numpy's handler within "
        f"{NUMPY_TARGET}x numpy's own: {result['numpy_verdict']}")


def main(out: str, quick: bool) -> int:
    rounds = 3 if quick else 5
    print(f"hetmem bench memkind: ns per allocation (allocate, touch, free), medians of {rounds} alternating "
          "rounds (spread: the rounds' ratios); DRAM, not emulated")
    result = {"benchmark": "hetmem-bench-memkind", **measure(rounds)}
    report(result)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"results: {out}")
    return 0
