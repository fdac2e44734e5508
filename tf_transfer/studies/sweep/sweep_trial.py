"""One trial of the sweep: its GLUE run, epoch by epoch, reporting each epoch's validation score to the Optuna trial
and stopping where the pruner, the reference's first rung or the budget says so (`train_trial`). It runs in the
sweep's process or in a child of it, and reads the sweep's budget from the storage after every epoch, so that
trials running at once on several machines never spend more than the budget together.

Example (a trial's run is trained by `sweep`; this is what a resumed run does with its finished epochs):

>>> from tf_transfer.studies.sweep import sweep_trial
>>> sweep_trial.resume_reports(trial, [{"epoch": 1, "val": {"f1": 0.8}}], "f1", max, 9)  # doctest: +SKIP
"""

from __future__ import annotations

import time
from typing import Callable, Optional

from tf_transfer.studies.sweep import sweep_rung, sweep_search as sweep, sweep_storage


def train_trial(where: tuple, trial_id: int, settings: dict, folder: str, keep_s: float,
                deadline: Optional[float] = None) -> dict:
    """One trial's GLUE run in `folder`, reporting each epoch's validation score to the trial; where its own rule
    (`_stopper`) does not end it, it stops where the pruner says so or its next epoch would not fit the budget left
    (less others' spending and reservations, and `keep_s`) or end after `deadline` (its machine's `time.time()`).
    The reference pauses (`PAUSE`: full fine-tuning's seed 0 resumes it) where it learned (`sweep_rung.learned`,
    which also sets the first rung where full fine-tuning's seed 0 went first: `sets_rung`); a ranked run holds its
    scores until the rung is known (`HeldReports`); a resumed run reports its finished epochs again. Returns the best
    epoch's `value`, `pruned` (`pruned_at`: where a resumed run was), `cut` (None: its own rule) and what the
    budget's estimates need: wall seconds per epoch (evaluation included), cache build, start-up, the depth."""
    import optuna

    from tf_transfer.core import metrics
    from tf_transfer.studies.glue.glue_settings import GlueSettings
    from tf_transfer.studies.glue.glue_task import task_for
    from tf_transfer.training import record, runner
    from tf_transfer.training.engine import PAUSE

    study, task = sweep.load(where), task_for(GlueSettings.from_dict(settings))
    trial = optuna.trial.Trial(study, trial_id)
    metric, start, state = task.metric, time.time(), {"pruned": False, "best": None, "at": [], "learned_at": None}
    lower, held = metric in metrics.LOWER_IS_BETTER, HeldReports(study, task.loop.max_epochs)
    is_reference, sets_rung = bool(trial.user_attrs.get("reference")), bool(trial.user_attrs.get("sets_rung"))
    name = sweep_storage.key_of(study._storage.get_trial(trial_id))[0]
    taken = min(trial.user_attrs.get("started_at") or start, start)

    def best_so_far(value: float) -> float:
        # What the run has reached by this epoch (early stopping keeps its best epoch), not the epoch's own score.
        state["best"] = value if state["best"] is None else (min if lower else max)(state["best"], value)
        return state["best"]

    earlier = record.read_summary(folder) or {}
    before = earlier.get("epochs", [])
    pruned_at = resume_reports(trial, before, metric, best_so_far, task.loop.max_epochs, held.report)
    stopper = _stopper(task.loop, earlier)
    state["learned_at"] = _learned_before(study, name, before, metric, lower, sets_rung, is_reference)
    if pruned_at or is_reference and state["learned_at"]:  # pruned, or the reference learned, before it died
        return _ended_before(earlier, pruned_at, state["learned_at"], state["best"], start)

    def after_epoch(epoch_record: dict) -> bool:
        state["at"].append(time.time() - start)
        best = best_so_far(epoch_record["val"][metric])
        epoch_s = epoch_wall(state["at"], epoch_record["epoch_time_s"])
        if (is_reference or sets_rung and state["learned_at"] is None) and sweep_rung.learned(
                study, name, epoch_record["epoch"], best, lower, sets_rung):
            state["learned_at"] = epoch_record["epoch"]
            state["paused"] = is_reference  # it stops here, unfinished: full fine-tuning's seed 0 resumes it
        elif held.report(trial, best, epoch_record["epoch"]):
            state["pruned"] = True
            epoch_record["sweep"] = "pruned"
        last = (state.get("paused") or "sweep" in epoch_record or epoch_record["epoch"] >= task.loop.max_epochs
                or stopper.update(epoch_record["val"][metric], epoch_record["epoch"], lower))
        if not reserve_rest(study, trial, taken, 0.0 if last else epoch_s, epoch_s, keep_s, deadline) and not last:
            epoch_record["sweep"] = "budget"
        return PAUSE if state.get("paused") else epoch_record.get("sweep") is not None

    task.after_epoch, task.print_table = after_epoch, False  # its table: in its summary.json and the sweep's report
    summary = runner.run(task, folder)
    state["pruned"] = state["pruned"] or held.await_rung(trial)  # ended before the first rung was known
    return _trial_result(summary, metric, state, len(before), start)


