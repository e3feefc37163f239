"""`hetmem compare`: one workload under every placement policy, with the fast budget a fraction of
its footprint (docs/placement.md).

The workload is the PIC code (a preset or an input file). First an `all-fast` run without a fast
budget measures the footprint (the high water of every tier) and is the upper bound; then every
policy runs with the fast budget at `fraction` of that footprint, repetitions interleaved so that
all policies see the same machine. The per-iteration time is the median over the iterations after
the first (the first is the one static placement observes) and over the repetitions. Reported:
time per iteration and its ratios to `hetmem-static` and to `all-fast`, the per-phase breakdown,
the fast tier's spaces, where each class lives at the end, and what the emulated tier charged;
as tables, JSON, PNG plots and one HTML page. Every figure says whether the slow tier was emulated
(which profile) or real.
"""

from __future__ import annotations

import base64
import html
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from .figures import png, write_images
from .lib import HetmemError, find_preload, find_program

POLICIES = ["all-fast", "hetmem", "hetmem-static+prefetch", "hetmem-static", "first-touch", "interleave", "memory-mode",
            "slow-only"]
MiB = 1 << 20
# Seed 000 (Ren et al., ICS'21), Figure 7 and §6: what WarpX-PM gained on Optane. Static placement
# alone beat memory mode by 29% on the large problems; the full runtime (static + prefetch +
# dynamic, part 2) beat memory mode, Optane-only and first-touch by these averages.
SEED_STATIC_VS = {"memory-mode": 1.29}
SEED_FULL_VS = {"memory-mode": 1.388, "slow-only": 1.664, "first-touch": 1.452}


def _size(n: float) -> str:
    return f"{n / MiB:.1f} MiB" if n < (1 << 30) else f"{n / (1 << 30):.2f} GiB"


def _num(v, width: int, fmt: str) -> str:
    return f"{v:>{width}{fmt}}" if v is not None else f"{'-':>{width}}"


def parse_size(text: str) -> int:
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1] if t and t[-1] in units else ""
    try:
        value = float(t[: len(t) - len(unit)])
    except ValueError:
        raise HetmemError(f"'{text}' is not a size (examples: 512M, 1.5G, 4096)") from None
    if value <= 0:
        raise HetmemError(f"'{text}': a size must be positive")
    return int(value * units[unit])


class PicWorkload:
    """The PIC code: a preset or input file with key=value overrides; each step is an iteration."""

    def __init__(self, args: list[str]):
        self.args = args or ["preset:L1"]

    def describe(self, doc: dict) -> str:
        return f"hetmem-pic {self.args[0]}: {doc['cells']} cells, {doc['particles']} particles, " \
               f"{doc['threads']} thread(s)"

    def command(self, iterations: int, tmp: str, tag: str, summary: str) -> tuple[list[str], dict]:
        return ([find_program("hetmem-pic"), *self.args, f"max_step={iterations}", "diag.progress=0",
                 f"diag.directory={tmp}/out-{tag}", f"diag.summary={summary}", "diag.interval=0"], {})


class PlanWorkload:
    """Any program with a plan (`hetmem plan`), run unchanged through the preload library; its
    iterations are those it marks with hm_iteration_next (else the whole run is one)."""

    def __init__(self, plan: str, cmd: list[str]):
        if not cmd:
            raise HetmemError("--plan needs a program: hetmem compare --plan PLAN -- PROGRAM ARGS")
        self.plan = os.path.abspath(plan)
        # Checked in a child process: libhetmem (its libunwind) loaded into this one would break the
        # C++ exceptions of libraries imported after it (matplotlib's, for the plots).
        check = subprocess.run([sys.executable, "-c", "import sys\nfrom hetmem.lib import Library\n"
                                "sys.stdout.write(Library().check_rules(sys.argv[1]) or '')", self.plan],
                               capture_output=True, text=True)
        if check.returncode != 0 or check.stdout:
            raise HetmemError(check.stdout or check.stderr.strip().splitlines()[-1])
        self.cmd = cmd

    def describe(self, doc: dict) -> str:
        return f"{' '.join(self.cmd)} with plan {self.plan}"

    def command(self, iterations: int, tmp: str, tag: str, summary: str) -> tuple[list[str], dict]:
        preload = find_preload()
        ld = preload + (":" + os.environ["LD_PRELOAD"] if os.environ.get("LD_PRELOAD") else "")
        return self.cmd, {"LD_PRELOAD": ld, "HM_RULES": self.plan, "HM_SUMMARY": summary}


