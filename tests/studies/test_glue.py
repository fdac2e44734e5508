"""End-to-end runs on the tiny preset: summary.json schema, TensorBoard scalars, batch size 1, MNLI's two dev sets."""

import glob
import json
import os
import subprocess

import pytest

from tf_transfer.studies.glue import glue_task as runner
from tf_transfer.studies.glue.glue_settings import GlueSettings

from conftest import REPO

EPOCH_KEYS = {"epoch", "epoch_time_s", "train_time_s", "cpu_utilization", "epoch_cpu_s", "train_cpu_s",
              "others_cpu_load", "speed_probe_cpu_ms", "peak_memory_mb", "loss", "val", "test"}
SUMMARY_KEYS = {"task", "preset", "num_layers", "trainable_layers", "lr", "batch_size", "seed", "metric",
                "trainable_params", "total_params", "compile_time_s", "epochs", "best_epoch", "stopped_early",
                "completed", "machine", "peak_memory_mb", "peak_memory_source"}


def _config(glue_dir, tiny_preset, **overrides):
    settings = dict(task="rte", preset=tiny_preset, trainable_layers=2, lr=1e-3, batch_size=8, max_epochs=2,
                    data_dir=glue_dir, max_seq_length=32, seed=0)
    settings.update(overrides)
    return GlueSettings(**settings)


@pytest.fixture(scope="module")
def rte_run(glue_dir, tiny_preset, tmp_path_factory):
    output_dir = str(tmp_path_factory.mktemp("rte_run"))
    summary = runner.run_glue(_config(glue_dir, tiny_preset), output_dir)
    return summary, output_dir


def test_summary_schema(rte_run):
    summary, output_dir = rte_run
    with open(os.path.join(output_dir, "summary.json")) as f:
        on_disk = json.load(f)
    assert on_disk == json.loads(json.dumps(summary))
    assert SUMMARY_KEYS <= set(on_disk)
    assert on_disk["completed"] is True and on_disk["task"] == "rte" and on_disk["num_layers"] == 3
    assert on_disk["metric"] == "accuracy" and on_disk["trainable_layers"] == 2
    assert 0 < on_disk["trainable_params"] < on_disk["total_params"]
    assert on_disk["compile_time_s"] > 0
    epochs = on_disk["epochs"]
    assert [e["epoch"] for e in epochs] == [1, 2]
    assert all(set(e) == EPOCH_KEYS for e in epochs)
    assert epochs[0]["train_time_s"] == pytest.approx(epochs[0]["epoch_time_s"])
    assert all(e["cpu_utilization"] > 0 for e in epochs)
    # The process's peak resident set while training: at least the model's weights, at most the machine's memory.
    assert all(50 < e["peak_memory_mb"] < 64_000 for e in epochs) and on_disk["peak_memory_source"] == "resident set"
    assert on_disk["peak_memory_mb"] == max(e["peak_memory_mb"] for e in epochs)
    # CPU seconds add up like wall seconds, and agree with the utilization they were derived from.
    assert epochs[1]["train_cpu_s"] == pytest.approx(epochs[0]["epoch_cpu_s"] + epochs[1]["epoch_cpu_s"])
    assert epochs[0]["epoch_cpu_s"] == pytest.approx(epochs[0]["cpu_utilization"] * epochs[0]["epoch_time_s"])
    assert on_disk["machine"]["cores"] >= 1 and isinstance(on_disk["machine"]["isa"], list)
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert on_disk["code"] is None if not head else on_disk["code"]["commit"] == head  # None outside a checkout
    assert epochs[1]["train_time_s"] == pytest.approx(epochs[0]["epoch_time_s"] + epochs[1]["epoch_time_s"])
    assert set(epochs[0]["val"]) == {"accuracy"} and set(epochs[0]["test"]) == {"accuracy"}
    assert on_disk["best_epoch"] in (1, 2)
    assert on_disk["examples"] == {"train": 36, "validation": 4, "test/dev": 12}


