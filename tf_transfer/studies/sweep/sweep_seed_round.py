"""The sweep's seed round: which candidates that ran at seed 0 run again at more seeds (`candidates`), what that is
expected to cost (`cost`), and queueing it once (`queue`). `sweep_search.run_sweep` decides when."""

from __future__ import annotations


def candidates(study, top: int) -> list:
    """The best seed-0 trials that ran to their stopping rule (never one cut by the budget) and beat the constant
    prediction on validation (where it is known): `top` of them, less the candidates queued at every seed at once
    (`early`: full fine-tuning queued first), which are not among them."""
    import optuna

    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    floor = ((study.user_attrs.get("constant") or {}).get("0") or {}).get("score")
    early = study.user_attrs.get("early") or []
    completed = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                 if t.params["seed"] == 0 and not t.user_attrs.get("cut") and t.params["candidate"] not in early
                 and (floor is None or (t.value > floor if maximize else t.value < floor))]
    return sorted(completed, key=lambda t: t.value, reverse=maximize)[:max(top - len(early), 0)]


def cost(study, top: int, seeds: int) -> float:
    """The seed round's estimated seconds, were it queued now: each chosen candidate's seed-0 run, once per seed."""
    return (seeds - 1) * sum(t.user_attrs.get("train_s", 0.0) for t in candidates(study, top))


def queue(study, top: int, seeds: int) -> bool:
    """Queues seeds 1..seeds-1 of the `top` best candidates once; False when it has been queued already or none
    qualifies (`candidates`)."""
    if study.user_attrs.get("seed_round") or seeds <= 1:
        return False
    chosen = [t.params["candidate"] for t in candidates(study, top)]
    if not chosen:
        return False
    study.set_user_attr("seed_round", chosen)
    for name in chosen:
        for seed in range(1, seeds):
            study.enqueue_trial({"candidate": name, "seed": seed}, user_attrs={"queued": True, "seed_round": True})
    return True
