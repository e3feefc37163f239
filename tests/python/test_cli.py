"""The `hetmem` command, run as a user runs it (a subprocess), against the freshly built library."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def command_env(env_extra=None, unset=("HM_TIERS", "HM_FAST_BUDGET")):
    """The environment a user's command gets here: the machine's HM_TIERS and budget unset, the
    package on PYTHONPATH."""
    env = dict(os.environ)
    for name in unset:
        env.pop(name, None)
    env["PYTHONPATH"] = str(ROOT / "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    return env


def run(*args, env_extra=None, unset=("HM_TIERS", "HM_FAST_BUDGET"), cwd=None):
    return subprocess.run([sys.executable, "-m", "hetmem", *args], capture_output=True, text=True,
                          env=command_env(env_extra, unset), cwd=cwd, timeout=600)


def test_tiers_json_lists_roles(tmp_path):
    pool = tmp_path / "p.pool"
    r = run("tiers", "--json", env_extra={"HM_TIERS": f"capacity=emul:cxl,persistent=file:{pool}:16M"})
    assert r.returncode == 0, r.stderr
    tiers = {t["name"]: t for t in json.loads(r.stdout)}
    assert tiers["dram"]["roles"] == ["fast"]
    assert tiers["dram"]["figures"] in ("measured", "hwloc", "sysfs")
    assert tiers["emul:cxl"]["roles"] == ["capacity"]
    assert tiers["emul:cxl"]["figures"] == "emulated"
    assert tiers["emul:cxl"]["read_bw_mbps"] == pytest.approx(0.5 * tiers["dram"]["read_bw_mbps"], rel=1e-9)
    persistent = tiers[f"file:{pool}"]
    assert persistent["roles"] == ["persistent"] and persistent["kind"] == "file"
    assert persistent["capacity"] == 16 << 20


def test_tiers_table_defaults_to_emulated_capacity():
    r = run("tiers")
    assert r.returncode == 0, r.stderr
    assert "dram" in r.stdout and "fast" in r.stdout
    assert "emul:optane" in r.stdout and "capacity" in r.stdout
    assert "emulated" in r.stdout


def test_malformed_hm_tiers_is_a_clear_error_not_a_traceback():
    r = run("tiers", env_extra={"HM_TIERS": "capacity=emul:3dxp"})
    assert r.returncode == 2
    assert "HM_TIERS" in r.stderr and "3dxp" in r.stderr and "optane, cxl, nvbm" in r.stderr
    assert "Traceback" not in r.stderr


def test_malformed_budget_names_variable():
    r = run("options", env_extra={"HM_FAST_BUDGET": "lots"})
    assert r.returncode == 2
    assert "HM_FAST_BUDGET='lots'" in r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.count("HM_FAST_BUDGET='lots'") == 1, "said once (the library), not again by the command"


def test_bench_options_of_one_benchmark_are_refused_for_another():
    r = run("bench", "pic", "--large")
    assert r.returncode == 2, r.stderr
    assert "--large is for `hetmem bench octree`" in r.stderr and "Traceback" not in r.stderr


def test_a_start_up_error_is_printed_once():
    r = run("tiers", env_extra={"HM_TIERS": "capacity=emul:bogus"})
    assert r.returncode == 2
    assert r.stderr.count("unknown emulation profile 'bogus'") == 1, r.stderr


def test_options_show_value_and_source():
    r = run("options", "--json", env_extra={"HM_FAST_BUDGET": "2G"})
    assert r.returncode == 0, r.stderr
    options = {o["name"]: o for o in json.loads(r.stdout)}
    assert options["HM_FAST_BUDGET"]["value"] == "2G"
    assert options["HM_FAST_BUDGET"]["source"] == "environment"
    assert options["HM_RETAIN"]["source"] == "default"
    assert all(o["doc"] for o in options.values())


def test_unknown_command_is_a_usage_error():
    r = run("frobnicate")
    assert r.returncode == 2
    assert "invalid choice" in r.stderr


def test_bench_writes_table_json_and_calibration(tmp_path):
    out = tmp_path / "bench.json"
    cal = tmp_path / "calibration"
    r = run("tiers", "--bench", "--quick", "--size-mib", "16", "--out", str(out),
            env_extra={"HM_CALIBRATION": str(cal)})
    assert r.returncode == 0, r.stderr
    assert "triad" in r.stdout and "latency ns" in r.stdout
    data = json.loads(out.read_text())
    names = [t["name"] for t in data["tiers"]]
    assert "dram" in names and "emul:optane" in names
    dram = next(t for t in data["tiers"] if t["name"] == "dram")
    assert all(row["triad_mbps"] > 0 for row in dram["threads"])
    text = cal.read_text()
    assert text.startswith("# hetmem calibration v2")
    assert "method = full" in text and "gather_ns = " in text and "measured = 20" in text
    read_row = [line for line in text.splitlines() if line.startswith("read_bw_mbps")][0]
    assert len(read_row.split("=")[1].split()) == len(dram["threads"])
    assert "calibration: full" in r.stdout


def test_validate_compares_each_kernel_with_the_model(tmp_path):
    out = tmp_path / "validate.json"
    r = run("tiers", "--validate", "--quick", "--size-mib", "16", "--validate-out", str(out))
    # --quick exits 1 only on a kernel NOT MET (every round off by more than 10%): the table says which.
    assert r.returncode in (0, 1), r.stderr
    assert "predicted" in r.stdout and "pointer chase" in r.stdout
    data = json.loads(out.read_text())
    tiers = {row["tier"] for row in data["rows"]}
    assert tiers == {"emul:optane", "emul:cxl"}
    kernels = {row["kernel"] for row in data["rows"]}
    assert {"sequential read", "sequential write", "read-modify-write", "STREAM triad", "random 8-byte gathers",
            "pointer chase"} <= kernels
    assert {row["access"] for row in data["rows"]} == {"declared", "sampled"}
    # The model always predicts a slowdown on these profiles; what was measured is the table's business.
    assert all(row["predicted"] > 1.0 and row["dram_ms"] > 0 for row in data["rows"])
    assert "exit status by the spread" in r.stdout
    assert (r.returncode == 0) == all(row["verdict"] != "NOT MET" for row in data["rows"])
    assert all(row["verdict"] in ("MET", "NOT MET", "cannot tell", "NOT JUDGED") and row["error_low"] <= row["error_high"]
               for row in data["rows"])
    # A row is left unjudged only when fewer than two rounds had the kernel's cores (another program had them).
    assert all(row["core_share"] < 0.9 and row["rounds_left_out"] > 0
               for row in data["rows"] if row["verdict"] == "NOT JUDGED")


def test_demo_runs_and_frees_everything():
    r = run("demo")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "per-tier accounting" in r.stdout
    assert "file:" in r.stdout and "emul:optane" in r.stdout
    assert "same address" in r.stdout


def test_missing_library_is_explained(tmp_path):
    r = run("tiers", env_extra={"HETMEM_LIB": str(tmp_path / "nope.so")})
    assert r.returncode == 2
    assert "HETMEM_LIB" in r.stderr and "Traceback" not in r.stderr


def test_run_validates_the_policy_and_passes_it_on():
    r = run("run", "--policy", "fastest", "--", "true")
    assert r.returncode == 2 and "first-touch, all-fast, slow-only" in r.stderr and "Traceback" not in r.stderr
    r = run("run", "--policy", "slow-only", "--", sys.executable, "-c", "import os; print(os.environ['HM_POLICY'])")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "slow-only"


def test_run_gives_the_command_its_place_to_the_program():
    """Once its checks pass, `hetmem run` execs the program: the same process (an MPI launcher's
    signals reach the program, no interpreter waits beside it), and the program's own status."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("HM_TIERS", None)
    p = subprocess.Popen([sys.executable, "-m", "hetmem", "run", "--", "sh", "-c", "echo $$; exit 3"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 3, err
    assert int(out.strip()) == p.pid
    r = run("run", "--", "no-such-program-hetmem")
    assert r.returncode == 127 and "no-such-program-hetmem: command not found" in r.stderr


def test_run_and_profile_answer_a_program_that_cannot_start_as_a_shell_does(tmp_path):
    """127 for a program that is not there, 126 for one that is there but cannot run (not
    executable, or a script whose #! interpreter is missing), each with the shell's words."""
    plain = tmp_path / "not-executable"
    plain.write_text("data\n")
    script = tmp_path / "script"
    script.write_text("#!/nonexistent/interpreter-hm\n")
    script.chmod(0o755)
    cases = [([str(tmp_path / "absent")], 127, "absent: No such file or directory"),
             ([str(plain)], 126, "not-executable: Permission denied"),
             ([str(script)], 126, "script: No such file or directory")]
    for command in (["run"], ["profile", "-o", str(tmp_path / "t.hmtrace")]):
        for program, status, said in cases:
            r = run(*command, "--", *program)
            assert r.returncode == status and said in r.stderr, (command, program, r.returncode, r.stderr)


def test_run_on_each_mpi_rank_imports_only_what_it_needs(tmp_path):
    """`mpirun -np N hetmem run ... -- PROGRAM` starts the command on every rank, and its start-up
    is the rank's: up to the program's exec it imports neither pathlib, subprocess, typing,
    dataclasses nor rich (each a few milliseconds, docs/benchmarks.md)."""
    program = ("import os, sys\nfrom hetmem.cli import main\n"
               "def at_exec(*args):\n"
               "    print('exec', *(m for m in ('pathlib', 'subprocess', 'typing', 'dataclasses', 'rich') "
               "if m in sys.modules))\n"
               "    sys.exit(0)\n"
               "os.execvpe = at_exec\nsys.exit(main(sys.argv[1:]))\n")
    rules = tmp_path / "all.rules"
    rules.write_text("all -> capacity\n")
    for args in (["run", "--", "true"], ["run", "--plan", str(rules), "--", "true"]):
        r = subprocess.run([sys.executable, "-c", program, *args], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, PYTHONPATH=str(ROOT / "python")))
        assert r.returncode == 0 and r.stdout.split() == ["exec"], (args, r.stdout, r.stderr[-500:])


@pytest.mark.parametrize("args", [("tiers",), ("options",), ("report", "TRACE")])
def test_a_closed_pipe_ends_quietly(tmp_path, args):
    """`hetmem tiers | head -1` and the like, made certain: the reader is gone before the first write.
    No traceback, status 0."""
    if "TRACE" in args:
        trace = tmp_path / "t.hmtrace"
        programs = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build")) / "tests" / "programs"
        assert run("profile", "-o", str(trace), "--", str(programs / "prog_alloc_pattern")).returncode == 0
        args = tuple(str(trace) if a == "TRACE" else a for a in args)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    env.pop("HM_TIERS", None)
    p = subprocess.Popen([sys.executable, "-m", "hetmem", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=600) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_policies_are_the_librarys_and_each_can_be_selected():
    r = run("policies", "--json")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    names = [p["name"] for p in listed]
    assert len(names) == len(set(names)) >= 9 and all(p["doc"] for p in listed)
    assert {"first-touch", "hetmem-static", "hetmem", "reactive", "memory-mode"} <= set(names)
    # Selected in a fresh process: a policy is chosen before objects are placed, and this test
    # process may hold objects of other tests (hetmem.arrays places them in-process).
    check = ("import json, sys\nfrom hetmem.lib import plain_library\n"
             "print(json.dumps({n: plain_library().check_policy(n) for n in sys.argv[1:]}))")
    r = subprocess.run([sys.executable, "-c", check, *names, "no-such-policy"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "python")), timeout=60)
    answers = json.loads(r.stdout)
    assert [n for n in names if answers[n] is not None] == []
    refusal = answers["no-such-policy"]
    assert refusal and all(n in refusal for n in names)


def test_the_library_in_a_python_process_leaves_other_modules_cxx_exceptions_alone():
    """libhetmem loaded by ctypes, then a C++ extension (kiwisolver, which matplotlib's layouts use)
    throws and catches: the library interposes no unwinder (libunwind is loaded by a profile only,
    and privately), so the exception is caught where it was aborting the process."""
    program = ("from hetmem.lib import plain_library\nplain_library().policies()\nimport kiwisolver as k\n"
               "s, x = k.Solver(), k.Variable('x')\ns.addConstraint(x >= 10)\n"
               "try:\n    s.addConstraint(x <= 5)\nexcept k.UnsatisfiableConstraint:\n    print('caught')\n")
    r = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "python")))
    assert r.returncode == 0 and r.stdout.strip() == "caught", (r.returncode, r.stderr[-500:])


