"""`compare`: several settings (trainable blocks, methods, seeds) on a user's own data, one table row per setting
with its score, time and memory and the seed-paired 95% intervals of their differences from full fine-tuning, and a
figure of score against time (docs/python.md). The runs are the GLUE trainer's (`studies/glue/comparison_runs.py`).

Example:

>>> import tf_transfer
>>> table = tf_transfer.compare(reviews, [2, {"method": "lora", "rank": 8, "lr": 1e-3}], seeds=[0, 1, 2],
...                             folder="runs/reviews")  # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
from typing import Callable, Optional

from tf_transfer.core import stats
from tf_transfer.reporting import tables
from tf_transfer.studies.glue import comparison_runs

# Each compared quantity: its column and how it is read from a completed run's summary.
MEASURES = {
    "score": lambda summary: _score(summary),
    "time_s": lambda summary: tables.elapsed(summary, _best(summary)),
    "peak_memory_mb": lambda summary: summary.get("peak_memory_mb"),
}


def compare(data, settings, seeds=(0, 1, 2), folder: str = "compare_runs", *, text_columns="text",
            label_column: str = "label", validation=None, test=None, figure: Optional[str] = None,
            log: Callable = print, **common):
    """Trains each setting at each seed on `data` (runs already completed in `folder` are read, not trained again)
    and compares them with full fine-tuning at the same seeds.

    Each run is the GLUE trainer's on your file (`python -m tf_transfer.glue --train_file=...`): the seed fixes the
    held-out validation split (without `validation`), the sample and the order, so a setting and full fine-tuning
    at one seed see the same data, and their differences pair by seed. The score is the validation metric's (the
    test data's where `test` is given) at each run's best epoch on validation; the time is wall seconds of training
    to that epoch, the frozen-prefix cache's build charged; the memory the process's peak resident set while
    training. Runs not given a setting take a first run's: all-MiniLM-L6-v2, batch 32, up to 5 epochs stopped early.

    Args:
      data: the training data: a pandas DataFrame, or the path of a `.csv`, `.tsv` or `.jsonl` file.
      settings: a list of settings, or a dict of them by the names to show: each a number of top blocks to train
        (`2`: the embeddings and the other blocks frozen, their output cached) or `"all"`, or a dict of the GLUE
        trainer's settings (`method`, `trainable_layers`, `lr`, `cache_frozen`, ...) and the method's options
        (`{"method": "lora", "rank": 8, "lr": 1e-3}`). Full fine-tuning is added when missing.
      seeds: the seeds each setting runs at (two or more for intervals).
      folder: where the runs live; calling again with the same folder resumes.
      text_columns: the text column, or two for sentence pairs.
      label_column: the label column.
      validation: validation data (a DataFrame or a file) for early stopping; default 10% of `data` held out.
      test: test data, scored at each run's best epoch instead of validation.
      figure: a path to save the figure of score against time to (`comparison_figure`).
      log: where each run's line goes.
      **common: settings of every run, e.g. `preset`, `max_epochs`, `batch_size`, `max_seq_length`, `lr`.

    Returns:
      A pandas DataFrame, one row per setting (full fine-tuning first): `runs` completed, `score` and `score_sd`,
      `time_s`, `peak_memory_mb` (means over seeds), `trainable_params`, and for each of `score`, `time_s` and
      `peak_memory_mb` the paired difference from full fine-tuning, `<name>_diff` with its 95% interval
      `<name>_diff_low` and `<name>_diff_high` (NaN for full fine-tuning itself and below two paired seeds). Its
      `attrs` give the `metric`, what `score` was measured on (`score_on`), and the `ran` and `completed` counts.

    Raises:
      TransferError: a setting, option or data set the commands refuse (before any training), or runs that failed.

    Examples:

    >>> import tf_transfer
    >>> tf_transfer.compare("reviews.csv", [0, 2], seeds=[0, 1], text_columns="review",
    ...                     label_column="stars")  # doctest: +SKIP
    """
    os.makedirs(folder, exist_ok=True)
    files = {"train_file": comparison_runs.data_file(data, folder, "train"),
             "validation_file": comparison_runs.data_file(validation, folder, "validation"),
             "test_file": comparison_runs.data_file(test, folder, "test")}
    columns = (text_columns,) if isinstance(text_columns, str) else tuple(text_columns)
    shared = {**{k: v for k, v in files.items() if v}, "text_columns": columns, "label_column": label_column,
              "cache_dir": os.path.join(folder, "cache"), **common}
    listed = comparison_runs.runs(comparison_runs.settings_by_label(settings), seeds, shared)
    counts = comparison_runs.train(folder, listed, log)
    table = results_table(comparison_runs.collect(folder, listed, log))
    table.attrs.update(ran=counts["ran"], completed=counts["completed"])
    if figure:
        comparison_figure(table).savefig(figure, dpi=120)
    return table


def results_table(collected: list):
    """The table `compare` returns, from `studies.glue.comparison_runs.collect`'s entries (full fine-tuning's first)."""
    import pandas as pd

    by_setting = {}
    for entry in collected:
        by_setting.setdefault(entry["setting"], []).append(entry["summary"])
    reference = [s for s in next(iter(by_setting.values())) if s]
    rows = [_row(name, [s for s in summaries if s], reference, index == 0)
            for index, (name, summaries) in enumerate(by_setting.items())]
    table = pd.DataFrame(rows).set_index("setting")
    done = [s for summaries in by_setting.values() for s in summaries if s]
    table.attrs.update(metric=done[0]["metric"] if done else None,
                       score_on="test" if done and all(_best(s).get("test") for s in done) else "validation")
    return table


def _row(name: str, summaries: list, reference: list, is_reference: bool) -> dict:
    first = summaries[0] if summaries else {}
    row = {"setting": name, "method": first.get("method"), "trainable_layers": first.get("trainable_layers"),
           "lr": first.get("lr"), "runs": len(summaries)}
    for measure, value in MEASURES.items():
        row[measure], sd = tables.mean_std([value(s) for s in summaries])
        if measure == "score":
            row["score_sd"] = sd
    row["trainable_params"] = first.get("trainable_params")
    for measure, value in MEASURES.items():
        # Full fine-tuning against itself has no difference to show: NaN, as `stats` writes what is undefined.
        interval = (stats.paired_difference([], []) if is_reference else
                    tables.seed_difference(summaries, reference, value))
        row.update({f"{measure}_diff": interval.estimate, f"{measure}_diff_low": interval.low,
                    f"{measure}_diff_high": interval.high})
    return {k: (math.nan if v is None else v) for k, v in row.items()}


def _best(summary: dict) -> dict:
    return tables.best_epoch(summary) or summary["epochs"][-1]


def _score(summary: dict) -> Optional[float]:
    best = _best(summary)
    if best.get("test"):
        return tables.test_score(best, summary["metric"])
    return (best.get("val") or {}).get(summary["metric"])


def comparison_figure(table):
    """Score against time, one point per setting of `compare`'s table (mean over seeds, the score's sample SD as a
    bar), full fine-tuning in red. A matplotlib `Figure` made without pyplot, so that it changes no backend: a
    notebook shows it, `.savefig(path)` writes it.

    Args:
      table: the DataFrame `compare` returned.

    Returns:
      A `matplotlib.figure.Figure`.

    Examples:

    >>> import pandas as pd
    >>> from tf_transfer.reporting import comparison
    >>> table = pd.DataFrame({"score": [0.9, 0.88], "score_sd": [0.01, 0.02], "time_s": [100.0, 30.0]},
    ...                      index=pd.Index(["full fine-tuning", "last 2"], name="setting"))
    >>> table.attrs["metric"], table.attrs["score_on"] = "accuracy", "validation"
    >>> comparison.comparison_figure(table).axes[0].get_ylabel()
    'validation accuracy'
    """
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.4))
    axis = figure.subplots()
    for position, (name, row) in enumerate(table.iterrows()):
        sd = row["score_sd"]
        axis.errorbar(row["time_s"], row["score"], yerr=None if math.isnan(sd) else sd, fmt="o", capsize=3,
                      color="tab:red" if position == 0 else "tab:blue")
        axis.annotate(name, (row["time_s"], row["score"]), textcoords="offset points", xytext=(5, 4), fontsize=8)
    axis.set_xlabel("time to the best epoch (s, wall, cache build included)")
    axis.set_ylabel(f"{table.attrs.get('score_on', 'validation')} {table.attrs.get('metric', 'score')}")
    axis.set_title("score against training time per setting (mean ± sd over seeds)")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    return figure
