"""The sweep's report: every candidate's status (run, pruned at an epoch, cut by the budget, not reached), score,
time per epoch, peak memory and trainable parameters; the Pareto figure of score against time per epoch; and the
recommendation line (`tf_transfer.studies.sweep.recommend`).

Scores are validation scores at each run's best epoch (what the sweep chose by; a test file's score is shown beside
where there is one). Times are this machine's: compare them within one sweep.

Example:

>>> from tf_transfer.reporting import sweep_report
>>> rows, line = sweep_report.write_report(study, "runs/sweep/mrpc", "runs/sweep/mrpc")  # doctest: +SKIP
"""

from __future__ import annotations

import os
import statistics
import time
from collections import defaultdict

from tf_transfer.reporting import tables
from tf_transfer.studies import sweep
from tf_transfer.training import record

COLUMNS = ("candidate", "method", "trainable_layers", "lora_rank", "lr", "status", "seeds", "val", "val_sd", "test",
           "epochs", "epoch_time_s", "peak_memory_mb", "trainable_params")


def _runs(study, sweep_dir: str) -> dict:
    """`{candidate: [(trial state, seed, summary)]}` of every trial that ran (the latest per seed)."""
    latest, queued = {}, set()
    for trial in study.get_trials(deepcopy=False):
        if trial.state.name in ("WAITING", "RUNNING"):
            if "retry_of" in trial.user_attrs:  # its process died: queued again, so not a failure
                queued.add(trial.user_attrs["retry_of"])
            continue
        if "candidate" in trial.params:
            latest[(trial.params["candidate"], trial.params["seed"])] = trial
    runs = defaultdict(list)
    for (name, seed), trial in sorted(latest.items()):
        if trial.number in queued:
            continue
        summary = record.read_summary(sweep.run_folder(sweep_dir, name, seed))
        runs[name].append((trial.state.name, seed, summary))
    return runs


def _row(name: str, settings: dict, runs: list, metric: str) -> dict:
    done = [s for state, _, s in runs if state == "COMPLETE" and s]
    first = next((s for state, seed, s in runs if seed == 0 and s), None)
    state0 = next((state for state, seed, _ in runs if seed == 0), None)
    status = {"COMPLETE": "ran", "PRUNED": "pruned", "FAIL": "failed", None: "not reached"}[state0]
    if first and status == "pruned":
        status = f"pruned after epoch {len(first['epochs'])}"
    elif first and any(e.get("sweep") == "budget" for e in first["epochs"]):
        status = f"cut by the budget after epoch {len(first['epochs'])}"
    vals = [tables.best_epoch(s)["val"][metric] for s in done]
    early = tables.best_epoch(first)["val"][metric] if first and not done and first["epochs"] else None
    tests = [tables.test_score(tables.best_epoch(s), metric) for s in done if tables.best_epoch(s).get("test")]
    times = [e["epoch_time_s"] for _, _, s in runs if s for e in s["epochs"]]
    peaks = [s.get("peak_memory_mb") for _, _, s in runs if s and s.get("peak_memory_mb")]
    return {"candidate": name, "method": settings.get("method", "freeze"),
            "trainable_layers": settings["trainable_layers"], "lora_rank": settings.get("lora_rank"),
            "lr": settings["lr"], "status": status, "seeds": len(done),
            "val": statistics.fmean(vals) if vals else None, "_vals": vals, "val_before_stop": early,
            "val_sd": statistics.stdev(vals) if len(vals) > 1 else None,
            "test": statistics.fmean(tests) if tests else None,
            "epochs": len(first["epochs"]) if first else 0,
            "epoch_time_s": statistics.fmean(times) if times else None,
            "peak_memory_mb": max(peaks) if peaks else None,
            "trainable_params": first.get("trainable_params") if first else None,
            "cache_build_s": first.get("cache_build_s") if first else None}


def recommendation(rows: list, metric: str, lower_is_better: bool = False):
    """`(recommend's result or None, one line)` over the candidates that ran to their end (pruned ones excluded:
    their score is an early epoch's)."""
    scores, times = {}, {}
    for row in rows:
        if row["seeds"]:
            scores[row["candidate"]] = row["_vals"]
            times[row["candidate"]] = row["epoch_time_s"]
    chosen = sweep.recommend(scores, times, lower_is_better)
    if chosen is None:
        return None, "No candidate ran to its end within the budget: nothing to recommend (give a larger --budget)."
    noise = ("seed noise not measured (no candidate ran at several seeds): the best score" if chosen["noise"] is None
             else f"within the seed noise ({chosen['noise']:.3f}, pooled sd) of the best, {chosen['best']} at "
                  f"{chosen['best_mean']:.3f}")
    status = next(r["status"] for r in rows if r["candidate"] == chosen["candidate"])
    cut = f" ({status}: its score so far)" if status.startswith("cut") else ""
    built = next(r["cache_build_s"] for r in rows if r["candidate"] == chosen["candidate"])
    # Time per epoch leaves out what a cached candidate pays once before its first epoch.
    cache = f", after {built:.0f} s building the frozen-prefix cache once" if built else ""
    line = (f"Recommended: {chosen['candidate']}: validation {metric} {chosen['mean']:.3f}{cut}, {noise}; "
            f"{chosen['epoch_time_s']:.1f} s per epoch here{cache}.")
    return chosen, line


