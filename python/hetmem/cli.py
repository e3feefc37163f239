"""The ``hetmem`` command.

    hetmem tiers [--json] [--bench [--quick] [--threads N] [--size-mib N] [--out PATH]] [--validate]
    hetmem options [--json]
    hetmem policies [--json]
    hetmem profile [-o TRACE] [--depth N] [--large SIZE] [--children] [--iteration-at FUNCTION | --window S] -- CMD ARGS
    hetmem report TRACE [--out DIR] [--json] [--top N]
    hetmem plan TRACE [-o PLAN]
    hetmem run [--rules FILE | --plan PLAN] [--policy NAME] [--memkind] [--iteration-at FUNCTION | --window S] -- CMD ARGS
    hetmem compare [--policies LIST] [--fraction F | --budget SIZE] [--iterations N] [--repeat R]
                   [--threads T] [--tiers SPEC] [--out DIR] [INPUT [key=value ...] | --plan PLAN -- CMD ARGS]
    hetmem bench alloc|emul|profiler|pic|octree|placement|stream|mg|memkind|overhead|fields|unchanged [--quick] [--out PATH]
        (pic: [--ranks 1,2] [--warpx SOURCES_OR_BINARY [--amrex DIR]]; octree: [--large])
    hetmem fuzz [--cases N] [--seed S] [--targets LIST] [--time-limit S] [--out PATH]
    hetmem fuzz-replica [--connections N] [--seed S] [--out PATH]
    hetmem fields ...   (the FDB store for weather fields: docs/fields.md)
    hetmem pic|mg|amr -- ARGS   (the reference applications)
    hetmem demo
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

# Imported where used, not here (shutil, subprocess and pathlib too): `hetmem run` on every MPI rank
# starts this module, and its start-up is the rank's (docs/benchmarks.md, the command's start-up).
from .units import size_text
from .lib import (HetmemError, Interrupted, Library, find_memkind_dir, find_program, plain_library, preload_value,
                  results_dir, run_program)

ROLE_HELP = "fast, capacity, persistent"


def _console():
    """rich's console (imported here: `hetmem run` on every MPI rank does not pay for it), except
    that a reader gone away (`hetmem tiers | head -1`) ends the command quietly with status 0
    (rich's own reaction is status 1). Wide output when not on a terminal, so that logs and tests
    see whole rows."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return _Console(width=None if sys.stdout.isatty() else 160, highlight=False)


def _table(title: str):
    from rich.table import Table
    return Table(title=title, title_justify="left")


def cmd_tiers(args: argparse.Namespace) -> int:
    if args.bench:
        bench = [find_program("hetmem-bench-tiers"), "--json", args.out or str(results_dir() / "hetmem-bench-tiers.json")]
        if args.quick:
            bench += ["--reps", "3"]
        if args.threads:
            bench += ["--threads", str(args.threads)]
        if args.size_mib:
            bench += ["--size-mib", str(args.size_mib)]
        rc = run_program(bench)
        if rc != 0:
            return rc
        print()
    if args.validate:
        env = dict(os.environ)
        # Validate every profile that charges unless the configuration names emulated tiers itself.
        if "emul:" not in env.get("HM_TIERS", ""):
            env["HM_TIERS"] = (env["HM_TIERS"] + "," if env.get("HM_TIERS") else "") + "capacity=emul:optane,emul:cxl"
        cmd = [find_program("hetmem-validate-emul"), "--json",
               args.validate_out or str(results_dir() / "hetmem-validate-emul.json")]
        if args.quick:
            # Three rounds on a shared machine are a check of the models, not a measurement: fail only on
            # a kernel NOT MET (every round outside the tolerance), not on one whose median noise moved.
            cmd += ["--reps", "3", "--exit-status", "spread"]
        if args.size_mib or args.quick:
            cmd += ["--size-mib", str(args.size_mib or 64)]
        rc = run_program(cmd, env)
        if rc == 2:
            return rc
        print()
        if rc != 0 and not args.bench:
            return rc
    lib = Library()
    tiers = lib.tiers()
    if args.json:
        import json
        print(json.dumps([t.as_dict() for t in tiers], indent=2))
        return 0
    table = _table("hetmem tiers")
    for col in ("tier", "role", "kind", "node", "capacity", "read MB/s", "write MB/s", "latency ns", "figures"):
        table.add_column(col, justify="right" if col in ("node", "capacity", "read MB/s", "write MB/s",
                                                          "latency ns") else "left")
    for t in tiers:
        table.add_row(t.name, ",".join(t.roles) or "-", t.kind + (" (PM)" if t.persistent_memory else ""),
                      "-" if t.numa_node < 0 else str(t.numa_node), size_text(t.capacity),
                      f"{t.read_bw_mbps:.0f}" if t.read_bw_mbps else "-",
                      f"{t.write_bw_mbps:.0f}" if t.write_bw_mbps else "-",
                      f"{t.latency_ns:.0f}" if t.latency_ns else "-", t.figures)
    console = _console()
    console.print(table)
    for t in tiers:
        console.print(f"  {t.name}: {t.detail}")
    if any(t.kind == "emul" for t in tiers):
        console.print(f"calibration: {lib.calibration_summary()}")
    console.print("figures: 'measured' = DRAM calibration on this machine, 'emulated' = a fixed profile ratio "
                  "applied to it, 'hwloc'/'sysfs' = the firmware's HMAT table")
    return 0


def cmd_options(args: argparse.Namespace) -> int:
    options = Library().options()
    if args.json:
        import json
        print(json.dumps(options, indent=2))
        return 0
    table = _table("hetmem options (environment variables)")
    for col in ("name", "value", "source", "meaning"):
        table.add_column(col)
    for o in options:
        table.add_row(o["name"], o["value"] or "''", o["source"], o["doc"])
    _console().print(table)
    return 0


def cmd_policies(args: argparse.Namespace) -> int:
    policies = plain_library().policies()
    if args.json:
        import json
        print(json.dumps([{"name": n, "doc": d} for n, d in policies], indent=2))
        return 0
    table = _table("hetmem placement policies (HM_POLICY, hetmem run --policy)")
    table.add_column("policy")
    table.add_column("what it does")
    for name, doc in policies:
        table.add_row(name, doc)
    _console().print(table)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    if args.ranks and args.what != "pic":
        raise HetmemError(f"--ranks is for `hetmem bench pic`, not `{args.what}`")
    if args.large and args.what != "octree":
        raise HetmemError(f"--large is for `hetmem bench octree`, not `{args.what}`")
    if (args.warpx or args.amrex) and args.what != "pic":
        raise HetmemError(f"--warpx and --amrex are for `hetmem bench pic`, not `{args.what}`")
    if args.amrex and not args.warpx:
        raise HetmemError("--amrex names AMReX's sources for the WarpX build of --warpx; give --warpx too")
    if args.warpx and args.ranks:
        raise HetmemError("--warpx compares with one process of 1 and 2 threads; it does not combine with --ranks")
    study = f"{args.what}-ranks" if args.ranks else f"{args.what}-large" if args.large else args.what
    out = args.out or str(results_dir() / f"hetmem-bench-{study}.json")
    if args.large:
        from .bench_octree import main_large
        return main_large(out)
    if args.ranks:
        from .bench_pic import main_ranks
        try:
            ranks = [int(r) for r in args.ranks.split(",")]
        except ValueError:
            ranks = []
        if not ranks or min(ranks) < 1:
            raise HetmemError(f"--ranks '{args.ranks}': rank counts separated by commas, e.g. 1,2")
        return main_ranks(out, args.quick, ranks)
    if args.warpx:
        from .bench_pic import main
        return main(out, args.quick, warpx=args.warpx, amrex=args.amrex)
    from . import benchmarks
    return benchmarks.find(args.what).run(out, args.quick, _console())


def cmd_fuzz(args: argparse.Namespace) -> int:
    from . import fuzz
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in targets if t not in fuzz.TARGETS]
    if unknown or not targets:
        raise HetmemError(f"--targets '{args.targets}': a comma-separated list of {', '.join(fuzz.TARGETS)}")
    if args.cases < 1 or not args.time_limit > 0:
        raise HetmemError("--cases wants at least 1 and --time-limit a positive number of seconds")
    out = args.out or str(results_dir() / "hetmem-fuzz.json")
    return fuzz.main(targets, args.cases, args.seed, args.time_limit, out, _console())


