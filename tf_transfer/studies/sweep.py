"""A budgeted sweep over training methods that recommends what to train: Optuna's ask-and-tell interface drives GLUE
runs epoch by epoch, and its successive-halving pruner stops the weaker candidates early.

First the reference (full fine-tuning at its larger rate) trains until its best validation score beats the
constant prediction's by a point: that epoch r is the first rung. Then every candidate (a method, its depth or rank,
a learning rate: `candidates`) starts as a trial at seed 0, cheapest first; after each epoch the run reports its best
validation score so far (`trial.report`) and asks whether to go on (`trial.should_prune`): at epochs r, 3r, 9r, ...
only the best third of the trials that reached that epoch continue (a run at its last epoch has ended anyway). Then
the best `top` candidates that ran to their stopping rule run again at further seeds (the seed round). No trial
starts whose estimated cost (`estimate_s`) does not fit in the budget left (training wall time, summed over its
trials), the seed round is queued as soon as it and the next candidate would not both fit, and a run that would
overrun stops after its last epoch that fits. The recommendation (`recommend`, one rule over finished runs,
which applies to any study's runs as well) counts only runs that ended by their stopping rule, on at least two
seeds: of the candidates that beat the constant prediction on validation, the cheapest (CPU seconds to the stopping
rule, cache build included) whose seed-paired 95% interval of the difference to the best stays within a point of it.

The study lives in SQLite (`sweep.db` in the sweep's folder; any SQLAlchemy URL with `storage`), so a killed sweep
continues where it was (a trial whose process died is run again, and its run resumes from its last finished epoch)
and several processes or machines can work on one sweep.

Example:

>>> from tf_transfer.studies import sweep
>>> sweep.parse_budget("30m"), sweep.parse_budget("1h30m"), sweep.parse_budget("90s")
(1800.0, 5400.0, 90.0)
>>> runs = [sweep.Run(name, seed, 3, 9, None, score, cost) for name, scores, cost in
...         [("full", [0.84, 0.86, 0.87], 600.0), ("lora", [0.835, 0.857, 0.866], 300.0)]
...         for seed, score in enumerate(scores)]
>>> decided = sweep.recommend(runs, constant={0: 0.78, 1: 0.80, 2: 0.81})
>>> decided["best"], decided["candidate"]
('full', 'lora')
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import socket
import time
from typing import Callable, Optional, Sequence

from tf_transfer.core.errors import TransferError
from tf_transfer.models import freezing

DEFAULT_LORA_RANKS = (4, 8, 16)
# Learning rates per kind of candidate: fine-tuning's (the paper's 2e-5 and a larger one), a frozen prefix's, LoRA's
# (10-100x fine-tuning's) and BitFit's. `lrs` replaces them all.
LEARNING_RATES = {"full": (2e-5, 1e-4), "freeze": (1e-4, 1e-3), "lora": (5e-4, 2e-3), "bitfit": (1e-3, 5e-3)}


def parse_budget(text: str) -> float:
    """Seconds in `30m`, `2h`, `1h30m`, `90s` or a plain number of seconds."""
    text = str(text).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?", text)
    if not text or not parts:
        raise TransferError(f"--budget={text!r} is not a duration: give e.g. 30m, 2h, 1h30m or 90s")
    hours, minutes, seconds = (float(p) if p else 0.0 for p in parts.groups())
    total = 3600 * hours + 60 * minutes + seconds
    if total <= 0:
        raise TransferError(f"--budget={text!r} must be more than nothing")
    return total


def candidates(methods: Sequence[str], num_layers: int, lrs: Optional[Sequence[float]] = None,
               lora_ranks: Sequence[int] = DEFAULT_LORA_RANKS) -> dict:
    """`{name: settings overrides}`: for `freeze`, full fine-tuning and the last 1, 2 and L/2 blocks over the cache;
    for `lora`, each rank on every block and on the last 2 over the cache; for `bitfit`, every block; each at the
    rates of `LEARNING_RATES` (or `lrs`)."""
    check_methods(methods)
    depths = sorted({k for k in (1, 2, num_layers // 2) if 1 <= k < num_layers})
    shapes = {
        "freeze": [("full", {"trainable_layers": freezing.ALL})] + [
            ("freeze", {"trainable_layers": k, "cache_frozen": True}) for k in depths],
        "lora": [("lora", {"method": "lora", "lora_rank": r, "trainable_layers": freezing.ALL}) for r in lora_ranks]
        + [("lora", {"method": "lora", "lora_rank": r, "trainable_layers": min(2, num_layers), "cache_frozen": True})
           for r in lora_ranks if min(2, num_layers) < num_layers],
        "bitfit": [("bitfit", {"method": "bitfit", "trainable_layers": freezing.ALL})],
    }
    found = {}
    for method in methods:
        for kind, overrides in shapes[method]:
            for lr in (lrs or LEARNING_RATES[kind]):
                settings = {**overrides, "lr": float(lr)}
                found[candidate_name(settings)] = settings
    # Cheapest first: successive halving lets the first run of a rung through unopposed, so the costly candidates
    # should meet a standard set by cheap ones and be pruned after one epoch.
    return dict(sorted(found.items(), key=lambda item: relative_cost(item[1], num_layers)))


def relative_cost(settings: dict, num_layers: int) -> int:
    """A candidate's work per step in block passes: forward through the blocks that run (the trained ones alone
    over the cache), backward through the trained ones (weights' gradients too under freezing)."""
    k = settings["trainable_layers"]
    trained = num_layers if k == freezing.ALL else k
    forward = trained if settings.get("cache_frozen") else num_layers
    return forward + trained * (2 if settings.get("method", "freeze") == "freeze" else 1)


def check_methods(methods: Sequence[str]) -> None:
    """`TransferError` unless `methods` names some of the training methods."""
    from tf_transfer.models import methods as methods_lib

    unknown = [m for m in methods if m not in methods_lib.METHODS]
    if unknown or not methods:
        raise TransferError(f"--methods: {unknown[0] if unknown else 'none'!r} is not a method: use some of "
                            f"{', '.join(methods_lib.METHODS)}")


def run_folder(sweep_dir: str, candidate: str, seed: int) -> str:
    return os.path.join(sweep_dir, candidate, f"seed{seed}")


def candidate_name(settings: dict) -> str:
    """`method[_r<rank>]_k<depth>_lr<rate>`: a candidate's name, and its run folder's."""
    method = settings.get("method", "freeze")
    rank = f"_r{settings['lora_rank']}" if method == "lora" else ""
    return f"{method}{rank}_k{settings['trainable_layers']}_lr{settings['lr']:g}"


# --- the recommendation: one rule over finished runs, the sweep's or any study's ------------------------------------

MARGIN = 0.01  # one point of a score in [0, 1]: "as good as the best" within it; "learned" beyond the constant by it
MIN_SEEDS = 2


@dataclasses.dataclass(frozen=True)
class Run:
    """One run as the recommendation reads it.

    `epochs`: epochs trained; `max_epochs`: the cap of its stopping rule; `cut`: None when it ended by its stopping
    rule (patience, or the cap), else what cut it short ("budget", "pruned", "reference", "unfinished");
    `score`: the validation score of its best epoch; `cost_s`: seconds to the end of its last epoch (its stopping
    rule's), building the frozen-prefix cache included."""

    candidate: str
    seed: int
    epochs: int
    max_epochs: int
    cut: Optional[str]
    score: Optional[float]
    cost_s: Optional[float]


def run_of(candidate: str, summary: dict, cut: Optional[str] = None) -> Run:
    """A run's row from its `summary.json`: its score at the best epoch on its own metric, its cost in CPU seconds
    (training's over all its epochs plus the cache build; wall seconds where no CPU clock was recorded), and `cut`
    (given, or read from the sweep's mark on its last epoch, or "unfinished")."""
    epochs = summary.get("epochs") or []
    marked = next((e["sweep"] for e in reversed(epochs) if e.get("sweep")), None)
    cut = cut or marked or (None if summary.get("completed") else "unfinished")
    best = summary.get("best_epoch")
    score = epochs[best - 1]["val"].get(summary["metric"]) if best and len(epochs) >= best else None
    last = epochs[-1] if epochs else {}
    if last.get("train_cpu_s") is not None:
        cost = last["train_cpu_s"] + (summary.get("cache_build_cpu_s") or summary.get("cache_build_s") or 0.0)
    elif last:
        cost = last["train_time_s"] + (summary.get("cache_build_s") or 0.0)
    else:
        cost = None
    max_epochs = (summary.get("config") or {}).get("max_epochs", len(epochs))
    return Run(candidate, int(summary.get("seed", 0)), len(epochs), int(max_epochs), cut, score, cost)


def recommend(runs: Sequence[Run], constant: dict, lower_is_better: bool = False, margin: float = MARGIN,
              min_seeds: int = MIN_SEEDS) -> dict:
    """What to train, from finished runs: the cheapest eligible candidate that is as good as the best.

    - Eligible: a candidate with at least `min_seeds` seeds whose runs ended by their stopping rule under the largest
      epoch cap among `runs` (never a run cut by the budget, pruned, or stopped early for any reason but patience).
    - It must beat the constant prediction: `constant` is `{seed: the constant prediction's validation score}` (the
      seed fixes the split), and the seed-paired 95% interval of score minus constant must lie above 0.
    - The best is the one with the best mean score; every other is judged by the 95% interval of its difference to
      the best (paired over the seeds both ran, since a seed fixes the split and the sample; Welch's otherwise): it
      is as good as the best where the interval's low bound lies above -`margin` (`stats.verdict`).
    - Of those, the least cost (mean seconds to the stopping rule, cache build included) wins.

    Returns `{"outcome", "candidate", "best", "margin", "cap", "candidates"}`: outcome "recommended", "nothing beat
    the constant prediction" or "no eligible candidate" (candidate None then); `candidates[name]` holds `seeds`,
    `mean`, `cost_s`, `why_not` (None when eligible), `vs_constant` and `vs_best` (`stats.Interval`s or None),
    `as_good`.
    """
    sign = -1.0 if lower_is_better else 1.0
    cap = max((r.max_epochs for r in runs), default=0)
    found = _tabulate(runs, cap, min_seeds)
    eligible = [name for name, c in found.items() if c["why_not"] is None]
    result = {"outcome": "no eligible candidate", "candidate": None, "best": None, "margin": margin, "cap": cap,
              "candidates": found}
    if not eligible:
        return result
    contenders = _above_constant(found, eligible, constant, sign)
    if not contenders:
        result["outcome"] = "nothing beat the constant prediction"
        return result
    best = max(contenders, key=lambda name: (sign * found[name]["mean"], -(found[name]["cost_s"] or math.inf)))
    _judge_against(best, found, contenders, sign, margin)
    chosen = min((name for name in contenders if found[name]["as_good"]),
                 key=lambda name: (found[name]["cost_s"] if found[name]["cost_s"] is not None else math.inf,
                                   -sign * found[name]["mean"]))
    result.update(outcome="recommended", candidate=chosen, best=best)
    return result


def _tabulate(runs: Sequence[Run], cap: int, min_seeds: int) -> dict:
    """Per candidate: its seeds that ran to their stopping rule under `cap`, their scores and mean cost, and why it is
    not eligible (None when it is)."""
    from tf_transfer.core import stats

    by_name: dict = {}
    for run in runs:
        by_name.setdefault(run.candidate, {})[run.seed] = run  # the latest row of a seed counts
    found = {}
    for name, seeds in sorted(by_name.items()):
        ended = {seed: r for seed, r in seeds.items() if r.cut is None and r.score is not None and r.max_epochs == cap}
        cuts = sorted({r.cut for r in seeds.values() if r.cut})
        why_not = None
        if len(ended) < min_seeds:
            why_not = (f"{len(ended)} of its seeds ran to their stopping rule (needs {min_seeds})"
                       + (f"; {', '.join(cuts)}" if cuts else "")
                       + (f"; capped below {cap} epochs" if any(r.max_epochs < cap for r in seeds.values()) else ""))
        scores = {seed: r.score for seed, r in sorted(ended.items())}
        costs = [r.cost_s for r in ended.values() if r.cost_s is not None]
        found[name] = {"seeds": sorted(scores), "scores": scores,
                       "mean": stats.mean(list(scores.values())) if scores else None,
                       "cost_s": stats.mean(costs) if costs else None, "why_not": why_not,
                       "vs_constant": None, "vs_best": None, "as_good": False}
    return found


def _above_constant(found: dict, eligible: list, constant: dict, sign: float) -> list:
    """The eligible candidates whose seed-paired 95% interval against the constant prediction lies above 0 (a
    candidate whose seeds' constants are not all known is kept: nothing says it did not learn)."""
    from tf_transfer.core import stats

    contenders = []
    for name in eligible:
        c = found[name]
        known = [seed for seed in c["seeds"] if constant.get(seed) is not None]
        if len(known) == len(c["seeds"]):
            c["vs_constant"] = stats.paired_difference([sign * c["scores"][s] for s in known],
                                                       [sign * constant[s] for s in known])
            if not (c["vs_constant"].defined and c["vs_constant"].low > 0):
                c["why_not"] = "not above the constant prediction"
                continue
        contenders.append(name)
    return contenders


def _judge_against(best: str, found: dict, contenders: list, sign: float, margin: float) -> None:
    """Sets each contender's interval of its difference to `best` (paired over the seeds both ran, Welch's
    otherwise) and whether it is as good (low bound above -`margin`)."""
    from tf_transfer.core import stats

    for name in contenders:
        c, b = found[name], found[best]
        common = [seed for seed in c["seeds"] if seed in b["scores"]]
        paired = len(common) >= 2
        mine = [sign * c["scores"][s] for s in (common if paired else c["seeds"])]
        theirs = [sign * b["scores"][s] for s in (common if paired else b["seeds"])]
        c["vs_best"] = stats.difference(mine, theirs, paired)
        c["as_good"] = name == best or stats.verdict(c["vs_best"], margin, "as good as") == stats.REPRODUCED


def constant_prediction(settings: dict) -> dict:
    """The validation score of a model that learned nothing, on the split these settings' runs hold out (the seed
    fixes it): always the training split's majority class (regression: always its mean, whose correlation is
    undefined and counted 0). `{"score", "predicts", "examples"}`; score None where it cannot be computed."""
    import numpy as np

    from tf_transfer.core import metrics
    from tf_transfer.studies.glue_settings import GlueSettings
    from tf_transfer.studies.glue_task import load_data

    glue_settings = GlueSettings.from_dict(settings)
    task, train, validation, _, _ = load_data(glue_settings)
    metric, labels = glue_settings.metric_name, np.asarray(validation.labels)
    if not len(labels):
        return {"score": None, "predicts": None, "examples": 0}
    train_labels = np.asarray(train.labels)
    if task.labels is None or train_labels.dtype.kind == "f":
        guess = float(train_labels.mean())
        score = 0.0 if metric in ("spearman", "pearson") else metrics.compute([metric], labels,
                                                                               np.full(len(labels), guess))[metric]
        return {"score": float(score), "predicts": f"{guess:.3g}", "examples": len(labels)}
    values, counts = np.unique(train_labels, return_counts=True)
    majority = values[int(np.argmax(counts))]
    score = metrics.compute([metric], labels, np.full_like(labels, majority))[metric]
    name = task.labels[int(majority)] if task.labels else str(majority)
    return {"score": float(score), "predicts": str(name), "examples": len(labels)}


# --- the Optuna study ------------------------------------------------------------------------------------------------

def _storage(sweep_dir: str, storage: Optional[str]) -> str:
    return storage or "sqlite:///" + os.path.abspath(os.path.join(sweep_dir, "sweep.db"))


def open_study(sweep_dir: str, base: dict, make_candidates: Callable, budget_s: float,
               storage: Optional[str] = None, lower_is_better: bool = False, constant: Optional[dict] = None):
    """Creates the sweep's Optuna study (or loads it: a rerun or another process) with the reference (`reference`)
    queued first where the constant prediction's validation score at seed 0 is known (`constant`, else
    `constant_prediction` of `base`), then every candidate of `make_candidates()` once at seed 0. A sweep keeps its
    settings and candidates; `budget_s` replaces the budget it had (a rerun with a larger budget goes on)."""
    import optuna

    from tf_transfer.studies import grid

    os.makedirs(sweep_dir, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = _storage(sweep_dir, storage)
    direction = "minimize" if lower_is_better else "maximize"
    while not grid.acquire_lock(sweep_dir):  # one process queues the candidates; the others wait for it
        time.sleep(0.5)
    try:
        study = optuna.create_study(study_name="sweep", storage=url, direction=direction,
                                    pruner=pruner_of_sweeps(), load_if_exists=True)
        if "candidates" not in study.user_attrs:
            found = make_candidates()
            study.set_user_attr("candidates", found)
            study.set_user_attr("base", base)
            try:
                constant = constant or constant_prediction({**base, "seed": 0})
            except TransferError:  # no data to split (e.g. a test's made-up sweep): the first rung is assumed
                constant = {"score": None}
            study.set_user_attr("constant", {"0": constant})
            if constant["score"] is None:
                study.set_user_attr("first_rung", 1)
            else:
                study.enqueue_trial({"candidate": reference(found), "seed": 0},
                                    user_attrs={"queued": True, "reference": True})
            for name in found:
                study.enqueue_trial({"candidate": name, "seed": 0}, user_attrs={"queued": True})
        elif study.user_attrs["base"] != json.loads(json.dumps(base)):
            raise TransferError(f"{sweep_dir} holds a sweep of other settings: give another --runs_dir to start a "
                                "new one")
        if "first_rung" not in study.user_attrs and not any(t.user_attrs.get("reference") for t in study.trials):
            study.set_user_attr("first_rung", 1)  # a sweep from before the first rung was measured
        study.set_user_attr("budget_s", budget_s)
    finally:
        grid.release_lock(sweep_dir)
    study.pruner = pruner_of_sweeps(study.user_attrs.get("first_rung"))
    return study, url


def reference(found: dict) -> str:
    """The candidate whose learning curve sets the first rung: full fine-tuning at its largest rate (the soonest to
    learn), else the first candidate queued (the cheapest)."""
    full = [name for name, s in found.items()
            if s.get("method", "freeze") == "freeze" and s["trainable_layers"] == freezing.ALL]
    return max(full, key=lambda name: found[name]["lr"]) if full else next(iter(found))


def pruner_of_sweeps(first_rung: Optional[int] = None):
    """Successive halving at epochs r, 3r, 9r, ... (r: the first rung, `first_rung`, 1 until it is measured): the
    best third of the trials that reached an epoch go on. Every process that reports to the study loads it with
    this pruner (Optuna does not store it)."""
    import optuna

    return optuna.pruners.SuccessiveHalvingPruner(min_resource=first_rung or 1, reduction_factor=3)


def load(url: str):
    """The sweep's study, as another process (a trial's child) reads it, with the pruner of its first rung."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="sweep", storage=url)
    study.pruner = pruner_of_sweeps(study.user_attrs.get("first_rung"))
    return study


def spent_s(study) -> float:
    """Training wall time the sweep has used: each trial's `train_s` (updated after every epoch)."""
    return sum(t.user_attrs.get("train_s", 0.0) for t in study.get_trials(deepcopy=False))


def run_sweep(study, url: str, sweep_dir: str, train_trial: Callable, top: int = 3, seeds: int = 3,
              log: Callable = print) -> str:
    """Works through the queue until it is empty and the seed round is queued and run, or the budget is spent;
    returns why it ended ("done" or "budget"). `train_trial(url, trial_id, settings, folder, remaining_s)` trains one
    trial's run and returns `{"value", "pruned", "epoch_time_s", "epochs", ...}`.

    No trial starts whose estimated cost (`estimate_s`: its first rung, or a seed-round run's whole run) does not fit
    in the budget left; and once the next seed-0 trial and the seed round of the best candidates so far would not
    both fit, the seed round is queued at once and the candidates not reached wait behind it."""
    import optuna

    budget_s = study.user_attrs["budget_s"]
    found, base = study.user_attrs["candidates"], study.user_attrs["base"]
    while True:
        _retry_dead(study)
        remaining = budget_s - spent_s(study)
        if remaining <= 0:
            return "budget"
        trials = study.get_trials(deepcopy=False)
        waiting = [t for t in trials if t.state == optuna.trial.TrialState.WAITING]
        running = any(t.state == optuna.trial.TrialState.RUNNING for t in trials)
        if not waiting:
            if running:
                time.sleep(2)  # another process's trial may still queue the seed round
                continue
            if not _queue_seed_round(study, top, seeds):
                return "done"
            continue
        following = min(waiting, key=lambda t: t.number)
        if "first_rung" not in study.user_attrs and not following.user_attrs.get("reference"):
            _await_reference(study, waiting, running, int(base.get("max_epochs", 9)), log)
            continue
        study.pruner = pruner_of_sweeps(study.user_attrs.get("first_rung"))
        cost = estimate_s(study, found, following)
        reserve = _reserve(study, following, cost, remaining, top, seeds, log)
        if reserve is None:
            continue  # the seed round was queued ahead of the candidates not reached
        if cost is not None and cost > remaining:
            log(f"[sweep] {remaining / 60:.1f} min of the budget left: too little for the next trial "
                f"({cost / 60:.1f} min estimated)")
            return "budget"
        taken = _take(study, found)
        if taken is None:
            continue
        trial, name, seed = taken
        settings = {**base, **found[name], "seed": seed}
        is_reference = bool(trial.user_attrs.get("reference"))
        folder = run_folder(os.path.join(sweep_dir, "reference") if is_reference else sweep_dir, name, seed)
        log(f"[sweep] {'the reference, ' if is_reference else ''}{name} seed {seed}: {remaining / 60:.1f} min of the "
            f"budget left -> {folder}")
        start = time.time()
        try:  # a seed-0 run that goes on past its first rung stops before it eats into the seed round's share
            result = train_trial(url, trial._trial_id, settings, folder, remaining - reserve)
        except Exception as e:  # a failed run must not stop the sweep: its error is kept beside it
            trial.set_user_attr("error", f"{type(e).__name__}: {e}")
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            log(f"[sweep] {name} seed {seed} failed: {type(e).__name__}: {e}")
            continue
        _tell(study, trial, name, result, start, int(base.get("max_epochs", 9)), log)


def _take(study, found: dict):
    """Asks Optuna for the next queued trial: `(trial, candidate, seed)`, or None where another process took the
    last queued one meanwhile (the empty trial Optuna made instead is failed)."""
    import optuna

    trial = study.ask()
    if not trial.user_attrs.get("queued"):
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return None
    name = trial.suggest_categorical("candidate", sorted(found))
    seed = trial.suggest_int("seed", 0, 1000)
    trial.set_user_attr("host", socket.gethostname())
    trial.set_user_attr("pid", os.getpid())
    return trial, name, seed


def _reserve(study, following, cost, remaining: float, top: int, seeds: int, log: Callable):
    """The share of the budget kept for the seed round while seed-0 trials run (0 once it is queued); None where the
    next trial and the seed round would not both fit, so the seed round has just been queued ahead of it."""
    if following.user_attrs.get("seed_round") or study.user_attrs.get("seed_round") or not cost:
        return 0.0
    reserve = _seed_round_cost(study, top, seeds)
    if reserve and cost + reserve > remaining and _queue_seed_round(study, top, seeds):
        log(f"[sweep] {remaining / 60:.1f} min of the budget left: kept for the seed round "
            f"({reserve / 60:.1f} min estimated); the candidates not reached wait behind it")
        _defer_waiting(study, until="seed_round")
        return None
    return reserve


def _await_reference(study, waiting: list, running: bool, max_epochs: int, log: Callable) -> None:
    """Before the first rung is known only the reference may run: put it first again (queued again after a kill),
    wait for another process's, or, where it failed, go on with nothing pruned."""
    if any(t.user_attrs.get("reference") for t in waiting):
        _defer_waiting(study, until="reference")
    elif running:
        time.sleep(2)  # another process's reference run is still measuring the first rung
    else:  # the reference failed: no epoch is known to rank anything, so nothing is pruned
        _set_first_rung(study, None, {}, max_epochs, log)


def _tell(study, trial, name: str, result: dict, start: float, max_epochs: int, log: Callable) -> None:
    """Records a finished trial: what the budget's estimates need, and its state (the reference: the first rung)."""
    import optuna

    trial.set_user_attr("train_s", time.time() - start)  # the whole trial's wall time, start-up included
    for key in ("epoch_time_s", "epochs", "cache_build_s", "startup_s", "cut", "num_layers"):
        trial.set_user_attr(key, result.get(key))
    if result.get("startup_s") is not None and result.get("elapsed_s") is not None:
        # A run in a child process: its start-up includes starting the process, which only this one sees.
        spawn = max(time.time() - start - result["elapsed_s"], 0.0)
        trial.set_user_attr("startup_s", result["startup_s"] + spawn)
    if trial.user_attrs.get("reference"):
        _set_first_rung(study, name, result, max_epochs, log)
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)  # a measurement, never a candidate's run
    elif result["pruned"]:
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    elif result["value"] is None:
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    else:
        study.tell(trial, result["value"])


def _set_first_rung(study, name: str, result: dict, max_epochs: int, log: Callable) -> None:
    """The first rung: the epoch at which the reference's best validation score beat the constant prediction by
    `MARGIN`; where it never did, its runs' last epoch (nothing is pruned: no early epoch ranks anything)."""
    learned = result.get("learned_at")
    study.set_user_attr("first_rung", learned or max_epochs)
    study.set_user_attr("reference", {"candidate": name, "learned": bool(learned), "epochs": result.get("epochs"),
                                      "score": result.get("value"), "cut": result.get("cut")})
    log(f"[sweep] the reference {name or '(failed)'} " + (
        f"beat the constant prediction at epoch {learned}: the first rung" if learned else
        "was cut by the budget before it beat the constant prediction: nothing is pruned"
        if result.get("cut") == "budget" else "never beat the constant prediction: nothing is pruned"))


def _shape(settings: dict) -> tuple:
    """What sets a candidate's cost per epoch (its rate and rank hardly do)."""
    return settings.get("method", "freeze"), settings["trainable_layers"], bool(settings.get("cache_frozen"))


def estimate_s(study, found: dict, trial) -> Optional[float]:
    """Seconds a queued trial is expected to take, from what earlier trials measured: a seed-round run, its
    candidate's seed-0 run (start-up to its stopping rule); any other, start-up, the frozen-prefix cache's build
    and the epochs to the first rung (the reference: one epoch). None before anything was measured.

    Per epoch, runs of the same method, depth and cache (the slowest of them); else any measured run scaled by its
    work per step (`relative_cost`). The cache's build, the same shape's; else a measured one scaled by the frozen
    blocks; else one epoch's. Start-up, the longest measured."""
    import optuna

    name = trial.system_attrs.get("fixed_params", {}).get("candidate")
    if name not in found:
        return None
    measured = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("epoch_time_s")
                and t.user_attrs.get("epochs") and t.params.get("candidate") in found]
    if trial.user_attrs.get("seed_round"):
        own = [t.user_attrs["train_s"] for t in measured if t.params["candidate"] == name and t.params["seed"] == 0
               and not t.user_attrs.get("reference") and t.state == optuna.trial.TrialState.COMPLETE]
        if own:
            return max(own)
    if not measured:
        return None
    settings, layers = found[name], max(t.user_attrs.get("num_layers") or 0 for t in measured)
    same = [t for t in measured if _shape(found[t.params["candidate"]]) == _shape(settings)]
    if same:
        epoch = max(t.user_attrs["epoch_time_s"] for t in same)
    else:
        layers = layers or 12
        epoch = relative_cost(settings, layers) * max(
            t.user_attrs["epoch_time_s"] / relative_cost(found[t.params["candidate"]], layers) for t in measured)
    cache = 0.0
    if settings.get("cache_frozen"):
        built = [t for t in measured if t.user_attrs.get("cache_build_s")]
        same_built = [t.user_attrs["cache_build_s"] for t in built if t in same]
        frozen = max(layers - settings["trainable_layers"], 1) if layers else 1
        cache = (max(same_built) if same_built else
                 frozen * max(t.user_attrs["cache_build_s"] / max(layers - found[t.params["candidate"]]
                                                                  ["trainable_layers"], 1) for t in built)
                 if built and layers else epoch)
    startup = max(t.user_attrs.get("startup_s") or 0.0 for t in measured)
    epochs = 1 if trial.user_attrs.get("reference") else int(study.user_attrs.get("first_rung") or 1)
    if trial.user_attrs.get("seed_round"):
        epochs = int(study.user_attrs["base"].get("max_epochs", 9))
    return startup + cache + epochs * epoch