def say_second_case(study, trial, epoch: int) -> None:
    """Says the second case of the sweep's first line where it comes (`sweep_plan.second_case_line`): `trial`, a
    ranked run of full fine-tuning, was kept by successive halving at `epoch`, its second rung (the first it is
    ranked at: `sweep.of_the_reference`). Printed by the run's own process, at once, with its worker's mark; not
    where the sweep goes on with another budget than the one its first line spoke of (a rerun), nor once another
    machine has run a trial of it: the first line planned one machine's workers, and more may well fit the rest."""
    planned, rung = study.user_attrs.get("plan") or {}, study.user_attrs.get("first_rung")
    if (planned.get("second_case") and rung and epoch == sweep.REDUCTION_FACTOR * rung and sweep.ranked(trial)
            and sweep.of_the_reference(trial) and planned.get("for_budget_s") == study.user_attrs.get("budget_s")
            and not sweep_storage.other_hosts(study)):
        print(sweep.said(planned["second_case"].format(epoch=epoch)), flush=True)


class HeldReports:
    """A ranked run's reports (`sweep.report_epoch`) while the first rung is not known: started while the reference
    measures it (`sweep_rung.await_reference`), the run trains on, and is asked at each rung in order once the rung
    is known, as an unbroken run after the reference would have been; only later. Runs that rank nothing pass
    through (`sweep.ranked`). `last_epoch`: the run's epoch cap (where a failed reference leaves the rung).

    >>> import optuna
    >>> optuna.logging.set_verbosity(optuna.logging.WARNING)
    >>> study = optuna.create_study(direction="maximize")
    >>> study.enqueue_trial({"candidate": "full", "seed": 0}, user_attrs={"reference": True})
    >>> reference, trial = study.ask(), study.ask()  # the reference trains: no rung is known yet
    >>> held = HeldReports(study, last_epoch=5)
    >>> held.report(trial, 0.81, 1), held.report(trial, 0.83, 2), held.waiting
    (False, False, 2)
    >>> study.set_user_attr("first_rung", 1)  # the reference learned at epoch 1
    >>> held.flush(trial), held.waiting, trial.storage.get_trial(trial._trial_id).intermediate_values
    (False, 0, {1: 0.81, 2: 0.83})
    """

    def __init__(self, study, last_epoch: int):
        self.study, self.last_epoch, self._held = study, last_epoch, []

    @property
    def waiting(self) -> int:
        return len(self._held)

    def report(self, trial, value: float, epoch: int) -> bool:
        """Holds or reports the best validation score so far after `epoch` (`sweep.report_epoch`); True where the
        run is pruned."""
        if not sweep.ranked(trial):
            return False
        self._held.append((value, epoch))
        return self.flush(trial)

    def flush(self, trial) -> bool:
        """Reports what is held, in order, where the first rung is known; True where the run is pruned at one."""
        if not sweep_rung.rung_known(self.study, self.last_epoch):
            return False
        self.study.pruner = sweep.pruner_of_sweeps(self.study.user_attrs["first_rung"])
        while self._held:
            value, epoch = self._held.pop(0)
            if sweep.report_epoch(trial, value, epoch, self.last_epoch):
                self._held.clear()
                return True
            say_second_case(self.study, trial, epoch)
        return False

    def await_rung(self, trial) -> bool:
        """For a run that ended with scores held: waits for the first rung, then reports them (they rank it there
        for the runs after it); True where it is pruned at one."""
        while self._held:
            if self.flush(trial):
                return True
            time.sleep(2 if self._held else 0)
        return False


def reserve_rest(study, trial, taken: float, next_epoch_s: float, epoch_s: float, keep_s: float,
                 deadline: Optional[float] = None) -> bool:
    """After an epoch (its score reported): records what the trial has spent since it was taken (`taken`: the
    child's start-up too) and reserves what it will still spend, its next epoch (`next_epoch_s` and a tenth more; 0
    where the run ends here) and its tail (`sweep_storage.tail_s`; one epoch, `epoch_s`, until a trial has measured
    it), so that what the trial finally spends is what it reserved. False where that does not fit in the budget
    less `keep_s`, or would end after `deadline`: the run stops here, and keeps its tail alone reserved."""
    tail = sweep_storage.tail_s(study, epoch_s)
    spent = time.time() - taken
    trial.set_user_attr("train_s", spent)
    fits = sweep_storage.reserve(study, trial, spent + 1.1 * next_epoch_s + tail,
                                 study.user_attrs["budget_s"] - keep_s)
    if deadline is not None and next_epoch_s and time.time() + 1.1 * next_epoch_s + tail > deadline:
        fits = False
    if not fits and next_epoch_s:
        trial.set_user_attr("reserved_s", spent + tail)
    return fits


