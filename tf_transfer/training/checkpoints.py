"""Per-epoch checkpoints for resuming: every model and optimizer variable (weights, Adam slots, step counter and
dropout RNG state), written to a temporary file and renamed, so a killed process leaves the previous one whole.

A completed run's checkpoint is deleted (the summary holds its results; a checkpoint of BERT-base with Adam slots
is over a gigabyte, and grids have hundreds of runs); what a run keeps to be exported later is its best epoch's
trained weights alone (`save_weights`, `BEST`). The data order needs no state: epoch e of seed s always has the same batches (see `inputs`). The epoch records and
the early-stopping state live in `summary.json`, which is written after the checkpoint it refers to; the previous
checkpoint is deleted only after that, so some complete pair always exists.

Example:

>>> from tf_transfer.training import checkpoints
>>> checkpoints.save(output_dir, epoch=3, model=model)  # doctest: +SKIP
>>> checkpoints.restore(output_dir, epoch=3, model=model)  # doctest: +SKIP
"""

from __future__ import annotations

import glob
import os
import re
import tempfile
import zipfile
import zlib

import numpy as np

from tf_transfer.core import disk
from tf_transfer.core.errors import TransferError
from tf_transfer.training import record

PATTERN = "checkpoint-epoch{epoch}.npz"


# The trained weights of the epoch a run's result is from (its best, else its last), without optimizer state: kept
# after the run completes where asked (`glue` keeps them, so that a finished run can be exported without training).
BEST = "checkpoint-best.npz"


def path(output_dir: str, epoch) -> str:
    return os.path.join(output_dir, BEST if epoch == "best" else PATTERN.format(epoch=epoch))


def _variables(model, optimizer=None) -> list:
    """What changes during training: trainable weights, dropout RNG states and the optimizer's variables
    (`optimizer`, or the model's compiled one).

    Frozen weights never change and come back from the preset, so a checkpoint of a mostly frozen BERT stays small.
    """
    changing = [v for v in model.variables if v.trainable or "seed_generator" in v.path]
    optimizer = optimizer if optimizer is not None else model.optimizer
    optimizer_variables = list(optimizer.variables) if optimizer is not None else []
    return changing + optimizer_variables


def save(output_dir: str, epoch, model, optimizer=None) -> str:
    """Saves what changes in training for `epoch` (a number, or "best")."""
    target = path(output_dir, epoch)
    _write(target, _variables(model, optimizer))
    return target


def _write(target: str, variables: list) -> None:
    arrays = {f"v{i}": np.asarray(v.numpy()) for i, v in enumerate(variables)}
    # Paths are for reading; they carry auto-numbered names (seed_generator_34) that differ between model
    # instances, so a restore matches variables by order and shape.
    arrays["paths"] = np.asarray([v.path for v in variables])
    write_npz_atomic(target, arrays)


def write_npz_atomic(target: str, arrays: dict) -> None:
    """`np.savez(target, **arrays)` through a synced temporary file beside it and a rename: all or nothing."""
    with disk.writing(target, f"the checkpoint {os.path.basename(target)}"):
        handle, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=os.path.dirname(os.path.abspath(target)))
        try:
            with os.fdopen(handle, "wb") as f:
                np.savez(f, **arrays)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise


def restore(output_dir: str, epoch, model, optimizer=None) -> None:
    """Assigns the checkpoint of `epoch` to `model`'s and its optimizer's variables (built beforehand)."""
    file = path(output_dir, epoch)
    if not os.path.exists(file):
        raise TransferError(f"{output_dir}: summary.json lists {epoch} epoch(s) but {os.path.basename(file)} is "
                            "missing; pass --overwrite to start afresh")
    _assign(file, _variables(model, optimizer), "pass --overwrite to start afresh or use another --output_dir")


