"""The sweep's report: every candidate's status (run, pruned at an epoch, cut by the budget, not reached), score,
time per epoch, peak memory and trainable parameters; the Pareto figure of score against time per epoch; and the
recommendation line (`tf_transfer.studies.sweep.sweep_search.recommend`); `judge_runs` applies the same rule to any
study's runs of one data set.

Scores are validation scores at each run's best epoch (what the sweep chose by; a test file's score is shown beside
where there is one). Times are this machine's: compare them within one sweep.

Example:

>>> from tf_transfer.reporting import sweep_report
>>> rows, line, use = sweep_report.write_report(study, "runs/sweep/mrpc", "runs/sweep/mrpc")  # doctest: +SKIP
"""

from __future__ import annotations

import os
import shlex
import statistics
import time
from collections import defaultdict
from typing import Optional

from tf_transfer.core import metrics
from tf_transfer.core import settings as settings_lib
from tf_transfer.core.errors import TransferError
from tf_transfer.models import freezing, methods
from tf_transfer.reporting import tables
from tf_transfer.studies.sweep import sweep_search as sweep, sweep_seed_round
from tf_transfer.training import record, run_record


# The sweep's fixed settings (every candidate's run), by absolute path: a command that names them works anywhere.
SWEEP_FLAGS = os.path.join(settings_lib.REPO, "flags", "sweep.flags")


def columns() -> tuple:
    """candidates.csv's columns: the methods' own (LoRA's rank) follow the depth."""
    return ("candidate", "method", "trainable_layers", *methods.registry.sweep_columns(), "lr", "status", "seeds",
            "val", "val_sd", "test", "epochs", "epoch_time_s", "cost_s", "vs_best", "peak_memory_mb",
            "trainable_params")


def _runs(study, sweep_dir: str) -> dict:
    """`{candidate: [(trial state, seed, run record)]}` of every trial that ran (the latest per seed): the record the
    trial keeps in the storage (`sweep_storage.run_record`), so that every machine's report is the same; a trial of
    a sweep from before records were kept is read from its run folder under `sweep_dir`."""
    latest, queued, legacy = {}, set(), "identity" not in study.user_attrs
    for trial in study.get_trials(deepcopy=False):
        if trial.state.name in ("WAITING", "RUNNING"):  # its process died: queued again, so not a failure
            queued.update(trial.system_attrs.get("retry_history") or [])
            if "retry_of" in trial.user_attrs:
                queued.add(trial.user_attrs["retry_of"])
            continue
        if "candidate" in trial.params and not trial.user_attrs.get("reference"):  # a measurement, not a run
            latest[(trial.params["candidate"], trial.params["seed"])] = trial
    runs = defaultdict(list)
    for (name, seed), trial in sorted(latest.items()):
        if trial.number in queued:
            continue
        summary = trial.user_attrs.get("run") if not legacy or "run" in trial.user_attrs else run_record.read_summary(
            sweep.run_folder(sweep_dir, name, seed))
        runs[name].append((trial.state.name, seed, summary))
    return runs


