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


# Verdicts of a claim against its margin, and the interval behind each. A claim is stated as a direction and a
# margin on a difference (ours minus the reference): "as good as" holds where the difference is above -margin,
# "at least" where it is above +margin, "at most" where it is below +margin.
REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
NOT_TESTABLE = "not testable at this budget"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_TESTABLE)


@dataclasses.dataclass(frozen=True)
class Interval:
    """A difference's estimate and its two-sided interval at `confidence`; `method` says how it was made
    ("paired t", "Welch t", "paired bootstrap", "bootstrap") and `n` how many pairs (paired) or the smaller group's
    size. Bounds are NaN where too few values make them undefined."""

    estimate: float
    low: float
    high: float
    n: int
    method: str
    confidence: float = 0.95

    @property
    def defined(self) -> bool:
        return not (np.isnan(self.low) or np.isnan(self.high))

    def text(self, digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
        """`-1.6 [-5.8, +2.7]` (times `scale`, e.g. 100 for points of a score in [0, 1]); the estimate alone with
        `(no interval)` where the bounds are undefined."""
        f = f"{{:+.{digits}f}}{unit}"
        if not self.defined:
            return f.format(self.estimate * scale) + " (no interval)" if not np.isnan(self.estimate) else "n/a"
        return (f.format(self.estimate * scale) + " [" + f.format(self.low * scale) + ", "
                + f.format(self.high * scale) + "]")


def _clean(values) -> np.ndarray:
    return np.asarray([v for v in values], np.float64)


def paired_difference(a, b, confidence: float = 0.95) -> Interval:
    """mean(a_i - b_i) over pairs (same seed: same split and sample) with Student's t interval on n - 1 df."""
    from scipy import stats

    a, b = _clean(a), _clean(b)
    if len(a) != len(b):
        raise ValueError(f"paired values need equal lengths, got {len(a)} and {len(b)}")
    d = a - b
    n = len(d)
    if n == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0, "paired t", confidence)
    estimate = float(d.mean())
    if n < 2:
        return Interval(estimate, float("nan"), float("nan"), n, "paired t", confidence)
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * d.std(ddof=1) / np.sqrt(n))
    return Interval(estimate, estimate - half, estimate + half, n, "paired t", confidence)


def welch_difference(a, b, confidence: float = 0.95) -> Interval:
    """mean(a) - mean(b) of independent groups with Welch's t interval (unequal variances, Welch-Satterthwaite df)."""
    from scipy import stats

    a, b = _clean(a), _clean(b)
    n = min(len(a), len(b))
    if n == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0, "Welch t", confidence)
    estimate = float(a.mean() - b.mean())
    df = welch_df(a, b)
    if n < 2 or np.isnan(df):
        same = n >= 2 and np.var(a) == 0 and np.var(b) == 0  # no spread at all: the difference is exact
        bound = estimate if same else float("nan")
        return Interval(estimate, bound, bound, n, "Welch t", confidence)
    half = float(stats.t.ppf(0.5 + confidence / 2, df) * np.sqrt(np.var(a, ddof=1) / len(a)
                                                                  + np.var(b, ddof=1) / len(b)))
    return Interval(estimate, estimate - half, estimate + half, n, "Welch t", confidence)


def difference(a, b, paired: bool, confidence: float = 0.95) -> Interval:
    """The interval of `a` minus `b`: paired t where the values pair (same seeds: same split and sample), Welch t
    otherwise."""
    return paired_difference(a, b, confidence) if paired else welch_difference(a, b, confidence)


def verdict(interval: Interval, margin: float, direction: str = "as good as") -> str:
    """`reproduced`, `not reproduced` or `inconclusive` for a claim about a difference (ours minus reference):

    - "as good as": reproduced where the interval's low bound is above -margin, not reproduced where its high bound
      is below -margin;
    - "at least": reproduced where the low bound is at or above +margin, not reproduced where the high bound is
      below it (e.g. "saves at least 30%");
    - "at most": reproduced where the high bound is at or below +margin, not reproduced where the low bound is
      above it;
    inconclusive otherwise, and wherever the interval is undefined."""
    if not interval.defined:
        return INCONCLUSIVE
    if direction == "as good as":
        return REPRODUCED if interval.low > -margin else NOT_REPRODUCED if interval.high < -margin else INCONCLUSIVE
    if direction == "at least":
        return REPRODUCED if interval.low >= margin else NOT_REPRODUCED if interval.high < margin else INCONCLUSIVE
    if direction == "at most":
        return REPRODUCED if interval.high <= margin else NOT_REPRODUCED if interval.low > margin else INCONCLUSIVE
    raise ValueError(f"unknown claim direction {direction!r}")


def learned(reference_validation, constant_validation, points: float = 10.0, scale: float = 100.0) -> bool:
    """Whether the reference (full fine-tuning) learned enough for a score claim to be tested: its mean validation
    score beats the constant prediction's by at least `points` (scores times `scale`). Decided before the runs:
    below it, the claim there is `NOT_TESTABLE`."""
    values = [v for v in reference_validation if v is not None]
    if not values or constant_validation is None:
        return False
    return (float(np.mean(values)) - constant_validation) * scale >= points