def resume_reports(trial, epochs: list, metric: str, best_so_far: Callable, last_epoch: int,
                   report: Optional[Callable] = None) -> Optional[int]:
    """Reports a resumed run's finished `epochs` again (its best validation score so far after each), asking the
    pruner at each as the unbroken run did (`report(trial, value, epoch)`, default `sweep.report_epoch` with
    `last_epoch`; rungs the trial passed before its process died are not asked again: Optuna's retry keeps them).
    Returns the epoch at which it is pruned, or None."""
    report = report or (lambda t, value, epoch: sweep.report_epoch(t, value, epoch, last_epoch))
    for epoch_record in epochs:
        if report(trial, best_so_far(epoch_record["val"][metric]), epoch_record["epoch"]):
            return epoch_record["epoch"]
    return None


def _stopper(loop, summary: dict):
    """The run's early stopping as the engine keeps it: its state saved with the run's last finished epoch (`summary`,
    a resumed run's), else `loop`'s patience and minimum improvement. The engine judges an epoch after the sweep's hook
    (`after_epoch`), so the hook asks this one whether the run ends there by its own rule, where the budget must not
    mark it cut (a Quora sweep's seed-round run whose patience ran out at epoch 4 was marked cut by the budget, and
    the recommendation left out its seed)."""
    from tf_transfer.training.engine import EarlyStopping

    held = summary.get("early_stopping")
    return EarlyStopping(**held) if held else EarlyStopping(loop.patience, loop.min_delta)


def _learned_before(study, name: str, epochs: list, metric: str, lower: bool, sets_rung: bool,
                    is_reference: bool) -> Optional[int]:
    """For a resumed run that measures the first rung, the first of its finished `epochs` at which it learned, or
    None: it may have learned before its process died, and the rung was not set then (`sets_rung`: full
    fine-tuning's seed 0, where `sweep_rung.learned` sets it; the reference, whose rung the sweep sets when it ends)."""
    best = None
    for epoch_record in epochs if sets_rung or is_reference else []:
        value = epoch_record["val"][metric]
        best = value if best is None else (min if lower else max)(best, value)
        if sweep_rung.learned(study, name, epoch_record["epoch"], best, lower, sets_rung):
            return epoch_record["epoch"]
    return None


def _ended_before(summary: dict, pruned_at: Optional[int], learned_at: Optional[int], best: Optional[float],
                  start: float) -> dict:
    """`train_trial`'s answer for a resumed run that had ended before its process died, with nothing more to
    train: pruned at an epoch it had trained (`pruned_at`), or the reference, which had learned (`learned_at`: it
    pauses there); `best`, its best score so far (what its line says)."""
    times = [e["epoch_time_s"] for e in summary["epochs"] if e.get("epoch_time_s")]
    return {"value": best, "pruned": bool(pruned_at), "pruned_at": pruned_at,
            "cut": "pruned" if pruned_at else "reference", "learned_at": None if pruned_at else learned_at,
            "epoch_time_s": max(times) if times else None, "epochs": len(summary["epochs"]),
            "cache_build_s": summary.get("cache_build_s"), "cache_time_s": summary.get("cache_time_s"),
            "num_layers": summary.get("num_layers"), "startup_s": None, "elapsed_s": time.time() - start}


def _trial_result(summary: dict, metric: str, state: dict, done_before: int, start: float) -> dict:
    """`train_trial`'s answer from the run's final summary and what its epochs' hook saw."""
    epochs = summary["epochs"]
    best = next((e for e in epochs if e["epoch"] == summary.get("best_epoch")), None)
    pruned = state["pruned"] or any(e.get("sweep") == "pruned" for e in epochs)
    cut = "reference" if state.get("paused") else next((e["sweep"] for e in reversed(epochs) if e.get("sweep")),
                                                       "pruned" if pruned else None)
    wall = epoch_wall(state["at"], epochs[done_before]["epoch_time_s"]) if len(epochs) > done_before else None
    # What this run spent building caches (none where it read one another run built); runs before it was
    # recorded: what its caches cost.
    built = summary.get("cache_time_s", summary.get("cache_build_s")) or 0.0
    return {"value": best["val"][metric] if best else None, "pruned": pruned, "cut": cut,
            "learned_at": state["learned_at"], "epoch_time_s": wall, "epochs": len(epochs),
            "cache_build_s": summary.get("cache_build_s"), "cache_time_s": summary.get("cache_time_s"),
            "num_layers": summary.get("num_layers"),
            "startup_s": max(state["at"][0] - wall - built, 0.0) if state["at"] and wall else None,
            "elapsed_s": time.time() - start}


def epoch_wall(marks: list, first_epoch_s: float) -> float:
    """Wall seconds per epoch, its evaluation included: the longest gap between two epochs' ends, or the first
    epoch's training time while only one has ended."""
    gaps = [b - a for a, b in zip(marks, marks[1:])]
    return max(gaps) if gaps else first_epoch_s
