"""`hetmem bench profiler`: the profiler's costs, each measured side by side in one run.

1. profiling overhead on a compute-bound program with phases (a 7-point stencil): plain vs
   `hetmem profile`, runs alternating, median of the program's own loop time;
2. an allocation-heavy program (millions of small allocations from 2 threads): `hetmem profile`
   recording every allocation (HM_PROFILE_SAMPLE=0, as heaptrack does) vs heaptrack (Debian
   package) on the same run: time and trace size; and beside it the default profile, which samples
   small allocations;
3. rules-only placement: nanoseconds per malloc/free pair with the preload library and a rules
   file that matches none of them, against the plain C library;
4. every allocation placed: the same pairs with rules that send them all to a (DRAM) tier, so that
   hetmem's allocator serves them, against the C library's.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from . import verdicts
from .lib import HetmemError, find_bench_program, preload_value


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_") and k != "LD_PRELOAD"}
    env.update(extra)
    return env


def _run(cmd: list[str], env: dict) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise HetmemError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    return wall, r.stdout


def overhead(reps: int, tmp: str) -> dict:
    """The profiler gives objects of HM_PROFILE_LARGE or more mappings of their own with transparent
    huge pages (so that clearing their referenced bits costs nothing), as hetmem does for all its
    large allocations. The overhead is measured against the plain program with the same page size
    (glibc's own THP tunable); the plain program with glibc's default 4 KiB pages is shown beside."""
    prog = find_bench_program("bench_stencil")
    args = ["192", "8", "4"]
    preload = preload_value()
    plain, plain_thp, profiled = [], [], []
    for i in range(reps):
        _, out = _run([prog, *args], _clean_env())
        plain.append(float(out.split()[0]))
        _, out = _run([prog, *args], _clean_env(GLIBC_TUNABLES="glibc.malloc.hugetlb=1"))
        plain_thp.append(float(out.split()[0]))
        trace = os.path.join(tmp, f"stencil-{i}.hmtrace")
        _, out = _run([prog, *args], _clean_env(LD_PRELOAD=preload, HM_PROFILE=trace))
        profiled.append(float(out.split()[0]))
    p, t, q = statistics.median(plain), statistics.median(plain_thp), statistics.median(profiled)
    r = verdicts.ratio(profiled, plain_thp, paired=True)
    return {"name": "profiling overhead, stencil with phases", "plain_s": p, "plain_thp_s": t, "profiled_s": q,
            "overhead": q / t - 1, "overhead_spread": [r.low - 1, r.high - 1], "overhead_vs_4k_pages": q / p - 1,
            "target": "at most 3% in every round", "verdict": verdicts.at_most(r, 1.03)}


def versus_heaptrack(reps: int, tmp: str) -> dict:
    prog = find_bench_program("bench_alloc_heavy")
    preload = preload_value()
    heaptrack = shutil.which("heaptrack")
    ours, ours_wall, theirs, theirs_wall, sampled, plain = [], [], [], [], [], []
    ours_size = theirs_size = sampled_size = 0
    for i in range(reps):
        _, out = _run([prog], _clean_env())
        plain.append(float(out.split()[0]))
        trace = os.path.join(tmp, f"heavy-{i}.hmtrace")
        wall, out = _run([prog], _clean_env(LD_PRELOAD=preload, HM_PROFILE=trace, HM_PROFILE_SAMPLE="0"))
        ours.append(float(out.split()[0]))
        ours_wall.append(wall)
        ours_size = os.path.getsize(trace)
        trace = os.path.join(tmp, f"heavy-sampled-{i}.hmtrace")
        _, out = _run([prog], _clean_env(LD_PRELOAD=preload, HM_PROFILE=trace))
        sampled.append(float(out.split()[0]))
        sampled_size = os.path.getsize(trace)
        if heaptrack:
            base = os.path.join(tmp, f"heaptrack-{i}")
            wall, out = _run([heaptrack, "-o", base, prog], _clean_env())
            # The program prints its own loop time; heaptrack adds lines of its own around it.
            theirs.append(float(next(line for line in out.splitlines() if line[:1].isdigit()).split()[0]))
            theirs_wall.append(wall)
            produced = [f for f in os.listdir(tmp) if f.startswith(f"heaptrack-{i}")]
            theirs_size = sum(os.path.getsize(os.path.join(tmp, f)) for f in produced)
    row = {"name": "allocation-heavy, 2 threads x 10^6 operations", "hetmem_s": statistics.median(ours),
           "hetmem_wall_s": statistics.median(ours_wall), "hetmem_trace_bytes": ours_size,
           "sampled_s": statistics.median(sampled), "sampled_trace_bytes": sampled_size,
           "plain_s": statistics.median(plain)}
    cost = verdicts.ratio(sampled, plain, paired=True)
    row.update({"sampled_vs_plain": cost.value, "sampled_vs_plain_spread": [cost.low, cost.high],
                "sampled_target": "the default profile at most 1.10x the plain run in every round",
                "sampled_verdict": verdicts.at_most(cost, 1.10)})
    if heaptrack:
        speedup = verdicts.ratio(theirs, ours, paired=True)
        verdict = verdicts.at_least(speedup, 3.0)
        if ours_size >= theirs_size:
            verdict = "NOT MET"
        row.update({"heaptrack_s": statistics.median(theirs), "heaptrack_wall_s": statistics.median(theirs_wall),
                    "heaptrack_trace_bytes": theirs_size,
                    "speedup": speedup.value, "speedup_spread": [speedup.low, speedup.high],
                    "wall_speedup": statistics.median(theirs_wall) / statistics.median(ours_wall),
                    "trace_ratio": ours_size / theirs_size if theirs_size else 0.0,
                    "sampled_speedup": verdicts.ratio(theirs, sampled, paired=True).value,
                    "target": "at least 3x faster in every round and a smaller trace", "verdict": verdict})
    else:
        row.update({"target": "heaptrack not installed (apt-get install heaptrack)", "verdict": "NOT MET"})
    return row


def _pairs(reps: int, tmp: str, rules_text: str, env: dict) -> tuple[list[float], list[float]]:
    """ns per malloc/free pair of bench_pairs, plain and with the preload library and these rules
    (and `env`), alternating."""
    prog = find_bench_program("bench_pairs")
    rules = os.path.join(tmp, "bench.rules")
    with open(rules, "w") as f:
        f.write(rules_text)
    placed = _clean_env(LD_PRELOAD=preload_value(), HM_RULES=rules, **env)
    plain, ruled = [], []
    for _ in range(reps):
        plain.append(float(_run([prog], _clean_env())[1]))
        ruled.append(float(_run([prog], placed)[1]))
    return plain, ruled


def rules_only(reps: int, tmp: str) -> dict:
    """Rules that match none of the program's allocations: the interposition's own cost."""
    plain, ruled = _pairs(reps, tmp, "size >= 64M -> capacity\nsize >= 2M -> huge\n", {})
    p, q = statistics.median(plain), statistics.median(ruled)
    added = [b - a for a, b in zip(plain, ruled)]  # per round: the runs alternate
    return {"name": "rules-only placement, malloc/free pair 16..4096 B", "plain_ns": p, "rules_ns": q,
            "added_ns": q - p, "added_spread_ns": verdicts.spread(added), "target": "at most 50 ns added in every round",
            "verdict": verdicts.within(added, 50)}


def rules_placing(reps: int, tmp: str) -> dict:
    """Rules that place every allocation on a tier (a DRAM one: the capacity tier emulated with its
    charge off), so that hetmem's allocator serves them all: against the C library's."""
    plain, ruled = _pairs(reps, tmp, "all -> capacity\n", {"HM_TIERS": "capacity=emul:cxl", "HM_EMUL": "0"})
    r = verdicts.ratio(ruled, plain, paired=True)
    return {"name": "every allocation placed (all -> capacity), pair 16..4096 B", "plain_ns": statistics.median(plain),
            "rules_ns": statistics.median(ruled), **r.as_dict(),
            "target": "at most 1.0x the C library's in every round (hetmem's allocator as fast as glibc's)",
            "verdict": verdicts.at_most(r, 1.0)}


def main(out: str, quick: bool) -> int:
    reps = 3 if quick else 7
    with tempfile.TemporaryDirectory(prefix="hetmem-bench-") as tmp:
        rows = [overhead(reps, tmp), versus_heaptrack(3 if quick else 5, tmp), rules_only(reps, tmp),
                rules_placing(reps, tmp)]
    o, h, r, a = rows
    print("hetmem profiler benchmark (medians; programs run alternately; spread: the extremes of the rounds)")
    lo, hi = o["overhead_spread"]
    print(f"  {o['name']:<48} plain {o['plain_thp_s']:.3f} s (THP), profiled {o['profiled_s']:.3f} s: "
          f"overhead {100 * o['overhead']:+.1f}% (spread {100 * lo:+.1f}% to {100 * hi:+.1f}%; {o['verdict']}: "
          f"{o['target']}); "
          f"plain with 4 KiB pages {o['plain_s']:.3f} s ({100 * o['overhead_vs_4k_pages']:+.1f}%)")
    if "heaptrack_s" in h:
        print(f"  {h['name']:<48} hetmem {h['hetmem_s']:.3f} s, heaptrack {h['heaptrack_s']:.3f} s: "
              f"{h['speedup']:.2f}x faster (spread {h['speedup_spread'][0]:.2f}-{h['speedup_spread'][1]:.2f}; whole "
              f"command {h['wall_speedup']:.2f}x); trace {h['hetmem_trace_bytes'] / 1e6:.1f} MB vs "
              f"{h['heaptrack_trace_bytes'] / 1e6:.1f} MB ({h['verdict']}: {h['target']}; every allocation "
              "recorded, as heaptrack does)")
    else:
        print(f"  {h['name']:<48} hetmem {h['hetmem_s']:.3f} s; {h['target']}")
    print(f"  {'  the default profile (small ones sampled)':<48} hetmem {h['sampled_s']:.3f} s against the plain "
          f"program's {h['plain_s']:.3f} s: {h['sampled_vs_plain']:.2f}x (spread {h['sampled_vs_plain_spread'][0]:.2f}-"
          f"{h['sampled_vs_plain_spread'][1]:.2f}; {h['sampled_verdict']}: {h['sampled_target']}); trace "
          f"{h['sampled_trace_bytes'] / 1e6:.2f} MB"
          + (f"; {h['sampled_speedup']:.2f}x faster than heaptrack (not compared: heaptrack records every "
             "allocation)" if "heaptrack_s" in h else ""))
    print(f"  {r['name']:<48} plain {r['plain_ns']:.1f} ns, with rules {r['rules_ns']:.1f} ns: "
          f"+{r['added_ns']:.1f} ns (spread {r['added_spread_ns'][0]:+.1f} to {r['added_spread_ns'][1]:+.1f}; "
          f"{r['verdict']}: {r['target']})")
    print(f"  {a['name']:<48} plain {a['plain_ns']:.1f} ns, placed {a['rules_ns']:.1f} ns: {a['ratio']:.2f}x "
          f"(spread {a['spread'][0]:.2f}-{a['spread'][1]:.2f}; {a['verdict']}: {a['target']})")
    with open(out, "w") as f:
        json.dump({"benchmark": "hetmem-bench-profiler", "quick": quick, "results": rows}, f, indent=1)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    from .lib import results_dir
    sys.exit(main(str(results_dir() / "hetmem-bench-profiler.json"), "--quick" in sys.argv))
