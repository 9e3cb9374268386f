"""The rubric of experiments/common.py: Student-t intervals over training seeds, seed-paired
differences, one rule for both directions ("inconclusive" for every interval holding 0, whichever
way it leans), equivalence tests for "alike" claims against a declared margin, and the seed's own
value placed inside or outside every interval."""
from __future__ import annotations

import pytest

from experiments import common

SEED = common.Measure("a - b", 0.2, " points", 100)  # the seed's value inside [0.076, 0.324] below
NONE = common.Measure("a - b", None, " points", 100)
UP, DOWN = [0.2, 0.15, 0.25], [-0.2, -0.15, -0.25]
LEAN_UP, LEAN_DOWN = [0.2, -0.1, 0.25], [-0.2, 0.1, -0.25]


def test_interval_is_students_t_and_paired_differences_pair_by_seed():
    import scipy.stats

    values = [0.61, 0.74, 0.69, 0.66]
    stats = common.interval(values)
    low, high = scipy.stats.t.interval(0.95, 3, loc=sum(values) / 4, scale=scipy.stats.sem(values))
    assert stats["n"] == 4 and stats["low"] == pytest.approx(low) and stats["high"] == pytest.approx(high)
    gap = common.paired({"0": 0.9, "1": 0.8, "2": 0.85, "9": 0.1}, {"0": 0.7, "1": 0.7, "2": 0.6})
    assert gap["seeds"] == ["0", "1", "2"] and gap["diffs"] == pytest.approx([0.2, 0.1, 0.25])
    one = common.interval([0.3])
    assert one["sd"] == 0.0 and one["low"] != one["low"]  # NaN bounds: no interval from one seed
    with pytest.raises(ValueError, match="no training seed is in both"):
        common.paired({0: 0.9}, {"0": 0.7})  # int and str keys: a JSON round trip on one side only


@pytest.mark.parametrize("diffs, like, word", [
    (UP, True, "reproduced ("),
    (UP, False, "consistent (not like-for-like data; "),
    (DOWN, True, "reversed ("),
    (DOWN, False, "against the claim (not like-for-like data; "),
    (LEAN_UP, True, "inconclusive (the 95% interval includes 0; "),
    (LEAN_DOWN, True, "inconclusive (the 95% interval includes 0; "),  # the same word whichever way it leans
    ([0.2], True, "inconclusive (one seed; "),
    ([-0.2], False, "inconclusive (one seed; not like-for-like data; "),
])
def test_one_rule_for_both_directions(diffs, like, word):
    said = common.verdict(common.interval(diffs), NONE, "" if like else common.NOT_LIKE_FOR_LIKE, seed_size=True)
    assert said.startswith(word) and "the seed reports no value of this measure)" in said
    assert said.endswith(common.described(common.interval(diffs), " points", 100))


def test_smaller_runs_are_never_reproduced_or_reversed():
    assert common.verdict(common.interval(UP), NONE).startswith("consistent (not the seed's size; ")
    assert common.verdict(common.interval(DOWN), NONE).startswith("against the claim (not the seed's size; ")


def test_every_verdict_says_whether_the_seeds_value_lies_inside_the_interval():
    stats = common.interval(UP)  # [0.076, 0.324]
    assert "the seed's +20.0 points inside the interval" in common.verdict(stats, SEED, seed_size=True)
    far = common.Measure("a - b", 0.5, " points", 100)
    assert "the seed's +50.0 points outside the interval" in common.verdict(stats, far, seed_size=True)
    assert "the seed's +20.0 points: no interval from one seed" in common.verdict(common.interval([0.1]), SEED)
    assert "the seed's +20.0 points inside" in common.verdict(stats, SEED, untested="no run converged")


def test_not_tested_whatever_the_interval_where_the_measure_cannot_decide():
    for diffs in (UP, DOWN, [0.1]):
        assert common.verdict(common.interval(diffs), NONE, seed_size=True, untested="no run converged").startswith(
            "not tested (no run converged; ")


@pytest.mark.parametrize("diffs, like, word", [
    ([0.01, -0.01, 0.0, 0.005, -0.004], True, "reproduced (the 90% interval ["),  # inside +-5 points
    ([0.01, -0.01, 0.0, 0.005, -0.004], False, "consistent (the 90% interval ["),
    ([0.3, 0.28, 0.31, 0.29, 0.3], True, "reversed (the 95% interval beyond the margin +-5.0 points"),
    ([0.3, 0.28, 0.31, 0.29, 0.3], False, "against the claim (the 95% interval beyond the margin +-5.0 points"),
    ([0.2, -0.1, 0.25, -0.2, 0.1], True, "inconclusive (the 90% interval ["),  # a weak test: neither shown
    ([0.04, 0.06, 0.05, 0.07, 0.03], True, "inconclusive (the 90% interval ["),  # nonzero, straddling the margin
    ([0.0], True, "inconclusive (one seed; "),
])
def test_alike_is_an_equivalence_test_against_the_declared_margin(diffs, like, word):
    said = common.alike(common.interval(diffs), NONE, 0.05, "" if like else common.NOT_LIKE_FOR_LIKE, seed_size=True)
    assert said.startswith(word), said


def test_alike_uses_the_two_one_sided_tests_interval():
    import scipy.stats

    diffs = [0.02, 0.035, 0.03, 0.045, 0.04]  # 90% interval about [0.025, 0.043]; 95% about [0.022, 0.046]
    mean, sem = sum(diffs) / 5, scipy.stats.sem(diffs)
    high90 = mean + scipy.stats.t.ppf(0.95, 4) * sem
    high95 = mean + scipy.stats.t.ppf(0.975, 4) * sem
    margin = (high90 + high95) / 2  # the 90% interval inside, the 95% one not: TOST says equivalent
    said = common.alike(common.interval(diffs), NONE, margin, seed_size=True)
    assert said.startswith("reproduced (the 90% interval [2.5, 4.3] points inside"), said


def test_one_model_claims_are_inconclusive_and_say_which_way_they_lean():
    assert common.one_model(True, "KS 0.1 against 0.2", seed_size=True) == (
        "inconclusive (one trained model; KS 0.1 against 0.2: leans toward the claim)")
    assert common.one_model(False, "KS 0.3 against 0.2") == (
        "inconclusive (one trained model; KS 0.3 against 0.2: leans away from the claim; not the seed's size)")


def test_described_gives_the_interval_in_the_claims_unit():
    stats = common.interval([0.02, 0.04, 0.03])
    assert common.described(stats, " points", 100) == "+3.0 [0.5, 5.5] points (95% t interval, 3 seeds)"
    assert common.described(common.interval([0.5]), " ppl") == "+0.5 ppl (one seed)"


def test_an_interval_that_is_not_finite_is_inconclusive():
    nan = common.interval([0.2, float("nan"), 0.25])
    assert common.verdict(nan, NONE, seed_size=True).startswith("inconclusive (the interval is not finite;")
    assert common.alike(nan, NONE, 0.05, seed_size=True).startswith("inconclusive (the interval is not finite;")
    inf = common.interval([0.2, float("inf"), 0.25])
    assert common.verdict(inf, NONE, seed_size=True).startswith("inconclusive (the interval is not finite;")
