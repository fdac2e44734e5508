"""A budgeted sweep over training methods that recommends what to train: Optuna's ask-and-tell interface drives GLUE
runs epoch by epoch, and its successive-halving pruner stops the weaker candidates early.

First the reference (full fine-tuning at its larger rate) trains until its best validation score beats the constant
prediction's by a point: that epoch r is the first rung (where full fine-tuning is queued first, its seed 0 run measures
r as it goes on, while the other workers start its further seeds; else the other workers start the next candidates
meanwhile, whose reports wait for r: `sweep_trial`). Then every candidate (a method, its depth or rank, a learning rate:
`candidates`) starts as a trial at seed 0, cheapest first; after each epoch the run reports its best validation score so
far (`trial.report`) and asks whether to go on (`trial.should_prune`): at epochs r, 3r, 9r, ... only the best third of
the trials that reached that epoch continue (a run at its last epoch has ended anyway). Then the best `top` candidates
that ran to their stopping rule, each setting at its best rate, run again at further seeds (the seed round:
`sweep_seed_round`). No trial starts whose estimated cost (`sweep_estimate`) does not fit in the budget left (training
wall time, summed over its trials), the seed round is queued as soon as it and the next candidate would not both fit
beside the running trials' rest, and a run that would overrun stops after its last epoch that fits. The recommendation
(`recommend`, one rule over finished runs, which applies to any study's runs as well: `sweep_rule`) counts only runs
that ended by their stopping rule, on at least two seeds: of the candidates that beat the constant prediction on
validation, the cheapest (CPU seconds to the stopping rule, cache build included) whose seed-paired 95% interval of the
difference to the best stays within a point of it.

The study lives in SQLite (`sweep.db` in the sweep's folder) or on any SQL server (`storage`), and is the sweep's
queue, record and budget (`sweep_storage`): a killed sweep continues where it was (a trial whose process died is
run again, and its run resumes from its last finished epoch), and several processes or machines work on one sweep
and write the same report. A trial's run is `sweep_trial.train_trial`.

Example:

>>> from tf_transfer.studies.sweep import sweep_search as sweep
>>> sweep.parse_budget("30m"), sweep.parse_budget("1h30m"), sweep.parse_budget("90s")
(1800.0, 5400.0, 90.0)
>>> sorted(sweep.candidates(["bitfit"], num_layers=6))
['bitfit_kall_lr0.001', 'bitfit_kall_lr0.005']
"""

from __future__ import annotations

import os
import random
import re
import time
from typing import Callable, Optional, Sequence

from tf_transfer.core.errors import TransferError
from tf_transfer.models import freezing, methods
from tf_transfer.studies.sweep import sweep_estimate, sweep_rung, sweep_seed_round, sweep_storage
from tf_transfer.studies.sweep.sweep_pruner import (REDUCTION_FACTOR,  # noqa: F401 (every process loads it: `load`)
                                                    pruner_of_sweeps)
# The recommendation (one rule over finished runs) and the constant prediction every candidate must beat.
from tf_transfer.studies.sweep.sweep_rule import (MARGIN, MIN_SEEDS, Run, constant_prediction, recommend,  # noqa: F401
                                                   run_of)

WORKER = "TF_TRANSFER_SWEEP_WORKER"  # set in the workers `run` starts: their number, then their deadline


def worker_of_environment() -> tuple:
    """`(number, deadline)` of a worker the sweep command started (`sweep_session`), or of a run it trains, else
    `(None, None)`."""
    given = os.environ.get(WORKER)
    if not given:
        return None, None
    number, deadline = given.split()
    return int(number), float(deadline)


def said(line: str) -> str:
    """A `[sweep]` line as this process says it: `[sweep w1]` from the worker on the second core or a run it
    trains, which write into the same terminal."""
    worker = worker_of_environment()[0]
    return line.replace("[sweep]", f"[sweep w{worker}]") if worker else line


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


