"""What a sweep's trials are expected to cost, from what its earlier trials measured: a queued trial before it starts
(`estimate_s`, which the budget's check compares with what is left), and what the running ones will still spend
beyond what they have reserved (`rest_s`). `sweep_search.run_sweep` reads both; `relative_cost` also orders the
candidates and prices them in the plan (`sweep_plan`), and `cache_of` names the cache a run reads, there and here.

Example:

>>> from tf_transfer.studies.sweep import sweep_estimate
>>> sweep_estimate.relative_cost({"trainable_layers": 2, "cache_frozen": True}, num_layers=6)  # 2 forward, 2 x 2 back
6
>>> sweep_estimate.relative_cost({"trainable_layers": "all"}, num_layers=6)  # every block forward, twice back
18
>>> sweep_estimate.next_rung(first_rung=1, done=1, max_epochs=5)  # a run that trained epoch 1 is next ranked at 3
3
"""

from __future__ import annotations

from typing import Optional

from tf_transfer.models import freezing, methods
from tf_transfer.studies.sweep import sweep_storage


def relative_cost(settings: dict, num_layers: int) -> int:
    """A candidate's work per step in block passes: forward through the blocks that run (the trained ones alone
    over the cache), backward through the trained ones (the method's `backward_passes`: weights' gradients too
    under freezing)."""
    k = settings["trainable_layers"]
    trained = num_layers if k == freezing.ALL else k
    forward = trained if settings.get("cache_frozen") else num_layers
    return forward + trained * methods.of(settings).backward_passes


def cache_of(settings: dict, layers: int) -> Optional[int]:
    """The frozen blocks whose cache a candidate's run reads, or None: the runs of one seed that freeze as many
    share one cache, built by the first (`sweep_search._run_trial`), whatever their method or rate."""
    k = settings["trainable_layers"]
    return layers - int(k) if settings.get("cache_frozen") and k != freezing.ALL else None


def next_rung(first_rung: int, done: int, max_epochs: int) -> int:
    """The first epoch after `done` at which successive halving ranks a run (r, 3r, 9r, ...: `sweep_pruner`), or
    `max_epochs` where none comes before it."""
    rung = max(int(first_rung), 1)
    while rung <= done:
        rung *= 3
    return min(rung, max_epochs)


def continued_epochs(study, trial) -> int:
    """Epochs a trial's run has trained before it starts: full fine-tuning's ranked seed 0 continues the reference's
    run (`sweep_search._run_trial`), whose epochs it does not train again; any other trial, none (full fine-tuning's
    seed 0 queued first, `sets_rung`, measured the first rung in its own run: there was no reference run)."""
    measured = study.user_attrs.get("reference") or {}
    key = sweep_storage.key_of(trial)
    if any(trial.user_attrs.get(mark) for mark in ("reference", "sets_rung")) or key[:2] != (
            measured.get("candidate"), 0):
        return 0
    return int(measured.get("epochs") or 0)


def _shape(settings: dict) -> tuple:
    """What sets a candidate's cost per epoch (its rate and rank hardly do)."""
    return methods.name_of(settings), settings["trainable_layers"], bool(settings.get("cache_frozen"))


