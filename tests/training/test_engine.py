"""The engine's contract, once, for both kinds of epoch function the studies hand it: `keras_epoch` (one `fit` per
epoch: GLUE, stack-and-finetune, sentiment) and a custom step loop (multi-task). A tiny dense model keeps it fast."""

import math
import subprocess
import sys

import keras
import numpy as np
import pytest

from tf_transfer.core import machine
from tf_transfer.core.errors import TransferError
from tf_transfer.training import engine as engine_lib
from tf_transfer.training import record
from tf_transfer.training.engine import Engine, EarlyStopping, keras_epoch
from tf_transfer.training.run_folder import RunFolder

SETTINGS = {"lr": 0.05, "precision": "float32"}  # runs from before `precision` existed were float32
FEATURES = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
LABELS = (FEATURES[:, 0] > 0).astype("int32")


def _model(lr=0.05):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dropout(0.1), keras.layers.Dense(2)])
    model.compile(keras.optimizers.Adam(lr), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.optimizer.build(model.trainable_variables)
    return model


def _dataset(epoch):
    import tensorflow as tf

    order = np.random.default_rng([0, epoch]).permutation(len(LABELS))
    return tf.data.Dataset.from_tensor_slices((FEATURES[order], LABELS[order])).batch(16)


def _fit_epoch(model):
    return keras_epoch(model, _dataset, steps=4, examples=64)


def _step_epoch(model):
    """A custom loop, as the multi-task study's: its own steps, progress by hand."""
    def train_epoch(epoch, progress):
        losses = []
        for number, (x, y) in enumerate(_dataset(epoch), start=1):
            losses.append(float(model.train_on_batch(x, y)))
            progress.step(number, loss=losses[-1])
        return {"loss": float(np.mean(losses)), "task_loss": {"only": float(np.mean(losses))}}

    train_epoch.steps, train_epoch.examples = 4, 64
    return train_epoch


EPOCH_FUNCTIONS = {"fit": _fit_epoch, "steps": _step_epoch}


def _evaluate(model, scores=None):
    def evaluate():
        if scores is not None:
            return {"accuracy": scores.pop(0)}, {"accuracy": 0.0}
        predicted = model.predict(FEATURES, verbose=0).argmax(-1)
        return {"accuracy": float((predicted == LABELS).mean())}, {"accuracy": float((predicted == LABELS).mean())}
    return evaluate


def _run(path, epoch_function, max_epochs=3, patience=0, scores=None, die_after=None, settings=None):
    folder = RunFolder(str(path), settings or SETTINGS)
    if folder.completed:
        return folder.existing
    model = _model()
    folder.start({"epochs": [], "best_epoch": None, "stopped_early": False, "completed": False,
                  "config": settings or SETTINGS})
    engine = Engine(folder, "accuracy", max_epochs, patience)
    engine.restore_last(model, compile_time_s=0.0)
    if die_after is not None:
        original = folder.save_epoch

        def save_then_die(epoch, *args):
            original(epoch, *args)
            if epoch == die_after:
                raise KeyboardInterrupt  # as if killed right after this epoch was saved
        folder.save_epoch = save_then_die
    with engine:
        engine.fit(model, EPOCH_FUNCTIONS[epoch_function](model), _evaluate(model, scores))
        return engine.finish()


@pytest.mark.skipif(machine.busy_cpu_seconds() is None, reason="the machine's busy time needs /proc/stat (Linux)")
def test_an_epoch_records_the_cpu_other_processes_used_beside_it(tmp_path):
    """A child process that burns 0.3 CPU seconds while the epoch waits for it is the machine's other work: it is in
    `others_cpu_load`, not in the run's own CPU seconds."""
    folder = RunFolder(str(tmp_path), SETTINGS)
    folder.start({"epochs": [], "best_epoch": None, "stopped_early": False, "completed": False, "config": SETTINGS})
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"

    def train_epoch(epoch, progress):
        subprocess.run([sys.executable, "-c", burn], check=True)
        return {"loss": 1.0}

    train_epoch.steps, train_epoch.examples = 1, 1
    model, engine = _model(), Engine(folder, "accuracy", 1, 0)
    engine.restore_last(model, compile_time_s=0.0)
    with engine:
        engine.fit(model, train_epoch, lambda: ({"accuracy": 0.5}, None))
        epoch = engine.finish()["epochs"][0]
    others_cpu_s = epoch["others_cpu_load"] * epoch["epoch_time_s"]
    assert 0.28 <= others_cpu_s  # the child's 0.3 s (and whatever else ran meanwhile), counted in 10 ms ticks
    assert epoch["epoch_cpu_s"] < 0.2  # waiting on a child costs the run itself next to nothing


@pytest.mark.parametrize("epoch_function", sorted(EPOCH_FUNCTIONS))
def test_records_have_the_same_keys_and_continuous_clocks(tmp_path, epoch_function):
    summary = _run(tmp_path, epoch_function)
    keys = {"epoch", "epoch_time_s", "train_time_s", "cpu_utilization", "epoch_cpu_s", "train_cpu_s", "others_cpu_load",
            "speed_probe_cpu_ms", "loss", "val", "test"}
    assert [e["epoch"] for e in summary["epochs"]] == [1, 2, 3]
    assert all(keys <= set(e) for e in summary["epochs"])
    times = [e["epoch_time_s"] for e in summary["epochs"]]
    assert [e["train_time_s"] for e in summary["epochs"]] == pytest.approx(np.cumsum(times).tolist())
    cpu = [e["epoch_cpu_s"] for e in summary["epochs"]]
    assert [e["train_cpu_s"] for e in summary["epochs"]] == pytest.approx(np.cumsum(cpu).tolist())
    assert summary["completed"] and not [f for f in tmp_path.iterdir() if f.name.startswith("checkpoint-")]


def test_the_speed_probe_after_each_epoch_changes_no_number(tmp_path, monkeypatch):
    """Probed after every epoch (the 5 s floor lifted: these epochs take milliseconds), a run trains to the very
    losses and scores of an unprobed one, and each epoch records the probe's milliseconds; unprobed, null."""
    unprobed = _run(tmp_path / "unprobed", "fit")
    monkeypatch.setattr(engine_lib, "PROBE_SHARE", 1.0)
    monkeypatch.setattr(engine_lib, "PROBE_MIN_S", 0.0)
    monkeypatch.setattr(engine_lib, "PROBE_MAX_S", 0.03)
    probed = _run(tmp_path / "probed", "fit")
    assert [e["speed_probe_cpu_ms"] for e in unprobed["epochs"]] == [None] * 3
    assert all(0 < e["speed_probe_cpu_ms"] < 1000 for e in probed["epochs"])
    assert [(e["loss"], e["val"], e["test"]) for e in probed["epochs"]] == \
        [(e["loss"], e["val"], e["test"]) for e in unprobed["epochs"]]


def test_the_probe_budget_is_a_share_of_the_epoch_with_a_floor_and_a_ceiling(monkeypatch):
    budgets = []
    monkeypatch.setattr(machine, "speed_probe", lambda budget_s: budgets.append(budget_s) or 12.5)
    assert engine_lib.probe_after(2.0) is None  # 20 ms: under the floor, not probed
    assert engine_lib.probe_after(40.0) == 12.5 and engine_lib.probe_after(500.0) == 12.5
    assert budgets == pytest.approx([0.4, 1.0])


@pytest.mark.parametrize("epoch_function", sorted(EPOCH_FUNCTIONS))
def test_resume_after_a_kill_gives_the_same_numbers(tmp_path, epoch_function):
    straight = _run(tmp_path / "straight", epoch_function)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "resumed", epoch_function, die_after=1)
    partial = record.read_summary(str(tmp_path / "resumed"))
    assert not partial["completed"] and [e["epoch"] for e in partial["epochs"]] == [1]
    resumed = _run(tmp_path / "resumed", epoch_function)
    assert [r["after_epoch"] for r in resumed["resumes"]] == [1]
    assert resumed["epochs"][0] == partial["epochs"][0]
    for a, b in zip(straight["epochs"], resumed["epochs"]):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-6) and b["val"] == pytest.approx(a["val"])
    times = [e["epoch_time_s"] for e in resumed["epochs"]]
    assert resumed["epochs"][-1]["train_time_s"] == pytest.approx(sum(times))


