"""One run's folder: `summary.json`, per-epoch checkpoints, and what to do with a folder that holds a run already.

A completed run with the same settings and data is returned as it is; an unfinished one resumes after its last epoch;
a run with other settings, or one that records other data files (their SHA-256), is refused (`TransferError`, so the command exits 2) unless `overwrite`, which starts afresh.

Under a multi-worker strategy only the chief's folder is the run's: the chief reads it and tells the other workers
what it holds (`distributed.from_chief`), so every worker resumes, refuses or stops alike; the others write to a
temporary folder (`cleanup` removes it) and take a resumed checkpoint's weights from the chief
(`distributed.sync_variables`). Checkpoints are written by the chief only.

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
from tf_transfer.training import checkpoints, distributed, record, run_record


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def check_resumable(path: str, summary: dict) -> None:
    """`record.UnreadableRecord` when `summary` (of the run in `path`) is unfinished and the checkpoint of its last
    epoch is cut short or empty: said before the data and model are loaded, not after."""
    last = (summary.get("epochs") or [{}])[-1]
    if not summary.get("completed") and isinstance(last, dict) and isinstance(last.get("epoch"), int):
        checkpoints.check_readable(path, last["epoch"])


def check_kept_weights(path: str, summary: dict) -> None:
    """`record.UnreadableRecord` when `summary` (of the run in `path`) is completed and the best weights it kept
    (`checkpoints.BEST`, for a later export) are damaged: such a run is not called complete, nor exported."""
    if summary.get("completed"):
        checkpoints.check_intact(path, "best")


class RunFolder:
    """`settings` (a JSON-able dict) is what a rerun must match; `ignored` settings (where data lives, speed knobs)
    may differ; `added` settings came after some runs were made, with the value those runs had; `data` (`{flag:
    SHA-256}` of the files the run reads) must match what the run records, where it records any. Nothing is written
    until `start`. `strategy`: a multi-worker strategy makes `path` the chief's alone (see above); `output_dir` is
    then the folder the command was given and `path` where this worker writes."""

    def __init__(self, path: str, settings: dict, ignored: tuple = (), overwrite: bool = False,
                 added: dict = None, strategy=None, data: Optional[dict] = None):
        from tf_transfer.core import strategies

        self.output_dir, self.strategy = path, strategy
        self.chief = strategies.is_chief(strategy)

        def read():
            existing = None if overwrite else record.read_summary(path)
            if existing:
                record.refuse_other_settings(existing, settings, path, ignored, added)
                record.refuse_other_data(existing, data or {}, path)
                check_resumable(path, existing)
                check_kept_weights(path, existing)
            return existing

        self.existing = distributed.from_chief(strategy, read)
        self.path = strategies.worker_dir(strategy, path)
        self.summary: Optional[dict] = None
        self.summary_path = os.path.join(self.path, record.SUMMARY)
        self.kind: Optional[str] = None  # the run record's kind (`run_record.KINDS`): every write is checked

    def _check(self, summary: dict) -> None:
        if self.kind is not None:
            run_record.check(self.kind, summary, self.summary_path, resumed=self.resuming)

    @property
    def completed(self) -> bool:
        return bool(self.existing and self.existing.get("completed"))

    @property
    def resuming(self) -> bool:
        return bool(self.existing and self.existing.get("epochs") and not self.completed)

    def start(self, fresh: dict) -> dict:
        """Writes the first `summary.json`: `fresh`, or when resuming what the first attempt measured with a
        `resumes` list for the later attempts. A fresh start clears what an earlier attempt left."""
        self._check(fresh if not self.resuming else self.existing)  # before anything in the folder changes
        os.makedirs(self.path, exist_ok=True)
        if not self.resuming:
            checkpoints.clear(self.path)
        self.summary, _ = record.start_summary(self.path, fresh, self.existing, self.resuming)
        return self.summary

    def write(self) -> None:
        self._check(self.summary)
        record.write_json_atomic(self.summary_path, self.summary, "the run's summary")

    def note_resume(self, after_epoch: int, **facts) -> None:
        """Records a resume; compiling again after it is not training time, so it is kept here."""
        self.summary["resumes"].append({"after_epoch": after_epoch, **facts, "machine": machine.describe(),
                                        "code": record.code_version(), "at": now()})
        self.write()

    def save_epoch(self, epoch: int, model, optimizer=None) -> None:
        """Checkpoint first, then the summary that refers to it, then drop the older checkpoint: some complete
        pair always exists, whenever the process is killed. (A non-chief worker writes only its summary.)"""
        if self.chief:
            checkpoints.save(self.path, epoch, model, optimizer)
        self.write()
        checkpoints.prune(self.path, epoch)

    def restore(self, epoch: int, model, optimizer=None) -> None:
        """Loads `epoch`'s checkpoint; under a multi-worker strategy the chief loads it and every worker takes
        the chief's values."""
        distributed.from_chief(self.strategy, lambda: checkpoints.restore(self.path, epoch, model, optimizer))
        distributed.sync_variables(self.strategy, checkpoints._variables(model, optimizer))

    def cleanup(self) -> None:
        """Removes a non-chief worker's temporary folder (nothing elsewhere)."""
        from tf_transfer.core import strategies

        strategies.remove_worker_dir(self.strategy, self.path, self.output_dir)

    def finish(self) -> dict:
        self.summary["completed"] = True
        self.summary["finished_at"] = now()
        self.write()
        checkpoints.prune(self.path, keep_epoch=-1)  # finished: nothing left to resume
        return self.summary
