"""Wang, "A New Computationally Efficient Method to Tune BERT Networks – Transfer Learning".

Eight GLUE tasks × {last 1, 2, 3, 4 blocks trainable; everything trainable} × lr {1e-3, 2e-5} × 2 seeds, batch
size 1, up to 30 epochs, patience 2 (the fixed settings are `flags/wang_common.flags`). CoLA is scored and stopped
on accuracy, the paper's metric (`flags/wang_cola.flags`); its runs made before that stopped on Matthews
correlation and stand in until rerun. The cpu variant adds an uncached transfer arm (RTE, MRPC): freezing alone,
without the frozen-prefix cache, to tell the two savings apart.

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


def _done(by_cell, task, k, lr, part="main") -> list:
    return [r["summary"] for r in by_cell.get((task, k, lr, part), []) if r["summary"]]


def _saved(mean_time, base_time, setting_censored: bool, base_censored: bool) -> str:
    """Time saved against fine-tuning, with the direction a censored side bounds it in."""
    if not mean_time or not base_time:
        return "n/a"
    text = f"{100 * (1 - mean_time / base_time):.0f}%"
    if setting_censored and base_censored:
        return text + " (both sides censored: no bound)"
    return ("≥ " if base_censored else "≤ " if setting_censored else "") + text


CENSORED_LEGEND = (
    "**†n/m: censored runs.** n of the m completed runs of a cell reached the epoch cap ({cap}) before patience "
    "stopped them: where patience would have stopped them, and the time it would have taken, are unknown (their "
    "stopping point and time are lower bounds). A time saved is marked ≥ (a lower bound) where only fine-tuning's "
    "runs are censored and ≤ (an upper bound) where only the setting's are. A run whose patience ran out exactly "
    "at the cap is not censored.")


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
    cap = study.base(variant).get("max_epochs")
    lines = [f"# Transfer learning vs fine-tuning ({variant} variant)", "",
             f"Reproduces {study.paper}.", ""]
    lines += _claims(tasks, by_cell, clock, collected)
    if chosen.differences:
        lines += ["## How this differs from the paper", ""] + [f"- {d}" for d in chosen.differences] + [""]
    lines += ["## Where the paper is silent", ""] + [f"- {d}" for d in SILENT] + [""]
    lines += reports.commands_section(study, variant, out)
    lines += _still_to_run(collected, chosen)
    own = sum(1 for r in collected if r["summary"] and not r["stand_in"])
    standing = sum(1 for r in collected if r["stand_in"])
    lines += [f"{own} of {len(collected)} runs completed"
              + (f", and {standing} more are stood in for by completed runs of an earlier protocol (marked where "
                 "they appear)" if standing else "")
              + f". Cells say `missing` where no seed finished and `(n/{seeds})` where some did. "
              + reports.clock_sentence(clock), ""]
    lines += reports.machines_section(collected)
    lines += [CENSORED_LEGEND.format(cap=f"{cap} epochs" if cap else "max_epochs"), ""]

    epoch_rows, stop_rows = [], []
    for task in tasks:
        metric = None
        lines += [f"## {task}", ""]
        header = ["setting", "best epoch", "test score at best epoch", "time to stopping point (s)",
                  "time saved vs fine-tune @ 2e-5", "score − fine-tune @ 2e-5"]
        rows = []
        baseline = by_cell.get((task, *FINE_TUNING, "main"), [])
        base_done = [r["summary"] for r in baseline if r["summary"]]
        base_time = reports.mean_std([reports.time_to_stop(s, clock) for s in base_done])[0]
        base_censored = any(reports.censored(s) for s in base_done)
        base_score = None
        task_runs = [r for key, runs in by_cell.items() if key[0] == task for r in runs if r["summary"]]
        # The metric the runs stopped on: the current protocol's, once any run of it has completed.
        current = [r["summary"]["metric"] for r in task_runs if not r["stand_in"]]
        metric = (current or [r["summary"]["metric"] for r in task_runs] or [None])[0]
        if metric:
            base_score = reports.mean_std([reports.test_score(reports.best_epoch(s), metric) for s in base_done])[0]
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
                    saved = _saved(mean_time, base_time, any(reports.censored(s) for s in done) and not is_base,
                                   base_censored and not is_base)
                    delta = (f"{mean_score - base_score:+.3f}" if mean_score is not None and base_score is not None
                             else "n/a")
                    name = label(k, lr) + ("" if part == "main" else f" [{part}]") + reports.censored_mark(done)
                    rows.append([name, reports.cell([s["best_epoch"] for s in done], len(runs), 1),
                                 reports.cell(scores, len(runs)), reports.cell(times, len(runs), 0), saved, delta])
                    for s in done:
                        stop_rows.append([task, part, k, lr, s["seed"], s["best_epoch"], len(s["epochs"]),
                                          reports.test_score(reports.best_epoch(s), metric),
                                          reports.time_to_stop(s, clock), reports.cache_cost(s, clock),
                                          reports.censored(s), s["metric"]])
                        for e in s["epochs"]:
                            epoch_rows.append([task, part, k, lr, s["seed"], e["epoch"], e["epoch_time_s"],
                                               e["train_time_s"], e.get("epoch_cpu_s"), e.get("train_cpu_s"),
                                               s.get("cache_time_s", 0.0), reports.cache_cost(s, clock),
                                               e.get("cpu_utilization"), e["val"].get(metric),
                                               reports.test_score(e, metric), s["metric"]])
        lines += _stand_in_note(task, [r for r in task_runs if r["stand_in"]], metric)
        lines += [f"Metric (early stopping, best epoch and the scores below): {metric or 'unknown (no run finished)'}; "
                  "test = GLUE dev.", "", reports.markdown_table(header, rows), ""]
        lines += _per_epoch_table(task, by_cell, metric, clock)
        lines += _budget_table(task, by_cell, metric, base_time, clock)
        figure = _curves(task, by_cell, metric, out, clock)
        if figure:
            lines += [f"![score vs time, {task}]({figure})", ""]
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


def _still_to_run(collected: list, chosen) -> list:
    """What the grid still lacks (runs not run, stand-ins to replace), with the commands that run exactly that."""
    standing = [r for r in collected if r["stand_in"]]
    absent = [r for r in collected if not r["summary"]]
    if not standing and not absent:
        return []
    lines = ["## Still to run", ""]
    groups = defaultdict(list)
    for r in standing:
        groups[("rerun", r["settings"]["part"], r["stand_in"]["reason"])].append(r)
    for r in absent:
        groups[("run", r["settings"]["part"], "not run yet" if not r["error"] and not r["partial"]
                else "failed or unfinished")].append(r)
    for (kind, part, reason), runs in sorted(groups.items()):
        tasks = sorted({r["settings"]["task"] for r in runs})
        lines.append(f"- {len(runs)} runs of part `{part}` ({', '.join(tasks)}): "
                     + (f"stood in for by earlier runs ({reason})" if kind == "rerun" else reason) + ".")
    tasks = ",".join(t for t in TASKS if any(r["settings"]["task"] == t for r in standing + absent))
    lines += ["", "`run` skips completed runs, so the grid's commands restricted to these tasks run exactly what is "
              "listed (stand-ins are never read by `run`; the report uses each run itself once it has completed):",
              "", "```sh", "export GLUE_DIR=../shared/data/glue"]
    lines += [command.replace(" &", f" --tasks={tasks} &") for command in chosen.commands] if chosen.commands else [
        f"python -m tf_transfer.experiments run transfer_learning --tasks={tasks} --data_dir=$GLUE_DIR"]
    lines += ["```", ""]
    return lines


def _better_rate(by_cell, task, k):
    """The rate with the better mean test score (the paper's metric), as the paper compares the two approaches
    "only ... under the better of the two learning rates"; None without completed runs."""
    means = [(reports.mean_std([paper_score(s) for s in _done(by_cell, task, k, lr)])[0], lr) for lr in RATES]
    means = [(m, lr) for m, lr in means if m is not None]
    return max(means, key=lambda pair: pair[0])[1] if means else None


def _mean(values):
    return reports.mean_std(values)[0]


def _reached(summary, budget, clock, test_metric):
    """Test score (`test_metric`) of the epoch a user would keep within `budget` seconds: the best validation
    score so far on the metric the run stopped on; None when its first epoch took longer."""
    within = [e for e in summary["epochs"] if (reports.elapsed(summary, e, clock) or float("inf")) <= budget]
    if not within:
        return None
    best = max(within, key=lambda e: e["val"].get(summary["metric"])
               if e["val"].get(summary["metric"]) is not None else float("-inf"))
    return reports.test_score(best, test_metric)


def _claims(tasks, by_cell, clock, collected) -> list:
    """The paper's headline claims beside ours, with a verdict and its basis, generated from the runs."""
    small = [t for t in tasks if t not in LARGE]
    large = [t for t in tasks if t in LARGE]
    cola_standing = any(r["stand_in"] and r["settings"]["task"] == "cola" for r in collected)
    cola_note = ("; CoLA: accuracy at the epoch MCC chose (stand-ins stopped on MCC, rerun pending)"
                 if cola_standing and "cola" in small else "")
    differs = ("setting differs: MiniLM-L6, last k of 6 blocks (the paper: of 12); batch 32, ≤ 10 epochs (the "
               "paper: 1, ≤ 30); tasks " + ", ".join(tasks))
    rows = []
    for k in (1, 2, 3, 4):
        per_task, cached, alone, censored = [], [], [], []
        for task in small:
            lr_k, lr_f = _better_rate(by_cell, task, k), _better_rate(by_cell, task, "all")
            setting, full = _done(by_cell, task, k, lr_k), _done(by_cell, task, "all", lr_f)
            if not setting or not full:
                continue
            t_full = [reports.time_to_stop(s, clock) for s in full]
            t_set = [reports.time_to_stop(s, clock) for s in setting]
            if not _mean(t_full) or _mean(t_set) is None:
                continue
            saved = 100 * (1 - _mean(t_set) / _mean(t_full))
            cached.append(saved)
            text = f"{task} " + _saved(_mean(t_set), _mean(t_full), any(map(reports.censored, setting)),
                                       any(map(reports.censored, full)))
            censored += [task] if any(map(reports.censored, setting + full)) else []
            text += f" ({reports.p_text(reports.welch_p(t_set, t_full))})"
            t_alone = [reports.time_to_stop(s, clock) for s in _done(by_cell, task, k, lr_k, "uncached")]
            if _mean(t_alone) is not None:
                alone.append(100 * (1 - _mean(t_alone) / _mean(t_full)))
                text += f", alone {alone[-1]:.0f}% ({reports.p_text(reports.welch_p(t_alone, t_full))})"
            per_task.append(text)
        claim = f"small training sets: last {k} trained saves time to the stopping point vs fine-tuning"
        paper = f"{PAPER_SMALL_TIME_SAVED[k]:.0f}% (abstract: 30–50%)"
        if not cached:
            rows.append([claim, paper, "not run", "inconclusive", "no completed runs of these settings"])
            continue
        judged = alone or cached
        ours = (f"{_mean(cached):.0f}% with the frozen-prefix cache; freezing alone: "
                + (f"{_mean(alone):.0f}% ({len(alone)} tasks)" if alone else "not yet run"))
        rows.append([claim, paper, ours, "reproduced" if _mean(judged) >= 30 else "not reproduced",
                     f"verdict on {'freezing alone' if alone else 'freezing + cache'} (≥ 30%: reproduced); better "
                     f"rate per task by mean test score, as the paper; 2 seeds per side; per task (Welch on times): "
                     + "; ".join(per_task)
                     + (f"; ≥/≤: censored runs bound {', '.join(censored)}" if censored else "")
                     + "; " + differs + ("; the cache (the paper had none) runs the frozen blocks once" if not alone
                                         else "")])
    for k in (1, 2, 3, 4):
        per_task, deductions, significant = [], [], 0
        for task in small:
            lr_k, lr_f = _better_rate(by_cell, task, k), _better_rate(by_cell, task, "all")
            setting, full = _done(by_cell, task, k, lr_k), _done(by_cell, task, "all", lr_f)
            if not setting or not full:
                continue
            s_set, s_full = [paper_score(s) for s in setting], [paper_score(s) for s in full]
            if _mean(s_set) is None or _mean(s_full) is None:
                continue
            deduction = 100 * (_mean(s_full) - _mean(s_set))
            deductions.append(deduction)
            p = reports.welch_p(s_set, s_full)
            significant += p < 0.05
            per_task.append(f"{task} {-deduction:+.1f} ({reports.p_text(p)})")
        claim = f"small training sets: last {k} trained scores close to fine-tuning"
        paper = f"-{PAPER_SMALL_DEDUCTION[k]:.2f} points (\"% less\", read as points)"
        if not deductions:
            rows.append([claim, paper, "not run", "inconclusive", "no completed runs of these settings"])
            continue
        ours = f"{-_mean(deductions):+.2f} points (mean of {len(deductions)} tasks)"
        verdict = "reproduced" if _mean(deductions) <= PAPER_SMALL_DEDUCTION[k] + 2 else "not reproduced"
        rows.append([claim, paper, ours, verdict,
                     "reproduced if at most 2 points below the paper's; better rate per task by mean test score; "
                     "2 seeds per side; per task, points (Welch on scores): " + "; ".join(per_task)
                     + f"; {significant} of {len(deductions)} differences with p < 0.05" + cola_note + "; " + differs])
    rows.append(_budget_claim(small, by_cell, clock, differs + cola_note))
    if large:
        rows.append(["large training sets: last 4 beats fine-tuning within the same time",
                     "MNLI +0.66/+0.39/+0.19 at 50k/100k/150k s; QQP +0.29/+0.2/+0.04", "see the tables below",
                     "inconclusive", "large tasks present but not summarised here: read their budget tables"])
    else:
        rows.append(["large training sets: last 4 beats fine-tuning within the same time",
                     "MNLI +0.66/+0.39/+0.19 at 50k/100k/150k s; QQP +0.29/+0.2/+0.04", "not run", "inconclusive",
                     "no large task here: QQP, MNLI and QNLI's training data are not on this machine, SST-2 is too "
                     "large for the CPU budget"])
    rows += _rate_claims(small + large, by_cell, differs + cola_note)
    return ["## The paper's claims, checked", "",
            "Generated from the runs below (rerunning the report keeps it current). Verdicts apply each claim's "
            "test, stated in its basis, to our means over seeds; the basis gives the per-task values with Welch's "
            "test (p) of the two sides' seeds, so a verdict resting on differences within seed noise shows as such. "
            "Scores are the paper's metrics (CoLA: accuracy).", "",
            reports.claims_table(rows), ""]


def _budget_claim(small, by_cell, clock, note) -> list:
    """Small training sets: within fine-tuning's time (25/50/100% of it), fine-tuning scores above every transfer
    setting (Wang, Figures 5-6)."""
    ahead, total, behind = 0, 0, defaultdict(list)
    for task in small:
        lr_f = _better_rate(by_cell, task, "all")
        full = _done(by_cell, task, "all", lr_f)
        base = _mean([reports.time_to_stop(s, clock) for s in full])
        if not full or not base:
            continue
        metric = paper_metric(task)
        for fraction in BUDGET_FRACTIONS:
            full_score = _mean([_reached(s, base * fraction, clock, metric) for s in full])
            for k in (1, 2, 3, 4):
                setting = _done(by_cell, task, k, _better_rate(by_cell, task, k))
                score = _mean([_reached(s, base * fraction, clock, metric) for s in setting])
                if score is None and full_score is None:
                    continue
                total += 1
                if full_score is not None and (score is None or full_score >= score):
                    ahead += 1
                else:
                    behind[int(fraction * 100)].append(f"{task} last {k}")
    claim = "small training sets: within the same time, fine-tuning scores above every transfer setting"
    paper = "always (Figures 5–6)"
    if not total:
        return [claim, paper, "not run", "inconclusive", "no completed runs of these settings"]
    where = "; ".join(f"at {budget}%: {len(names)} ({', '.join(names) if budget == 100 else 'e.g. ' + names[0]})"
                      for budget, names in sorted(behind.items()))
    return [claim, paper, f"fine-tuning ahead in {ahead} of {total} comparisons",
            "reproduced" if ahead == total else "not reproduced",
            "reproduced if ahead in every (task, budget, setting): budgets 25/50/100% of fine-tuning's mean time to "
            "its stopping point, the epoch with the best validation score so far, means of 2 seeds (no test), better "
            "rate per task by mean test score; behind " + (where or "nowhere") + "; " + note]


def _rate_claims(tasks, by_cell, note) -> list:
    """Section 4: fine-tuning at 1e-3 scores 64% lower than at 2e-5; transfer learning at 2e-5 about 34% lower
    than at 1e-3 (relative changes of the mean score, averaged over tasks)."""
    rows = []
    for claim, paper, ks, high, low in (
            ("fine-tuning at 1e-3 scores lower than at 2e-5", "-64% (average score)", ["all"], 2e-5, 1e-3),
            ("transfer learning at 2e-5 scores lower than at 1e-3", "about -34% (average score)", [1, 2, 3, 4],
             1e-3, 2e-5)):
        changes, per_task = [], []
        for task in tasks:
            better = [paper_score(s) for k in ks for s in _done(by_cell, task, k, high)]
            other = [paper_score(s) for k in ks for s in _done(by_cell, task, k, low)]
            if _mean(other) is None or not _mean(better):
                continue
            changes.append(100 * (_mean(other) - _mean(better)) / _mean(better))
            per_task.append(f"{task} {changes[-1]:+.0f}% ({reports.p_text(reports.welch_p(other, better))})")
        if not changes:
            rows.append([claim, paper, "not run", "inconclusive", "no completed runs at both rates"])
            continue
        rows.append([claim, paper, f"{_mean(changes):+.0f}% (mean of {len(changes)} tasks)",
                     "reproduced" if _mean(changes) < 0 else "not reproduced",
                     "reproduced if lower on average (the size is the paper's, not tested); relative change of the "
                     f"mean score over {'the settings’ runs (last 1–4 pooled)' if len(ks) > 1 else 'seeds'}; per "
                     "task (Welch): " + "; ".join(per_task) + "; " + note])
    return rows


def _cache_effect(tasks, by_cell, clock) -> list:
    """Time saved by freezing alone (the uncached arm) and by freezing plus the frozen-prefix cache, side by side."""
    present = [t for t in UNCACHED_TASKS if t in tasks]
    if not present or not any(part == "uncached" for (_, _, _, part) in by_cell):
        return []
    rows = []
    for task in present:
        full = _done(by_cell, task, *FINE_TUNING)
        base = _mean([reports.time_to_stop(s, clock) for s in full])
        base_censored = any(map(reports.censored, full))
        for lr in RATES:
            for k in (1, 2, 3, 4):
                row = [task, label(k, lr)]
                for part in ("main", "uncached"):
                    done = _done(by_cell, task, k, lr, part)
                    if not done:
                        row += ["not yet run", "not yet run"]
                        continue
                    mean_time = _mean([reports.time_to_stop(s, clock) for s in done])
                    row += [_saved(mean_time, base, any(map(reports.censored, done)), base_censored)
                            + reports.censored_mark(done),
                            reports.cell([reports.test_score(reports.best_epoch(s), s["metric"]) for s in done],
                                         len(by_cell.get((task, k, lr, part), [])))]
                rows.append(row)
    return ["## Freezing alone vs freezing plus the cache", "",
            "Time saved against fine-tune @ 2e-5 (time to the stopping point) and test score at the best epoch, for "
            "the transfer runs with the frozen-prefix cache (`--cache_frozen`: the frozen blocks run once, in "
            "inference mode, and the cache's build is charged to every run that uses it) and without it (freezing "
            "alone, as the paper: the frozen blocks run forward in every step, dropout on). `not yet run`: the "
            "uncached arm has no completed run of that setting (see *Still to run*).", "",
            reports.markdown_table(["task", "setting", "time saved: freezing + cache", "score: freezing + cache",
                                    "time saved: freezing alone", "score: freezing alone"], rows), ""]


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
                          + reports.censored_mark(_done(by_cell, task, k, lr, part)) for k, lr, part in columns]
    return [f"Per epoch: test {metric} (cumulative seconds), mean over seeds; – after a run stopped (a censored "
            "run, †, stopped at the cap).", "",
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

def earlier_protocol(settings: dict):
    """CoLA runs stopped on Matthews correlation before the grid scored CoLA on accuracy (Wang's metric): the
    completed run of the same settings under the earlier protocol stands in until this one has run."""
    if settings["task"] == "cola" and settings.get("metric") == "accuracy":
        return ({**settings, "metric": None},
                "stopped early and scored on Matthews correlation, before CoLA was stopped on accuracy")
    return None


STUDY = Study(
    name="transfer_learning",
    paper='Wang, "A New Computationally Efficient Method to Tune BERT Networks – Transfer Learning"',
    flagfile="flags/wang_common.flags",
    axes={"task": TASKS, "trainable_layers": SETTINGS, "lr": RATES, "seed": SEEDS},
    task_flagfiles={"cola": "flags/wang_cola.flags"},
    stand_in=earlier_protocol,
    variants={
        "paper": Variant(),
        "cpu": Variant(
            settings={"preset": "all_minilm_l6_v2_en", "batch_size": 32, "max_epochs": 10, "cache_frozen": "auto",
                      "precision": "mixed_bfloat16"},
            axes={"task": ["rte", "mrpc", "stsb", "cola"], "trainable_layers": SETTINGS, "lr": RATES,
                  "seed": SEEDS},
            parts={"main": {},
                   "batch1": {"task": ["rte"], "trainable_layers": [2], "seed": [0], "batch_size": [1]},
                   # Freezing alone: the transfer settings without the frozen-prefix cache, to tell its saving apart.
                   "uncached": {"task": UNCACHED_TASKS, "trainable_layers": [1, 2, 3, 4], "cache_frozen": [False]}},
            differences=CPU_DIFFERENCES,
            clock="cpu",
            commands=pinned_commands("transfer_learning"),
        ),
    },
    report=report,
)
