"""Small helpers the study reports share: scores out of summaries, mean ± std, Markdown and CSV tables, figures.

Example:

>>> from tf_transfer.reporting import tables as reports
>>> [round(x, 4) for x in reports.mean_std([0.5, 0.7])]
[0.6, 0.1414]
>>> reports.cell([0.5, 0.7], expected=2)
'0.600 ± 0.141'
>>> reports.cell([0.5], expected=2)
'0.500 (1/2)'
"""

from __future__ import annotations

from collections import defaultdict

import csv
import math
import os
import re
import statistics
from typing import Optional

from tf_transfer.core import stats


def mean_std(values) -> tuple:
    """`(mean, sample std)` of the values present (None and NaN dropped), by `stats`' convention: the std of one
    value is NaN; `(None, None)` when no value is present."""
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return None, None
    return stats.mean(values), stats.sample_std(values)


def cell(values, expected: int, digits: int = 3, scale: float = 1.0) -> str:
    """`mean ± std`, with `(n/expected)` when seeds are missing, or `missing` when none is there."""
    present = [v for v in values if v is not None]
    if not present:
        return "missing"
    mean, std = mean_std([v * scale for v in present])
    # One value has no spread to show; "± 0.000" would claim seeds agreed.
    text = f"{mean:.{digits}f} ± {std:.{digits}f}" if len(present) > 1 else f"{mean:.{digits}f}"
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


CLOCKS = ("wall", "cpu")


def cache_cost(summary: dict, clock: str = "wall") -> float:
    """What the frozen-prefix caches a run used cost to build, charged to every run that used them (a run that
    reused a cache would otherwise look cheaper than one user's single run would be)."""
    built = summary.get("cache_build_cpu_s" if clock == "cpu" else "cache_build_s")
    return built if built is not None else (summary.get("cache_time_s") or 0.0)


def elapsed(summary: dict, epoch_record: dict, clock: str = "wall") -> Optional[float]:
    """Training seconds up to the end of `epoch_record` plus the cache's build cost (never hidden).

    `clock="wall"`: wall time; `"cpu"`: the process's CPU seconds, which for a run pinned to one core equal the wall
    time on a dedicated core even when other work shared it (None for summaries without CPU seconds)."""
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
    seconds = epoch_record.get("train_cpu_s") if clock == "cpu" else epoch_record["train_time_s"]
    return None if seconds is None else seconds + cache_cost(summary, clock)


def time_to_stop(summary: dict, clock: str = "wall") -> Optional[float]:
    """Seconds of training up to the stopping point (the last epoch run), cache build included."""
    if not summary or not summary.get("epochs"):
        return None
    return elapsed(summary, summary["epochs"][-1], clock)


def probe_seconds(summary: dict) -> Optional[list]:
    """Each epoch's `speed_probe_cpu_ms` in seconds, or None unless every epoch recorded it."""
    probes = [e.get("speed_probe_cpu_ms") for e in summary.get("epochs") or []]
    return [p / 1000 for p in probes] if probes and all(p for p in probes) else None


def probed_time_to_stop(summary: dict) -> Optional[float]:
    """`time_to_stop` on the CPU clock with each epoch's CPU seconds divided by the machine's speed probe right after
    it (the cache's build by the run's median probe): the work done, in calls of the probe, so that runs taken hours
    apart on a drifting VM compare (docs/outputs.md); None unless every epoch recorded the probe.

    >>> probed_time_to_stop({"epochs": [{"epoch_cpu_s": 30.0, "speed_probe_cpu_ms": 20.0},
    ...                                 {"epoch_cpu_s": 45.0, "speed_probe_cpu_ms": 30.0}], "cache_build_cpu_s": 5.0})
    3200.0
    """
    probes = probe_seconds(summary)
    if probes is None or any(e.get("epoch_cpu_s") is None for e in summary["epochs"]):
        return None
    work = sum(e["epoch_cpu_s"] / p for e, p in zip(summary["epochs"], probes))
    return work + cache_cost(summary, "cpu") / statistics.median(probes)


def others_load(summary: dict) -> Optional[float]:
    """The mean `others_cpu_load` over a run's epochs that recorded it (None if none did): how busy the rest of the
    machine was while the run trained."""
    loads = [e["others_cpu_load"] for e in summary.get("epochs", []) if e.get("others_cpu_load") is not None]
    return sum(loads) / len(loads) if loads else None


