"""`hetmem compare`: one workload under every placement policy, with the fast budget a fraction of
its footprint (docs/placement.md).

The workload is the PIC code (a preset or an input file). First an `all-fast` run without a fast
budget measures the footprint (the high water of every tier) and is the upper bound; then every
policy runs with the fast budget at `fraction` of that footprint, repetitions interleaved so that
all policies see the same machine. The per-iteration time is the median over the iterations after
the first (the first is the one static placement observes) and over the repetitions. Reported:
time per iteration and its ratios to `hetmem-static` and to `all-fast`, the per-phase breakdown,
the fast tier's spaces, where each class lived at its peak, and what the emulated tier charged;
as tables, JSON, PNG plots and one HTML page. Every figure says whether the slow tier was emulated
(which profile) or real.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

from .compare_report import (ALL_FAST_TARGET, WARPX_PM_FULL_VS, WARPX_PM_STATIC_VS, all_fast_target, charged_share,
                             iteration_times, measured_points, phase_seconds, steady, targets,
                             text_tables, whole_run, write)
from .lib import HetmemError, RunLog, plain_library
from .units import size_text
from .workloads import PicWorkload


def parse_counts(text: str, option: str, high: int) -> list[int]:
    """'0,1,2' -> [0, 1, 2]; a clear error for anything that is not a list of integers in 0..high."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise HetmemError(f"{option} '{text}': expected comma-separated integers, e.g. 0,1,2") from None
    bad = [v for v in values if not 0 <= v <= high]
    if not values or bad:
        raise HetmemError(f"{option} '{text}': each value must be from 0 to {high}")
    return values


def parse_size(text: str) -> int:
    """A size as every HM_* size option reads it (the library parses it: 512M, 1.5G, 4096); positive."""
    try:
        value = plain_library().parse_size(text)
    except HetmemError as exc:
        raise HetmemError(f"'{text}' is not a size (examples: 512M, 1.5G, 4096): {exc}") from None
    if value <= 0:
        raise HetmemError(f"'{text}': a size must be positive")
    return value


# The tiers a comparison runs on unless told (--tiers, HM_TIERS): DRAM fast, emulated Optane slow.
SLOW_TIER = "capacity=emul:optane"


def policy_order() -> list[str]:
    """The policies a comparison runs: all-fast first (the footprint and the upper bound), then every
    other policy of the library in its order."""
    names = [name for name, _ in plain_library().policies()]
    return ["all-fast"] + [n for n in names if n != "all-fast"]


_ERROR_LINE = re.compile(r"\b(error|fatal)\b\s*:", re.I)  # "Fatal error:", "hetmem-pic: error: ..."
_ERROR_WORDS = re.compile(r"error|fatal|abort|exception|cannot|can't|failed|refus|invalid|not found|denied", re.I)


def failure_reason(stderr: str, status: int) -> str:
    """What a failed run's stderr says, in a line: the last line that announces an error ('Fatal
    error:', 'error: ...') with the two after it (GROMACS gives the reason on the lines after
    'Fatal error:' and ends with a row of dashes); else the last line that names a failure; else the
    last line. Rows of punctuation, blank lines and hetmem's calibration warning are skipped."""
    lines = [line.strip() for line in stderr.splitlines()]
    lines = [line for line in lines if re.search(r"\w", line) and "warning: emulated-tier charges" not in line]
    how = f"killed by signal {-status}" if status < 0 else f"exit status {status}"
    if not lines:
        return f"{how}, no run summary and nothing but blank or ruled lines on stderr"
    strong = [i for i, line in enumerate(lines) if _ERROR_LINE.search(line)]
    weak = [i for i, line in enumerate(lines) if _ERROR_WORDS.search(line)]
    if strong:
        quoted = lines[strong[-1]:strong[-1] + 3]
    else:
        quoted = [lines[weak[-1] if weak else -1]]
    text = " ".join(quoted).removeprefix("hetmem-pic: ").removeprefix("hetmem: ")
    if len(text) > 400:
        text = text[:397] + "..."
    return text + (f" ({how})" if status else "")


def _run(workload, policy: str, budget: int | None, iterations: int, threads: int | None, tiers: str, tmp: str,
         tag: str, extra_env: dict | None = None) -> dict:
    """One run under `policy`; threads None leaves the program's OMP_NUM_THREADS as it is."""
    summary = os.path.join(tmp, f"{tag}.json")
    env = {k: v for k, v in os.environ.items()
           if k not in ("HM_POLICY", "HM_FAST_BUDGET", "HM_TIERS", "HM_HELPERS", "HM_PREFETCH_DISTANCE")}
    env.update(HM_POLICY=policy, HM_TIERS=tiers)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    env.update(extra_env or {})
    if budget:
        env["HM_FAST_BUDGET"] = str(budget)
    cmd, extra = workload.command(iterations, tmp, tag, summary)
    env.update(extra)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    except OSError as exc:  # the program cannot be started
        return {"policy": policy, "skipped": f"{cmd[0]}: {exc.strerror}"}
    if r.returncode != 0 or not os.path.exists(summary):
        return {"policy": policy, "skipped": failure_reason(r.stderr, r.returncode)}
    with open(summary) as f:
        doc = json.load(f)
    doc["policy"] = policy
    return doc


