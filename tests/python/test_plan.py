"""Plans end to end: `hetmem profile` an unchanged program, `hetmem plan` the trace, and
`hetmem run --plan` the same program: each site's objects land where the plan's classes go under
hetmem-static (C and Fortran); malformed plans stop the run with file and line; sites that never
occur are listed at exit."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build"))
PROGRAMS = BUILD / "tests" / "programs"

TIERS = {"HM_TIERS": "capacity=emul:optane"}


def hetmem(*args, env_extra=None, timeout=300):
    env = dict(os.environ)
    for name in ("HM_TIERS", "HM_PROFILE", "HM_RULES", "LD_PRELOAD", "HM_PROFILE_ROOT_PID", "HM_POLICY",
                 "HM_FAST_BUDGET"):
        env.pop(name, None)
    env["PYTHONPATH"] = str(ROOT / "python")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "hetmem", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def placed(stdout: str) -> dict:
    return dict(line.split() for line in stdout.splitlines() if len(line.split()) == 2)


def make_plan(tmp_path, program):
    trace = tmp_path / "probe.hmtrace"
    # Every phase instance sampled: the classes under test follow from what each site's objects
    # do, not from which instances a 1% sample budget reached on a machine busy or not (the pair
    # list is touched in one of its two phases: which were sampled decided it under load).
    r = hetmem("profile", "-o", str(trace), "--", str(program), env_extra={**TIERS, "HM_SAMPLE_BUDGET": "1"})
    assert r.returncode == 0, r.stderr
    r = hetmem("run", "--", str(program), env_extra=TIERS)
    assert r.returncode == 0 and set(placed(r.stdout).values()) == {"libc"}, "without a plan nothing is placed"
    plan = tmp_path / "probe.plan"
    r = hetmem("plan", str(trace), "-o", str(plan))
    assert r.returncode == 0, r.stderr
    return plan.read_text(), plan


@pytest.mark.parametrize("program,kinds", [
    ("prog_plan_probe", {"field": "hot", "particles": "streaming", "log": "cold", "temporary": "temporary",
                         "pairlist": "hot"}),
    ("prog_plan_probe_f", {"field": "hot", "particles": "streaming", "log": "cold"}),
])
def test_a_plan_from_a_profile_places_each_site_where_its_class_goes(tmp_path, program, kinds):
    if not (PROGRAMS / program).exists():
        pytest.skip(f"{program} was not built (no Fortran compiler)")
    text, plan = make_plan(tmp_path, PROGRAMS / program)
    sites = [line for line in text.splitlines() if line.startswith("site ")]
    for kind in set(kinds.values()):
        assert any(f"-> class {kind}" in s for s in sites), f"no {kind} site in the plan:\n{text}"
    if "pairlist" in kinds:  # classed by its bytes and their lifetime, not by its count of allocations
        grown = [s for s in sites if "# grow (" in s]
        assert len(grown) == 1 and "-> class hot" in grown[0], f"the grown pair list is not hot:\n{text}"
    # 64 MiB of fast memory: the hot field fits, streamed and cold data go to the capacity tier.
    r = hetmem("run", "--plan", str(plan), "--", str(PROGRAMS / program),
               env_extra={**TIERS, "HM_FAST_BUDGET": "64M"})
    assert r.returncode == 0, r.stdout + r.stderr
    where = placed(r.stdout)
    expected = {"hot": "fast", "temporary": "fast", "streaming": "capacity", "cold": "capacity"}
    for name, kind in kinds.items():
        assert where[name] == expected[kind], f"{name} ({kind}) landed on {where[name]}\n{text}\n{r.stdout}"


def test_a_plan_can_be_edited_and_another_policy_chosen(tmp_path):
    text, plan = make_plan(tmp_path, PROGRAMS / "prog_plan_probe")
    # Every site made cold: under hetmem-static all of it goes to the capacity tier.
    edited = tmp_path / "cold.plan"
    edited.write_text("\n".join(line.split("->")[0] + "-> class cold" if line.startswith("site ") else line
                                for line in text.splitlines()) + "\n")
    r = hetmem("run", "--plan", str(edited), "--", str(PROGRAMS / "prog_plan_probe"), env_extra=TIERS)
    assert r.returncode == 0, r.stderr
    assert set(placed(r.stdout).values()) == {"capacity"}, r.stdout
    # The same plan under slow-only, and under all-fast with room for everything.
    r = hetmem("run", "--plan", str(plan), "--policy", "all-fast", "--", str(PROGRAMS / "prog_plan_probe"),
               env_extra=TIERS)
    assert r.returncode == 0, r.stderr
    assert set(placed(r.stdout).values()) == {"fast"}, r.stdout


@pytest.mark.parametrize("line,message", [
    ("site ./prog+0x10 -> class warm\n", ":1:27: unknown kind 'warm'"),
    ("site ./prog+0x10 -> class hot lots\n", ":1:31: expected a priority"),
    ("site ./prog+0x10 -> class\n", "expected a kind"),
    ("site ./prog+0x10 -> class hot 5 extra\n", "unexpected 'extra'"),
])
def test_a_malformed_plan_names_file_and_line_and_runs_nothing(tmp_path, line, message):
    plan = tmp_path / "bad.plan"
    plan.write_text(line)
    marker = tmp_path / "ran"
    r = hetmem("run", "--plan", str(plan), "--", "touch", str(marker))
    assert r.returncode == 2
    assert message in r.stderr, r.stderr
    assert str(plan) in r.stderr
    assert not marker.exists(), "the program must not start"


def test_sites_that_never_occur_are_listed_at_exit(tmp_path):
    text, plan = make_plan(tmp_path, PROGRAMS / "prog_plan_probe")
    plan.write_text(text + "site ./prog_plan_probe+0x1 -> class hot 7\n")
    r = hetmem("run", "--plan", str(plan), "--", str(PROGRAMS / "prog_plan_probe"), env_extra=TIERS)
    assert r.returncode == 0, r.stderr
    assert "1 plan site(s) placed nothing" in r.stderr, r.stderr
    assert "site ./prog_plan_probe+0x1 -> class hot 7" in r.stderr


def test_rules_and_plan_together_are_refused(tmp_path):
    plan = tmp_path / "p.plan"
    plan.write_text("all -> class cold\n")
    r = hetmem("run", "--plan", str(plan), "--rules", str(plan), "--", "true")
    assert r.returncode == 2 and "not both" in r.stderr


def test_the_environment_a_plan_runs_in_is_the_one_the_command_gives(tmp_path):
    """`hetmem bench overhead` measures the machinery alone by starting programs with the
    environment `hetmem run` would give them (cli.launch_environment): the same placement."""
    _, plan = make_plan(tmp_path, PROGRAMS / "prog_plan_probe")
    # In a process of its own, as the benchmark is: the library this one loaded has placed objects.
    asked = subprocess.run([sys.executable, "-c", "import json, sys; from hetmem.cli import launch_environment; "
                            "print(json.dumps(launch_environment(sys.argv[1:])))",
                            "run", "--plan", str(plan), "--", str(PROGRAMS / "prog_plan_probe")],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, **TIERS, "PYTHONPATH": str(ROOT / "python")})
    assert asked.returncode == 0, asked.stderr
    cmd, env = json.loads(asked.stdout)
    assert env["HM_RULES"] == str(plan) and env["HM_POLICY"] == "hetmem-static" and "libhetmem_preload" in env["LD_PRELOAD"]
    direct = subprocess.run(cmd, capture_output=True, text=True, env={**env, "HM_FAST_BUDGET": "64M"}, timeout=300)
    through = hetmem("run", "--plan", str(plan), "--", *cmd, env_extra={**TIERS, "HM_FAST_BUDGET": "64M"})
    assert direct.returncode == 0 and through.returncode == 0, direct.stderr + through.stderr
    assert placed(direct.stdout) == placed(through.stdout), (direct.stdout, through.stdout)
    assert placed(direct.stdout)["particles"] == "capacity"


def test_a_class_that_rests_on_few_or_start_up_samples_says_so():
    from hetmem.report import MIN_SAMPLES, _sampling_doubt
    span = (0, 100_000)
    steady = [{"begin_ns": t} for t in (5_000, 40_000, 90_000)]
    assert _sampling_doubt(steady, span, "iteration") is None
    few = _sampling_doubt(steady[:MIN_SAMPLES - 1], span, "iteration")
    assert few.startswith("few samples: 2 sampled iteration(s)") and "HM_SAMPLE_BUDGET" in few
    early = _sampling_doubt([{"begin_ns": t} for t in (0, 3_000, 9_000)], span, "iteration")
    assert early.startswith("start-up only: every sample that saw it came from the run's first 10%")
