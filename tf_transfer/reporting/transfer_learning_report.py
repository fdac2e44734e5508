"""The report of the transfer-learning study (`python -m tf_transfer.experiments report transfer_learning`): the
claims table, tables per task and epoch, time to the stopping point and time saved (censored runs marked), fixed
budgets, the learning-rate effect, the cache's share of the saving, score-vs-time curves.

>>> from tf_transfer.reporting import transfer_learning_report
>>> transfer_learning_report.write_report(collected, "reports/transfer_learning", GRID, "cpu")  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections import defaultdict

from tf_transfer.reporting.transfer_learning_paper import (BUDGET_FRACTIONS, FINE_TUNING, LARGE, RATES, SEEDS,
                                                           SETTINGS, TASKS, UNCACHED_TASKS, label, paper_metric)
from tf_transfer.reporting.transfer_learning_claims import (OTHER_MACHINE, claims_section, completed_runs,
                                                            mean_or_none, saved_cell)
from tf_transfer.reporting import tables as reports
from tf_transfer.reporting.data_note import data_section
from tf_transfer.studies.grid import Grid

CENSORED_LEGEND = (
    "**†n/m: censored runs.** n of the m completed runs of a cell reached the epoch cap ({cap}) before patience "
    "stopped them: where patience would have stopped them, and the time it would have taken, are unknown (their "
    "stopping point and time are lower bounds). A time saved is marked ≥ (a lower bound) where only fine-tuning's "
    "runs are censored and ≤ (an upper bound) where only the setting's are. A run whose patience ran out exactly "
    "at the cap is not censored.")


def write_report(collected: list, out: str, study: Grid, variant: str) -> None:
    os.makedirs(out, exist_ok=True)
    by_cell = defaultdict(list)
    for run in collected:
        s = run["settings"]
        by_cell[(s["task"], s["trainable_layers"], s["lr"], s["part"])].append(run)
    tasks = [t for t in TASKS if any(key[0] == t for key in by_cell)]
    clock = study.variant(variant).clock
    lines = [f"# Transfer learning vs fine-tuning ({variant} variant)", "",
             f"Reproduces {study.paper}.", ""] + data_section(collected)
    baselines = reports.dev_baselines(tasks, collected, out, {t: paper_metric(t) for t in tasks})
    if any(baselines.values()):
        reports.write_baselines(out, baselines)
    lines += claims_section(tasks, by_cell, clock, collected, baselines)
    lines += _about_section(collected, out, study, variant)
    epoch_rows, stop_rows = [], []
    for task in tasks:
        task_lines, task_epochs, task_stops = _task_section(task, by_cell, out, clock)
        lines += task_lines
        epoch_rows += task_epochs
        stop_rows += task_stops
    lines += _cache_effect(tasks, by_cell, clock)
    lines += _learning_rate_effect(tasks, by_cell, clock)
    lines += _groups(tasks, by_cell, clock)
    lines += _slow_epochs(epoch_rows, clock)
    lines += _missing(collected)
    reports.write_csv(os.path.join(out, "epochs.csv"),
                      ["task", "part", "trainable_layers", "lr", "seed", "epoch", "epoch_time_s", "train_time_s",
                       "epoch_cpu_s", "train_cpu_s", "cache_time_s", f"cache_build_{clock}_s", "cpu_utilization",
                       "val", "test", "stopping_metric"], epoch_rows)
    reports.write_csv(os.path.join(out, "stopping_points.csv"),
                      ["task", "part", "trainable_layers", "lr", "seed", "best_epoch", "epochs", "test_at_best",
                       f"time_to_stop_{clock}_s", f"cache_build_{clock}_s", "censored", "stopping_metric"], stop_rows)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def _about_section(collected: list, out: str, study: Grid, variant: str) -> list:
    """How the variant differs from the paper and where the paper is silent, the commands, what is still to run,
    the machines, and how to read the tables' times."""
    chosen = study.variant(variant)
    seeds = len(chosen.axes.get("seed", SEEDS) if chosen.axes else SEEDS)
    cap = study.base(variant).get("max_epochs")
    lines = []
    if chosen.differences:
        lines += ["## How this differs from the paper", ""] + [f"- {d}" for d in chosen.differences] + [""]
    lines += ["## Where the paper is silent", ""] + [f"- {d}" for d in SILENT] + [""]
    lines += reports.commands_section(study, variant, out)
    lines += reports.still_to_run("transfer_learning", collected, chosen, TASKS)
    lines += [reports.completed_count(collected)
              + f". Cells say `missing` where no seed finished and `(n/{seeds})` where some did. "
              + reports.clock_sentence(chosen.clock), ""]
    lines += reports.machines_section(collected)
    lines += [f"A time saved reads `{OTHER_MACHINE}` where a setting's runs and fine-tuning's ran on different kinds "
              "of machine: times are compared only within one.", ""]
    return lines + [CENSORED_LEGEND.format(cap=f"{cap} epochs" if cap else "max_epochs"), ""]