def _run(workload, policy: str, budget: int | None, iterations: int, threads: int, tiers: str, tmp: str,
         tag: str) -> dict:
    summary = os.path.join(tmp, f"{tag}.json")
    env = {k: v for k, v in os.environ.items() if k not in ("HM_POLICY", "HM_FAST_BUDGET", "HM_TIERS")}
    env.update(HM_POLICY=policy, HM_TIERS=tiers, OMP_NUM_THREADS=str(threads))
    if budget:
        env["HM_FAST_BUDGET"] = str(budget)
    cmd, extra = workload.command(iterations, tmp, tag, summary)
    env.update(extra)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0 or not os.path.exists(summary):
        lines = [line for line in r.stderr.strip().splitlines() if "warning: emulated-tier charges" not in line]
        why = (lines or [f"exit status {r.returncode}, no run summary"])[-1]
        return {"policy": policy, "skipped": why.removeprefix("hetmem-pic: ").removeprefix("hetmem: ")}
    with open(summary) as f:
        doc = json.load(f)
    doc["policy"] = policy
    return doc


def _iterations(doc: dict, key: str = "step_seconds") -> list[float]:
    """Seconds of each iteration: the PIC code's steps (wall, or CPU with key="step_cpu_seconds"),
    else the iterations the program marked, else the whole run as one (wall time only)."""
    if key in doc:
        return doc[key]
    if key != "step_seconds":
        return []
    return doc.get("iteration_seconds") or [doc.get("seconds", 0.0)]


def _steady(doc: dict, key: str = "step_seconds") -> float:
    """Seconds per iteration after the first (the observed one)."""
    steps = _iterations(doc, key)
    if not steps:
        return float("nan")
    return statistics.median(steps[1:] if len(steps) > 1 else steps)


def _capacity(doc: dict) -> dict:
    return next((t for t in doc["tiers"] if "capacity" in t["roles"]), {})


def _footprint(doc: dict) -> int:
    return sum(t["high_water"] for t in doc["tiers"])


