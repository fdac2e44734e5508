"""The statistics every claims table rests on (`tf_transfer.core.stats`): intervals of a difference (paired t,
Welch t, bootstrap), the three verdicts against a claim's margin in each direction, Holm's correction across tasks,
and the cell every report writes. Made-up scores, no TensorFlow."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tf_transfer.core import stats

FULL = [0.80, 0.84, 0.78, 0.86, 0.82]  # full fine-tuning, seeds 0-4; seeds spread by 8 points


def shifted(by, jitter=(0.002, -0.001, 0.001, -0.002, 0.0)):
    """Ours: full fine-tuning's seeds moved by `by`, with a little noise of their own (seeds correlate)."""
    return [f + by + j for f, j in zip(FULL, jitter)]


@pytest.mark.parametrize("ours, kind", [
    (shifted(+0.03), stats.REPRODUCED),        # a clear win: as good as, within 1 point
    (shifted(-0.05), stats.NOT_REPRODUCED),    # a clear loss: 5 points below
    ([0.81, 0.82, 0.80, 0.85, 0.83], stats.INCONCLUSIVE),  # an overlap: the interval straddles -1 point
])
def test_each_verdict_from_paired_scores(ours, kind):
    interval = stats.paired_difference(ours, FULL)
    assert stats.verdict(interval, margin=0.01) == kind
    found = stats.verdicts({"task": interval}, margin=0.01)["task"]
    assert found.kind == kind  # one task: Holm changes nothing, the interval decides
    assert found.cell(scale=100).startswith(kind + ": ") and interval.text(scale=100) in found.cell(scale=100)


def test_the_overlap_straddles_the_margin():
    interval = stats.paired_difference([0.81, 0.82, 0.80, 0.85, 0.83], FULL)
    assert interval.low < -0.01 < interval.high


@pytest.mark.parametrize("direction, margin, ours, kind", [
    ("at least", 0.30, [0.40, 0.42, 0.41], stats.REPRODUCED),
    ("at least", 0.30, [0.10, 0.12, 0.11], stats.NOT_REPRODUCED),
    ("at least", 0.30, [0.20, 0.45, 0.33], stats.INCONCLUSIVE),
    ("at most", 0.40, [0.10, 0.12, 0.11], stats.REPRODUCED),
    ("at most", 0.40, [0.60, 0.62, 0.61], stats.NOT_REPRODUCED),
    ("at most", 0.40, [0.20, 0.55, 0.41], stats.INCONCLUSIVE),
])
def test_each_direction(direction, margin, ours, kind):
    interval = stats.paired_difference(ours, [0.0, 0.0, 0.0])
    assert stats.verdict(interval, margin, direction) == kind
    assert stats.verdicts({"t": interval}, margin, direction)["t"].kind == kind


def test_unknown_direction_is_refused():
    interval = stats.paired_difference([0.1, 0.2], [0.0, 0.0])
    with pytest.raises(ValueError):
        stats.verdict(interval, 0.01, "about")
    with pytest.raises(ValueError):
        stats.verdicts({"t": interval}, 0.01, "about")


def test_pairing_narrows_the_interval_where_seeds_correlate():
    ours = shifted(-0.01)
    paired, welch = stats.paired_difference(ours, FULL), stats.welch_difference(ours, FULL)
    assert paired.estimate == pytest.approx(welch.estimate)
    assert (paired.high - paired.low) < (welch.high - welch.low) / 5
    assert stats.difference(ours, FULL, paired=True) == paired
    assert stats.difference(ours, FULL, paired=False) == welch
    # The seeds' shared 8-point spread decides the verdict only where it is not paired away.
    assert stats.verdict(paired, margin=0.02) == stats.REPRODUCED
    assert stats.verdict(welch, margin=0.02) == stats.INCONCLUSIVE


def test_paired_t_against_a_hand_worked_interval():
    # differences 0.01, 0.03, 0.02: mean 0.02, sd 0.01, se 0.01/sqrt(3), t(0.975, 2) = 4.302653
    interval = stats.paired_difference([0.51, 0.53, 0.52], [0.5, 0.5, 0.5])
    half = 4.302653 * 0.01 / math.sqrt(3)
    assert (interval.low, interval.high) == pytest.approx((0.02 - half, 0.02 + half), abs=1e-6)
    assert interval.df == 2 and interval.se == pytest.approx(0.01 / math.sqrt(3))


@pytest.mark.parametrize("make", [stats.paired_difference, stats.welch_difference,
                                  lambda a, b: stats.bootstrap_difference(a, b, paired=True)])
