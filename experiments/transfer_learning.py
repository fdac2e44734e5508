"""Wang, "A New Computationally Efficient Method to Tune BERT Networks – Transfer Learning".

Eight GLUE tasks × {last 1, 2, 3, 4 blocks trainable; everything trainable} × lr {1e-3, 2e-5} × 2 seeds, batch
size 1, up to 30 epochs, patience 2 (the fixed settings are `flags/wang_common.flags`).

    python -m tf_transfer.experiments run transfer_learning --dry_run
    python -m tf_transfer.experiments run transfer_learning --variant=cpu
    python -m tf_transfer.experiments report transfer_learning --variant=cpu --out=reports/transfer_learning
"""

from __future__ import annotations

import os
from collections import defaultdict

from tf_transfer.reporting import tables as reports
from tf_transfer.studies.grid import Study, Variant

TASKS = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]
SETTINGS = [1, 2, 3, 4, "all"]
RATES = [1e-3, 2e-5]
SEEDS = [0, 1]
LARGE = ["sst2", "qqp", "mnli", "qnli"]  # the paper's large training sets; the rest are small
FINE_TUNING = ("all", 2e-5)  # the paper's baseline: every parameter at the fine-tuning rate
BUDGET_FRACTIONS = (0.25, 0.5, 1.0)  # of the fine-tuning baseline's time to its stopping point


def label(k, lr) -> str:
    return f"{'fine-tune (all)' if k == 'all' else f'last {k}'} @ {lr:g}"


