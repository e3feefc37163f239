"""`hetmem bench overhead`: what hetmem's own machinery costs a program that it cannot speed up.

Every tier is DRAM (the capacity tier is an emulated one with emulation off, HM_EMUL=0), so any
difference from the plain program is hetmem's cost, not placement's.

1. The real-program suite (python/hetmem/real_programs.py), each program plain, under its plan
   (`run --plan`), with the whole heap on the capacity tier (`run --rules`) and profiled
   (`profile`). The programs are started with exactly the environment the `hetmem` command would
   give them (`cli.launch_environment`), not through the command, so that the machinery is
   measured alone; the command's own start-up (a Python interpreter, a fixed cost) is row 2. An
   MPI program is measured twice: on each rank (its start-up included in each rank: `hetmem-run`,
   the C launcher, for `run --plan`, `run --rules` and, with --profile, `profile`), and
   `hetmem` once outside the launcher (`hetmem run ... -- mpirun ...`: the ranks inherit the
   environment; a profile follows them with --children).
   Rounds alternate the modes in a rotating order; each ratio is paired by round, with its spread.
   Targets: `run --plan` and `run --rules` at most 1.03x the plain run, `profile` at most 1.10x;
   MET only when the whole spread meets it. Beside them, with no target, the profile that records
   every allocation (`profile --sample 0`, what the default profile was before it sampled small
   ones) and the default profile's time against it, and a reference: the program with its whole
   heap in jemalloc (Debian's libjemalloc2, preloaded; the allocator memkind is built on), what
   moving a program's heap into a size-class allocator costs by itself, with the rules' time
   against it.
2. Fixed costs, reported apart: the `hetmem` command's start-up (`hetmem run -- /bin/true` against
   `/bin/true`, in seconds), and the preload library's start-up in each process it is loaded into
   (batches of `/bin/true` started by a shell, plain, with the environment of `run --rules`, with
   that environment less the rules file, and with an empty preloaded library, the floor any
   preloaded tool pays; in milliseconds per process): what a build, a shell script or a launcher
   pays per process.
3. The interfaces codes already use (python/hetmem/bench_memkind.py): memkind's kinds against
   Debian's memkind 1.14 (at most 1.0x), OpenMP's default allocator with hetmem's libmemkind loaded
   (at most 1.05x), numpy's handler against numpy's own at 8 B to 1 GiB (at most 1.05x).

4. The PIC code (`hetmem compare`, emulated Optane): every policy with a fast budget that holds the
   whole footprint against all-fast (at most 1.02x for each policy whose placement follows the
   budget; slow-only and interleave place by definition, and are shown), and `hetmem` against
   `hetmem-static` with the default 25% budget (at most 1.0x; within the spread counts as met), on
   preset:L1 and, without --quick, preset:L2.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from . import bench_memkind
from . import real_programs as rp
from .cli import launch_environment
from .lib import find_program
from .verdicts import at_most, ratio

TARGETS = {"plan": 1.03, "rules": 1.03, "profile": 1.10}
# DRAM everywhere: the capacity tier is emulated with its charge off, so it is DRAM that hetmem
# accounts as a second tier.
DRAM_ONLY = {"HM_TIERS": "capacity=emul:cxl", "HM_EMUL": "0"}
# The reference heap: a well-kept size-class allocator preloaded in place of the C library's
# (Debian's libjemalloc2; the row says n/a where it is not installed).
JEMALLOC = Path("/usr/lib") / (sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu") / "libjemalloc.so.2"


def _hetmem_argv(mode: str, work: Path, tag: str, children: bool = False) -> list[str]:
    if mode in ("profile", "profile-every"):
        return (["profile", "-o", str(work / f"{tag}.hmtrace")] + (["--sample", "0"] if mode == "profile-every" else [])
                + (["--children"] if children else []))
    if mode == "rules":
        return ["run", "--rules", str(work / "all-capacity.rules")]
    return ["run", "--plan", str(work / "own.plan")]


def _launch_env(argv: list[str], base_env: dict) -> dict:
    """The environment `hetmem ARGV` would start its program with, built from `base_env` (the
    command builds it from its own process's environment, which is swapped for the call)."""
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(base_env)
        return launch_environment(argv)[1]
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _command(program: rp.Program, mode: str, work: Path, tag: str, base_env: dict,
             per_rank: bool) -> tuple[list[str], dict]:
    """The program's command and environment in `mode`, as the hetmem command would start it: for
    an MPI program on each rank (per_rank, through hetmem-run or the command) or once, outside the launcher,
    whose ranks inherit the environment."""
    plain = [a for a in program.command if a != "{hetmem}"]
    if mode == "plain":
        return plain, base_env
    if mode == "jemalloc":  # every process of the run, the launcher's too
        return plain, {**base_env, "LD_PRELOAD": str(JEMALLOC)}
    if per_rank:
        return rp.command(program, mode, work, tag), base_env
    env = _launch_env(_hetmem_argv(mode, work, tag, children=program.per_rank) + ["--"] + plain, base_env)
    return plain, env


def _time(cmd: list[str], env: dict, cwd: Path, timeout: float = 600) -> tuple[float, int, str]:
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return time.monotonic() - t0, r.returncode, r.stderr


# A program's peak resident set is measured by a small C launcher of its own, in runs of their
# own (not timed): the kernel's maxrss of a process counts the memory of the process it was
# started from (a vfork or fork of this Python interpreter records the interpreter's resident set
# at the exec), and the launcher's is a few hundred KiB.
PEAK_RSS_SOURCE = r"""
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
  if (argc < 2) return 2;
  pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    execvp(argv[1], argv + 1);
    _exit(127);
  }
  int status = 0;
  struct rusage usage;
  if (wait4(pid, &status, 0, &usage) < 0) return 2;
  fprintf(stderr, "\npeak-rss-kib %ld\n", usage.ru_maxrss);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
"""


def _compile_c(tmp: Path, name: str, source: str, *flags: str) -> Path | None:
    """`source` built with the C compiler into tmp/name; None without a compiler or on an error."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    src, out = tmp / f"{name}.c", tmp / name
    src.write_text(source)
    r = subprocess.run([cc, *flags, "-O2", str(src), "-o", str(out)], capture_output=True, text=True)
    return out if r.returncode == 0 else None


def _peak_rss_launcher(tmp: Path) -> Path | None:
    """The launcher of PEAK_RSS_SOURCE; None without a C compiler."""
    return _compile_c(tmp, "peak-rss", PEAK_RSS_SOURCE)


def _peak_rss_mib(launcher: Path | None, cmd: list[str], env: dict, cwd: Path) -> float | None:
    """Peak resident set (MiB) of the run's largest process: the maxrss the launcher's wait4 gives,
    which covers every descendant the program waited for. None when it cannot be measured."""
    if launcher is None:
        return None
    r = subprocess.run([str(launcher), *cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in r.stderr.splitlines() if line.startswith("peak-rss-kib ")]
    return int(lines[-1].split()[1]) / 1024 if r.returncode == 0 and lines else None


def _mib(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f}"


def real_programs(rounds: int, tmp: Path, say) -> dict:
    modes = ("plain", "plan", "rules", "profile", "profile-every") + (("jemalloc",) if JEMALLOC.exists() else ())
    rss_modes = tuple(m for m in modes if m != "profile-every")
    rows = []
    launcher = _peak_rss_launcher(tmp)
    for program in rp.PROGRAMS:
        if program.missing():
            rows.append({"program": program.name, "skipped": program.missing()})
            continue
        work = tmp / program.name
        rp.prepare(program, work)
        base_env = rp.environment({**DRAM_ONLY, **program.env})
        # The plan from a profile of its own (not timed).
        profiled = rp.run_once(program, "profile", work, "profile0")
        made = rp.make_plan(program, work, rp.traces_of(work, "profile0")[0]) if profiled.status == 0 else None
        if made is None or made.returncode != 0:
            rows.append({"program": program.name, "skipped": "no plan could be made: "
                         + (made.stderr.strip()[-200:] if made else profiled.stderr.strip()[-200:])})
            continue
        # An MPI program twice: hetmem on each rank, and hetmem once outside the launcher.
        for per_rank in ((True, False) if program.per_rank else (False,)):
            name = program.name + ("" if not program.per_rank else " (each rank)" if per_rank else " (outside)")
            seconds: dict[str, list[float]] = {m: [] for m in modes}
            problems, reference_problems = [], []
            for rnd in range(rounds):
                order = modes[rnd % len(modes):] + modes[:rnd % len(modes)]
                for mode in order:
                    cmd, env = _command(program, mode, work, f"bench-{mode}{rnd}", base_env, per_rank)
                    s, status, err = _time(cmd, env, work)
                    if status != 0:
                        # The reference's failure is jemalloc's, not hetmem's: said, not counted.
                        (reference_problems if mode == "jemalloc" else problems).append(
                            f"{mode} round {rnd + 1}: status {status}: {err.strip()[-200:]}")
                    seconds[mode].append(s)
            # Peak resident set of the run's largest process, one more run of each mode (no target:
            # what the machinery's memory costs beside its time).
            peak_mib = {m: _peak_rss_mib(launcher, *_command(program, m, work, f"bench-rss-{m}", base_env, per_rank),
                                         work) for m in rss_modes}
            row = {"program": name, "seconds": seconds, "problems": problems, "peak_rss_mib": peak_mib,
                   "through": "hetmem-run (run) or hetmem-run --profile (profile) on each rank (its start-up "
                              "included)" if per_rank
                   else "the hetmem command once, outside the MPI launcher (its start-up not included)"
                   if program.per_rank else "the environment the hetmem command gives (its start-up not included)"}
            for mode in ("plan", "rules", "profile"):
                r = ratio(seconds[mode], seconds["plain"], paired=True)
                row[mode] = {**r.as_dict(), "target": TARGETS[mode], "verdict": at_most(r, TARGETS[mode])}
            row["profile-every"] = ratio(seconds["profile-every"], seconds["plain"], paired=True).as_dict()
            row["profile / profile-every"] = ratio(seconds["profile"], seconds["profile-every"], paired=True).as_dict()
            if reference_problems:
                row["reference_problems"] = reference_problems
            elif "jemalloc" in seconds:
                row["jemalloc"] = ratio(seconds["jemalloc"], seconds["plain"], paired=True).as_dict()
                row["rules / jemalloc"] = ratio(seconds["rules"], seconds["jemalloc"], paired=True).as_dict()
            say(f"  {name}: plain {statistics.median(seconds['plain']):.3f} s, "
                + ", ".join(f"{m} {row[m]['ratio']:.3f}x ({row[m]['verdict']})" for m in ("plan", "rules", "profile"))
                + f", every allocation {row['profile-every']['ratio']:.3f}x"
                + (f", jemalloc {row['jemalloc']['ratio']:.3f}x" if "jemalloc" in row else "") + "; peak RSS "
                + " / ".join(_mib(peak_mib[m]) for m in rss_modes) + f" MiB ({' / '.join(rss_modes)})")
            rows.append(row)
    return {"rounds": rounds, "rows": rows}


def _compile_package() -> None:
    """The package's modules compiled to bytecode, as an installed package's are (scripts/setup.sh
    does it; a source tree edited since, under PYTHONDONTWRITEBYTECODE, would otherwise compile
    every edited module at every start and the start-up measured would not be a user's)."""
    import compileall
    compileall.compile_dir(str(Path(__file__).resolve().parent), quiet=2)


def command_start_up(rounds: int) -> dict:
    """Seconds each launcher adds before the program starts: the `hetmem` command (its Python
    interpreter) and hetmem-run, the C launcher for each rank of an MPI job (the preload library's
    start in /bin/true included in both)."""
    launchers = {"hetmem": [sys.executable, "-m", "hetmem", "run", "--"],
                 "hetmem-run": [find_program("hetmem-run"), "--"]}
    env = rp.environment(DRAM_ONLY)
    plain, wrapped = [], {name: [] for name in launchers}
    for _ in range(rounds):
        plain.append(_time(["/bin/true"], env, Path.cwd())[0])
        for name, argv in launchers.items():
            wrapped[name].append(_time(argv + ["/bin/true"], env, Path.cwd())[0])

    def added(times: list[float]) -> dict:
        return {"added_s": statistics.median(times) - statistics.median(plain),
                "spread_s": [min(times) - max(plain), max(times) - min(plain)]}

    return {"plain_s": statistics.median(plain), "hetmem_run_s": statistics.median(wrapped["hetmem"]),
            **added(wrapped["hetmem"]), "c_launcher": added(wrapped["hetmem-run"])}


PROCESSES_PER_BATCH = 100


def _empty_preload_library(tmp: Path) -> Path | None:
    """A preloaded library that does nothing: what any LD_PRELOAD tool pays in each process (mapping
    and relocating one more library), the floor under hetmem's own start-up. None without a C
    compiler."""
    return _compile_c(tmp, "libempty-preload.so", "int hm_bench_empty_preload(void) { return 0; }\n",
                      "-shared", "-fPIC")


def process_start_up(rounds: int, tmp: Path) -> dict:
    """Milliseconds the preload library adds to each process it starts in: with a rules file (hetmem
    starts its runtime), without one (the libraries loaded, nothing started), and an empty
    preloaded library beside them (the floor any preloaded library pays)."""
    rules = tmp / "all-capacity.rules"
    rules.write_text("all -> capacity\n")
    batch = ["sh", "-c", f"i=0; while [ $i -lt {PROCESSES_PER_BATCH} ]; do /bin/true; i=$((i+1)); done"]
    base_env = rp.environment(DRAM_ONLY)
    with_rules = _launch_env(["run", "--rules", str(rules), "--"] + batch, base_env)
    variants = {"plain": base_env, "rules": with_rules,
                "no rules": {k: v for k, v in with_rules.items() if k != "HM_RULES"}}
    empty = _empty_preload_library(tmp)
    if empty is not None:
        variants["empty library"] = {**base_env, "LD_PRELOAD": str(empty)}
    per_process: dict[str, list[float]] = {name: [] for name in variants}
    for rnd in range(rounds):
        order = list(variants)[rnd % len(variants):] + list(variants)[:rnd % len(variants)]
        for name in order:
            s, status, err = _time(batch, variants[name], tmp)
            if status != 0:
                raise RuntimeError(f"the start-up batch ({name}) failed with status {status}: {err.strip()[-200:]}")
            per_process[name].append(s * 1e3 / (PROCESSES_PER_BATCH + 1))

    def added(name: str) -> list[float]:
        return [w - p for w, p in zip(per_process[name], per_process["plain"])]

    out = {"processes_per_batch": PROCESSES_PER_BATCH + 1, "plain_ms": statistics.median(per_process["plain"]),
           "preloaded_ms": statistics.median(per_process["rules"]), "added_ms": statistics.median(added("rules")),
           "spread_ms": [min(added("rules")), max(added("rules"))],
           "no_rules_added_ms": statistics.median(added("no rules")),
           "no_rules_spread_ms": [min(added("no rules")), max(added("no rules"))]}
    if empty is not None:
        out["empty_library_added_ms"] = statistics.median(added("empty library"))
        out["empty_library_spread_ms"] = [min(added("empty library")), max(added("empty library"))]
    return out


# Policies that place by definition, whatever the budget: measured, not held to all-fast.
BY_DEFINITION = {"slow-only": "everything on the slow tier", "interleave": "pages spread by the tiers' bandwidths"}
UNLIMITED_TARGET = 1.02


def _compare(args: list[str], out: Path) -> dict:
    cmd = [sys.executable, "-m", "hetmem", "compare", "--out", str(out), *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=rp.environment({}))
    if r.returncode != 0:
        raise RuntimeError(f"hetmem compare {' '.join(args)}: {r.stderr.strip()[-300:]}")
    return json.loads((out / "compare.json").read_text())


def pic_policies(quick: bool, repeat: int, tmp: Path) -> dict:
    """Part 4: the placement runtime's own cost on the PIC code (emulated slow tier)."""
    rows = []
    # 2 GiB: nine times L1's footprint (227 MiB), within any fast tier this runs on.
    doc = _compare(["--budget", "2G", "--repeat", str(repeat), "preset:L1"], tmp / "unlimited")
    runs = {p["policy"]: p for p in doc["policies"] if "skipped" not in p}
    for p in doc["policies"]:
        if "skipped" in p:
            rows.append({"case": f"L1, unlimited budget: {p['policy']} / all-fast", "ratio": float("nan"),
                         "spread": [float("nan")] * 2, "target": UNLIMITED_TARGET,
                         "verdict": f"NOT MET (not measured: {p['skipped']})"})
    fast = runs["all-fast"]["runs"]
    for name, p in runs.items():
        if name == "all-fast":
            continue
        r = ratio(p["runs"], fast, paired=True)
        rows.append({"case": f"L1, unlimited budget: {name} / all-fast", **r.as_dict(),
                     "target": None if name in BY_DEFINITION else UNLIMITED_TARGET,
                     "verdict": BY_DEFINITION.get(name) or at_most(r, UNLIMITED_TARGET)})
    for preset in ("L1",) if quick else ("L1", "L2"):
        doc = _compare(["--policies", "hetmem-static,hetmem", "--repeat", str(repeat), f"preset:{preset}"],
                       tmp / f"static-{preset}")
        runs = {p["policy"]: p for p in doc["policies"] if "skipped" not in p}
        r = ratio(runs["hetmem"]["runs"], runs["hetmem-static"]["runs"], paired=True)
        verdict = at_most(r, 1.0)
        rows.append({"case": f"{preset}, 25% budget: hetmem / hetmem-static", **r.as_dict(), "target": 1.0,
                     "verdict": "MET (within the spread)" if verdict == "cannot tell" else verdict})
    return {"emulated": True, "rows": rows}


def main(out: str, quick: bool, console) -> int:
    from rich.table import Table
    rounds = 3 if quick else 7
    say = console.print
    say(f"hetmem bench overhead: every tier DRAM (emulation off), {rounds} alternating rounds")
    _compile_package()  # before the command's start-up is timed, and before any program starts it
    with tempfile.TemporaryDirectory(prefix="hetmem-overhead-") as tmp:
        suite = real_programs(rounds, Path(tmp), say)
    start = command_start_up(rounds * 2)
    with tempfile.TemporaryDirectory(prefix="hetmem-overhead-start-") as tmp:
        per_process = process_start_up(rounds * 2, Path(tmp))
    table = Table(title="The machinery alone on real programs (time / plain time, paired by round; DRAM only)",
                  title_justify="left")
    for col in ("program", "plain s", "run --plan", "run --rules", "profile",
                "profile --sample 0 (every allocation); default / it",
                "reference: the heap in jemalloc; run --rules / it",
                "peak RSS MiB plain / plan / rules / profile / jemalloc"):
        table.add_column(col)
    verdicts = []
    for row in suite["rows"]:
        if "skipped" in row:
            table.add_row(row["program"], "skipped", row["skipped"][:60], "", "", "", "", "")
            continue
        if row["problems"]:
            table.add_row(row["program"], "FAILED", row["problems"][0][:60], "", "", "", "", "")
            continue
        cells = []
        for mode in ("plan", "rules", "profile"):
            m = row[mode]
            verdicts.append(m["verdict"])
            cells.append(f"{m['ratio']:.3f}x ({m['spread'][0]:.2f}-{m['spread'][1]:.2f}) "
                         f"<= {m['target']}: {m['verdict']}")
        every, against = row["profile-every"], row["profile / profile-every"]
        cells.append(f"{every['ratio']:.3f}x ({every['spread'][0]:.2f}-{every['spread'][1]:.2f}); "
                     f"{against['ratio']:.3f}x ({against['spread'][0]:.2f}-{against['spread'][1]:.2f})")
        if "jemalloc" in row:
            jem, rules_against = row["jemalloc"], row["rules / jemalloc"]
            cells.append(f"{jem['ratio']:.3f}x ({jem['spread'][0]:.2f}-{jem['spread'][1]:.2f}); "
                         f"{rules_against['ratio']:.3f}x ({rules_against['spread'][0]:.2f}-"
                         f"{rules_against['spread'][1]:.2f})")
        elif "reference_problems" in row:
            cells.append(f"failed: {row['reference_problems'][0][:60]}")
        else:
            cells.append(f"n/a ({JEMALLOC} not installed)")
        cells.append(" / ".join(_mib(row["peak_rss_mib"].get(m)) for m in ("plain", "plan", "rules", "profile", "jemalloc")))
        table.add_row(row["program"], f"{statistics.median(row['seconds']['plain']):.3f}", *cells)
    console.print(table)
    console.print(f"the hetmem command's own start-up: {start['added_s']:.3f} s per run "
                  f"(spread {start['spread_s'][0]:.3f}-{start['spread_s'][1]:.3f} s; a fixed cost, not per "
                  "allocation; not in the ratios above); hetmem-run's, the C launcher for each rank: "
                  f"{1e3 * start['c_launcher']['added_s']:.2f} ms (spread {1e3 * start['c_launcher']['spread_s'][0]:.2f}-"
                  f"{1e3 * start['c_launcher']['spread_s'][1]:.2f} ms)")
    console.print(f"the preload library's start-up in each process: {per_process['added_ms']:.3f} ms with a rules "
                  f"file (spread {per_process['spread_ms'][0]:.3f}-{per_process['spread_ms'][1]:.3f}; /bin/true "
                  f"{per_process['plain_ms']:.3f} ms plain), {per_process['no_rules_added_ms']:.3f} ms without one "
                  f"(spread {per_process['no_rules_spread_ms'][0]:.3f}-{per_process['no_rules_spread_ms'][1]:.3f})")
    if "empty_library_added_ms" in per_process:
        console.print(f"  the floor, an empty preloaded library: {per_process['empty_library_added_ms']:.3f} ms "
                      f"(spread {per_process['empty_library_spread_ms'][0]:.3f}-"
                      f"{per_process['empty_library_spread_ms'][1]:.3f}); what any preloaded tool pays per process")
    say("The interfaces codes already use (ns per allocation; DRAM only)")
    interfaces = bench_memkind.measure(rounds)
    bench_memkind.report(interfaces, say)
    verdicts += [interfaces[f"{part}_verdict"] for part in ("memkind", "openmp", "numpy")]
    say("The placement runtime on the PIC code (s/iteration ratios, paired by repetition; slow tier emulated)")
    with tempfile.TemporaryDirectory(prefix="hetmem-overhead-pic-") as tmp:
        pic = pic_policies(quick, rounds, Path(tmp))
    for row in pic["rows"]:
        target = f"<= {row['target']}" if row["target"] else "by definition"
        say(f"  {row['case']:52s} {row['ratio']:.3f}x ({row['spread'][0]:.3f}-{row['spread'][1]:.3f})  "
            f"{target}: {row['verdict']}")
        if row["target"]:
            verdicts.append(row["verdict"].split(" (")[0])
    problems = [p for row in suite["rows"] for p in row.get("problems", [])]
    for p in problems:
        console.print(f"problem: {p}")
    for row in suite["rows"]:
        for p in row.get("reference_problems", []):
            console.print(f"the reference run failed (jemalloc's, not counted in the verdict): {row['program']}: {p}")
    result = {"benchmark": "overhead", "tiers": "DRAM only (emulated capacity tier, HM_EMUL=0)",
              "real_programs": suite, "command_start_up": start,
              "process_start_up": per_process, "interfaces": interfaces, "pic": pic,
              "met": "NOT MET" if "NOT MET" in verdicts or problems else
              ("MET" if verdicts and all(v == "MET" for v in verdicts) else "cannot tell")}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=1) + "\n")
    console.print(f"overall: {result['met']} -- {out}")
    return 1 if result["met"] == "NOT MET" else 0
