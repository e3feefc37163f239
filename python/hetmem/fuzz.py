"""Input fuzzing of the applications and tools (``hetmem fuzz``, docs/fuzzing.md).

Valid inputs of hetmem-pic, hetmem-mg, hetmem-amr, a placement rules file (``hetmem run --rules``)
and the ``HM_*`` settings (read by hetmem-tiers, and by the preload library inside a program it must
never break) are mutated one thing at a time: a number set to 0, negative, huge, NaN, infinite, a
fraction or an integer that overflows; a value of the wrong type; a key removed, repeated or
misspelt. Each case runs under a time limit and must end one of two ways:

- **ran**: the program accepted the problem (status 0, or still running at the time limit after
  printing that it started);
- **refused**: status 2 within a second, with one line on standard error that names what was
  wrong (the key, flag, variable or FILE:LINE).

Anything else is a finding: a signal, a refusal that is slow, long or does not name the key, a
run that neither starts nor says why within the limit, or (for the preload library) a program
whose status or output changed. A status of 1 after a start (a run that failed at run time, a pool
too small for the tree) is counted as *stopped*, listed, and not a finding.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .lib import HetmemError, find_preload, find_program

# Values that break parsers: the same list for every numeric field.
NUMBER_MUTATIONS = ["0", "-1", "-0", "0.5", "1.5", "-2.5", "1e308", "1e400", "-1e400", "nan", "NaN", "inf", "-inf",
                    "9223372036854775807", "9223372036854775808", "18446744073709551616", "2147483648",
                    "99999999999999999999999", "1e-300", "0x10", "1,5", "1e", "", " ", "abc", "1 2", "+3", "07"]
TEXT_MUTATIONS = ["", "x", "0", "-1", "nan", "\u00e9t\u00e9", "a" * 300, "..", "/", "fast,", "1e400"]


@dataclass
class Case:
    target: str
    what: str                 # the mutation, for the report ("max_step = 1e400")
    key: str                  # what a refusal must name
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)   # name -> text, written into the case's directory
    started: str = ""         # text the program prints once it accepted the problem
    expect_output: str | None = None                     # the preload target: the program's own output


@dataclass
class Outcome:
    case: Case
    verdict: str              # ran, refused, stopped or FINDING
    status: int | None
    seconds: float
    why: str = ""
    cpu_seconds: float = 0.0  # refusals: the CPU time the refusal took


# -- the targets: a valid base input and what can be mutated in it -----------------------------------

PIC_BASE = {
    "max_step": "2", "amr.n_cell": "16 16 16", "geometry.prob_hi": "10e-6 10e-6 10e-6", "warpx.cfl": "0.99",
    "algo.particle_pusher": "boris", "particles.species_names": "electrons", "electrons.density": "1e24",
    "electrons.u_th": "0.01", "electrons.ux": "0", "electrons.num_particles_per_cell_each_dim": "1 1 1",
    "electrons.mass": "m_e", "electrons.charge": "-q_e", "hetmem.tile_size": "4 4 4", "hetmem.seed": "1",
    "hetmem.sort_interval": "0", "diag.interval": "0", "diag.progress": "1", "hetmem.strict": "0",
}
MG_BASE = {"mg.n": "16", "mg.steps": "1", "mg.max_cycles": "4", "mg.tol": "1e-3", "mg.pre": "2", "mg.post": "2",
           "mg.omega": "1.2", "mg.cycle": "V", "mg.bc": "dirichlet", "mg.coefficients": "palm",
           "mg.domain_fields": "2", "mg.domain_role": "capacity"}
AMR_BASE = {"--dim": "2", "--steps": "2", "--level": "4", "--spheres": "1", "--radius": "0.15", "--fast-kib": "64",
            "--pool-mib": "8", "--progress": "1", "--shape": "spheres", "--store": "pm", "--snapshot-every": "2"}
RULES_BASE = ["size >= 2M -> huge", "function main -> capacity", "site /bin/true+0x10 -> class hot 50",
              "size < 64 -> libc", "size <= 1K -> fast", "all -> capacity"]
ENV_VALUES = {"HM_TIERS": "fast=dram,capacity=emul:optane", "HM_FAST_BUDGET": "64M", "HM_CAPACITY_BUDGET": "1G",
              "HM_POOL_SIZE": "64M", "HM_THP": "1", "HM_EMUL": "1", "HM_POLICY": "hetmem-static",
              "HM_MIGRATION_SPACE": "1M", "HM_HELPERS": "2", "HM_PREFETCH_DISTANCE": "4", "HM_SAMPLE_BUDGET": "0.01",
              "HM_NT_THRESHOLD": "8M", "HM_RETAIN": "256M", "HM_DEFAULT_ROLE": "fast", "HM_VERBOSE": "0",
              "HM_PROFILE_DEPTH": "8", "HM_PROFILE_LARGE": "256K", "HM_PROFILE_SAMPLE": "64K", "HM_ITERATION_WINDOW": "0.1",
              "HM_HUGETLB_POOL": "0", "HM_PM_CHECK": "0"}
NUMERIC = {"max_step", "warpx.cfl", "electrons.density", "electrons.u_th", "electrons.ux", "hetmem.seed",
           "hetmem.sort_interval", "diag.interval", "diag.progress", "amr.n_cell", "geometry.prob_hi",
           "electrons.num_particles_per_cell_each_dim", "hetmem.tile_size", "mg.n", "mg.steps", "mg.max_cycles",
           "mg.tol", "mg.pre", "mg.post", "mg.omega", "mg.domain_fields", "--dim", "--steps", "--level",
           "--spheres", "--radius", "--fast-kib", "--pool-mib", "--progress", "--snapshot-every",
           "HM_FAST_BUDGET", "HM_CAPACITY_BUDGET", "HM_POOL_SIZE", "HM_THP", "HM_EMUL", "HM_MIGRATION_SPACE",
           "HM_HELPERS", "HM_PREFETCH_DISTANCE", "HM_SAMPLE_BUDGET", "HM_NT_THRESHOLD", "HM_RETAIN", "HM_VERBOSE",
           "HM_PROFILE_DEPTH", "HM_PROFILE_LARGE", "HM_PROFILE_SAMPLE", "HM_ITERATION_WINDOW", "HM_HUGETLB_POOL",
           "HM_PM_CHECK"}


def mutate_value(key: str, value: str, rng: random.Random) -> str:
    """A bad (or merely unusual) value for `key`: one component of a vector, or the whole value."""
    pool = NUMBER_MUTATIONS if key in NUMERIC else TEXT_MUTATIONS + NUMBER_MUTATIONS[:6]
    parts = value.split()
    if len(parts) > 1 and rng.random() < 0.7:
        roll = rng.random()
        if roll < 0.15:
            return " ".join(parts[:-1])            # a component missing
        if roll < 0.25:
            return value + " " + parts[-1]         # one too many
        i = rng.randrange(len(parts))
        parts[i] = rng.choice(pool) or "0"
        return " ".join(parts)
    return rng.choice(pool)


def misspell(key: str, rng: random.Random) -> str:
    i = rng.randrange(len(key))
    return key[:i] + key[i + 1:] if rng.random() < 0.5 else key[:i] + key[i] + key[i:]


def keyed_cases(base: dict[str, str], rng: random.Random) -> tuple[str, str, dict[str, str] | list]:
    """One mutation of a key=value input: (what, key to name, the mutated items as (key, value) list)."""
    items = list(base.items())
    key, value = rng.choice(items)
    roll = rng.random()
    if roll < 0.7:
        new = mutate_value(key, value, rng)
        return f"{key} = {new!r}", key, [(k, new if k == key else v) for k, v in items]
    if roll < 0.8:
        return f"{key} missing", key, [(k, v) for k, v in items if k != key]
    if roll < 0.9:
        new = mutate_value(key, value, rng)
        return f"{key} repeated ({value!r}, then {new!r})", key, items + [(key, new)]
    wrong = misspell(key, rng)
    return f"{key} misspelt as {wrong}", wrong, [(wrong if k == key else k, v) for k, v in items]


def pic_case(rng: random.Random, programs: list[str]) -> Case:
    program = programs[0]
    what, key, items = keyed_cases(PIC_BASE, rng)
    text = "".join(f"{k} = {v}\n" for k, v in items)
    # Sometimes the mutation comes as a command-line override of the valid file instead.
    if rng.random() < 0.3 and not what.endswith("missing"):
        k, v = items[-1] if "repeated" in what else next((k, v) for k, v in items if k == key)
        base = "".join(f"{k2} = {v2}\n" for k2, v2 in PIC_BASE.items())
        return Case("pic", what + " (override)", key, [program, "input.txt", f"{k}={v}", "diag.directory=diags"],
                    files={"input.txt": base}, started="cells,")
    return Case("pic", what, key, [program, "input.txt", "diag.directory=diags"], files={"input.txt": text},
                started="cells,")


def mg_case(rng: random.Random, programs: list[str]) -> Case:
    program = programs[0]
    what, key, items = keyed_cases(MG_BASE, rng)
    return Case("mg", what, key, [program] + [f"{k}={v}" for k, v in items], started="cells,",
                env={"GFORTRAN_UNBUFFERED_PRECONNECTED": "y"})


def amr_case(rng: random.Random, programs: list[str]) -> Case:
    program = programs[0]
    what, key, items = keyed_cases(AMR_BASE, rng)
    argv = [program, "--pool", "p.pool"]
    for k, v in items:
        argv += [k, v]
    return Case("amr", what, key, argv, started="constructed")


def rules_case(rng: random.Random, programs: list[str]) -> Case:
    hetmem = programs[0]
    lines = list(RULES_BASE)
    i = rng.randrange(len(lines))
    tokens = lines[i].split()
    roll = rng.random()
    if roll < 0.5:
        j = rng.randrange(len(tokens))
        tokens[j] = rng.choice(NUMBER_MUTATIONS + TEXT_MUTATIONS + ["->", "class", "size", ">=", "#"]) or "''"
        what = f"line {i + 1} token {j + 1} -> {tokens[j]!r}"
    elif roll < 0.7:
        del tokens[rng.randrange(len(tokens))]
        what = f"line {i + 1} with a token missing"
    elif roll < 0.85:
        tokens = [rng.choice(["size", "site", "function", "class", "->", "all", "2M", "@@"]) for _ in range(rng.randint(1, 6))]
        what = f"line {i + 1} replaced by {' '.join(tokens)!r}"
    else:
        tokens = tokens + tokens
        what = f"line {i + 1} doubled"
    lines[i] = " ".join(tokens)
    return Case("rules", what, f"fuzz.rules:{i + 1}", [hetmem, "run", "--rules", "fuzz.rules", "--", "/bin/true"],
                files={"fuzz.rules": "\n".join(lines) + "\n"}, started="")


def env_case(rng: random.Random, programs: list[str]) -> Case:
    """A bad HM_* setting read by hetmem-tiers, or by hetmem-pic (an application that initialises
    hetmem itself and reports the error)."""
    key, value = rng.choice(list(ENV_VALUES.items()))
    new = mutate_value(key, value, rng) if rng.random() < 0.85 else misspell(value, rng) if value else "x"
    tiers, pic = programs
    if rng.random() < 0.5:
        return Case("env", f"{key}={new!r}", key, [tiers], env={key: new})
    return Case("env", f"{key}={new!r} (hetmem-pic)", key,
                [pic, "preset:L0", "amr.n_cell=8 8 8", "hetmem.tile_size=4 4 4", "max_step=1", "diag.directory=d"],
                env={key: new}, started="cells,")


def preload_case(rng: random.Random, programs: list[str]) -> Case:
    """The preload library inside /bin/echo with a bad HM_* setting: echo must be unchanged."""
    key, value = rng.choice(list(ENV_VALUES.items()) + [("HM_RULES", "fuzz.rules"), ("HM_PROFILE", "/nonexistent/t")])
    new = mutate_value(key, value, rng) if key != "HM_PROFILE" else "/nonexistent/t"
    files = {"fuzz.rules": "size >= 2Q -> huge\n"} if key == "HM_RULES" else {}
    return Case("preload", f"{key}={new!r}", key, ["/bin/echo", "unchanged"], env={key: new, "LD_PRELOAD": programs[0]},
                files=files, expect_output="unchanged\n")


# target -> (the programs it runs, a case drawn with the random generator given their paths)
TARGETS: dict[str, tuple[tuple[str, ...], Callable[[random.Random, list[str]], Case]]] = {
    "pic": (("hetmem-pic",), pic_case),
    "mg": (("hetmem-mg",), mg_case),
    "amr": (("hetmem-amr",), amr_case),
    "rules": (("hetmem",), rules_case),
    "env": (("hetmem-tiers", "hetmem-pic"), env_case),
    "preload": (("libhetmem_preload.so",), preload_case),
}


def _locate(name: str) -> str:
    if name == "libhetmem_preload.so":
        return find_preload()
    if name == "hetmem":
        found = shutil.which("hetmem") or str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "hetmem")
        if not os.access(found, os.X_OK):
            raise HetmemError("the hetmem command is not installed (scripts/setup.sh installs it in .venv)")
        return found
    return find_program(name)


# -- running and judging a case -------------------------------------------------------------------------

def _run_measured(argv: list[str], cwd: str, env: dict, time_limit: float) -> tuple[int | None, str, str, float, float]:
    """Runs argv: (status or None when stopped at the limit, stdout, stderr, wall seconds, CPU seconds).
    The CPU time is the process's own (and its waited-for children's), from wait4: what a refusal
    costs does not grow when other work shares the machine, as wall time does."""
    out_path, err_path = Path(cwd, ".fuzz.out"), Path(cwd, ".fuzz.err")
    t0 = time.monotonic()
    with out_path.open("w") as out, err_path.open("w") as err:
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    status: int | None = None
    while True:
        pid, raw, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            status = os.waitstatus_to_exitcode(raw)
            break
        if time.monotonic() - t0 > time_limit:
            os.killpg(p.pid, signal.SIGKILL)
            _, _, usage = os.wait4(p.pid, 0)
            break
        time.sleep(0.002)
    p.returncode = status if status is not None else -signal.SIGKILL  # reaped here, not by Popen
    seconds = time.monotonic() - t0
    read = lambda path: path.read_text(errors="replace")  # noqa: E731
    return status, read(out_path), read(err_path), seconds, usage.ru_utime + usage.ru_stime


def run_case(case: Case, time_limit: float) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="hetmem-fuzz-") as tmp:
        for name, text in case.files.items():
            Path(tmp, name).write_text(text)
        env = {k: v for k, v in os.environ.items() if not k.startswith("HM_") and k != "LD_PRELOAD"}
        env.update(OMP_NUM_THREADS="1", TMPDIR=tmp)
        env.update(case.env)
        argv = case.argv
        if case.started and shutil.which("stdbuf") and case.target != "mg":
            argv = ["stdbuf", "-oL", "-eL", *argv]  # the start line reaches us before a time limit
        status, out, err, seconds, cpu = _run_measured(argv, tmp, env, time_limit)
    return judge(case, status, out, err, seconds, time_limit, cpu_seconds=cpu)


# A refusal comes before any real work: at most this much CPU time (the program's own, so that a
# busy machine does not turn a prompt refusal into a finding; wall time is reported beside it).
REFUSAL_CPU_S = 1.0


def judge(case: Case, status: int | None, out: str, err: str, seconds: float, limit: float,
          cpu_seconds: float | None = None) -> Outcome:
    lines = [l for l in err.splitlines() if l.strip() and "warning:" not in l]
    if case.expect_output is not None:   # the preload library in a program it must not break
        if status == 0 and out == case.expect_output:
            return Outcome(case, "ran", status, seconds)
        return Outcome(case, "FINDING", status, seconds, f"the program changed: status {status}, output {out!r}")
    if status is None:
        if case.started and case.started in out:
            return Outcome(case, "ran", status, seconds, f"still running at the {limit:g} s limit")
        return Outcome(case, "FINDING", status, seconds, f"neither started nor refused within {limit:g} s")
    if status < 0:
        return Outcome(case, "FINDING", status, seconds, f"killed by signal {-status}: {' | '.join(lines[-2:])}")
    if status == 0:
        return Outcome(case, "ran", status, seconds)
    if status == 2:
        problems = []
        cpu = seconds if cpu_seconds is None else cpu_seconds
        if cpu > REFUSAL_CPU_S:
            problems.append(f"refused after {cpu:.2f} s of CPU time ({seconds:.2f} s wall)")
        if len(lines) != 1:
            problems.append(f"{len(lines)} lines on standard error")
        if lines and case.key.lower() not in err.lower():
            problems.append(f"the message does not name {case.key}")
        if problems:
            return Outcome(case, "FINDING", status, seconds, "; ".join(problems) + f": {' | '.join(lines[:3])}")
        return Outcome(case, "refused", status, seconds, lines[0], cpu)
    if status == 1 and lines and (not case.started or case.started in out):
        return Outcome(case, "stopped", status, seconds, lines[-1])
    return Outcome(case, "FINDING", status, seconds, f"status {status}: {' | '.join(lines[:3])}")


def generate(targets: list[str], cases: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    where = {t: [_locate(name) for name in TARGETS[t][0]] for t in targets}
    return [TARGETS[t][1](rng, where[t]) for t in (targets[i % len(targets)] for i in range(cases))]


def fuzz(targets: list[str], cases: int, seed: int, time_limit: float = 5.0, jobs: int = 2,
         progress: Callable[[int, int], None] | None = None) -> list[Outcome]:
    """Runs `cases` cases drawn with `seed`, spread over `targets`, `jobs` at a time."""
    plan = generate(targets, cases, seed)
    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for outcome in pool.map(lambda c: run_case(c, time_limit), plan):
            outcomes.append(outcome)
            if progress:
                progress(len(outcomes), len(plan))
    return outcomes


def summary(outcomes: list[Outcome]) -> dict:
    by_target: dict[str, dict[str, int]] = {}
    for o in outcomes:
        row = by_target.setdefault(o.case.target, {"ran": 0, "refused": 0, "stopped": 0, "FINDING": 0})
        row[o.verdict] += 1
    return {
        "targets": by_target,
        "findings": [{"target": o.case.target, "mutation": o.case.what, "status": o.status,
                      "seconds": round(o.seconds, 3), "why": o.why, "argv": o.case.argv, "env": o.case.env}
                     for o in outcomes if o.verdict == "FINDING"],
        "stopped": [{"target": o.case.target, "mutation": o.case.what, "message": o.why}
                    for o in outcomes if o.verdict == "stopped"],
        "slowest_refusal_s": round(max((o.seconds for o in outcomes if o.verdict == "refused"), default=0.0), 3),
        "slowest_refusal_cpu_s": round(max((o.cpu_seconds for o in outcomes if o.verdict == "refused"),
                                           default=0.0), 3),
    }


def main(targets: list[str], cases: int, seed: int, time_limit: float, out: str, console) -> int:
    from rich.table import Table
    t0 = time.monotonic()
    last = [0.0]

    def progress(done: int, total: int) -> None:
        if time.monotonic() - last[0] > 10 or done == total:
            last[0] = time.monotonic()
            console.print(f"  {done}/{total} cases, {time.monotonic() - t0:.0f} s")

    outcomes = fuzz(targets, cases, seed, time_limit, progress=progress)
    result = summary(outcomes)
    result.update(seed=seed, cases=cases, time_limit_s=time_limit, seconds=round(time.monotonic() - t0, 1))
    table = Table(title=f"hetmem fuzz: {cases} cases, seed {seed}", title_justify="left")
    for col in ("target", "ran", "refused (status 2, one line)", "stopped (status 1)", "findings"):
        table.add_column(col)
    for target, row in result["targets"].items():
        table.add_row(target, str(row["ran"]), str(row["refused"]), str(row["stopped"]),
                      str(row["FINDING"]) if not row["FINDING"] else f"[red]{row['FINDING']}[/red]")
    console.print(table)
    for f in result["findings"]:
        console.print(f"FINDING {f['target']}: {f['mutation']}: {f['why']}")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"slowest refusal {result['slowest_refusal_s']} s; JSON: {out}")
    return 1 if result["findings"] else 0