def test_fewer_than_two_values_give_no_interval_and_no_verdict(make):
    interval = make([0.9], [0.5])
    assert interval.estimate == pytest.approx(0.4) and not interval.defined
    assert stats.verdict(interval, margin=0.01) == stats.INCONCLUSIVE
    found = stats.verdicts({"t": interval}, margin=0.01)["t"]
    assert found.kind == stats.INCONCLUSIVE and found.family == 0
    assert found.cell(scale=100) == "inconclusive: +40.0 (no interval), 1 value(s)"
    assert make([], []).text() == "n/a"


def test_unequal_pairs_are_refused():
    with pytest.raises(ValueError):
        stats.paired_difference([0.1, 0.2], [0.1])


def test_a_ratios_interval_is_on_the_log_scale_and_stays_positive():
    # STS-B's two compared seeds took 31% and 37% of full fine-tuning's wall time. With 2 seeds, t(0.975, 1) = 12.7
    # sends a t-interval on the ratios themselves below zero; one on the log ratios stays positive.
    got, ref = [31.0, 37.0], [100.0, 100.0]
    on_ratios = stats.paired_difference([g / r for g, r in zip(got, ref)], [0.0, 0.0])
    share = stats.paired_ratio(got, ref)
    assert on_ratios.low < 0 < share.low < share.estimate < share.high
    assert share.estimate == pytest.approx(math.sqrt(0.31 * 0.37))  # the geometric mean
    assert share.estimate / share.low == pytest.approx(share.high / share.estimate)  # symmetric in log
    assert share.method == "paired t on log ratios" and share.n == 2 and share.df == 1
    assert stats.paired_ratio([35.0, 35.0], [100.0, 100.0]).low == pytest.approx(0.35)  # no spread: exact
    assert not stats.paired_ratio([35.0], [100.0]).defined
    with pytest.raises(ValueError):
        stats.paired_ratio([0.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError):
        stats.paired_ratio([1.0, 2.0], [1.0])


def test_holm_against_a_hand_worked_example():
    # m = 4, sorted 0.005, 0.01, 0.03, 0.04: 4 x 0.005 = 0.02; 3 x 0.01 = 0.03; 2 x 0.03 = 0.06; 1 x 0.04 = 0.04,
    # raised to the running maximum 0.06.
    assert stats.holm([0.03, 0.005, 0.04, 0.01]) == pytest.approx([0.06, 0.02, 0.06, 0.03])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert stats.holm([]) == []


def test_holm_can_turn_a_task_inconclusive_and_says_so():
    # Each task alone is reproduced (p just under 0.025); three of them at once are not all decisive after Holm.
    intervals = {t: stats.Interval(0.0, 0, 0, 5, "paired t", se=0.01, df=4.0) for t in ("a", "b", "c")}
    threshold_p = stats.one_sided_p(intervals["a"], -0.03, "above")
    assert threshold_p < 0.025
    alone = stats.verdicts({"a": intervals["a"]}, margin=0.03)["a"]
    together = stats.verdicts(intervals, margin=0.03)
    assert alone.kind == stats.REPRODUCED
    assert {v.kind for v in together.values()} == {stats.INCONCLUSIVE}
    assert "Holm p" in together["a"].cell(scale=100) and "over 3 tasks" in together["a"].cell(scale=100)


def test_not_testable_tasks_stay_out_of_the_family():
    win = stats.paired_difference(shifted(+0.03), FULL)
    found = stats.verdicts({"rte": win, "mrpc": None}, margin=0.01)
    assert found["mrpc"].kind == stats.NOT_TESTABLE and found["mrpc"].cell() == stats.NOT_TESTABLE
    assert found["rte"].family == 1
    assert stats.overall(found) == stats.REPRODUCED
    assert stats.overall({"mrpc": found["mrpc"]}) == stats.NOT_TESTABLE
    assert stats.overall([stats.REPRODUCED, stats.NOT_REPRODUCED]) == stats.NOT_REPRODUCED
    assert stats.overall([stats.REPRODUCED, stats.INCONCLUSIVE]) == stats.INCONCLUSIVE


def test_learned_needs_ten_points_over_the_constant_prediction():
    assert stats.learned([0.70, 0.72], 0.60)
    assert not stats.learned([0.65, 0.66], 0.60)
    assert not stats.learned([], 0.60) and not stats.learned([0.9], None)


def test_one_sided_p_matches_the_interval_bound():
    interval = stats.paired_difference([0.51, 0.53, 0.52], [0.5, 0.5, 0.5])
    assert stats.one_sided_p(interval, interval.low, "above") == pytest.approx(0.025)
    assert stats.one_sided_p(interval, interval.high, "below") == pytest.approx(0.025)
    with pytest.raises(ValueError):
        stats.one_sided_p(interval, 0.0, "beside")


def test_mean_of_tasks_combines_standard_errors():
    a = stats.paired_difference([0.51, 0.53, 0.52], [0.5, 0.5, 0.5])
    b = stats.paired_difference([0.48, 0.50, 0.49], [0.5, 0.5, 0.5])
    both = stats.mean_of([a, b])
    assert both.estimate == pytest.approx(0.005)
    assert both.se == pytest.approx(math.sqrt(a.se**2 + b.se**2) / 2) and both.df == pytest.approx(4.0)
    assert not stats.mean_of([a, stats.paired_difference([0.5], [0.4])]).defined


def test_bootstrap_is_reproducible_and_near_t_for_many_values():
    ours = [0.70 + 0.01 * (i % 7) for i in range(40)]
    full = [0.69 + 0.01 * ((i * 3) % 7) for i in range(40)]
    first = stats.bootstrap_difference(ours, full, paired=True)
    assert stats.bootstrap_difference(ours, full, paired=True) == first  # seeded: same bounds
    assert first.draws == stats.bootstrap_difference(ours, full, paired=True).draws
    t = stats.paired_difference(ours, full)
    assert first.low == pytest.approx(t.low, abs=0.003) and first.high == pytest.approx(t.high, abs=0.003)
    unpaired = stats.difference(ours, full, paired=False, method="bootstrap")
    assert unpaired.method == "bootstrap" and unpaired.low < unpaired.estimate < unpaired.high
    p = stats.one_sided_p(first, first.low, "above")
    assert 0.015 < p < 0.035
    with pytest.raises(ValueError):
        stats.difference(ours, full, paired=True, method="jackknife")


def test_verdict_cell_wording():
    interval = stats.Interval(-0.016, -0.058, 0.027, 3, "paired t")
    assert stats.verdict_cell(stats.INCONCLUSIVE, interval, scale=100) == "inconclusive: -1.6 [-5.8, +2.7]"
    assert stats.verdict_cell(stats.NOT_TESTABLE) == "not testable at this budget"
    assert stats.verdict_cell(stats.REPRODUCED, interval, scale=100, unit="%", note="Welch") == (
        "reproduced: -1.6% [-5.8%, +2.7%] (Welch)")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=8), st.floats(0.0, 0.2))