def _row(name: str, settings: dict, runs: list, metric: str, judged: Optional[dict]) -> dict:
    """A candidate's row; `judged` is `sweep.recommend`'s entry for it (None: it never ran)."""
    ended = [s for state, _, s in runs if s and _rule_run(name, state, s).cut is None]
    first = next((s for state, seed, s in runs if seed == 0 and s), None)
    state0 = next((state for state, seed, _ in runs if seed == 0), None)
    status = {"COMPLETE": "ran", "PRUNED": "pruned", "FAIL": "failed", None: "not reached"}[state0]
    cut = _rule_run(name, state0, first).cut if first else None
    if first and cut == "reference":
        status = f"the reference: stopped after epoch {len(first['epochs'])}, where it set the first rung"
    elif first and status == "pruned":
        status = f"pruned after epoch {first.get('pruned_at') or len(first['epochs'])}"
    elif first and cut == "budget":
        status = f"cut by the budget after epoch {len(first['epochs'])}"
    vals = [tables.best_epoch(s)["val"][metric] for s in ended]
    early = tables.best_epoch(first)["val"][metric] if first and not ended and first["epochs"] else None
    tests = [tables.test_score(tables.best_epoch(s), metric) for s in ended if tables.best_epoch(s).get("test")]
    times = [e["epoch_time_s"] for _, _, s in runs if s for e in s["epochs"]]
    peaks = [s.get("peak_memory_mb") for _, _, s in runs if s and s.get("peak_memory_mb")]
    vs_best = (judged or {}).get("vs_best")
    return {"candidate": name, "method": methods.name_of(settings), "trainable_layers": settings["trainable_layers"],
            **{column: settings.get(column) for column in methods.registry.sweep_columns()}, "lr": settings["lr"],
            "status": status, "seeds": len(ended),
            "val": statistics.fmean(vals) if vals else None, "_vals": vals, "val_before_stop": early,
            "val_sd": statistics.stdev(vals) if len(vals) > 1 else None,
            "test": statistics.fmean(tests) if tests else None,
            "epochs": len(first["epochs"]) if first else 0,
            "epoch_time_s": statistics.fmean(times) if times else None,
            "cost_s": (judged or {}).get("cost_s"),
            "vs_best": None if vs_best is None else vs_best.text(scale=100),
            "peak_memory_mb": max(peaks) if peaks else None,
            "trainable_params": first.get("trainable_params") if first else None,
            "cache_build_s": first.get("cache_build_s") if first else None}


def _rule_run(name: str, state: Optional[str], summary: dict):
    return sweep.run_of(name, summary, {"PRUNED": "pruned", "FAIL": "unfinished"}.get(state))


def rule_runs(runs: dict) -> list:
    """The recommendation's rows (`sweep.Run`) of `_runs`' trials: a pruned trial's run is cut by the pruner, a
    failed one's is unfinished."""
    return [_rule_run(name, state, summary) for name, trials in runs.items() for state, _, summary in trials
            if summary]


def constants(study, seeds) -> dict:
    """`{seed: the constant prediction's validation score}` of the sweep's data (`sweep.constant_prediction`), as
    the study recorded it where it did, else computed from its settings (None where the data cannot be read)."""
    known = {int(seed): c for seed, c in (study.user_attrs.get("constant") or {}).items()}
    for seed in seeds:
        if seed not in known:
            try:
                known[seed] = sweep.constant_prediction({**study.user_attrs["base"], "seed": seed})
            except (TransferError, OSError):
                known[seed] = {"score": None}
    return known


def recommendation(runs: list, constant: dict, metric: str, lower_is_better: bool = False,
                   candidates: Optional[dict] = None):
    """`(sweep.recommend's result, one line saying it)`; `constant` is `{seed: constant_prediction's dict}`;
    `candidates` (`{name: settings}`, the sweep's whole list) lets the line say how many were never compared."""
    decided = sweep.recommend(runs, {seed: c.get("score") for seed, c in constant.items()}, lower_is_better)
    found, margin = decided["candidates"], 100 * decided["margin"]
    shown = next((c for _, c in sorted(constant.items()) if c.get("score") is not None), None)
    floor = ("the constant prediction" if shown is None else
             f"the constant prediction (always {shown['predicts']!r}: {shown['score']:.3f} at seed "
             f"{min(s for s, c in constant.items() if c is shown)})")
    if decided["outcome"] == "no eligible candidate":
        return decided, (f"Nothing to recommend: no candidate ran to its stopping rule at {sweep.MIN_SEEDS} or more "
                         f"seeds within the budget (runs cut by the budget or pruned never count); give a larger "
                         f"--budget, more processes on this sweep, or --max_train_examples.")
    if decided["outcome"] == "nothing beat the constant prediction":
        judged = ", ".join(f"{name} {c['vs_constant'].text(scale=100)}" for name, c in found.items()
                           if c["vs_constant"] is not None)
        return decided, (f"Nothing to recommend: no candidate's validation {metric} beat {floor} (seed-paired 95% "
                         f"intervals of the difference, points: {judged}).")
    name, best = decided["candidate"], decided["best"]
    chosen = found[name]
    above = "" if chosen["vs_constant"] is None else f", {chosen['vs_constant'].text(scale=100)} points above {floor}"
    if name == best:
        cheaper = [other for other, c in found.items() if c["vs_best"] is not None and other != name
                   and (c["cost_s"] or 0) < (chosen["cost_s"] or 0)]
        judged = ("the best mean" + (f"; no cheaper candidate shown within {margin:g} point of it ("
                                     + ", ".join(f"{o} {found[o]['vs_best'].text(scale=100)}" for o in cheaper) + ")"
                                     if cheaper else ""))
    else:
        judged = (f"within {margin:g} point of the best, {best} at {found[best]['mean']:.3f} (difference "
                  f"{chosen['vs_best'].text(scale=100)} points, {chosen['vs_best'].method}), and cheaper")
    line = (f"Recommended: {name}: validation {metric} {chosen['mean']:.3f} over seeds "
            f"{', '.join(map(str, chosen['seeds']))}{above}; {judged}"
            f"{_not_compared(candidates, runs, decided, lower_is_better)}; "
            f"{chosen['cost_s']:.0f} s to its stopping rule here (CPU seconds, cache build included).")
    return decided, line