def summarise(runs: dict[str, list[dict]], budget: int, footprint: int, reference: dict, workload) -> dict:
    rows = []
    for policy, docs in runs.items():
        ok = [d for d in docs if "skipped" not in d]
        if not ok:
            rows.append({"policy": policy, "skipped": docs[0]["skipped"]})
            continue
        times = [_steady(d) for d in ok]
        cpu = [c for c in (_steady(d, "step_cpu_seconds") for d in ok) if c == c]  # NaN: not measured
        median = statistics.median(times)
        rep = min(ok, key=lambda d: abs(_steady(d) - median))  # the run whose time is the median
        steps = len(_iterations(rep))
        cap = _capacity(rep)
        fast = next((t for t in rep["tiers"] if "fast" in t["roles"]), {})
        rows.append({
            "policy": policy,
            "seconds_per_iteration": median,
            "runs": times,
            "cpu_seconds_per_iteration": statistics.median(cpu) if cpu else None,  # None: not measured
            "cpu_runs": cpu,
            "phase_seconds_per_iteration": {k: v["seconds"] / steps for k, v in rep["phases"].items()},
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
    return {
        "workload": workload.describe(reference),
        "footprint_bytes": footprint,
        "fast_budget_bytes": budget,
        "capacity_tier": cap.get("name", "?"),
        "slow_tier": (f"emulated ({cap.get('name')}: {cap.get('detail', '')})" if emulated
                      else f"real ({cap.get('name', '?')})"),
        "emulated": emulated,
        "policies": rows,
        "seed_static_vs": SEED_STATIC_VS,
        "seed_full_vs": SEED_FULL_VS,
    }


def targets(result: dict, key: str = "seconds_per_iteration") -> list[tuple[str, float, bool]]:
    """hetmem-static faster than each baseline (issue target): (baseline, speedup, met), by wall
    time per iteration or, with key="cpu_seconds_per_iteration", by CPU time."""
    by = {r["policy"]: r for r in result["policies"] if "skipped" not in r}
    if "hetmem-static" not in by:
        return []
    s = by["hetmem-static"][key]
    if not s:
        return []
    return [(p, by[p][key] / s, by[p][key] > s) for p in ("slow-only", "first-touch", "memory-mode", "interleave")
            if p in by and by[p][key]]


def text_tables(result: dict) -> str:
    lines = [f"hetmem compare: {result['workload']}; footprint {_size(result['footprint_bytes'])}, fast budget "
             f"{_size(result['fast_budget_bytes'])} ({100 * result['fast_budget_bytes'] / result['footprint_bytes']:.0f}%)"
             f"; slow tier {result['slow_tier']}",
             f"{'policy':<15} {'s/iteration':>11} {'/static':>8} {'/all-fast':>9} {'CPU s/it':>9} {'/static':>8} "
             f"{'fast high water':>15} {'charged/it':>10}  note"]
    for r in result["policies"]:
        if "skipped" in r:
            lines.append(f"{r['policy']:<15} {'-':>11} {'-':>8} {'-':>9} {'-':>9} {'-':>8} {'-':>15} {'-':>10}  "
                         f"skipped: {r['skipped']}")
            continue
        note = "no fast budget (upper bound)" if r["policy"] == "all-fast" else ""
        lines.append(f"{r['policy']:<15} {r['seconds_per_iteration']:>11.4f} {r.get('vs_hetmem_static', 0):>7.3f}x "
                     f"{r.get('vs_all_fast', 0):>8.3f}x {_num(r['cpu_seconds_per_iteration'], 9, '.4f')} "
                     f"{_num(r.get('cpu_vs_hetmem_static'), 7, '.3f')}x {_size(r['fast_high_water']):>15} "
                     f"{r['charged_seconds_per_iteration']:>9.4f}s  {note}")
    lines.append("(medians over the iterations after the first and over the repetitions; CPU s/it: the process's CPU "
                 "time, which other guests of a shared machine do not inflate; charged/it: the emulated device time "
                 "charged per iteration, summed over threads)")
    lines.append("per phase (s/iteration):")
    phases = sorted({p for r in result["policies"] if "skipped" not in r for p in r["phase_seconds_per_iteration"]})
    lines.append(f"  {'policy':<15} " + " ".join(f"{p[:22]:>22}" for p in phases))
    for r in result["policies"]:
        if "skipped" not in r:
            lines.append(f"  {r['policy']:<15} " + " ".join(
                f"{r['phase_seconds_per_iteration'].get(p, 0):>22.4f}" for p in phases))
    static = next((r for r in result["policies"] if r["policy"] == "hetmem-static" and "skipped" not in r), None)
    if static:
        lines.append("hetmem-static spaces:")
        for s in static["placement"]["spaces"]:
            lines.append(f"  {s['space']:<10} budget {_size(s['budget']):>10}  in use {_size(s['in_use']):>10}  "
                         f"high water {_size(s['high_water']):>10}  grows {s['grows']}  overflows {s['overflows']}")
        st = static["placement"]["static"]
        lines.append(f"  settled after iteration {st['iteration']}: {st['promoted']} objects in "
                     f"({_size(st['promoted_bytes'])}), {st['demoted']} out ({_size(st['demoted_bytes'])}), "
                     f"{st['unmovable']} unmovable{'; ' + st['problem'] if st['problem'] else ''}")
    lines.append("where each class lives at the end (MiB per tier):")
    for r in result["policies"]:
        if "skipped" in r:
            continue
        parts = []
        for c in r["classes"]:
            if c["live_on"]:
                parts.append(c["name"] + " " + "/".join(f"{t} {b / MiB:.0f}" for t, b in c["live_on"].items()))
        lines.append(f"  {r['policy']:<15} " + "; ".join(parts))
    cpu = {b: (x, m) for b, x, m in targets(result, "cpu_seconds_per_iteration")}
    for baseline, speedup, met in targets(result):
        seed = result["seed_static_vs"].get(baseline)
        seed_text = f"seed 000: static alone {seed:.2f}x" if seed else (
            f"seed 000, full runtime: {result['seed_full_vs'][baseline]:.2f}x" if baseline in result["seed_full_vs"] else
            "seed 000: no figure")
        cpu_text = f", {cpu[baseline][0]:.3f}x CPU" if baseline in cpu else ""
        lines.append(f"hetmem-static vs {baseline}: {speedup:.3f}x wall ({'MET' if met else 'NOT MET'}: faster)"
                     f"{cpu_text}; {seed_text} [{'emulated' if result['emulated'] else 'real'}]")
    return "\n".join(lines)


def plots(result: dict) -> dict[str, bytes]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["policies"] if "skipped" not in r]
    tag = "emulated slow tier: " + result["capacity_tier"] if result["emulated"] else "real slow tier: " + \
        result["capacity_tier"]
    out = {}
    fig, ax = plt.subplots(figsize=(7, 3.4))
    names = [r["policy"] for r in rows]
    ax.bar(names, [r["seconds_per_iteration"] for r in rows], color="#4c72b0")
    ax.set_ylabel("seconds per iteration")
    ax.set_title(f"Time per iteration, fast budget {_size(result['fast_budget_bytes'])} "
                 f"({100 * result['fast_budget_bytes'] / result['footprint_bytes']:.0f}% of footprint)\n{tag}",
                 fontsize=10)
    ax.tick_params(axis="x", rotation=20)
    out["policies.png"] = png(fig)
    # Seed 000 Figure 7: per-phase time of each policy, stacked.
    phases = sorted({p for r in rows for p in r["phase_seconds_per_iteration"]})
    fig, ax = plt.subplots(figsize=(7, 3.6))
    bottom = [0.0] * len(rows)
    for p in phases:
        vals = [r["phase_seconds_per_iteration"].get(p, 0) for r in rows]
        ax.bar(names, vals, bottom=bottom, label=p)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("seconds per iteration")
    ax.set_title(f"Per-phase breakdown (cf. seed 000 Figure 7)\n{tag}", fontsize=10)
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", rotation=20)
    out["phases.png"] = png(fig)
    return out


def html_page(result: dict, images: dict[str, bytes], text: str) -> str:
    def img(name):
        return f'<img alt="{name}" src="data:image/png;base64,{base64.b64encode(images[name]).decode()}">' \
            if name in images else ""
    style = "body{font-family:sans-serif;max-width:1100px;margin:auto}pre{font-size:12px;background:#f6f6f6;padding:8px}"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>hetmem compare</title><style>{style}</style>"
            f"</head><body><h1>hetmem compare</h1><p><b>Slow tier: {html.escape(result['slow_tier'])}</b></p>"
            f"{img('policies.png')}{img('phases.png')}<pre>{html.escape(text)}</pre></body></html>")


