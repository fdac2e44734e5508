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

Claims. A claim is a direction and a margin on a difference, ours minus the reference (e.g. "as good as full
fine-tuning, within 1 point": direction "as good as", margin 0.01). Its verdict rests on the difference's 95%
interval, never on the point estimate:

- **Pairing.** Where the two sides' seeds pair (the same seed fixes the same validation split and training sample,
  as in every GLUE run here), the interval is the paired one on the per-seed differences (`paired_difference`):
  it removes what the seeds share, so it is narrower wherever seeds correlate. Otherwise (independent groups:
  seeds against folds, different splits) it is Welch's (`welch_difference`). Each report says which it used.
- **t, not bootstrap, at the sizes the studies have.** Intervals are Student's t (paired: n - 1 df; Welch:
  Welch-Satterthwaite df). The studies have 2 to 10 seeds, and a bootstrap of so few values is not an interval to
  trust: the percentile interval of n values never reaches beyond their range, and covers far less than 95% at
  n = 3 (t's wide intervals at few df are the honest answer there). `bootstrap_difference` (percentile, seeded, so a
  report reproduces exactly) is for many values, where the normality t leans on is in doubt; `difference(...,
  method="bootstrap")` asks for it.
- **Verdicts** (`verdict`, one interval): *reproduced* where the whole interval is on the claim's side of the margin,
  *not reproduced* where the whole interval is on the other side, *inconclusive* otherwise, and wherever the interval
  is undefined (fewer than two seeds, no spread).
- **Holm across tasks** (`verdicts`). A claim tested on several tasks is one family: per task, the one-sided p-value
  of the side the estimate favours (`one_sided_p`; at 0.025 it decides exactly as the 95% interval's bound does) is
  adjusted by Holm's step-down over the family's tasks (`holm`), and the task's verdict is decided at adjusted
  p < 0.025. So with one task the verdict is the interval's; with several, a bound just past the margin may no longer
  decide, and the cell says so with the adjusted p. Every cell states its (unadjusted 95%) interval
  (`Verdict.cell`, `verdict_cell`: `inconclusive: -1.6 [-5.8, +2.7]`). `overall` reads a family's verdicts as one
  claim "on every task"; a claim about the mean over tasks is tested once on `mean_of` the tasks' intervals.
- **Not testable at this budget.** Decided before the runs: a task counts for a score claim only where the reference
  (full fine-tuning) beats the constant prediction by at least 10 points on validation (`learned`); elsewhere the
  claim there is `NOT_TESTABLE`, and it is left out of the family.

>>> ours, full = [0.84, 0.80, 0.86], [0.85, 0.82, 0.86]          # paired by seed
>>> stats.paired_difference(ours, full).text(scale=100)
'-1.0 [-3.5, +1.5]'
>>> stats.welch_difference(ours, full).text(scale=100)          # the same numbers unpaired: wider
'-1.0 [-7.3, +5.3]'
>>> stats.verdict(stats.paired_difference(ours, full), margin=0.05)
'reproduced'
>>> found = stats.verdicts({"rte": stats.paired_difference(ours, full), "mrpc": None}, margin=0.01)
>>> found["rte"].cell(scale=100), found["mrpc"].cell()
('inconclusive: -1.0 [-3.5, +1.5]', 'not testable at this budget')
>>> [round(p, 3) for p in stats.holm([0.01, 0.04, 0.03])]
[0.03, 0.06, 0.06]
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Optional

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
# A claim none of whose comparisons has run yet: no interval exists, so no verdict, not even "inconclusive".
NOT_RUN = "not run yet"
# This project's own targets (not a paper's claims) read as met or missed: "not reproduced" would say a paper was
# contradicted where only our bar, on our hardware, was not reached.
TARGET_MET, TARGET_MISSED = "target met", "target missed"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_TESTABLE, NOT_RUN, TARGET_MET, TARGET_MISSED)