def _retry_dead(study) -> None:
    """A running trial of this host whose process is gone was killed: fail it and queue it again (its run folder
    resumes from its last finished epoch)."""
    import optuna

    from tf_transfer.studies import grid

    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        attrs = trial.user_attrs
        if attrs.get("host") == socket.gethostname() and "pid" in attrs and not grid._pid_alive(attrs["pid"]):
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)  # its train_s stays spent
            kept = {key: attrs[key] for key in ("reference", "seed_round") if attrs.get(key)}
            study.enqueue_trial(trial.params, user_attrs={"queued": True, "retry_of": trial.number, **kept})


def _seed_round_candidates(study, top: int) -> list:
    """The `top` best seed-0 trials that ran to their stopping rule (never one cut by the budget) and beat the
    constant prediction on validation (where it is known)."""
    import optuna

    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    floor = ((study.user_attrs.get("constant") or {}).get("0") or {}).get("score")
    completed = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                 if t.params["seed"] == 0 and not t.user_attrs.get("cut")
                 and (floor is None or (t.value > floor if maximize else t.value < floor))]
    return sorted(completed, key=lambda t: t.value, reverse=maximize)[:top]


def _seed_round_cost(study, top: int, seeds: int) -> float:
    """The seed round's estimated seconds, were it queued now: each chosen candidate's seed-0 run, once per seed."""
    return (seeds - 1) * sum(t.user_attrs.get("train_s", 0.0) for t in _seed_round_candidates(study, top))


