"""How many seeds a study needs: the planning side of `stats`' paired intervals, used before a study's runs to fix
its seeds per task from the spread earlier runs measured (experiments/methods_paired.py).

Example:

>>> from tf_transfer.core import planning
>>> planning.seeds_for_margin(planning.pooled_sd([[0.2, -0.5, 0.4], [1.0, 0.1, 0.6]]), margin=1.0)
4
"""

from __future__ import annotations

import numpy as np


def expected_half_width(sd: float, n: int, confidence: float = 0.95) -> float:
    """The half-width of a paired t interval over `n` seeds whose differences have standard deviation `sd`:
    t(1 - (1 - confidence) / 2, n - 1) * sd / sqrt(n) (a study's planning figure; the realised width varies with the
    seeds' own spread). NaN below 2 seeds.

    >>> round(expected_half_width(1.0, 5), 3)
    1.242
    """
    from scipy import stats

    if n < 2:
        return float("nan")
    return float(stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / np.sqrt(n))


def seeds_for_margin(sd: float, margin: float, confidence: float = 0.95, most: int = 100):
    """The fewest seeds (at least 2) whose paired interval's expected half-width (`expected_half_width`) is at most
    `margin`; None where even `most` seeds are not enough (the task is undecidable at that budget).

    >>> seeds_for_margin(0.59, 1.0), seeds_for_margin(1.56, 1.0), seeds_for_margin(1.85, 1.0, most=12)
    (4, 12, None)
    """
    for n in range(2, most + 1):
        if expected_half_width(sd, n, confidence) <= margin:
            return n
    return None


def pooled_sd(samples) -> float:
    """The pooled standard deviation of several samples (each its own mean): sqrt(sum (n_i - 1) s_i^2 / sum (n_i -
    1)); NaN where no sample has two values.

    >>> round(pooled_sd([[0.0, 1.0], [5.0, 5.0, 8.0]]), 3)
    1.472
    """
    parts = [np.asarray(s, np.float64) for s in samples if len(s) >= 2]
    df = sum(len(s) - 1 for s in parts)
    if not df:
        return float("nan")
    return float(np.sqrt(sum(np.sum((s - s.mean()) ** 2) for s in parts) / df))


def upper_sd(sd: float, df: int, confidence: float = 0.8) -> float:
    """The one-sided `confidence` upper bound of a standard deviation estimated with `df` degrees of freedom:
    sd * sqrt(df / chi2(1 - confidence, df)). Planning on it, not on the pilot's own estimate, keeps a study from
    being undersized by a pilot that happened to spread little (a pilot of few seeds often does).

    >>> round(upper_sd(1.0, 12), 3)
    1.24
    """
    from scipy import stats

    return float(sd * np.sqrt(df / stats.chi2.ppf(1 - confidence, df)))


def study_level(tasks: int, claims: int, alpha: float = 0.025) -> float:
    """The one-sided level one task's test of one claim must pass when a study corrects over `tasks` (Holm) and over
    its `claims` (Bonferroni): alpha / (tasks * claims), Holm's first and strictest step, so a plan sized at it holds
    at every step.

    >>> study_level(2, 3)
    0.004166666666666667
    """
    return alpha / (tasks * claims)


# Beyond it the tail on the far side needs a normal draw 30 SDs out: below 1e-190, whatever the df.
FAR_SHIFT = 30.0


def power(true_difference: float, margin: float, sd: float, n: int, level: float = 0.025) -> float:
    """The chance that a paired t test over `n` seeds decides the claim "as good as within `margin`" (either way:
    the interval's bound at one-sided `level` above -margin, or its other bound below it) when the seed-paired
    differences are normal with mean `true_difference` and standard deviation `sd`. The statistic (mean + margin) /
    (s / sqrt(n)) is noncentral t with n - 1 df and noncentrality (true_difference + margin) sqrt(n) / sd. NaN below
    2 seeds.

    >>> round(power(0.0, 1.0, 0.59, 4), 2), round(power(0.0, 1.0, 0.59, 4, study_level(2, 3)), 2)
    (0.63, 0.19)
    """
    from scipy import stats

    if n < 2:
        return float("nan")
    if sd == 0:  # every paired difference the same: an infinite statistic, decided unless the mean is on the margin
        return float(true_difference + margin != 0)
    df, shift = n - 1, (true_difference + margin) * np.sqrt(n) / sd
    critical = stats.t.ppf(1 - level, df)
    tails = stats.nct.sf(critical, df, shift), stats.nct.cdf(-critical, df, shift)
    # scipy's noncentral t gives NaN for a tail that underflows (a shift of about 50 and beyond at 2 df): it is 0
    return float(sum(0.0 if np.isnan(p) and abs(shift) > FAR_SHIFT else p for p in tails))


def seeds_for_power(sd: float, margin: float, true_difference: float = 0.0, level: float = 0.025,
                    target: float = 0.8, most: int = 100):
    """The fewest seeds (at least 2) whose paired test decides with probability at least `target` at
    `true_difference` (`power`); None where even `most` are not enough.

    >>> seeds_for_power(0.59, 1.0), seeds_for_power(upper_sd(0.59, 12), 1.0, level=study_level(2, 3))
    (5, 11)
    """
    for n in range(2, most + 1):
        if power(true_difference, margin, sd, n, level) >= target:
            return n
    return None