def report(collected: list, out: str, study: Study, variant: str) -> None:
    os.makedirs(out, exist_ok=True)
    chosen = study.variant(variant)
    by_cell = defaultdict(list)
    for run in collected:
        s = run["settings"]
        by_cell[(s["task"], s["trainable_layers"], s["lr"], s["part"])].append(run)
    tasks = [t for t in TASKS if any(key[0] == t for key in by_cell)]
    seeds = len(chosen.axes.get("seed", SEEDS) if chosen.axes else SEEDS)
    clock = chosen.clock
    lines = [f"# Transfer learning vs fine-tuning ({variant} variant)", "",
             f"Reproduces {study.paper}.", ""]
    if chosen.differences:
        lines += ["## How this differs from the paper", ""] + [f"- {d}" for d in chosen.differences] + [""]
    lines += reports.commands_section(study, variant, out)
    completed = sum(1 for r in collected if r["summary"])
    lines += [f"{completed} of {len(collected)} runs completed. Cells say `missing` where no seed finished and "
              f"`(n/{seeds})` where some did. " + reports.clock_sentence(clock), ""]
    lines += reports.machines_section(collected)

    epoch_rows, stop_rows = [], []
    for task in tasks:
        metric = None
        lines += [f"## {task}", ""]
        header = ["setting", "best epoch", "test score at best epoch", "time to stopping point (s)",
                  "time saved vs fine-tune @ 2e-5", "score − fine-tune @ 2e-5"]
        rows = []
        baseline = by_cell.get((task, *FINE_TUNING, "main"), [])
        base_time = reports.mean_std([reports.time_to_stop(r["summary"], clock) for r in baseline
                                      if r["summary"]])[0]
        base_score = None
        for r in baseline:
            if r["summary"]:
                metric = r["summary"]["metric"]
        if metric:
            base_score = reports.mean_std([reports.test_score(reports.best_epoch(r["summary"]), metric)
                                           for r in baseline if r["summary"]])[0]
        for part in sorted({key[3] for key in by_cell if key[0] == task}):
            for lr in RATES:
                for k in SETTINGS:
                    runs = by_cell.get((task, k, lr, part))
                    if not runs:
                        continue
                    done = [r["summary"] for r in runs if r["summary"]]
                    metric = metric or (done[0]["metric"] if done else None)
                    scores = [reports.test_score(reports.best_epoch(s), metric) for s in done] if metric else []
                    times = [reports.time_to_stop(s, clock) for s in done]
                    mean_time = reports.mean_std(times)[0]
                    mean_score = reports.mean_std(scores)[0]
                    saved = (f"{100 * (1 - mean_time / base_time):.0f}%" if mean_time and base_time else "n/a")
                    delta = (f"{mean_score - base_score:+.3f}" if mean_score is not None and base_score is not None
                             else "n/a")
                    name = label(k, lr) + ("" if part == "main" else f" [{part}]")
                    rows.append([name, reports.cell([s["best_epoch"] for s in done], len(runs), 1),
                                 reports.cell(scores, len(runs)), reports.cell(times, len(runs), 0), saved, delta])
                    for s in done:
                        stop_rows.append([task, part, k, lr, s["seed"], s["best_epoch"], len(s["epochs"]),
                                          reports.test_score(reports.best_epoch(s), metric),
                                          reports.time_to_stop(s, clock), reports.cache_cost(s, clock)])
                        for e in s["epochs"]:
                            epoch_rows.append([task, part, k, lr, s["seed"], e["epoch"], e["epoch_time_s"],
                                               e["train_time_s"], e.get("epoch_cpu_s"), e.get("train_cpu_s"),
                                               s.get("cache_time_s", 0.0), reports.cache_cost(s, clock),
                                               e.get("cpu_utilization"), e["val"].get(metric),
                                               reports.test_score(e, metric)])
        lines += [f"Primary metric: {metric or 'unknown (no run finished)'}; test = GLUE dev.", "",
                  reports.markdown_table(header, rows), ""]
        lines += _per_epoch_table(task, by_cell, metric, clock)
        lines += _budget_table(task, by_cell, metric, base_time, clock)
        figure = _curves(task, by_cell, metric, out, clock)
        if figure:
            lines += [f"![score vs time, {task}]({figure})", ""]
    lines += _learning_rate_effect(tasks, by_cell, clock)
    lines += _groups(tasks, by_cell, clock)
    lines += _slow_epochs(epoch_rows, clock)
    lines += _missing(collected)
    reports.write_csv(os.path.join(out, "epochs.csv"),
                      ["task", "part", "trainable_layers", "lr", "seed", "epoch", "epoch_time_s", "train_time_s",
                       "epoch_cpu_s", "train_cpu_s", "cache_time_s", f"cache_build_{clock}_s", "cpu_utilization",
                       "val", "test"], epoch_rows)
    reports.write_csv(os.path.join(out, "stopping_points.csv"),
                      ["task", "part", "trainable_layers", "lr", "seed", "best_epoch", "epochs", "test_at_best",
                       f"time_to_stop_{clock}_s", f"cache_build_{clock}_s"], stop_rows)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


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
    columns = [(k, lr, part) for (t, k, lr, part) in by_cell if t == task]
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
    header = ["epoch"] + [label(k, lr) + ("" if part == "main" else f" [{part}]") for k, lr, part in columns]
    return [f"Per epoch: test {metric} (cumulative seconds), mean over seeds; – after a run stopped.", "",
            reports.markdown_table(header, rows), ""]


def _budget_table(task, by_cell, metric, base_time, clock) -> list:
    """The score each setting had reached within fixed time budgets (the paper's 50k/100k/150k s on MNLI)."""
    if not metric or not base_time:
        return []
    budgets = [base_time * f for f in BUDGET_FRACTIONS]
    rows = []
    for (t, k, lr, part), runs in sorted(by_cell.items(), key=lambda kv: str(kv[0])):
        if t != task or part != "main":
            continue
        row = [label(k, lr)]
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
        keys = [key for key in by_cell if key[0] == task and key[2] == rate]
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
                row += [reports.cell(scores, expected), reports.cell(times, expected, 0)]
            rows.append(row)
    header = ["task", "approach"] + [f"{x} @ {lr:g}" for lr in RATES for x in ("score", "time (s)")]
    return ["## Effect of the learning rate", "", reports.markdown_table(header, rows), ""]


