"""A budgeted sweep over training methods that recommends what to train: Optuna's ask-and-tell interface drives GLUE
runs epoch by epoch, and its successive-halving pruner stops the weaker candidates early.

Every candidate (a method, its depth or rank, a learning rate: `candidates`) starts as a trial at seed 0; after each
epoch the run reports its best validation score so far (`trial.report`) and asks whether to go on
(`trial.should_prune`): at epochs 1, 3, 9, ... only the best third of the trials that reached that epoch continue
(a run at its last epoch has ended anyway). When every candidate has run
or been pruned, the best `top` candidates run again at further seeds, so that the seed noise is measured. The sweep
stops starting trials when its budget (training wall time, summed over its trials) is spent, and a run that would
overrun it stops after its last epoch that fits. The recommendation is the candidate with the least time per epoch
whose mean validation score is within the seed noise (the pooled standard deviation over seeds) of the best.

The study lives in SQLite (`sweep.db` in the sweep's folder; any SQLAlchemy URL with `storage`), so a killed sweep
continues where it was (a trial whose process died is run again, and its run resumes from its last finished epoch)
and several processes or machines can work on one sweep.

Example:

>>> from tf_transfer.studies import sweep
>>> sweep.parse_budget("30m"), sweep.parse_budget("1h30m"), sweep.parse_budget("90s")
(1800.0, 5400.0, 90.0)
>>> sweep.recommend({"a": [0.80, 0.82], "b": [0.81, 0.79]}, {"a": 30.0, "b": 10.0})["candidate"]
'b'
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import statistics
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
                found[_name(settings)] = settings
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


def _name(settings: dict) -> str:
    method = settings.get("method", "freeze")
    rank = f"_r{settings['lora_rank']}" if method == "lora" else ""
    return f"{method}{rank}_k{settings['trainable_layers']}_lr{settings['lr']:g}"


def recommend(scores: dict, epoch_times: dict, lower_is_better: bool = False) -> Optional[dict]:
    """The candidate with the least time per epoch whose mean score is within the seed noise of the best mean.

    `scores`: `{candidate: [score per seed]}` of completed runs; `epoch_times`: `{candidate: seconds per epoch}`.
    The noise is the standard deviation over seeds pooled over the candidates run at several seeds (None when none
    was: then only the best qualifies). Returns `{candidate, mean, best, best_mean, noise, epoch_time_s, within}`.
    """
    means = {name: statistics.fmean(values) for name, values in scores.items() if values}
    if not means:
        return None
    sign = -1 if lower_is_better else 1
    best = max(means, key=lambda name: sign * means[name])
    repeated = [values for values in scores.values() if len(values) > 1]
    noise = (math.sqrt(sum(statistics.variance(v) * (len(v) - 1) for v in repeated)
                       / sum(len(v) - 1 for v in repeated)) if repeated else None)
    within = [name for name in means if sign * (means[best] - means[name]) <= (noise or 0.0) + 1e-12]
    chosen = min(within, key=lambda name: (epoch_times.get(name, math.inf), -sign * means[name]))
    return {"candidate": chosen, "mean": means[chosen], "best": best, "best_mean": means[best], "noise": noise,
            "epoch_time_s": epoch_times.get(chosen), "within": sorted(within)}


# --- the Optuna study ------------------------------------------------------------------------------------------------

def _storage(sweep_dir: str, storage: Optional[str]) -> str:
    return storage or "sqlite:///" + os.path.abspath(os.path.join(sweep_dir, "sweep.db"))


def open_study(sweep_dir: str, base: dict, make_candidates: Callable, budget_s: float,
               storage: Optional[str] = None, lower_is_better: bool = False):
    """Creates the sweep's Optuna study (or loads it: a rerun or another process) with every candidate of
    `make_candidates()` queued once at seed 0. A sweep keeps its settings and candidates; `budget_s` replaces the
    budget it had (a rerun with a larger budget goes on)."""
    import optuna

    from tf_transfer.studies import grid

    os.makedirs(sweep_dir, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = _storage(sweep_dir, storage)
    pruner = pruner_of_sweeps()
    direction = "minimize" if lower_is_better else "maximize"
    while not grid.acquire_lock(sweep_dir):  # one process queues the candidates; the others wait for it
        time.sleep(0.5)
    try:
        study = optuna.create_study(study_name="sweep", storage=url, direction=direction, pruner=pruner,
                                    load_if_exists=True)
        if "candidates" not in study.user_attrs:
            found = make_candidates()
            study.set_user_attr("candidates", found)
            study.set_user_attr("base", base)
            for name in found:
                study.enqueue_trial({"candidate": name, "seed": 0}, user_attrs={"queued": True})
        elif study.user_attrs["base"] != json.loads(json.dumps(base)):
            raise TransferError(f"{sweep_dir} holds a sweep of other settings: give another --runs_dir to start a "
                                "new one")
        study.set_user_attr("budget_s", budget_s)
    finally:
        grid.release_lock(sweep_dir)
    return study, url


def pruner_of_sweeps():
    """Successive halving at epochs 1, 3, 9, ...: the best third of the trials that reached an epoch go on. Every
    process that reports to the study loads it with this pruner (Optuna does not store it)."""
    import optuna

    return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)


def load(url: str):
    """The sweep's study, as another process (a trial's child) reads it."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name="sweep", storage=url, pruner=pruner_of_sweeps())


