"""The adaptive-freezing report's run-level pieces: the blocks each run trained at the end (`final_k`), every run as
a CSV row, and the core-hours the grid still needs; `adaptive_freezing_report` writes them."""

from __future__ import annotations

import datetime
from collections import defaultdict

from tf_transfer.reporting import method_comparison as shared
from tf_transfer.reporting import tables as reports
from tf_transfer.reporting.adaptive_freezing_protocol import FULL, SEARCH_PART, compared_method


def final_k(summary: dict):
    """The blocks that trained at the end: an adaptive run's L minus its frozen blocks, a static run's k, 'all'."""
    events = (summary.get("freezing") or {}).get("events")
    if events is not None:
        return summary["num_layers"] - max([e.get("frozen_blocks", 0) for e in events] + [0])
    return summary["trainable_layers"]


def _kind(settings: dict) -> str:
    return compared_method(settings["part"]) or (
        FULL if settings["part"] == SEARCH_PART else settings["part"])


def _core_s(summary: dict):
    """About what the run took of a dedicated core: its wall seconds from start to finish times the share of the
    core its training epochs had (`cpu_utilization`; 1 where not recorded); None without both times."""
    try:
        start, end = (datetime.datetime.strptime(summary[k], "%Y-%m-%dT%H:%M:%S%z")
                      for k in ("started_at", "finished_at"))
    except (KeyError, TypeError, ValueError):
        return None
    return (end - start).total_seconds() * min(1.0, _utilization(summary) or 1.0)


def hours_left(collected: list):
    """A rough estimate of the core-hours the runs not completed still take: each at the mean core time (`_core_s`)
    of the completed runs of its kind (method, or the static grid) on its task, else of its kind, else of full
    fine-tuning on its task or anywhere (an upper bound for the freezing methods); None before any run has
    completed."""
    seen = defaultdict(list)
    for run in collected:
        seconds = _core_s(run["summary"]) if run["summary"] else None
        if seconds is not None:
            seen[(_kind(run["settings"]), run["settings"]["task"])].append(seconds)
            seen[(_kind(run["settings"]), None)].append(seconds)
    if not seen:
        return None
    everything = [s for (kind, task), values in seen.items() if task is None for s in values]
    left = 0.0
    for run in collected:
        if run["summary"]:
            continue
        kind, task = _kind(run["settings"]), run["settings"]["task"]
        for key in ((kind, task), (kind, None), (FULL, task), (FULL, None)):
            if seen.get(key):
                left += sum(seen[key]) / len(seen[key])
                break
        else:
            left += sum(everything) / len(everything)
    return left / 3600


CSV_HEADER = ["task", "part", "method", "lr", "seed", "trainable_layers", "final_k", "freezes (step:blocks)",
              "metric", "validation_best", "test_at_best", "best_epoch", "epochs", "time_to_stop_cpu_s",
              "s_per_epoch", "cpu_utilization", "peak_memory_mb", "machine", "folder"]


def _utilization(summary: dict):
    """The mean over epochs of CPU seconds per wall second of training: about 1 alone on a core, less when shared."""
    values = [e["cpu_utilization"] for e in summary["epochs"] if e.get("cpu_utilization") is not None]
    return round(sum(values) / len(values), 2) if values else None


def csv_rows(collected: list) -> list:
    rows = []
    for run in collected:
        summary, s = run["summary"], run["settings"]
        if not summary:
            continue
        freezes = " ".join(f"{e['step']}:{e['frozen_blocks']}" for e in (summary.get("freezing") or {}).get(
            "events", []))
        rows.append([s["task"], s["part"], _kind(s), s["lr"], s["seed"], summary["trainable_layers"],
                     final_k(summary), freezes, summary["metric"], round(shared.validation(summary), 2),
                     round(shared.score(summary), 2), summary.get("best_epoch"), len(summary["epochs"]),
                     round(reports.time_to_stop(summary, "cpu"), 1), round(shared.epoch_seconds(summary, "cpu"), 1),
                     _utilization(summary), round(summary.get("peak_memory_mb") or 0),
                     reports.machine_label(summary.get("machine")),
                     run["folder"]])
    return rows