def write_report(study, sweep_dir: str, out: str) -> tuple:
    """Writes README.md, candidates.csv and pareto.png to `out`; returns `(rows, recommendation line)`."""
    base, found = study.user_attrs["base"], study.user_attrs["candidates"]
    runs = _runs(study, sweep_dir)
    metric = next((s["metric"] for rs in runs.values() for _, _, s in rs if s), "accuracy")
    rows = [_row(name, settings, runs.get(name, []), metric) for name, settings in found.items()]
    lower = study.direction.name == "MINIMIZE"
    chosen, line = recommendation(rows, metric, lower)
    os.makedirs(out, exist_ok=True)
    tables.write_csv(os.path.join(out, "candidates.csv"), COLUMNS, [[r[c] for c in COLUMNS] for r in rows])
    _figure(os.path.join(out, "pareto.png"), rows, metric, chosen)
    spent = sweep.spent_s(study)
    header = ["candidate", "status", "seeds", f"val {metric}", "test", "epochs (seed 0)", "s per epoch",
              "peak memory (MB)", "trainable params"]
    cells = [[r["candidate"], r["status"], str(r["seeds"]),
              tables.cell(r["_vals"], max(r["seeds"], 1)) if r["seeds"] else
              "-" if r["val_before_stop"] is None else f"({r['val_before_stop']:.3f} when pruned)",
              "-" if r["test"] is None else f"{r['test']:.3f}", str(r["epochs"]),
              "-" if r["epoch_time_s"] is None else f"{r['epoch_time_s']:.1f}",
              "-" if r["peak_memory_mb"] is None else f"{r['peak_memory_mb']:.0f}",
              "-" if r["trainable_params"] is None else f"{r['trainable_params']:,}"] for r in rows]
    data = base.get("task") or os.path.basename(base.get("train_file") or "")
    # Where the runs ran (their summaries say), not where this report is written.
    hosts = sorted({f"{s['machine']['cpu']}, {s['machine']['cores']} core(s)" for rs in runs.values()
                    for _, _, s in rs if s and s.get("machine")})
    lines = [f"# Sweep: what to train on {data} ({base.get('preset')})", "", line, "",
             f"Made by `{study.user_attrs.get('command', 'python -m tf_transfer.experiments sweep')}`; runs on "
             f"{'; '.join(hosts) or 'no machine recorded'} (report written {time.strftime('%Y-%m-%d %H:%M')}).",
             "",
             f"Budget {study.user_attrs['budget_s'] / 60:.1f} min of training wall time, {spent / 60:.1f} min "
             f"spent; {len(found)} candidates, successive halving at epochs 1, 3, 9 (the best third goes on), then "
             f"the best candidates at more seeds (`seed_round`: {study.user_attrs.get('seed_round') or 'not reached'})."
             " Scores are validation scores at each run's best epoch; mean ± sd over the seeds that ran to their end.",
             "", tables.markdown_table(header, cells), "", "![score against time per epoch](pareto.png)", ""]
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return rows, line


def _figure(path: str, rows: list, metric: str, chosen) -> None:
    plt = tables.pyplot()
    figure, axis = plt.subplots(figsize=(6.4, 4.4))
    colors = {"freeze": "tab:blue", "lora": "tab:orange", "bitfit": "tab:green"}
    for row in rows:
        pruned = row["seeds"] == 0
        y = row["val_before_stop"] if pruned else row["val"]  # a pruned run: its best score before it stopped
        if y is None or row["epoch_time_s"] is None:
            continue
        axis.scatter(row["epoch_time_s"], y, facecolors="none" if pruned else colors[row["method"]],
                     edgecolors=colors[row["method"]], s=36)
        axis.annotate(row["candidate"], (row["epoch_time_s"], y), textcoords="offset points", xytext=(4, 3),
                      fontsize=6)
    frontier = _pareto([r for r in rows if r["seeds"] and r["epoch_time_s"] is not None])
    if frontier:
        axis.plot([r["epoch_time_s"] for r in frontier], [r["val"] for r in frontier], color="grey", lw=1,
                  label="Pareto front")
    if chosen:
        pick = next(r for r in rows if r["candidate"] == chosen["candidate"])
        axis.scatter(pick["epoch_time_s"], pick["val"], marker="*", s=160, color="black", label="recommended")
    for method, color in colors.items():
        axis.scatter([], [], color=color, label=method)
    axis.set_xlabel("seconds per epoch (this machine)")
    axis.set_ylabel(f"validation {metric}")
    axis.set_title("score against time per epoch (hollow: pruned, at its best before it stopped)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _pareto(rows: list) -> list:
    """The candidates no other beats on both time per epoch and score, by time."""
    front, best = [], float("-inf")
    for row in sorted(rows, key=lambda r: (r["epoch_time_s"], -r["val"])):
        if row["val"] > best:
            front.append(row)
            best = row["val"]
    return front