def test_run_refuses_a_mistyped_option_in_the_environment_instead_of_running_without_it(tmp_path):
    """`hetmem run -- PROGRAM` with a typo in HM_TIERS, a budget or HM_POLICY: refused with the
    library's message (exit 2) before the program starts, as `profile` and `run --plan` refuse
    them; the program would otherwise run without the placement the user asked for."""
    marker = tmp_path / "ran"
    program = ["sh", "-c", f"touch {marker}"]
    for env, said in (({"HM_TIERS": "capacity=emul:optan"}, "unknown emulation profile 'optan'"),
                      ({"HM_FAST_BUDGET": "2Q"}, "HM_FAST_BUDGET='2Q'"),
                      ({"HM_POLICY": "nope"}, "'nope' is not a policy"),
                      ({"HM_ITERATION_WINDOW": "abc"}, "HM_ITERATION_WINDOW='abc': expected a number from 0 to 3600")):
        r = run("run", "--", *program, env_extra=env)
        assert r.returncode == 2 and said in r.stderr, (env, r.stderr)
        assert not marker.exists(), f"{env}: the program ran"
    r = run("run", "--window", "9999", "--", *program)
    assert r.returncode == 2 and "expected a number from 0 to 3600" in r.stderr and not marker.exists(), r.stderr
    r = run("run", "--", *program)
    assert r.returncode == 0 and marker.exists(), r.stderr


