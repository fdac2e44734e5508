"""The freezing grid's report: per setting (trainable blocks, learning rate) the score, the time to the best epoch,
the time saved against full fine-tuning, the peak memory and the trainable parameters, over seeds; a figure of
score against training time; every run as CSV.

Scores are at each run's best epoch on validation (its early-stopping choice): the test file's where the data set
has one, else validation's. Times are wall seconds of training up to that epoch, the frozen-prefix cache's build
charged (`reporting.tables.elapsed`). The reference is full fine-tuning at the learning rate with the best mean
validation score (chosen by validation, as a user would choose it). Compare times only within one machine: the
report lists the machines its runs ran on.

Example:

>>> write_report(collected, "reports/freezing_reviews", GRID, "paper")  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections import defaultdict

from tf_transfer.reporting import tables


def _run_facts(entry: dict) -> dict:
    summary = entry["summary"]
    best = tables.best_epoch(summary) or summary["epochs"][-1]
    metric = summary["metric"]
    test = tables.test_score(best, metric) if best.get("test") else None
    return {"k": summary["trainable_layers"], "lr": summary["lr"], "seed": summary["seed"], "metric": metric,
            "val": (best.get("val") or {}).get(metric), "test": test, "best_epoch": best["epoch"],
            "epochs": len(summary["epochs"]), "time_to_best_s": tables.elapsed(summary, best),
            "peak_memory_mb": summary.get("peak_memory_mb"), "trainable_params": summary.get("trainable_params"),
            # Whether the best validation score beats the best constant prediction (None: a run from before it was
            # recorded, or without validation).
            "beats_constant": (summary.get("constant_prediction") or {}).get("beaten"),
            "folder": entry["folder"]}


def _order(k) -> tuple:
    return (1, 0) if k == "all" else (0, int(k))


def _settings(runs: list) -> dict:
    grouped = defaultdict(list)
    for run in runs:
        grouped[(run["k"], run["lr"])].append(run)
    return dict(sorted(grouped.items(), key=lambda item: (_order(item[0][0]), item[0][1])))


def _reference(settings: dict):
    """Full fine-tuning's runs at the rate with the best mean validation score (None without such runs)."""
    full = [runs for (k, _), runs in settings.items() if k == "all"]
    if not full:
        return None
    return max(full, key=lambda runs: tables.mean_std([r["val"] for r in runs])[0] or float("-inf"))


def _row(k, lr, runs: list, expected: int, reference, score_key: str) -> list:
    time = tables.mean_std([r["time_to_best_s"] for r in runs])[0]
    score = tables.mean_std([r[score_key] for r in runs])[0]
    saved = diff = "-"
    if reference is not None and time is not None:
        ref_time = tables.mean_std([r["time_to_best_s"] for r in reference])[0]
        ref_score = tables.mean_std([r[score_key] for r in reference])[0]
        saved = f"{round(100 * (ref_time - time) / ref_time, 1) + 0.0:.1f}%" if ref_time else "-"
        diff = "-" if score is None or ref_score is None else f"{round(score - ref_score, 3) + 0.0:+.3f}"
    label = "all (full fine-tuning)" if k == "all" else f"last {k}" if k else "0 (head and pooler)"
    params = runs[0]["trainable_params"]
    validation = [tables.cell([r["val"] for r in runs], expected)] if score_key == "test" else []
    return [label, f"{lr:g}", tables.cell([r[score_key] for r in runs], expected), *validation,
            tables.cell([r["best_epoch"] for r in runs], expected, 1),
            tables.cell([r["time_to_best_s"] for r in runs], expected, 1), saved, diff,
            tables.cell([r["peak_memory_mb"] for r in runs], expected, 0),
            "-" if params is None else f"{params:,}", _beats_constant(runs)]


def _beats_constant(runs: list) -> str:
    """How many of a setting's runs beat the constant prediction on validation, e.g. `2/3`; `-` where unknown."""
    known = [r["beats_constant"] for r in runs if r["beats_constant"] is not None]
    return f"{sum(known)}/{len(known)}" if known else "-"


def _not_beaten(runs: list) -> list:
    """A line naming the runs whose best validation score does not beat the constant prediction (none: no line)."""
    failed = [r for r in runs if r["beats_constant"] is False]
    if not failed:
        return []
    named = ", ".join(f"k={r['k']} lr {r['lr']:g} seed {r['seed']}" for r in failed)
    return [f"**{len(failed)} of {len(runs)} runs do not beat the constant prediction** on validation ({named}): "
            "they learnt nothing a constant does not, so their scores answer nothing; more examples, epochs or "
            "another learning rate may.", ""]


