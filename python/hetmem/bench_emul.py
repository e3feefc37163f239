"""`hetmem bench emul`: the emulated slow tier as an instrument, measured in one run.

1. overhead: the same program with everything on DRAM and with everything on `emul:dram`, an
   emulated tier whose device is DRAM itself (the emulator's bookkeeping runs, nothing is
   charged), runs alternating, medians. The PIC code on preset:L2 declares its accesses; the
   stencil program runs unchanged under the preload library (`all -> fast` vs `all -> capacity`),
   so the referenced-page sampler does its work. Target: within 1.02x.
2. fidelity: `hetmem-validate-emul` on emul:optane and emul:cxl, every microkernel within 10% of
   the model's prediction.
3. for scale: the PIC code with everything on emul:optane against DRAM (the slowdown the model
   charges, emulated).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

from . import verdicts
from .lib import HetmemError, RunLog, find_bench_program, find_program, preload_value


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_") and k != "LD_PRELOAD"}
    if os.environ.get("HM_CALIBRATION"):
        env["HM_CALIBRATION"] = os.environ["HM_CALIBRATION"]
    env.update(extra)
    return env


def _run(cmd: list[str], env: dict) -> str:
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise HetmemError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    return r.stdout


def _pic(preset: str, steps: int, tiers: str | None, tmp: str, emul: bool = True) -> tuple[float, str, float]:
    """ns wall per particle-step of one run (everything on `capacity` when tiers is given), the
    emulator's report, and its own share of the loop time."""
    env = _env(OMP_NUM_THREADS="2")
    cmd = [find_program("hetmem-pic"), f"preset:{preset}", f"max_step={steps}", f"diag.directory={tmp}",
           "diag.progress=0"]
    if tiers:
        env["HM_TIERS"] = tiers
        cmd += ["hetmem.fields=capacity", "hetmem.particles=capacity"]
    if not emul:
        env["HM_EMUL"] = "0"  # the same tier and binding, no emulator at all
    out = _run(cmd, env)
    m = re.search(r"(\d+) particles, (\d+) steps, \d+ thread\(s\): ([\d.]+) ns wall per particle-step", out)
    if not m:
        raise HetmemError(f"hetmem-pic printed no timing:\n{out[-400:]}")
    loop_s = int(m.group(1)) * int(m.group(2)) * float(m.group(3)) * 1e-9
    own = re.search(r"emulator's own time: ([\d.]+) ms .*?about ([\d.]+) ms more.*", out)
    # The emulator's own share of the loop: its sampler's time plus what the sample cost the program.
    share = (float(own.group(1)) + float(own.group(2))) * 1e-3 / loop_s if own else 0.0
    return float(m.group(3)), (own.group(0) if own else ""), share


def _ratio_row(name: str, base: list[float], emul: list[float], unit: str, target: float, note: str) -> dict:
    b, e = statistics.median(base), statistics.median(emul)
    r = verdicts.ratio(emul, base, paired=True)  # the runs alternate: one of each per round
    return {"name": name, "dram": b, "emulated": e, "unit": unit, "ratio": e / b, "spread": [r.low, r.high],
            "runs": len(base), "dram_runs": base, "emulated_runs": emul,
            "target": f"at most {target:.2f}x in every round", "verdict": verdicts.at_most(r, target), "note": note}


def pic_overhead(preset: str, steps: int, reps: int, tmp: str, log: RunLog) -> dict:
    base, emul, off, shares, note = [], [], [], [], ""
    for rnd in range(reps):
        base.append(_pic(preset, steps, None, tmp)[0])
        log.step(f"PIC on DRAM, round {rnd + 1}/{reps}")
        t, note, share = _pic(preset, steps, "capacity=emul:dram", tmp)
        emul.append(t)
        shares.append(share)
        log.step(f"PIC on emul:dram, round {rnd + 1}/{reps}")
        off.append(_pic(preset, steps, "capacity=emul:dram", tmp, emul=False)[0])
        log.step(f"PIC on emul:dram with the emulator off, round {rnd + 1}/{reps}")
    row = _ratio_row(f"PIC preset:{preset}, {steps} steps, 2 threads: everything on emul:dram vs DRAM",
                     base, emul, "ns per particle-step", 1.02, note)
    row["own_share"] = statistics.median(shares)
    row["emul_off_runs"] = off
    row["paired_ratio"] = statistics.median([e / b for b, e in zip(base, emul)])
    row["on_over_off"] = statistics.median([e / o for o, e in zip(off, emul)])
    row["note"] += (f"\n    the emulator's own share of the loop, as it measures it: {100 * row['own_share']:.2f}%; "
                    f"median of paired ratios {row['paired_ratio']:.3f}; the same tier with the emulator off "
                    f"(HM_EMUL=0): {statistics.median(off):.1f}, emulator on / off {row['on_over_off']:.3f} "
                    f"(paired); DRAM runs spread {min(base):.1f}-{max(base):.1f}")
    return row