def test_tensorboard_scalars_read_back(rte_run):
    from tensorboard.backend.event_processing import event_accumulator

    summary, output_dir = rte_run
    (event_file,) = glob.glob(os.path.join(output_dir, "events.out.tfevents.*"))
    accumulator = event_accumulator.EventAccumulator(event_file, size_guidance={"tensors": 0})
    accumulator.Reload()
    tags = set(accumulator.Tags()["tensors"])
    assert {"epoch_time_s", "train_time_s", "peak_memory_mb", "loss", "val/accuracy", "test/accuracy"} <= tags
    import tensorflow as tf

    values = [float(tf.make_ndarray(e.tensor_proto)) for e in accumulator.Tensors("train_time_s")]
    assert values == pytest.approx([e["train_time_s"] for e in summary["epochs"]])
    assert [e.step for e in accumulator.Tensors("val/accuracy")] == [1, 2]
    # The HParams plugin's run entry is there for TensorBoard's HParams dashboard.
    assert "_hparams_/session_start_info" in accumulator.Tags()["tensors"]


def test_completed_run_is_not_trained_again(rte_run, glue_dir, tiny_preset):
    summary, output_dir = rte_run
    again = runner.run_glue(_config(glue_dir, tiny_preset), output_dir)
    assert again == json.loads(json.dumps(summary))


# The runs below check what does not depend on depth (batch size one and regression, MNLI's two dev sets, early
# stopping): they train on conftest's one-block preset, whose traces take about half the 3-block preset's time.
def test_batch_size_one_and_regression(glue_dir, one_block_preset, tmp_path):
    summary = runner.run_glue(
        _config(glue_dir, one_block_preset, task="stsb", batch_size=1, max_epochs=1, max_train_examples=12,
                trainable_layers="all"),
        str(tmp_path))
    assert summary["completed"] and summary["batch_size"] == 1
    assert summary["examples"]["train"] == 12
    epoch = summary["epochs"][0]
    assert set(epoch["val"]) == {"spearman", "pearson"}
    assert epoch["loss"] > 0
    assert summary["trainable_params"] == summary["total_params"]


def test_mnli_scores_both_dev_sets(glue_dir, one_block_preset, tmp_path):
    summary = runner.run_glue(_config(glue_dir, one_block_preset, task="mnli", max_epochs=1, trainable_layers=0),
                              str(tmp_path))
    assert set(summary["epochs"][0]["test"]) == {"dev_matched", "dev_mismatched"}
    assert set(summary["epochs"][0]["test"]["dev_mismatched"]) == {"accuracy"}


def test_early_stopping_in_a_real_run(glue_dir, one_block_preset, tmp_path):
    # With lr tiny the validation accuracy cannot move by more than min_delta=1: patience 1 stops after epoch 2.
    summary = runner.run_glue(
        _config(glue_dir, one_block_preset, trainable_layers=1, lr=1e-9, max_epochs=5, patience=1, min_delta=1.0, task="sst2",
                max_train_examples=8), str(tmp_path))
    assert [e["epoch"] for e in summary["epochs"]] == [1, 2]
    assert summary["stopped_early"] is True and summary["best_epoch"] == 1


@pytest.mark.parametrize("epochs, cap, best, said", [
    (5, 5, 5, True),  # to its cap, best at the last: still improving when it stopped
    (5, 5, 4, False),  # best before the last (where early stopping ends a run, its best is `patience` before it)
    (3, 5, 3, False),  # ended before its cap (a run a budget cut)
    (1, 1, 1, False),  # one epoch: nothing to say it improved
])
def test_the_last_line_says_when_the_best_epoch_was_the_last_of_the_cap(epochs, cap, best, said):
    from tf_transfer.studies.glue.glue_session import results_text

    summary = {"best_epoch": best, "config": {"max_epochs": cap},
               "epochs": [{"val": {"spearman": 0.5 + i / 100}, "test": None} for i in range(epochs)]}
    text = results_text(summary)
    assert text.startswith(f"best epoch {best} of {epochs}")
    assert ("(the last; still improving on validation when --max_epochs stopped it)" in text) is said, text
    if said:
        assert text == ("best epoch 5 of 5 (the last; still improving on validation when --max_epochs stopped it), "
                        "validation spearman 0.5400")


@pytest.mark.parametrize("flags, message", [
    (["--padding=pack", "--jit_compile=true"], "XLA compiles a program for each shape: use --padding=bucket with "
                                                "--jit_compile=true"),
    (["--padding=packed"], "--padding"),
], ids=["xla", "misspelt"])
def test_impossible_packing_is_one_error_line(glue_dir, tiny_preset, tmp_path, flags, message):
    from conftest import run_module

    result = run_module("tf_transfer.glue", "--task=sst2", f"--data_dir={glue_dir}", f"--preset={tiny_preset}",
                        "--max_epochs=1", f"--output_dir={tmp_path}", *flags)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1 and message in errors[0], result.stderr[-2000:]