def _figure(path: str, settings: dict, score_key: str, metric: str) -> None:
    plt = tables.pyplot()
    figure, axis = plt.subplots(figsize=(6.4, 4.4))
    for (k, lr), runs in settings.items():
        time, time_sd = tables.mean_std([r["time_to_best_s"] for r in runs])
        score, score_sd = tables.mean_std([r[score_key] for r in runs])
        if time is None or score is None:
            continue
        axis.errorbar(time, score, xerr=time_sd if time_sd == time_sd else None,
                      yerr=score_sd if score_sd == score_sd else None, fmt="o", capsize=3,
                      color="tab:red" if k == "all" else "tab:blue")
        axis.annotate(f"k={k}" + (f", lr {lr:g}" if len({l for _, l in settings}) > 1 else ""), (time, score),
                      textcoords="offset points", xytext=(5, 4), fontsize=8)
    axis.set_xlabel("time to the best epoch (s, wall, cache build included)")
    axis.set_ylabel(f"{'test' if score_key == 'test' else 'validation'} {metric}")
    axis.set_title("score against training time per setting (mean ± sd over seeds)")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_report(collected: list, out: str, grid, variant: str) -> str:
    """Writes README.md, runs.csv and score_vs_time.png to `out`; returns README.md's path."""
    runs = [_run_facts(entry) for entry in collected if entry["summary"]]
    settings = _settings(runs)
    expected = len({entry["settings"]["seed"] for entry in collected})
    score_key = "test" if all(r["test"] is not None for r in runs) else "val"
    reference = _reference(settings)
    os.makedirs(out, exist_ok=True)
    metric = runs[0]["metric"]
    header = ["trainable", "lr", f"{score_key} {metric}", *([f"val {metric}"] if score_key == "test" else []),
              "best epoch",
              "time to best (s)", "time saved", "score diff", "peak memory (MB)", "trainable params",
              "beats constant"]
    rows = [_row(k, lr, group, expected, reference, score_key) for (k, lr), group in settings.items()]
    _figure(os.path.join(out, "score_vs_time.png"), settings, score_key, runs[0]["metric"])
    columns = list(runs[0])
    tables.write_csv(os.path.join(out, "runs.csv"), columns, [[r[c] for c in columns] for r in runs])
    summary = collected[0]["summary"] or next(c["summary"] for c in collected if c["summary"])
    lines = _text(summary, grid, variant, len(runs), len(collected), score_key)
    lines += [tables.markdown_table(header, rows), "", *_not_beaten(runs), "![score against time](score_vs_time.png)",
              ""]
    lines += tables.machines_section(collected)
    path = os.path.join(out, "README.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _text(summary: dict, grid, variant: str, done: int, total: int, score_key: str) -> list:
    data = summary.get("dataset") or {"name": summary["task"]}
    files = ", ".join(f"{flag} `{os.path.basename(f['path'])}` (SHA-256 {f['sha256'][:12]})"
                      for flag, f in (data.get("files") or {}).items()) or f"`{summary['task']}`"
    config = summary["config"]
    return [
        f"# How much of {summary['preset']} to train on {data['name']}",
        "",
        f"Data: {files}; labels {summary.get('labels')}; metric `{summary['metric']}` (the early-stopping metric; "
        f"scores are {'the test file' if score_key == 'test' else 'validation'}'s at each run's best epoch on "
        "validation).",
        _data_sentence(summary, config),
        f"Every run: batch {config['batch_size']}, up to {config['max_epochs']} epochs, patience {config['patience']}, "
        f"{config['max_seq_length']} tokens, {config['precision']}, frozen prefix cached: {config['cache_frozen']}. "
        f"{done} of {total} runs completed (`python -m tf_transfer.experiments run {grid.name}` with the same flags "
        "resumes the rest).",
        "",
        "`time saved` and `score diff` are against full fine-tuning at its rate with the best mean validation score; "
        "times are wall seconds to the best epoch, the cache's build charged; `peak memory` is the process's peak "
        "resident set while training (docs/outputs.md); `beats constant` counts the runs whose best validation score "
        "beats the best constant prediction. Mean ± sample standard deviation over seeds.",
        "",
    ]


def _data_sentence(summary: dict, config: dict) -> str:
    """What the runs trained and stopped on: the training examples (and the cap that made them so) and where the
    validation split came from, so that a report on a sample never reads as one on the whole file."""
    examples = summary.get("examples") or {}
    cap = config.get("max_train_examples")
    validation = (f"`{os.path.basename(config['validation_file'])}`" if config.get("validation_file") else
                  f"{100 * config['validation_fraction']:g}% of the training file held out (seeded)"
                  if config.get("validation_fraction") else "none (nothing held out)")
    return (f"Trained on {examples.get('train', '?'):,} examples"
            + (f" (capped by --max_train_examples={cap:,})" if cap else " (the whole training split)")
            + f"; validation: {validation}, {examples.get('validation', '?'):,} examples.")