def _task_section(task: str, by_cell: dict, out: str, clock: str) -> tuple:
    """`(lines, epoch rows, stopping-point rows)` of one task: its settings' table, per-epoch and budget tables and
    score-vs-time figure, and its runs' rows of epochs.csv and stopping_points.csv."""
    base_done = [r["summary"] for r in by_cell.get((task, *FINE_TUNING, "main"), []) if r["summary"]]
    base_time = reports.mean_std([reports.time_to_stop(s, clock) for s in base_done])[0]
    task_runs = [r for key, runs in by_cell.items() if key[0] == task for r in runs if r["summary"]]
    # The metric the runs stopped on: the current protocol's, once any run of it has completed.
    current = [r["summary"]["metric"] for r in task_runs if not r["stand_in"]]
    metric = (current or [r["summary"]["metric"] for r in task_runs] or [None])[0]
    rows, epoch_rows, stop_rows = _setting_rows(task, by_cell, metric, clock, base_done, base_time)
    header = ["setting", "best epoch", "test score at best epoch", "time to stopping point (s)",
              "time saved vs fine-tune @ 2e-5", "score − fine-tune @ 2e-5"]
    lines = [f"## {task}", ""]
    lines += _stand_in_note(task, [r for r in task_runs if r["stand_in"]], metric)
    lines += [f"Metric (early stopping, best epoch and the scores below): {metric or 'unknown (no run finished)'}; "
              "test = GLUE dev.", "", reports.markdown_table(header, rows), ""]
    lines += _per_epoch_table(task, by_cell, metric, clock)
    lines += _budget_table(task, by_cell, metric, base_time, clock)
    figure = _curves(task, by_cell, metric, out, clock)
    if figure:
        lines += [f"![score vs time, {task}]({figure})", ""]
    return lines, epoch_rows, stop_rows


def _setting_rows(task: str, by_cell: dict, metric, clock: str, base_done: list, base_time) -> tuple:
    """`(table rows, epoch rows, stopping-point rows)`: per part, rate and setting of `task`, its best epoch, score,
    time and the time saved and score against fine-tuning @ 2e-5 (`base_done`, its mean time `base_time`)."""
    base_censored = any(reports.censored(s) for s in base_done)
    base_score = None
    if metric:
        base_score = reports.mean_std([reports.test_score(reports.best_epoch(s), metric) for s in base_done])[0]
    rows, epoch_rows, stop_rows = [], [], []
    for part in sorted({key[3] for key in by_cell if key[0] == task}):
        for lr in RATES:
            for k in SETTINGS:
                runs = by_cell.get((task, k, lr, part))
                if not runs:
                    continue
                done = [r["summary"] for r in runs if r["summary"]]
                if part != "main" and not done:
                    continue  # an arm not run yet: listed under "Still to run"
                scores = [reports.test_score(reports.best_epoch(s), metric) for s in done] if metric else []
                times = [reports.time_to_stop(s, clock) for s in done]
                mean_time = reports.mean_std(times)[0]
                mean_score = reports.mean_std(scores)[0]
                is_base = (k, lr, part) == (*FINE_TUNING, "main")
                saved = saved_cell(mean_time, base_time, any(reports.censored(s) for s in done) and not is_base,
                                   base_censored and not is_base, done + base_done)
                delta = (f"{mean_score - base_score:+.3f}" if mean_score is not None and base_score is not None
                         else "n/a")
                name = label(k, lr) + ("" if part == "main" else f" [{part}]") + reports.censored_mark(done)
                rows.append([name, reports.cell([s["best_epoch"] for s in done], len(runs), 1),
                             reports.cell(scores, len(runs)), reports.cell(times, len(runs), 0), saved, delta])
                for s in done:
                    stop, epochs = _run_rows(s, task, part, k, lr, metric, clock)
                    stop_rows.append(stop)
                    epoch_rows += epochs
    return rows, epoch_rows, stop_rows


