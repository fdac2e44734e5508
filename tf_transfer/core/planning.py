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