def spent_s(study) -> float:
    """Training wall time the sweep has used: each trial's `train_s` (updated after every epoch)."""
    return sum(t.user_attrs.get("train_s", 0.0) for t in study.get_trials(deepcopy=False))


def run_sweep(study, url: str, sweep_dir: str, train_trial: Callable, top: int = 3, seeds: int = 3,
              log: Callable = print) -> str:
    """Works through the queue until it is empty and the seed round is queued and run, or the budget is spent;
    returns why it ended ("done" or "budget"). `train_trial(url, trial_id, settings, folder, remaining_s)` trains one
    trial's run and returns `{"value", "pruned", "epoch_time_s"}`."""
    import optuna

    budget_s = study.user_attrs["budget_s"]
    found, base = study.user_attrs["candidates"], study.user_attrs["base"]
    while True:
        _retry_dead(study)
        remaining = budget_s - spent_s(study)
        if remaining <= 0:
            return "budget"
        states = [t.state for t in study.get_trials(deepcopy=False)]
        if optuna.trial.TrialState.WAITING in states and not _next_fits(study, found, remaining):
            log(f"[sweep] {remaining / 60:.1f} min of the budget left: too little for the next candidate's first epoch")
            return "budget"
        if optuna.trial.TrialState.WAITING not in states:
            if optuna.trial.TrialState.RUNNING in states:
                time.sleep(2)  # another process's trial may still queue the seed round
                continue
            if not _queue_seed_round(study, top, seeds):
                return "done"
            continue
        trial = study.ask()
        if not trial.user_attrs.get("queued"):  # another process took the last queued trial meanwhile
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        name = trial.suggest_categorical("candidate", sorted(found))
        seed = trial.suggest_int("seed", 0, 1000)
        trial.set_user_attr("host", socket.gethostname())
        trial.set_user_attr("pid", os.getpid())
        settings = {**base, **found[name], "seed": seed}
        folder = run_folder(sweep_dir, name, seed)
        log(f"[sweep] {name} seed {seed}: {remaining / 60:.1f} min of the budget left -> {folder}")
        start = time.time()
        try:
            result = train_trial(url, trial._trial_id, settings, folder, remaining)
        except Exception as e:  # a failed run must not stop the sweep: its error is kept beside it
            trial.set_user_attr("error", f"{type(e).__name__}: {e}")
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            log(f"[sweep] {name} seed {seed} failed: {type(e).__name__}: {e}")
            continue
        trial.set_user_attr("train_s", time.time() - start)  # the whole trial's wall time, start-up included
        trial.set_user_attr("epoch_time_s", result["epoch_time_s"])
        trial.set_user_attr("epochs", result.get("epochs"))
        if result["pruned"]:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        elif result["value"] is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, result["value"])


def _shape(settings: dict) -> tuple:
    """What sets a candidate's cost per epoch (its rate and rank hardly do)."""
    return settings.get("method", "freeze"), settings["trainable_layers"], bool(settings.get("cache_frozen"))


def _next_fits(study, found: dict, remaining: float) -> bool:
    """Whether the next queued trial's first epoch (start-up included) fits in `remaining` seconds, judged by trials
    of the same shape that ran; True when none has (no estimate: it runs, and stops after the epoch that fits)."""
    import optuna

    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    queued = min(waiting, key=lambda t: t.number).system_attrs.get("fixed_params", {}).get("candidate")
    if queued is None:
        return True
    first_epochs = [t.user_attrs["train_s"] - (t.user_attrs["epochs"] - 1) * t.user_attrs["epoch_time_s"]
                    for t in study.get_trials(deepcopy=False)
                    if t.user_attrs.get("epochs") and t.params.get("candidate") in found
                    and _shape(found[t.params["candidate"]]) == _shape(found[queued])]
    return not first_epochs or min(first_epochs) <= remaining