def _queue_seed_round(study, top: int, seeds: int) -> bool:
    """Queues seeds 1..seeds-1 of the `top` best candidates once; False when it has been queued already or none
    qualifies (`_seed_round_candidates`)."""
    if study.user_attrs.get("seed_round") or seeds <= 1:
        return False
    chosen = [t.params["candidate"] for t in _seed_round_candidates(study, top)]
    if not chosen:
        return False
    study.set_user_attr("seed_round", chosen)
    for name in chosen:
        for seed in range(1, seeds):
            study.enqueue_trial({"candidate": name, "seed": seed}, user_attrs={"queued": True, "seed_round": True})
    return True


def _defer_waiting(study, until: str) -> None:
    """Moves the trials waiting before the first one marked `until` ("seed_round": the seed round just queued;
    "reference": the reference queued again after a kill) behind the queue: each is taken, failed as deferred and
    queued again (as a killed trial is), so that it still runs, or a rerun with a larger budget reaches it."""
    import optuna

    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        if trial.user_attrs.get(until):
            break
        taken = study.ask()
        frozen = study.get_trials(deepcopy=False)[taken.number]
        params = frozen.system_attrs.get("fixed_params", {})
        if taken.number != trial.number or frozen.user_attrs.get(until):  # another process took one
            study.tell(taken, state=optuna.trial.TrialState.FAIL)
            study.enqueue_trial(params, user_attrs=dict(frozen.user_attrs))
            break
        taken.set_user_attr("deferred", True)
        study.tell(taken, state=optuna.trial.TrialState.FAIL)
        kept = {key: frozen.user_attrs[key] for key in ("seed_round",) if frozen.user_attrs.get(key)}
        study.enqueue_trial(params, user_attrs={"queued": True, "retry_of": taken.number, **kept})


