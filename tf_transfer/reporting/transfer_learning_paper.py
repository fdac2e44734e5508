"""Wang's transfer-learning grid and the paper's numbers, shared by the grid (`transfer_learning`) and its report.

>>> from tf_transfer.reporting.transfer_learning_paper import label
>>> label(2, 1e-3)
'last 2 @ 0.001'
"""

from __future__ import annotations

from tf_transfer.reporting import tables as reports

TASKS = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]
SETTINGS = [1, 2, 3, 4, "all"]
RATES = [1e-3, 2e-5]
SEEDS = [0, 1]
LARGE = ["sst2", "qqp", "mnli", "qnli"]  # the paper's large training sets; the rest are small
FINE_TUNING = ("all", 2e-5)  # the paper's baseline: every parameter at the fine-tuning rate
BUDGET_FRACTIONS = (0.25, 0.5, 1.0)  # of the fine-tuning baseline's time to its stopping point
# The paper's metrics ("F1 for QQP and MRPC, Spearman for STS-B, accuracy for the remaining tasks").
PAPER_METRICS = {"mrpc": "f1", "qqp": "f1", "stsb": "spearman"}
# Section 4, small training sets (CoLA, STS-B, MRPC, RTE), by trainable last layers k: time saved to the stopping
# point (%), and score below fine-tuning ("% less", read here as points of the score x 100).
PAPER_SMALL_TIME_SAVED = {1: 48.15, 2: 44.15, 3: 53.24, 4: 33.48}
PAPER_SMALL_DEDUCTION = {1: 4.25, 2: 2.79, 3: 2.52, 4: 2.36}
UNCACHED_TASKS = ["rte", "mrpc"]


def label(k, lr) -> str:
    return f"{'fine-tune (all)' if k == 'all' else f'last {k}'} @ {lr:g}"


def paper_metric(task: str) -> str:
    return PAPER_METRICS.get(task, "accuracy")


def paper_score(summary: dict):
    """The test score at the best epoch by the paper's metric (CoLA: accuracy, also for runs stopped on MCC)."""
    return reports.test_score(reports.best_epoch(summary), paper_metric(summary["task"]))