def hetmem_run_in_c(*args, env_extra=None, cwd=None):
    """tools/hetmem_run.c, in the environment `run` gives the command."""
    build = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build"))
    return subprocess.run([str(build / "hetmem-run"), *args], capture_output=True, text=True,
                          env=command_env(env_extra), cwd=cwd, timeout=60)


def test_hetmem_run_in_c_gives_a_program_the_environment_hetmem_run_gives_it(tmp_path):
    """`hetmem-run` (for each rank of an MPI job, docs/cli.md) starts a program as `hetmem run`
    does: every variable the program sees has the same value, for each of its options (the
    preload library's HM_PROFILE_ROOT_PID is the process's own id)."""
    (tmp_path / "all.rules").write_text("all -> capacity\n")
    dump = [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]
    for args in ([], ["--rules", str(tmp_path / "all.rules")], ["--plan", "./sub/../all.rules"],
                 ["--plan", "all.rules", "--policy", "hetmem"], ["--policy", "slow-only"], ["--memkind"],
                 ["--window", "0.5"]):
        seen = []
        for r in (run("run", *args, "--", *dump, cwd=tmp_path), hetmem_run_in_c(*args, "--", *dump, cwd=tmp_path)):
            assert r.returncode == 0, (args, r.stderr)
            env = json.loads(r.stdout)
            env.pop("HM_PROFILE_ROOT_PID", None)
            seen.append(env)
        assert seen[0] == seen[1], (args, set(seen[0].items()) ^ set(seen[1].items()))
        assert "libhetmem_preload.so" in seen[1]["LD_PRELOAD"]
    assert seen[1]["HM_ITERATION_WINDOW"] == "0.5"