def test_early_stopping_and_best_epoch(tmp_path):
    summary = _run(tmp_path, "fit", max_epochs=10, patience=2, scores=[0.5, 0.7, 0.6, 0.65, 0.9])
    assert [e["epoch"] for e in summary["epochs"]] == [1, 2, 3, 4]
    assert summary["best_epoch"] == 2 and summary["stopped_early"] is True
    assert summary["early_stopping"]["wait"] == 2


def test_reaching_max_epochs_is_not_stopping_early(tmp_path):
    summary = _run(tmp_path, "fit", max_epochs=2, patience=1, scores=[0.5, 0.4])
    assert summary["stopped_early"] is False and summary["best_epoch"] == 1


@pytest.mark.parametrize("epoch_function", sorted(EPOCH_FUNCTIONS))
def test_non_finite_loss_stops_and_keeps_finished_epochs(tmp_path, epoch_function):
    folder = RunFolder(str(tmp_path), SETTINGS)
    model = _model()
    folder.start({"epochs": [], "best_epoch": None, "completed": False, "config": SETTINGS})
    engine = Engine(folder, "accuracy", 3)
    train = EPOCH_FUNCTIONS[epoch_function](model)

    def poisoned(epoch, progress):
        result = train(epoch, progress)
        return {**result, "loss": math.nan} if epoch == 2 else result

    with pytest.raises(TransferError, match="loss became nan in epoch 2"):
        engine.fit(model, poisoned, _evaluate(model))
    kept = record.read_summary(str(tmp_path))
    assert [e["epoch"] for e in kept["epochs"]] == [1] and kept["completed"] is False


