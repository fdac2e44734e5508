"""The sweep's seed round: which candidates that ran at seed 0 run again at more seeds (`candidates`), what that is
expected to cost (`cost`), and queueing it once (`queue`). `sweep_search.run_sweep` decides when."""

from __future__ import annotations


def candidates(study, top: int) -> list:
    """The best seed-0 trials that ran to their stopping rule (never one cut by the budget) and beat the constant
    prediction on validation (where it is known), each setting at its best rate (`configuration`): `top` of them,
    less the candidates queued at every seed at once (`early`: full fine-tuning queued first), which are not among
    them. One rate per setting: the seed round compares methods and depths, each at the rate seed 0 chose (as a
    paper picks each method's rate on dev, then runs seeds). On the first-run benchmark's STS-B and SST-5 files both
    of LoRA's rates ended among the best 3 at seed 0: their seeds took the place of another setting's, and minutes
    the 30-minute budget did not have."""
    import optuna

    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    floor = ((study.user_attrs.get("constant") or {}).get("0") or {}).get("score")
    early = study.user_attrs.get("early") or []
    found = study.user_attrs.get("candidates") or {}
    completed = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                 if t.params["seed"] == 0 and not t.user_attrs.get("cut") and t.params["candidate"] not in early
                 and (floor is None or (t.value > floor if maximize else t.value < floor))]
    best, taken = [], {configuration(name, found) for name in early}
    for trial in sorted(completed, key=lambda t: t.value, reverse=maximize):
        setting = configuration(trial.params["candidate"], found)
        if setting not in taken:
            best.append(trial)
            taken.add(setting)
    return best[:max(top - len(early), 0)]


def configuration(name: str, found: dict) -> tuple:
    """Candidate `name`'s settings in `found` but its rate: what the seed round takes once, at its best rate (a
    candidate whose settings name no rate is a setting of its own).

    >>> found = {"freeze_k2_lr0.0003": {"trainable_layers": 2, "cache_frozen": True, "lr": 3e-4},
    ...          "freeze_k2_lr0.0001": {"trainable_layers": 2, "cache_frozen": True, "lr": 1e-4}}
    >>> configuration("freeze_k2_lr0.0003", found) == configuration("freeze_k2_lr0.0001", found)
    True
    """
    settings = found.get(name) or {}
    if "lr" not in settings:
        return (("candidate", name),)
    return tuple(sorted((key, str(value)) for key, value in settings.items() if key != "lr"))


def cost(study, top: int, seeds: int) -> float:
    """The seed round's estimated seconds, were it queued now: each chosen candidate's seed-0 run without its cache
    builds (`sweep_estimate.seed_round_s`), once per seed."""
    from tf_transfer.studies.sweep import sweep_estimate

    return (seeds - 1) * sum(sweep_estimate.seed_round_s(t) for t in candidates(study, top))


def queue(study, top: int, seeds: int, running: int = 0) -> bool:
    """Queues seeds 1..seeds-1 of the `top` best candidates (`candidates`), each once; False when none is new (all
    queued already, or none qualifies). `running`: seed-0 runs still training that may yet be among the best; only
    the candidates they cannot displace are queued now (the best `top - running` of those left), so that an idle
    worker starts the seed round, and the rest once they end."""
    from tf_transfer.studies.sweep import sweep_storage

    if seeds <= 1:
        return False
    best = [t.params["candidate"] for t in candidates(study, top)]
    slots = max(top - len(study.user_attrs.get("early") or []), 0)
    queued = study.user_attrs.get("seed_round") or []
    # One rate per setting here too: a setting already seeded at one rate is not seeded at another that ended better
    # later (its seeds would take the place of another setting's, and minutes the budget may not have).
    found = study.user_attrs.get("candidates") or {}
    seeded = {configuration(name, found) for name in queued}
    chosen = [name for name in best[:max(slots - running, 0)] if configuration(name, found) not in seeded]
    if not chosen:
        return False
    study.set_user_attr("seed_round", queued + chosen)
    ahead = f"seed_round_{len(queued)}"  # marks this batch, which may have to go before the waiting ones
    for name in chosen:
        for seed in range(1, seeds):
            study.enqueue_trial({"candidate": name, "seed": seed},
                                user_attrs={"queued": True, "seed_round": True, ahead: True})
    # A candidate that ended above every one whose seed-round runs still wait goes first: the budget may not reach
    # the end of the queue, and the best candidate's seeds matter most.
    # Ranked by setting: a setting's seeds, queued at the rate first seen, keep the place of its best rate.
    rank = {configuration(name, found): i for i, name in enumerate(best)}
    waiting = {configuration(sweep_storage.key_of(t)[0], found) for t in study.get_trials(deepcopy=False)
               if t.state.name == "WAITING" and t.user_attrs.get("seed_round") and not t.user_attrs.get("early")
               and not t.user_attrs.get(ahead)}
    if waiting and all(rank[configuration(chosen[0], found)] < rank.get(setting, len(best)) for setting in waiting):
        sweep_storage.defer_waiting(study, until=ahead)
    return True


def join(study, top: int, seeds: int) -> bool:
    """Once the seed round has begun (`queue`d), a seed-0 run that ended among the best since joins it at once,
    ahead of the waiting ones where it ranks above them all, rather than when the queue is empty: the budget may not
    reach the end of the queue (on STS-B the best candidate at seed 0 ended while the third's seeds waited, and its
    own did not fit). True where something was queued."""
    return bool(study.user_attrs.get("seed_round")) and queue(study, top, seeds, ranked_running(study))


def ranked_running(study) -> int:
    """Seed-0 runs still training that may yet be among the seed round's `candidates` (not full fine-tuning's
    queued at every seed, nor the reference)."""
    early = study.user_attrs.get("early") or []
    return sum(1 for t in study.get_trials(deepcopy=False) if t.state.name == "RUNNING" and t.params.get("seed") == 0
               and t.params.get("candidate") not in early and not t.user_attrs.get("reference"))