def _groups(tasks, by_cell, clock) -> list:
    rows = []
    for group, members in (("large training sets", LARGE), ("small training sets", [t for t in TASKS
                                                                                         if t not in LARGE])):
        present = [t for t in tasks if t in members]
        for lr in RATES:
            for k in SETTINGS:
                scores, times = [], []
                for task in present:
                    done = [r["summary"] for r in by_cell.get((task, k, lr, "main"), []) if r["summary"]]
                    if done:
                        scores.append(reports.mean_std([reports.test_score(reports.best_epoch(s), s["metric"])
                                                        for s in done])[0])
                        mean_time = reports.mean_std([reports.time_to_stop(s, clock) for s in done])[0]
                        if mean_time is not None:
                            times.append(mean_time)
                if present:
                    rows.append([group, label(k, lr), f"{len(scores)}/{len(present)} tasks",
                                 f"{sum(scores) / len(scores):.3f}" if scores else "missing",
                                 f"{sum(times) / len(times):.0f}" if times else "missing"])
    return ["## Averages per group of tasks", "",
            "Mean over the group's tasks present here of the per-task mean test score at the best epoch and time to "
            "the stopping point.", "",
            reports.markdown_table(["group", "setting", "tasks with results", "mean score", "mean time (s)"], rows),
            ""]


def _missing(collected) -> list:
    rows = [[r["settings"]["task"], r["settings"]["trainable_layers"], r["settings"]["lr"], r["settings"]["seed"],
             r["settings"]["part"], "failed: " + r["error"] if r["error"] else
             (f"unfinished ({len(r['partial']['epochs'])} epochs)" if r["partial"] else "not run")]
            for r in collected if not r["summary"]]
    if not rows:
        return ["All runs of the grid completed.", ""]
    return ["## Runs not completed", "", reports.markdown_table(["task", "k", "lr", "seed", "part", "state"], rows),
            ""]


CPU_DIFFERENCES = (
    "Backbone all-MiniLM-L6-v2 (6 blocks, 384 wide) instead of BERT-base (12 blocks, 768 wide): the only "
    "pretrained BERT available offline here. 'last k blocks' therefore trains k of 6 blocks, not k of 12.",
    "Batch size 32 instead of 1 and at most 10 epochs instead of 30, for CPU time (except the [batch1] cell: "
    "RTE, last 2 blocks, both rates, at batch size 1).",
    "Transfer runs use the frozen-prefix cache (--cache_frozen): the frozen blocks run once, in inference mode, "
    "so dropout is off inside them (the paper kept it on). Cache build time is added to every time shown.",
    "Only RTE, MRPC, STS-B and CoLA (QQP, MNLI and QNLI's training data are not on this machine; SST-2 is too "
    "large for the CPU budget).",
    "Length-bucketed padding (batches padded to their bucket, not to 128): same model outputs, other batch "
    "composition.",
    "Mixed precision (--precision=mixed_bfloat16: bfloat16 matrix products, float32 weights and optimizer): on "
    "this machine's AMX units about 1.5x the float32 training rate on one core (benchmarks/README.md). The "
    "paper trained in float32.",
    "Each run is pinned to one core and two shards run side by side; times are the process's CPU seconds, i.e. "
    "the wall time on one dedicated core (the paper: wall time on a GPU).",
)


def pinned_commands(study: str, extra: str = "") -> tuple:
    """Two shards, one core each: the grid's runs are timed on the CPU clock, so other work may share the
    machine."""
    return tuple(f"taskset -c {core} python -m tf_transfer.experiments run {study} --variant=cpu --shard={core + 1}/2 "
                 f"--runs_dir=reports/runs --cache_dir=runs/cache --data_dir=$GLUE_DIR{extra} &"
                 for core in (0, 1))

STUDY = Study(
    name="transfer_learning",
    paper='Wang, "A New Computationally Efficient Method to Tune BERT Networks – Transfer Learning"',
    flagfile="flags/wang_common.flags",
    axes={"task": TASKS, "trainable_layers": SETTINGS, "lr": RATES, "seed": SEEDS},
    variants={
        "paper": Variant(),
        "cpu": Variant(
            settings={"preset": "all_minilm_l6_v2_en", "batch_size": 32, "max_epochs": 10, "cache_frozen": "auto",
                      "precision": "mixed_bfloat16"},
            axes={"task": ["rte", "mrpc", "stsb", "cola"], "trainable_layers": SETTINGS, "lr": RATES,
                  "seed": SEEDS},
            parts={"main": {},
                   "batch1": {"task": ["rte"], "trainable_layers": [2], "seed": [0], "batch_size": [1]}},
            differences=CPU_DIFFERENCES,
            clock="cpu",
            commands=pinned_commands("transfer_learning"),
        ),
    },
    report=report,
)