def _capacity(doc: dict) -> dict:
    return next((t for t in doc["tiers"] if "capacity" in t["roles"]), {})


def _footprint(doc: dict) -> int:
    return sum(t["high_water"] for t in doc["tiers"])


def _phase_spread(docs: list[dict]) -> dict[str, list[float]]:
    """Each phase's fastest and slowest repetition (seconds per iteration)."""
    per_run = [phase_seconds(d) for d in docs]
    names = {p for run in per_run for p in run}
    return {p: [min(run.get(p, 0.0) for run in per_run), max(run.get(p, 0.0) for run in per_run)] for p in names}


def summarise(runs: dict[str, list[dict]], budget: int, footprint: int, reference: dict, workload) -> dict:
    rows = []
    for policy, docs in runs.items():
        ok = [d for d in docs if "skipped" not in d]
        if not ok:
            rows.append({"policy": policy, "skipped": docs[0]["skipped"]})
            continue
        times = [steady(d) for d in ok]
        cpu = [c for c in (steady(d, "step_cpu_seconds") for d in ok) if c == c]  # NaN: not measured
        median = statistics.median(times)
        rep = min(ok, key=lambda d: abs(steady(d) - median))  # the run whose time is the median
        steps = len(iteration_times(rep))
        cap = _capacity(rep)
        fast = next((t for t in rep["tiers"] if "fast" in t["roles"]), {})
        rows.append({
            "policy": policy,
            "seconds_per_iteration": median,
            "runs": times,
            "failed": [d["skipped"] for d in docs if "skipped" in d],  # repetitions that did not finish
            "spread": [min(times), max(times)],
            "charged_share": statistics.median(charged_share(d) for d in ok),
            "cpu_seconds_per_iteration": statistics.median(cpu) if cpu else None,  # None: not measured
            "cpu_runs": cpu,
            "phase_seconds_per_iteration": phase_seconds(rep),
            "phase_spread": _phase_spread(ok),
            "fast_budget": fast.get("budget", 0),
            "fast_high_water": fast.get("high_water", 0),
            "charged_seconds_per_iteration": cap.get("charged_s", 0.0) / steps,
            "emulator_own_seconds": rep.get("emulator_own_seconds", 0.0),
            "classes": rep["classes"],
            "placement": rep["placement"],
        })
    by = {r["policy"]: r for r in rows if "skipped" not in r}
    for r in rows:
        if "skipped" in r:
            continue
        t = r["seconds_per_iteration"]
        if "hetmem-static" in by:
            r["vs_hetmem_static"] = t / by["hetmem-static"]["seconds_per_iteration"]
            base = by["hetmem-static"]["cpu_seconds_per_iteration"]
            if base and r["cpu_seconds_per_iteration"]:
                r["cpu_vs_hetmem_static"] = r["cpu_seconds_per_iteration"] / base
        if "all-fast" in by:
            r["vs_all_fast"] = t / by["all-fast"]["seconds_per_iteration"]
    cap = _capacity(reference)
    emulated = bool(cap.get("emulated"))
    unit = "run" if whole_run(reference) else "iteration"
    return {
        "unit": unit,
        "workload": workload.describe(reference),
        "footprint_bytes": footprint,
        "fast_budget_bytes": budget,
        "capacity_tier": cap.get("name", "?"),
        "slow_tier": (f"emulated ({cap.get('name')}: {cap.get('detail', '')})" if emulated
                      else f"real ({cap.get('name', '?')})"),
        "emulated": emulated,
        "policies": rows,
        "warpx_pm_static_vs": WARPX_PM_STATIC_VS,
        "warpx_pm_full_vs": WARPX_PM_FULL_VS,
    }


SWEEP_PHASE = "gather+push+deposit"  # the PIC code's streamed and prefetched phase


def _phase_seconds(doc: dict, phase: str) -> float:
    return phase_seconds(doc).get(phase, float("nan"))