def candidates(names: Sequence[str], num_layers: int, lrs: Optional[Sequence[float]] = None,
               options: Optional[dict] = None) -> dict:
    """`{name: settings overrides}`: each method's `sweep_candidates` (freezing: full fine-tuning and the last 1, 2
    and L/2 blocks over the cache; LoRA: each rank of `options["lora_ranks"]` on every block and on the last 2 over
    the cache; BitFit: every block), each at the method's rates (or `lrs`). `options`: the methods' sweep options
    (`methods.registry.sweep_options`), their defaults where not given."""
    check_methods(names)
    given = {flag: [kind(value) for value in default]
             for flag, (default, _, kind) in methods.registry.sweep_options().items()}
    given.update(options or {})
    found = {}
    for name in names:
        for overrides, rates in methods.get(name).sweep_candidates(num_layers, given):
            for lr in (lrs or rates):
                settings = {**overrides, "lr": float(lr)}
                found[candidate_name(settings)] = settings
    # Cheapest first: successive halving lets the first run of a rung through unopposed, so the costly candidates
    # should meet a standard set by cheap ones and be pruned after one epoch.
    return dict(sorted(found.items(), key=lambda item: sweep_estimate.relative_cost(item[1], num_layers)))


def check_methods(names: Sequence[str]) -> None:
    """`TransferError` unless `names` names some of the methods the sweep tries (`methods.registry.in_sweep`: those
    with candidates; adaptive freezing decides k itself, and its cost is not a fixed depth's)."""
    swept = methods.registry.in_sweep()
    unknown = [m for m in names if m not in swept]
    if unknown or not names:
        pointer = (f" (--method={unknown[0]} gives the sweep no candidates: run it with tf_transfer.glue)"
                   if unknown and unknown[0] in methods.names() else "")
        raise TransferError(f"--methods: {unknown[0] if unknown else 'none'!r} is not a method: use some of "
                            f"{', '.join(swept)}{pointer}")


def run_folder(sweep_dir: str, candidate: str, seed: int) -> str:
    return os.path.join(sweep_dir, candidate, f"seed{seed}")


def candidate_name(settings: dict) -> str:
    """`method[_r<rank>]_k<depth>_lr<rate>`: a candidate's name, and its run folder's."""
    return f"{methods.of(settings).candidate_tag(settings)}_k{settings['trainable_layers']}_lr{settings['lr']:g}"


# --- the Optuna study ------------------------------------------------------------------------------------------------

def open_study(sweep_dir: str, base: dict, make_candidates: Callable, budget_s: float,
               storage: Optional[str] = None, lower_is_better: bool = False, constant: Optional[dict] = None,
               name: Optional[str] = None, identity: Optional[dict] = None,
               heartbeat_s: int = sweep_storage.HEARTBEAT_S, command: Optional[str] = None, log: Callable = print,
               workers: int = 1, retry_s: float = sweep_storage.RETRY_S, order: Optional[Callable] = None,
               seeds: int = 1):
    """Creates the sweep's Optuna study `name` on `storage` (default SQLite in `sweep_dir`), or joins it (a rerun,
    another process or machine): its creator queues the reference (`reference`) first where the constant
    prediction's validation score at seed 0 is known (`constant`, else `constant_prediction` of `base`), then every
    candidate of `make_candidates()` once at seed 0 (`sweep_storage.create_or_join`), cheapest first or in the order
    `order(found, reference)` gives (the session's `sweep_plan.order`: full fine-tuning first where the budget
    compares it). Full fine-tuning queued first is queued at its further `seeds` too, as seed-round runs (`early`):
    every answer is compared with it, and they fill the workers while its seed 0 runs; its seed 0 is never pruned
    and ranks nothing (`unpruned`: at an early rung it would be the bar the others must clear, and full
    fine-tuning learns more per epoch than the cheaper candidates that match it in the end), and it measures the
    first rung as it goes on (`sets_rung`: no reference run, whose epoch it would repeat). A sweep keeps its settings
    and candidates (`identity`: what every process on it must give alike; default `base`); `budget_s` replaces the
    budget it had (a rerun with a larger budget goes on), `workers` the number of processes of this machine that
    train its trials at once (the report's); every call on the
    storage rides out an outage of up to `retry_s` (`sweep_retries`). Returns `(study, where)`; `where` is `(url,
    name, retry_s)`."""
    os.makedirs(sweep_dir, exist_ok=True)
    url = sweep_storage.url_of(sweep_dir, storage)
    identity = identity or {"base": base}
    name = name or sweep_storage.default_name("sweep", identity)

    def queue(study):
        found = make_candidates()
        study.set_user_attr("candidates", found)
        study.set_user_attr("base", base)
        if command:
            study.set_user_attr("command", command)
        try:
            known = constant or constant_prediction({**base, "seed": 0})
        except TransferError:  # no data to split (e.g. a test's made-up sweep): the first rung is assumed
            known = {"score": None}
        study.set_user_attr("constant", {"0": known})
        _enqueue(study, found, order(found, reference(found)) if order else list(found), known["score"] is not None,
                 seeds, ordered=bool(order))

    study = sweep_storage.create_or_join(url, name, "minimize" if lower_is_better else "maximize", pruner_of_sweeps(),
                                         heartbeat_s, queue, identity, log, retry_s)
    if "first_rung" not in study.user_attrs and not any(t.user_attrs.get("reference") or t.user_attrs.get("sets_rung")
                                                        for t in study.trials):
        study.set_user_attr("first_rung", 1)  # a sweep from before the first rung was measured
    study.set_user_attr("budget_s", budget_s)
    study.set_user_attr("workers", workers)
    study.pruner = pruner_of_sweeps(study.user_attrs.get("first_rung"))
    return study, (url, study.study_name, retry_s)


