"""Small helpers the study reports share: scores out of summaries, mean ± std, Markdown and CSV tables, figures.

Example:

>>> from tf_transfer import reports
>>> reports.mean_std([0.5, 0.7])
(0.6, 0.1414213562373095)
>>> reports.cell([0.5, 0.7], expected=2)
'0.600 ± 0.141'
"""

from __future__ import annotations

import csv
import math
import os
from typing import Optional

import numpy as np


def mean_std(values) -> tuple:
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return None, None
    std = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return float(np.mean(values)), std


def cell(values, expected: int, digits: int = 3, scale: float = 1.0) -> str:
    """`mean ± std`, with `(n/expected)` when seeds are missing, or `missing` when none is there."""
    present = [v for v in values if v is not None]
    if not present:
        return "missing"
    mean, std = mean_std([v * scale for v in present])
    text = f"{mean:.{digits}f} ± {std:.{digits}f}"
    return text if len(present) >= expected else f"{text} ({len(present)}/{expected})"


def test_score(epoch_record: dict, metric: str) -> Optional[float]:
    """The test score of one epoch; for MNLI the matched dev set's."""
    test = epoch_record.get("test", {})
    if metric not in test and "dev_matched" in test:
        test = test["dev_matched"]
    return test.get(metric)


def best_epoch(summary: dict) -> Optional[dict]:
    if not summary or not summary.get("best_epoch"):
        return None
    return summary["epochs"][summary["best_epoch"] - 1]


def time_to_stop(summary: dict) -> Optional[float]:
    """Seconds of training up to the stopping point, plus the frozen-prefix cache's build time (never hidden)."""
    if not summary or not summary.get("epochs"):
        return None
    return summary["epochs"][-1]["train_time_s"] + (summary.get("cache_time_s") or 0.0)


def markdown_table(header: list, rows: list) -> str:
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_csv(path: str, header: list, rows: list) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # reports are written headless
    import matplotlib.pyplot as plt

    return plt
