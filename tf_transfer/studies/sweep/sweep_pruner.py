"""The sweep's pruner: successive halving at epochs r, 3r, 9r, ... among the trials that did not fail. Optuna does not
store a pruner, so every process that reports to a sweep's study loads it with this one (`sweep.load`).

>>> from tf_transfer.studies.sweep.sweep_pruner import pruner_of_sweeps
>>> type(pruner_of_sweeps(2)).__name__
'_AmongLiveTrials'
"""

from __future__ import annotations

from typing import Optional

# Successive halving's factor: the rungs are r, 3r, 9r, ... and the best third of the runs at each goes on. The plan
# (`sweep_plan`) and the second-case line (`sweep_trial.say_second_case`) read the same.
REDUCTION_FACTOR = 3


class _AmongLiveTrials:
    """A pruner that ranks a trial among the trials that did not fail: a trial whose process died is queued again
    with the rungs it passed (Optuna's retry copies them), so the failed one must not compete there a second time."""

    def __init__(self, pruner):
        self._pruner = pruner

    def prune(self, study, trial) -> bool:
        return self._pruner.prune(_LiveTrials(study), trial)


class _LiveTrials:
    def __init__(self, study):
        self._study = study

    def __getattr__(self, name):
        return getattr(self._study, name)

    def get_trials(self, deepcopy: bool = True, states=None):
        return [t for t in self._study.get_trials(deepcopy=deepcopy, states=states) if t.state.name != "FAIL"]


def pruner_of_sweeps(first_rung: Optional[int] = None):
    """Successive halving at epochs r, 3r, 9r, ... (r: the first rung, `first_rung`, 1 until it is measured): the
    best third of the trials that reached an epoch go on (failed trials left out: `_AmongLiveTrials`). Every process
    that reports to the study loads it with this pruner (Optuna does not store it)."""
    import optuna

    return _AmongLiveTrials(optuna.pruners.SuccessiveHalvingPruner(min_resource=first_rung or 1,
                                                                   reduction_factor=REDUCTION_FACTOR))