def _run_rows(s: dict, task: str, part: str, k, lr, metric, clock: str) -> tuple:
    """One run's row of stopping_points.csv and its rows of epochs.csv."""
    stop = [task, part, k, lr, s["seed"], s["best_epoch"], len(s["epochs"]),
            reports.test_score(reports.best_epoch(s), metric),
            reports.time_to_stop(s, clock), reports.cache_cost(s, clock),
            reports.censored(s), s["metric"]]
    epochs = [[task, part, k, lr, s["seed"], e["epoch"], e["epoch_time_s"],
               e["train_time_s"], e.get("epoch_cpu_s"), e.get("train_cpu_s"),
               s.get("cache_time_s", 0.0), reports.cache_cost(s, clock),
               e.get("cpu_utilization"), e["val"].get(metric),
               reports.test_score(e, metric), s["metric"]] for e in s["epochs"]]
    return stop, epochs


SILENT = (
    "Learning-rate schedule: the paper names none (no warm-up, no decay is mentioned). The runs keep the rate "
    "constant (`--lr_schedule=constant`): a reading of that silence, not the paper's statement. BERT's own "
    "fine-tuning code, whose method the paper says it follows for fine-tuning, warms up over 10% of the steps and "
    "decays linearly.",
    "The stopping threshold (\"stops increasing by a small threshold for two consecutive epochs\"): no value is "
    "given; the runs use `--min_delta=0` with patience 2.",
    "Dropout (Table 1 names it without a value), optimizer and weight decay: BERT's (dropout 0.1, AdamW with "
    "weight decay 0.01, gradients clipped to norm 1.0).",
)


def _stand_in_note(task: str, standing: list, metric) -> list:
    if not standing:
        return []
    reasons = sorted({r["stand_in"]["reason"] for r in standing})
    grid_metric = standing[0]["settings"].get("metric")
    return [f"**{len(standing)} runs of {task} below are stand-ins, not runs of the current protocol**: "
            + "; ".join(reasons) + "."
            + (f" Their scores are on {metric}, the metric they stopped on; the grid now stops {task} on "
               f"{grid_metric} (the paper's metric), and the claims table reads their {grid_metric} at the epoch "
               f"{metric} chose. Rerun them with the commands under *Still to run*."
               if grid_metric and grid_metric != metric else " Rerun them with the commands under *Still to run*."),
            ""]


def _epoch_seconds(runs, others, clock) -> str:
    """Mean seconds per epoch of `runs` (each run's mean, then over runs; a cache's build is not in it), or
    `OTHER_MACHINE` where `runs` and `others`, the runs they are read beside, span kinds of machine."""
    if not reports.one_machine(runs + others):
        return OTHER_MACHINE
    key = "epoch_cpu_s" if clock == "cpu" else "epoch_time_s"
    per_run = []
    for summary in runs:
        seconds = [e.get(key) for e in summary["epochs"]]
        if not seconds or None in seconds:
            return "n/a"
        per_run.append(sum(seconds) / len(seconds))
    return f"{mean_or_none(per_run):.1f}"


def _best_scores(runs, planned: int) -> str:
    """Test score at the best epoch, mean ± std over `runs`, marked when fewer than `planned` completed."""
    return reports.cell([reports.test_score(reports.best_epoch(s), s["metric"]) for s in runs], planned)


