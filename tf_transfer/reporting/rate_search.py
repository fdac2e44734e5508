"""How a GLUE grid picks a learning rate from its seed-0 search runs: a run's validation score at the epoch early
stopping keeps (`best_validation`), then the rate with the best one (`pick_rate`). Shared by the grids that search
rates (methods, methods_full, adaptive_freezing, methods_paired) and by their reports, which say what was picked.

Example:

>>> from tf_transfer.reporting.rate_search import pick_rate
>>> pick_rate({1e-4: 0.81, 3e-4: 0.84, 1e-3: None})
0.0003
"""

from __future__ import annotations

from tf_transfer.reporting import tables as reports


def best_validation(summary: dict):
    """The validation score of the epoch early stopping keeps (the best), on the run's metric."""
    epoch = reports.best_epoch(summary)
    return None if epoch is None else epoch["val"].get(summary["metric"])


def pick_rate(scores: dict):
    """The rate of `{rate: validation score or None}` with the best score; a tie goes to the smaller rate."""
    return max(scores, key=lambda lr: (float("-inf") if scores[lr] is None else scores[lr], -lr))