def _enqueue(study, found: dict, names: list, rung_known: bool, seeds: int, ordered: bool) -> None:
    """Queues the reference (where `rung_known`, the constant prediction's score, lets it measure the first rung)
    and then `names` at seed 0; full fine-tuning first in `names` (`ordered`: by the plan) at every seed, its seed 0
    unpruned and measuring the first rung itself as it goes on (no reference run then: `open_study`)."""
    full_first = ordered and names[0] == reference(found) and is_full(found[names[0]]) and len(names) > 1
    if not rung_known:
        study.set_user_attr("first_rung", 1)
    elif not full_first:
        study.enqueue_trial({"candidate": reference(found), "seed": 0}, user_attrs={"queued": True, "reference": True})
    for candidate in names:
        first = full_first and candidate == names[0]
        marks = {"unpruned": True, **({"sets_rung": True} if rung_known else {})} if first else {}
        study.enqueue_trial({"candidate": candidate, "seed": 0}, user_attrs={"queued": True, **marks})
        if first:
            study.set_user_attr("early", [candidate])
            for seed in range(1, seeds):
                study.enqueue_trial({"candidate": candidate, "seed": seed},
                                    user_attrs={"queued": True, "seed_round": True, "early": True})


def reference(found: dict) -> str:
    """The candidate whose learning curve sets the first rung: full fine-tuning at its largest rate (the soonest to
    learn), else the first candidate queued (the cheapest)."""
    full = [name for name, s in found.items() if is_full(s)]
    return max(full, key=lambda name: found[name]["lr"]) if full else next(iter(found))


def is_full(settings: dict) -> bool:
    """Whether a candidate is full fine-tuning (the default method on every block)."""
    return methods.name_of(settings) == methods.DEFAULT and settings["trainable_layers"] == freezing.ALL


def load(where: tuple):
    """The sweep's study at `where` (`(url, name[, retry_s])`), as another process (a trial's child) reads it, with
    the pruner of its first rung."""
    study = sweep_storage.load(*where)
    study.pruner = pruner_of_sweeps(study.user_attrs.get("first_rung"))
    return study


spent_s = sweep_storage.spent_s