def _cache_effect(tasks, by_cell, clock) -> list:
    """Time saved by freezing alone (the uncached arm) and by freezing plus the frozen-prefix cache, side by side;
    and seconds per epoch, which the epoch patience stops a run at does not move."""
    present = [t for t in UNCACHED_TASKS if t in tasks]
    if not present or not any(part == "uncached" for (_, _, _, part) in by_cell):
        return []
    rows = []
    for task in present:
        full = completed_runs(by_cell, task, *FINE_TUNING)
        base = mean_or_none([reports.time_to_stop(s, clock) for s in full])
        base_censored = any(map(reports.censored, full))
        if full:
            reference = _best_scores(full, len(by_cell.get((task, *FINE_TUNING, "main"), [])))
            epoch_s = _epoch_seconds(full, [], clock)
            rows.append([task, label(*FINE_TUNING) + " (the reference)" + reports.censored_mark(full), "0%",
                         reference, epoch_s, "0%", reference, epoch_s])
        for lr in RATES:
            for k in (1, 2, 3, 4):
                row = [task, label(k, lr)]
                for part in ("main", "uncached"):
                    done = completed_runs(by_cell, task, k, lr, part)
                    if not done:
                        row += ["not yet run"] * 3
                        continue
                    mean_time = mean_or_none([reports.time_to_stop(s, clock) for s in done])
                    row += [saved_cell(mean_time, base, any(map(reports.censored, done)), base_censored, done + full)
                            + reports.censored_mark(done),
                            _best_scores(done, len(by_cell.get((task, k, lr, part), []))),
                            _epoch_seconds(done, full, clock)]
                rows.append(row)
    return ["## Freezing alone vs freezing plus the cache", "",
            "Time saved against fine-tune @ 2e-5 (time to the stopping point) and test score at the best epoch, for "
            "the transfer runs with the frozen-prefix cache (`--cache_frozen`: the frozen blocks run once, in "
            "inference mode, and the cache's build is charged to every run that uses it) and without it (freezing "
            "alone, as the paper: the frozen blocks run forward in every step, dropout on). `not yet run`: the "
            "uncached arm has no completed run of that setting (see *Still to run*). Time to the stopping point "
            "also depends on the epoch patience stopped a run at, which differs between the arms' runs; seconds per "
            "epoch (each run's mean over its epochs, then over seeds; the cache's build not included) do not, and "
            "show what each arm's step costs.", "",
            reports.markdown_table(["task", "setting", "time saved: freezing + cache", "score: freezing + cache",
                                    "s per epoch: freezing + cache", "time saved: freezing alone",
                                    "score: freezing alone", "s per epoch: freezing alone"], rows), ""]