def _retry_dead(study) -> None:
    """A running trial of this host whose process is gone was killed: fail it and queue it again (its run folder
    resumes from its last finished epoch)."""
    import optuna

    from tf_transfer.studies import grid

    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        attrs = trial.user_attrs
        if attrs.get("host") == socket.gethostname() and "pid" in attrs and not grid._pid_alive(attrs["pid"]):
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)  # its train_s stays spent
            study.enqueue_trial(trial.params, user_attrs={"queued": True, "retry_of": trial.number})


def _queue_seed_round(study, top: int, seeds: int) -> bool:
    """Queues seeds 1..seeds-1 of the `top` best candidates once; False when it has been queued already."""
    import optuna

    if study.user_attrs.get("seed_round") or seeds <= 1:
        return False
    completed = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                 if t.params["seed"] == 0]
    reverse = study.direction == optuna.study.StudyDirection.MAXIMIZE
    chosen = [t.params["candidate"] for t in sorted(completed, key=lambda t: t.value, reverse=reverse)[:top]]
    study.set_user_attr("seed_round", chosen)
    for name in chosen:
        for seed in range(1, seeds):
            study.enqueue_trial({"candidate": name, "seed": seed}, user_attrs={"queued": True, "seed_round": True})
    return bool(chosen)


def report_epoch(trial, value: float, epoch: int, last_epoch: int) -> bool:
    """Reports a candidate's validation score after `epoch`; True when successive halving prunes it. A run at its
    `last_epoch` has ended anyway: its score is final, never pruned. Runs of the seed round neither report nor get
    pruned: they measure the noise of candidates already chosen."""
    if trial.user_attrs.get("seed_round"):
        return False
    trial.report(value, epoch)
    return epoch < last_epoch and trial.should_prune()


def train_trial(url: str, trial_id: int, settings: dict, folder: str, remaining_s: float) -> dict:
    """One trial's GLUE run in `folder`, reporting every epoch's validation score to the trial and stopping when the
    pruner says so or when the next epoch would overrun `remaining_s`. Runs in the sweep's process or a child."""
    import optuna

    from tf_transfer.core import metrics
    from tf_transfer.studies.glue_settings import GlueSettings
    from tf_transfer.studies.glue_task import GlueTask
    from tf_transfer.training import record, runner

    trial = optuna.trial.Trial(load(url), trial_id)
    task = GlueTask(GlueSettings.from_dict(settings))
    metric, start, state = task.metric, time.time(), {"pruned": False, "best": None}
    pick = min if metric in metrics.LOWER_IS_BETTER else max

    def best_so_far(value: float) -> float:
        # What the run has reached by this epoch (early stopping keeps its best epoch), not the epoch's own score.
        state["best"] = value if state["best"] is None else pick(state["best"], value)
        return state["best"]

    earlier = record.read_summary(folder)
    for epoch_record in (earlier or {}).get("epochs", []):  # a resumed run: its finished epochs count at their rungs
        value = best_so_far(epoch_record["val"][metric])
        if not trial.user_attrs.get("seed_round"):
            trial.report(value, epoch_record["epoch"])

    def after_epoch(epoch_record: dict) -> bool:
        elapsed = time.time() - start
        trial.set_user_attr("train_s", elapsed)
        if report_epoch(trial, best_so_far(epoch_record["val"][metric]), epoch_record["epoch"], task.max_epochs):
            state["pruned"] = True
            epoch_record["sweep"] = "pruned"
            return True
        if elapsed + 1.1 * epoch_record["epoch_time_s"] > remaining_s:
            epoch_record["sweep"] = "budget"
            return True
        return False

    task.after_epoch = after_epoch
    summary = runner.run(task, folder)
    times = [e["epoch_time_s"] for e in summary["epochs"]]
    best = next((e for e in summary["epochs"] if e["epoch"] == summary.get("best_epoch")), None)
    pruned = state["pruned"] or any(e.get("sweep") == "pruned" for e in summary["epochs"])
    return {"value": best["val"][metric] if best else None, "pruned": pruned,
            "epoch_time_s": statistics.fmean(times) if times else None, "epochs": len(times)}