def never_compared(candidates: dict, runs: list, decided: dict, lower_is_better: bool = False) -> list:
    """The candidates of `candidates` that the recommendation never weighed: neither eligible (enough seeds to their
    stopping rule) nor pruned at a rung by the others' scores nor passed over by the seed round (`passed_over`);
    never started, cut by the budget, or unfinished."""
    weighed = ({name for name, c in decided["candidates"].items() if c["why_not"] is None}
               | {run.candidate for run in runs if run.cut == "pruned"}
               | set(passed_over(runs, decided, lower_is_better)))
    return [name for name in candidates if name not in weighed]


def passed_over(runs: list, decided: dict, lower_is_better: bool = False) -> list:
    """Candidates whose seed-0 run ended by its stopping rule below an eligible candidate's seed-0 score, and that
    ran at no other seed: the seed round took better ones (weighed at one seed, not within an interval)."""
    eligible = {name for name, c in decided["candidates"].items() if c["why_not"] is None}
    sign = -1.0 if lower_is_better else 1.0
    bars = [sign * run.score for run in runs if run.candidate in eligible and run.seed == 0 and run.score is not None]
    seeds = {}
    for run in runs:
        seeds.setdefault(run.candidate, set()).add(run.seed)
    return sorted({run.candidate for run in runs if run.seed == 0 and run.cut is None and run.score is not None
                   and seeds[run.candidate] == {0} and run.candidate not in eligible and bars
                   and sign * run.score < max(bars)})


def _not_compared(candidates: Optional[dict], runs: list, decided: dict, lower_is_better: bool = False) -> str:
    """What the recommendation line adds when some candidates ran at seed 0 alone (`passed_over`) or were never
    compared (`never_compared`): how many of how many, and whether full fine-tuning (the reference a user would
    otherwise train) is among them."""
    if not candidates:
        return ""
    once = passed_over(runs, decided, lower_is_better)
    said = (f"; {', '.join(once)} ran at seed 0 only, below the seed round's candidates there" if once else "")
    full = [name for name, settings in candidates.items() if methods.name_of(settings) == methods.DEFAULT
            and settings["trainable_layers"] == freezing.ALL]
    # Full fine-tuning is what a user would otherwise train: pruned by the others' early epochs, the line says so.
    said += "".join(f"; {run.candidate} (full fine-tuning) was pruned after epoch {run.epochs}, below the others "
                    "there: it may learn more later" for run in runs if run.candidate in full and run.cut == "pruned")
    missing = never_compared(candidates, runs, decided, lower_is_better)
    # A seed-0 run that ended by its stopping rule, whose further seeds the budget did not reach: said with its score.
    alone = {run.candidate: run.score for run in runs if run.candidate in missing and run.seed == 0
             and run.cut is None and run.score is not None}
    better = _better_rate(candidates, runs, lower_is_better)
    said += "".join(f"; {name} ran at seed 0 only ({score:.3f}): " + (
        f"the seed round takes its setting at its better rate there, {better[name]}" if name in better else
        "its further seeds did not fit the budget") for name, score in alone.items())
    missing = [name for name in missing if name not in alone]
    if not missing:
        return said + (" (a larger --budget compares it)" if set(alone) - set(better) else "")
    among = ", full fine-tuning among them," if full and set(full) <= set(missing) else ""
    one = len(missing) == 1
    return (f"{said}; but {len(missing)} of the {len(candidates)} candidates{among} {'was' if one else 'were'} never "
            f"compared: no run of {'its' if one else 'theirs'} finished within the budget (a larger --budget compares "
            f"{'it' if one else 'them'})")