def _assign(file: str, variables: list, way_out: str) -> None:
    try:
        with np.load(file) as saved:
            shapes = [saved[f"v{i}"].shape for i in range(len(saved["paths"]))]
            if shapes != [tuple(v.shape) for v in variables]:
                raise TransferError(f"{file} does not fit this model (different variables); {way_out}")
            for i, variable in enumerate(variables):  # one array at a time: a checkpoint may be gigabytes
                variable.assign(saved[f"v{i}"])
    except UNREADABLE as e:  # truncated, empty, not a checkpoint: the run stops, so a partial assignment is moot
        raise record.UnreadableRecord(file, f"{type(e).__name__}: {e}") from None


def trained_variables(model) -> list:
    """The variables of `model` that training may change (its trainable ones when it is built, before any block
    is frozen on the way): with the preset, what rebuilds the trained model. Frozen weights come from the preset."""
    return [v for v in model.variables if v.trainable]


def save_weights(output_dir: str, variables: list) -> str:
    """Saves `variables` (`trained_variables` of the model) as the run's `BEST` weights, atomically."""
    target = path(output_dir, "best")
    _write(target, variables)
    return target


def restore_weights(output_dir: str, variables: list) -> None:
    """Assigns the run's `BEST` weights to `variables` (the same model built again: matched by order and shape)."""
    _assign(path(output_dir, "best"), variables, "pass --overwrite to train the run again")


def check_readable(output_dir: str, epoch) -> None:
    """`record.UnreadableRecord` when the checkpoint of `epoch` exists but is cut short or empty (its zip directory,
    at the end of the file, is missing) or is not a checkpoint; cheap (no array is read), so a resume can refuse it
    before the data and model are loaded. A missing checkpoint is `restore`'s to report."""
    file = path(output_dir, epoch)
    if not os.path.exists(file):
        return
    try:
        with zipfile.ZipFile(file) as archive:
            if "paths.npy" not in archive.namelist():
                raise KeyError("no paths.npy: not a checkpoint")
    except UNREADABLE as e:
        raise record.UnreadableRecord(file, f"{type(e).__name__}: {e}") from None


def check_intact(output_dir: str, epoch) -> None:
    """`record.UnreadableRecord` when the checkpoint of `epoch` exists but any array in it fails the CRC-32 its zip
    entry records (damaged bytes inside, not only a cut-short end: `check_readable`) or it cannot be read at all.
    Reads the whole file (a kept best checkpoint of a small model: milliseconds), so a completed run's kept weights
    are checked before the run is called complete or exported."""
    file = path(output_dir, epoch)
    if not os.path.exists(file):
        return
    check_readable(output_dir, epoch)
    try:
        with zipfile.ZipFile(file) as archive:
            damaged = archive.testzip()
    except UNREADABLE as e:
        raise record.UnreadableRecord(file, f"{type(e).__name__}: {e}") from None
    if damaged is not None:
        raise record.UnreadableRecord(file, f"{damaged} fails its CRC-32 check: damaged")


# What numpy and zipfile raise on a truncated, empty or foreign .npz.
UNREADABLE = (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, zlib.error)


def prune(output_dir: str, keep_epoch: int) -> None:
    """Deletes every checkpoint but `keep_epoch`'s (and leftover temporary files)."""
    for file in glob.glob(os.path.join(output_dir, "checkpoint-epoch*.npz")):
        match = re.search(r"checkpoint-epoch(\d+)\.npz$", file)
        if match and int(match.group(1)) != keep_epoch:
            os.remove(file)
    for file in glob.glob(os.path.join(output_dir, ".tmp-*")):
        os.remove(file)


def clear(output_dir: str) -> None:
    """Removes checkpoints, the summary and TensorBoard events of an earlier attempt (`--overwrite`)."""
    patterns = ("checkpoint-epoch*.npz", BEST, ".tmp-*", "summary.json", "events.out.tfevents.*")
    for pattern in patterns:
        for file in glob.glob(os.path.join(output_dir, pattern)):
            os.remove(file)
