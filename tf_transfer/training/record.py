"""What a run leaves behind: `summary.json` (rewritten atomically) and TensorBoard scalars plus HParams.

What `summary.json` holds, key by key, for each kind of run: `tf_transfer.training.run_record` (docs/outputs.md is
generated from it). Undefined metric values (a constant prediction's correlation) are written as `null`.

Example:

>>> from tf_transfer.training import record
>>> record.write_json_atomic("/tmp/summary.json", {"completed": False})
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import time
from typing import Optional

from tf_transfer.core import disk
from tf_transfer.core.errors import TransferError

SUMMARY = "summary.json"


def _finite_or_none(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value


def write_json_atomic(path: str, data: dict, what: Optional[str] = None) -> None:
    """Writes `data` as JSON to a temporary file beside `path`, syncs it, then renames it over `path`.

    A crash or a full disk leaves either the old file or the new one, never half of one; a full disk is
    `disk.DiskFull` naming `path` and `what` (default: the file's name).
    """
    with disk.writing(path, what or os.path.basename(path)):
        _write_json_atomic(path, data)


def _write_json_atomic(path: str, data: dict) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, tmp_path = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    try:
        with os.fdopen(handle, "w") as f:
            json.dump(_finite_or_none(data), f, indent=2, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes the file private (0600); a summary is as readable as any file the user creates.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.remove(tmp_path)
        raise


def read_summary(output_dir: str):
    """The run's `summary.json` in `output_dir`, or None when there is none; `UnreadableRecord` when it cannot be
    read (truncated, not JSON, not an object)."""
    path = os.path.join(output_dir, SUMMARY)
    return read_json(path) if os.path.exists(path) else None


def read_json(path: str) -> dict:
    """The JSON object in `path`; `UnreadableRecord` naming the file when it is not one (a truncated or emptied
    file: a disk that filled up before atomic writes, a copy cut short, a hand edit)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:  # ValueError: JSONDecodeError, UnicodeDecodeError
        raise UnreadableRecord(path, f"{type(e).__name__}: {e}") from None
    if not isinstance(data, dict):
        raise UnreadableRecord(path, f"a JSON {type(data).__name__}, not an object")
    return data


class UnreadableRecord(TransferError, ValueError):
    """A run's record file (`summary.json`, a checkpoint, a study's results file) that cannot be read: the run's
    record is lost. A command says so in one line (rerun with --overwrite); a grid sets the file aside and trains
    the run afresh (`set_aside`). A ValueError too, as `json.load`'s errors are, for callers that catch those."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path} is unreadable ({why}): the run cannot go on from it; rerun with --overwrite to "
                         "train it afresh")
        self.path, self.why = path, why

    def __reduce__(self):  # raised in a grid's child process and re-raised in the grid's
        return type(self), (self.path, self.why)


def set_aside(path: str) -> str:
    """Renames an unreadable record file to `<name>.corrupt` (kept for a look; replaced by a later one) so that the
    run starts afresh; returns the new name."""
    target = path + ".corrupt"
    os.replace(path, target)
    return target


def refuse_other_settings(existing: dict, wanted: dict, output_dir: str, ignored: tuple = (),
                          added: dict = None) -> None:
    """Raises `TransferError` naming the settings that differ between the run in `output_dir` (its summary,
    `existing`) and `wanted` (compared as read back from JSON). `added` gives settings introduced after runs were
    made, with the value those runs had (runs from before `precision` existed were float32).

    An unfinished run is resumed, and a completed one reported as done, only with its own settings: a changed
    command must never be answered with an old result. `ignored` settings (where data lives, speed knobs) may differ.
    """
    from tf_transfer.core.errors import TransferError

    held = {"precision": "float32", **(added or {}), **(existing.get("config") or {})}
    wanted = json.loads(json.dumps(wanted))
    differing = sorted(k for k in set(held) | set(wanted) if held.get(k) != wanted.get(k) and k not in ignored)
    if differing:
        state = "a completed" if existing.get("completed") else "an unfinished"
        raise TransferError(f"{output_dir} holds {state} run with other settings ({', '.join(differing)}): pass "
                            "--overwrite to replace it, or choose another --output_dir")


def recorded_data(summary: dict) -> dict:
    """`{flag: SHA-256}` of the data files a run's summary records (`dataset.files`); `{}` where it records none (a
    GLUE task's data folder, a TensorFlow Datasets name)."""
    files = (summary.get("dataset") or {}).get("files") or {}
    return {flag: entry.get("sha256") for flag, entry in files.items() if isinstance(entry, dict)}


def refuse_other_data(existing: dict, given: dict, output_dir: str,
                      way_out: str = "pass --overwrite to replace it, or choose another --output_dir") -> None:
    """Raises `TransferError` when the run in `output_dir` (its summary, `existing`) records data files whose
    SHA-256 differs from `given` (`{flag: SHA-256}` of the files this run would read), naming both hashes and
    `way_out`: a file of the same name with other contents is other data, and its run must never be reported as this
    one's.

    A run that records no hashes (a GLUE task's data folder, TFDS) is compared by its settings alone; so is a
    rerun that gives no files (`given` empty).
    """
    from tf_transfer.core.errors import TransferError

    recorded = recorded_data(existing)
    if not recorded or not given:
        return
    differing = [f"--{flag}: {recorded.get(flag) or 'none'} recorded, {given.get(flag) or 'none'} given"
                 for flag in sorted(set(recorded) | set(given)) if recorded.get(flag) != given.get(flag)]
    if differing:
        state = "a completed" if existing.get("completed") else "an unfinished"
        raise TransferError(f"{output_dir} holds {state} run on other data (SHA-256 {'; '.join(differing)}): "
                            f"{way_out}")


def code_version():
    """`{"commit": sha, "dirty": bool}` of the checkout this package runs from (dirty: uncommitted changes to the
    code, flags or experiments), or None outside a git checkout. Results of one study made with different code
    can then be told apart."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def git(*args):
        return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no", "--", "tf_transfer", "experiments", "flags")
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(changed)}


def start_summary(output_dir: str, fresh: dict, existing, resuming: bool):
    """Writes the run's first `summary.json` and returns `(summary, path)`: `fresh`, or, when resuming, what the
    first attempt measured (`existing`) with a `resumes` list for the work of later attempts."""
    summary = {**existing, "resumes": existing.get("resumes", [])} if resuming else fresh
    path = os.path.join(output_dir, SUMMARY)
    write_json_atomic(path, summary, "the run's summary")
    return summary, path


def model_facts(model, loaded) -> dict:
    """The part of a fresh `summary.json` that says which model trained: `model` is the run's `ModelSettings`,
    `loaded` what `models.loader.load_model` gave for it."""
    return {"preset": model.weights, "preset_source": loaded.source,
            "num_layers": int(loaded.backbone.num_layers), "trainable_layers": model.trainable_layers}


def parameter_facts(table: list) -> dict:
    """The part of a fresh `summary.json` that counts parameters, from `freezing.parameter_table`'s rows
    `(part, trainable, total)`, the last of which is the total."""
    return {"trainable_params": table[-1][1], "total_params": table[-1][2],
            "parameter_table": [{"part": p, "trainable": t, "total": n} for p, t, n in table]}


def nothing_trained_yet(config: dict, run_name: str) -> dict:
    """The part of a fresh `summary.json` that the epochs fill in, after the study's own facts."""
    return {"compile_time_s": None, "epochs": [], "best_epoch": None, "stopped_early": False, "completed": False,
            "config": config, "run_name": run_name, "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def flatten_scores(prefix: str, scores: dict) -> dict:
    """`{"dev": {"accuracy": 1}}` -> `{"test/dev/accuracy": 1}`; single-test-set tasks drop the set's name."""
    flat = {}
    for key, value in scores.items():
        if isinstance(value, dict):
            flat.update(flatten_scores(f"{prefix}/{key}", value))
        else:
            flat[f"{prefix}/{key}"] = value
    return flat


class TensorBoardRecorder:
    """Per-epoch scalars and one HParams entry per run, for `tensorboard --logdir runs/`.

    Keras' own TensorBoard callback writes neither epoch times nor HParams, hence this small writer.
    """

    def __init__(self, logdir: str, hparams: dict, run_name: str):
        import tensorflow as tf
        from tensorboard.plugins.hparams import api as hp

        self._tf, self.logdir = tf, logdir
        with self._writing():
            self.writer = tf.summary.create_file_writer(logdir)
            with self.writer.as_default():
                hp.hparams({k: _hparam_value(v) for k, v in hparams.items()}, trial_id=run_name)
            self.writer.flush()

    def scalars(self, step: int, values: dict) -> None:
        with self._writing():
            with self.writer.as_default():
                for tag, value in values.items():
                    if value is not None and math.isfinite(float(value)):
                        self._tf.summary.scalar(tag, float(value), step=step)
            self.writer.flush()

    def close(self) -> None:
        with self._writing():
            self.writer.close()

    @contextlib.contextmanager
    def _writing(self):
        """A full disk while writing events is `disk.DiskFull`: TensorFlow's writer reports it as an `OpError`
        (its message carries the system's words), Python's file calls as an `OSError`."""
        with disk.writing(self.logdir, "TensorBoard events"):
            try:
                yield
            except self._tf.errors.OpError as e:
                if any(words in str(e) for words in NO_SPACE_WORDS):
                    raise disk.DiskFull(self.logdir, "TensorBoard events") from None
                raise


# How the C library words ENOSPC and EDQUOT, as TensorFlow's errors quote them.
NO_SPACE_WORDS = ("No space left on device", "Disk quota exceeded")


def _hparam_value(value):
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
