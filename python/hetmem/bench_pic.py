"""`hetmem bench pic`: the WarpX comparison problem (docs/pic.md): a uniform thermal electron
plasma, 64^3 cells, 2x2x2 particles per cell, shape 1, Esirkepov, Boris, Yee, double precision,
50 steps, no output; core time per particle-step and its split by phase, for 1 and 2 threads."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile

from .lib import HetmemError, find_program

WARPX_NS = (160, 182)  # core time per particle-step of WarpX 24.10 on this kind of machine (reference note)


def run(threads: int, steps: int, tmp: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
    env["OMP_NUM_THREADS"] = str(threads)
    r = subprocess.run([find_program("hetmem-pic"), "preset:warpx-uniform", f"max_step={steps}",
                        f"diag.directory={tmp}", "diag.progress=0"], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise HetmemError(f"hetmem-pic failed: {r.stderr.strip()}")
    m = re.search(r"([\d.]+) ns wall per particle-step, ([\d.]+) ns core time", r.stdout)
    # hetmem-pic prints each phase's wall time per particle-step; core time is wall time x threads,
    # the unit of the headline, so the split adds up to it (less the time outside the phases).
    phases = {name.strip(): float(ns) * threads for name, ns in
              re.findall(r"^  (\S[^\n]*?)\s+[\d.]+ s\s+[\d.]+%\s+([\d.]+) ns per particle-step", r.stdout, re.M)}
    return {"threads": threads, "wall_ns": float(m.group(1)), "core_ns": float(m.group(2)), "phases_core_ns": phases}


def machine_scaling() -> float:
    """Throughput of 2 threads over 1 on a compute loop with no memory traffic: what this machine's
    second core gives at best (on shared virtual machines it can be far below 2)."""
    times = []
    for threads in (1, 2):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        r = subprocess.run([find_program("bench_scaling")], capture_output=True, text=True, env=env)
        times.append(float(r.stdout.split()[0]))
    return times[0] / times[1]


def median_run(runs: list[dict]) -> dict:
    """The run with the median wall time (its phase split stays consistent with its headline)."""
    ordered = sorted(runs, key=lambda r: r["wall_ns"])
    row = dict(ordered[len(ordered) // 2])
    row["runs_wall_ns"] = [r["wall_ns"] for r in runs]
    return row


def main(out: str, quick: bool) -> int:
    steps, reps = (10, 1) if quick else (50, 3)
    with tempfile.TemporaryDirectory(prefix="hetmem-pic-") as tmp:
        # 1 and 2 threads alternate, so both see the same machine (a shared VM varies by several %).
        runs = {1: [], 2: []}
        for _ in range(reps):
            for threads in (1, 2):
                runs[threads].append(run(threads, steps, tmp))
        rows = [median_run(runs[1]), median_run(runs[2])]
    one, two = rows
    scaling = one["wall_ns"] / two["wall_ns"]
    machine = machine_scaling()
    print(f"hetmem-pic, WarpX comparison problem (64^3 cells, 8 particles per cell, {steps} steps; "
          f"median of {reps} alternating runs)")
    for r in rows:
        split = ", ".join(f"{k} {v:.0f}" for k, v in r["phases_core_ns"].items())
        print(f"  {r['threads']} thread(s): {r['core_ns']:.0f} ns core time per particle-step (by phase, core time: "
              f"{split})")
    print(f"  2 threads / 1 thread throughput: {scaling:.2f}x ({'MET' if scaling >= 1.9 else 'NOT MET'}: at least "
          f"1.9x); this machine's own 2-thread scaling on a compute loop: {machine:.2f}x")
    print(f"  target: at most 150 ns core time per particle-step (WarpX 24.10: {WARPX_NS[0]}-{WARPX_NS[1]} ns): "
          f"{'MET' if one['core_ns'] <= 150 else 'NOT MET'}")
    with open(out, "w") as f:
        json.dump({"benchmark": "hetmem-bench-pic", "steps": steps, "results": rows, "scaling": scaling,
                   "machine_scaling": machine,
                   "warpx_core_ns": WARPX_NS}, f, indent=1)
    print(f"results: {out}")
    return 0