def _better_rate(candidates: dict, runs: list, lower_is_better: bool = False) -> dict:
    """`{name: another rate of its setting}` for the candidates whose seed-0 run, ended by its stopping rule, scored
    below another rate's of the same setting: the seed round takes each setting once, at its best rate at seed 0
    (`sweep_seed_round.configuration`), so the lower rate is not seeded whatever the budget."""
    sign = -1.0 if lower_is_better else 1.0
    ended = {run.candidate: sign * run.score for run in runs
             if run.seed == 0 and run.cut is None and run.score is not None and run.candidate in candidates}
    setting = {name: sweep_seed_round.configuration(name, candidates) for name in ended}
    best = {}
    for name, score in ended.items():
        if setting[name] not in best or score > ended[best[setting[name]]]:
            best[setting[name]] = name
    return {name: best[setting[name]] for name in ended if best[setting[name]] != name}


def judge_runs(folder: str, data_dir: Optional[str] = None) -> tuple:
    """The sweep's rule over any study's finished runs of one data set: every `summary.json` below `folder`, each
    run a candidate by its method, rank, depth, cache and rate; the constant prediction computed per seed from the
    runs' own settings (`data_dir` replaces the GLUE folder they name). Returns `(sweep.recommend's result, line)`.

    >>> decided, line = sweep_report.judge_runs("reports/runs/methods/mrpc")  # doctest: +SKIP
    """
    summaries = []
    for root, _, files in sorted(os.walk(folder)):
        summary = run_record.read_summary(root) if record.SUMMARY in files else None
        if summary and summary.get("config"):
            summaries.append(summary)
    if not summaries:
        raise TransferError(f"{folder} holds no run's summary.json")
    runs = [sweep.run_of(_candidate(s["config"]), s) for s in summaries]
    constant = {}
    for summary in summaries:
        seed = int(summary["seed"])
        if seed not in constant:
            settings = {**summary["config"], **({"data_dir": data_dir} if data_dir else {})}
            constant[seed] = sweep.constant_prediction(settings)
    metric = summaries[0]["metric"]
    return recommendation(runs, constant, metric, metric in metrics.LOWER_IS_BETTER)


def _candidate(config: dict) -> str:
    """A run's candidate name as the sweep's (`method[_r]_k_lr`), with `_cached` where freezing's prefix is cached
    and the run is not a sweep's (whose candidates below all blocks always are)."""
    cached = "_cached" if config.get("cache_frozen") else ""
    return sweep.candidate_name(config) + cached


