"""Real programs none of us wrote (Debian packages) run unharmed under hetmem: plain, under `hetmem
profile`, with the whole heap on the capacity tier (`hetmem run --rules`), and with their own plan
(`hetmem run --plan`), several times each: the same exit status and the same results every time,
and every trace reads. The rules are applied (the capacity tier holds the program's heap, R's too
though Rscript reaches it through a shell script and two execs), and the plans made with default
options class the arrays every step walks hot. The programs and what each covers:
python/hetmem/real_programs.py."""

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from hetmem import real_programs as rp  # noqa: E402
from hetmem.report import analyse  # noqa: E402
from hetmem.trace import read_trace  # noqa: E402

REPEAT = int(os.environ.get("HM_REAL_REPEAT", "2"))
# Programs started through a shell or Rscript: the profile (without --children) is of that process.
LAUNCHING = {"sh", "Rscript"}


def _check(program, reference, outcome):
    where = f"{program.name} under {outcome.mode}"
    assert not outcome.problem, f"{where}: {outcome.problem}\n{outcome.stderr[-3000:]}"
    assert outcome.status == reference.status, \
        f"{where}: exit status {outcome.status}, plain {reference.status}\n{outcome.stderr[-3000:]}"
    assert program.same(outcome.results, reference.results), \
        f"{where}: results differ from the plain run\n{outcome.results}\n!=\n{reference.results}"


@pytest.mark.parametrize("program", rp.PROGRAMS, ids=[p.name for p in rp.PROGRAMS])
def test_real_program_runs_unharmed_in_every_mode(program, tmp_path):
    if program.missing():
        pytest.skip(program.missing())
    rp.prepare(program, tmp_path)
    plain = rp.run_once(program, "plain", tmp_path, "plain")
    assert plain.status == 0 and plain.results, f"{program.name} fails on its own: {plain.stderr}"
    for rep in range(REPEAT):
        outcome = rp.run_once(program, "profile", tmp_path, f"profile{rep}")
        _check(program, plain, outcome)
        traces = rp.traces_of(tmp_path, f"profile{rep}")
        assert traces, f"{program.name}: no trace written"
        if program.per_rank:
            assert len(traces) == 2, f"one trace per rank expected: {traces}"
        for t in traces:
            trace = read_trace(str(t))
            assert not trace.partial, f"{t}: {trace.problems}"
            result = analyse(trace)
            if os.path.basename(program.command[0]) in LAUNCHING:
                # The traced process only starts the program (its children are not followed): its
                # few small allocations may all escape the default sampling.
                assert result["totals"]["allocations"] > 0 or trace.sampled, f"{t}: no allocation recorded"
            else:
                assert result["totals"]["allocations"] > 0, f"{t}: no allocation recorded"
            assert result["iterations"]["how"] == "window", "a program that marks nothing gets inferred windows"
    made = rp.make_plan(program, tmp_path, rp.traces_of(tmp_path, "profile0")[0])
    assert made.returncode == 0, made.stderr
    classes = rp.plan_classes(tmp_path / "own.plan")
    for wanted in program.hot_sites:
        found = [kind for kind, what in classes if wanted in what]
        assert found and all(k in ("hot", "streaming") for k in found), \
            f"{program.name}: its own plan classes {wanted} as {found or 'nothing'}:\n" \
            + (tmp_path / "own.plan").read_text()
    # The run summary is written by the run's first process at its exit (through _exit too, as dash
    # leaves): not by MPI's ranks, each of which is a first process.
    summarised = not program.per_rank
    for mode in ("rules", "plan"):
        for rep in range(REPEAT):
            summary = tmp_path / f"{mode}{rep}.summary.json"
            outcome = rp.run_once(program, mode, tmp_path, f"{mode}{rep}",
                                  extra_env={"HM_SUMMARY": str(summary)} if summarised else None)
            _check(program, plain, outcome)
            if mode == "rules" and summarised:
                # Every allocation of the run's process goes to the capacity tier: the rules reached it.
                tiers = json.loads(summary.read_text())["tiers"]
                capacity = [t for t in tiers if "capacity" in t["roles"]]
                assert capacity and capacity[0]["high_water"] > 0, \
                    f"{program.name}: the rules placed nothing on the capacity tier: {tiers}"
            if mode == "plan" and program.sites_recur:
                assert "placed nothing" not in outcome.stderr, f"the plan's sites were not matched:\n{outcome.stderr}"