def cmd_fuzz_replica(args: argparse.Namespace) -> int:
    from . import fuzz_replica
    if args.connections < 1:
        raise HetmemError("--connections wants at least 1")
    out = args.out or str(results_dir() / "hetmem-fuzz-replica.json")
    return fuzz_replica.main(args.connections, args.seed, out, _console())


def cmd_fields(args: argparse.Namespace) -> int:
    from . import fields
    return fields.main(args, _console())


def cmd_compare(args: argparse.Namespace) -> int:
    from . import compare, workloads
    rest = args.workload[1:] if args.workload and args.workload[0] == "--" else args.workload
    if (args.iteration_at or args.window is not None) and not args.plan:
        raise HetmemError("--iteration-at and --window are for a program with --plan (the reference codes mark "
                          "their own iterations)")
    if args.plan:
        iteration = _iteration_env(args, rest)
        workload = workloads.PlanWorkload(args.plan, rest, iteration)
    else:
        workload = workloads.workload_for(rest)  # the PIC code, or an application by name: mg preset=W ...
    policies = compare.policy_order() if args.policies == "all" else [p.strip() for p in args.policies.split(",") if p.strip()]
    budget = compare.parse_size(args.budget) if args.budget else None
    # An unchanged program keeps its own thread settings (GROMACS refuses an OMP_NUM_THREADS that
    # differs from its -nt) unless --threads is given; the reference codes run on every core.
    threads = args.threads or (None if args.plan else os.cpu_count() or 1)
    tiers = args.tiers or os.environ.get("HM_TIERS") or compare.SLOW_TIER
    sweeps = [compare.parse_counts(text, name, high) if text else None
              for text, name, high in ((args.sweep_helpers, "--sweep-helpers", 16),
                                       (args.sweep_prefetch, "--sweep-prefetch", 64))]
    if args.plan and any(sweeps):
        raise HetmemError("--sweep-helpers and --sweep-prefetch sweep the PIC code's push; not with --plan")
    compare.run(workload, policies, args.fraction, budget, args.iterations, args.repeat, threads, tiers, args.out,
                _console(), *sweeps)
    return 0