def estimate_s(study, found: dict, trial, whole: bool = False) -> Optional[float]:
    """Seconds a trial is expected to take, from what earlier trials measured: a seed-round run, its candidate's
    seed-0 run (start-up to its stopping rule); with `whole`, any run to its epoch cap; any other, start-up, the
    frozen-prefix cache's build, the epochs to the next rung it meets (the reference: one epoch; the first rung,
    or for full fine-tuning's seed 0, which continues the reference's run, the rung after the reference's epochs:
    `continued_epochs`) and the tail after them (`sweep_storage.tail_s`). None before anything was measured.

    Per epoch, runs of the same method, depth and cache (the slowest of them); else any measured run scaled by its
    work per step (`relative_cost`). The cache's build, the same shape's; else a measured one scaled by the frozen
    blocks; else one epoch's; none where a run over as many frozen blocks built it (`_cache_built`). A seed-round
    run, its candidate's seed-0 run less what that run spent building caches (`seed_round_s`).
    Start-up, the longest measured."""
    import optuna

    name = sweep_storage.key_of(trial)[0]
    if name not in found:
        return None
    measured = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("epoch_time_s")
                and t.user_attrs.get("epochs") and t.params.get("candidate") in found]
    if trial.user_attrs.get("seed_round"):
        own = [seed_round_s(t) for t in measured if t.params["candidate"] == name and t.params["seed"] == 0
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
    if settings.get("cache_frozen") and not _cache_built(measured, found, trial, layers):
        built = [t for t in measured if t.user_attrs.get("cache_build_s")]
        same_built = [t.user_attrs["cache_build_s"] for t in built if t in same]
        frozen = max(layers - settings["trainable_layers"], 1) if layers else 1
        cache = (max(same_built) if same_built else
                 frozen * max(t.user_attrs["cache_build_s"] / max(layers - found[t.params["candidate"]]
                                                                  ["trainable_layers"], 1) for t in built)
                 if built and layers else epoch)
    startup = max(t.user_attrs.get("startup_s") or 0.0 for t in measured)
    tail = max(t.user_attrs.get("tail_s") or 0.0 for t in measured)  # its record after its last epoch
    return startup + cache + _epochs(study, trial, whole) * epoch + tail


def _cache_built(measured: list, found: dict, trial, layers: int) -> bool:
    """Whether a run that ended built `trial`'s frozen-prefix cache: one over as many frozen blocks, at any seed (a
    cache's key is its data, depth and preset; every seed's training and validation splits read one cache of the
    file's examples: `cache_pool.pool`, `sweep_search._run_trial`), whose run reads it rather than building it again."""
    name = sweep_storage.key_of(trial)[0]
    frozen = cache_of(found[name], layers)
    return bool(layers) and frozen is not None and any(
        cache_of(found[t.params["candidate"]], layers) == frozen for t in measured)


def seed_round_s(trial) -> float:
    """What a seed-round run of `trial`'s candidate (`trial`: its seed-0 run, ended) is expected to take: that run's
    wall time less what it spent building frozen-prefix caches, which every seed's run of it reads
    (`cache_pool.pool`)."""
    return max((trial.user_attrs.get("train_s") or 0.0) - (trial.user_attrs.get("cache_time_s") or 0.0), 0.0)


def _epochs(study, trial, whole: bool) -> int:
    """The epochs `estimate_s` prices: a seed-round run's (or `whole`: any run's) to the epoch cap, the reference's
    one, any other run's to the next rung it meets; less those its run continues from (`continued_epochs`)."""
    max_epochs = int(study.user_attrs["base"].get("max_epochs", 9))
    if trial.user_attrs.get("reference"):
        return 1
    done = continued_epochs(study, trial)
    if whole or trial.user_attrs.get("seed_round"):
        return max(max_epochs - done, 0)
    return next_rung(study.user_attrs.get("first_rung") or 1, done, max_epochs) - done


def rest_s(study, found: dict) -> float:
    """Seconds the running trials (any process's) are still expected to spend beyond what they have reserved
    (`sweep_storage.committed_s` counts a running trial's next epoch alone): each run to its epoch cap
    (`estimate_s`'s `whole`), less what it has spent or reserved. The reference pauses where it learned: its
    reservation is its run."""
    rest = 0.0
    for t in study.get_trials(deepcopy=False):
        if t.state.name != "RUNNING" or t.user_attrs.get("reference"):
            continue
        expected = estimate_s(study, found, t, whole=True) or 0.0
        rest += max(expected - max(t.user_attrs.get("train_s") or 0.0, t.user_attrs.get("reserved_s") or 0.0), 0.0)
    return rest
