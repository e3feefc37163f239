"""Targets judged against the spread (python/hetmem/verdicts.py): a ratio of medians is MET only
when every repetition's pairing meets it, and "cannot tell" when the target lies in the spread."""

import pytest

from hetmem import verdicts


def test_a_margin_inside_the_spread_cannot_be_told():
    # Medians 1.10 against 1.00, but the repetitions overlap: one round has the subject slower.
    r = verdicts.ratio([1.10, 1.05, 1.30], [1.00, 1.12, 0.95], paired=True)
    assert r.value == pytest.approx(1.10 / 1.00)
    assert r.low == pytest.approx(1.05 / 1.12) and r.high == pytest.approx(1.30 / 0.95)
    assert verdicts.at_least(r, 1.0) == "cannot tell"
    assert verdicts.at_most(r, 1.03) == "cannot tell"


def test_met_and_not_met_need_the_whole_interval():
    clear = verdicts.ratio([2.0, 2.1, 1.9], [1.0, 1.05, 0.98], paired=True)
    assert verdicts.at_least(clear, 1.5) == "MET" and verdicts.at_least(clear, 2.5) == "NOT MET"
    assert verdicts.at_most(clear, 2.5) == "MET" and verdicts.at_most(clear, 1.5) == "NOT MET"
    unpaired = verdicts.ratio([2.0, 2.2], [1.0, 1.1])
    assert (unpaired.low, unpaired.high) == pytest.approx((2.0 / 1.1, 2.2 / 1.0))


def test_absolute_figures_and_bad_input():
    assert verdicts.within([100, 120, 140], 150) == "MET"
    assert verdicts.within([100, 160], 150) == "cannot tell"
    assert verdicts.within([160, 170], 150) == "NOT MET"
    with pytest.raises(ValueError):
        verdicts.ratio([], [1.0])
    with pytest.raises(ValueError):
        verdicts.ratio([1.0, 2.0], [1.0], paired=True)


def test_several_targets_together():
    assert verdicts.all_of(["MET", "MET"]) == "MET"
    assert verdicts.all_of(["MET", "cannot tell"]) == "cannot tell"
    assert verdicts.all_of(["cannot tell", "NOT MET", "MET"]) == "NOT MET"


def test_the_peak_resident_set_is_the_programs_not_the_benchmarks(tmp_path):
    """bench overhead's memory column: the launcher's maxrss covers a program's children and is
    not the Python interpreter's own resident set (which a process started from it inherits)."""
    import os
    import sys
    from hetmem import bench_overhead
    launcher = bench_overhead._peak_rss_launcher(tmp_path)
    if launcher is None:
        pytest.skip("no C compiler")
    ballast = bytearray(300 << 20)  # this process: at least 300 MiB resident
    ballast[::4096] = b"\x01" * len(ballast[::4096])
    env = dict(os.environ)
    small = bench_overhead._peak_rss_mib(launcher, ["/bin/true"], env, tmp_path)
    assert small is not None and small < 20, small
    grown = bench_overhead._peak_rss_mib(
        launcher, ["sh", "-c", f"{sys.executable} -c 'b = bytearray(200 << 20); b[::4096] = b\"1\" * len(b[::4096])'"],
        env, tmp_path)
    assert grown is not None and 200 <= grown < 260, grown
    assert bench_overhead._peak_rss_mib(launcher, ["sh", "-c", "exit 3"], env, tmp_path) is None
    del ballast