def run_sweep(study, where: tuple, sweep_dir: str, train_trial: Callable, top: int = 3, seeds: int = 3,
              log: Callable = print, deadline: Optional[float] = None) -> str:
    """Works through the queue until it is empty and the seed round is queued and run, or the budget is spent, and
    every trial of the sweep (other processes' too) has ended; returns why it ended ("done" or "budget").
    `train_trial(where, trial_id, settings, folder, keep_s)` trains one trial's run, leaving `keep_s` of the budget
    unspent, and returns `{"value", "pruned", "epoch_time_s", "epochs", ...}`.

    No trial starts whose estimated cost (`sweep_estimate.estimate_s`: to its next rung, or a seed-round run's whole
    run) does not fit the budget left (running trials' reservations spent); once the next seed-0 trial and the seed
    round of the best so far would not both fit beside the running trials' rest (`_reserve`), the seed round is
    queued at once and the candidates not reached wait behind it. `deadline` (a `time.time()`): this process starts
    no trial that would end after it, and its trials stop after their last epoch that ends before it (`train_trial`'s
    `deadline`), so that a machine's workers end together within its wall-time budget."""
    found, base = study.user_attrs["candidates"], study.user_attrs["base"]
    while True:
        sweep_storage.recover(study, log)
        budget_s = study.user_attrs["budget_s"]
        remaining = budget_s - sweep_storage.committed_s(study)
        trials = study.get_trials(deepcopy=False)
        waiting = [t for t in trials if t.state.name == "WAITING"]
        running = any(t.state.name == "RUNNING" for t in trials)
        if remaining <= 0 or not waiting:
            if running:
                if remaining > 0 and sweep_seed_round.queue(study, top, seeds, sweep_seed_round.ranked_running(study)):
                    continue  # this idle worker starts the seed round of the candidates the running ones cannot oust
                time.sleep(2)  # another process's trial: it may free budget, or end and join the seed round
                continue
            if remaining <= 0:
                return "budget"
            if not sweep_seed_round.queue(study, top, seeds):
                return "done"
            continue
        following = min(waiting, key=lambda t: t.number)
        if sweep_seed_round.join(study, top, seeds) or sweep_rung.holds_back(
                study, following, ranked(following), waiting, running, int(base.get("max_epochs", 9)), log):
            continue  # a seed-0 run's seeds joined the seed round; or it waits for the first rung or the reference
        study.pruner = pruner_of_sweeps(study.user_attrs.get("first_rung"))
        cost = sweep_estimate.estimate_s(study, found, following)
        reserve = _reserve(study, following, cost, remaining, top, seeds, log)
        if reserve is None:
            continue  # the seed round was queued ahead of the candidates not reached
        late = deadline is not None and cost is not None and time.time() + cost > deadline
        if cost is not None and (cost > remaining or late):
            if _passed_over(study, following, waiting, running, top, seeds):
                continue
            left = (f"{max(deadline - time.time(), 0) / 60:.1f} min to this worker's deadline" if late else
                    f"{remaining / 60:.1f} min of training time left")
            log(f"[sweep] {left}: too little for the next trial ({cost / 60:.1f} min estimated)")
            return "budget"
        taken = sweep_storage.take(study, sorted(found))
        if taken is None:
            continue
        trial = taken[0]
        if trial.number != following.number:  # another process took the one estimated
            cost = sweep_estimate.estimate_s(study, found, study.get_trials(deepcopy=False)[trial.number])
        if cost is not None and not sweep_storage.reserve(study, trial, cost, budget_s):
            sweep_storage.give_way(study, trial)  # trials of other processes reserved the budget meanwhile
            time.sleep(1 + random.random())
            continue
        _run_trial(study, where, sweep_dir, train_trial, taken, reserve, log, deadline)


def _passed_over(study, following, waiting: list, running: bool, top: int, seeds: int) -> bool:
    """For the next trial, which does not fit: True where the sweep goes on without it for now. A later trial may
    fit (a cheap candidate behind full fine-tuning's last seed): this one waits behind it, until a trial ends
    (`_ended`) and the estimates and the budget left change; or another process's trial may free budget; or, where
    nothing waiting fits, the seed round may."""
    ended = _ended(study)
    if any(t.number != following.number and t.user_attrs.get("unfitted") != ended for t in waiting):
        sweep_storage.defer_first(study, following.number, {"unfitted": ended})
        return True
    if running:
        time.sleep(2)
        return True
    return sweep_seed_round.queue(study, top, seeds)


def _ended(study) -> int:
    """How many trials have run and ended (completed or pruned): what changes the budget's estimates."""
    import optuna

    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,
                                                        optuna.trial.TrialState.PRUNED)))


