"""`hetmem bench mg`: hetmem-mg against hypre's PFMG on the same problem, with 4 KiB pages,
transparent huge pages and a preallocated hugetlb pool, and Christgau's (2021) memory-mode study on the
emulated Optane tier (docs/multigrid.md).

The peer and page figures are on this machine's DRAM (first-touch: nothing emulated); the study's
capacity tier is emulated. Times are medians of interleaved repetitions."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time

from . import verdicts
from .lib import HetmemError, find_program


def _env(threads: int, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_") or k == "HM_CALIBRATION"}
    env["OMP_NUM_THREADS"] = str(threads)
    env.update(extra or {})
    return env


def ours(tmp: str, n: int, threads: int, extra: dict | None = None) -> dict:
    out = os.path.join(tmp, "mg.json")
    cmd = [find_program("hetmem-mg"), f"mg.n={n}", f"mg.json={out}"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(threads, extra))
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise HetmemError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    with open(out) as f:
        res = json.load(f)
    res["process_s"] = wall
    res["stdout"] = r.stdout
    return res


def hypre(n: int, relax: int, pre: int, post: int) -> dict | None:
    try:
        program = find_program("hetmem-bench-mg-hypre")
    except HetmemError:
        return None
    r = subprocess.run([program, str(n), "1e-8", "0.5", str(relax), str(pre), str(post)], capture_output=True,
                       text=True, env=_env(1))
    if r.returncode != 0:
        raise HetmemError(f"hetmem-bench-mg-hypre failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def hugetlb_free() -> int:
    try:
        with open("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages") as f:
            return int(f.read())
    except OSError:
        return 0


def main(out: str, quick: bool) -> int:
    n = 64 if quick else 128
    reps = 3 if quick else 5
    with tempfile.TemporaryDirectory(prefix="hetmem-mg-") as tmp:
        # 1. The peer, one thread each (hypre's Debian build has no OpenMP).
        runs = {"hetmem-mg": [], "pfmg-rbgs": [], "pfmg-default": []}
        for _ in range(reps):
            runs["hetmem-mg"].append(ours(tmp, n, 1))
            for name, settings in (("pfmg-rbgs", (2, 2, 2)), ("pfmg-default", (1, 1, 1))):
                h = hypre(n, *settings)
                if h:
                    runs[name].append(h)
        mine = runs["hetmem-mg"]
        solve = statistics.median(r["seconds_per_solve"] for r in mine)
        cycle = statistics.median(r["seconds_per_cycle"] for r in mine)
        print(f"hetmem bench mg: {n}^3 cells, Dirichlet, kappa(z) = 1 + 0.5 sin(2 pi z), residual reduced 1e-8 from "
              f"zero, one thread, DRAM (not emulated), medians of {reps}")
        print(f"  {'solver':34s} {'cycles':>6s} {'solve s':>9s} {'s/cycle':>9s} {'setup s':>9s} {'max error':>11s}")
        print(f"  {'hetmem-mg V(2,2) RB-SOR, omega 1.2':34s} {mine[0]['cycles']:6d} {solve:9.4f} {cycle:9.5f} "
              f"{0.0:9.4f} {mine[0]['error_max']:11.4e}")
        peers = {}
        for name, label in (("pfmg-rbgs", "hypre PFMG V(2,2) red-black GS"), ("pfmg-default", "hypre PFMG defaults")):
            if not runs[name]:
                continue
            s = statistics.median(r["solve_s"] for r in runs[name])
            setup = statistics.median(r["setup_s"] for r in runs[name])
            cycles = runs[name][0]["cycles"]
            peers[name] = {"cycles": cycles, "solve_s": s, "setup_s": setup, "seconds_per_cycle": s / cycles,
                           "error_max": runs[name][0]["error_max"]}
            print(f"  {label:34s} {cycles:6d} {s:9.4f} {s / cycles:9.5f} {setup:9.4f} {runs[name][0]['error_max']:11.4e}")
        result = {"benchmark": "hetmem bench mg", "n": n, "threads": 1, "emulated": False,
                  "hetmem_mg": {"cycles": mine[0]["cycles"], "solve_s": solve, "seconds_per_cycle": cycle,
                                "factor": mine[0]["factor"], "error_max": mine[0]["error_max"]},
                  "hypre": peers}
        if peers:
            best_name = min(peers, key=lambda k: peers[k]["solve_s"] + peers[k]["setup_s"])
            best = peers[best_name]
            theirs = [r["solve_s"] + r["setup_s"] for r in runs[best_name]]
            r = verdicts.ratio(theirs, [m["seconds_per_solve"] for m in mine], paired=len(theirs) == len(mine))
            ratio = r.value
            # Equal to the algebraic error left at a 1e-8 reduction: the same discretised problem.
            same = abs(best["error_max"] - mine[0]["error_max"]) <= 1e-3 * mine[0]["error_max"]
            verdict = verdicts.at_least(r, 1.0)
            print(f"  hypre's faster setting (setup + solve) / hetmem-mg: {r.text(2)} (aim: above 1 in every round, "
                  f"hetmem-mg faster): {verdict}; the same discretisation error: {'yes' if same else 'NO'}")
            result["ratio_hypre_over_ours"] = ratio
            result["ratio_spread"] = [r.low, r.high]
            result["verdict"] = verdict
            result["same_problem"] = same
        else:
            print("  hypre: not built (libhypre-dev missing): no peer figures")

        # 2. Pages: 4 KiB, transparent huge pages, the hugetlb pool.
        free = hugetlb_free()
        mib = (mine[0]["multigrid_bytes"] >> 20) + 16
        variants = [("4 KiB pages", {"HM_THP": "0"}), ("transparent huge pages", {"HM_THP": "1"})]
        if free * 2 >= mib:
            variants.append((f"hugetlb pool ({mib} MiB)", {"HM_HUGETLB_POOL": f"{mib}M"}))
        pages = {name: [] for name, _ in variants}
        process = {name: [] for name, _ in variants}
        for _ in range(reps):
            for name, extra in variants:
                r = ours(tmp, n, 2, extra)
                pages[name].append(r["seconds_per_solve"])
                process[name].append(r["process_s"])
        print(f"\npages ({n}^3, two threads; the hierarchy's arrays are 2 MiB or more):")
        result["pages"] = {}
        for name, _ in variants:
            s = statistics.median(pages[name])
            p = statistics.median(process[name])
            gain = verdicts.ratio(pages[variants[0][0]], pages[name], paired=True)
            result["pages"][name] = {"solve_s": s, "process_s": p, "speedup_spread": [gain.low, gain.high]}
            print(f"  {name:28s} {s:8.4f} s per solve  {gain.text(2):>24s}   process {p:6.3f} s (start-up, "
                  "reservation and run)")
        if free * 2 < mib:
            print(f"  hugetlb pool: not measured: the kernel has {free} free 2 MiB pages, {mib // 2} are needed "
                  f"(as root: echo {mib // 2} > /proc/sys/vm/nr_hugepages)")
            result["pages"]["hugetlb pool"] = None
        else:
            # The reservation alone: a run too small to use the pool, with and without reserving it.
            plain, reserved = [], []
            for _ in range(reps):
                plain.append(ours(tmp, 4, 1)["process_s"])
                reserved.append(ours(tmp, 4, 1, {"HM_HUGETLB_POOL": f"{mib}M"})["process_s"])
            cost = statistics.median(reserved) - statistics.median(plain)
            result["pages"]["pool_reservation_s"] = cost
            said = f"{cost * 1e3:.1f} ms" if cost >= 1e-3 else f"under 1 ms ({cost * 1e3:+.1f} ms: within the noise)"
            print(f"  reserving the {mib} MiB pool at start-up: {said} (a 4^3 run with and without it, medians)")
        # 3. Christgau's (2021) memory-mode study, per problem class, on the emulated Optane tier.
        result["memory_mode_study"] = study(tmp, ["S"] if quick else ["S", "W", "B"], 3)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\nresults: {out}")
    return 0


PRESET_N = {"S": 64, "W": 128, "B": 256, "C": 512}


def study(tmp: str, presets: list[str], reps: int) -> dict:
    """all-fast (everything in DRAM), memory-mode (DRAM as a cache of the capacity tier, sized at half
    the footprint) and hetmem-static (the hierarchy fast, the domain on the capacity tier; a fast
    budget of the hierarchy plus an eighth): seconds per time step, and per pressure solve (the MGS)."""
    configs = [("all-fast", {"HM_POLICY": "all-fast"}, ["mg.domain_role=fast"]),
               ("memory-mode", {"HM_POLICY": "memory-mode"}, []),
               ("hetmem-static", {"HM_POLICY": "hetmem-static"}, [])]
    print("\nmemory-mode study (Christgau (2021); capacity tier emulated as Optane, two threads, 4 time steps: the first,"
          " observed, left out):")
    print(f"  {'class':6s} {'footprint':>10s}  {'memory-mode / all-fast':>24s}  {'hetmem-static / all-fast':>26s}  "
          f"{'static gains':>13s}")
    print(f"  {'':6s} {'':10s}  {'total':>11s} {'MGS':>12s}  {'total':>12s} {'MGS':>13s}  {'total':>13s}")
    rows = {}
    for preset in presets:
        n = PRESET_N[preset]
        times = {name: {"total": [], "mgs": []} for name, _, _ in configs}
        footprint = None
        for _ in range(reps):
            for name, env, args in configs:
                extra = {"HM_TIERS": "capacity=emul:optane", **env}
                probe = None
                if name != "all-fast":
                    probe = probe or ours_args(tmp, n, 2, {"HM_POLICY": "first-touch"}, ["mg.steps=1"])
                    mg_bytes, dom = probe["multigrid_bytes"], probe["domain_bytes"]
                    footprint = mg_bytes + dom
                    budget = footprint // 2 if name == "memory-mode" else mg_bytes + mg_bytes // 8
                    extra["HM_FAST_BUDGET"] = str(budget)
                r = ours_args(tmp, n, 2, extra, ["mg.steps=4", *args])
                times[name]["total"].append(r["steady_solve_s"] + r["steady_domain_s"])
                times[name]["mgs"].append(r["steady_solve_s"])
        med = {name: {k: statistics.median(v) for k, v in t.items()} for name, t in times.items()}

        def versus(name: str, other: str, k: str) -> verdicts.Ratio:
            return verdicts.ratio(times[name][k], times[other][k], paired=True)
        mm = {k: versus("memory-mode", "all-fast", k) for k in ("total", "mgs")}
        st = {k: versus("hetmem-static", "all-fast", k) for k in ("total", "mgs")}
        gain = versus("memory-mode", "hetmem-static", "total")
        rows[preset] = {"n": n, "footprint_bytes": footprint, "seconds": med,
                        "memory_mode_slowdown": {k: r.value for k, r in mm.items()},
                        "hetmem_static_slowdown": {k: r.value for k, r in st.items()},
                        "hetmem_static_gain_over_memory_mode": gain.value,
                        "spreads": {"memory_mode": {k: [r.low, r.high] for k, r in mm.items()},
                                    "hetmem_static": {k: [r.low, r.high] for k, r in st.items()},
                                    "gain": [gain.low, gain.high]},
                        "gain_verdict": verdicts.at_least(gain, 1.0), "emulated": True}
        print(f"  {preset:6s} {footprint / 2**20:8.0f} MiB  {mm['total'].value:10.2f}x {mm['mgs'].value:11.2f}x  "
              f"{st['total'].value:11.2f}x {st['mgs'].value:12.2f}x  {gain.value:12.2f}x   [emulated]")
        print(f"  {'':6s} {'spread':>10s}  {mm['total'].low:.2f}-{mm['total'].high:.2f} {mm['mgs'].low:.2f}-"
              f"{mm['mgs'].high:.2f}  {st['total'].low:.2f}-{st['total'].high:.2f} {st['mgs'].low:.2f}-"
              f"{st['mgs'].high:.2f}  {gain.low:.2f}-{gain.high:.2f} (static faster in every round: "
              f"{rows[preset]['gain_verdict']})")
    print("  (spread: the extremes of the rounds' ratios; Christgau (2021) on real Optane: memory mode 1.00-1.19x in "
          "total, 1.07-1.13x for the MGS)")
    return rows


def ours_args(tmp: str, n: int, threads: int, extra: dict, args: list[str]) -> dict:
    out = os.path.join(tmp, "study.json")
    cmd = [find_program("hetmem-mg"), f"mg.n={n}", f"mg.json={out}", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(threads, extra))
    if r.returncode != 0:
        raise HetmemError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    with open(out) as f:
        return json.load(f)