@dataclasses.dataclass(frozen=True)
class Interval:
    """A difference's estimate and its two-sided interval at `confidence`; `method` says how it was made
    ("paired t", "Welch t", "paired bootstrap", "bootstrap") and `n` how many pairs (paired) or the smaller group's
    size. Bounds are NaN where too few values make them undefined. A t interval keeps its standard error `se` and
    degrees of freedom `df`, a bootstrap interval its resampled estimates `draws`: what `one_sided_p` and `mean_of`
    read."""

    estimate: float
    low: float
    high: float
    n: int
    method: str
    confidence: float = 0.95
    se: float = float("nan")
    df: float = float("nan")
    draws: tuple = dataclasses.field(default=(), repr=False, compare=False)

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
    se = float(d.std(ddof=1) / np.sqrt(n))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * se)
    return Interval(estimate, estimate - half, estimate + half, n, "paired t", confidence, se, float(n - 1))


def paired_ratio(a, b, confidence: float = 0.95) -> Interval:
    """The geometric mean of a_i / b_i over pairs (e.g. a route's time as a share of full fine-tuning's, seed by
    seed), with Student's t interval on the log ratios taken back to ratios. A ratio's interval belongs on the log
    scale: it stays positive, and 2x above and 2x below are equally far. The values must be positive.

    >>> share = paired_ratio([30.0, 36.0, 33.0], [100.0, 100.0, 100.0])
    >>> round(share.estimate, 3), round(share.low, 3), round(share.high, 3)
    (0.329, 0.262, 0.413)
    """
    a, b = _clean(a), _clean(b)
    if (a <= 0).any() or (b <= 0).any():
        raise ValueError("a ratio's values must be positive")
    logs = paired_difference(np.log(a), np.log(b), confidence)
    # `se` is left out: it is the log ratios', and `one_sided_p` would read it against a ratio.
    return dataclasses.replace(logs, estimate=float(np.exp(logs.estimate)), low=float(np.exp(logs.low)),
                               high=float(np.exp(logs.high)), method="paired t on log ratios", se=float("nan"))


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
        return Interval(estimate, bound, bound, n, "Welch t", confidence, 0.0 if same else float("nan"))
    se = float(np.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b)))
    half = float(stats.t.ppf(0.5 + confidence / 2, df) * se)
    return Interval(estimate, estimate - half, estimate + half, n, "Welch t", confidence, se, df)


def bootstrap_difference(a, b, paired: bool, confidence: float = 0.95, resamples: int = 9999,
                         seed: int = 0) -> Interval:
    """mean(a - b) (paired) or mean(a) - mean(b) with a percentile bootstrap interval (`scipy.stats.bootstrap`,
    seeded: the same values give the same interval). Paired resamples the pairs; unpaired resamples each group on
    its own. Undefined (NaN bounds) below two values in a group. Meant for many values (see the module's note)."""
    from scipy import stats

    a, b = _clean(a), _clean(b)
    method = "paired bootstrap" if paired else "bootstrap"
    if paired and len(a) != len(b):
        raise ValueError(f"paired values need equal lengths, got {len(a)} and {len(b)}")
    n = len(a) if paired else min(len(a), len(b))
    if n == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0, method, confidence)
    estimate = float((a - b).mean() if paired else a.mean() - b.mean())
    if n < 2:
        return Interval(estimate, float("nan"), float("nan"), n, method, confidence)
    rng = np.random.default_rng(seed)
    if paired:
        data, statistic = (a - b,), lambda d, axis=-1: np.mean(d, axis=axis)
    else:
        data, statistic = (a, b), lambda x, y, axis=-1: np.mean(x, axis=axis) - np.mean(y, axis=axis)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate resamples (no spread): the bounds are then the estimate
        result = stats.bootstrap(data, statistic, n_resamples=resamples, confidence_level=confidence,
                                 method="percentile", vectorized=True, paired=False, random_state=rng)
    draws = tuple(float(x) for x in result.bootstrap_distribution)
    return Interval(estimate, float(result.confidence_interval.low), float(result.confidence_interval.high), n,
                    method, confidence, draws=draws)


