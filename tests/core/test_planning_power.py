"""`planning.power` against a simulation: 10,000 studies of n seed-paired differences drawn at a stated true
difference, each decided by the paired t interval the reports use; the share decided is within 2 points of the
calculation. Vectorised, so the whole file runs in well under a second."""

import numpy as np
import pytest
from scipy import stats

from tf_transfer.core import planning

DRAWS = 10_000


def _simulated(true_difference, margin, sd, n, level, seed):
    differences = np.random.default_rng(seed).normal(true_difference, sd, size=(DRAWS, n))
    half = stats.t.ppf(1 - level, n - 1) * differences.std(axis=1, ddof=1) / np.sqrt(n)
    mean = differences.mean(axis=1)
    decided = (mean - half > -margin) | (mean + half < -margin)  # reproduced, or not reproduced
    return decided.mean()


@pytest.mark.parametrize("true_difference, sd, n, level", [(0.0, 0.59, 4, 0.025), (0.0, 1.36, 4, 0.0125),
                                                           (-0.5, 1.0, 8, planning.study_level(2, 3)),
                                                           (-2.0, 1.56, 12, 0.025)])
def test_power_matches_a_simulation_of_the_paired_interval(true_difference, sd, n, level):
    expected = planning.power(true_difference, 1.0, sd, n, level)
    assert abs(_simulated(true_difference, 1.0, sd, n, level, seed=n) - expected) < 0.02, expected


def test_seeds_for_power_are_the_fewest_reaching_it_and_the_pilot_bound_asks_for_more():
    sd = planning.upper_sd(0.59, 12)
    n = planning.seeds_for_power(sd, 1.0, level=planning.study_level(2, 3))
    assert planning.power(0.0, 1.0, sd, n, planning.study_level(2, 3)) >= 0.8
    assert planning.power(0.0, 1.0, sd, n - 1, planning.study_level(2, 3)) < 0.8
    assert n > planning.seeds_for_power(0.59, 1.0) > planning.seeds_for_margin(0.59, 1.0)
    assert planning.seeds_for_power(5.0, 1.0, most=12) is None


def test_power_where_the_differences_hardly_vary_is_a_certain_decision_not_nan():
    """Identical paired differences (sd 0) or nearly so: the statistic is (nearly) infinite and the claim decided
    either way; scipy's noncentral t underflows to NaN in the far tail there, which is no chance at all."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no division by zero on the way
        for sd in (0.0, 1e-3, 0.02):
            assert planning.power(0.0, 1.0, sd, 3) == pytest.approx(1.0), sd
            assert planning.power(-3.0, 1.0, sd, 3) == pytest.approx(1.0), sd  # shown not within the margin
        assert planning.power(-1.0, 1.0, 0.0, 3) == 0.0  # exactly at the margin: never either way
        assert planning.seeds_for_power(0.02, 1.0) == 2
