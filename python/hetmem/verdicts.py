"""Targets judged against the run-to-run spread: what every benchmark prints beside a ratio.

On a shared machine one configuration's repetitions spread by up to a third, so a ratio of medians
alone misleads. A comparison here carries the interval its repetitions allow, the extremes: from
the least favourable pairing of repetitions to the most favourable. A target is MET only when the
whole interval meets it, NOT MET when none of it does, and "cannot tell" when the target lies
within the spread.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Ratio:
    """median(numerator) / median(denominator) and the interval its repetitions span."""
    value: float
    low: float
    high: float

    def text(self, digits: int = 3) -> str:
        return f"{self.value:.{digits}f}x (spread {self.low:.{digits}f}-{self.high:.{digits}f})"

    def as_dict(self) -> dict:
        return {"ratio": self.value, "spread": [self.low, self.high]}


def ratio(numerator: list[float], denominator: list[float], paired: bool = False) -> Ratio:
    """The ratio of the medians of two sets of repetitions. Its interval is min(n)/max(d) to
    max(n)/min(d); with `paired` (the runs alternated, one of each per round) the ratios of the
    rounds, whose extremes are narrower and still every repetition's."""
    if not numerator or not denominator or min(denominator) <= 0:
        raise ValueError("a ratio needs repetitions on both sides and a positive denominator")
    value = statistics.median(numerator) / statistics.median(denominator)
    if paired:
        if len(numerator) != len(denominator):
            raise ValueError("paired repetitions come in equal numbers")
        rounds = [n / d for n, d in zip(numerator, denominator)]
        return Ratio(value, min(rounds), max(rounds))
    return Ratio(value, min(numerator) / max(denominator), max(numerator) / min(denominator))


def at_least(r: Ratio, target: float) -> str:
    """The verdict on "the ratio is at least `target`"."""
    if r.low >= target:
        return "MET"
    if r.high < target:
        return "NOT MET"
    return "cannot tell"


def at_most(r: Ratio, target: float) -> str:
    """The verdict on "the ratio is at most `target`" (an overhead: profiled / plain <= 1.1)."""
    if r.high <= target:
        return "MET"
    if r.low > target:
        return "NOT MET"
    return "cannot tell"


def spread(runs: list[float]) -> list[float]:
    """The fastest and slowest repetition."""
    return [min(runs), max(runs)]


def within(runs: list[float], target: float) -> str:
    """The verdict on "every repetition is at most `target`" for an absolute figure (ns per
    particle-step): MET when all are, NOT MET when none is, else cannot tell."""
    if max(runs) <= target:
        return "MET"
    if min(runs) > target:
        return "NOT MET"
    return "cannot tell"


def all_of(verdicts: list[str]) -> str:
    """Several targets together: NOT MET if any is, MET if all are, else cannot tell."""
    if "NOT MET" in verdicts:
        return "NOT MET"
    return "MET" if all(v == "MET" for v in verdicts) else "cannot tell"