def write_report(study, sweep_dir: str, out: str) -> tuple:
    """Writes README.md, candidates.csv and pareto.png to `out`; returns `(rows, recommendation line, the glue
    command that trains the recommended candidate or None)`."""
    base, found = study.user_attrs["base"], study.user_attrs["candidates"]
    runs = _runs(study, sweep_dir)
    metric = next((s["metric"] for rs in runs.values() for _, _, s in rs if s), "accuracy")
    ran = rule_runs(runs)
    constant = constants(study, sorted({r.seed for r in ran}))
    decided, line = recommendation(ran, constant, metric, study.direction.name == "MINIMIZE", found)
    rows = [_row(name, settings, runs.get(name, []), metric, decided["candidates"].get(name))
            for name, settings in found.items()]
    os.makedirs(out, exist_ok=True)
    tables.write_csv(os.path.join(out, "candidates.csv"), columns(), [[r[c] for c in columns()] for r in rows])
    _figure(os.path.join(out, "pareto.png"), rows, metric, decided["candidate"])
    spent = sweep.spent_s(study)
    header = ["candidate", "status", "seeds", f"val {metric}", "test", "epochs (seed 0)", "s per epoch",
              "s to its stopping rule", "vs the best (points, 95%)", "peak memory (MB)", "trainable params"]
    cells = [[r["candidate"], r["status"], str(r["seeds"]),
              tables.cell(r["_vals"], max(r["seeds"], 1)) if r["seeds"] else
              "-" if r["val_before_stop"] is None else f"({r['val_before_stop']:.3f} before it stopped)",
              "-" if r["test"] is None else f"{r['test']:.3f}", str(r["epochs"]),
              "-" if r["epoch_time_s"] is None else f"{r['epoch_time_s']:.1f}",
              "-" if r["cost_s"] is None else f"{r['cost_s']:.0f}", r["vs_best"] or "-",
              "-" if r["peak_memory_mb"] is None else f"{r['peak_memory_mb']:.0f}",
              "-" if r["trainable_params"] is None else f"{r['trainable_params']:,}"] for r in rows]
    data = base.get("task") or os.path.basename(base.get("train_file") or "")
    # Where the runs ran (their summaries say), not where this report is written.
    hosts = sorted({_host(s["machine"], int(study.user_attrs.get("workers") or 1)) for rs in runs.values()
                    for _, _, s in rs if s and s.get("machine")})
    use = train_command(base, found[decided["candidate"]]) if decided.get("candidate") else None
    lines = [f"# Sweep: what to train on {data} ({base.get('preset')})", "", line, "",
             *([f"To train it for use (its settings at seed 0; `--export_dir` keeps the model): `{use}`", ""]
               if use else []),
             f"Made by `{study.user_attrs.get('command', 'python -m tf_transfer.experiments sweep')}`; runs on "
             f"{'; '.join(hosts) or 'no machine recorded'} (report written {time.strftime('%Y-%m-%d %H:%M')}).",
             "",
             f"Budget {study.user_attrs['budget_s'] / 60:.1f} min of training wall time{_over_workers(study)}, "
             f"{spent / 60:.1f} min "
             f"spent; {len(found)} candidates, "
             + "".join(f"{name} first at every seed (never pruned: the comparison every answer needs), " for name in study.user_attrs.get("early") or [])
             + f"{_rungs(study, metric, constant)}, then the best candidates at more "
             f"seeds (`seed_round`: {study.user_attrs.get('seed_round') or 'not reached'}). Scores are validation "
             "scores at each run's best epoch; mean ± sd over the seeds that ran to their stopping rule (runs cut by "
             "the budget or pruned never count). A candidate is eligible with "
             f"{sweep.MIN_SEEDS} or more such seeds; it must beat the constant prediction (seed-paired 95% interval "
             f"above 0), and the cheapest whose difference to the best has its interval's low bound above "
             f"-{100 * sweep.MARGIN:g} point is recommended; cost is CPU seconds to the stopping rule, the "
             "frozen-prefix cache's build included (docs/methods.md).",
             *_planned(study, spent), "", tables.markdown_table(header, cells), "",
             "![score against time per epoch](pareto.png)", ""]
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return rows, line, use


def _host(machine: dict, workers: int) -> str:
    """Where a sweep's runs ran: the processor and the cores each run had (a run records its own, 1 when its
    worker was pinned to a core), and how many workers ran at once.

    >>> _host({"cpu": "AMD EPYC", "cores": 1}, 2), _host({"cpu": "AMD EPYC", "cores": 2}, 1)
    ('AMD EPYC, 2 workers at once, each on 1 core', 'AMD EPYC, 2 cores')
    """
    cores = f"{machine['cores']} core{'s' * (machine['cores'] != 1)}"
    at_once = f"{workers} workers at once, each on " if workers > 1 else ""
    return f"{machine['cpu']}, {at_once}{cores}"


