"""One run's folder: `summary.json`, per-epoch checkpoints, and what to do with a folder that holds a run already.

A completed run with the same settings is returned as it is; an unfinished one resumes after its last epoch; a run
with other settings is refused (`TransferError`, so the command exits 2) unless `overwrite`, which starts afresh.

Example:

>>> from tf_transfer.training.run_folder import RunFolder
>>> folder = RunFolder("/tmp/run", settings={"lr": 1e-3})
>>> folder.completed, folder.resuming
(False, False)
"""

from __future__ import annotations

import os
import time
from typing import Optional

from tf_transfer.core import machine
from tf_transfer.training import checkpoints, record


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class RunFolder:
    """`settings` (a JSON-able dict) is what a rerun must match; `ignored` settings (where data lives, speed knobs)
    may differ; `added` settings came after some runs were made, with the value those runs had. Nothing is written
    until `start`."""

    def __init__(self, path: str, settings: dict, ignored: tuple = (), overwrite: bool = False,
                 added: dict = None):
        self.path = path
        self.existing = None if overwrite else record.read_summary(path)
        if self.existing:
            record.refuse_other_settings(self.existing, settings, path, ignored, added)
        self.summary: Optional[dict] = None
        self.summary_path = os.path.join(path, record.SUMMARY)

    @property
    def completed(self) -> bool:
        return bool(self.existing and self.existing.get("completed"))

    @property
    def resuming(self) -> bool:
        return bool(self.existing and self.existing.get("epochs") and not self.completed)

    def start(self, fresh: dict) -> dict:
        """Writes the first `summary.json`: `fresh`, or when resuming what the first attempt measured with a
        `resumes` list for the later attempts. A fresh start clears what an earlier attempt left."""
        os.makedirs(self.path, exist_ok=True)
        if not self.resuming:
            checkpoints.clear(self.path)
        self.summary, _ = record.start_summary(self.path, fresh, self.existing, self.resuming)
        return self.summary

    def write(self) -> None:
        record.write_json_atomic(self.summary_path, self.summary)

    def note_resume(self, after_epoch: int, **facts) -> None:
        """Records a resume; compiling again after it is not training time, so it is kept here."""
        self.summary["resumes"].append({"after_epoch": after_epoch, **facts, "machine": machine.describe(),
                                        "code": record.code_version(), "at": now()})
        self.write()

    def save_epoch(self, epoch: int, model, optimizer=None) -> None:
        """Checkpoint first, then the summary that refers to it, then drop the older checkpoint: some complete
        pair always exists, whenever the process is killed."""
        checkpoints.save(self.path, epoch, model, optimizer)
        self.write()
        checkpoints.prune(self.path, epoch)

    def restore(self, epoch: int, model, optimizer=None) -> None:
        checkpoints.restore(self.path, epoch, model, optimizer)

    def finish(self) -> dict:
        self.summary["completed"] = True
        self.summary["finished_at"] = now()
        self.write()
        checkpoints.prune(self.path, keep_epoch=-1)  # finished: nothing left to resume
        return self.summary