def difference(a, b, paired: bool, confidence: float = 0.95, method: str = "t") -> Interval:
    """The interval of `a` minus `b`: paired where the values pair (same seeds: same split and sample), Welch
    otherwise; by t (`method="t"`, the default: see the module's note) or by a seeded percentile bootstrap
    (`method="bootstrap"`)."""
    if method == "bootstrap":
        return bootstrap_difference(a, b, paired, confidence)
    if method != "t":
        raise ValueError(f"method must be 't' or 'bootstrap', got {method!r}")
    return paired_difference(a, b, confidence) if paired else welch_difference(a, b, confidence)


def within_group_correlation(x, y, groups, confidence: float = 0.95) -> Interval:
    """Pearson's r of `x` and `y` after each is centred on its group's mean (what they share beyond the groups'
    differences, e.g. runs of the same setting measured at different times), with Fisher's z interval on the
    partial correlation's standard error 1 / sqrt(n - g - 2) (g groups: the g - 1 group means beyond the overall one
    are controlled for); groups of one value add nothing. Bounds NaN where n - g - 2 < 1; the estimate NaN where
    either side does not vary within its groups.

    >>> r = within_group_correlation([1.0, 2.0, 3.1, 10.0, 11.0, 12.2], [5.0, 6.0, 7.0, 1.0, 2.0, 3.0], "aaabbb")
    >>> round(r.estimate, 3), r.n, r.defined
    (0.999, 6, True)
    """
    from scipy import stats

    x, y, groups = _clean(x), _clean(y), list(groups)
    if not (len(x) == len(y) == len(groups)):
        raise ValueError(f"x, y and groups need equal lengths, got {len(x)}, {len(y)} and {len(groups)}")
    keep = [i for i, g in enumerate(groups) if groups.count(g) > 1]
    x, y, groups = x[keep], y[keep], [groups[i] for i in keep]
    n, g = len(x), len(set(groups))
    for values in (x, y):
        for group in set(groups):
            members = [i for i, h in enumerate(groups) if h == group]
            values[members] -= values[members].mean()
    scale = float(np.sqrt(np.sum(x * x) * np.sum(y * y)))
    nan = float("nan")
    if not scale:
        return Interval(nan, nan, nan, n, "within-group Pearson", confidence)
    r = float(np.clip(np.sum(x * y) / scale, -1.0, 1.0))
    df = n - g - 2
    if df < 1 or abs(r) == 1.0:
        return Interval(r, nan, nan, n, "within-group Pearson", confidence, df=float(df))
    se = 1.0 / np.sqrt(df)
    half = float(stats.norm.ppf(0.5 + confidence / 2) * se)
    z = float(np.arctanh(r))
    return Interval(r, float(np.tanh(z - half)), float(np.tanh(z + half)), n, "within-group Pearson", confidence,
                    float(se), float(df))


def mean_of(intervals, confidence: float = 0.95) -> Interval:
    """The interval of the mean of several t intervals' differences (e.g. one per task, tasks independent): the mean
    of their estimates, standard error sqrt(sum se²) / m, Welch-Satterthwaite df (sum se²)² / sum(se⁴ / df). Bounds
    NaN where any part has none.

    >>> parts = [Interval(-0.02, 0, 0, 3, "paired t", se=0.01, df=2.0), Interval(0.0, 0, 0, 3, "paired t", se=0.01,
    ...                                                                           df=2.0)]
    >>> mean_of(parts).text(scale=100)
    '-1.0 [-3.0, +1.0]'
    """
    from scipy import stats

    intervals = list(intervals)
    if not intervals:
        return Interval(float("nan"), float("nan"), float("nan"), 0, "mean of t", confidence)
    m = len(intervals)
    estimate = float(np.mean([i.estimate for i in intervals]))
    n = min(i.n for i in intervals)
    methods = sorted({i.method for i in intervals})
    method = "mean of " + ", ".join(methods)
    ses = np.asarray([i.se for i in intervals], np.float64)
    dfs = np.asarray([i.df for i in intervals], np.float64)
    if np.isnan(ses).any() or np.isnan(dfs[ses > 0]).any():
        return Interval(estimate, float("nan"), float("nan"), n, method, confidence)
    total = float(np.sum(ses**2))
    se = float(np.sqrt(total) / m)
    if total == 0:
        return Interval(estimate, estimate, estimate, n, method, confidence, 0.0, float("inf"))
    df = float(total**2 / np.sum(ses[ses > 0] ** 4 / dfs[ses > 0]))
    half = float(stats.t.ppf(0.5 + confidence / 2, df) * se)
    return Interval(estimate, estimate - half, estimate + half, n, method, confidence, se, df)