def write(result: dict, out_dir: str, text: str) -> list[str]:
    images = plots(result)
    written = write_images(out_dir, images)
    Path(out_dir, "compare.json").write_text(json.dumps(result, indent=1))
    Path(out_dir, "compare.html").write_text(html_page(result, images, text))
    return written + [os.path.join(out_dir, "compare.json"), os.path.join(out_dir, "compare.html")]


def run(workload, policies: list[str], fraction: float, budget: int | None, iterations: int,
        repeat: int, threads: int, tiers: str, out_dir: str, console) -> dict:
    """Runs `workload` (PicWorkload or PlanWorkload) under every policy and reports; returns the result."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise HetmemError(f"unknown policies: {', '.join(unknown)} (policies: {', '.join(POLICIES)})")
    if iterations < 2:
        raise HetmemError("--iterations must be at least 2 (the first is the one static placement observes)")
    if not 0 < fraction < 1:
        raise HetmemError(f"--fraction {fraction}: must be between 0 and 1")
    runs: dict[str, list[dict]] = {p: [] for p in policies}
    total = 1 + repeat * len([p for p in policies if p != "all-fast"]) + (repeat - 1 if "all-fast" in policies else 0)
    with tempfile.TemporaryDirectory(prefix="hetmem-compare-") as tmp, Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} runs"),
            TimeElapsedColumn(), console=console, transient=not console.is_terminal) as progress:
        task = progress.add_task("all-fast (footprint)", total=total)
        reference = _run(workload, "all-fast", None, iterations, threads, tiers, tmp, "reference")
        if "skipped" in reference:
            raise HetmemError(f"the all-fast reference run failed: {reference['skipped']}")
        progress.advance(task)
        footprint = _footprint(reference)
        fast_budget = budget or int(fraction * footprint)
        if fast_budget >= footprint:
            console.print(f"[yellow]The footprint ({_size(footprint)}) fits the fast budget ({_size(fast_budget)}): "
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
                progress.advance(task)
    if footprint == 0:
        raise HetmemError("the workload placed nothing through hetmem (no object of a class): nothing to compare")
    result = summarise(runs, fast_budget, footprint, reference, workload)
    result["iterations"] = iterations
    result["repeat"] = repeat
    text = text_tables(result)
    console.print(text, markup=False, highlight=False)
    for path in write(result, out_dir, text):
        console.print(f"wrote {path}", markup=False, highlight=False)
    return result


def bench(out: str, quick: bool, console) -> int:
    """`hetmem bench placement`: the 1.2 GiB rung (preset:L2; --quick: L1) with WarpX's allocation
    order (particles before fields, seed 000 §6), fast budget 25% of the footprint, every policy,
    medians of interleaved repetitions; hetmem-static against each baseline, MET or NOT MET."""
    preset, iterations, repeat = ("preset:L1", 4, 1) if quick else ("preset:L2", 6, 5)
    workload = PicWorkload([preset, "hetmem.allocation_order=particles-first"])
    tiers = "capacity=emul:optane"
    out_dir = os.path.splitext(out)[0]
    result = run(workload, POLICIES, 0.25, None, iterations, repeat, os.cpu_count() or 1, tiers, out_dir, console)
    result["benchmark"] = "hetmem-bench-placement"
    cpu = {b: x for b, x, _ in targets(result, "cpu_seconds_per_iteration")}
    result["targets"] = [{"baseline": b, "speedup": x, "met": m, "cpu_speedup": cpu.get(b)}
                         for b, x, m in targets(result)]
    Path(out).write_text(json.dumps(result, indent=1))
    console.print(f"results: {out}", markup=False, highlight=False)
    return 0
