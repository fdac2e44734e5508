"""A Markdown table comparing finished (or unfinished) stack-and-finetune runs, from their summary.json files.

    python -m tf_transfer.stack --report=runs/stack/quora/linear_stack_and_finetune,runs/stack/quora/linear_finetune_only

Each run gets its validation scores after the last finished epoch (not selected on anything) and at its best epoch
(picked on the same validation scores, so optimistic when there is no test file), the epoch and phase that was,
how phase 1 ended, and the training seconds of both phases. A folder without a finished epoch is listed as missing.
"""

from __future__ import annotations

import os

from tf_transfer.training import run_record


def _metric_names(summaries: list) -> list:
    """The validation metrics of the first run with an epoch, primary metric first."""
    for summary in summaries:
        if summary and summary.get("epochs"):
            names = list(summary["epochs"][-1]["val"])
            primary = summary.get("metric")
            return [primary] + [name for name in names if name != primary] if primary in names else names
    return []


def _phase1(summary: dict) -> str:
    phase = next((p for p in summary.get("phases", []) if p.get("phase") == 1), None)
    if phase is None:
        return "none"
    epochs = phase["last_epoch"] - phase["first_epoch"] + 1
    return f"{epochs} ({phase.get('ended_by') or 'unfinished'})"


def report_table(run_dirs: list) -> str:
    """The Markdown table described in the module docstring, one row per folder in `run_dirs`."""
    summaries = [run_record.read_summary(run_dir) for run_dir in run_dirs]
    metrics = _metric_names(summaries)
    columns = (["run", "head", "strategy", "phase 1 epochs (ended by)"]
               + [f"val {name} (last)" for name in metrics] + ["best epoch (phase)"]
               + [f"val {name} (best)" for name in metrics]
               + ["epochs", "train time (s)", "train examples", "precision"])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for run_dir, summary in zip(run_dirs, summaries):
        name = os.path.basename(os.path.normpath(run_dir))
        if not summary or not summary.get("epochs"):
            lines.append(f"| {name} | " + " | ".join(["missing"] + [""] * (len(columns) - 2)) + " |")
            continue
        epochs = summary["epochs"]
        last = epochs[-1]
        best = epochs[summary["best_epoch"] - 1] if summary.get("best_epoch") else None

        def cells(epoch):
            if epoch is None:
                return ["n/a"] * len(metrics)
            return ["n/a" if epoch["val"].get(m) is None else f"{epoch['val'][m]:.4f}" for m in metrics]

        max_epochs = summary.get("config", {}).get("max_epochs", "?")
        done = f"{len(epochs)}/{max_epochs}" + ("" if summary.get("completed") else " (unfinished)")
        train_examples = summary.get("examples", {}).get("train", "?")
        lines.append("| " + " | ".join(
            [name, summary.get("head", "?"), summary.get("strategy", "?"), _phase1(summary)] + cells(last)
            + [f"{best['epoch']} ({best['phase']})" if best else "n/a"] + cells(best)
            + [done, f"{last['train_time_s']:.0f}", str(train_examples), summary.get("precision", "float32")]) + " |")
    return "\n".join(lines)
