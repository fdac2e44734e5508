"""The constant prediction's score on each run's own validation split: what decides whether a task was learned at a
study's budget (`stats.learned`: full fine-tuning's validation score at least 10 points above it).

A run's validation split is fixed by its settings (the seed, `validation_fraction`, the data), so the baseline is
computed per (task, seed) by reading the split again (no TensorFlow), and kept in the report's folder as
`majority_validation.csv`, from which the report regenerates where the data is not at hand.

Example:

>>> from tf_transfer.reporting import validation_baselines
>>> validation_baselines.mean_score({("rte", 0): {"score": 0.5}, ("rte", 1): {"score": 0.52}}, "rte")
0.51
"""

from __future__ import annotations

import csv
import os
from typing import Optional

from tf_transfer.reporting import tables

FILE = "majority_validation.csv"
HEADER = ["task", "seed", "metric", "score", "examples", "majority", "note"]


def of_run(summary: dict) -> Optional[dict]:
    """`tables.constant_baseline` on the validation split of the run `summary` describes, by its metric; None where
    the data cannot be read here."""
    from tf_transfer.core.errors import TransferError
    from tf_transfer.studies.glue.glue_settings import GlueSettings
    from tf_transfer.studies.glue.glue_task import load_data

    config = {k: v for k, v in (summary.get("config") or {}).items() if k in GlueSettings.__dataclass_fields__}
    try:
        settings = GlueSettings(**config)
        _, _, validation, _, _ = load_data(settings)
    except (TransferError, OSError, TypeError):
        return None
    return tables.constant_baseline(settings.task, validation.labels, summary["metric"])


def collect(runs: list, out: str) -> dict:
    """`{(task, seed): baseline}` for every (task, seed) of `runs` (summaries), computed from the data where it can
    be read, else taken from `out`'s previous `majority_validation.csv`; written back there."""
    previous = read(out)
    found = {}
    for summary in runs:
        key = (summary["task"], tables.run_seed(summary))
        if key in found:
            continue
        baseline = of_run(summary)
        if baseline is None:
            baseline = previous.get(key)
        if baseline is not None:
            found[key] = baseline
    write(out, found)
    return found


def read(out: str) -> dict:
    path = os.path.join(out, FILE)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {(row["task"], int(row["seed"])): {"metric": row["metric"], "score": float(row["score"]),
                                                  "examples": int(row["examples"]), "majority": row["majority"],
                                                  "note": row["note"]} for row in csv.DictReader(f)}


def write(out: str, baselines: dict) -> None:
    os.makedirs(out, exist_ok=True)
    tables.write_csv(os.path.join(out, FILE), HEADER,
                     [[task, seed, b["metric"], b["score"], b["examples"], b["majority"] or "", b["note"]]
                      for (task, seed), b in sorted(baselines.items())])


def mean_score(baselines: dict, task: str) -> Optional[float]:
    """The mean over seeds of a task's validation baselines; None where there is none."""
    scores = [b["score"] for (t, _), b in baselines.items() if t == task]
    return round(sum(scores) / len(scores), 12) if scores else None