def one_sided_p(interval: Interval, threshold: float, side: str) -> float:
    """The one-sided p-value that the difference lies on `side` ("above" or "below") of `threshold`, i.e. of the
    null hypothesis that it lies on the other side: from the t distribution of a t interval, the share of resampled
    estimates of a bootstrap one ((k + 1) / (B + 1)). Below `(1 - confidence) / 2` exactly where the interval's bound
    on that side is past the threshold. NaN where undefined."""
    from scipy import stats

    if side not in ("above", "below"):
        raise ValueError(f"side must be 'above' or 'below', got {side!r}")
    sign = 1.0 if side == "above" else -1.0
    if interval.draws:
        draws = np.asarray(interval.draws)
        beyond = np.sum(sign * (draws - threshold) <= 0)
        return float((beyond + 1) / (len(draws) + 1))
    if np.isnan(interval.se) or np.isnan(interval.estimate):
        return float("nan")
    distance = sign * (interval.estimate - threshold)
    if interval.se == 0:
        return 0.0 if distance > 0 else 1.0
    return float(stats.t.sf(distance / interval.se, interval.df))


def holm(p_values) -> list:
    """Holm's step-down adjustment: the i-th smallest of m p-values becomes max over j <= i of min(1, (m - j + 1)
    p_(j)); rejecting where the adjusted p < alpha controls the chance of any false rejection at alpha. NaN stays NaN
    and does not count in m.

    >>> holm([0.01, 0.04, 0.03, float("nan")])
    [0.03, 0.06, 0.06, nan]
    """
    p = [float(x) for x in p_values]
    present = sorted((x, i) for i, x in enumerate(p) if not np.isnan(x))
    m = len(present)
    adjusted, running = list(p), 0.0
    for rank, (x, i) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * x))
        adjusted[i] = round(running, 12)
    return adjusted


def verdict(interval: Interval, margin: float, direction: str = "as good as") -> str:
    """`reproduced`, `not reproduced` or `inconclusive` for a claim about a difference (ours minus reference):

    - "as good as": reproduced where the interval's low bound is above -margin, not reproduced where its high bound
      is below -margin;
    - "at least": reproduced where the low bound is above +margin, not reproduced where the high bound is below it
      (e.g. "saves at least 30%");
    - "at most": reproduced where the high bound is below +margin, not reproduced where the low bound is above it;
    inconclusive otherwise (a bound exactly at the margin included, as `verdicts` decides), and wherever the
    interval is undefined."""
    if not interval.defined:
        return INCONCLUSIVE
    if direction == "as good as":
        return REPRODUCED if interval.low > -margin else NOT_REPRODUCED if interval.high < -margin else INCONCLUSIVE
    if direction == "at least":
        return REPRODUCED if interval.low > margin else NOT_REPRODUCED if interval.high < margin else INCONCLUSIVE
    if direction == "at most":
        return REPRODUCED if interval.high < margin else NOT_REPRODUCED if interval.low > margin else INCONCLUSIVE
    raise ValueError(f"unknown claim direction {direction!r}")


THRESHOLD_SIDES = {"as good as": (-1.0, "above"), "at least": (1.0, "above"), "at most": (1.0, "below")}