def test_hetmem_run_in_c_profiles_a_program_as_hetmem_profile_does(tmp_path):
    """`hetmem-run --profile TRACE` (for each rank of an MPI job) gives the program the environment
    `hetmem profile -o TRACE` gives it, for each of the profile's options and on an MPI rank (the
    trace TRACE.rankN), and the trace it writes is one `hetmem report` reads."""
    dump = [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]
    rank = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1"}
    for args, env_extra in ((["--profile", "t.hmtrace"], {}), (["--profile", "./sub/../t.hmtrace", "--depth", "4"], {}),
                            (["--profile", "t.hmtrace", "--large", "1M", "--sample", "0", "--children"], {}),
                            (["--profile", "t.hmtrace", "--window", "0.5"], {}), (["--profile", "t.hmtrace"], rank)):
        seen = []
        python_args = ["-o", *args[1:]]
        for r in (run("profile", *python_args, "--", *dump, cwd=tmp_path, env_extra=env_extra),
                  hetmem_run_in_c(*args, "--", *dump, cwd=tmp_path, env_extra=env_extra)):
            assert r.returncode == 0, (args, r.stderr)
            env = json.loads(r.stdout)
            env.pop("HM_PROFILE_ROOT_PID", None)
            seen.append(env)
        assert seen[0] == seen[1], (args, set(seen[0].items()) ^ set(seen[1].items()))
        expected = tmp_path / ("t.hmtrace.rank1" if env_extra else "t.hmtrace")
        assert seen[1]["HM_PROFILE"] == str(expected), seen[1]["HM_PROFILE"]
        assert expected.stat().st_size > 0
    build = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build"))
    r = hetmem_run_in_c("--profile", "steps.hmtrace", "--depth", "2", "--", str(build / "tests" / "programs" /
                        "prog_cxx_steps"), "3", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "3 steps 0\n", r.stderr
    from hetmem.trace import read_trace
    trace = read_trace(str(tmp_path / "steps.hmtrace"))
    assert trace.stack_depth == 2 and not trace.partial, trace.problems
    report = run("report", "--json", str(tmp_path / "steps.hmtrace"), cwd=tmp_path)
    assert report.returncode == 0 and "warning" not in report.stderr, report.stderr


def test_hetmem_run_in_c_passes_a_cxx_iteration_name_to_the_program(tmp_path):
    """hetmem-run takes --iteration-at with a C++ name as `hetmem run` does; the preload library
    resolves it in the program (tests/python/test_profiler.py counts the iterations) and says so
    at the start when no object calls it."""
    build = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build"))
    program = str(build / "tests" / "programs" / "prog_cxx_steps")
    (tmp_path / "all.rules").write_text("all -> capacity\n")
    for name, hooked in (("std::chrono::_V2::steady_clock::now", True), ("std::chrono::steady_clock::later", False)):
        summary = tmp_path / "summary.json"
        r = hetmem_run_in_c("--plan", "all.rules", "--iteration-at", name, "--", program, "3", cwd=tmp_path,
                            env_extra={"HM_SUMMARY": str(summary)})
        assert r.returncode == 0 and r.stdout == "3 steps 0\n", r.stderr
        assert json.loads(summary.read_text())["iterations_inferred"] == ("function" if hooked else "window"), name
        assert ("no call to hook" in r.stderr) != hooked, r.stderr
        if not hooked:
            assert f"no loaded object calls a function named {name}" in r.stderr, r.stderr


# The last column: `hetmem run` refuses it in the same words. It does not for --window (it echoes
# the number as it parsed it, 9999.0) or an unknown option (argparse's own words).
@pytest.mark.parametrize("args, env, status, said, same_words", [
    (["--rules", "a.rules", "--plan", "b.plan", "--", "true"], {}, 2, "give --rules or --plan, not both", True),
    (["--policy", "nope", "--", "true"], {}, 2, "'nope' is not a policy", True),
    (["--", "true"], {"HM_POLICY": "nope"}, 2, "'nope' is not a policy", True),
    (["--", "true"], {"HM_FAST_BUDGET": "2Q"}, 2, "HM_FAST_BUDGET='2Q'", True),
    (["--", "true"], {"HM_TIERS": "capacity=emul:optan"}, 2, "unknown emulation profile 'optan'", True),
    (["--rules", "/nonexistent/x.rules", "--", "true"], {}, 2, "/nonexistent/x.rules", True),
    (["--rules", "BAD", "--", "true"], {}, 2, "BAD", True),
    (["--window", "9999", "--", "true"], {}, 2, "--window 9999", False),
    (["--plan"], {}, 2, "--plan needs a value", False),
    (["--bogus", "--", "true"], {}, 2, "unrecognized argument: --bogus", False),
    (["--memkind"], {}, 2, "no program given after --", False),
    (["--profile", "t.hmtrace", "--plan", "b.plan", "--", "true"], {}, 2, "--profile writes a trace", False),
    (["--sample", "0", "--", "true"], {}, 2, "--sample is an option of --profile", False),
    (["--profile", "t.hmtrace", "--depth", "99", "--", "true"], {}, 2,
     "--depth 99: HM_PROFILE_DEPTH='99': expected an integer from 0 to 32", False),
    (["--profile", "t.hmtrace", "--large", "lots", "--", "true"], {}, 2, "--large lots: HM_PROFILE_LARGE='lots'", False),
    (["--", "no-such-program-hm"], {}, 127, "no-such-program-hm: command not found", True),
    (["--", "/nonexistent/prog"], {}, 127, "/nonexistent/prog: No such file or directory", True),
    (["--", "./not-executable"], {}, 126, "./not-executable: Permission denied", True),
    (["--", "./script"], {}, 126, "./script: No such file or directory", True),
])
def test_hetmem_run_in_c_refuses_what_hetmem_run_refuses_with_its_message(tmp_path, args, env, status, said,
                                                                          same_words):
    """The same checks as `hetmem run`, before the program starts, and the same words after its
    own prefix; the program does not run."""
    (tmp_path / "BAD").write_text("all -> nowhere\n")
    (tmp_path / "not-executable").write_text("data\n")
    (tmp_path / "script").write_text("#!/nonexistent/interpreter-hm\n")
    (tmp_path / "script").chmod(0o755)
    r = hetmem_run_in_c(*args, env_extra=env, cwd=tmp_path)
    assert r.returncode == status and said in r.stderr, (r.returncode, r.stderr)
    assert r.stderr.splitlines()[-1].startswith("hetmem-run: error: "), r.stderr  # after the usage, as argparse
    if same_words:
        python = run("run", *args, env_extra=env, cwd=tmp_path)
        ours = r.stderr.splitlines()[-1].removeprefix("hetmem-run: error: ")
        theirs = python.stderr.splitlines()[-1].removeprefix("hetmem: error: ")
        assert python.returncode == status and ours == theirs, (ours, theirs)


def test_hetmem_run_in_c_gives_its_place_to_the_program():
    """It execs the program: the same process, and the program's own exit status."""
    build = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build"))
    p = subprocess.Popen([str(build / "hetmem-run"), "--", "sh", "-c", "echo $$; exit 4"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=command_env())
    out, err = p.communicate(timeout=60)
    assert p.returncode == 4 and int(out.strip()) == p.pid, err


@pytest.mark.parametrize("args, status, said", [
    (["run", "--rules", "a.rules", "--plan", "b.plan", "--", "true"], 2, "give --rules or --plan, not both"),
    (["run", "--policy", "nope", "--", "true"], 2, "'nope' is not a policy"),
    (["run", "--window", "9999", "--", "true"], 2, "--window 9999"),
    (["profile", "--iteration-at", "no_such_function_hm", "--", "/bin/true"], 2, "--iteration-at no_such_function_hm"),
    (["run", "--", "no-such-program-hm"], 127, "no-such-program-hm: command not found"),
    (["compre"], 2, "'compre' is not a command"),
    (["report", "/nonexistent/t.hmtrace"], 2, "/nonexistent/t.hmtrace"),
])
def test_every_refusal_of_the_command_reads_hetmem_error(args, status, said):
    """One prefix for every refusal, as argparse's own: `hetmem: error: ...`, then what was wrong."""
    r = run(*args)
    assert r.returncode == status, r.stderr
    first = r.stderr.splitlines()[0] if r.stderr else ""
    assert first.startswith("hetmem: error: ") and said in r.stderr, r.stderr


def test_every_program_reports_the_projects_version():
    """`--version` on the command and on each application gives the version CMake builds."""
    import re
    sys.path.insert(0, str(ROOT / "python"))
    from hetmem import __version__
    project = re.search(r"project\(hetmem VERSION (\S+)", (ROOT / "CMakeLists.txt").read_text()).group(1)
    assert __version__ == project
    build = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build"))
    r = run("--version")
    assert r.returncode == 0 and r.stdout.startswith(f"hetmem {project} (libhetmem {project}, "), r.stdout + r.stderr
    for app in ("apps/pic/hetmem-pic", "apps/amr/hetmem-amr", "apps/mg/hetmem-mg", "apps/replica/hetmem-replica",
                "hetmem-tiers", "hetmem-run", "examples/hetmem_demo", "bench/hetmem-bench-alloc", "bench/hetmem-bench-mg-hypre",
                "bench/hetmem-bench-octree", "bench/hetmem-bench-stream", "bench/hetmem-bench-tiers",
                "bench/hetmem-validate-emul"):
        if not (build / app).exists() and app.startswith("bench/"):
            continue  # built with HM_ENABLE_BENCH=OFF
        r = subprocess.run([str(build / app), "--version"], capture_output=True, text=True)
        name = app.split("/")[-1]
        assert r.returncode == 0 and r.stdout == f"{name} {project}\n" and not r.stderr, (app, r.stdout, r.stderr)


def test_a_mistyped_command_gets_a_suggestion():
    r = run("compre")
    assert r.returncode == 2
    assert "'compre' is not a command; did you mean 'compare'?" in r.stderr


def test_sigterm_ends_a_long_command_cleanly_with_progress_in_its_log(tmp_path):
    """A batch job's time limit: progress lines in the log without a terminal, then on SIGTERM
    'interrupted', status 143 and no temporary directory left behind."""
    import signal
    import time
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TMPDIR=str(tmp_path))
    env.pop("HM_TIERS", None)
    proc = subprocess.Popen([sys.executable, "-m", "hetmem", "bench", "emul", "--quick", "--out",
                             str(tmp_path / "emul.json")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    first = proc.stderr.readline()  # the first progress line: a run is done and the next has started
    assert first.startswith("hetmem bench emul: 1/"), first
    assert any(p.name.startswith("hetmem-bench-emul-") for p in tmp_path.iterdir())
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, rest = proc.communicate(timeout=60)
    assert proc.returncode == 143, rest
    assert "interrupted (SIGTERM)" in rest
    assert not any(p.name.startswith("hetmem-bench-emul-") for p in tmp_path.iterdir())
    assert not (tmp_path / "emul.json").exists()
