"""Mean, sample standard deviation and Welch's t-test under one convention, for every report.

Convention: the standard deviation is the sample one (ddof=1, the one Welch's test uses). A statistic that is
undefined for the values given is NaN, never a stand-in number: the mean of nothing, the spread of a single value
(0.0 would claim that seeds agreed), a t-test with fewer than two values in a group. JSON files write NaN as null
(`record.write_json_atomic`) and tables show the mean alone or `n/a`.

Example:

>>> from tf_transfer.core import stats
>>> round(stats.sample_std([0.5, 0.7]), 4), stats.sample_std([0.5])
(0.1414, nan)
>>> test = stats.welch_test([0.80, 0.82, 0.81, 0.79], [0.78, 0.80, 0.76, 0.77])
>>> round(test.t, 3), round(test.df, 2), round(test.p, 4)
(2.569, 5.58, 0.0452)
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np


def mean(values) -> float:
    """Arithmetic mean; NaN for no values."""
    return float(np.mean(np.asarray(values, np.float64))) if len(values) else float("nan")


def sample_std(values) -> float:
    """Sample standard deviation (ddof=1); NaN for fewer than two values."""
    return float(np.std(np.asarray(values, np.float64), ddof=1)) if len(values) > 1 else float("nan")


def summarise(values_by_metric: dict) -> dict:
    """`{"accuracy": [...], "f1": [...]}` -> `{accuracy_mean, accuracy_std, f1_mean, f1_std}`."""
    summary = {}
    for metric, values in values_by_metric.items():
        summary[f"{metric}_mean"] = mean(values)
        summary[f"{metric}_std"] = sample_std(values)
    return summary


def welch_df(a, b) -> float:
    """Welch-Satterthwaite degrees of freedom: (s1²/n1 + s2²/n2)² / ((s1²/n1)²/(n1-1) + (s2²/n2)²/(n2-1))."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if len(a) < 2 or len(b) < 2:
        return float("nan")
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    denominator = va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)
    return float((va + vb) ** 2 / denominator) if denominator > 0 else float("nan")


@dataclasses.dataclass
class WelchTest:
    t: float
    df: float
    p: float


def welch_test(a, b) -> WelchTest:
    """Welch's unequal-variance t-test of mean(a) vs mean(b): scipy's t and two-sided p, and the df behind them.

    NaN where undefined (fewer than two values in a group, or no variance in either).
    """
    from scipy import stats

    if len(a) < 2 or len(b) < 2:
        return WelchTest(float("nan"), float("nan"), float("nan"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # zero variance in both groups: NaN is the answer
        result = stats.ttest_ind(np.asarray(a, np.float64), np.asarray(b, np.float64), equal_var=False)
    return WelchTest(float(result.statistic), welch_df(a, b), float(result.pvalue))