def _slow_epochs(epoch_rows: list, clock: str) -> list:
    """Epochs whose CPU utilization was well below the study's median: on the wall clock their times are not like
    the others' (TensorFlow ran on fewer cores, the process was paused, or other work shared its core). Listed so
    that no time comparison hides them."""
    utilizations = sorted(row[12] for row in epoch_rows if row[12] is not None)
    if not utilizations:
        return []
    median = utilizations[len(utilizations) // 2]
    slow = [row for row in epoch_rows if row[12] is not None and row[12] < 0.75 * median]
    effect = ("The tables use CPU seconds, which such sharing leaves unchanged for a one-core run; the wall times "
              "of these epochs (epochs.csv) are longer than the work took." if clock == "cpu" else
              "Their `epoch_time_s` is longer than the same work takes on all cores (benchmarks/README.md, *One "
              "core or two*); they are kept in every table above.")
    lines = ["## Epoch times to read with care", "",
             f"Median CPU utilization over all epochs: {median:.2f} (CPU seconds per wall second of training). "
             f"{len(slow)} of {len(epoch_rows)} epochs ran below 75% of it. " + effect, ""]
    if slow:
        lines += [reports.markdown_table(["task", "part", "trainable layers", "lr", "seed", "epoch", "epoch time (s)",
                                          "epoch CPU (s)", "CPU utilization"],
                                         [[r[0], r[1], r[2], r[3], r[4], r[5], f"{r[6]:.1f}",
                                           "n/a" if r[8] is None else f"{r[8]:.1f}", f"{r[12]:.2f}"]
                                          for r in slow]), ""]
    return lines


def _per_epoch_table(task, by_cell, metric, clock) -> list:
    """The paper's Tables 2-9: per epoch, the test score and cumulative training time of each setting."""
    columns = [(k, lr, part) for (t, k, lr, part), runs in by_cell.items()
               if t == task and (part == "main" or any(r["summary"] for r in runs))]
    columns.sort(key=lambda c: (c[2], RATES.index(c[1]) if c[1] in RATES else 9, SETTINGS.index(c[0])))
    max_epochs = max((len(r["summary"]["epochs"]) for c in columns for r in by_cell[(task, *c)] if r["summary"]),
                     default=0)
    if not metric or not max_epochs:
        return []
    rows = []
    for epoch in range(1, max_epochs + 1):
        row = [epoch]
        for c in columns:
            done = [r["summary"] for r in by_cell[(task, *c)] if r["summary"] and len(r["summary"]["epochs"]) >= epoch]
            scores = [reports.test_score(s["epochs"][epoch - 1], metric) for s in done]
            times = [reports.elapsed(s, s["epochs"][epoch - 1], clock) for s in done]
            mean_score, mean_time = reports.mean_std(scores)[0], reports.mean_std(times)[0]
            row.append("–" if not done else
                       ("n/a" if mean_score is None else f"{mean_score:.3f}")
                       + (" (time n/a)" if mean_time is None else f" ({mean_time:.0f} s)"))
        rows.append(row)
    header = ["epoch"] + [label(k, lr) + ("" if part == "main" else f" [{part}]")
                          + reports.censored_mark(completed_runs(by_cell, task, k, lr, part)) for k, lr, part in columns]
    return [f"Per epoch: test {metric} (cumulative seconds), mean over seeds; – after a run stopped (a censored "
            "run, †, stopped at the cap).", "",
            reports.markdown_table(header, rows), ""]


def _budget_table(task, by_cell, metric, base_time, clock) -> list:
    """The score each setting had reached within fixed time budgets (the paper's 50k/100k/150k s on MNLI)."""
    if not metric or not base_time:
        return []
    if not reports.one_machine([r["summary"] for key, runs in by_cell.items() if key[0] == task and key[3] == "main"
                                for r in runs if r["summary"]]):
        return [f"No time-budget table for {task}: its runs ran on different machines (see above).", ""]
    budgets = [base_time * f for f in BUDGET_FRACTIONS]
    rows = []
    for (t, k, lr, part), runs in sorted(by_cell.items(), key=lambda kv: str(kv[0])):
        if t != task or part != "main":
            continue
        row = [label(k, lr) + reports.censored_mark([r["summary"] for r in runs if r["summary"]])]
        for budget in budgets:
            reached = []
            for r in runs:
                s = r["summary"]
                if not s:
                    continue
                within = [e for e in s["epochs"] if (reports.elapsed(s, e, clock) or float("inf")) <= budget]
                if within:  # the epoch a user would keep: best validation score so far
                    best = max(within, key=lambda e: e["val"].get(metric) if e["val"].get(metric) is not None
                               else float("-inf"))
                    reached.append(reports.test_score(best, metric))
            row.append(reports.cell(reached, len(runs)) if reached else "not reached")
        rows.append(row)
    header = ["setting"] + [f"≤ {b:.0f} s ({int(f * 100)}% of fine-tuning's time)"
                            for b, f in zip(budgets, BUDGET_FRACTIONS)]
    return [f"Test {metric} reached within a time budget (epoch with the best validation score so far):", "",
            reports.markdown_table(header, rows), ""]


def _curves(task, by_cell, metric, out, clock) -> str:
    """Score-versus-time curves (the paper's Figures 3-6): one panel per learning rate, one colour per setting;
    thick: the mean over seeds per epoch (over the seeds that reached it), thin: each seed."""
    if not metric:
        return ""
    plt = reports.pyplot()
    rates = sorted({key[2] for key in by_cell if key[0] == task}, reverse=True)
    fig, axes = plt.subplots(1, max(len(rates), 1), figsize=(11, 4.5), sharey=True, squeeze=False)
    colours = plt.get_cmap("tab10")
    drawn = False
    for axis, rate in zip(axes[0], rates):
        keys = [key for key, runs in by_cell.items() if key[0] == task and key[2] == rate
                and any(r["summary"] for r in runs)]
        keys.sort(key=lambda key: (key[3] != "main", SETTINGS.index(key[1]) if key[1] in SETTINGS else 9))
        for index, key in enumerate(keys):
            _, k, lr, part = key
            colour = colours(index % 10)
            done = [r["summary"] for r in by_cell[key] if r["summary"]]
            for s in done:
                axis.plot([reports.elapsed(s, e, clock) for e in s["epochs"]],
                          [reports.test_score(e, metric) for e in s["epochs"]], color=colour, alpha=0.25, lw=0.8)
            means = []
            for epoch in range(1, max((len(s["epochs"]) for s in done), default=0) + 1):
                reached = [s for s in done if len(s["epochs"]) >= epoch]
                time = reports.mean_std([reports.elapsed(s, s["epochs"][epoch - 1], clock) for s in reached])[0]
                score = reports.mean_std([reports.test_score(s["epochs"][epoch - 1], metric) for s in reached])[0]
                if time is not None and score is not None:
                    means.append((time, score))
            if means:
                axis.plot(*zip(*means), marker="o", markersize=3, color=colour, lw=2,
                          linestyle="-" if part == "main" else ":",
                          label=label(k, lr).split(" @ ")[0] + ("" if part == "main" else f" [{part}]"))
                drawn = True
        axis.set_title(f"lr {rate:g}")
        axis.set_xlabel(f"training time ({'CPU seconds, one core' if clock == 'cpu' else 's'}, cache build included)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    if not drawn:
        plt.close(fig)
        return ""
    axes[0][0].set_ylabel(f"test {metric} (GLUE dev)")
    fig.suptitle(f"{task}: score vs training time (thick: mean over seeds; thin: each seed)")
    name = f"curves_{task}.png"
    fig.tight_layout()
    fig.savefig(os.path.join(out, name), dpi=110)
    plt.close(fig)
    return name


def _learning_rate_effect(tasks, by_cell, clock) -> list:
    rows = []
    for task in tasks:
        for approach, ks in (("transfer (last 1-4)", [1, 2, 3, 4]), ("fine-tune (all)", ["all"])):
            row = [task, approach]
            for lr in RATES:
                done = [r["summary"] for k in ks for r in by_cell.get((task, k, lr, "main"), []) if r["summary"]]
                expected = sum(len(by_cell.get((task, k, lr, "main"), [])) for k in ks)
                scores = [reports.test_score(reports.best_epoch(s), s["metric"]) for s in done]
                times = [reports.time_to_stop(s, clock) for s in done]
                row += [reports.cell(scores, expected), reports.cell(times, expected, 0) + reports.censored_mark(done)]
            rows.append(row)
    header = ["task", "approach"] + [f"{x} @ {lr:g}" for lr in RATES for x in ("score", "time (s)")]
    return ["## Effect of the learning rate", "",
            "Mean ± std over the settings' runs of the test score at the best epoch (each run's own metric) and the "
            "time to the stopping point; †n/m: censored runs.", "", reports.markdown_table(header, rows), ""]


def _groups(tasks, by_cell, clock) -> list:
    rows = []
    for group, members in (("large training sets", LARGE), ("small training sets", [t for t in TASKS
                                                                                         if t not in LARGE])):
        present = [t for t in tasks if t in members]
        for lr in RATES:
            for k in SETTINGS:
                scores, times, censored = [], [], []
                for task in present:
                    done = [r["summary"] for r in by_cell.get((task, k, lr, "main"), []) if r["summary"]]
                    if done:
                        scores.append(reports.mean_std([reports.test_score(reports.best_epoch(s), s["metric"])
                                                        for s in done])[0])
                        mean_time = reports.mean_std([reports.time_to_stop(s, clock) for s in done])[0]
                        if mean_time is not None:
                            times.append(mean_time)
                        censored += done
                if present:
                    rows.append([group, label(k, lr) + reports.censored_mark(censored),
                                 f"{len(scores)}/{len(present)} tasks",
                                 f"{sum(scores) / len(scores):.3f}" if scores else "missing",
                                 f"{sum(times) / len(times):.0f}" if times else "missing"])
    return ["## Averages per group of tasks", "",
            "Mean over the group's tasks present here of the per-task mean test score at the best epoch and time to "
            "the stopping point; †n/m: censored runs among the group's.", "",
            reports.markdown_table(["group", "setting", "tasks with results", "mean score", "mean time (s)"], rows),
            ""]


def _missing(collected) -> list:
    """Runs without a completed run of their own: one row each, or one row per part and state for many alike."""
    def state(r):
        if r["error"]:
            return "failed: " + r["error"]
        if r["partial"]:
            return f"unfinished ({len(r['partial']['epochs'])} epochs)"
        return "stand-in: " + r["stand_in"]["reason"] if r["stand_in"] else "not run"

    def values(runs, key):
        return ", ".join(dict.fromkeys(str(r["settings"][key]) for r in runs))

    groups = defaultdict(list)
    for r in collected:
        if not r["summary"] or r["stand_in"]:
            groups[(r["settings"]["part"], state(r))].append(r)
    if not groups:
        return ["All runs of the grid completed.", ""]
    rows = []
    for (part, text), runs in groups.items():
        if len(runs) > 4 and not text.startswith("failed"):
            rows.append([values(runs, "task"), values(runs, "trainable_layers"), values(runs, "lr"),
                         values(runs, "seed"), part, f"{len(runs)} runs, {text}"])
        else:
            rows += [[r["settings"]["task"], r["settings"]["trainable_layers"], r["settings"]["lr"],
                      r["settings"]["seed"], part, text] for r in runs]
    return ["## Runs not completed", "", reports.markdown_table(["task", "k", "lr", "seed", "part", "state"], rows),
            ""]