# Fixed on 2026-11-28, before any report read a run by it: an epoch whose CPU seconds are below this share of its
# wall seconds waited for its core (other work shared it, or the VM was paused), and the run counts as contended.
# A pinned run alone on its core stays above 0.95.
CONTENDED_BELOW = 0.9


def lowest_cpu_share(summary: dict) -> Optional[float]:
    """The lowest CPU/wall ratio over a run's epochs (`epoch_cpu_s / epoch_time_s`), None where no epoch has both.

    >>> lowest_cpu_share({"epochs": [{"epoch_cpu_s": 95.0, "epoch_time_s": 100.0},
    ...                              {"epoch_cpu_s": 40.0, "epoch_time_s": 100.0}]})
    0.4
    """
    shares = [e["epoch_cpu_s"] / e["epoch_time_s"] for e in (summary or {}).get("epochs") or []
              if e.get("epoch_cpu_s") is not None and e.get("epoch_time_s")]
    return min(shares) if shares else None


def contended(summary: dict, below: float = CONTENDED_BELOW) -> bool:
    """Whether any epoch of the run had less than `below` of its wall time on the CPU (`CONTENDED_BELOW`)."""
    share = lowest_cpu_share(summary)
    return share is not None and share < below


def contended_rows(labelled: list) -> list:
    """`[label, lowest CPU/wall, wall s, CPU s]` of every contended run among `labelled` (`[(label, summary)]`),
    lowest ratio first: a report lists them beside its time claims."""
    rows = []
    for label, summary in labelled:
        if contended(summary):
            epochs, share = summary["epochs"], lowest_cpu_share(summary)
            rows.append((share, [label, f"{share:.2f}", f"{sum(e.get('epoch_time_s') or 0 for e in epochs):.0f}",
                                 f"{sum(e.get('epoch_cpu_s') or 0 for e in epochs):.0f}"]))
    return [row for _, row in sorted(rows, key=lambda pair: pair[0])]


def contention_section(labelled: list) -> list:
    """A report's *Contended runs* section over its compared runs (`[(label, summary)]`): the rule, how many were
    contended, and the list (`contended_rows`)."""
    rows = contended_rows(labelled)
    return ["## Contended runs", "",
            f"A run is contended where any epoch's CPU seconds were below {CONTENDED_BELOW:g} of its wall seconds (a "
            "rule fixed on 2026-11-28, after these runs): it waited for its core, so its wall time is not its CPU "
            "time. Time claims show the share saved over all pairs (which decides, as before) and over the pairs with "
            f"neither run contended. {len(rows)} of the {len(labelled)} compared runs were contended"
            + (":" if rows else "."), "",
            *([markdown_table(["run", "lowest CPU/wall", "wall s", "CPU s"], rows), ""] if rows else [])]


def percent(share) -> str:
    """A share as a whole percentage, `n/a` where unknown: `percent(0.337)` is `34%`."""
    return "n/a" if share is None else f"{100 * share:.0f}%"


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


def clock_sentence(clock: str) -> str:
    if clock == "cpu":
        return ("Times are the training process's CPU seconds (no scoring, no compilation), each run pinned to one "
                "core: what the run computed, not what it waited for its core, so about the wall time it would "
                "have taken alone on that core (equal to its wall time only where it had the core to itself: every "
                f"epoch at least {CONTENDED_BELOW:g} CPU/wall); plus what building the frozen-prefix caches a run "
                "used cost, charged to every run that used them.")
    return ("Times are wall seconds of training (no scoring, no compilation), plus what building the frozen-prefix "
            "caches a run used cost, charged to every run that used them.")


def completed_count(collected: list) -> str:
    """`N of M runs completed`, and how many more are stood in for by completed runs of an earlier protocol
    (`Grid.stand_in`), for a report's sentence on the runs."""
    own = sum(1 for r in collected if r["summary"] and not r["stand_in"])
    standing = sum(1 for r in collected if r["stand_in"])
    return (f"{own} of {len(collected)} runs completed"
            + (f", and {standing} more are stood in for by completed runs of an earlier protocol (marked where "
               "they appear)" if standing else ""))


