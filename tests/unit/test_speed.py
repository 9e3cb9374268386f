"""tsrnn.lab.speed: interleaved rounds, per-round ratios, the median's distribution-free interval,
and the verdict on noisy repeats (what ``pytest bench/`` and ``tsrnn selftest`` report through)."""
import itertools

import pytest
from scipy import stats

from tsrnn.lab import speed


def steps_clock(durations):
    """A clock whose consecutive (start, end) readings are ``durations`` seconds apart, in turn."""
    now, pending = [0.0], iter(durations)

    def clock():
        reading = now[0]
        now[0] += next(pending) if len(clock.readings) % 2 == 0 else 0.0
        clock.readings.append(reading)
        return reading

    clock.readings = []
    return clock


def test_time_rounds_interleaves_rotates_and_warms_up():
    order = []
    calls = {name: (lambda name=name: order.append(name)) for name in "abc"}
    times = speed.time_rounds(calls, 3, clock=steps_clock(itertools.repeat(0.25)), warmup=1)
    assert order == list("abc") + list("abc") + list("bca") + list("cab")
    assert times == {name: [250.0, 250.0, 250.0] for name in "abc"}


def test_time_rounds_refuses_no_rounds():
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        speed.time_rounds({"a": lambda: None}, 0)


@pytest.mark.parametrize("n", range(1, 61))
def test_median_interval_holds_the_median_with_95_percent_and_is_the_narrowest_that_does(n):
    values = list(range(n))
    low, high = speed.median_interval(values)
    j = low  # the values are their own 0-based ranks
    assert high == n - 1 - j
    coverage = 1 - 2 * stats.binom.cdf(j, n, 0.5)  # P(x_(j+1) <= median <= x_(n-j)), 1-based ranks
    if n >= 6:
        assert coverage >= 0.95 and 1 - 2 * stats.binom.cdf(j + 1, n, 0.5) < 0.95
    else:
        assert (low, high) == (0, n - 1)


def test_median_interval_of_15_is_the_4th_and_12th():
    assert speed.median_interval([float(v) for v in range(1, 16)]) == (4.0, 12.0)


def test_ratio_takes_each_round_apart():
    r = speed.ratio([2.0] * 7 + [200.0], [1.0] * 7 + [100.0])  # a stall that slowed both sides of a round
    assert (r.median, r.low, r.high, r.rounds) == (2.0, 2.0, 2.0, 8)
    assert str(r) == "2.00x [2.00, 2.00]"
    with pytest.raises(ValueError, match="same non-zero number of rounds"):
        speed.ratio([1.0, 2.0], [1.0])


def test_disagreement_is_none_for_agreeing_repeats_and_names_the_worst_noise():
    quiet = {"tsrnn": [1.0, 1.1, 1.05, 0.98] * 4, "torch": [2.0, 2.1, 1.95, 2.05] * 4}
    ratios = {"torch": speed.ratio(quiet["tsrnn"], quiet["torch"])}
    assert speed.disagreement(quiet, ratios) is None
    noisy = {"tsrnn": [1.0] * 12 + [100.0] * 4, "torch": [2.0] * 16}
    ratios = {"torch": speed.ratio(noisy["tsrnn"], noisy["torch"])}
    reason = speed.disagreement(noisy, ratios)
    assert reason == "the ratio to torch has an interval 9900% of its median wide (and 1 more)"
    spread_only = {"tsrnn": [1.0] * 14 + [3.0] * 2, "torch": [1.0] * 14 + [3.0] * 2}  # slow rounds on both sides
    ratios = {"torch": speed.ratio(spread_only["tsrnn"], spread_only["torch"])}
    assert speed.disagreement(spread_only, ratios) == "tsrnn's slowest rounds took 3.0x its fastest (and 1 more)"
