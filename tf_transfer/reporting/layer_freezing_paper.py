"""Lee, Tang & Lin's layer-freezing protocol, shared by the grid (experiments/layer_freezing.py) and its report: the
paper's tasks and the score a run is judged by (its last epoch's: the paper trains a fixed number of epochs).

Example:

>>> from tf_transfer.reporting.layer_freezing_paper import final_score
>>> final_score({"metric": "accuracy", "epochs": [{"val": {"accuracy": 0.7}}, {"val": {"accuracy": 0.8}}]}, "val")
0.8
"""

from __future__ import annotations

from tf_transfer.reporting import tables as reports

TASKS = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]


def final_score(summary: dict, split: str = "test"):
    last = summary["epochs"][-1]
    return reports.test_score(last, summary["metric"]) if split == "test" else last["val"].get(summary["metric"])