def commands_section(study, variant: str, out: str) -> list:
    """The exact commands that produce the variant's runs and this report."""
    chosen = study.variant(variant)
    commands = list(chosen.commands) or [
        f"python -m tf_transfer.experiments run {study.name} --variant={variant} --data_dir=$GLUE_DIR"]
    runs_dir = "reports/runs" if chosen.commands else "runs"
    commands.append(f"python -m tf_transfer.experiments report {study.name} --variant={variant} "
                    f"--runs_dir={runs_dir} --out={out}")
    setup = ["export GLUE_DIR=../shared/data/glue  # this project's machines; any GLUE folder in the original layout"]
    return ["## Commands", "", "From the repository root:", "", "```sh", *setup, *commands, "```", ""]


def machine_label(described: Optional[dict]) -> str:
    if not described:
        return "not recorded"
    isa = ", ".join(described.get("isa") or []) or "none of avx2/avx512/amx"
    return f"{described.get('cpu', '?')}; {described.get('cores', '?')} core(s); {isa}"


def machines_of(summaries) -> set:
    """The machines (`machine_label`) the summaries' runs and their resumes ran on."""
    return {machine_label(described) for s in summaries
            for described in [s.get("machine")] + [r.get("machine") for r in s.get("resumes", [])]}


def machine_of(summary: dict):
    """The one kind of machine (`machine_label`) a run and all its resumes ran on; None where they ran on several."""
    kinds = machines_of([summary])
    return next(iter(kinds)) if len(kinds) == 1 else None


def one_machine(*summary_lists) -> bool:
    """Whether all these runs ran on one kind of machine: only then are their times compared."""
    return len(machines_of([s for summaries in summary_lists for s in summaries])) <= 1


def machines_section(collected: list) -> list:
    """Which machines the completed runs (and their resumes) ran on: times are comparable only within one."""
    seen = {}
    for run in collected:
        summary = run.get("summary")
        if not summary:
            continue
        for described in [summary.get("machine")] + [r.get("machine") for r in summary.get("resumes", [])]:
            seen.setdefault(machine_label(described), 0)
            seen[machine_label(described)] += 1
    if not seen:
        return []
    lines = ["Machines the runs ran on (runs, counting each resume):", ""]
    lines += [f"- {label}: {count}" for label, count in sorted(seen.items())]
    if len(seen) > 1:
        lines += ["", "**More than one kind of machine**: compare times only between runs of the same machine "
                      "(the `machine` field of each summary.json)."]
    return lines + [""]


# --- censored runs, constant-prediction baselines and claims tables (the study reports) ------------------------

def censored(summary: dict) -> bool:
    """True for a completed run stopped by the epoch cap, not by patience: it ran `max_epochs` epochs without
    `stopped_early`, so where patience would have stopped it (and the time that took) is unknown; its stopping
    point and time are lower bounds. A run whose patience ran out exactly at the last epoch is not censored (the
    engine does not mark the last epoch `stopped_early`), nor is a run without early stopping (patience 0: a
    fixed number of epochs is its protocol)."""
    if not summary or not summary.get("completed") or summary.get("stopped_early"):
        return False
    held = summary.get("early_stopping") or {}
    patience = held.get("patience", (summary.get("config") or {}).get("patience"))
    if not patience:
        return False
    return held.get("wait", 0) < patience


def censored_mark(summaries: list) -> str:
    """` †n/m` when n of the m completed runs are censored, else ``."""
    count = sum(1 for s in summaries if censored(s))
    return f" †{count}/{len(summaries)}" if count else ""


