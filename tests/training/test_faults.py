"""Faults a long run meets, each ending in recovery or one `error:` line: a damaged frozen-prefix cache (rebuilt),
a damaged kept checkpoint or exported model (refused), a full disk at each write site (one line, nothing half
written marked complete), a dead build's leftovers (removed), a depth the preset does not have (refused from its
config). Small fixtures only: the tiny BERT's prefix over the tiny RTE split, fake records, faked ENOSPC."""

import errno
import json
import logging
import math
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from tf_transfer.core import cli, disk
from tf_transfer.core.errors import TransferError
from tf_transfer.data import cache, inputs, tasks
from tf_transfer.training import checkpoints, engine, record
from tf_transfer.training.run_folder import RunFolder

from conftest import NUM_LAYERS, make_tiny_tokenizer

NO_SPACE = OSError(errno.ENOSPC, "No space left on device")


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


class _Outputs:
    def __init__(self, values):
        self.values = values

    def numpy(self):
        return self.values


def _fake_prefix(features):
    """Hidden states that depend only on the batch's tokens, computed without TensorFlow: what the cache keeps and
    checks is the same for any prefix, and tracing the tiny BERT for every build cost seconds a test."""
    ids = np.asarray(features["token_ids"])
    return _Outputs(np.sin(ids[..., None] * np.arange(1, 17)).astype(np.float32))


@pytest.fixture(scope="module")
def prefix_and_split(glue_dir):
    """A stand-in prefix 16 wide (`_fake_prefix`) and RTE's tiny train split, encoded, with its cache key."""
    encoded = inputs.encode(tasks.read_glue_split(tasks.get_task("rte"), glue_dir, "train"), make_tiny_tokenizer(),
                            32)
    prefix = types.SimpleNamespace(output=types.SimpleNamespace(shape=(None, None, 16)))
    return prefix, encoded, cache.Prefix("fake", "rte", depth=1).key("train", encoded)


def _build(prefix_and_split, cache_dir):
    prefix, encoded, key = prefix_and_split
    return cache.build(prefix, encoded, key, cache_dir=str(cache_dir), run=_fake_prefix)


def _rows_bytes_offset(path: str) -> int:
    """Where a `.npy` file's array starts (after its header)."""
    with open(path, "rb") as f:
        np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        return f.tell()


def _random_bytes(path):  # the fault seen: random bytes over a train cache's rows, header intact
    start = _rows_bytes_offset(path)
    with open(path, "r+b") as f:
        f.seek(start + 64)
        f.write(np.random.default_rng(0).bytes(256))