def _planned(study, spent_s: float) -> list:
    """What the sweep said before it trained (`sweep_plan`), beside what it then spent: the plan's check."""
    planned = study.user_attrs.get("plan")
    if not planned:
        return []
    speed = planned["speed"]
    return ["", f"Before training it said: {planned['line'].removeprefix('[sweep] ')} (measured: "
                f"{1 / speed['example_s']:.1f} examples/s of full fine-tuning on one worker, {speed['startup_s']:.0f} s "
                f"of start-up; planned {planned['training_s'] / 60:.1f} min of training for an answer over all "
                f"candidates). It spent {spent_s / 60:.1f} min of training."]


def _over_workers(study) -> str:
    workers = int(study.user_attrs.get("workers") or 1)
    return f" over {workers} workers (--budget of wall time each)" if workers > 1 else ""


def train_command(base: dict, candidate: dict) -> str:
    """The `glue` command that trains `candidate` of a sweep whose runs took `base`, for use: flags/sweep.flags by
    its absolute path (the command works from any folder, as the sweep did), then every setting that differs from it.

    >>> command = train_command({"preset": "all_minilm_l6_v2_en", "max_epochs": 5, "train_file": "tweets.csv",
    ...                          "text_columns": ["text"], "label_column": "target"},
    ...                         {"trainable_layers": 2, "cache_frozen": True, "lr": 0.0003})
    >>> command.replace(SWEEP_FLAGS, "/repo/flags/sweep.flags")
    'python -m tf_transfer.glue --flagfile=/repo/flags/sweep.flags --train_file=tweets.csv --text_columns=text \
--label_column=target --trainable_layers=2 --cache_frozen --lr=0.0003 --export_dir=model'
    """
    from tf_transfer.studies.glue.glue_settings import GlueSettings

    fixed = settings_lib.read_flagfile(SWEEP_FLAGS, GlueSettings)
    flags = [f"python -m tf_transfer.glue --flagfile={shlex.quote(SWEEP_FLAGS)}"]
    for key, value in {**base, **candidate}.items():
        if value is None or value == fixed.get(key) or key == "seed":
            continue
        if isinstance(value, bool):
            flags.append(f"--{'' if value else 'no'}{key}")
        else:
            flags.append(f"--{key}={','.join(map(str, value)) if isinstance(value, (list, tuple)) else value}")
    return " ".join(flags + ["--export_dir=model"])


def _rungs(study, metric: str, constant: dict) -> str:
    """Where successive halving decided, and how its first rung was measured."""
    first = study.user_attrs.get("first_rung") or 1
    ref = study.user_attrs.get("reference")
    floor = (constant.get(0) or {}).get("score")
    last = int(study.user_attrs.get("base", {}).get("max_epochs") or 9)
    at = [first * 3 ** i for i in range(3) if i == 0 or first * 3 ** i <= last]  # none past the runs' last epoch
    rungs = f"successive halving at epoch{'s' * (len(at) > 1)} {', '.join(map(str, at))} (the best third goes on"
    if not ref or floor is None:  # a sweep from before the first rung was measured, or without a constant score
        return rungs + "; the first rung assumed, not measured)"
    if ref.get("candidate") is None:
        return "nothing pruned (the reference run failed: no epoch is known to rank candidates)"
    if not ref.get("learned"):
        why = "was cut by the budget after" if ref.get("cut") == "budget" else "never beat the constant prediction in"
        return f"nothing pruned (the reference, {ref['candidate']}, {why} {ref.get('epochs')} epochs)"
    return rungs + (f"; the first rung is the epoch at which the reference, {ref['candidate']} at seed 0, beat the "
                    f"constant prediction's validation {metric} ({floor:.3f}) by {100 * sweep.MARGIN:g} point: "
                    f"{ref['score']:.3f})")


def _figure(path: str, rows: list, metric: str, chosen) -> None:
    plt = tables.pyplot()
    figure, axis = plt.subplots(figsize=(6.4, 4.4))
    # The legend: the methods among the candidates, in the registry's order.
    colors = {name: methods.get(name).color for name in methods.names() if any(r["method"] == name for r in rows)}
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
        pick = next(r for r in rows if r["candidate"] == chosen)
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
