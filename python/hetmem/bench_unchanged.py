"""`hetmem bench unchanged`: hetmem on programs that cannot change, real ones from Debian.

1. The real-program suite (python/hetmem/real_programs.py): every program in every mode (plain,
   `hetmem profile`, the whole heap on the capacity tier, its own plan), 5 runs each (--quick: 2):
   crashes, hangs, exit statuses and results that differ from the plain run. Target: none.
2. Profiling an MD code (LAMMPS's LJ melt, 256,000 atoms, 20 steps): the whole command plain and
   under `hetmem profile`, alternating, medians; and its trace beside heaptrack's of the same run.
   Targets: at most 10% over the plain run; a trace no larger than heaptrack's.
3. `hetmem compare --plan` on LAMMPS (iterations at each neighbour-list decision, the plan from its
   own profile) and on a Python + numpy stencil (time windows), fast budget 25% of the footprint,
   emulated Optane, interleaved repetitions: hetmem-static against first-touch, interleave,
   memory-mode and slow-only, each margin with its spread, "cannot tell" where the spreads overlap.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from . import real_programs as rp
from .lib import HetmemError

LAMMPS_ATOMS_INPUT = rp.lj_input(40, 20)  # 256,000 atoms, 20 steps
NUMPY_LARGE = rp.NUMPY_SCRIPT.replace("(96, 96, 96)", "(160, 160, 160)")
LAMMPS_ITERATION = "LAMMPS_NS::Neighbor::decide"  # called once per step, across the PLT


def suite(reps: int, tmp: Path, say) -> dict:
    rows = []
    for program in rp.PROGRAMS:
        if program.missing():
            rows.append({"program": program.name, "skipped": program.missing()})
            continue
        work = tmp / f"suite-{program.name}"
        rp.prepare(program, work)
        plain = rp.run_once(program, "plain", work, "plain")
        row = {"program": program.name, "covers": program.covers, "runs": 0, "crashes": 0, "hangs": 0,
               "status_differences": 0, "output_differences": 0, "problems": [],
               "seconds": {m: [] for m in rp.MODES}}
        row["seconds"]["plain"].append(plain.seconds)
        planned = False
        for rep in range(reps):
            for mode in rp.MODES:
                if mode == "plan" and not planned:
                    made = rp.make_plan(program, work, rp.traces_of(work, "profile0")[0])
                    planned = made.returncode == 0
                    if not planned:
                        row["problems"].append(f"hetmem plan failed: {made.stderr.strip()[-200:]}")
                        continue
                outcome = rp.run_once(program, mode, work, f"{mode}{rep}") if (mode, rep) != ("plain", 0) else plain
                if (mode, rep) != ("plain", 0):
                    row["seconds"][mode].append(outcome.seconds)
                row["runs"] += 1
                if outcome.problem.startswith("hung"):
                    row["hangs"] += 1
                elif outcome.problem:
                    row["crashes"] += 1
                if outcome.status != plain.status:
                    row["status_differences"] += 1
                if not program.same(outcome.results, plain.results):
                    row["output_differences"] += 1
                if outcome.problem or outcome.status != plain.status:
                    row["problems"].append(f"{mode} run {rep + 1}: {outcome.problem or f'status {outcome.status}'}")
        say(f"  {program.name}: {row['runs']} runs")
        rows.append(row)
    ran = [r for r in rows if "skipped" not in r]
    bad = sum(r["crashes"] + r["hangs"] + r["status_differences"] + r["output_differences"] for r in ran)
    return {"name": "real-program suite", "reps": reps, "rows": rows, "failures": bad,
            "target": "0 crashes, 0 hangs, 0 output differences", "met": bad == 0 and len(ran) >= 8}


def _lammps(tmp: Path) -> Path:
    work = tmp / "lammps-256k"
    work.mkdir(parents=True, exist_ok=True)
    (work / "in.lj").write_text(LAMMPS_ATOMS_INPUT)
    return work


def _timed(cmd: list[str], cwd: Path, env: dict) -> float:
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise HetmemError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    return time.monotonic() - t0


def profiling_overhead(reps: int, tmp: Path) -> dict:
    work = _lammps(tmp)
    env = rp.environment({})
    lmp = ["lmp", "-in", "in.lj", "-log", "none"]
    plain, profiled = [], []
    for i in range(reps):
        plain.append(_timed(lmp, work, env))
        profiled.append(_timed(rp.hetmem_command() + ["profile", "-o", str(work / f"p{i}.hmtrace"), "--", *lmp],
                               work, env))
    ours = os.path.getsize(work / "p0.hmtrace")
    row = {"name": "profiling LAMMPS, 256,000 atoms, 20 steps (whole command)", "plain_s": statistics.median(plain),
           "profiled_s": statistics.median(profiled), "plain_runs": plain, "profiled_runs": profiled,
           "trace_bytes": ours}
    row["overhead"] = row["profiled_s"] / row["plain_s"] - 1
    row["spread"] = max(plain) / min(plain) - 1
    row["overhead_target"] = "at most 10%"
    row["overhead_met"] = ("MET" if row["overhead"] <= 0.10 else "NOT MET") if \
        abs(row["overhead"] - 0.10) > row["spread"] else "cannot tell"
    heaptrack = shutil.which("heaptrack")
    if heaptrack:
        base = work / "heaptrack"
        row["heaptrack_s"] = _timed([heaptrack, "-o", str(base), *lmp], work, env)
        produced = [p for p in work.iterdir() if p.name.startswith("heaptrack")]
        row["heaptrack_trace_bytes"] = sum(p.stat().st_size for p in produced)
        row["trace_ratio"] = ours / row["heaptrack_trace_bytes"] if row["heaptrack_trace_bytes"] else 0.0
        row["trace_met"] = "MET" if ours <= row["heaptrack_trace_bytes"] else "NOT MET"
    return row


def _plan_for(cmd: list[str], work: Path, options: list[str]) -> Path:
    trace, plan = work / "plan.hmtrace", work / "own.plan"
    env = rp.environment({})
    for step in (["profile", "-o", str(trace), *options, "--", *cmd], ["plan", str(trace), "-o", str(plan)]):
        r = subprocess.run(rp.hetmem_command() + step, cwd=work, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise HetmemError(f"hetmem {step[0]} failed: {r.stderr.strip()[-400:]}")
    return plan


NEEDS_DECLARED_SPACES = ("hetmem-static+prefetch", "hetmem")


def placement(reps: int, tmp: Path, console) -> list[dict]:
    from . import compare
    from .workloads import PlanWorkload
    # Every policy of the library but those whose mechanisms beyond hetmem-static act on spaces a
    # kernel declares (prefetch, staged tiles): an unchanged program declares none, so they would
    # run hetmem-static again.
    policies = [p for p in compare.policy_order() if p not in NEEDS_DECLARED_SPACES]
    out = []
    work = _lammps(tmp)
    numpy_work = tmp / "numpy-large"
    numpy_work.mkdir(parents=True, exist_ok=True)
    (numpy_work / "stencil.py").write_text(NUMPY_LARGE)
    cases = [("LAMMPS LJ melt, 256,000 atoms", work, ["lmp", "-in", str(work / "in.lj"), "-log", "none"],
              ["--iteration-at", LAMMPS_ITERATION]),
             ("Python + numpy stencil, 160^3", numpy_work, ["/usr/bin/python3", str(numpy_work / "stencil.py")], [])]
    for name, cwd, cmd, options in cases:
        if not shutil.which(cmd[0]):
            out.append({"name": name, "skipped": f"{cmd[0]} not installed"})
            continue
        plan = _plan_for(cmd, cwd, options)
        iteration = {"HM_ITERATION_AT": _symbol(cmd[0], options[1])} if options else {}
        workload = PlanWorkload(str(plan), cmd, iteration)
        result = compare.run(workload, policies, 0.25, None, 2, reps, os.cpu_count() or 1, compare.SLOW_TIER,
                             str(cwd / "compare"), console)
        result["name"] = name
        out.append(result)
    return out


def _symbol(program: str, function: str) -> str:
    from .entry_points import check
    found = check(shutil.which(program) or program, function)
    if found.error:
        raise HetmemError(f"--iteration-at {function}: {found.error}")
    return found.symbol


def main(out: str, quick: bool, console) -> int:
    from . import compare_report
    reps = 2 if quick else 5
    say = lambda text: console.print(text, markup=False, highlight=False)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="hetmem-bench-unchanged-") as tmp_name:
        tmp = Path(tmp_name)
        say(f"real-program suite: every program in every mode, {reps} runs each")
        s = suite(reps, tmp, say)
        say("profiling overhead on LAMMPS at 256,000 atoms")
        o = profiling_overhead(2 if quick else 3, tmp) if shutil.which("lmp") else {"skipped": "lmp not installed"}
        p = placement(2 if quick else 3, tmp, console)
    lines = ["hetmem bench unchanged: programs that cannot change (real Debian programs; slow tier emulated Optane "
             "in the placement study)",
             f"{'program':<14} {'runs':>5} {'crashes':>8} {'hangs':>6} {'status':>7} {'output':>7}  "
             "median s plain/profile/rules/plan"]
    for r in s["rows"]:
        if "skipped" in r:
            lines.append(f"{r['program']:<14} skipped: {r['skipped']}")
            continue
        med = "/".join(f"{statistics.median(v):.2f}" if v else "-" for v in r["seconds"].values())
        lines.append(f"{r['program']:<14} {r['runs']:>5} {r['crashes']:>8} {r['hangs']:>6} "
                     f"{r['status_differences']:>7} {r['output_differences']:>7}  {med}")
    lines.append(f"suite: {s['failures']} failure(s) ({'MET' if s['met'] else 'NOT MET'}: {s['target']})")
    if "skipped" not in o:
        lines.append(f"{o['name']}: plain {o['plain_s']:.2f} s, profiled {o['profiled_s']:.2f} s: "
                     f"{100 * o['overhead']:+.1f}% ({o['overhead_met']}: {o['overhead_target']}; plain runs spread "
                     f"{100 * o['spread']:.1f}%)")
        if "heaptrack_s" in o:
            lines.append(f"  trace {o['trace_bytes'] / 1e6:.2f} MB vs heaptrack's {o['heaptrack_trace_bytes'] / 1e6:.2f} "
                         f"MB ({o['trace_ratio']:.2f}x, {o['trace_met']}: no larger); heaptrack's run "
                         f"{o['heaptrack_s']:.2f} s ({o['heaptrack_s'] / o['plain_s']:.1f}x plain)")
    for r in p:
        if "skipped" in r:
            lines.append(f"{r['name']}: skipped ({r['skipped']})")
            continue
        lines.append(f"{r['name']}: footprint {r['footprint_bytes'] / 2**20:.0f} MiB, fast budget "
                     f"{r['fast_budget_bytes'] / 2**20:.0f} MiB, per {r['unit']}")
        lines += ["  " + line for line in compare_report.target_lines(r, "hetmem-static")]
        note = compare_report.instrument_note(r)
        if note:
            lines.append("  " + note)
    say("\n".join(lines))
    with open(out, "w") as f:
        json.dump({"benchmark": "hetmem-bench-unchanged", "quick": quick, "suite": s, "profiling": o,
                   "placement": p}, f, indent=1, default=str)
    say(f"results: {out}")
    return 0 if s["met"] else 1
