"""The adaptive-freezing study's protocol, shared by its grid (experiments/adaptive_freezing.py) and its report: the
compared methods' names, the grid's parts and the seed whose runs choose full fine-tuning's rate and the static k
(`choose_k`), and a run's time to its best epoch. Kept apart from the report so that the grid takes nothing from it.

Example:

>>> from tf_transfer.reporting.adaptive_freezing_protocol import AUTOFREEZE, seed_part
>>> seed_part(3, AUTOFREEZE)
'seed 3: AutoFreeze'
"""

from __future__ import annotations

from tf_transfer.reporting import tables as reports

# The compared methods, in the report's order, and the grid's parts (experiments/adaptive_freezing.py, which imports
# these names: the report imports no grid).
FULL, AUTOFREEZE, FREEZEOUT, STATIC = "full fine-tuning", "AutoFreeze", "FreezeOut", "best static k"
SEARCH_PART, GRID_PART = f"search: {FULL}", "static k at seed 0"
SEARCH_SEED = 0  # the seed whose runs choose the rate and the static k; never compared
# Within this much (in the metric's units: 0.5 points) of full fine-tuning's seed-0 validation score, a static k
# counts as scoring the same.
SAME_SCORE = 0.005


def seed_part(seed: int, method: str) -> str:
    return f"seed {seed}: {method}"


def time_to_best(summary: dict):
    """CPU seconds of training to the best epoch, the cache's build charged (`tables.elapsed`)."""
    epoch = reports.best_epoch(summary)
    return None if epoch is None else reports.elapsed(summary, epoch, "cpu")


def choose_k(found: dict, reference) -> int:
    """The static k the grid's seeds train, of `{k: (validation score, seconds to the best epoch)}` of the seed-0
    grid: the cheapest k scoring within `SAME_SCORE` of `reference` (full fine-tuning's), ties to the smaller k;
    else the best-scoring k, ties to the smaller.

    >>> choose_k({1: (0.80, 10.0), 2: (0.853, 20.0), 3: (0.86, 30.0)}, 0.857)
    2
    >>> choose_k({1: (0.80, 10.0), 2: (0.83, 20.0)}, 0.857)
    2
    """
    close = [k for k, (score, seconds) in found.items()
             if score is not None and seconds is not None and score >= reference - SAME_SCORE]
    if close:
        return min(close, key=lambda k: (found[k][1], k))
    return max(found, key=lambda k: (float("-inf") if found[k][0] is None else found[k][0], -k))


# The compared methods, in the order the report lists them.
METHODS = (FULL, AUTOFREEZE, FREEZEOUT, STATIC)


def compared_method(part: str):
    """The compared method a part's runs belong to (`seed 3: AutoFreeze` -> `AutoFreeze`); None for the seed-0
    search and static grid."""
    method = part.split(": ", 1)[1] if part.startswith("seed ") else None
    return method if method in METHODS else None