# The reference applications, each a subcommand that runs its binary with the arguments given:
# name -> (binary, what it is, its arguments).
APPS = {
    "pic": ("hetmem-pic", "the reference 3D electromagnetic PIC code (docs/pic.md)", "INPUT [key=value ...]"),
    "mg": ("hetmem-mg", "the Fortran multigrid solver (docs/multigrid.md)", "[key=value ...]"),
    "amr": ("hetmem-amr", "the persistent-octree AMR workload (docs/amr.md)", "[--shape droplet] [--steps N] ..."),
}


def cmd_app(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    return run_program([find_program(APPS[args.command][0]), *cmd])


def cmd_demo(args: argparse.Namespace) -> int:
    import subprocess
    import tempfile
    env = dict(os.environ)
    pool = os.path.join(tempfile.gettempdir(), f"hetmem-demo-{os.getpid()}.pool")
    if "HM_TIERS" in env:
        Library()  # the user's HM_TIERS and the other options checked first: a typo is status 2
    env.setdefault("HM_TIERS", f"capacity=emul:optane,persistent=file:{pool}:256M")
    print(f"HM_TIERS={env['HM_TIERS']}")
    try:
        return subprocess.call([find_program("hetmem_demo")], env=env)
    finally:
        if os.path.exists(pool):
            os.unlink(pool)


def _launch(cmd: list[str], env: dict, replace: bool = False) -> int:
    """Runs a program as a shell would: its exit status, or 127/126 with the shell's message. With
    `replace`, the program takes this process's place (exec), as a shell's last command does: an
    MPI launcher's signals then reach it, and no interpreter waits beside it or exits after it."""
    if not cmd:
        raise HetmemError("no program given after --")
    prog = cmd[0]
    try:
        if replace:
            sys.stdout.flush()
            sys.stderr.flush()
            os.execvpe(prog, cmd, env)
        import subprocess
        proc = subprocess.run(cmd, env=env)
    except FileNotFoundError as exc:
        # Not found (the shell's 127), or found with an interpreter its #! line names that is not (126).
        import shutil
        if "/" in prog and not os.path.exists(prog):
            print(f"hetmem: error: {prog}: No such file or directory", file=sys.stderr)
            return 127
        if "/" not in prog and not shutil.which(prog, path=env.get("PATH")):
            print(f"hetmem: error: {prog}: command not found", file=sys.stderr)
            return 127
        print(f"hetmem: error: {prog}: {exc.strerror}", file=sys.stderr)
        return 126
    except PermissionError:
        print(f"hetmem: error: {prog}: Permission denied", file=sys.stderr)
        return 126
    except OSError as exc:
        print(f"hetmem: error: {prog}: {exc.strerror}", file=sys.stderr)
        return 126
    return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode


def _preload_env(extra: dict) -> dict:
    # HM_PROFILE_ROOT_PID marks the run's first process; one left by an enclosing run would make
    # this program a child of that one.
    env = {k: v for k, v in os.environ.items() if k != "HM_PROFILE_ROOT_PID"}
    env["LD_PRELOAD"] = preload_value(env.get("LD_PRELOAD"))
    env.update(extra)
    return env


def _file_state(path: str):
    """("file", inode, size, mtime) of a regular file, ("other",) for a device or pipe, None if absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    import stat
    return ("file", st.st_ino, st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else ("other",)


def _iteration_env(args: argparse.Namespace, cmd: list[str]) -> dict:
    """HM_ITERATION_AT / HM_ITERATION_WINDOW for a program that marks no iterations; HetmemError
    (saying why) for a window out of range or a function --iteration-at cannot hook."""
    extra = {}
    if getattr(args, "window", None) is not None:
        error = Library(init=False).check_option("HM_ITERATION_WINDOW", repr(args.window))
        if error:  # the range is the library's (base/options.cpp)
            raise HetmemError(f"--window {args.window}: {error}")
        extra["HM_ITERATION_WINDOW"] = repr(args.window)
    if getattr(args, "iteration_at", None):
        import shutil
        program = shutil.which(cmd[0]) if cmd else None
        if program:  # a program that is not found is reported by the launcher
            from .entry_points import check
            found = check(program, args.iteration_at)
            if found.error:
                raise HetmemError(f"--iteration-at {args.iteration_at}: {found.error}")
            extra["HM_ITERATION_AT"] = found.symbol
    return extra


def _add_iteration_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--iteration-at", metavar="FUNCTION",
                        help="end an inferred iteration at every call of FUNCTION (a symbol, or a C++ name such as "
                             "LAMMPS_NS::Neighbor::decide), for programs that mark none; the call must go through "
                             "the dynamic linker (checked before the program starts)")
    parser.add_argument("--window", type=float, metavar="SECONDS",
                        help="without --iteration-at: an inferred iteration every SECONDS (default 0.1; 0: none)")


def _mpi_rank() -> int | None:
    """This process's rank when an MPI launcher started several (Open MPI, MPICH/PMI, Slurm)."""
    for size, rank in (("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"), ("PMI_SIZE", "PMI_RANK"),
                       ("SLURM_NTASKS", "SLURM_PROCID")):
        try:
            if int(os.environ.get(size, "1")) > 1:
                return int(os.environ[rank])
        except (KeyError, ValueError):
            continue
    return None


def _profile_env(args: argparse.Namespace, cmd: list[str], trace: str) -> dict:
    """The environment of `hetmem profile` (HetmemError saying what is wrong)."""
    iteration = _iteration_env(args, cmd)
    # An option not given is left to the environment and the library's default.
    given = [(flag, name, str(value)) for flag, name, value in
             (("--depth", "HM_PROFILE_DEPTH", args.depth), ("--large", "HM_PROFILE_LARGE", args.large),
              ("--sample", "HM_PROFILE_SAMPLE", args.sample)) if value is not None]
    lib = Library(init=False) if given else None
    for flag, name, value in given:
        error = lib.check_option(name, value)
        if error:
            raise HetmemError(f"{flag} {value}: {error}")
    return _preload_env({"HM_PROFILE": trace, "HM_PROFILE_CHILDREN": "1" if args.children else "0",
                         **{name: value for _, name, value in given}, **iteration})


# Programs whose work is done by the processes they start.
LAUNCHERS = {"mpirun", "mpiexec", "orterun", "prterun", "srun", "aprun", "jsrun", "flux", "Rscript", "env",
             "nohup", "time", "timeout", "numactl", "taskset", "xargs", "parallel"}


def _launcher_kind(cmd: list[str]) -> str:
    """"an MPI launcher" / "a launcher" / "a script" when `cmd` starts other programs to do its work,
    else ""."""
    if not cmd:
        return ""
    name = os.path.basename(cmd[0])
    if name in LAUNCHERS:
        return "an MPI launcher" if name in ("mpirun", "mpiexec", "orterun", "prterun", "srun", "aprun", "jsrun") \
            else "a launcher"
    import shutil
    path = cmd[0] if "/" in cmd[0] else shutil.which(cmd[0])
    try:
        with open(path or "", "rb") as f:
            return "a script" if f.read(2) == b"#!" else ""
    except OSError:
        return ""


def cmd_profile(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    trace = os.path.abspath(args.output or f"hetmem-{os.path.basename(cmd[0]) if cmd else 'trace'}.hmtrace")
    rank = _mpi_rank()
    if rank is not None:
        trace += f".rank{rank}"  # mpirun -np N hetmem profile ...: one trace per rank
    launcher = _launcher_kind(cmd)
    if launcher and not args.children:
        print(f"hetmem: warning: {cmd[0]} is {launcher}: only it is profiled, not the program it starts; "
              "give --children to follow every process it starts"
              + (" (or start hetmem on each rank: mpirun -np N hetmem profile -- PROGRAM)"
                 if launcher == "an MPI launcher" else ""), file=sys.stderr)
    env = _profile_env(args, cmd, trace)
    before = _file_state(trace)  # a trace left from an earlier run must not pass for this one's
    import time
    started = time.time() - 1
    rc = _launch(cmd, env)
    after = _file_state(trace)
    if after is None or (after == before and after[0] == "file"):
        if rc in (126, 127):
            return rc  # the program did not start: the launcher said why
        print(f"hetmem: error: this run wrote no trace to {trace}: the preload library did not start in {cmd[0]}, "
              "or the program removed the trace (the reason, if one was given, is above; a statically linked "
              "program cannot be preloaded)", file=sys.stderr)
        return 2
    if after[0] == "file":
        print(f"hetmem: trace written to {trace} (hetmem report {trace})", file=sys.stderr)
        if args.children:
            import glob
            others = sorted(glob.glob(glob.escape(trace) + ".[0-9]*"))
            others = [p for p in others if os.path.getmtime(p) >= started]
            print(f"hetmem: {len(others)} trace(s) of other processes beside it (TRACE.PID)"
                  + "".join(f"\n  {p}" for p in others), file=sys.stderr)
    return rc


def cmd_report(args: argparse.Namespace) -> int:
    from .report import analyse, text_report, write_report
    from .trace import TraceError, read_trace

    try:
        trace = read_trace(args.trace)
    except TraceError as exc:
        raise HetmemError(str(exc)) from None
    result = analyse(trace, top=args.top)
    if args.json:
        import json
        print(json.dumps(result, indent=1))
    else:
        print(text_report(result))
    out = args.out or os.path.splitext(args.trace)[0] + "-report"
    files = write_report(result, out)
    print(f"\nreport: {files[-2]} (plots and JSON beside it)", file=sys.stderr)
    if trace.partial:
        print("hetmem: warning: partial trace: " + "; ".join(trace.problems), file=sys.stderr)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from .report import analyse, plan_text
    from .trace import TraceError, read_trace

    try:
        trace = read_trace(args.trace)
    except TraceError as exc:
        raise HetmemError(str(exc)) from None
    result = analyse(trace, top=10)
    text = plan_text(result)
    out = args.output or os.path.splitext(args.trace)[0] + ".plan"
    with open(out, "w") as f:
        f.write(text)
    sites = sum(1 for line in text.splitlines() if line.startswith("site "))
    print(f"hetmem: plan with {sites} site(s) written to {out} (hetmem run --plan {out} -- PROGRAM)", file=sys.stderr)
    if sites == 0:
        print("hetmem: warning: no site large or long-lived enough to place; the plan changes nothing", file=sys.stderr)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    return _launch(cmd, _run_env(args, cmd), replace=True)


def launch_environment(argv: list[str]) -> tuple[list[str], dict]:
    """The program and the environment that `hetmem run ...` or `hetmem profile ...` (argv without
    "hetmem") would start it with, without starting it: for measuring the machinery alone."""
    args = build_parser().parse_args(argv)
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    if args.command == "run":
        env = _run_env(args, cmd)
    elif args.command == "profile":
        env = _profile_env(args, cmd, os.path.abspath(args.output or "hetmem.hmtrace"))
    else:
        raise HetmemError(f"hetmem {args.command} does not start a program")
    return cmd, env


def _run_env(args: argparse.Namespace, cmd: list[str]) -> dict:
    """The environment of `hetmem run` (HetmemError saying what is wrong)."""
    extra = {}
    if args.plan and args.rules:
        raise HetmemError("give --rules or --plan, not both (a plan is a rules file with class targets)")
    if args.plan:
        args.rules = args.plan
        # A plan's classes are placed by static placement unless another policy is asked for.
        args.policy = args.policy or os.environ.get("HM_POLICY") or "hetmem-static"
    # The environment's own options as the library reads them (HM_TIERS, sizes and budgets, then
    # HM_POLICY): a typo is refused here, not ignored by a program that never asks hetmem.
    lib = Library()
    policy = args.policy or os.environ.get("HM_POLICY")
    if policy:
        error = lib.check_policy(policy)
        if error:
            raise HetmemError(error + ("" if args.policy else " (HM_POLICY in the environment)"))
    if args.policy:
        extra["HM_POLICY"] = args.policy
    if args.rules:
        rules = os.path.abspath(args.rules)
        error = lib.check_rules(rules)
        if error:
            raise HetmemError(error)
        extra["HM_RULES"] = rules
    if args.memkind:
        # memkind's clients and OpenMP runtimes then load hetmem's libmemkind (docs/memkind.md).
        path = os.environ.get("LD_LIBRARY_PATH")
        extra["LD_LIBRARY_PATH"] = find_memkind_dir() + (":" + path if path else "")
    return _preload_env({**extra, **_iteration_env(args, cmd)})


def version_text() -> str:
    """The command's version and the library it loads (which may be another build's)."""
    from . import __version__
    try:
        lib = Library(init=False)
        return f"hetmem {__version__} (libhetmem {lib.version()}, {lib.path})"
    except HetmemError as e:
        return f"hetmem {__version__} (libhetmem not loaded: {e})"


class _Version(argparse.Action):
    """--version: looks the library up only when asked."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print the version of the command and its library")

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command's parser; with `command`, only that command's own parser under it (what `main`
    parses with: each command's parser costs start-up, and `bench` and `fields` import modules for
    theirs)."""

    def want(name: str) -> bool:
        return command is None or name == command

    p = argparse.ArgumentParser(prog="hetmem", description="Heterogeneous-memory placement for simulations.")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    if want("tiers"):
        t = sub.add_parser("tiers", help="list the tiers of this machine and the role each plays",
                           description="Lists the tiers (HM_TIERS and discovery) with the role each plays ("
                           + ROLE_HELP + "), capacity and bandwidth/latency, saying where each figure came from.")
        t.add_argument("--json", action="store_true", help="print JSON instead of a table")
        t.add_argument("--bench", action="store_true",
                       help="first run the STREAM + pointer-chase benchmark on every tier and update the calibration")
        t.add_argument("--quick", action="store_true", help="with --bench or --validate: 3 repetitions; --validate "
                       "--quick then exits 1 only on a kernel off in every round")
        t.add_argument("--threads", type=int, help="with --bench: largest thread count (default: all cores)")
        t.add_argument("--size-mib", type=int, help="with --bench: array size (default: 4x the last-level cache); with "
                       "--validate: the microkernels' array size (default: the validator's own, 64 with --quick)")
        t.add_argument("--out", help="with --bench: JSON results file (default: results/ in the build tree)")
        t.add_argument("--validate", action="store_true",
                       help="check each emulated tier against its model: microkernels (sequential read/write, "
                            "read-modify-write, triad, random gathers, pointer chase) on DRAM and the tier, measured "
                            "against predicted slowdown; exit 1 if a kernel is off by more than 10%%")
        t.add_argument("--validate-out", help="with --validate: JSON results file (default: results/ in the build tree)")
        t.set_defaults(func=cmd_tiers)

    if want("options"):
        o = sub.add_parser("options", help="print every HM_* option, its effective value and where it came from")
        o.add_argument("--json", action="store_true")
        o.set_defaults(func=cmd_options)

    if want("policies"):
        po = sub.add_parser("policies", help="list the placement policies (HM_POLICY) and what each does")
        po.add_argument("--json", action="store_true")
        po.set_defaults(func=cmd_policies)

    if want("profile"):
        pr = sub.add_parser("profile", help="run a program under the heap and phase profiler and write a trace",
                            description="Runs a program under the heap and phase profiler and writes a trace. On each "
                            "rank of an MPI job, hetmem-run --profile TRACE (the same launcher in C, with these "
                            "options) starts in about 2 ms, without a Python interpreter.")
        pr.add_argument("-o", "--output", help="trace file (default hetmem-PROGRAM.hmtrace)")
        pr.add_argument("--depth", type=int, help="return addresses per call site (0..32; default: HM_PROFILE_DEPTH, 8)")
        pr.add_argument("--large", help="objects at least this large get a mapping of their own and referenced bytes "
                        "per phase or inferred iteration (default: HM_PROFILE_LARGE, 256K)")
        pr.add_argument("--sample", metavar="BYTES",
                        help="record smaller allocations by sampling, one every BYTES allocated on average, and "
                             "estimate their counts in the report (default: HM_PROFILE_SAMPLE, 64K); 0 records "
                             "every allocation and free")
        pr.add_argument("--children", action="store_true",
                        help="follow every process the program starts: each forked child and each exec'd program writes "
                             "its own trace, TRACE.PID (a forked child that then execs: TRACE.PID up to the exec, "
                             "TRACE.PID.2 after it). Without it only the program itself is traced, up to its exit or "
                             "exec")
        _add_iteration_options(pr)
        pr.add_argument("cmd", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS")
        pr.set_defaults(func=cmd_profile)

    if want("report"):
        rp = sub.add_parser("report", help="tables, plots and an HTML page from a trace")
        rp.add_argument("trace")
        rp.add_argument("--out", help="directory for report.html, report.json and the PNG plots (default TRACE-report)")
        rp.add_argument("--json", action="store_true", help="print the analysis as JSON instead of tables")
        rp.add_argument("--top", type=int, default=10, help="rows in the top-site and object tables")
        rp.set_defaults(func=cmd_report)

    if want("run"):
        rn = sub.add_parser("run", help="run a program with the preload library: placement rules, scoped modes",
                            description="Runs a program with the preload library: placement rules or a plan, "
                            "scoped modes. On each rank of an MPI job, hetmem-run (the same launcher in C, "
                            "with these options) starts in under 2 ms, without a Python interpreter.")
        rn.add_argument("--rules", help="rules file (docs/profiler.md); without it only hm_mode_push scopes route")
        rn.add_argument("--plan", help="plan file from `hetmem plan` (call sites -> classes); policy hetmem-static "
                        "unless --policy says otherwise")
        rn.add_argument("--policy", help="placement policy for object classes (HM_POLICY; docs/placement.md)")
        rn.add_argument("--memkind", action="store_true", help="the program (and its OpenMP runtime) loads hetmem's "
                        "libmemkind: memory kinds, hbw_malloc and OpenMP memory spaces on hetmem's tiers "
                        "(docs/memkind.md)")
        _add_iteration_options(rn)
        rn.add_argument("cmd", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS")
        rn.set_defaults(func=cmd_run)

    if want("plan"):
        pl = sub.add_parser("plan", help="turn a profile into an editable plan: call sites -> object class and priority",
                            description="Writes the classes `hetmem report` suggests (from lifetime, size and per-phase "
                            "referenced bytes) as a plan for `hetmem run --plan`: placement without changing the program.")
        pl.add_argument("trace")
        pl.add_argument("-o", "--output", help="plan file (default TRACE.plan)")
        pl.set_defaults(func=cmd_plan)

    if want("bench"):
        from . import benchmarks
        b = sub.add_parser("bench", help="run a benchmark of the library")
        b.add_argument("what", choices=[bm.name for bm in benchmarks.BENCHMARKS],
                       help="; ".join(f"{bm.name}: {bm.doc}" for bm in benchmarks.BENCHMARKS).replace("%", "%%"))
        b.add_argument("--quick", action="store_true", help="smaller sizes and fewer repetitions")
        b.add_argument("--ranks", help="pic only: the problem over these MPI rank counts (e.g. 1,2), one thread each")
        b.add_argument("--warpx", metavar="SOURCES_OR_BINARY",
                       help="pic only: run WarpX 24.10 beside hetmem-pic, built from these sources (twice: "
                            "-march=native and WarpX's own flags; kept under the build tree) or this executable")
        b.add_argument("--amrex", metavar="DIR", help="pic with --warpx: AMReX 24.10's sources (default: a directory "
                                                      "named amrex* beside WarpX's)")
        b.add_argument("--large", action="store_true",
                       help="octree only: the transformation and the per-step comparison on trees of at least 10^7 "
                            "octants (about 35 minutes)")
        b.add_argument("--out", help="JSON results file (default: results/hetmem-bench-WHAT.json in the build tree)")
        b.set_defaults(func=cmd_bench)

    for name, (binary, what, usage) in APPS.items():
        if not want(name):
            continue
        ap = sub.add_parser(name, help=f"{what}: hetmem {name} {usage}")
        ap.add_argument("cmd", nargs=argparse.REMAINDER, help=f"the arguments of {binary} (`hetmem {name} -- --help` lists them)")
        ap.set_defaults(func=cmd_app)

    if want("fields"):
        from .fields import add_parser as add_fields_parser
        add_fields_parser(sub, cmd_fields)

    if want("compare"):
        cp = sub.add_parser("compare", help="run the PIC code under every placement policy with a fast budget below "
                            "its footprint: times, ratios, phases, spaces, classes; JSON, PNG and HTML",
                            description="Runs the workload (the PIC code: a preset or input file, default preset:L1) "
                            "first under all-fast without a budget (the footprint and the upper bound), then under "
                            "every policy with the fast budget at a fraction of the footprint. docs/placement.md.")
        cp.add_argument("--policies", default="all", help="comma-separated policies (default: all)")
        cp.add_argument("--sweep-helpers", help="Figure 12: also run hetmem with HM_HELPERS at each of these counts "
                        "(e.g. 0,1,2,3), beside the helper model's choice")
        cp.add_argument("--sweep-prefetch", help="Figure 11: also run hetmem-static+prefetch with every object fast and "
                        "HM_PREFETCH_DISTANCE at each of these distances (e.g. 0,1,2,4,8), beside the model's k")
        cp.add_argument("--fraction", type=float, default=0.25, help="fast budget as a fraction of the footprint")
        cp.add_argument("--budget", help="fast budget in bytes (512M, 1G, ...) instead of a fraction")
        cp.add_argument("--iterations", type=int, default=6, help="iterations (steps) per run, at least 2")
        cp.add_argument("--repeat", type=int, default=1, help="repetitions of each policy, interleaved (median)")
        cp.add_argument("--threads", type=int, help="OpenMP threads, OMP_NUM_THREADS (default: all cores; with --plan, "
                        "the program's own setting is left alone)")
        cp.add_argument("--tiers", help="HM_TIERS for the runs (default: $HM_TIERS, else capacity=emul:optane)")
        cp.add_argument("--out", default="hetmem-compare", help="directory for compare.json, compare.html, PNG plots")
        cp.add_argument("--plan", help="compare an unchanged program with this plan instead of the PIC code: "
                        "hetmem compare --plan PLAN -- PROGRAM ARGS")
        _add_iteration_options(cp)
        cp.add_argument("workload", nargs=argparse.REMAINDER,
                        help="INPUT (file or preset:NAME) and key=value overrides; with --plan: -- PROGRAM ARGS")
        cp.set_defaults(func=cmd_compare)

    if want("fuzz"):
        fz = sub.add_parser("fuzz", help="mutate valid inputs of every application and tool and check each case runs "
                            "or is refused at once with one line naming the key (docs/fuzzing.md)")
        fz.add_argument("--cases", type=int, default=2000, help="cases to run, spread over the targets (default 2000)")
        fz.add_argument("--seed", type=int, default=1, help="the random seed (the same seed, the same cases)")
        fz.add_argument("--targets", default="pic,mg,amr,rules,env,preload",
                        help="comma-separated: pic, mg, amr, rules, env (HM_* read by hetmem-tiers), preload (HM_* "
                        "inside /bin/echo); default all")
        fz.add_argument("--time-limit", type=float, default=5.0, help="seconds a case may run (default 5)")
        fz.add_argument("--out", help="JSON results (default: results/hetmem-fuzz.json in the build tree)")
        fz.set_defaults(func=cmd_fuzz)

    if want("fuzz-replica"):
        fr = sub.add_parser("fuzz-replica", help="hostile connections to a keyed hetmem-replica: the server must outlive "
                            "them with its replica unchanged (docs/replica.md)")
        fr.add_argument("--connections", type=int, default=10000, help="hostile connections (default 10000)")
        fr.add_argument("--seed", type=int, default=1, help="the random seed")
        fr.add_argument("--out", help="JSON results (default: results/hetmem-fuzz-replica.json in the build tree)")
        fr.set_defaults(func=cmd_fuzz_replica)

    if want("demo"):
        d = sub.add_parser("demo", help="allocate on every tier, move an array, print the per-tier accounting")
        d.set_defaults(func=cmd_demo)
    return p


def _quiet_stdout() -> None:
    """The reader of our output went away (`hetmem report T | head -1`): whatever is still buffered
    goes nowhere, so that the interpreter's flush at exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except OSError:
        pass


def _commands(parser: argparse.ArgumentParser) -> dict:
    """The commands `parser` was built with (name -> parser)."""
    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def _near_miss(parser: argparse.ArgumentParser, argv: list[str]) -> str:
    """'did you mean' for a command that is not one (argparse lists the choices only)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    commands = _commands(parser)
    if first is None or first in commands or argv.index(first) != 0:
        return ""
    import difflib  # only for a word that is not a command: every run of the command would pay it
    close = difflib.get_close_matches(first, list(commands), n=3, cutoff=0.6)
    return f"hetmem: error: '{first}' is not a command; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _terminated(signum, frame) -> None:
    raise Interrupted()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv else None)
    if not _commands(parser):  # not a command (--help, a typo): the whole parser says what is
        parser = build_parser()
    if hint := _near_miss(parser, argv):
        print(hint, file=sys.stderr)
        return 2
    args, extra = parser.parse_known_args(argv)
    # An optional positional after options (`hetmem fields list --config F class=rd`): argparse has
    # passed it by when it reads the positionals before the options.
    if len(extra) == 1 and not extra[0].startswith("-") and getattr(args, "request", None) == "":
        args.request, extra = extra[0], []
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        signal.signal(signal.SIGTERM, _terminated)
    except ValueError:
        pass  # main() called from another thread than the main one: SIGTERM keeps its handler
    try:
        status = args.func(args)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except HetmemError as exc:
        print(f"hetmem: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hetmem: interrupted", file=sys.stderr)
        return 130
    except Interrupted:
        # Every `with` block was left on the way here: temporary directories removed, child runs ended.
        print("hetmem: interrupted (SIGTERM); temporary files removed", file=sys.stderr)
        return 143
