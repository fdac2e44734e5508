"""One row per run below a folder, compared with the same task's fine-tuning: the transfer-learning paper's
comparison (time saved, score difference) for any sweep of `tf_transfer.glue` runs.

    python -m tf_transfer.experiments table reports/runs --out=/tmp/runs   # also writes /tmp/runs.csv, .md

Every `summary.json` below the folder (recursively) is one row: the settings, epochs trained, the best epoch, the
validation and test scores at the best epoch (the summary's `metric`; MNLI's matched dev set, the mismatched one
beside it in brackets and in its own CSV column), the time to the best epoch with the frozen-prefix cache's build charged
(`tables.elapsed`, wall clock), and the run's peak memory while training (`peak_memory_mb`; "-" for runs made before
it was recorded). Summaries of other entry points that name a task and a metric (stack, multitask)
are rows without a comparison; the rest (the sentiment study's work folders) are counted and skipped; files that are
not JSON (a truncated summary) are named under the table and left out. Unfinished runs are rows marked `unfinished`, never compared, never a reference.

The `method` column says what trained: each method's `table_label` (`models.methods`: freeze, bitfit, or lora with its
rank and targets), and `full fine-tuning` for freezing over every block (a sweep's reference too).
The reference of a GLUE task or a user's data set (its files' SHA-256 part of its data), preset and data (the training-set cap `max_train_examples` and the validation split
`validation_fraction`: a run is compared with fine-tuning on the same examples) is its completed full fine-tuning
runs (`trainable_layers` "all", method freeze: LoRA and BitFit over all blocks are not fine-tuning) of one
setting: among several (learning rates, batch sizes, ...) the one with the best mean validation score at the best
epoch, chosen by validation as the layer-freezing line search chooses its rate (by test score it would flatter the
reference; a diverged setting would flatter the runs); within it the run of the same seed, else the mean over its
seeds. A run without a test file is compared by its validation score.
Point the command at one study's folder to keep other studies' runs out of the reference.

Example (from the repository root):

>>> import glob
>>> from tf_transfer.reporting import runs_table
>>> table = runs_table.collect("reports/runs")
>>> len(table.rows) == len(glob.glob('reports/runs/**/summary.json', recursive=True)), table.skipped
(True, 0)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Optional

from tf_transfer.core.errors import TransferError
from tf_transfer.data.tasks import TASKS
from tf_transfer.core import stats
from tf_transfer.models import methods
from tf_transfer.reporting import tables
from tf_transfer.training import record, run_record

SUMMARY = "summary.json"
COLUMNS = ("run", "task", "preset", "trainable_layers", "method", "lr", "batch_size", "seed", "epochs", "best_epoch",
           "metric", "validation_score", "score", "score_mismatched", "time_to_best_s", "time_saved_pct",
           "score_diff", "peak_memory_mb", "status")
SHOWN = ("run", "task", "preset", "layers", "method", "lr", "batch", "seed", "epochs", "best", "metric",
         "validation score", "test score", "time to best (s)", "time saved", "score diff", "peak memory (MB)",
         "status")
FULL_FINE_TUNING = "full fine-tuning"  # the method cell of the default method over every block: the reference
# Where a run's files and data lived, not what it ran: the machines of one sweep may keep them apart.
NOT_SETTINGS = ("seed", "data_dir", "cache_dir", "output_dir")


@dataclasses.dataclass
class Table:
    rows: list  # dicts keyed by COLUMNS
    skipped: int  # summaries of other kinds
    references: list  # one line per GLUE task and preset with a fine-tuning reference
    unreadable: list = dataclasses.field(default_factory=list)  # "path (why)" of each file that is not JSON


def find_summaries(root: str) -> list:
    if not os.path.isdir(root):
        raise TransferError(f"runs folder {root} does not exist (or is not a folder)")
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders.sort()
        if SUMMARY in files:
            found.append(os.path.join(folder, SUMMARY))
    if not found:
        raise TransferError(f"no {SUMMARY} below {root}: point the command at a folder of runs")
    return found


def _number(value) -> Optional[float]:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
    return value if ok else None


def _load(path: str) -> Optional[dict]:
    """The summary if it is one this table can show (a task, a metric and a list of epochs), as `run_record` reads it
    (older runs' missing keys filled in); `UnreadableRecord` when the file is not a JSON object (truncated,
    emptied)."""
    summary = run_record.load(path)
    if not isinstance(summary.get("epochs"), list):
        return None
    ok = all(isinstance(summary.get(key), str) for key in ("task", "metric"))
    return summary if ok and all(isinstance(e, dict) for e in summary["epochs"]) else None


def _best(summary: dict) -> Optional[dict]:
    """The epoch record the run stopped on: its best epoch, or for a completed run trained without validation
    (`--validation_fraction=0`, the layer-freezing sweep) its last epoch, which is then what it delivers."""
    best = summary.get("best_epoch")
    if isinstance(best, int) and 1 <= best <= len(summary["epochs"]):
        return tables.best_epoch(summary)
    if summary.get("completed") and summary["epochs"] and not any(e.get("val") for e in summary["epochs"]):
        return summary["epochs"][-1]
    return None


def _stopping_epoch(summary: dict, record: Optional[dict]) -> Optional[int]:
    if record is None:
        return None
    best = summary.get("best_epoch")
    return best if isinstance(best, int) and best >= 1 else len(summary["epochs"])


def _row(run: str, summary: dict) -> dict:
    record, metric = _best(summary), summary["metric"]
    test = record.get("test") if record else None
    validation = _number(((record or {}).get("val") or {}).get(metric))
    score = mismatched = None
    if isinstance(test, dict):  # stack runs without test data hold None
        score = _number(tables.test_score(record, metric))
        mismatched = _number((test.get("dev_mismatched") or {}).get(metric))
    timed = record is not None and _number(record.get("train_time_s")) is not None
    return {"run": run, "task": summary["task"], "preset": summary.get("preset"),
            "trainable_layers": summary.get("trainable_layers"), "method": _method(summary), "lr": summary.get("lr"),
            "batch_size": summary.get("batch_size"), "seed": summary.get("seed"), "epochs": len(summary["epochs"]),
            "best_epoch": _stopping_epoch(summary, record), "metric": metric, "validation_score": validation,
            "score": score,
            "score_mismatched": mismatched, "time_to_best_s": tables.elapsed(summary, record) if timed else None,
            "time_saved_pct": None, "score_diff": None, "peak_memory_mb": _number(summary["peak_memory_mb"]),
            "status": "completed" if summary.get("completed") else "unfinished"}


def _method(summary: dict) -> str:
    """The method's `table_label` (runs from before methods existed read as the default, freezing: `run_record`);
    the default method over every block is named what it is, full fine-tuning (a sweep's reference among them)."""
    if summary.get("method") == methods.DEFAULT and summary.get("trainable_layers") == "all":
        return FULL_FINE_TUNING
    return methods.registry.table_label(summary)


def _setting(summary: dict) -> str:
    config = summary.get("config")
    if not isinstance(config, dict):
        config = {key: summary.get(key) for key in ("lr", "batch_size")}
    return json.dumps({k: v for k, v in config.items() if k not in NOT_SETTINGS}, sort_keys=True, default=str)


def _comparable(row: dict, summary: dict) -> bool:
    """A completed run of the GLUE trainer (a GLUE task, or a user's data set: `dataset`) with a time to its best
    epoch and a score there (test, else validation: a user's file without a test file)."""
    return ((row["task"] in TASKS or isinstance(summary.get("dataset"), dict)) and row["status"] == "completed"
            and _score(row) is not None and row["time_to_best_s"] is not None)


def _score(row: dict) -> Optional[float]:
    """What a run is compared by: its test score, else (no test file) its validation score."""
    return row["score"] if row["score"] is not None else row["validation_score"]


def _validation(summary: dict) -> float:
    record = _best(summary)
    value = _number(((record or {}).get("val") or {}).get(summary["metric"]))
    return -math.inf if value is None else value


# What a run learns from, beside its task: runs differing in these are compared with fine-tuning on their own data.
DATA_SETTINGS = ("max_train_examples", "validation_fraction")


def _data(summary: dict) -> str:
    """The data settings a run learnt from, and the first digits of its files' SHA-256 (a user's file: runs on
    other contents of one file name are not compared)."""
    config = summary.get("config") if isinstance(summary.get("config"), dict) else {}
    hashes = record.recorded_data(summary)
    files = [f"{flag} {str(hashes[flag])[:8]}" for flag in sorted(hashes)]
    return ", ".join([f"{key} {config[key]}" for key in DATA_SETTINGS if config.get(key) is not None] + files)


def _references(runs: list) -> dict:
    """(task, preset, data) -> the rows of the chosen fine-tuning setting, with their mean validation score."""
    settings = {}
    for row, summary in runs:
        if _comparable(row, summary) and row["trainable_layers"] == "all" and summary["method"] == methods.DEFAULT:
            key = (row["task"], row["preset"], _data(summary))
            group = settings.setdefault(key, {}).setdefault(_setting(summary), [])
            group.append((row, _validation(summary)))
    chosen = {}
    for key, groups in settings.items():
        members = max(groups.values(), key=lambda group: stats.mean([value for _, value in group]))
        chosen[key] = ([row for row, _ in members], stats.mean([value for _, value in members]))
    return chosen


def _describe(task: str, preset: str, data: str, members: list, validation: float) -> str:
    first = members[0]
    where = os.path.commonpath([m["run"] for m in members]) if len(members) > 1 else first["run"]
    scored = (f"mean validation {first['metric']} {validation:.3f}" if math.isfinite(validation)
              else "no validation split")
    return (f"- {task} ({preset}{'; ' + data if data else ''}): fine-tuning at lr {first['lr']}, "
            f"batch {first['batch_size']}, {len(members)} run(s), {scored}: {where}")


def collect(root: str) -> Table:
    runs, skipped, unreadable = [], 0, []
    for path in find_summaries(root):
        try:
            summary = _load(path)
        except record.UnreadableRecord as e:
            unreadable.append(f"{path} ({e.why})")
            continue
        if summary is None:
            skipped += 1
            continue
        runs.append((_row(os.path.relpath(os.path.dirname(path), root), summary), summary))
    references = _references(runs)
    for row, summary in runs:
        chosen = references.get((row["task"], row["preset"], _data(summary)))
        if not chosen or not _comparable(row, summary):
            continue
        basis = [m for m in chosen[0] if m["seed"] == row["seed"]] or chosen[0]
        seconds = stats.mean([m["time_to_best_s"] for m in basis])
        row["time_saved_pct"] = 100.0 * (seconds - row["time_to_best_s"]) / seconds if seconds > 0 else None
        kind = "score" if row["score"] is not None else "validation_score"  # like with like
        if all(m[kind] is not None for m in basis):
            row["score_diff"] = row[kind] - stats.mean([m[kind] for m in basis])
    lines = [_describe(*key, *chosen) for key, chosen in sorted(references.items(), key=lambda kv: str(kv[0]))]
    return Table([row for row, _ in runs], skipped, lines, unreadable)


def _cells(row: dict) -> list:
    def shown(value, form):
        return "-" if value is None else format(value, form) if _number(value) is not None else str(value)

    score = shown(row["score"], ".3f")
    if row["score_mismatched"] is not None:
        score += f" (mm {row['score_mismatched']:.3f})"
    # round first: a rounded -0.0 would read as a loss
    saved = "-" if row["time_saved_pct"] is None else f"{round(row['time_saved_pct'], 1) + 0.0:.1f}%"
    diff = "-" if row["score_diff"] is None else f"{round(row['score_diff'], 3) + 0.0:+.3f}"
    return [row["run"], row["task"], shown(row["preset"], ""), shown(row["trainable_layers"], ""), row["method"],
            shown(row["lr"], "g"), shown(row["batch_size"], ""), shown(row["seed"], ""), str(row["epochs"]),
            shown(row["best_epoch"], ""), row["metric"], shown(row["validation_score"], ".3f"), score,
            shown(row["time_to_best_s"], ".1f"), saved,
            diff, shown(row["peak_memory_mb"], ".0f"), row["status"]]


def render(table: Table, root: str) -> str:
    """The table as Markdown, cells padded so that it also reads as plain text, and what it compares with."""
    cells = [list(SHOWN)] + [_cells(row) for row in table.rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(SHOWN))]
    padded = [[text.ljust(width) for text, width in zip(line, widths)] for line in cells]
    unfinished = sum(row["status"] != "completed" for row in table.rows)
    notes = [
        "", f"{len(table.rows)} runs ({unfinished} unfinished) below {root}; "
            f"{table.skipped} summaries of other kinds skipped"
            + (f"; {len(table.unreadable)} unreadable, left out (a truncated run's record is lost: "
               f"`experiments run` of its grid, or its command with --overwrite, trains it again): "
               + "; ".join(table.unreadable) if table.unreadable else "") + ".",
        "", "Validation and test score: the summary's metric at the best epoch (the last one for runs trained without "
            "validation; MNLI: dev_matched, mm = dev_mismatched). Time to "
            "best: wall seconds of training to the end of the best epoch plus the frozen-prefix cache's build. Time "
            "saved (% of the reference's time to its best epoch) and score diff (this run minus the reference, by "
            "test score, or by validation score where there is no test file) compare completed runs of the GLUE "
            "trainer (GLUE tasks and your own data) with the full fine-tuning reference of their data and preset: "
            "the run of the same seed, else the mean over its seeds.", "",
        "Full fine-tuning references (per data set and preset, the setting with the best mean validation score):"
        if table.references else "No completed full fine-tuning run (trainable_layers all, method freeze) found: "
                                 "nothing compared.",
    ]
    return "\n".join([tables.markdown_table(padded[0], padded[1:])] + notes + table.references)


def command(root: str, out: Optional[str] = None) -> Table:
    """Prints the table of the runs below `root`; with `out`, also writes `out`.csv and `out`.md."""
    table = collect(root)
    text = render(table, root)
    print(text)
    if out:
        tables.write_csv(out + ".csv", list(COLUMNS), [[row[c] for c in COLUMNS] for row in table.rows])
        with open(out + ".md", "w") as f:
            f.write(text + "\n")
        print(f"written to {out}.csv and {out}.md")
    return table