def constant_baseline(task_name: str, labels, metric: Optional[str] = None) -> dict:
    """The score of always predicting the majority class of `labels` (a test set's), by `metric` (default: the
    task's primary metric).

    A regression task has no majority class, and a constant prediction's correlation is undefined: its baseline
    is 0, said in `note`.

    >>> constant_baseline("rte", [0, 1, 1, 1])["score"]
    0.75
    >>> round(constant_baseline("mrpc", [0, 1, 1, 1])["score"], 3)  # F1 of predicting 1 everywhere
    0.857
    >>> constant_baseline("stsb", [0.5, 3.0])["score"]
    0.0
    >>> constant_baseline("cola", [0, 1, 1, 1], metric="accuracy")["score"]  # CoLA by accuracy, not MCC
    0.75
    """
    import numpy as np

    from tf_transfer.core import metrics
    from tf_transfer.data import tasks

    task = tasks.get_task(task_name)
    labels = np.asarray(labels)
    metric = metric or task.primary_metric
    if task.is_regression:
        return {"metric": metric, "score": 0.0, "examples": len(labels), "majority": None, "share": None,
                "note": "a constant prediction's correlation is undefined; 0 used"}
    values, counts = np.unique(labels, return_counts=True)
    majority = values[int(np.argmax(counts))]
    score = metrics.compute([metric], labels, np.full_like(labels, majority))[metric]
    name = task.labels[int(majority)] if getattr(task, "labels", None) else str(majority)
    return {"metric": metric, "score": float(score), "examples": len(labels), "majority": name,
            "share": float(counts.max() / len(labels)), "note": f"always '{name}'"}


def dev_baseline(task_name: str, data_dirs, metric: Optional[str] = None) -> Optional[dict]:
    """`constant_baseline` of the task's first GLUE dev set (by `metric`, default the task's primary one), read from
    the first of `data_dirs` that holds it (with `source`: the folder); None when none does."""
    from tf_transfer.core.errors import TransferError
    from tf_transfer.data import tasks

    task = tasks.get_task(task_name)
    for folder in data_dirs:
        if not folder or not os.path.isdir(folder):
            continue
        try:
            examples = tasks.read_glue_split(task, folder, next(iter(task.test_files)))
        except (TransferError, OSError):
            continue
        return {**constant_baseline(task_name, examples.labels, metric), "source": folder}
    return None


def dev_baselines(tasks: list, collected: list, out: str, metrics: Optional[dict] = None) -> dict:
    """Per task, the constant prediction's dev score (`dev_baseline`; by `metrics[task]` where given), from the GLUE
    folder of a grid's runs (`--data_dir`/`$GLUE_DIR`, else the one their summaries name); when none is readable,
    the previous report's `majority.csv` in `out` (`write_baselines`; with `source` saying so) if it has the same
    metric; else None."""
    metrics = metrics or {}
    folders = [r["settings"].get("data_dir") for r in collected]
    folders += [(r["summary"].get("config") or {}).get("data_dir") for r in collected if r["summary"]]
    folders = list(dict.fromkeys(f for f in folders if f))
    previous = {}
    path = os.path.join(out, "majority.csv")
    if os.path.exists(path):
        with open(path) as f:
            for row in csv.DictReader(f):
                previous[row["task"]] = {"metric": row["metric"], "score": float(row["score"]),
                                         "examples": int(row["examples"]), "majority": row["majority"] or None,
                                         "share": float(row["share"]) if row["share"] else None,
                                         "note": row["note"], "source": f"{path} (GLUE dev not found)"}
    found = {task: dev_baseline(task, folders, metrics.get(task)) for task in tasks}
    return {task: found[task] or (previous.get(task) if previous.get(task) and metrics.get(task, previous[task]["metric"])
                                  == previous[task]["metric"] else None) for task in tasks}


def write_baselines(out: str, baselines: dict) -> None:
    """`majority.csv` in `out`: what `dev_baselines` reads back where GLUE dev is not at hand."""
    write_csv(os.path.join(out, "majority.csv"), ["task", "metric", "score", "examples", "majority", "share", "note"],
              [[task, b["metric"], b["score"], b["examples"], b["majority"] or "", "" if b["share"] is None
                else b["share"], b["note"]] for task, b in baselines.items() if b])


def above_baseline(score, baseline, full) -> Optional[float]:
    """`(score - baseline) / (full - baseline)`: the share of the full model's gain over a constant prediction
    that `score` keeps; None where undefined (a missing value, or a full model not above the baseline)."""
    if score is None or baseline is None or full is None or full - baseline <= 0:
        return None
    return (score - baseline) / (full - baseline)


def p_text(p) -> str:
    """A p-value for a table: `p 0.03`, `p < 0.001`, or `no test` where undefined (too few seeds, no spread)."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "no test"
    return "p < 0.001" if p < 0.001 else f"p {p:.2f}" if p >= 0.01 else f"p {p:.3f}"


def welch_p(a, b) -> float:
    """Two-sided p of Welch's test of mean(a) vs mean(b) (`stats.welch_test`); NaN where undefined."""
    a = [v for v in a if v is not None]
    b = [v for v in b if v is not None]
    return stats.welch_test(a, b).p