def test_verdicts_never_contradict_the_interval(diffs, margin):
    """Whatever the scores: reproduced only with the whole interval above -margin, not reproduced only with it all
    below; the two never both."""
    interval = stats.paired_difference(diffs, [0.5] * len(diffs))
    kind = stats.verdicts({"t": interval}, margin)["t"].kind
    if kind == stats.REPRODUCED:
        assert interval.low > -margin - 1e-12
    if kind == stats.NOT_REPRODUCED:
        assert interval.high < -margin + 1e-12
    assert kind == stats.verdict(interval, margin) or not interval.defined


def test_within_group_correlation_sees_past_the_groups_and_agrees_with_a_partial_correlation():
    """Two groups far apart on both sides would make any plain correlation high; centred within the groups, y that
    only shares noise with x gives r near 0, and y = x + small noise near 1. The estimate equals the partial
    correlation given the group (residuals of a least-squares fit on group indicators)."""
    rng = np.random.default_rng(0)
    groups = np.repeat(["a", "b", "c"], 20)
    shift = {"a": 0.0, "b": 5.0, "c": 10.0}
    x = rng.normal(size=60) + [shift[g] for g in groups]
    unrelated = rng.normal(size=60) + [shift[g] for g in groups]
    related = x + rng.normal(scale=0.3, size=60)
    assert np.corrcoef(x, unrelated)[0, 1] > 0.9
    apart = stats.within_group_correlation(x, unrelated, groups)
    assert apart.low < 0 < apart.high and apart.n == 60 and apart.df == 55
    together = stats.within_group_correlation(x, related, groups)
    assert together.low > 0.9
    indicators = np.stack([groups == g for g in "abc"], axis=1).astype(float)
    residual = lambda v: v - indicators @ np.linalg.lstsq(indicators, v, rcond=None)[0]  # noqa: E731
    assert together.estimate == pytest.approx(np.corrcoef(residual(x), residual(related))[0, 1])
    single = stats.within_group_correlation([1.0, 2.0, 3.0, 9.0], [2.0, 1.0, 3.0, 0.0], ["a", "a", "a", "b"])
    assert single.n == 3  # a group of one value carries no within-group information
    flat = stats.within_group_correlation([1.0, 1.0, 2.0, 2.0], [1.0, 2.0, 3.0, 4.0], "aabb")
    assert np.isnan(flat.estimate)