def verdict_cell(kind: str, interval: Optional[Interval] = None, digits: int = 1, scale: float = 1.0,
                 unit: str = "", note: str = "") -> str:
    """One verdict as every report writes it: `inconclusive: -1.6 [-5.8, +2.7]` (the interval times `scale`),
    `not testable at this budget`, or `inconclusive: no interval (1 seed)`; `note` is added in parentheses."""
    if kind == NOT_TESTABLE or interval is None:
        text = kind
    elif not interval.defined:
        text = f"{kind}: " + (interval.text(digits, scale, unit) + f", {interval.n} value(s)"
                              if not np.isnan(interval.estimate) else "no values")
    else:
        text = f"{kind}: {interval.text(digits, scale, unit)}"
    return text + (f" ({note})" if note else "")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One task's verdict in a family (`verdicts`): the kind, its interval, the one-sided p of the side its estimate
    favours and that p after Holm's adjustment over the family's `family` tests."""

    kind: str
    interval: Optional[Interval] = None
    p: float = float("nan")
    p_adjusted: float = float("nan")
    family: int = 1

    def cell(self, digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
        """`verdict_cell`, plus Holm's adjusted p where the adjustment, not the interval, made it inconclusive."""
        note = ""
        if (self.kind == INCONCLUSIVE and self.interval is not None and self.family > 1
                and not np.isnan(self.p) and self.p < (1 - self.interval.confidence) / 2):
            note = f"Holm p {self.p_adjusted:.2g} over {self.family} tasks"
        return verdict_cell(self.kind, self.interval, digits, scale, unit, note)


def verdicts(intervals: dict, margin: float, direction: str = "as good as") -> dict:
    """Per task, the verdict of a claim tested on several tasks, Holm-corrected across them (see the module's note).

    `intervals`: task -> `Interval`, or None where the task is not testable (`learned` is False): that task gets
    `NOT_TESTABLE` and is not counted in the family. The level is the intervals' own (95%: one-sided 0.025)."""
    if direction not in THRESHOLD_SIDES:
        raise ValueError(f"unknown claim direction {direction!r}")
    factor, claimed = THRESHOLD_SIDES[direction]
    other = "below" if claimed == "above" else "above"
    threshold = factor * margin
    sides, p_values = {}, {}
    for task, interval in intervals.items():
        if interval is None or np.isnan(interval.estimate):
            continue
        side = claimed if (interval.estimate - threshold) * (1 if claimed == "above" else -1) > 0 else other
        sides[task], p_values[task] = side, one_sided_p(interval, threshold, side)
    tested = [t for t in p_values if not np.isnan(p_values[t])]
    adjusted = dict(zip(tested, holm([p_values[t] for t in tested])))
    found = {}
    for task, interval in intervals.items():
        if interval is None:
            found[task] = Verdict(NOT_TESTABLE)
            continue
        p, q = p_values.get(task, float("nan")), adjusted.get(task, float("nan"))
        alpha = (1 - interval.confidence) / 2
        kind = INCONCLUSIVE
        if not np.isnan(q) and q < alpha:
            kind = REPRODUCED if sides[task] == claimed else NOT_REPRODUCED
        found[task] = Verdict(kind, interval, p, q, len(tested))
    return found


def overall(found) -> str:
    """A family's verdicts (`verdicts`, or kinds) read as one claim "on every task": not testable where no task is
    testable; not reproduced where any task is not reproduced (Holm keeps the chance of any false one at 5%);
    reproduced where every testable task is; inconclusive otherwise."""
    kinds = [v.kind if isinstance(v, Verdict) else v for v in (found.values() if isinstance(found, dict) else found)]
    testable = [k for k in kinds if k != NOT_TESTABLE]
    if not testable:
        return NOT_TESTABLE
    if NOT_REPRODUCED in testable:
        return NOT_REPRODUCED
    return REPRODUCED if all(k == REPRODUCED for k in testable) else INCONCLUSIVE


def learned(reference_validation, constant_validation, points: float = 10.0, scale: float = 100.0) -> bool:
    """Whether the reference (full fine-tuning) learned enough for a score claim to be tested: its mean validation
    score beats the constant prediction's by at least `points` (scores times `scale`). Decided before the runs:
    below it, the claim there is `NOT_TESTABLE`."""
    values = [v for v in reference_validation if v is not None]
    if not values or constant_validation is None:
        return False
    return (float(np.mean(values)) - constant_validation) * scale >= points