def run_seed(summary: dict):
    return summary.get("seed", (summary.get("config") or {}).get("seed"))


def same_machine_pairs(summaries, references, value, key=run_seed) -> dict:
    """`{key: (value of the run, value of the reference run)}` over the keys both sides have, where both runs ran on
    one and the same kind of machine (`machine_of`): what pairs two settings' times, since a VM's CPU model and
    instruction set change how fast each kind of step runs, not all of them alike."""
    mine, theirs = by_seed(summaries, value, key), by_seed(references, value, key)
    machine = by_seed(summaries, machine_of, key)
    reference_machine = by_seed(references, machine_of, key)
    return {k: (mine[k], theirs[k]) for k in sorted(set(mine) & set(theirs), key=str)
            if machine.get(k) is not None and machine.get(k) == reference_machine.get(k)}


def by_seed(summaries, value, key=run_seed) -> dict:
    """`{key(summary): value(summary)}` of completed runs (None values dropped; `key` default: the seed): what pairs
    two settings' runs."""
    found = {}
    for s in summaries:
        v = value(s)
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            if key(s) in found:
                raise ValueError(f"two runs pair as {key(s)!r}: pair them by more than the seed (`key`)")
            found[key(s)] = v
    return found


def seed_difference(ours, reference, value, paired: bool = True, key=run_seed) -> stats.Interval:
    """The interval of `value` of `ours` minus `reference` (lists of summaries): paired over the seeds both have
    where `paired` (the seed fixes the split and sample, so the two runs of a seed share them; `stats`' module note),
    Welch over every value otherwise. `key` pairs by more than the seed where one side pools settings."""
    a, b = by_seed(ours, value, key), by_seed(reference, value, key)
    if paired:
        common = sorted(set(a) & set(b), key=str)
        return stats.paired_difference([a[s] for s in common], [b[s] for s in common])
    return stats.welch_difference(list(a.values()), list(b.values()))


def still_to_run(study: str, collected: list, chosen, task_order: list) -> list:
    """A grid report's *Still to run* section: the runs its protocol still lacks (runs not run, runs of an earlier
    protocol standing in), grouped by part and reason, and the grid's commands restricted to their tasks.

    `collected`: one dict per run of the grid with `settings` (its `task` and `part`), `summary` (None when not
    completed), `stand_in` (None, or a dict with its `reason`), `error` and `partial`; `chosen`: the variant, whose
    `commands` are the grid's shard commands (or none)."""
    standing = [r for r in collected if r["stand_in"]]
    absent = [r for r in collected if not r["summary"]]
    if not standing and not absent:
        return []
    lines = ["## Still to run", ""]
    groups = defaultdict(list)
    for r in standing:
        groups[("rerun", r["settings"]["part"], r["stand_in"]["reason"])].append(r)
    for r in absent:
        groups[("run", r["settings"]["part"], "not run yet" if not r.get("error") and not r.get("partial")
                else "failed or unfinished")].append(r)
    # Numbers within part names sort as numbers: seed 7 before seed 10.
    for (kind, part, reason), runs in sorted(groups.items(), key=lambda item: [
            int(piece) if piece.isdigit() else piece for piece in re.split(r"(\d+)", " ".join(item[0]))]):
        tasks = sorted({r["settings"]["task"] for r in runs})
        lines.append(f"- {len(runs)} run{'s' if len(runs) != 1 else ''} of part `{part}` ({', '.join(tasks)}): "
                     + (f"stood in for by earlier runs ({reason})" if kind == "rerun" else reason) + ".")
    tasks = ",".join(t for t in task_order if any(r["settings"]["task"] == t for r in standing + absent))
    lines += ["", "`run` skips completed runs, so the grid's commands restricted to these tasks run exactly what is "
              "listed (stand-ins are never read by `run`; the report uses each run itself once it has completed):",
              "", "```sh", "export GLUE_DIR=../shared/data/glue"]
    lines += [command.replace(" &", f" --tasks={tasks} &") for command in chosen.commands] if chosen.commands else [
        f"python -m tf_transfer.experiments run {study} --tasks={tasks} --data_dir=$GLUE_DIR"]
    return lines + ["```", ""]
