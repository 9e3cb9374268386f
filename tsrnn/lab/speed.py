"""Timing calls against each other on a shared, drifting machine: interleaved rounds, per-round
ratios, a distribution-free interval for their median, and a verdict on whether the repeats agree.

A machine's speed drifts by tens of percent within minutes (and a stalled core slows one call a
hundredfold), so the calls being compared are timed alternately, one call of each per round, and
each ratio is taken within a round: a drift then slows both sides of a ratio alike. The median of
the n per-round ratios comes with the order-statistic interval that holds the population median
with probability >= 95% for any distribution of the ratios (the binomial(n, 1/2) ranks; no normal
approximation). ``tsrnn selftest`` and ``pytest bench/`` report through this module.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from scipy import stats

# The repeats disagree (a noisy or throttled machine) when a ratio's 95% interval is wider than this
# fraction of its median, or when one call's slowest tenth of rounds took this many times its fastest
# tenth. On a quiet 2-vCPU Xeon (2026-12-07, bench/speed_summary.py's cells, 21-31 rounds) the
# spreads were 1.06-1.38 and the widths 1-9%, up to 38% for TILT, whose two calls (the step loop
# allocates at each of 500 steps) vary by themselves and apart; with other jobs on its cores the
# spreads were 2-40 and the widths 60-1300%; the stall that prompted the check slowed one call a
# hundredfold.
MAX_INTERVAL_WIDTH = 0.5
MAX_SPREAD = 2.0


def time_rounds(calls: Mapping[str, Callable[[], object]], rounds: int, *, clock: Callable[[], float] = time.perf_counter,
                synchronize: Callable[[], None] = lambda: None, warmup: int = 2) -> dict[str, list[float]]:
    """{name: milliseconds of each round} for every call, timed one after the other in each of
    ``rounds`` rounds (the order rotated by one each round, so that no call always follows the same
    one), after ``warmup`` untimed calls of each. ``synchronize`` waits for a device (CUDA) before
    each reading of ``clock``; ``clock`` is a seam for tests (seconds)."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    names = list(calls)
    for name in names:
        for _ in range(warmup):
            calls[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            synchronize()
            start = clock()
            calls[name]()
            synchronize()
            times[name].append((clock() - start) * 1e3)
    return times


@dataclass(frozen=True)
class Ratio:
    """The median of per-round time ratios (mine / theirs: below 1, mine is faster) and its 95%
    distribution-free interval [low, high] over ``rounds`` rounds."""

    median: float
    low: float
    high: float
    rounds: int

    @property
    def width(self) -> float:
        """The interval's width as a fraction of the median."""
        return (self.high - self.low) / self.median

    def __str__(self) -> str:
        return f"{self.median:.2f}x [{self.low:.2f}, {self.high:.2f}]"


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """The order statistics (x_(j), x_(n+1-j)) that hold the population median with probability
    >= ``confidence``: j is the largest rank with P(Binomial(n, 1/2) < j) <= (1 - confidence) / 2.
    With fewer than 6 values no such j exists and the interval is the whole range."""
    ordered = sorted(values)
    n = len(ordered)
    j = int(stats.binom.ppf((1 - confidence) / 2, n, 0.5))  # smallest j with P(X <= j) >= alpha/2
    if stats.binom.cdf(j, n, 0.5) > (1 - confidence) / 2:
        j -= 1  # then P(X <= j) <= alpha/2: rank j + 1 is the lower bound's (1-based)
    j = max(j, 0)
    return ordered[j], ordered[n - 1 - j]


def ratio(mine: list[float], theirs: list[float]) -> Ratio:
    """The per-round ratios mine[r] / theirs[r], summarized (see ``Ratio``)."""
    if len(mine) != len(theirs) or not mine:
        raise ValueError(f"need the same non-zero number of rounds on both sides, got {len(mine)} and {len(theirs)}")
    ratios = [a / b for a, b in zip(mine, theirs)]
    low, high = median_interval(ratios)
    return Ratio(statistics.median(ratios), low, high, len(ratios))


def spread(times: list[float]) -> float:
    """How much one call's rounds disagree: its slowest tenth of rounds over its fastest tenth (the
    10th and 90th percentiles' ratio; the max over the min below 10 rounds)."""
    ordered = sorted(times)
    tenth = len(ordered) // 10
    return ordered[-1 - tenth] / ordered[tenth]


def disagreement(times: Mapping[str, list[float]], ratios: Mapping[str, Ratio]) -> str | None:
    """Why these repeats cannot be trusted, in a few words (None if they agree): the call whose
    rounds spread most past ``MAX_SPREAD``, else the ratio whose interval is widest past
    ``MAX_INTERVAL_WIDTH`` of its median, and how many other signs of noise there are."""
    reasons = [(f"{name}'s slowest rounds took {spread(t):.1f}x its fastest", spread(t) / MAX_SPREAD)
               for name, t in times.items() if spread(t) > MAX_SPREAD]
    reasons += [(f"the ratio to {name} has an interval {r.width:.0%} of its median wide", r.width / MAX_INTERVAL_WIDTH)
                for name, r in ratios.items() if r.width > MAX_INTERVAL_WIDTH]
    if not reasons:
        return None
    worst = max(reasons, key=lambda reason: reason[1])[0]
    return worst + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else "")
