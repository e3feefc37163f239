"""The profiler end to end: `hetmem profile` on programs with known allocation patterns (C, C++,
Fortran, OpenMP, Python), `hetmem report`, `hetmem run` with rules and scoped modes, fork, exec,
signals and bad input."""

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build"))
PROGRAMS = BUILD / "tests" / "programs"
sys.path.insert(0, str(ROOT / "python"))

from hetmem.trace import ALLOC, read_trace  # noqa: E402


def hetmem(*args, env_extra=None, cwd=None, timeout=300):
    env = dict(os.environ)
    for name in ("HM_TIERS", "HM_PROFILE", "HM_RULES", "LD_PRELOAD", "HM_PROFILE_ROOT_PID"):
        env.pop(name, None)
    env["PYTHONPATH"] = str(ROOT / "python")
    # Every allocation recorded, so that counts are exact; the sampled default is tested by the
    # tests that set HM_PROFILE_SAMPLE (test_sampled_*).
    env["HM_PROFILE_SAMPLE"] = "0"
    env.update(env_extra or {})
    # A session of its own: a run that hangs is stopped whole (the program under hetmem too).
    proc = subprocess.Popen([sys.executable, "-m", "hetmem", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def profile(tmp_path, program, *args, name="t.hmtrace", options=()):
    trace = tmp_path / name
    r = hetmem("profile", "-o", str(trace), *options, "--", str(program), *args)
    return r, trace


def report_json(trace):
    r = hetmem("report", "--json", "--out", str(trace) + "-report", str(trace))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def sites_named(result, function):
    return [s for s in result["sites"] if s["function"].startswith(function)]


# The default profile samples small allocations (HM_PROFILE_SAMPLE=64K): 2,000,000 blocks of
# 256 B each have the chance p = 1 - exp(-256 / 65536) = 0.0039 of being recorded, so about 7,800
# are, and the estimated count N_recorded / p has a relative standard deviation of
# sqrt((1 - p) / (N p)) = 1.1%. The bound of 6% is 5.3 of them. The two 8 MiB arrays are at least
# the mean: recorded exactly.
def test_sampled_profile_estimates_small_allocations_and_records_large_ones_exactly(tmp_path):
    n, size = 2_000_000, 256
    r, trace = profile(tmp_path, PROGRAMS / "prog_churn", str(n), str(size), options=("--sample", "64K"))
    assert r.returncode == 0, r.stderr
    result = report_json(trace)
    assert not result["partial"]
    recording = result["recording"]
    assert recording["sampled"] and recording["sample_bytes"] == 64 << 10
    assert recording["recorded_allocations"] < 0.01 * n, "sampling records a small share of the allocations"
    small = sites_named(result, "churn_small")
    assert len(small) == 1
    assert abs(small[0]["count"] - n) < 0.06 * n, small[0]
    assert abs(small[0]["bytes"] - n * size) < 0.06 * n * size, small[0]
    assert small[0]["short_lived_fraction"] > 0.98, "the frees of sampled blocks are recorded"
    arrays = sites_named(result, "churn_arrays")
    assert len(arrays) == 1 and arrays[0]["count"] == 2 and arrays[0]["bytes"] == 2 * (8 << 20)
    assert arrays[0]["recorded"] == 2
    text = hetmem("report", "--out", str(tmp_path / "text"), str(trace))
    assert text.returncode == 0 and "smaller ones sampled" in text.stdout and "estimates" in text.stdout


def test_bad_sample_size_is_refused_before_the_program_runs(tmp_path):
    marker = tmp_path / "ran"
    r = hetmem("profile", "-o", str(tmp_path / "t.hmtrace"), "--sample", "lots", "--", "sh", "-c", f"touch {marker}")
    assert r.returncode == 2 and "--sample lots" in r.stderr and "HM_PROFILE_SAMPLE" in r.stderr, r.stderr
    assert not marker.exists()


def test_c_program_counts_and_bytes_exact(tmp_path):
    r, trace = profile(tmp_path, PROGRAMS / "prog_alloc_pattern")
    assert r.returncode == 0, r.stderr
    result = report_json(trace)
    assert not result["partial"]
    blocks = sites_named(result, "make_blocks")
    assert len(blocks) == 1 and blocks[0]["count"] == 1000 and blocks[0]["bytes"] == 100000
    assert blocks[0]["file"].endswith("alloc_pattern.c") and blocks[0]["line"] > 0
    big = sites_named(result, "make_big")
    assert len(big) == 1 and big[0]["count"] == 3 and big[0]["bytes"] == 3 * (8 << 20)
    fns = result["totals"]["functions"]
    for fn in ("calloc", "posix_memalign", "aligned_alloc", "memalign", "valloc", "pvalloc"):
        assert fns[fn] == 1, fn
    assert fns["realloc"] == 3  # realloc(p) = free + alloc, reallocarray(NULL) = alloc
    # Everything the program allocated it freed; the trace pairs them all.
    assert result["totals"]["allocations"] == result["totals"]["frees"]


def test_cxx_every_new_and_delete(tmp_path):
    r, trace = profile(tmp_path, PROGRAMS / "prog_cxx_pattern")
    assert r.returncode == 0, r.stderr
    result = report_json(trace)
    fns = result["totals"]["functions"]
    assert fns["new"] == 30 and fns["new[]"] == 30 and fns["delete"] == 30 and fns["delete[]"] == 30
    sizes = sorted((s["count"], s["bytes"]) for s in sites_named(result, "forms"))
    assert sizes == [(10, 40), (10, 40), (10, 280), (10, 640), (10, 1000), (10, 1920)]


@pytest.mark.skipif(not (PROGRAMS / "prog_fortran_pattern").exists(), reason="Fortran disabled in this build")
def test_fortran_allocate(tmp_path):
    r, trace = profile(tmp_path, PROGRAMS / "prog_fortran_pattern")
    assert r.returncode == 0, r.stderr
    main = sites_named(report_json(trace), "MAIN__")
    assert len(main) == 1 and main[0]["count"] == 50 and main[0]["bytes"] == 50 * 8000


def test_openmp_threads(tmp_path):
    r, trace = profile(tmp_path, PROGRAMS / "prog_omp_pattern")
    assert r.returncode == 0, r.stderr
    result = report_json(trace)
    site = sites_named(result, "per_thread")
    assert len(site) == 1 and site[0]["count"] == 2000 and site[0]["bytes"] == 2000 * 48
    t = read_trace(trace)
    per_site = t.events[(t.events["op"] == ALLOC) & (t.events["size"] == 48)]
    assert len(np.unique(per_site["thread"])) == 2, "both threads recorded, each in its own buffer"


def test_python_interpreter(tmp_path):
    python = os.path.realpath(sys.executable)  # the interpreter itself, not a launcher script
    r, trace = profile(tmp_path, python, "-c", "x = [bytearray(10485760) for _ in range(5)]")
    assert r.returncode == 0, r.stderr
    ev = read_trace(trace).events
    assert int(((ev["op"] == ALLOC) & (ev["size"] == 10485761)).sum()) == 5


def test_iteration_at_ends_an_iteration_at_each_call_of_the_function(tmp_path):
    """--iteration-at: the check before the start (the library's ELF reader) finds the interpreter's
    PLT call of getppid, and the preload library's trampoline ends one iteration per call (the last
    iteration runs from the last call to the exit)."""
    python = os.path.realpath(sys.executable)
    counts = {}
    for calls in (0, 7):
        r, trace = profile(tmp_path, python, "-c", f"import os; [os.getppid() for _ in range({calls})]",
                           name=f"calls{calls}.hmtrace", options=("--iteration-at", "getppid"))
        assert r.returncode == 0, r.stderr
        iterations = report_json(trace)["iterations"]
        assert iterations["how"] == "function" and iterations["function"] == "getppid", iterations
        counts[calls] = iterations["count"]
    assert counts == {0: 1, 7: 8}


def test_iteration_at_a_cxx_name_is_resolved_in_the_program(tmp_path):
    """HM_ITERATION_AT holding a C++ name, as any launcher may pass it (hetmem-run on each MPI rank,
    a bare LD_PRELOAD): the preload library finds the one symbol the program's objects call by that
    name (libstdc++'s steady_clock::now, through the PLT) and ends an iteration at each call. A name
    no object calls is said, and time windows are used instead."""
    name = "std::chrono::_V2::steady_clock::now"
    for steps in (0, 7):
        trace = tmp_path / f"steps{steps}.hmtrace"
        r = hetmem("profile", "-o", str(trace), "--", str(PROGRAMS / "prog_cxx_steps"), str(steps),
                   env_extra={"HM_ITERATION_AT": name})
        assert r.returncode == 0 and r.stdout == f"{steps} steps 0\n", r.stderr
        assert "--iteration-at" not in r.stderr, r.stderr
        iterations = report_json(trace)["iterations"]
        assert iterations["how"] == "function" and iterations["function"] == name, iterations
        assert iterations["count"] == steps + 1, iterations
    r = hetmem("profile", "-o", str(tmp_path / "none.hmtrace"), "--", str(PROGRAMS / "prog_cxx_steps"), "2",
               env_extra={"HM_ITERATION_AT": "std::chrono::no_such_clock::now"})
    assert r.returncode == 0, r.stderr
    assert ("no call to hook, time windows used instead: no loaded object calls a function named "
            "std::chrono::no_such_clock::now through the dynamic linker") in r.stderr, r.stderr


def test_lifetime_and_size_table(tmp_path):
    r, trace = profile(tmp_path, PROGRAMS / "prog_lifetime")
    assert r.returncode == 0, r.stderr
    rows = {row["size_mib"]: row for row in report_json(trace)["lifetime_size"]}
    MiB = 1 << 20
    assert (rows["(0,1)"]["short_lived"], rows["(0,1)"]["long_lived"]) == (4, 0)
    assert (rows["[1,2)"]["short_lived"], rows["[1,2)"]["long_lived"]) == (4, 0)
    assert (rows["[2,4)"]["short_lived"], rows["[2,4)"]["long_lived"]) == (4, 0)
    assert (rows["[8,16)"]["short_lived"], rows["[8,16)"]["long_lived"]) == (0, 1)
    assert (rows["[16,32)"]["short_lived"], rows["[16,32)"]["long_lived"]) == (0, 4)
    assert rows["[16,32)"]["accumulated_bytes"] == 80 * MiB
    assert rows["[16,32)"]["peak_bytes"] == 40 * MiB, "two 20 MiB arrays overlap at the hand-over"
    assert rows["[2,4)"]["peak_bytes"] == 3 * MiB


def test_allocations_per_phase(tmp_path):
    r, trace = profile(tmp_path, PROGRAMS / "prog_lifetime")
    assert r.returncode == 0, r.stderr
    work = {p["phase"]: p for p in report_json(trace)["phases"]}["work"]
    MiB = 1 << 20
    assert work["calls"] == 4
    assert work["allocations"] == 4 * 4  # three temporaries and the 20 MiB array, every iteration
    assert work["bytes_allocated"] == 4 * (MiB // 2 + 3 * MiB // 2 + 3 * MiB + 20 * MiB)


def test_referenced_bytes_per_object_and_phase(tmp_path):
    r, trace = profile(tmp_path, PROGRAMS / "prog_referenced")
    assert r.returncode == 0, r.stderr
    result = report_json(trace)
    phases = {p["phase"]: p for p in result["phases"]}
    assert phases["a"]["calls"] == 3 and phases["b"]["calls"] == 3
    objects = sorted(result["object_phase_referenced"], key=lambda o: int(o["object"], 16))
    assert len(objects) == 3 and all(o["size"] == 64 << 20 for o in objects)
    fractions = sorted((round(o["referenced_fraction"].get("a", 0), 2), round(o["referenced_fraction"].get("b", 0), 2))
                       for o in objects)
    # A: a quarter in phase a, nothing in b; C: half in b; B: all of it in b (within 3% of the object).
    expect = sorted([(0.25, 0.0), (0.0, 0.5), (0.0, 1.0)])
    for got, want in zip(fractions, expect):
        assert got == pytest.approx(want, abs=0.03), (fractions, expect)


def test_report_outputs_html_plots_and_classes(tmp_path):
    r, trace = profile(tmp_path, PROGRAMS / "prog_referenced")
    out = tmp_path / "report"
    rr = hetmem("report", "--out", str(out), str(trace))
    assert rr.returncode == 0, rr.stderr
    assert "time per phase" in rr.stdout and "suggested classes" in rr.stdout
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 3, "self-contained page with embedded plots"
    for png in ("lifetime_size.png", "phases.png", "object_phase.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    classes = {c["class"] for c in json.loads((out / "report.json").read_text())["suggested_classes"]}
    assert classes & {"hot", "streaming", "cold"}, classes


def test_fork_child_never_writes_the_parent_trace(tmp_path):
    r, trace = profile(tmp_path, PROGRAMS / "prog_fork_exec")
    assert r.returncode == 0, r.stderr
    result = report_json(trace)
    blocks = sites_named(result, "blocks")
    assert [b["count"] for b in blocks] == [10], "only the parent's 10 blocks, not the children's 77 and 55"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("t.hmtrace.")) == []


def test_followed_children_write_their_own_traces(tmp_path):
    r, trace = profile(tmp_path, PROGRAMS / "prog_fork_exec", options=("--children",))
    assert r.returncode == 0, r.stderr
    children = sorted(p for p in tmp_path.iterdir() if p.name.startswith("t.hmtrace.") and p.is_file())
    # the first child (77 blocks), the second child up to its exec, the program it exec'd (55 blocks)
    assert len(children) == 3, children
    assert sum(p.name.endswith(".2") for p in children) == 1, "the exec'd program never overwrites its parent's"
    counts = sorted(sum(s["count"] for s in sites_named(report_json(c), "blocks")) for c in children)
    assert counts == [0, 55, 77]
    assert "3 trace(s) of other processes" in r.stderr and all(str(c) in r.stderr for c in children)
    assert [b["count"] for b in sites_named(report_json(trace), "blocks")] == [10]


def test_the_runtime_is_preloaded_first_and_leaves_with_the_shim(tmp_path):
    """`hetmem run` and `hetmem profile` preload libhetmem.so.0 before the shim (the dynamic loader
    then does not search for it); a profile that does not follow children takes both out of the
    environment its program's children inherit, and a user's own entry stays."""
    user = "/lib/x86_64-linux-gnu/libc.so.6"
    ran = hetmem("run", "--", "/usr/bin/env", env_extra={"LD_PRELOAD": user})
    assert ran.returncode == 0, ran.stderr
    entries = next(l for l in ran.stdout.splitlines() if l.startswith("LD_PRELOAD=")).split("=", 1)[1].split(":")
    assert [Path(e).name for e in entries] == ["libhetmem.so.0", "libhetmem_preload.so", "libc.so.6"], entries
    r = hetmem("profile", "-o", str(tmp_path / "t.hmtrace"), "--", "/usr/bin/env", env_extra={"LD_PRELOAD": user})
    assert r.returncode == 0, r.stderr
    assert f"LD_PRELOAD={user}" in r.stdout.splitlines(), "a profile without --children leaves children no hetmem library"
    followed, _ = profile(tmp_path, "/usr/bin/env", name="c.hmtrace", options=("--children",))
    assert followed.returncode == 0, followed.stderr
    kept = next(l for l in followed.stdout.splitlines() if l.startswith("LD_PRELOAD="))
    assert "libhetmem.so.0" in kept and "libhetmem_preload.so" in kept


def test_killed_program_leaves_a_readable_partial_trace(tmp_path):
    r, trace = profile(tmp_path, PROGRAMS / "prog_dies", "kill")
    assert r.returncode == 137
    t = read_trace(trace)
    assert t.partial and not t.complete
    mallocs = (t.events["op"] == ALLOC) & (t.events["size"] == 64)
    assert int(mallocs.sum()) >= 5001, "a program killed loses at most its last second of events"
    rr = hetmem("report", "--out", str(tmp_path / "rep"), str(trace))
    assert rr.returncode == 0 and "PARTIAL TRACE" in rr.stdout and "Traceback" not in rr.stderr


def test_exit_without_destructors_still_finishes_the_trace(tmp_path):
    """_exit runs no destructors (dash leaves through it): the trace is finished before it."""
    r, trace = profile(tmp_path, PROGRAMS / "prog_dies", "exit")
    assert r.returncode == 0, r.stderr
    t = read_trace(trace)
    assert t.complete and not t.problems
    assert int((t.events["op"] == ALLOC).sum()) >= 5000


def test_events_before_exec_are_kept(tmp_path):
    r, trace = profile(tmp_path, PROGRAMS / "prog_exec_after")
    assert r.returncode == 0, r.stderr
    t = read_trace(trace)
    assert t.complete and not t.problems
    assert [program for _, program in t.execs] == ["true"]
    mallocs = t.events[t.events["fn"] == 1]
    frees = t.events[t.events["fn"] == 10]
    assert len(mallocs[(mallocs["size"] >= 100) & (mallocs["size"] < 200)]) == 100
    assert len(frees) >= 50
    rr = hetmem("report", "--out", str(tmp_path / "rep"), str(trace))
    assert rr.returncode == 0 and "PARTIAL" not in rr.stdout and "exec'd true" in rr.stdout, rr.stdout


def test_a_program_that_closes_and_reuses_every_descriptor_keeps_its_files_and_the_trace(tmp_path):
    """A launcher's child closes every descriptor before it execs (Open MPI's daemons do): the
    trace's number may then be the program's. Nothing of the trace may land in the program's file,
    and the trace goes on in its own file, whole."""
    own = tmp_path / "own.txt"
    r, trace = profile(tmp_path, PROGRAMS / "prog_closes_fds", str(own))
    assert r.returncode == 0, r.stderr
    assert own.read_bytes() == b"mine\n" * 397, "the program's file holds its own lines only"
    assert "profiler disabled" not in r.stderr and "preload" not in r.stderr, r.stderr
    t = read_trace(trace)
    assert t.complete and not t.problems
    mallocs = t.events[t.events["fn"] == 1]
    assert len(mallocs[(mallocs["size"] >= 300) & (mallocs["size"] < 500)]) == 200, "the allocations before and after"


def test_a_large_array_grown_by_realloc_keeps_its_pages_under_the_profiler(tmp_path):
    """A profiled large object has a mapping of its own. An array grown by realloc 1 MiB at a time
    to 48 MiB must move its pages with it, as the C library's mremap does, not be copied into a
    new mapping at each growth: its contents survive, and the growth faults in no more pages than
    the plain run's (copies faulted in 14% more, and took 3x the time)."""
    program = str(PROGRAMS / "prog_grows")
    plain = subprocess.run([program], capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0 and plain.stdout.startswith("grown ok"), plain.stdout
    # No inferred iterations: a sample of referenced pages inside the loop (its first one probes
    # what an accessed-bit update costs on 1,024 fresh pages) would count against the growth.
    r, trace = profile(tmp_path, PROGRAMS / "prog_grows", options=("--window", "0"))
    assert r.returncode == 0 and r.stdout.startswith("grown ok"), r.stdout + r.stderr
    plain_faults, profiled_faults = int(plain.stdout.split()[2]), int(r.stdout.split()[2])
    assert profiled_faults <= 1.05 * plain_faults + 64, (profiled_faults, plain_faults)
    t = read_trace(trace)
    assert t.complete and not t.problems
    reallocs = t.events[(t.events["fn"] == 3) & (t.events["op"] == 1) & (t.events["size"] >= 2 << 20)]
    assert sorted(reallocs["size"] >> 20) == list(range(2, 49)), "every growth recorded, at its size"


def test_an_mpi_launcher_is_recorded_without_inferred_iterations(tmp_path):
    """A process named as an MPI launcher or daemon (mpirun, prted, srun, ...) only starts and
    serves the ranks: its allocations are recorded, but no time windows are inferred in it, whose
    samples of referenced pages would take a core from the ranks. The same program under its own
    name gets its windows."""
    for name in ("churn", "mpirun"):
        shutil.copy(PROGRAMS / "prog_churn", tmp_path / name)
        r, trace = profile(tmp_path, tmp_path / name, "20000", "64", name=f"{name}.hmtrace")
        assert r.returncode == 0, r.stderr
        result = report_json(trace)
        assert result["totals"]["allocations"] > 20000, f"{name}: its allocations are recorded"
        if name == "mpirun":
            assert result["iterations"]["how"] != "window", result["iterations"]
            assert result["sampled"]["sampled"] == 0, result["sampled"]
        else:
            assert result["iterations"]["how"] == "window", result["iterations"]


def test_a_trace_removed_under_the_program_stops_the_profile_with_a_message(tmp_path):
    """The trace removed and its descriptor closed by the program: the profile cannot go on. It
    says why, never recreates or writes another file, and the program runs to its end."""
    own = tmp_path / "own.txt"
    trace = tmp_path / "gone.hmtrace"
    r = hetmem("profile", "-o", str(trace), "--", str(PROGRAMS / "prog_closes_fds"), str(own), str(trace))
    assert own.read_bytes() == b"mine\n" * 397, "the program ran to its end"
    assert f"profiler disabled: the trace {trace} was removed or replaced while the program ran" in r.stderr, r.stderr
    assert r.returncode == 2 and f"this run wrote no trace to {trace}" in r.stderr, r.stderr
    assert not trace.exists()


def test_a_shell_that_execs_its_last_command_leaves_a_whole_trace(tmp_path):
    r = hetmem("profile", "-o", str(tmp_path / "sh.hmtrace"), "--", "sh", "-c", "ls >/dev/null; ls >/dev/null")
    assert r.returncode == 0, r.stderr
    t = read_trace(tmp_path / "sh.hmtrace")
    assert t.complete and not t.problems
    assert (t.events["op"] == ALLOC).sum() > 0


def test_bad_traces_are_clear_errors(tmp_path):
    missing = hetmem("report", str(tmp_path / "nope.hmtrace"))
    assert missing.returncode == 2 and "no such trace file" in missing.stderr and "Traceback" not in missing.stderr
    junk = tmp_path / "junk.hmtrace"
    junk.write_bytes(b"not a trace at all")
    r = hetmem("report", str(junk))
    assert r.returncode == 2 and "not a hetmem trace" in r.stderr
    _, good = profile(tmp_path, PROGRAMS / "prog_alloc_pattern")
    data = bytearray(good.read_bytes())
    future = tmp_path / "future.hmtrace"
    future.write_bytes(bytes(data[:8]) + (9).to_bytes(4, "little") + bytes(data[12:]))
    r = hetmem("report", str(future))
    assert r.returncode == 2 and "version 9" in r.stderr and "reads versions 1 to 5" in r.stderr
    cut = tmp_path / "cut.hmtrace"
    cut.write_bytes(bytes(data[: len(data) // 2]))
    r = hetmem("report", "--out", str(tmp_path / "cut"), str(cut))
    assert r.returncode == 0 and "PARTIAL TRACE" in r.stdout and "truncated: the trace ends inside a record" in r.stdout
    for size in (5, 30):
        head = tmp_path / f"head{size}.hmtrace"
        head.write_bytes(bytes(data[:size]))
        r = hetmem("report", str(head))
        assert r.returncode == 2 and "truncated header" in r.stderr, r.stderr


def test_damage_is_told_from_truncation_and_located(tmp_path):
    """100 bytes overwritten in the middle of a trace of many event blocks: the report says damaged
    (not truncated), where, and keeps the events before and after the damage."""
    r, good = profile(tmp_path, PROGRAMS / "prog_dies", "exit")
    assert r.returncode == 0, r.stderr
    whole = read_trace(good)
    data = bytearray(good.read_bytes())
    # The second events block of the three (2048 + 2048 + 904 events): 100 bytes in its middle.
    pos, blocks = 64, []
    while pos < len(data):
        rtype, rbytes = struct.unpack_from("<II", data, pos)
        if rtype == 1:
            blocks.append((pos, rbytes, struct.unpack_from("<I", data, pos + 20)[0]))
        pos += rbytes
    assert len(blocks) == 3, blocks
    start, size, count = blocks[1]
    middle = start + size // 2 - 50
    data[middle:middle + 100] = bytes(range(100))
    damaged = tmp_path / "damaged.hmtrace"
    damaged.write_bytes(bytes(data))
    t = read_trace(damaged)
    assert len(t.problems) == 1 and t.problems[0].startswith("damaged: bytes "), t.problems
    first, last = (int(x) for x in t.problems[0].split()[2].split(".."))
    assert first <= middle and last >= middle + 99, "the skipped range covers the damage"
    assert len(t.events) == len(whole.events) - count, "only the damaged block's events are lost"
    assert t.complete, "reading went on to the end record"
    rr = hetmem("report", "--out", str(tmp_path / "rep"), str(damaged))
    assert rr.returncode == 0 and "PARTIAL TRACE: damaged" in rr.stdout


def test_missing_program_behaves_like_the_shell(tmp_path):
    r = hetmem("profile", "-o", str(tmp_path / "x"), "--", "no-such-program-hm")
    assert r.returncode == 127 and "no-such-program-hm: command not found" in r.stderr
    r = hetmem("run", "--", str(tmp_path / "absent"))
    assert r.returncode == 127 and "No such file or directory" in r.stderr


@pytest.mark.skipif(not (PROGRAMS / "prog_mode_switch").exists(), reason="Fortran disabled in this build")
def test_fortran_mode_switch_around_unchanged_allocate():
    r = hetmem("run", "--", str(PROGRAMS / "prog_mode_switch"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "landed on the capacity tier" in r.stdout


def probe_placement(tmp_path, rules_text):
    """prog_rules_probe run under `rules_text`: the run, and where each of its blocks landed."""
    rules = tmp_path / "rules.txt"
    rules.write_text(rules_text)
    r = hetmem("run", "--rules", str(rules), "--", str(PROGRAMS / "prog_rules_probe"),
               env_extra={"HM_TIERS": "capacity=emul:cxl"})
    assert r.returncode == 0, r.stdout + r.stderr
    return r, dict(line.split() for line in r.stdout.splitlines())


def test_rules_route_by_function_and_size(tmp_path):
    _, placed = probe_placement(tmp_path, "# particles to the capacity tier, large arrays to the fast tier\n"
                                          "function particles_alloc -> capacity\n"
                                          "size >= 3M -> fast\n"
                                          "size >= 2M -> huge   # hugetlb pool, else transparent huge pages\n")
    assert placed == {"particles": "emul:cxl", "field": "dram", "small": "libc", "medium": "dram", "grown": "dram",
                      "chain": "libc"}


def test_a_site_that_grows_its_blocks_with_realloc_is_placed(tmp_path):
    """A call site that allocates by realloc of a block it got from the C library (sqlite's
    allocation wrapper) is placed as its rule says, contents kept; one no rule names stays with the
    C library."""
    r, placed = probe_placement(tmp_path, "function grown_realloc -> capacity\n")
    assert placed == {"particles": "libc", "field": "libc", "small": "libc", "medium": "libc", "grown": "emul:cxl",
                      "chain": "libc"}
    assert "placed nothing" not in r.stderr, r.stderr


def test_all_to_one_tier_keeps_every_block_there_through_realloc(tmp_path):
    """Under `all -> TIER` rules malloc, free and realloc take the thread cache's own paths: a
    small block that realloc grows past its size class (8 bytes at a time to 4 KiB, then shrunk)
    stays on the tier with its contents, as every other block of the program."""
    _, placed = probe_placement(tmp_path, "all -> capacity\n")
    assert set(placed) == {"particles", "field", "small", "medium", "grown", "chain"}
    assert set(placed.values()) == {"emul:cxl"}, placed


def test_a_plans_class_leaves_allocations_below_hm_class_min_to_the_c_library(tmp_path):
    """A class rule places a site's allocations of HM_CLASS_MIN (4 KiB) or more; smaller ones (and
    all of them below a larger HM_CLASS_MIN) stay with the C library."""
    plan = tmp_path / "cold.plan"
    plan.write_text("function particles_alloc -> class cold\n")
    placed = {}
    for floor in (None, "8M"):
        env = {"HM_TIERS": "capacity=emul:cxl", **({"HM_CLASS_MIN": floor} if floor else {})}
        r = hetmem("run", "--plan", str(plan), "--", str(PROGRAMS / "prog_rules_probe"), env_extra=env)
        assert r.returncode == 0, r.stdout + r.stderr
        placed[floor] = dict(line.split() for line in r.stdout.splitlines())["particles"]
    assert placed == {None: "emul:cxl", "8M": "libc"}  # particles_alloc makes one 4 MiB block


@pytest.mark.parametrize("target", ["fast", "capacity"])
@pytest.mark.parametrize("program", ["python-numpy", "fortran"])
def test_whole_heap_rules_survive_exit_time_frees(tmp_path, target, program):
    """Libraries free memory in their own exit-time destructors (libgfortran closing its units, numpy's
    modules), after every C++ static of hetmem would have been destroyed: the tiers must outlive them."""
    if program == "fortran" and not (PROGRAMS / "prog_fortran_pattern").exists():
        pytest.skip("Fortran disabled in this build")
    rules = tmp_path / "all.rules"
    rules.write_text(f"all -> {target}\n")
    cmd = ([sys.executable, "-c", "import numpy; print(numpy.arange(10).sum())"] if program == "python-numpy"
           else [str(PROGRAMS / "prog_fortran_pattern")])
    r = hetmem("run", "--rules", str(rules), "--", *cmd)
    assert r.returncode == 0, f"status {r.returncode}: {r.stderr}"
    if program == "python-numpy":
        assert r.stdout.strip() == "45"


def test_whole_heap_to_capacity(tmp_path):
    rules = tmp_path / "all.rules"
    rules.write_text("all -> capacity\n")
    r = hetmem("run", "--rules", str(rules), "--", str(PROGRAMS / "prog_rules_probe"),
               env_extra={"HM_TIERS": "capacity=emul:cxl"})
    assert r.returncode == 0, r.stderr
    assert set(dict(line.split() for line in r.stdout.splitlines()).values()) == {"emul:cxl"}


def test_whole_heap_rules_give_small_requests_the_c_librarys_smallest_block(tmp_path):
    """The C library's smallest block holds 24 bytes: a program that grows a 16-byte block to 24
    (sqlite does, 200,000 times in the benchmark's run) keeps it in place under the rules too."""
    rules = tmp_path / "all.rules"
    rules.write_text("all -> capacity\n")
    code = ("import ctypes; c = ctypes.CDLL(None); c.malloc.restype = c.realloc.restype = ctypes.c_void_p; "
            "c.realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]; "
            "c.malloc_usable_size.argtypes = [ctypes.c_void_p]; p = c.malloc(16); "
            "print(c.malloc_usable_size(p), c.realloc(p, 24) == p)")
    r = hetmem("run", "--rules", str(rules), "--", sys.executable, "-c", code, env_extra={"HM_TIERS": "capacity=emul:cxl"})
    assert r.returncode == 0, r.stderr
    usable, in_place = r.stdout.split()
    assert int(usable) >= 24 and in_place == "True", r.stdout


def test_placement_follows_a_program_that_a_launcher_execs(tmp_path):
    """Rscript execs R, a job script execs the code: the rules apply to the program the launcher
    starts (the preload library stays in LD_PRELOAD), and a launcher's own short-lived children
    do not report the plan's sites as unused."""
    rules = tmp_path / "all.rules"
    rules.write_text("all -> capacity\n")
    launcher = tmp_path / "launcher.sh"
    launcher.write_text(f"#!/bin/sh\n/bin/true\nexec {PROGRAMS / 'prog_rules_probe'}\n")
    launcher.chmod(0o755)
    r = hetmem("run", "--rules", str(rules), "--", str(launcher), env_extra={"HM_TIERS": "capacity=emul:cxl"})
    assert r.returncode == 0, r.stderr
    assert set(dict(line.split() for line in r.stdout.splitlines()).values()) == {"emul:cxl"}, r.stdout


def test_profiling_a_launcher_without_its_children_is_warned_about(tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nexec /bin/true\n")
    script.chmod(0o755)
    r = hetmem("profile", "-o", str(tmp_path / "t.hmtrace"), "--", str(script))
    assert r.returncode == 0 and "job.sh is a script: only it is profiled" in r.stderr, r.stderr
    r = hetmem("profile", "-o", str(tmp_path / "u.hmtrace"), "--children", "--", str(script))
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    r = hetmem("profile", "-o", str(tmp_path / "v.hmtrace"), "--", "/bin/true")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


@pytest.mark.parametrize("text,where", [
    ("size >= 2M -> capacity\nsize => 4M -> fast\n", ":2:6: expected a comparison"),
    ("size >= lots -> fast\n", ":1:9: expected a size"),
    ("all capacity\n", ":1:1: expected 'CONDITION -> TARGET'"),
    ("colour red -> fast\n", ":1:1: unknown condition 'colour'"),
    ("all -> \n", ":1:7: expected a target"),
    ("all -> hbm\n", ":1: unknown tier 'hbm'"),
])
def test_rules_errors_name_file_line_column_and_run_nothing(tmp_path, text, where):
    rules = tmp_path / "bad.rules"
    rules.write_text(text)
    marker = tmp_path / "ran"
    r = hetmem("run", "--rules", str(rules), "--", "touch", str(marker))
    assert r.returncode == 2
    assert f"{rules}{where}" in r.stderr, r.stderr
    assert not marker.exists(), "nothing is run when the rules are wrong"


def test_a_failing_trace_never_breaks_the_program(tmp_path):
    """Writing the trace fails (a full device): the shim disables itself, the program runs on."""
    r = hetmem("profile", "-o", "/dev/full", "--", str(PROGRAMS / "prog_alloc_pattern"))
    assert r.returncode == 0, r.stderr
    assert "not profiling" in r.stderr or "profiler disabled" in r.stderr


def test_preload_without_any_request_passes_through(tmp_path):
    env = dict(os.environ, LD_PRELOAD=str(BUILD / "libhetmem_preload.so"))
    for name in ("HM_PROFILE", "HM_RULES"):
        env.pop(name, None)
    r = subprocess.run([str(PROGRAMS / "prog_rules_probe")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert set(dict(line.split() for line in r.stdout.splitlines()).values()) == {"libc"}


def test_profile_fails_with_status_2_when_the_preload_library_cannot_start(tmp_path):
    """A malformed HM_TIERS stops the preload library: no trace, status 2, the library's own message
    once (not repeated by the command)."""
    trace = tmp_path / "t.hmtrace"
    trace.write_text("an older run's trace")
    r = hetmem("profile", "-o", str(trace), "--", str(PROGRAMS / "prog_alloc_pattern"),
               env_extra={"HM_TIERS": "capacity=emul:nosuchprofile"})
    assert r.returncode == 2, r.stderr
    assert trace.read_text() == "an older run's trace", "an older trace is neither taken for this run's nor lost"
    problems = [line for line in r.stderr.splitlines() if "unknown emulation profile 'nosuchprofile'" in line]
    assert len(problems) == 1, r.stderr
    assert "this run wrote no trace" in r.stderr
    ok = hetmem("profile", "-o", str(trace), "--", str(PROGRAMS / "prog_alloc_pattern"))
    assert ok.returncode == 0 and trace.exists(), ok.stderr


@pytest.mark.parametrize("mode", ["plain", "profile", "rules", "profile-children"])
def test_the_host_survives_realloc_statistics_and_forks_under_threads(tmp_path, mode):
    """realloc through every size class, the C library's statistics and knobs, and fork, vfork + exec
    and posix_spawn while two threads allocate: the same answers with the preload library as without,
    and no child hangs on a lock a vanished thread held (the MD code's hang in mallinfo2)."""
    program = str(PROGRAMS / "prog_host_calls")
    rules = tmp_path / "all.rules"
    rules.write_text("all -> capacity\n")
    args = {"plain": None, "profile": ["profile", "-o", str(tmp_path / "h.hmtrace"), "--"],
            "rules": ["run", "--rules", str(rules), "--"],
            "profile-children": ["profile", "--children", "-o", str(tmp_path / "c.hmtrace"), "--"]}[mode]
    for _ in range(3):
        if args is None:
            r = subprocess.run([program], capture_output=True, text=True, timeout=120)
        else:
            r = hetmem(*args, program, env_extra={"HM_TIERS": "capacity=emul:cxl"}, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.split("\n")[:3] == ["realloc ok", "statistics ok", "fork ok"], r.stdout
    if mode == "profile":
        trace = read_trace(str(tmp_path / "h.hmtrace"))
        assert not trace.partial, trace.problems


@pytest.mark.parametrize("mode", ["plain", "preload", "rules"])
def test_a_cxx_programs_new_handler_and_bad_alloc_are_its_own(tmp_path, mode):
    """The preload library's operator new calls the new handler the program set and throws the
    std::bad_alloc of the program's C++ runtime (the library carries a private one)."""
    program = str(PROGRAMS / "prog_new_handler")
    rules = tmp_path / "all.rules"
    rules.write_text("all -> capacity\n")
    env = dict(os.environ, LD_PRELOAD=str(BUILD / "libhetmem_preload.so")) if mode == "preload" else None
    if mode == "rules":
        r = hetmem("run", "--rules", str(rules), "--", program, env_extra={"HM_TIERS": "capacity=emul:cxl"})
    else:
        r = subprocess.run([program], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "handler calls 1, bad_alloc caught yes, nothrow null", r.stdout


@pytest.mark.parametrize("mode", ["preload", "rules"])
def test_operator_new_out_of_memory_without_a_cxx_runtime_to_throw_from_says_why(tmp_path, mode):
    """The preload library carries no C++ runtime: its operator new throws the program's
    std::bad_alloc. A program whose runtime is linked in and exports nothing (it reaches this
    operator new only by looking it up) cannot catch an exception another runtime's unwinder
    throws; it is told why it ends, not left to an unwinder's assertion."""
    program = str(PROGRAMS / "prog_new_without_runtime")
    rules = tmp_path / "all.rules"
    rules.write_text("all -> capacity\n")
    if mode == "rules":
        r = hetmem("run", "--rules", str(rules), "--", program, env_extra={"HM_TIERS": "capacity=emul:cxl"})
    else:
        r = subprocess.run([program], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, LD_PRELOAD=str(BUILD / "libhetmem_preload.so")))
    assert r.returncode in (-6, 134), r.stdout + r.stderr
    assert ("hetmem preload: operator new: out of memory, and the program has no C++ runtime to throw "
            "std::bad_alloc from: it ends here (abort)") in r.stderr, r.stderr


def test_the_preload_library_adds_no_runtime_a_c_program_does_not_load(tmp_path):
    """A C program under the preload library maps no C++ runtime, hash-table library, hwloc, libnuma
    or libunwind: each library a process loads is start-up time, paid by every process of a build or
    a launcher (hwloc and libnuma are loaded only where there are two nodes or more, libunwind by the
    first profile)."""
    def libraries(env):
        r = subprocess.run(["cat", "/proc/self/maps"], capture_output=True, text=True, env=env, timeout=30)
        assert r.returncode == 0, r.stderr
        return {Path(line.split()[-1]).name.split(".so")[0] for line in r.stdout.splitlines() if ".so" in line}
    rules = tmp_path / "all.rules"
    rules.write_text("all -> capacity\n")
    env = dict(os.environ, LD_PRELOAD=str(BUILD / "libhetmem_preload.so"), HM_RULES=str(rules))
    added = libraries(env) - libraries(dict(os.environ))
    assert {"libhetmem_preload", "libhetmem"} <= added, added
    assert not added & {"libstdc++", "libgcc_s", "libhwloc", "libudev", "libunwind", "liblzma", "libzstd", "libz"}, added
    assert not any(name.startswith("libabsl") for name in added), added
    online = Path("/sys/devices/system/node/online")
    if online.exists() and online.read_text().strip() == "0":
        assert "libnuma" not in added, added


def test_the_preload_library_does_no_start_up_work_when_nothing_asks_for_it():
    # Neither a trace, rules nor a summary: hetmem is not initialised at the program's start (a bad
    # HM_TIERS would otherwise be reported by every program the library is loaded into).
    env = dict(os.environ, LD_PRELOAD=str(BUILD / "libhetmem_preload.so"), HM_TIERS="capacity=bogus")
    for name in ("HM_PROFILE", "HM_RULES", "HM_SUMMARY"):
        env.pop(name, None)
    r = subprocess.run(["/bin/true"], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    r = subprocess.run(["/bin/true"], env=dict(env, HM_PROFILE=os.devnull), capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0 and "unknown tier 'bogus'" in r.stderr, r.stderr