def stencil_overhead(reps: int, tmp: str, log: RunLog) -> dict:
    prog = find_bench_program("bench_stencil")
    args = ["192", "8", "4"]
    rules = {}
    for target in ("fast", "capacity"):
        rules[target] = os.path.join(tmp, f"{target}.rules")
        with open(rules[target], "w") as f:
            f.write(f"all -> {target}\n")
    preload = preload_value()
    base, emul = [], []
    for rnd in range(reps):
        env = _env(LD_PRELOAD=preload, HM_RULES=rules["fast"])
        base.append(float(_run([prog, *args], env).split()[0]))
        env = _env(LD_PRELOAD=preload, HM_RULES=rules["capacity"], HM_TIERS="capacity=emul:dram")
        emul.append(float(_run([prog, *args], env).split()[0]))
        log.step(f"stencil on DRAM and on emul:dram, round {rnd + 1}/{reps}")
    return _ratio_row("stencil 192^3 (unchanged program, preload library): all -> emul:dram vs all -> DRAM",
                      base, emul, "s", 1.02, "sampled: the program declares nothing")


def fidelity(quick: bool, tmp: str) -> dict:
    out_json = os.path.join(tmp, "validate.json")
    cmd = [find_program("hetmem-validate-emul"), "--json", out_json]
    if quick:
        cmd += ["--reps", "3", "--size-mib", "64"]
    r = subprocess.run(cmd, env=_env(HM_TIERS="capacity=emul:optane,emul:cxl"), capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise HetmemError(f"hetmem-validate-emul failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    with open(out_json) as f:
        result = json.load(f)
    rows = result["rows"]
    worst = max(rows, key=lambda row: abs(row["error"]))
    return {"name": "fidelity: validation microkernels on emul:optane and emul:cxl", "rows": rows,
            "within": sum(row["verdict"] == "MET" for row in rows), "count": len(rows),
            "worst": f"{worst['tier']} {worst['kernel']} ({worst['access']}): {100 * worst['error']:+.1f}%",
            "target": "every kernel within 10% of its prediction in every round",
            "verdict": verdicts.all_of([row["verdict"] for row in rows])}


def optane_scale(preset: str, steps: int, reps: int, tmp: str, log: RunLog) -> dict:
    base, emul = [], []
    for rnd in range(reps):
        base.append(_pic(preset, steps, None, tmp)[0])
        emul.append(_pic(preset, steps, "capacity=emul:optane", tmp)[0])
        log.step(f"PIC on DRAM and on emul:optane, round {rnd + 1}/{reps}")
    b, e = statistics.median(base), statistics.median(emul)
    r = verdicts.ratio(emul, base, paired=True)
    return {"name": f"PIC preset:{preset}, everything on emul:optane vs DRAM (emulated)", "dram": b, "emulated": e,
            "unit": "ns per particle-step", "ratio": e / b, "spread": [r.low, r.high]}


def main(out: str, quick: bool) -> int:
    # Runs on a shared machine vary by several percent: the full benchmark takes 9 alternating runs of
    # each (about 10 minutes) so that the median ratio settles.
    preset, steps, reps = ("L1", 20, 3) if quick else ("L2", 8, 9)
    stencil_reps = 3 if quick else 7
    log = RunLog("hetmem bench emul", 3 * reps + stencil_reps + 1 + 3)
    with tempfile.TemporaryDirectory(prefix="hetmem-bench-emul-") as tmp:
        rows = [pic_overhead(preset, steps, reps, tmp, log), stencil_overhead(stencil_reps, tmp, log)]
        fid = fidelity(quick, tmp)
        log.step("the validation microkernels")
        scale = optane_scale("L1", 20, 3, tmp, log)
    print("hetmem emulated-tier benchmark (medians of alternating runs; emul:* figures are emulated)")
    print(f"  {'overhead':<92} {'DRAM':>10} {'emulated':>10} {'ratio':>7}")
    for r in rows:
        print(f"  {r['name']:<92} {r['dram']:>10.3f} {r['emulated']:>10.3f} {r['ratio']:>6.3f}x "
              f"(spread {r['spread'][0]:.3f}-{r['spread'][1]:.3f}) {r['verdict']} ({r['target']}; {r['unit']}, "
              f"{r['runs']} runs each)")
        if r["note"]:
            print(f"    {r['note']}")
    print(f"  {fid['name']}: {fid['within']} of {fid['count']} within 10%, worst {fid['worst']} "
          f"({fid['verdict']}: {fid['target']})")
    print(f"  {scale['name']}: {scale['dram']:.1f} vs {scale['emulated']:.1f} ns per particle-step, "
          f"{scale['ratio']:.2f}x (spread {scale['spread'][0]:.2f}-{scale['spread'][1]:.2f})")
    with open(out, "w") as f:
        json.dump({"benchmark": "hetmem-bench-emul", "quick": quick, "overhead": rows, "fidelity": fid,
                   "optane_scale": scale}, f, indent=1)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    from .lib import results_dir
    sys.exit(main(str(results_dir() / "hetmem-bench-emul.json"), "--quick" in sys.argv))