def report_epoch(trial, value: float, epoch: int, last_epoch: int) -> bool:
    """Reports a candidate's validation score after `epoch`; True when successive halving prunes it. A run at its
    `last_epoch` has ended anyway: its score is final, never pruned. Runs of the seed round neither report nor get
    pruned: they measure the noise of candidates already chosen; nor does the reference, which measures the first
    rung."""
    if trial.user_attrs.get("seed_round") or trial.user_attrs.get("reference"):
        return False
    trial.report(value, epoch)
    return epoch < last_epoch and trial.should_prune()


def train_trial(url: str, trial_id: int, settings: dict, folder: str, remaining_s: float) -> dict:
    """One trial's GLUE run in `folder`, reporting every epoch's validation score to the trial and stopping when the
    pruner says so or when the next epoch would overrun `remaining_s`; the reference (`reference`) stops at the
    first epoch whose best validation score beats the constant prediction by `MARGIN` (`learned_at`). Runs in the
    sweep's process or a child. Returns the best epoch's validation score (`value`), `pruned`, `cut` (what cut the
    run short, None when its stopping rule ended it), and what the budget's estimates need: wall seconds per epoch
    (evaluation included), the cache's build, the start-up before the first epoch, the encoder's depth."""
    import optuna

    from tf_transfer.core import metrics
    from tf_transfer.studies.glue_settings import GlueSettings
    from tf_transfer.studies.glue_task import GlueTask
    from tf_transfer.training import record, runner

    trial = optuna.trial.Trial(load(url), trial_id)
    task = GlueTask(GlueSettings.from_dict(settings))
    metric, start, state = task.metric, time.time(), {"pruned": False, "best": None, "at": [], "learned_at": None}
    lower = metric in metrics.LOWER_IS_BETTER
    pick = min if lower else max
    is_reference = bool(trial.user_attrs.get("reference"))
    floor = ((trial.study.user_attrs.get("constant") or {}).get("0") or {}).get("score")

    def best_so_far(value: float) -> float:
        # What the run has reached by this epoch (early stopping keeps its best epoch), not the epoch's own score.
        state["best"] = value if state["best"] is None else pick(state["best"], value)
        return state["best"]

    earlier = record.read_summary(folder)
    done_before = len((earlier or {}).get("epochs", []))
    for epoch_record in (earlier or {}).get("epochs", []):  # a resumed run: its finished epochs count at their rungs
        value = best_so_far(epoch_record["val"][metric])
        if not trial.user_attrs.get("seed_round") and not is_reference:
            trial.report(value, epoch_record["epoch"])

    def after_epoch(epoch_record: dict) -> bool:
        elapsed = time.time() - start
        state["at"].append(elapsed)
        trial.set_user_attr("train_s", elapsed)
        best = best_so_far(epoch_record["val"][metric])
        if is_reference and floor is not None and (floor - best if lower else best - floor) >= MARGIN:
            state["learned_at"] = epoch_record["epoch"]
            epoch_record["sweep"] = "reference"
            return True
        if report_epoch(trial, best, epoch_record["epoch"], task.max_epochs):
            state["pruned"] = True
            epoch_record["sweep"] = "pruned"
            return True
        if elapsed + 1.1 * _epoch_wall(state["at"], epoch_record["epoch_time_s"]) > remaining_s:
            epoch_record["sweep"] = "budget"
            return True
        return False

    task.after_epoch = after_epoch
    return _trial_result(runner.run(task, folder), metric, state, done_before, start)


