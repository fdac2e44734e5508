"""The sweep's first rung: the epoch at which the run that measures it (the reference, or full fine-tuning's seed 0
queued first) beat the constant prediction by `MARGIN` (`learned`, `set_first_rung`), and what the workers do
until it is known (`holds_back`, `await_reference`, `rung_known`; the reference's run is full fine-tuning's seed-0
run begun, which that trial resumes). `sweep_search.run_sweep` and `sweep_trial.train_trial` use it."""

from __future__ import annotations

import time
from typing import Callable

from tf_transfer.studies.sweep import sweep_storage
from tf_transfer.studies.sweep.sweep_rule import MARGIN


def await_reference(study, waiting: list, running: bool, max_epochs: int, log: Callable) -> bool:
    """Before the first rung is known: put the run that measures it (the reference, or full fine-tuning's seed 0
    queued first: `sets_rung`) first again where it waits (queued again after a kill); where it fails, go on with
    nothing pruned. True where the caller should look at the queue again; False while that run (or another
    process's trial) trains: the next run that ranks may start, its reports held until the rung is known
    (`sweep_trial.train_trial`), so that no worker idles through the reference's epochs."""
    setter = next((mark for t in waiting for mark in ("reference", "sets_rung") if t.user_attrs.get(mark)), None)
    if setter:
        sweep_storage.defer_waiting(study, until=setter)
        return True
    if running:
        return False
    return rung_known(study, max_epochs, log)  # nothing measures it any more (it failed): nothing is pruned


def holds_back(study, following, ranks: bool, waiting: list, running: bool, max_epochs: int, log: Callable) -> bool:
    """Whether the next trial (`following`; `ranks`: it reports to the pruner) must wait: for the first rung, where
    none is known yet and the run that measures it waits (`await_reference`); or for the reference's run, whose
    folder its run continues (full fine-tuning at seed 0: `sweep_search._run_trial`), while that still trains: then
    it is moved behind the others waiting, or waited for. True where the caller should look at the queue again."""
    if "first_rung" not in study.user_attrs and ranks and await_reference(study, waiting, running, max_epochs, log):
        return True
    references = [t.params.get("candidate") for t in study.get_trials(deepcopy=False)
                  if t.state.name == "RUNNING" and t.user_attrs.get("reference")]
    if sweep_storage.key_of(following)[:2] not in [(name, 0) for name in references]:
        return False
    if len(waiting) > 1:
        sweep_storage.defer_first(study, following.number, {})
    else:
        time.sleep(2)
    return True


def rung_known(study, max_epochs: int, log: Callable = print) -> bool:
    """Whether the first rung is set; where no run that measures it waits or trains any more (it failed), it is set
    to `max_epochs` (nothing is pruned), as `await_reference` does."""
    if "first_rung" in study.user_attrs:
        return True
    setters = [t for t in study.get_trials(deepcopy=False, states=None)
               if t.state.name in ("WAITING", "RUNNING")
               and (t.user_attrs.get("reference") or t.user_attrs.get("sets_rung"))]
    if setters:
        return False
    set_first_rung(study, None, {}, max_epochs, log)
    return True


def learned(study, name: str, epoch: int, best: float, lower_is_better: bool, sets_rung: bool = True,
            log: Callable = print) -> bool:
    """Whether a run that measures the first rung has learned by `epoch` (its best validation score so far `best`):
    `best` beats the constant prediction by `MARGIN`. With `sets_rung` (full fine-tuning's seed 0 queued first,
    which goes on), only where no rung is set yet, and then the first rung is set at `epoch`: the workers that wait
    for it (`await_reference`) go on at once, not when the run ends."""
    floor = ((study.user_attrs.get("constant") or {}).get("0") or {}).get("score")
    margin = None if floor is None else (floor - best if lower_is_better else best - floor)
    if margin is None or margin < MARGIN or (sets_rung and "first_rung" in study.user_attrs):
        return False
    if sets_rung:
        set_first_rung(study, name, {"learned_at": epoch, "epochs": epoch, "value": best}, epoch, log, "its seed 0")
    return True


def set_first_rung(study, name: str, result: dict, max_epochs: int, log: Callable, run: str = "") -> None:
    """The first rung: the epoch at which the reference's best validation score beat the constant prediction by
    `MARGIN`; where it never did, its runs' last epoch (nothing is pruned: no early epoch ranks anything). `run`
    names the run that measured it where that was no reference run ("its seed 0": full fine-tuning's)."""
    learned = result.get("learned_at")
    study.set_user_attr("first_rung", learned or max_epochs)
    study.set_user_attr("reference", {"candidate": name, "learned": bool(learned), "epochs": result.get("epochs"),
                                      "score": result.get("value"), "cut": result.get("cut")})
    log(f"[sweep] the reference {name or '(failed)'}{f' ({run})' if run else ''} " + (
        f"beat the constant prediction at epoch {learned}: the first rung" if learned else
        "was cut by the budget before it beat the constant prediction: nothing is pruned"
        if result.get("cut") == "budget" else "never beat the constant prediction: nothing is pruned"))
