"""Resuming loses nothing: a killed run continues from its last finished epoch with the same numbers."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tf_transfer.training import record
from tf_transfer.studies.glue import glue_task as runner
from tf_transfer.studies.glue.glue_settings import GlueSettings
from tf_transfer.core.errors import TransferError

from conftest import REPO, copy_when_saved, run_module


def _settings(glue_dir, preset, **overrides) -> dict:
    return dict(dict(task="sst2", preset=preset, trainable_layers=2, lr=1e-3, batch_size=4, max_epochs=3,
                     patience=10, data_dir=glue_dir, max_seq_length=32, seed=0), **overrides)


def _config(glue_dir, preset, **overrides):
    return GlueSettings(**_settings(glue_dir, preset, **overrides))


def _flags(glue_dir, preset, **overrides) -> list:
    """The command line of `_config(glue_dir, preset, **overrides)`."""
    return [f"--{key}={value}" for key, value in _settings(glue_dir, preset, **overrides).items()]


@pytest.mark.parametrize("method", [
    # LoRA's A and B and their Adam slots come back; the cache (built on packed rows) feeds the block that carries
    # them in packed rows.
    dict(trainable_layers=1, method="lora", lora_rank=2, cache_frozen=True, padding="pack"),
    # BitFit's biases and their Adam slots come back; its batches packed: each epoch's layout comes from the seeded
    # plan alone, as the padded batches' (`freeze`) do.
    dict(trainable_layers="all", method="bitfit", padding="pack"),
], ids=["lora_cached_packed", "bitfit_packed"])
def test_interrupted_run_resumes_to_the_same_numbers(glue_dir, one_block_preset, tmp_path, monkeypatch, method):
    """On the one-block preset with its block, pooler and head trained and the embeddings frozen (a frozen part
    and a trained part, as with 2 of 3 blocks), at about half the 3-block preset's traces. What a process killed
    right after epoch 1 was saved leaves is the straight run's folder then (`conftest.copy_when_saved`). The plain
    freezing method resumes after a real SIGKILL mid-epoch: `test_sigkill_mid_epoch_then_rerun_resumes`."""
    settings = dict(preset=one_block_preset, **method)
    copy_when_saved(monkeypatch, lambda folder, epoch: epoch == 1, tmp_path / "straight", tmp_path / "resumed")
    straight = runner.run_glue(_config(glue_dir, **settings), str(tmp_path / "straight"))
    partial = record.read_summary(str(tmp_path / "resumed"))
    assert partial["completed"] is False and [e["epoch"] for e in partial["epochs"]] == [1]
    assert os.path.exists(tmp_path / "resumed" / "checkpoint-epoch1.npz")

    resumed = runner.run_glue(_config(glue_dir, **settings), str(tmp_path / "resumed"))
    assert resumed["completed"] is True and resumed["config"]["padding"] == method.get("padding", "bucket")
    assert [e["epoch"] for e in resumed["epochs"]] == [1, 2, 3]
    assert resumed["epochs"][0] == partial["epochs"][0]  # the finished epoch is kept as it was
    assert [r["after_epoch"] for r in resumed["resumes"]] == [1]
    # Weights, optimizer slots, dropout RNG and data order all continue: the same losses and scores.
    for a, b in zip(straight["epochs"], resumed["epochs"]):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)
        assert b["val"] == pytest.approx(a["val"])
    times = [e["epoch_time_s"] for e in resumed["epochs"]]
    assert [e["train_time_s"] for e in resumed["epochs"]] == pytest.approx(
        [sum(times[:i + 1]) for i in range(3)])
    # A finished run keeps no checkpoint (its results are in the summary).
    assert not [f for f in os.listdir(tmp_path / "resumed") if f.startswith("checkpoint-epoch")]


def test_other_settings_in_the_same_folder_are_refused(glue_dir, tiny_preset, tmp_path):
    record.write_json_atomic(str(tmp_path / "summary.json"),
                             {"completed": False, "epochs": [], "config": _config(glue_dir, tiny_preset).to_dict()})
    with pytest.raises(TransferError, match="unfinished run with other settings"):
        runner.run_glue(_config(glue_dir, tiny_preset, lr=5e-4), str(tmp_path))


def test_a_completed_run_is_reported_done_only_for_its_own_settings(glue_dir, tiny_preset, tmp_path):
    done = {"completed": True, "epochs": [], "config": _config(glue_dir, tiny_preset).to_dict()}
    record.write_json_atomic(str(tmp_path / "summary.json"), done)
    # The same command (data elsewhere, another speed knob): the finished result, nothing trained.
    same = _config(glue_dir, tiny_preset, data_dir=str(tmp_path / "elsewhere"), steps_per_execution=4)
    assert runner.run_glue(same, str(tmp_path)) == json.loads(json.dumps(done))
    # A changed command must not be answered with the old result.
    with pytest.raises(TransferError, match=r"holds a completed run with other settings \(lr, seed\)"):
        runner.run_glue(_config(glue_dir, tiny_preset, lr=5e-4, seed=1), str(tmp_path))


@pytest.mark.parametrize("kept", [0, 300], ids=["empty", "truncated"])
def test_an_unreadable_checkpoint_is_one_line_naming_it(tmp_path, kept):
    """An empty or truncated checkpoint (a disk that filled up, a copy cut short) is `TransferError` naming the
    file and --overwrite, never numpy's or zipfile's traceback; nothing is read from it."""
    from tf_transfer.training import checkpoints

    checkpoints.write_npz_atomic(checkpoints.path(str(tmp_path), 1),
                                 {"v0": np.arange(200.0), "paths": np.asarray(["w"])})
    file = checkpoints.path(str(tmp_path), 1)
    with open(file, "rb") as f:
        data = f.read()
    with open(file, "wb") as f:
        f.write(data[:kept])

    class Model:
        variables, optimizer = [], None

    with pytest.raises(TransferError, match=rf"^{file} is unreadable \((EOFError|BadZipFile): .*\): the "
                                            "run cannot go on from it; rerun with --overwrite to train it afresh$"):
        checkpoints.restore(str(tmp_path), 1, Model())


def test_a_truncated_summary_is_one_line_naming_it(glue_dir, tiny_preset, tmp_path):
    (tmp_path / "summary.json").write_text('{"completed": false, "epochs": [{"epoch": 1, "lo')
    refused = run_module("tf_transfer.glue", "--task=sst2", f"--preset={tiny_preset}", f"--data_dir={glue_dir}",
                         f"--output_dir={tmp_path}")
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path}/summary.json is unreadable (JSONDecodeError: Unterminated string starting at: line 1 "
        "column 46 (char 45)): the run cannot go on from it; rerun with --overwrite to train it afresh")


def test_a_cut_short_checkpoint_is_refused_before_the_model_is_built(glue_dir, tiny_preset, tmp_path, monkeypatch):
    from tf_transfer.studies.glue.glue_task import GlueTask

    config = _config(glue_dir, tiny_preset)
    record.write_json_atomic(str(tmp_path / "summary.json"),
                             {"completed": False, "epochs": [{"epoch": 1}], "config": config.to_dict()})
    (tmp_path / "checkpoint-epoch1.npz").write_bytes(b"PK\x03\x04 cut short")
    monkeypatch.setattr(GlueTask, "build", lambda *args: pytest.fail("the model was built"))
    refused = run_module("tf_transfer.glue", *_flags(glue_dir, tiny_preset), f"--output_dir={tmp_path}")
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path}/checkpoint-epoch1.npz is unreadable (BadZipFile: File is not a zip file): the run cannot "
        "go on from it; rerun with --overwrite to train it afresh")
    assert record.read_summary(str(tmp_path))["completed"] is False


def test_full_disk_keeps_the_previous_summary(tmp_path, monkeypatch):
    path = str(tmp_path / "summary.json")
    record.write_json_atomic(path, {"epochs": [1], "completed": False})

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(json, "dump", no_space)
    with pytest.raises(TransferError, match=rf"^no space left on {path} while writing summary.json: the last "
                                            "finished epoch is kept; free space and rerun$"):
        record.write_json_atomic(path, {"epochs": [1, 2], "completed": True})
    monkeypatch.undo()
    with open(path) as f:
        assert json.load(f) == {"epochs": [1], "completed": False}
    assert os.listdir(tmp_path) == ["summary.json"]


def test_non_finite_loss_stops_with_a_clear_message(glue_dir, one_block_preset, tmp_path):
    config = _config(glue_dir, one_block_preset, task="stsb", lr=1e12, clip_norm=0.0, max_epochs=4,
                     trainable_layers="all", weight_decay=0.0)
    with pytest.raises(TransferError, match="training loss became"):
        runner.run_glue(config, str(tmp_path))
    summary = record.read_summary(str(tmp_path))
    assert summary["completed"] is False
    assert all(e["loss"] is not None for e in summary["epochs"])


def test_sigkill_mid_epoch_then_rerun_resumes(glue_dir, one_block_preset, tmp_path):
    """A real process killed (SIGKILL) inside an epoch, then the same command again: it goes on from the last
    epoch the killed process finished, to the numbers of an unbroken run of the same settings (trained here
    first): weights, optimizer slots, dropout RNG and data order all continue. The freezing method on the
    one-block preset (its block, pooler and head trained, the embeddings frozen); batches of 1, 40 steps an
    epoch, so that the kill lands inside one."""
    settings = dict(preset=one_block_preset, trainable_layers=1, batch_size=1, max_epochs=4)
    straight = runner.run_glue(_config(glue_dir, **settings), str(tmp_path / "straight"))
    output_dir = tmp_path / "run"
    command = [sys.executable, "-m", "tf_transfer.glue", *_flags(glue_dir, **settings), f"--output_dir={output_dir}"]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    summary = None
    while time.time() < deadline:
        summary = record.read_summary(str(output_dir)) if (output_dir / "summary.json").exists() else None
        if summary and len(summary["epochs"]) >= 1:
            break
        time.sleep(0.05)
    # At once: an epoch of this run takes about a tenth of a second, so the kill lands in epoch 2 (a pause here could
    # let all four finish first).
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed = record.read_summary(str(output_dir))
    done_before_kill = len(killed["epochs"])
    assert killed["completed"] is False and done_before_kill >= 1

    # The rerun reads only what the killed process left on disk: in this process, as any later command would.
    rerun = run_module(*command[2:])
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    final = record.read_summary(str(output_dir))
    assert final["completed"] is True and [e["epoch"] for e in final["epochs"]] == [1, 2, 3, 4]
    assert final["epochs"][:done_before_kill] == killed["epochs"]  # the finished epochs are kept as they were
    assert [r["after_epoch"] for r in final["resumes"]] == [done_before_kill]
    for a, b in zip(straight["epochs"], final["epochs"]):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)
        assert b["val"] == pytest.approx(a["val"])
    times = [e["epoch_time_s"] for e in final["epochs"]]
    assert [e["train_time_s"] for e in final["epochs"]] == pytest.approx([sum(times[:i + 1]) for i in range(4)])
    # A finished run keeps no checkpoint (its results are in the summary).
    assert not [f for f in os.listdir(output_dir) if f.startswith("checkpoint-epoch")]

    again = run_module(*command[2:])  # once completed, the command says so and trains nothing
    assert again.returncode == 0 and "already holds a completed run" in again.stdout
    assert record.read_summary(str(output_dir)) == final