def _plausible_rows(path):  # valid-looking float16 values over a sixth of the rows: trained silently before
    hidden = np.load(path, mmap_mode="r+")
    hidden[: len(hidden) // 6] = np.float16(0.25)
    hidden.flush()


def _header(path):  # 64 bytes of the header: numpy's ValueError traceback before
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(b"\xff" * 64)


def _truncated(path):
    os.truncate(path, os.path.getsize(path) // 2)


def _no_digests(path):  # a cache written before digests were recorded: never trusted unchecked
    meta = os.path.join(os.path.dirname(path), cache.META)
    with open(meta) as f:
        written = json.load(f)
    del written["sha256"]
    with open(meta, "w") as f:
        json.dump(written, f)


def _no_meta(path):  # a copy cut short before its meta.json
    os.remove(os.path.join(os.path.dirname(path), cache.META))


@pytest.mark.parametrize("damage", [_random_bytes, _plausible_rows, _header, _truncated, _no_digests, _no_meta],
                         ids=["random-bytes", "plausible-rows", "header", "truncated", "no-digests", "no-meta"])
def test_a_damaged_cache_is_named_and_rebuilt(prefix_and_split, tmp_path, damage, caplog):
    cache.clear_memory()
    clean, _, reused = _build(prefix_and_split, tmp_path)
    assert not reused
    expected = np.array(clean.hidden)
    folder = os.path.join(tmp_path, prefix_and_split[2])
    damage(os.path.join(folder, "hidden.npy"))
    cache.clear_memory()
    with caplog.at_level(logging.WARNING):
        rebuilt, seconds, reused = _build(prefix_and_split, tmp_path)
    assert not reused  # built again, not read
    np.testing.assert_array_equal(np.asarray(rebuilt.hidden), expected)  # nothing trains on the damaged rows
    warned = [r.getMessage() for r in caplog.records if "rebuilding it" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith(f"frozen-prefix cache {folder}: ")
    assert "failed its check" in cache.suspects()[folder]
    assert cache.damage(folder) is None  # the rebuilt cache is whole, and read back as such
    cache.clear_memory()
    assert _build(prefix_and_split, tmp_path)[2] is True


def test_a_whole_cache_is_read_back_checked(prefix_and_split, tmp_path):
    cache.clear_memory()
    _build(prefix_and_split, tmp_path)
    cache.clear_memory()
    again, seconds, reused = _build(prefix_and_split, tmp_path)
    assert reused and seconds == 0.0 and isinstance(again.hidden, np.memmap)
    assert cache.suspects()[os.path.join(tmp_path, prefix_and_split[2])] == "was read back from disk"


def test_a_damaged_cache_that_cannot_be_removed_is_one_line(prefix_and_split, tmp_path, monkeypatch):
    cache.clear_memory()
    _build(prefix_and_split, tmp_path)
    folder = os.path.join(tmp_path, prefix_and_split[2])
    _random_bytes(os.path.join(folder, "hidden.npy"))
    cache.clear_memory()

    def read_only(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(cache.shutil, "rmtree", read_only)
    with pytest.raises(TransferError, match=rf"^frozen-prefix cache {folder}: hidden.npy does not match the SHA-256 "
                                            r".* cannot be removed to be rebuilt \(Permission denied\): delete"):
        _build(prefix_and_split, tmp_path)


def test_a_full_disk_while_caching_leaves_no_folder(prefix_and_split, tmp_path, monkeypatch):
    cache.clear_memory()
    monkeypatch.setattr(cache.np, "save", _no_space)
    folder = os.path.join(tmp_path, prefix_and_split[2])
    with pytest.raises(disk.DiskFull, match=rf"^no space left on {folder} while writing the frozen-prefix cache: the "
                                            "last finished epoch is kept; free space and rerun$"):
        _build(prefix_and_split, tmp_path)
    assert os.listdir(tmp_path) == []  # neither a cache nor its half-built .tmp-* folder


def test_a_dead_builds_leftover_is_removed_on_the_next_open(tmp_path):
    import socket

    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    leftovers = {}
    for name, pid in (("dead", finished.pid), ("alive", os.getpid())):
        leftovers[name] = tmp_path / f".tmp-{name}"
        leftovers[name].mkdir()
        (leftovers[name] / cache.OWNER).write_text(json.dumps({"pid": pid, "host": socket.gethostname()}))
        (leftovers[name] / "hidden.npy").write_bytes(b"\0" * 1000)
    (tmp_path / ".tmp-just-begun").mkdir()  # no owner written yet: a build in its first instant
    said = []
    assert cache.remove_stale_builds(str(tmp_path), said.append) == [str(leftovers["dead"])]
    assert sorted(os.listdir(tmp_path)) == [".tmp-alive", ".tmp-just-begun"]
    assert said == [f"removed {leftovers['dead']}: an unfinished frozen-prefix cache of process {finished.pid}, "
                    "which is no longer running"]


def test_a_nan_loss_names_a_cache_first(monkeypatch):
    monkeypatch.setattr(cache, "_FROM_DISK", {"/c/read": "was read back from disk",
                                              "/c/bad": "failed its check (hidden.npy is missing) and was rebuilt"})
    with pytest.raises(TransferError) as raised:
        engine.check_finite(math.nan, 1)
    message = str(raised.value)
    assert message.startswith("training loss became nan in epoch 1; likely causes, most likely first: (1) the "
                              "frozen-prefix cache /c/bad, which failed its check (hidden.npy is missing) and was "
                              "rebuilt (delete it to have it built afresh); (2) the frozen-prefix cache /c/read, ")
    assert message.index("(3) the inputs") < message.index("(4) the learning rate (lower --lr or set --clip_norm)")
    monkeypatch.setattr(cache, "_FROM_DISK", {})
    with pytest.raises(TransferError, match=r"likely causes, most likely first: \(1\) the inputs .*; \(2\) the "
                                            r"learning rate"):
        engine.check_finite(math.inf, 2)


def _flip_inside_array(file: str, marker: bytes) -> None:
    """Changes one byte in the middle of the stored array whose bytes start with `marker` (inside the zip entry,
    its directory intact: only the entry's CRC-32 can tell)."""
    with open(file, "rb") as f:
        data = bytearray(f.read())
    at = data.index(marker) + 100
    data[at] ^= 0xFF
    with open(file, "wb") as f:
        f.write(bytes(data))


def _kept_weights(folder) -> str:
    values = np.arange(400, dtype=np.float32) + 1000.0
    checkpoints.write_npz_atomic(checkpoints.path(str(folder), "best"), {"v0": values, "paths": np.asarray(["w"])})
    file = checkpoints.path(str(folder), "best")
    _flip_inside_array(file, values[:4].tobytes())
    return file


def test_a_completed_run_whose_kept_weights_are_damaged_is_not_complete(tmp_path):
    record.write_json_atomic(str(tmp_path / "summary.json"),
                             {"completed": True, "epochs": [], "config": {"lr": 1, "precision": "float32"}})
    file = _kept_weights(tmp_path)
    with pytest.raises(record.UnreadableRecord, match=rf"^{file} is unreadable \(v0.npy fails its CRC-32 check: "
                                                      r"damaged\): the run cannot go on from it; rerun with"):
        RunFolder(str(tmp_path), {"lr": 1, "precision": "float32"})


def test_export_of_a_run_whose_kept_weights_are_damaged_is_one_line(glue_dir, tiny_preset, tmp_path):
    from tf_transfer.studies.glue.glue_settings import GlueSettings

    from conftest import run_module

    flags = dict(task="rte", preset=tiny_preset, trainable_layers=1, data_dir=glue_dir, max_seq_length=32)
    record.write_json_atomic(str(tmp_path / "summary.json"),
                             {"completed": True, "epochs": [], "config": GlueSettings(**flags).to_dict()})
    file = _kept_weights(tmp_path)
    command = [f"--{key}={value}" for key, value in flags.items()] + [f"--output_dir={tmp_path}"]
    refused = run_module("tf_transfer.glue", *command, f"--export_dir={tmp_path / 'model'}")
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stderr.strip().splitlines()[-1] == (
        f"error: --export_dir: nothing exported: the completed run's best weights {file} are unreadable (v0.npy "
        "fails its CRC-32 check: damaged); rerun with --overwrite to train it again")
    assert not (tmp_path / "model").exists()
    plain = run_module("tf_transfer.glue", *command)
    assert plain.returncode == 2 and "already holds a completed run" not in plain.stdout
    assert plain.stderr.strip().splitlines()[-1].startswith(f"error: {file} is unreadable (v0.npy fails its CRC-32")


def test_an_epoch_checkpoint_damaged_inside_is_refused_when_restored(tmp_path):
    import keras

    values = np.arange(400, dtype=np.float32) + 1000.0
    checkpoints.write_npz_atomic(checkpoints.path(str(tmp_path), 1), {"v0": values, "paths": np.asarray(["w"])})
    _flip_inside_array(checkpoints.path(str(tmp_path), 1), values[:4].tobytes())

    class Model:
        variables, optimizer = [keras.Variable(np.zeros(400, np.float32))], None

    with pytest.raises(record.UnreadableRecord, match=r"checkpoint-epoch1.npz is unreadable \(BadZipFile: Bad CRC"):
        checkpoints.restore(str(tmp_path), 1, Model())


def test_an_exported_folder_is_checked_before_it_is_used(tmp_path):
    from tf_transfer.models import export

    (tmp_path / "task.json").write_text("{}")
    (tmp_path / "model.weights.h5").write_bytes(b"weights" * 100)
    (tmp_path / export.META).write_text(json.dumps({"task": "rte", "sha256": export._digests(str(tmp_path))}))
    assert export.read_meta(str(tmp_path))["task"] == "rte"
    (tmp_path / "model.weights.h5").write_bytes(b"weightz" * 100)
    with pytest.raises(TransferError, match=rf"^{tmp_path}/model.weights.h5 does not match the SHA-256 recorded when "
                                            "it was exported .*: the exported model is not used; export the run"):
        export.read_meta(str(tmp_path))
    (tmp_path / export.UNFINISHED).write_text("")  # an export stopped half way (a full disk)
    with pytest.raises(TransferError, match=rf"^{tmp_path} holds an export that did not finish"):
        export.read_meta(str(tmp_path))


@pytest.mark.parametrize("site", ["summary", "checkpoint", "tensorboard", "grid record"])
def test_a_full_disk_at_each_write_site_is_disk_full(tmp_path, monkeypatch, site):
    import tensorflow as tf

    expected = {"summary": (tmp_path / "summary.json", "the run's summary"),
                "checkpoint": (tmp_path / "checkpoint-epoch2.npz", "the checkpoint checkpoint-epoch2.npz"),
                "tensorboard": (tmp_path, "TensorBoard events"),
                "grid record": (tmp_path / "error.json", "the grid's record of a failed run")}[site]
    with pytest.raises(disk.DiskFull) as raised:
        if site == "summary":
            folder = RunFolder(str(tmp_path), {"lr": 1})
            folder.start({"completed": False, "epochs": [], "config": {"lr": 1}})
            folder.summary["completed"] = True
            monkeypatch.setattr(json, "dump", _no_space)
            folder.write()
        elif site == "checkpoint":
            monkeypatch.setattr(np, "savez", _no_space)
            checkpoints.write_npz_atomic(checkpoints.path(str(tmp_path), 2), {"v0": np.zeros(3)})
        elif site == "tensorboard":
            recorder = record.TensorBoardRecorder(str(tmp_path), {"lr": 1.0}, "run")
            monkeypatch.setattr(recorder.writer, "flush", lambda: (_ for _ in ()).throw(tf.errors.UnknownError(
                None, None, f"{tmp_path}/events.out.tfevents.1; No space left on device")))
            recorder.scalars(1, {"loss": 0.5})
        else:
            from tf_transfer.studies import grid

            monkeypatch.setattr(record, "_write_json_atomic", _no_space)
            study = grid.Grid("faults", "", "", {}, {}, report=None)
            monkeypatch.setattr(grid, "run_dir", lambda runs_dir, study, settings: str(tmp_path))
            monkeypatch.setattr(grid, "_readable_result", lambda *args: None)
            monkeypatch.setattr(grid, "_result_or_set_aside", lambda *args: None)
            grid.run_study(study, [{"lr": 1}], str(tmp_path), run_one=lambda settings, folder: 1 / 0, log=lambda _: 0)
    assert str(raised.value) == (f"no space left on {expected[0]} while writing {expected[1]}: the last finished "
                                 "epoch is kept; free space and rerun")
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".tmp-")]  # nothing half written left


def test_a_full_disk_in_a_grid_run_stops_the_grid(tmp_path, monkeypatch):
    """A run that meets a full disk stops the grid (every later run would too) instead of being counted failed."""
    from tf_transfer.studies import grid

    study = grid.Grid("faults", "", "", {}, {}, report=None)
    monkeypatch.setattr(grid, "run_dir", lambda runs_dir, study, settings: str(tmp_path / str(settings["lr"])))
    monkeypatch.setattr(grid, "_readable_result", lambda *args: None)
    monkeypatch.setattr(grid, "_result_or_set_aside", lambda *args: None)
    ran = []

    def run_one(settings, folder):
        ran.append(settings["lr"])
        raise OSError(errno.EDQUOT, "Disk quota exceeded", os.path.join(folder, "model.weights.h5"))

    with pytest.raises(disk.DiskFull, match=rf"^no space left on {tmp_path}/1/model.weights.h5 while writing the "
                                            "run's files"):
        grid.run_study(study, [{"lr": 1}, {"lr": 2}], str(tmp_path), run_one=run_one, log=lambda _: 0)
    assert ran == [1] and not (tmp_path / "1" / "error.json").exists()
    # A grid's run in a child process (`core/isolated.py`) raises it in the grid's process whole.
    import pickle

    again = pickle.loads(pickle.dumps(disk.DiskFull("/runs/x", "the run's summary")))
    assert isinstance(again, disk.DiskFull) and str(again) == str(disk.DiskFull("/runs/x", "the run's summary"))


def test_a_full_disk_no_writer_named_is_one_line(capsys):
    def main(argv):
        raise OSError(errno.ENOSPC, "No space left on device", "/runs/x/file")

    with pytest.raises(SystemExit) as exited:
        cli.call(main, [])
    assert exited.value.code == 2
    assert capsys.readouterr().err == ("error: no space left on /runs/x/file while writing the run's files: the last "
                                       "finished epoch is kept; free space and rerun\n")


def test_a_full_disk_mid_run_keeps_the_last_finished_epoch(glue_dir, one_block_preset, tmp_path, monkeypatch):
    """A real run whose second epoch's checkpoint meets a full disk: one line, exit 2 (three chained tracebacks,
    exit 1, before); epoch 1's summary and checkpoint are kept whole and the run is not marked completed, so the
    same command goes on from there (resuming: test_resume.py)."""
    from conftest import run_module

    save_epoch = RunFolder.save_epoch

    def full_at_epoch_2(self, epoch, model, optimizer=None):
        if epoch == 2:
            monkeypatch.setattr(np, "savez", _no_space)
        return save_epoch(self, epoch, model, optimizer)

    monkeypatch.setattr(RunFolder, "save_epoch", full_at_epoch_2)
    stopped = run_module("tf_transfer.glue", "--task=rte", f"--preset={one_block_preset}", "--trainable_layers=1",
                         f"--data_dir={glue_dir}", "--max_seq_length=32", "--max_epochs=2", "--batch_size=40",
                         f"--output_dir={tmp_path}")
    assert stopped.returncode == 2, stopped.stderr[-2000:]
    assert stopped.stderr.strip().splitlines()[-1] == (
        f"error: no space left on {tmp_path}/checkpoint-epoch2.npz while writing the checkpoint checkpoint-epoch2.npz: "
        "the last finished epoch is kept; free space and rerun")
    kept = record.read_summary(str(tmp_path))
    assert kept["completed"] is False and [e["epoch"] for e in kept["epochs"]] == [1]
    checkpoints.check_intact(str(tmp_path), 1)
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".tmp-")]


def test_a_depth_the_preset_lacks_is_refused_from_its_config(tiny_preset, tmp_path, monkeypatch):
    from tf_transfer.core.setting_groups import ModelSettings
    from tf_transfer.models import backbones, loader

    monkeypatch.setattr(backbones, "load_preset", lambda *args, **kwargs: pytest.fail("the weights were loaded"))
    with pytest.raises(TransferError, match=rf"^--trainable_layers=99 exceeds the backbone's {NUM_LAYERS} encoder "
                                            rf"blocks: use 0..{NUM_LAYERS} or 'all'$"):
        loader.load_model(ModelSettings(preset=tiny_preset, trainable_layers=99))
    from conftest import run_module

    refused = run_module("tf_transfer.glue", "--task=rte", f"--preset={tiny_preset}", "--trainable_layers=99",
                         f"--output_dir={tmp_path / 'run'}")
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].startswith(
        "error: --trainable_layers=99 exceeds the backbone's")
    assert not (tmp_path / "run").exists()  # refused before the run folder was even locked
    if backbones.offline_folder("all_minilm_l6_v2_en"):  # the offline Hugging Face folder's own config.json
        assert backbones.preset_depth("all_minilm_l6_v2_en") == 6