def _trial_result(summary: dict, metric: str, state: dict, done_before: int, start: float) -> dict:
    """`train_trial`'s answer from the run's final summary and what its epochs' hook saw."""
    epochs = summary["epochs"]
    best = next((e for e in epochs if e["epoch"] == summary.get("best_epoch")), None)
    pruned = state["pruned"] or any(e.get("sweep") == "pruned" for e in epochs)
    cut = next((e["sweep"] for e in reversed(epochs) if e.get("sweep")), None)
    wall = _epoch_wall(state["at"], epochs[done_before]["epoch_time_s"]) if len(epochs) > done_before else None
    built = summary.get("cache_build_s") or 0.0
    return {"value": best["val"][metric] if best else None, "pruned": pruned, "cut": cut,
            "learned_at": state["learned_at"], "epoch_time_s": wall, "epochs": len(epochs),
            "cache_build_s": summary.get("cache_build_s"), "num_layers": summary.get("num_layers"),
            "startup_s": max(state["at"][0] - wall - built, 0.0) if state["at"] and wall else None,
            "elapsed_s": time.time() - start}


def _epoch_wall(marks: list, first_epoch_s: float) -> float:
    """Wall seconds per epoch, its evaluation included: the longest gap between two epochs' ends, or the first
    epoch's training time while only one has ended."""
    gaps = [b - a for a, b in zip(marks, marks[1:])]
    return max(gaps) if gaps else first_epoch_s
