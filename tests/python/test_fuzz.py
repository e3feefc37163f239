"""Input fuzzing (hetmem fuzz, docs/fuzzing.md) on a fixed seed: every mutated input of hetmem-pic,
hetmem-mg, hetmem-amr, a rules file and the HM_* settings either runs or is refused at once (status
2 within a second, one line naming the key), and the preload library never changes the program it
is loaded into."""

import pytest

from hetmem import fuzz, fuzz_replica

SEED, CASES = 20261125, 600


def test_the_judge_catches_what_it_is_for():
    """The verdicts themselves: each kind of finding is one (so a clean run below means something)."""
    case = fuzz.Case("pic", "max_step = 'x'", "max_step", ["hetmem-pic"], started="cells,")
    assert fuzz.judge(case, 2, "", "hetmem-pic: max_step = 'x': a whole number\n", 0.05, 3).verdict == "refused"
    findings = [
        (2, "", "hetmem-pic: max_step = 'x': a whole number\nusage: ...\n", 0.05),   # two lines
        (2, "", "hetmem-pic: something is wrong\n", 0.05),                            # key not named
        (2, "", "hetmem-pic: max_step = 'x': a whole number\n", 1.5),                  # too slow
        (-11, "", "", 0.05),                                                          # a crash
        (None, "", "", 3.0),                                                          # silent at the limit
        (3, "", "hetmem-pic: max_step: odd\n", 0.05),                                 # another status
    ]
    for status, out, err, seconds in findings:
        assert fuzz.judge(case, status, out, err, seconds, 3).verdict == "FINDING", (status, err, seconds)
    assert fuzz.judge(case, None, "hetmem-pic: 8 x 8 x 8 cells, ...\n", "", 3.0, 3).verdict == "ran"
    echo = fuzz.Case("preload", "HM_TIERS='x'", "HM_TIERS", ["/bin/echo", "unchanged"], expect_output="unchanged\n")
    assert fuzz.judge(echo, 0, "unchanged\n", "hetmem: HM_TIERS='x': ...\n", 0.01, 3).verdict == "ran"
    assert fuzz.judge(echo, 1, "", "", 0.01, 3).verdict == "FINDING"


def test_the_same_seed_draws_the_same_cases():
    a = [(c.target, c.what) for c in fuzz.generate(list(fuzz.TARGETS), 60, SEED)]
    b = [(c.target, c.what) for c in fuzz.generate(list(fuzz.TARGETS), 60, SEED)]
    assert a == b and len({t for t, _ in a}) == len(fuzz.TARGETS)


def test_every_mutated_input_runs_or_is_refused_at_once():
    outcomes = fuzz.fuzz(list(fuzz.TARGETS), CASES, SEED, time_limit=4.0)
    result = fuzz.summary(outcomes)
    assert len(outcomes) == CASES
    assert not result["findings"], "\n".join(f"{f['target']}: {f['mutation']}: {f['why']}" for f in result["findings"])
    for target, row in result["targets"].items():
        if target == "preload":   # the program runs whatever the setting: never refused, never changed
            assert row["ran"] == CASES // len(fuzz.TARGETS)
        else:
            assert row["refused"] > 0, f"{target}: no case was refused: the mutations do not reach its checks"
    assert result["slowest_refusal_cpu_s"] < fuzz.REFUSAL_CPU_S


def test_the_replica_server_outlives_hostile_connections():
    """hetmem fuzz-replica on a fixed seed: noise, wrong keys, replayed handshakes and malformed
    requests from key holders each end their own connection; the server lives on with its replica
    byte-identical, restorable and its memory bounded, and drops clients that stay silent."""
    result = fuzz_replica.fuzz(1500, SEED)
    assert not result["findings"], result["findings"]
    assert result["alive"] and result["replica_unchanged"] and result["restored"]
    assert result["silent_dropped"] == result["silent_clients"]
    for kind, row in result["counts"].items():
        assert row["connections"] > 100, kind  # every kind was drawn
        assert row["answered"] + row["closed"] == row["connections"], kind
    # A refusal says why: every kind but the broken-off ones is answered with an error.
    assert result["counts"]["wrong key"]["answered"] == result["counts"]["wrong key"]["connections"]