def _run_trial(study, where: tuple, sweep_dir: str, train_trial: Callable, taken: tuple, reserve: float,
               log: Callable, deadline: Optional[float] = None) -> None:
    """Trains one taken trial with its heartbeat on and records how it ended: told to the study with its run's
    record; queued again where its training process died; failed, its error kept, where its run failed."""
    import optuna
    from concurrent.futures.process import BrokenProcessPool

    trial, name, seed = taken
    base, max_epochs = study.user_attrs["base"], int(study.user_attrs["base"].get("max_epochs", 9))
    settings = {**base, **study.user_attrs["candidates"][name], "seed": seed}
    # One frozen-prefix cache per depth on disk, built by the first candidate that needs it and read by every other
    # (each rate, LoRA over the same blocks, every seed: a seed's training and validation splits read one cache of
    # the file's examples, `cache_pool.pool`; a rerun): a cache's key is its data, depth and preset, so what a run
    # computes is the same; only its build is not paid again.
    settings["cache_dir"] = settings.get("cache_dir") or os.path.join(sweep_dir, "cache")
    is_reference = bool(trial.user_attrs.get("reference"))
    # The reference's run is full fine-tuning's seed 0 begun: it pauses where it learned, and that candidate's
    # seed-0 trial resumes it from there (not training its first epochs again), ranked by them at once.
    folder = run_folder(sweep_dir, name, seed)
    remaining = study.user_attrs["budget_s"] - sweep_storage.committed_s(study, but=trial.number)
    log(f"[sweep] {'the reference, ' if is_reference else ''}{name} seed {seed}: {remaining / 60:.1f} min of "
        f"training time left -> {folder}")
    start = time.time()
    try:
        with sweep_storage.heartbeat(study, trial):
            try:  # a seed-0 run that goes on past its first rung stops before it eats into the seed round's share
                result = train_trial(where, trial._trial_id, settings, folder, reserve,
                                     **({"deadline": deadline} if deadline is not None else {}))
                ended = time.time()  # what follows is the sweep's record of the run, not the run
            except BrokenProcessPool as e:  # killed (the OOM killer, a signal): its checkpoint is still there
                _keep_run(trial, folder)
                sweep_storage.retry(study, trial, f"its training process died ({e or 'killed'})", log)
                return
            except Exception as e:
                _stop_sweep_on(e, folder)
                # A failed run must not stop the sweep: its error is kept beside it.
                _keep_run(trial, folder)
                trial.set_user_attr("error", f"{type(e).__name__}: {e}")
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                log(f"[sweep] {name} seed {seed} failed: {type(e).__name__}: {e}")
                return
            _keep_run(trial, folder, result.get("pruned_at"))
            _tell(study, trial, name, result, start, ended, max_epochs, log)
            if not is_reference:  # the reference's end is the first rung's line (`sweep_rung.set_first_rung`)
                log(ended_line(name, seed, result, (trial.user_attrs.get("run") or {}).get("metric"), ended - start))
    except optuna.exceptions.UpdateFinishedTrialError:
        log(f"[sweep] {name} seed {seed}: another process took this one for dead (no heartbeat for "
            f"{sweep_storage.GRACE_BEATS} beats) and queued its trial again; its run stays in {folder}")


def ended_line(name: str, seed: int, result: dict, metric: Optional[str], took_s: float) -> str:
    """The sweep's line when a candidate's run has ended: how (done by its own stopping rule, stopped by successive
    halving, cut by the budget), after how many epochs, its best validation score and the wall time it took.

    >>> ended = {"pruned": True, "epochs": 1, "value": 0.468}
    >>> print(ended_line("freeze_k2_lr0.0003", 0, ended, "accuracy", 82.3))  # doctest: +NORMALIZE_WHITESPACE
    [sweep] freeze_k2_lr0.0003 seed 0: stopped by successive halving after 1 epoch (best validation accuracy 0.468),
    1.4 min
    """
    how = "stopped by successive halving" if result.get("pruned") else \
        "cut by the budget" if result.get("cut") == "budget" else "done"
    epochs = result.get("epochs") or 0
    score = "no score" if result.get("value") is None else f"best validation {metric or 'score'} {result['value']:.3f}"
    return (f"[sweep] {name} seed {seed}: {how} after {epochs} epoch{'s' * (epochs != 1)} ({score}), "
            f"{took_s / 60:.1f} min")


def _stop_sweep_on(error: Exception, folder: str) -> None:
    """Raises what stops the whole sweep, not one trial: the storage gone for good (`StorageUnreachable`) or a full
    disk, which every next trial would meet too (one line; the trial is left running, and a rerun's `recover`
    queues it again to resume from its last finished epoch)."""
    from tf_transfer.studies.sweep import sweep_retries

    if isinstance(error, sweep_retries.StorageUnreachable):
        raise error
    if sweep_retries.is_no_space(error):
        if isinstance(error, TransferError):  # the run's own line
            raise error
        raise sweep_retries.no_space(getattr(error, "filename", None) or folder, "a trial's run",
                                     "its last finished epoch is kept") from None


def _keep_run(trial, folder: str, pruned_at: Optional[int] = None) -> None:
    """Keeps the run's record (`sweep_storage.run_record`) in its trial, for any machine's report, with the epoch
    at which a resumed run was pruned where that was one it had already trained (`pruned_at`)."""
    from tf_transfer.training import record, run_record

    try:
        kept = sweep_storage.run_record(run_record.read_summary(folder))
    except record.UnreadableRecord:
        return
    if kept and pruned_at:
        kept["pruned_at"] = pruned_at
    trial.set_user_attr("run", kept)