def test_completed_run_is_returned_and_other_settings_refused(tmp_path):
    first = _run(tmp_path, "fit", max_epochs=1)
    again = _run(tmp_path, "fit", max_epochs=1)
    assert again == first
    with pytest.raises(TransferError, match=r"holds a completed run with other settings \(lr\)"):
        RunFolder(str(tmp_path), {**SETTINGS, "lr": 0.1})
    assert not RunFolder(str(tmp_path), {"lr": 0.1}, overwrite=True).completed


def test_a_hook_can_pause_a_run_that_a_later_run_resumes_to_the_same_numbers(tmp_path):
    """A sweep's reference pauses where it learned, and full fine-tuning's seed 0 resumes it later: left unfinished
    with its last epoch's checkpoint, not completed as a hook's stop is."""
    import os

    straight = _run(tmp_path / "straight", "fit")
    folder = RunFolder(str(tmp_path / "paused"), SETTINGS)
    model = _model()
    folder.start({"epochs": [], "best_epoch": None, "stopped_early": False, "completed": False, "config": SETTINGS})
    engine = Engine(folder, "accuracy", 3, 0)
    with engine:
        ended = engine.fit(model, _fit_epoch(model), _evaluate(model), after_epoch=lambda r: engine_lib.PAUSE)
    paused = record.read_summary(str(tmp_path / "paused"))
    assert ended == engine_lib.PAUSE and not paused["completed"] and [e["epoch"] for e in paused["epochs"]] == [1]
    assert os.path.exists(tmp_path / "paused" / "checkpoint-epoch1.npz")
    resumed = _run(tmp_path / "paused", "fit")
    assert resumed["completed"] and [r["after_epoch"] for r in resumed["resumes"]] == [1]
    for a, b in zip(straight["epochs"], resumed["epochs"]):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-6) and b["val"] == pytest.approx(a["val"])


def test_a_hook_can_roll_an_epoch_back_out_of_the_best(tmp_path):
    folder = RunFolder(str(tmp_path), SETTINGS)
    model = _model()
    folder.start({"epochs": [], "best_epoch": None, "completed": False, "config": SETTINGS})
    engine = Engine(folder, "accuracy", 4)
    scores = [0.5, 0.9, 0.6, 0.7]

    def undo_second(epoch_record):
        epoch_record["rolled_back"] = epoch_record["epoch"] == 2
        return epoch_record["epoch"] == 3

    ended = engine.fit(model, _fit_epoch(model), _evaluate(model, scores), tags={"phase": 1}, after_epoch=undo_second,
                       stopper=EarlyStopping(0))
    assert ended == "hook" and [e["phase"] for e in engine.epochs] == [1, 1, 1]
    assert folder.summary["best_epoch"] == 3  # epoch 2's 0.9 was undone
