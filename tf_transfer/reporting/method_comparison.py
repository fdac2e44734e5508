"""What the reports that compare training methods share (methods and methods_full, adaptive_freezing,
methods_paired): what a methods grid hands its report (`Design`), each run's measures (score, validation, time,
memory), the seed-paired differences and savings against full fine-tuning, compared only within one kind of machine,
the rows of the method and task tables, the rate searches' rows, and every run as CSV. Each report builds its own
sections on these; no report imports another.

Scores are GLUE dev (the test set) at the epoch early stopping keeps, in points (x100) of each task's metric.

Example:

>>> from tf_transfer.reporting.method_comparison import short_kind
>>> short_kind("Intel Xeon, AVX-512, AMX")  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Callable

from tf_transfer.core import stats
from tf_transfer.models import methods as methods_lib
from tf_transfer.reporting import claims
from tf_transfer.reporting import tables as reports
from tf_transfer.reporting import validation_baselines

FULL = "full fine-tuning"
# Decided before the runs: a task counts for a score claim only where full fine-tuning's validation score beats the
# constant prediction's by this many points (as `stats.learned`).
LEARNED_POINTS = claims.LEARNED_POINTS


@dataclasses.dataclass(frozen=True)
class Design:
    """What the report needs of a methods grid, handed over by the grid's module (so that the report imports no grid):
    its methods in the report's order (`{name: settings}`), its tasks, how a run's settings name their method, how a
    search picks its rate, each search part's label, and whether the compared runs reuse the search's seed.

    Example (experiments/methods_full.py): `report=methods_report.report_of(Design(METHODS, TASKS, method_of,
    pick_rate))`.
    """

    methods: dict
    tasks: list
    method_of: Callable
    pick_rate: Callable
    search_labels: dict = dataclasses.field(default_factory=dict)  # part name -> label, where the name is not one
    compared_seeds_searched: bool = False
    gate_decided: str = "before the runs"  # when the 10-point "it learned" gate was set
    stopped: str = ""  # why the study stopped before its runs were complete (said instead of "still running")


def score(summary: dict):
    """GLUE dev score, in points, at the epoch early stopping keeps."""
    epoch = reports.best_epoch(summary)
    value = None if epoch is None else reports.test_score(epoch, summary["metric"])
    return None if value is None else 100 * value


def validation(summary: dict):
    """The best validation score (what early stopping keeps), in points."""
    epoch = reports.best_epoch(summary)
    value = None if epoch is None else epoch["val"].get(summary["metric"])
    return None if value is None else 100 * value


def epoch_seconds(summary: dict, clock: str):
    key = "epoch_cpu_s" if clock == "cpu" else "epoch_time_s"
    values = [e.get(key) for e in summary["epochs"] if e.get(key) is not None]
    return sum(values) / len(values) if values else None


def memory_key(collected: list) -> str:
    """What memory claims compare: the peak above the start where every run records it, else the process peak."""
    done = [r["summary"] for r in collected if r["summary"]]
    return "peak_above_start_mb" if all(s.get("peak_above_start_mb") for s in done) else "peak_memory_mb"


def cells(collected: list, methods: dict) -> dict:
    """`{(method, task): [entries]}` of the compared runs (the search parts are their own)."""
    found = defaultdict(list)
    for run in collected:
        if run["settings"]["part"] in methods:
            found[(run["settings"]["part"], run["settings"]["task"])].append(run)
    return found


def measures(runs: list, clock: str, memory: str) -> dict:
    """Per-seed values of one cell: score, time to stop, time per epoch, memory; the rates that ran."""
    done = [r["summary"] for r in runs if r["summary"]]
    return {"expected": len(runs), "summaries": done,
            "score": [score(s) for s in done],
            "time": [reports.time_to_stop(s, clock) for s in done],
            "epoch": [epoch_seconds(s, clock) for s in done],
            "memory": [s.get(memory) for s in done],
            "values": {"score": score, "time": lambda s: reports.time_to_stop(s, clock),
                       "epoch": lambda s: epoch_seconds(s, clock), "memory": lambda s: s.get(memory)},
            "lr": sorted({s["lr"] for s in done})}


def _mean(values):
    return reports.mean_std(values)[0]


def difference(table: dict, method: str, task: str, key: str, reference: str = FULL):
    """The seed-paired interval of `key` of `method` minus `reference` on `task` (None where a side is missing)."""
    mine, full = table.get((method, task)), table.get((reference, task))
    if not mine or not full or not mine["summaries"] or not full["summaries"]:
        return None
    return reports.seed_difference(mine["summaries"], full["summaries"], mine["values"][key])


# The measures that are times: they pair only between runs of one kind of machine (`paired_values`).
TIME_KEYS = ("time", "epoch", "probed")


def paired_values(table: dict, method: str, task: str, key: str, reference: str = FULL, kind=None) -> dict:
    """`{seed: (method's key, reference's key)}` over the seeds both sides ran; for a time (`TIME_KEYS`) only the
    seeds whose two runs ran on the same kind of machine (`tables.same_machine_pairs`), and only on `kind`
    (`tables.machine_label`) where given."""
    mine, full = table.get((method, task)), table.get((reference, task))
    if not mine or not full:
        return {}
    if key in TIME_KEYS:
        pairs = reports.same_machine_pairs(mine["summaries"], full["summaries"], mine["values"][key])
        if kind is None:
            return pairs
        machines = reports.by_seed(mine["summaries"], reports.machine_of)
        return {seed: pair for seed, pair in pairs.items() if machines.get(seed) == kind}
    a = reports.by_seed(mine["summaries"], mine["values"][key])
    b = reports.by_seed(full["summaries"], full["values"][key])
    return {seed: (a[seed], b[seed]) for seed in sorted(set(a) & set(b), key=str)}


def uncontended_table(compared: list, clock: str, memory: str, methods: dict) -> dict:
    """`measures` per cell over the compared runs that had their core to themselves (`tables.contended`): time claims
    are shown for all runs (they decide) and for these."""
    alone = [r for r in compared if not (r["summary"] and reports.contended(r["summary"]))]
    return {key: measures(runs, clock, memory) for key, runs in cells(alone, methods).items()}


def contention_section(compared: list) -> list:
    """`tables.contention_section` over the compared runs, each named by its task, method (part) and seed."""
    return reports.contention_section([(f"{r['settings']['task']} {r['settings']['part']} seed "
                                        f"{r['settings']['seed']}", r["summary"]) for r in compared if r["summary"]])


def pair_kinds(table: dict, method: str, task: str, reference: str = FULL) -> dict:
    """`{machine kind: seeds}` of the seeds whose `method` and `reference` runs on `task` ran on that one kind (a
    time pairs only within a kind, and is not pooled across kinds)."""
    mine, full = table.get((method, task)), table.get((reference, task))
    if not mine or not full:
        return {}
    machines = reports.by_seed(mine["summaries"], reports.machine_of)
    theirs = reports.by_seed(full["summaries"], reports.machine_of)
    found = defaultdict(list)
    for seed in sorted(set(machines) & set(theirs), key=str):
        if machines[seed] is not None and machines[seed] == theirs[seed]:
            found[machines[seed]].append(seed)
    return dict(found)


def short_kind(kind: str) -> str:
    """`Intel Xeon, AVX-512` for `Intel(R) Xeon(R) Processor @ 2.50GHz; 1 core(s); avx2, avx512f`."""
    if kind.count("; ") != 2:
        return kind
    cpu, _, isa = kind.split("; ")
    name = " ".join(cpu.replace("(R)", "").replace("Processor", "").split("@")[0].split()[:2])
    vector = 'AVX-512' if 'avx512f' in isa else 'AVX2' if 'avx2' in isa else isa
    return f"{name}, {vector}" + (" and AMX" if "amx" in isa else "")


def saving(table: dict, method: str, task: str, key: str, reference: str = FULL, kind=None):
    """The seed-paired interval of 1 - `method`'s `key` / `reference`'s (the share it saves), None where missing;
    only the seeds that ran on `kind` where given."""
    pairs = paired_values(table, method, task, key, reference, kind)
    if not pairs:
        return None
    shares = [1 - a / b for a, b in pairs.values()]
    return stats.paired_difference(shares, [0.0] * len(shares))


def overall(table: dict, tasks: list, methods: dict) -> dict:
    """Per method: means over the tasks (of each task's mean over seeds) of score, of time and memory relative to full
    fine-tuning's on the same task, and of time per epoch and memory; with the 95% intervals of the score difference
    and of the shares (mean of the tasks' seed-paired intervals) for the figures' bars."""
    result = {}
    for method in methods:
        scores, times, memories, epochs, peaks, counted = [], [], [], [], [], []
        for task in tasks:
            mine, full = table.get((method, task)), table.get((FULL, task))
            if not mine or _mean(mine["score"]) is None or not full or _mean(full["score"]) is None:
                continue
            counted.append(task)
            scores.append(_mean(mine["score"]) - _mean(full["score"]))
            times.append(_ratio(_mean(mine["time"]), _mean(full["time"])))
            memories.append(_ratio(_mean(mine["memory"]), _mean(full["memory"])))
            epochs.append(_mean(mine["epoch"]))
            peaks.append(_mean(mine["memory"]))
        absolute = [_mean(table[(method, t)]["score"]) for t in counted]
        intervals = {key: _mean_interval([f(table, method, t, k) for t in counted]) for key, (f, k) in
                     {"delta": (difference, "score"), "time_saving": (saving, "time"),
                      "memory_saving": (saving, "memory")}.items()} if method != FULL else {}
        result[method] = {"tasks": counted, "score": _mean(absolute), "delta": _mean(scores),
                          "time_ratio": _mean(times), "memory_ratio": _mean(memories), "epoch": _mean(epochs),
                          "memory": _mean(peaks), "intervals": intervals}
    return result


def _mean_interval(intervals: list):
    present = [i for i in intervals if i is not None]
    return stats.mean_of(present) if present and len(present) == len(intervals) else None


def _ratio(a, b):
    return a / b if a is not None and b else None


def _points(value) -> str:
    return "n/a" if value is None else f"{value:+.1f}"


def trainable_text(table: dict, method: str, tasks: list) -> str:
    for task in tasks:
        cell = table.get((method, task))
        if cell and cell["summaries"]:
            summary = cell["summaries"][0]
            added = methods_lib.registry.added_weights(summary)
            share = summary["trainable_params"] / summary["total_params"]
            return (f"{summary['trainable_params']:,} ({100 * share:.2f}%)"
                    + (f", of which {methods_lib.of(summary).title} {added:,}" if added else ""))
    return "n/a"


def method_rows(table: dict, tasks: list, summary: dict, methods: dict) -> list:
    rows = []
    for method in methods:
        m = summary[method]
        rates = "; ".join(f"{t} {'/'.join(f'{lr:g}' for lr in table[(method, t)]['lr'])}" for t in tasks
                          if table.get((method, t)) and table[(method, t)]["lr"])
        count = "" if len(m["tasks"]) == len(tasks) else f" ({len(m['tasks'])}/{len(tasks)} tasks)"
        delta = m["intervals"].get("delta")
        rows.append([method, trainable_text(table, method, tasks), rates or "n/a",
                     "n/a" if m["score"] is None else f"{m['score']:.1f}{count}",
                     "–" if method == FULL else delta.text() if delta else _points(m["delta"]),
                     reports.percent(m["time_ratio"]), "n/a" if m["epoch"] is None else f"{m['epoch']:.1f}",
                     "n/a" if m["memory"] is None else f"{m['memory']:,.0f}", reports.percent(m["memory_ratio"])])
    return rows


METHOD_HEADER = ["method", "trainable weights (share)", "rate per task", "score (mean of tasks)",
                 "vs full, points [95%]", "time to stop, vs full", "s per epoch", "memory (MB)", "memory vs full"]


def task_rows(table: dict, task: str, baseline, methods: dict) -> list:
    """One row per method, then the constant prediction's score on GLUE dev (`baseline`, None if unknown)."""
    rows = []
    for method in methods:
        cell = table.get((method, task))
        if not cell:
            continue
        interval = None if method == FULL else difference(table, method, task, "score")
        flops = sum(1 for s in cell["summaries"] if collapsed(s, baseline))
        rows.append([method, "/".join(f"{lr:g}" for lr in cell["lr"]) or "n/a",
                     reports.cell(cell["score"], cell["expected"], digits=1) + reports.censored_mark(cell["summaries"])
                     + (f" ({flops} collapsed: the constant prediction)" if flops else ""),
                     "–" if interval is None else interval.text(),
                     reports.cell(cell["time"], cell["expected"], digits=0),
                     reports.cell(cell["epoch"], cell["expected"], digits=1),
                     reports.cell(cell["memory"], cell["expected"], digits=0)])
    constant = "n/a (GLUE dev not found: pass --data_dir)" if not baseline else \
        f"{100 * baseline['score']:.1f} ({baseline['note']})"
    rows.append(["majority class (constant prediction)", "–", constant, "–", "–", "–", "–"])
    return rows


TASK_HEADER = ["method", "rate", "score", "vs full, points (seed-paired 95%)", "time to stop (s)", "s per epoch",
               "memory (MB)"]


def learned(table: dict, tasks: list, baselines: dict) -> dict:
    """`{task: points}` by which full fine-tuning's mean best validation score beats the constant prediction's on
    the same validation splits (`validation_baselines`; tasks without a known baseline left out)."""
    gains = {}
    for task in tasks:
        full, base = table.get((FULL, task)), validation_baselines.mean_score(baselines, task)
        values = [validation(s) for s in full["summaries"]] if full else []
        if base is not None and values and None not in values:
            gains[task] = _mean(values) - 100 * base
    return gains


def learned_interval(table: dict, task: str, baselines: dict):
    """The 95% interval of full fine-tuning's best validation score minus the constant prediction's on the same
    split, seed by seed, in points (None where a seed's baseline is unknown): how sure "it learned" is."""
    full = table.get((FULL, task))
    gains = []
    for summary in full["summaries"] if full else []:
        base = baselines.get((task, reports.run_seed(summary)))
        if base is None or validation(summary) is None:
            return None
        gains.append(validation(summary) - 100 * base["score"])
    return stats.paired_difference(gains, [0.0] * len(gains)) if gains else None


def search_rows(collected: list, tasks: list, design: Design, baselines=None) -> list:
    """Per task and search: each rate's best validation score (x100) at seed 0, the chosen rate (the runs' own rule,
    once every rate has run) in bold, whether it lies at an end of the rates tried, and "(collapsed)" beside a run
    whose best validation score is the constant prediction's (`collapsed`; `baselines`: the constant prediction's
    validation scores by task and seed, for runs that do not record it)."""
    found, flat = defaultdict(dict), set()
    for run in collected:
        part = run["settings"]["part"]
        if part.startswith(("search", "beyond")) and not isinstance(run["settings"]["lr"], str):  # str: pending
            label = part.split(":", 1)[1].strip() if ":" in part else design.search_labels[part]
            value = validation(run["summary"]) if run["summary"] else "missing"
            found[(run["settings"]["task"], label)][run["settings"]["lr"]] = value
            own = (baselines or {}).get((run["settings"]["task"], run["settings"]["seed"]))
            if run["summary"] and collapsed(run["summary"], validation_baseline=own):
                flat.add((run["settings"]["task"], label, run["settings"]["lr"]))
    rows = []
    for task in tasks:
        for (t, label), scores in found.items():
            if t != task:
                continue
            rates = sorted(scores)
            complete = all(v != "missing" for v in scores.values())
            chosen = design.pick_rate(scores) if complete else None
            edge = chosen is not None and chosen in (rates[0], rates[-1])
            rows.append([task, label, "yes" if edge else "", ", ".join(
                ("**" if lr == chosen else "") + f"{lr:g}: " + (scores[lr] if scores[lr] == "missing" else "n/a"
                                                                 if scores[lr] is None else f"{scores[lr]:.1f}")
                + ("**" if lr == chosen else "") + (" (collapsed)" if (task, label, lr) in flat else "")
                for lr in rates)])
    return rows


CSV_HEADER = ["task", "method", "part", "lr", "seed", "metric", "validation_best", "test_at_best", "best_epoch",
              "epochs", "time_to_stop_s", "s_per_epoch", "peak_memory_mb", "peak_above_start_mb", "trainable_params",
              "machine", "folder"]


def csv_rows(collected: list, clock: str, design: Design) -> list:
    rows = []
    for run in collected:
        summary, s = run["summary"], run["settings"]
        if not summary:
            continue
        value = validation(summary)
        above = summary.get("peak_above_start_mb")
        rows.append([s["task"], design.method_of(s), s["part"], s["lr"], s["seed"], summary["metric"],
                     None if value is None else round(value, 2), round(score(summary), 2),
                     summary.get("best_epoch"), len(summary["epochs"]),
                     round(reports.time_to_stop(summary, clock), 1), round(epoch_seconds(summary, clock), 2),
                     round(summary.get("peak_memory_mb") or 0), None if above is None else round(above),
                     summary.get("trainable_params"), reports.machine_label(summary.get("machine")), run["folder"]])
    return rows


def collapsed(summary: dict, dev_baseline=None, validation_baseline=None) -> bool:
    """A run that learned nothing (flagged, kept): its best validation score is exactly the constant prediction's
    (as the run recorded it); for runs made before the constant prediction was recorded, its best validation score
    is exactly the constant prediction's on its split (`validation_baseline`, `validation_baselines`' entry for its
    task and seed), or its GLUE dev score exactly the majority class's (`dev_baseline`)."""
    constant = (summary or {}).get("constant_prediction") or {}
    if constant.get("score") is not None and constant.get("best") is not None:
        return abs(constant["best"] - constant["score"]) < 1e-9
    for value, baseline in ((validation, validation_baseline), (score, dev_baseline)):
        found = value(summary) if summary and baseline is not None else None
        if found is not None and abs(found - 100 * baseline["score"]) < 1e-9:
            return True
    return False


def searches_section(collected: list, tasks: list, design: Design, baselines=None) -> list:
    lines = ["## The learning-rate searches", "",
             "Seed 0, best validation score (x100, on the split held out of GLUE train) per rate; the chosen rate in "
             "bold (ties: the smaller); \"(collapsed)\": a run whose best validation score is the constant "
             "prediction's on its split (it learned nothing; kept). The seed-0 runs choose the rate; the compared runs "
             "are "
             + ("the search's own seed-0 run and seeds 1-2." if design.compared_seeds_searched else
                "fresh seeds, so the choice does not flatter its own scores."), ""]
    searches = search_rows(collected, tasks, design, baselines)
    edges = sum(1 for row in searches if row[2])
    decided = sum(1 for row in searches if "**" in row[3])
    return lines + [f"{edges} of the {decided} searches finished so far (of {len(searches)}) chose a rate at an end of "
                    "the rates tried (`at an end`): a wider search might have found a better one there.", "",
                    reports.markdown_table(["task", "search", "at an end", "rate: validation"], searches), ""]


def ratio(table: dict, method: str, task: str, reference: str = FULL, key: str = "time", seeds=None, kind=None):
    """The seed-paired interval of `method`'s time to stop over `reference`'s (a share: 0.4 is 40% of its time);
    None where no seed has both sides. `key="probed"`: the times divided by the machine's speed probe (only seeds
    whose runs recorded it on both sides); `seeds`: only these seeds; `kind`: only seeds run on that kind of machine."""
    paired = _paired(table, method, task, key, reference, kind)
    common = [seed for seed in paired if seeds is None or seed in seeds]
    if not common:
        return None
    return stats.paired_difference([paired[seed] for seed in common], [0.0] * len(common))


def _paired(table: dict, method: str, task: str, key: str, reference: str = FULL, kind=None) -> dict:
    """`{seed: method's value / reference's}` over the seeds where both sides have `key` (for a time, and both ran
    on one kind of machine: `paired_values`)."""
    return {seed: a / b for seed, (a, b) in paired_values(table, method, task, key, reference, kind).items()}


def time_savings(table: dict, method: str, tasks: list, reference: str = FULL, key: str = "time") -> tuple:
    """`(labels, {label: interval of the time share saved})`: one label per task, or one per kind of machine where a
    task's seed pairs ran on several (times are not pooled across kinds: `pair_kinds`)."""
    labels, found = [], {}
    for task in tasks:
        kinds = pair_kinds(table, method, task, reference)
        if len(kinds) <= 1:
            labels.append(task)
            if (i := saving(table, method, task, key, reference)) is not None:
                found[task] = i
            continue
        for kind in kinds:
            label = f"{task} on {short_kind(kind)}"
            labels.append(label)
            found[label] = saving(table, method, task, key, reference, kind)
    return labels, found


def machine_groups(table: dict, method: str, task: str) -> list:
    """`[(label, kind)]`: the task alone (kind None) where its seed pairs ran on one kind of machine, else one label
    per kind (`task on Intel Xeon, AVX-512`), so that times are not pooled across kinds."""
    kinds = pair_kinds(table, method, task)
    if len(kinds) <= 1:
        return [(task, None)]
    return [(f"{task} on {short_kind(kind)}", kind) for kind in kinds]


def share_text(interval) -> str:
    """A ratio's interval as shares: `38% [35%, 41%]`; `–` where not run."""
    if interval is None:
        return "–"
    if not interval.defined:
        return f"{100 * interval.estimate:.0f}% (no interval)" if interval.n else "–"
    return f"{100 * interval.estimate:.0f}% [{100 * interval.low:.0f}%, {100 * interval.high:.0f}%]"
