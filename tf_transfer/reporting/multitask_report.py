"""A Markdown table comparing multi-task runs, from their summary.json files: the best-on-dev epoch's dev scores.

    python -m tf_transfer.multitask --report=runs/multitask/li_finetune,runs/multitask/li_concat

Example:

>>> from tf_transfer.reporting import multitask_report
>>> print(multitask_report.report_table(["/nonexistent/li_finetune"]).splitlines()[-1])
| li_finetune | missing |  |  |  |  |  |  |  |  |
"""

from __future__ import annotations

import os

from tf_transfer.training import run_record

REPORT_COLUMNS = ("run", "SST acc", "para acc", "STS r", "overall", "best epoch", "epochs", "train time (s)",
                  "examples/task", "precision")


def report_table(run_dirs: list) -> str:
    """A Markdown table, one row per run folder (its summary.json): the best-on-dev epoch's dev scores.

    A folder without summary.json, or without a completed epoch, is listed as missing rather than left out.
    """
    lines = ["| " + " | ".join(REPORT_COLUMNS) + " |", "|" + "---|" * len(REPORT_COLUMNS)]
    for run_dir in run_dirs:
        name = os.path.basename(os.path.normpath(run_dir))
        summary = run_record.read_summary(run_dir)
        if not summary or not summary.get("epochs"):
            lines.append(f"| {name} | " + " | ".join(["missing"] + [""] * (len(REPORT_COLUMNS) - 2)) + " |")
            continue
        best = summary.get("best_epoch")
        scores = summary["epochs"][best - 1]["test"] if best else {}

        def cell(key, scores=scores):
            value = scores.get(key)
            return "n/a" if value is None else f"{value:.4f}"

        done = len(summary["epochs"])
        epochs = f"{done}/{summary['config']['max_epochs']}" + ("" if summary.get("completed") else " (unfinished)")
        train_s = summary["epochs"][-1]["train_time_s"]
        per_task = summary["config"].get("max_train_examples") or "all"
        lines.append("| " + " | ".join([name, cell("sst_accuracy"), cell("paraphrase_accuracy"), cell("sts_pearson"),
                                         cell("overall"), str(best), epochs, f"{train_s:.0f}", str(per_task),
                                         summary.get("precision", "float32")]) + " |")
    return "\n".join(lines)