def _sweep(workload, policy: str, budget: int | None, setting: str, values: list[int], iterations: int, repeat: int,
           threads: int | None, tiers: str, tmp: str, advance) -> tuple[list[dict], list[dict]]:
    """Runs `policy` with the environment variable `setting` at each value, repetitions interleaved
    (half the comparison's, at least one); returns the points (median seconds per iteration of
    SWEEP_PHASE) and the runs' summaries."""
    repeat = max(1, repeat // 2)
    runs: dict[int, list[dict]] = {v: [] for v in values}
    for rep in range(repeat):
        for v in values:
            runs[v].append(_run(workload, policy, budget, iterations, threads, tiers, tmp, f"{setting}-{v}-{rep}",
                                {setting: str(v)}))
            advance(f"{policy} {setting}={v} ({rep + 1}/{repeat})")
    points, docs = [], []
    for v in values:
        ok = [d for d in runs[v] if "skipped" not in d]
        if ok:
            points.append({"value": v, "seconds": statistics.median(_phase_seconds(d, SWEEP_PHASE) for d in ok)})
            docs += ok
        else:  # every run at this value failed: said, not left out
            points.append({"value": v, "seconds": None, "failed": runs[v][0]["skipped"]})
    return points, docs


def helper_sweep(result: dict, points: list[dict]) -> dict:
    """Figure 12: hetmem with HM_HELPERS forced to each count, beside the helper model's own run."""
    row = next((r for r in result["policies"] if r["policy"] == "hetmem" and "skipped" not in r), None)
    sw = {"policy": "hetmem", "phase": SWEEP_PHASE, "setting": "HM_HELPERS", "points": points}
    if row:
        models = row["placement"].get("streaming", {}).get("helper_models", [])
        m = next((m for m in models if m["phase"] == SWEEP_PHASE), None)
        own = row["phase_seconds_per_iteration"].get(SWEEP_PHASE)
        if m and own:
            sw["model"] = m["helpers"] if m["stage"] else None
            sw["model_decision"] = f"{m['helpers']} helper(s)" if m["stage"] else "no staging"
            sw["model_seconds"] = own
            measured = measured_points(points)
            best = min([p["seconds"] for p in measured] + [own])
            sw["best"] = next((p["value"] for p in measured if p["seconds"] == best), None)
            sw["model_vs_best"] = own / best
    return sw


def prefetch_sweep(points: list[dict], docs: list[dict]) -> dict:
    """Figure 11: the prefetch distance forced to each k with every field on the fast tier (DRAM,
    where prefetch has a real effect), beside the model's k for the same run."""
    sw = {"policy": "hetmem-static+prefetch", "phase": SWEEP_PHASE, "setting": "HM_PREFETCH_DISTANCE",
          "points": points, "tier_note": "every object on the fast tier (DRAM): real prefetch, no emulation"}
    ks = [p["k"] for d in docs for p in d["placement"].get("prefetch", {}).get("phases", []) if p["phase"] == SWEEP_PHASE]
    measured = measured_points(points)
    if ks and measured:
        k = statistics.median_low(ks)
        sw["model"] = k
        best = min(measured, key=lambda p: p["seconds"])
        sw["best"] = best["value"]
        at = next((p["seconds"] for p in measured if p["value"] == k), None)
        if at is not None:
            sw["model_seconds"] = at
            sw["model_vs_best"] = at / best["seconds"]
    return sw


def run(workload, policies: list[str], fraction: float, budget: int | None, iterations: int,
        repeat: int, threads: int | None, tiers: str, out_dir: str, console, helpers: list[int] | None = None,
        distances: list[int] | None = None) -> dict:
    """Runs `workload` (PicWorkload or PlanWorkload) under every policy and reports; returns the result.
    `helpers` and `distances` add Figure 12's and Figure 11's sweeps (the PIC code only)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    known = policy_order()
    unknown = [p for p in policies if p not in known]
    if unknown:
        raise HetmemError(f"unknown policies: {', '.join(unknown)} (policies: {', '.join(known)})")
    if iterations < 2:
        raise HetmemError("--iterations must be at least 2 (the first is the one static placement observes)")
    if not 0 < fraction < 1:
        raise HetmemError(f"--fraction {fraction}: must be between 0 and 1")
    runs: dict[str, list[dict]] = {p: [] for p in policies}
    total = 1 + repeat * len([p for p in policies if p != "all-fast"]) + (repeat - 1 if "all-fast" in policies else 0)
    total += max(1, repeat // 2) * (len(helpers or []) + len(distances or []))
    sweeps = {}
    with tempfile.TemporaryDirectory(prefix="hetmem-compare-") as tmp, Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} runs"),
            TimeElapsedColumn(), console=console, transient=not console.is_terminal) as progress:
        task = progress.add_task("all-fast (footprint)", total=total)
        log = RunLog("hetmem compare", total, "runs")

        def advance(description: str) -> None:
            """One run done: the bar on a terminal, a line in a batch job's log (no bar there)."""
            progress.update(task, description=description)
            progress.advance(task)
            if not console.is_terminal:
                log.step(description)

        reference = _run(workload, "all-fast", None, iterations, threads, tiers, tmp, "reference")
        if "skipped" in reference:
            raise HetmemError(f"the all-fast reference run failed: {reference['skipped']}")
        advance("all-fast (footprint)")
        footprint = _footprint(reference)
        fast_budget = budget or int(fraction * footprint)
        if fast_budget >= footprint:
            console.print(f"[yellow]The footprint ({size_text(footprint)}) fits the fast budget ({size_text(fast_budget)}): "
                          "every policy can keep everything fast, so the comparison is not meaningful.[/yellow]")
        if "all-fast" in runs:
            runs["all-fast"].append(reference)
        for rep in range(repeat):
            for policy in policies:
                if policy == "all-fast" and rep == 0:
                    continue
                progress.update(task, description=f"{policy} (repetition {rep + 1}/{repeat})")
                b = None if policy == "all-fast" else fast_budget
                runs[policy].append(_run(workload, policy, b, iterations, threads, tiers, tmp, f"{policy}-{rep}"))
                advance(f"{policy} (repetition {rep + 1}/{repeat})")

        if helpers:
            sweeps["helpers"] = _sweep(workload, "hetmem", fast_budget, "HM_HELPERS", helpers, iterations, repeat,
                                       threads, tiers, tmp, advance)
        if distances:
            points, docs = _sweep(workload, "hetmem-static+prefetch", None, "HM_PREFETCH_DISTANCE", distances,
                                  iterations, repeat, threads, tiers, tmp, advance)
            # The model's own k, measured too when the sweep did not include it. The model's k
            # stays the one the sweep's runs chose: the extra run's own choice (timed again, it
            # may differ) does not move it off the points measured.
            k = prefetch_sweep(points, docs).get("model")
            if k is not None and k not in distances:
                log.total += max(1, repeat // 2)
                progress.update(task, total=log.total)
                more, _ = _sweep(workload, "hetmem-static+prefetch", None, "HM_PREFETCH_DISTANCE", [k],
                                 iterations, repeat, threads, tiers, tmp, advance)
                points = sorted(points + more, key=lambda p: p["value"])
            sweeps["distances"] = (points, docs)
    if footprint == 0:
        raise HetmemError("the workload placed nothing through hetmem (no object of a class): nothing to compare")
    result = summarise(runs, fast_budget, footprint, reference, workload)
    result["iterations"] = iterations
    result["repeat"] = repeat
    if "helpers" in sweeps:
        result["helper_sweep"] = helper_sweep(result, sweeps["helpers"][0])
    if "distances" in sweeps:
        result["prefetch_sweep"] = prefetch_sweep(*sweeps["distances"])
    text = text_tables(result)
    console.print(text, markup=False, highlight=False)
    for path in write(result, out_dir, text):
        console.print(f"wrote {path}", markup=False, highlight=False)
    return result


def bench(out: str, quick: bool, console) -> int:
    """`hetmem bench placement`: the 1.2 GiB rung (preset:L2; --quick: L1) with WarpX's allocation
    order (particles before fields, WarpX-PM §6), fast budget 25% of the footprint, every policy,
    medians of interleaved repetitions; hetmem and hetmem-static against each baseline and hetmem
    against all-fast, MET or NOT MET; Figure 12's helper sweep and Figure 11's prefetch sweep."""
    preset, iterations, repeat = ("preset:L1", 4, 1) if quick else ("preset:L2", 6, 3)
    helpers, distances = ([1, 2], [0, 2]) if quick else ([0, 1, 2, 3], [0, 1, 2, 4, 8])
    workload = PicWorkload([preset, "hetmem.allocation_order=particles-first"])
    tiers = SLOW_TIER
    out_dir = os.path.splitext(out)[0]
    result = run(workload, policy_order(), 0.25, None, iterations, repeat, os.cpu_count() or 1, tiers, out_dir, console,
                 helpers, distances)
    result["benchmark"] = "hetmem-bench-placement"
    result["targets"] = []
    for subject in ("hetmem", "hetmem-static"):
        cpu = {b: x for b, x, _ in targets(result, "cpu_seconds_per_iteration", subject)}
        result["targets"] += [{"policy": subject, "baseline": b, "speedup": x, "met": m, "cpu_speedup": cpu.get(b)}
                              for b, x, m in targets(result, subject=subject)]
    af = all_fast_target(result)
    if af:
        result["targets"].append({"policy": "hetmem", "baseline": "all-fast", "ratio": af[0], "met": af[1],
                                  "target": ALL_FAST_TARGET})
    Path(out).write_text(json.dumps(result, indent=1))
    console.print(f"results: {out}", markup=False, highlight=False)
    return 0
