"""A sweep trial whose trainer child is killed: the sweep's own trial function (`sweep_trial.train_trial`: a real
GLUE run of a tiny BERT) in `sweep_session._train_trial`'s place, which trains one chosen candidate's first try
in a child process (`tf_transfer.core.isolated`, as `--isolate_runs` trains every trial) that is killed with SIGKILL,
as the OOM killer kills, right after it saved its first epoch's checkpoint; every other trial (the retry too) trains
in the command's process, as `--noisolate_runs` trains them, so that the test pays for one child's TensorFlow import,
not one per trial. The chosen candidate is named in a file `kill_after_epoch` in the sweep's folder, removed as the
child dies.

    monkeypatch.setattr(sweep_session, "_train_trial", sweep_children.train_trial)  # with --noisolate_runs
"""

from __future__ import annotations

import os
import signal


def _marker(folder: str) -> str:
    return os.path.join(os.path.dirname(os.path.dirname(folder)), "kill_after_epoch")


def train_trial(where, trial_id, settings, folder, keep_s, deadline=None):
    from tf_transfer.core import isolated
    from tf_transfer.studies.sweep import sweep_trial

    marker = _marker(folder)
    chosen = open(marker).read().strip() if os.path.exists(marker) else None
    if chosen == os.path.basename(os.path.dirname(folder)):
        return isolated.call(killed_after_its_first_epoch, where, trial_id, settings, folder, keep_s, deadline)
    return sweep_trial.train_trial(where, trial_id, settings, folder, keep_s, deadline)


def killed_after_its_first_epoch(where, trial_id, settings, folder, keep_s, deadline=None):
    """In the child: the sweep's trial function, killed once its first epoch is saved."""
    from tf_transfer.studies.sweep import sweep_trial
    from tf_transfer.training.run_folder import RunFolder

    saved = RunFolder.save_epoch

    def save_then_killed(self, epoch, model, optimizer=None):
        saved(self, epoch, model, optimizer)
        os.remove(_marker(folder))
        os.kill(os.getpid(), signal.SIGKILL)

    RunFolder.save_epoch = save_then_killed
    return sweep_trial.train_trial(where, trial_id, settings, folder, keep_s, deadline)