def _reserve(study, following, cost, remaining: float, top: int, seeds: int, log: Callable):
    """The share of the budget kept for the seed round while seed-0 trials run (0 once it is queued); None where the
    next trial and the seed round would not both fit in what is left once the running trials have run to their
    end (`sweep_estimate.rest_s`: `remaining` counts only their next epoch), so the seed round has just been queued
    ahead of it. (On Quora, counted so, full fine-tuning's seed 0 started beside the last 3's and was cut by the
    budget after 2 epochs, before the rung that would have ranked it, and the seed round's runs did not fit.)"""
    if following.user_attrs.get("seed_round") or study.user_attrs.get("seed_round") or not cost:
        return 0.0
    reserve = sweep_seed_round.cost(study, top, seeds)
    left = remaining - sweep_estimate.rest_s(study, study.user_attrs["candidates"])
    if reserve and cost + reserve > left and sweep_seed_round.queue(study, top, seeds):
        log(f"[sweep] {max(left, 0) / 60:.1f} min of training time left after the running trials: kept for the "
            f"seed round ({reserve / 60:.1f} min estimated); the candidates not reached wait behind it")
        sweep_storage.defer_waiting(study, until="seed_round")
        return None
    return reserve


def ranked(trial) -> bool:
    """Whether a trial's run reports to the pruner (and so must wait for the first rung): not the reference, a
    seed-round run, nor full fine-tuning's seed 0 queued first (`unpruned`: `report_epoch`)."""
    return not any(trial.user_attrs.get(mark) for mark in ("reference", "seed_round", "unpruned"))


def _tell(study, trial, name: str, result: dict, start: float, ended: float, max_epochs: int,
          log: Callable) -> None:
    """Records a finished trial (its run ended at `ended`): what the budget's estimates need, and its state (the
    reference: the first rung)."""
    import optuna

    # The whole run's wall time, start-up included, from when its trial was taken (as the run counts what it spent),
    # and what it spent after its last epoch's reservation (the run's `train_s` then, written by its own process).
    last_epoch_s = study._storage.get_trial(trial._trial_id).user_attrs.get("train_s") or 0.0
    spent = ended - min(trial.user_attrs.get("started_at") or start, start)
    trial.set_user_attr("train_s", spent)
    if last_epoch_s > 0.0:  # an epoch trained in this try
        trial.set_user_attr("tail_s", spent - last_epoch_s)
    for key in ("epoch_time_s", "epochs", "cache_build_s", "cache_time_s", "startup_s", "cut", "num_layers"):
        trial.set_user_attr(key, result.get(key))
    if result.get("startup_s") is not None and result.get("elapsed_s") is not None:
        # A run in a child process: its start-up includes starting the process, which only this one sees.
        spawn = max(ended - start - result["elapsed_s"], 0.0)
        trial.set_user_attr("startup_s", result["startup_s"] + spawn)
    if trial.user_attrs.get("sets_rung") and "first_rung" not in study.user_attrs:
        sweep_rung.set_first_rung(study, name, result, max_epochs, log, "its seed 0")  # ended, unlearned
    if trial.user_attrs.get("reference"):
        sweep_rung.set_first_rung(study, name, result, max_epochs, log)
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)  # a measurement, never a candidate's run
    elif result["pruned"]:
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    elif result["value"] is None:
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    else:
        study.tell(trial, result["value"])


def report_epoch(trial, value: float, epoch: int, last_epoch: int) -> bool:
    """Reports a candidate's validation score after `epoch`; True when successive halving prunes it. A run at its
    `last_epoch` has ended anyway: its score is final, never pruned. Runs of the seed round neither report nor get
    pruned: they measure the noise of candidates already chosen; nor does the reference, which measures the first
    rung, nor full fine-tuning's seed 0 queued first (`unpruned`: `open_study`). The reference's candidate is asked
    at the first rung (its score there ranks the others) but not stopped there (`of_the_reference`)."""
    if trial.user_attrs.get("seed_round") or trial.user_attrs.get("reference") or trial.user_attrs.get("unpruned"):
        return False
    trial.report(value, epoch)
    pruned = trial.should_prune()
    return epoch < last_epoch and pruned and not (epoch <= trial.study.user_attrs.get("first_rung", 0)
                                                  and of_the_reference(trial))


def of_the_reference(trial) -> bool:
    """Whether `trial` is a run of the candidate whose reference run set the first rung, the epoch at which it had
    just learned. Ranked by that epoch against candidates at larger rates it would be judged by its start (on the
    first-run benchmark's STS-B file, 2026-11-30, full fine-tuning was pruned there after epoch 1, where run to its
    own end it scored best); it is ranked from the next rung on, as the plan prices it (`sweep_plan._goes_on`)."""
    reference = trial.study.user_attrs.get("reference") or {}
    return reference.get("candidate") is not None and trial.params.get("candidate") == reference["candidate"]
