"""Multi-task minBERT: CS224N readers, pooling and pair features, layer-wise learning rates, end-to-end runs."""

import json
import logging
import os
from collections import Counter

import numpy as np
import pytest

from conftest import REPO, SENTENCES, TWO_CPUS, copy_when_saved, make_tiny_backbone, run_module
from study_runs import GROUP, run_study
from tf_transfer.data import cs224n as multitask_data
from tf_transfer.core.errors import TransferError
from tf_transfer.core.setting_groups import InputSettings, OptimizerSettings


def _write(path, header, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("\n".join([header] + rows) + "\n")


def write_cs224n(root, n_train=24, n_dev=12, n_quora=30):
    """The course's files in their real layout: tab-separated, an unnamed index column first, no quora-train.csv."""
    os.makedirs(root, exist_ok=True)
    n = len(SENTENCES)
    for split, size, offset in (("train", n_train, 0), ("dev", n_dev, 1)):
        _write(f"{root}/ids-sst-{split}.csv", "\tid\tsentence\tsentiment",
               [f"{i}\t{i:025x}\t {SENTENCES[(i + offset) % n]}\t{i % 5}" for i in range(size)])
        _write(f"{root}/sts-{split}.csv", "\tid\tsentence1\tsentence2\tsimilarity",
               [f"{1000 + i}\t{i:025x}\t{SENTENCES[(i + offset) % n]}\t{SENTENCES[(3 * i + 1) % n]}\t"
                f"{(i * 0.7) % 5:.1f}" for i in range(size)])
    quora = [f"{500 + i}\t{i:025x}\t{SENTENCES[i % n]}\t{SENTENCES[(i * 5 + 3) % n]}\t{float(i % 2)}"
             for i in range(n_quora)]
    # As in the distributed quora-dev.csv: a row with an empty is_duplicate, and one with an empty second question
    # too; a lone quote character (a quoting reader would swallow the following rows).
    quora.insert(3, f"9001\t{'e' * 25}\twhat did he buy ?\tthe dog said \" yes\t")
    quora.insert(7, f"9002\t{'f' * 25}\t\"\"\"who ran ?\"\t\t")
    _write(f"{root}/quora-dev.csv", "\tid\tsentence1\tsentence2\tis_duplicate", quora)
    return root


@pytest.fixture(scope="module")
def cs224n_dir(tmp_path_factory):
    return write_cs224n(str(tmp_path_factory.mktemp("cs224n")))


# ------------------------------------------------------------------------------------------------ readers


def test_cs224n_readers(cs224n_dir, caplog):
    with caplog.at_level(logging.INFO):
        data = multitask_data.load(cs224n_dir)
    sst, para, sts = (data.tasks[name] for name in ("sst", "para", "sts"))
    assert data.num_sentiment_classes == 5
    assert (len(sst.train), len(sst.dev), len(sts.train), len(sts.dev)) == (24, 12, 24, 12)
    # The unnamed index and the id are not text; the leading space of SST sentences is dropped.
    assert sst.train.text_a[1] == SENTENCES[1] and sst.train.text_b is None
    assert sst.train.labels.dtype == np.int64 and list(sst.train.labels[:6]) == [0, 1, 2, 3, 4, 0]
    assert sts.dev.labels.dtype == np.float32 and sts.dev.labels[3] == pytest.approx(2.1)
    assert sts.dev.text_b[0] == SENTENCES[1]
    # 32 Quora rows, 2 with an empty is_duplicate: skipped, counted, and logged once.
    assert data.skipped_rows["quora-dev.csv"] == 2
    assert len(para.train) + len(para.dev) == 30
    assert set(np.concatenate([para.train.labels, para.dev.labels])) == {0, 1}
    warnings = [r.getMessage() for r in caplog.records if "empty is_duplicate" in r.getMessage()]
    assert len(warnings) == 1 and "skipped 2 row(s)" in warnings[0]
    # Quoting is off: a lone quote stays in its text and the rows after it stay rows of their own (30 above).
    texts = para.train.text_a + para.train.text_b + para.dev.text_a + para.dev.text_b
    assert 'he said " yes' in texts
    assert "what did he buy ?" not in texts  # its row had no label


def test_quora_dev_is_split_when_quora_train_is_missing(cs224n_dir, caplog, tmp_path):
    # The absl logger's own level too: a command run earlier in this test process may have left it above INFO.
    with caplog.at_level(logging.INFO), caplog.at_level(logging.INFO, logger="absl"):
        data = multitask_data.load(cs224n_dir, quora_dev_fraction=0.2, split_seed=0)
    para = data.tasks["para"]
    assert (len(para.train), len(para.dev)) == (24, 6)
    # Train and dev partition the usable rows (the fixture repeats pairs, hence multisets).
    usable = multitask_data.read_cs224n_file(f"{cs224n_dir}/quora-dev.csv", multitask_data.CS224N_LAYOUTS["para"])
    pairs = lambda e: Counter(zip(e.text_a, e.text_b, e.labels.tolist()))  # noqa: E731
    assert pairs(para.train) + pairs(para.dev) == pairs(usable)
    assert any("no quora-train.csv" in r.getMessage() for r in caplog.records)
    assert "split quora-dev.csv" in data.notes[0]
    again = multitask_data.load(cs224n_dir, split_seed=0).tasks["para"]
    other = multitask_data.load(cs224n_dir, split_seed=1).tasks["para"]
    assert again.dev.text_a == para.dev.text_a and other.dev.text_a != para.dev.text_a
    # With quora-train.csv present, both files are read as they are.
    folder = write_cs224n(str(tmp_path / "with_train"))
    with open(f"{folder}/quora-dev.csv") as f:
        lines = f.read().splitlines()
    _write(f"{folder}/quora-train.csv", lines[0], lines[1:11])
    full = multitask_data.load(folder)
    assert len(full.tasks["para"].train) == 8 and len(full.tasks["para"].dev) == 30 and not full.notes


@pytest.mark.parametrize("file_name, line, fragment", [
    ("ids-sst-train.csv", "7\tx\t a film\t7", "sentiment '7' is not a whole number 0..4"),
    ("ids-sst-train.csv", "7\tx\t a film", "expected 4 tab-separated columns"),
    ("sts-dev.csv", "7\tx\ta\tb\t5.5", "similarity '5.5' is not a number 0..5"),
    ("quora-dev.csv", "7\tx\ta ?\tb ?\tyes", "is_duplicate 'yes' is not 0.0 or 1.0"),
    ("quora-dev.csv", "7\tx\t \tb ?\t1.0", "empty text"),
])
def test_malformed_rows_name_file_and_line(tmp_path, file_name, line, fragment):
    folder = write_cs224n(str(tmp_path / "data"))
    with open(f"{folder}/{file_name}", "a") as f:
        f.write(line + "\n")
    with pytest.raises(TransferError) as raised:
        multitask_data.load(folder)
    lines = sum(1 for _ in open(f"{folder}/{file_name}"))
    assert f"{file_name}:{lines}:" in str(raised.value) and fragment in str(raised.value)
    skipped = multitask_data.load(folder, skip_bad_rows=True)
    assert skipped.skipped_rows[file_name] == (3 if file_name == "quora-dev.csv" else 1)


def test_missing_file_and_glue_layout(tmp_path, glue_dir):
    with pytest.raises(TransferError, match="missing data file .*ids-sst-train.csv.*--data_format=glue"):
        multitask_data.load(str(tmp_path))
    data = multitask_data.load(glue_dir, "glue")
    assert data.num_sentiment_classes == 2
    assert {name: len(t.train) for name, t in data.tasks.items()} == {"sst": 40, "para": 40, "sts": 40}
    assert data.tasks["sts"].dev.labels.dtype == np.float32 and data.tasks["para"].train.text_b is not None


# ------------------------------------------------------------------------------------------------ model pieces


def test_mean_pooling_ignores_padded_positions():
    from tf_transfer.models.pooling import MeanPooling

    real = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 9.0]], np.float32)
    padded = np.concatenate([real, [[1e6, np.nan], [-7.0, 3.0]]]).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0]], np.int32)
    pooled = np.asarray(MeanPooling()(padded[None], mask))
    np.testing.assert_allclose(pooled, [[3.0, 5.0]], rtol=1e-6)


def test_mean_pooled_sentence_vector_does_not_depend_on_padding_length():
    from tf_transfer.models.pooling import MeanPooling

    backbone = make_tiny_backbone()
    tokens = np.array([2, 7, 9, 11, 3], np.int32)

    def pooled(length):
        token_ids = np.zeros((1, length), np.int32)
        token_ids[0, :5] = tokens
        mask = (np.arange(length) < 5).astype(np.int32)[None]
        features = {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids), "padding_mask": mask}
        return np.asarray(MeanPooling()(backbone(features, training=False)["sequence_output"], mask))

    short, long = pooled(5), pooled(32)
    np.testing.assert_allclose(short, long, atol=1e-5)
    assert np.abs(short).sum() > 0


def test_sbert_pair_features_are_u_v_and_absolute_difference():
    from tf_transfer.models.multitask_model import SbertPairFeatures

    u = np.array([[1.0, 2.0, -3.0]], np.float32)
    v = np.array([[3.0, -1.0, -3.0]], np.float32)
    np.testing.assert_array_equal(np.asarray(SbertPairFeatures()(u, v)), [[1, 2, -3, 3, -1, -3, 2, 3, 0]])


@pytest.fixture(scope="module")
def built_model():
    from tf_transfer.models.multitask_model import build_model
    from tf_transfer.studies.multitask.multitask_settings import MultitaskSettings

    return build_model(make_tiny_backbone(), MultitaskSettings(data_dir="unused"), num_sentiment_classes=5)


@pytest.fixture
def model(built_model):
    """The tiny multi-task model with everything trainable again (tests only compare weights before and after)."""
    from tf_transfer.models import freezing

    freezing.set_trainable_layers(built_model.backbone, freezing.ALL)
    return built_model


def test_layerwise_factors():
    from tf_transfer.training.optimizers import layerwise_factors

    assert layerwise_factors(3, 0.5) == {"block_2": 1.0, "block_1": 0.5, "block_0": 0.25, "embeddings": 0.125,
                                         "pooler": 1.0}


def test_effective_first_step_of_every_variable_is_its_blocks_learning_rate(model):
    import tensorflow as tf

    from tf_transfer.training.optimizers import GroupedAdamW, parameter_groups

    lr, head_lr = 1e-3, 4e-3
    expected = {"embeddings": lr * 0.125, "block_0": lr * 0.25, "block_1": lr * 0.5, "block_2": lr, "pooler": lr,
                "head_sst": head_lr, "head_para": head_lr, "head_sts": head_lr}
    groups = parameter_groups(model, lr, 0.5, head_lr)
    assert {g.name: g.learning_rate for g in groups} == pytest.approx(expected)
    optimizer = GroupedAdamW(groups, OptimizerSettings(lr=lr, weight_decay=0.0, clip_norm=0.0))
    variables = list(model.trainable_variables)
    before = [np.array(v.numpy()) for v in variables]
    # Adam's first step is lr * g / (|g| + eps) per element: with g = 1 it is the variable's learning rate.
    optimizer.apply([tf.ones(v.shape) for v in variables], variables)
    group_of = {id(v): g.name for g in groups for v in g.variables}
    for variable, old in zip(variables, before):
        step = old - variable.numpy()
        np.testing.assert_allclose(step, expected[group_of[id(variable)]], rtol=1e-4, err_msg=variable.path)
    assert len(group_of) == len(variables)


def test_weight_decay_scales_with_the_groups_learning_rate(model):
    import tensorflow as tf

    from tf_transfer.training.optimizers import GroupedAdamW, parameter_groups

    groups = parameter_groups(model, 1e-2, 0.5)
    optimizer = GroupedAdamW(groups, OptimizerSettings(lr=1e-2, weight_decay=0.1, clip_norm=0.0))
    block_0 = next(g for g in groups if g.name == "block_0")
    kernel = next(v for v in block_0.variables if v.path.endswith("kernel"))
    gamma = next(v for v in block_0.variables if v.path.endswith("gamma"))
    old_kernel, old_gamma = np.array(kernel.numpy()), np.array(gamma.numpy())
    # A zero gradient leaves only the decoupled decay: w -= group lr * decay * w, LayerNorm excluded.
    optimizer.apply([tf.zeros(v.shape) for v in model.trainable_variables], model.trainable_variables)
    np.testing.assert_allclose(kernel.numpy(), old_kernel * (1 - 1e-2 * 0.25 * 0.1), rtol=1e-6)
    np.testing.assert_array_equal(gamma.numpy(), old_gamma)


def test_each_head_counts_its_own_adam_steps(model):
    import tensorflow as tf

    from tf_transfer.training.optimizers import GroupedAdamW, parameter_groups

    groups = parameter_groups(model, 1e-3, 1.0)
    optimizer = GroupedAdamW(groups, OptimizerSettings(lr=1e-3, weight_decay=0.0, clip_norm=0.0))
    sst = model.task_heads["sst"].trainable_variables
    para = model.task_heads["para"].trainable_variables
    for _ in range(10):  # the sentiment pass of a sequential epoch
        optimizer.apply([tf.ones(v.shape) for v in sst], sst)
    before = [np.array(v.numpy()) for v in para]
    optimizer.apply([tf.ones(v.shape) for v in para], para)
    # The paraphrase head's first step is bias-corrected as a first step: lr, not ~3.2 lr after 10 shared steps.
    for variable, old in zip(para, before):
        np.testing.assert_allclose(old - variable.numpy(), 1e-3, rtol=1e-4)


def test_frozen_blocks_and_pooler_have_no_group(model):
    from tf_transfer.models import freezing
    from tf_transfer.training.optimizers import parameter_groups

    freezing.set_trainable_layers(model.backbone, 1)
    groups = parameter_groups(model, 1e-3, 0.95)
    assert [g.name for g in groups] == ["block_2", "pooler", "head_sst", "head_para", "head_sts"]
    assert groups[0].learning_rate == groups[1].learning_rate == 1e-3
    freezing.set_trainable_layers(model.backbone, 0)
    model.backbone.get_layer(freezing.POOLER).trainable = False
    frozen = parameter_groups(model, 1e-3, 0.95)
    assert [g.name for g in frozen] == ["head_sst", "head_para", "head_sts"]


def test_epoch_batches_of_both_schedules():
    from tf_transfer.data.multitask_feed import epoch_batches

    sizes = {"sst": 10, "para": 25, "sts": 7}
    sequential = epoch_batches(sizes, 4, seed=0, epoch=1, schedule="sequential", order=("sts", "sst", "para"))
    assert [next(iter(step)) for step in sequential] == ["sts"] * 2 + ["sst"] * 3 + ["para"] * 7
    for task, size in sizes.items():
        seen = np.concatenate([step[task] for step in sequential if task in step])
        assert sorted(seen) == list(range(size))
    summed = epoch_batches(sizes, 4, seed=0, epoch=1, schedule="summed", order=("sst", "para", "sts"))
    assert len(summed) == 7 and all(set(step) == set(sizes) for step in summed)
    assert [len(step["sts"]) for step in summed] == [4] * 6 + [1]
    assert all(len(step["sst"]) == len(step["para"]) == len(step["sts"]) for step in summed)
    assert sorted(np.concatenate([s["para"] for s in summed])) == list(range(25))
    sts_seen = np.concatenate([s["sts"] for s in summed])
    assert set(sts_seen) == set(range(7)) and len(sts_seen) == 25  # reshuffled and reused
    assert not np.array_equal(sts_seen[:7], sts_seen[7:14])
    again = epoch_batches(sizes, 4, seed=0, epoch=2, schedule="summed", order=("sst", "para", "sts"))
    assert not np.array_equal(np.concatenate([s["para"] for s in again]), np.concatenate([s["para"] for s in summed]))


def test_settings_are_validated():
    from tf_transfer.studies.multitask.multitask_settings import MultitaskSettings

    for bad, fragment in [({"pair_head": "siamese"}, "--pair_head must be one of sbert, concat"),
                          ({"pooling_sts": "max"}, "--pooling_sts must be one of cls, mean"),
                          ({"schedule": "mixed"}, "--schedule must be one of"),
                          ({"task_order": "sst,sts"}, "--task_order must name each of sst, para, sts"),
                          ({"llrd": 1.5}, "--llrd must be in (0, 1]"),
                          ({"trainable_layers": "some"}, "--trainable_layers must be"),
                          ({"precision": "bf16"}, "--precision must be one of float32, mixed_bfloat16"),
                          ({"data_dir": None}, "--data_dir is required")]:
        with pytest.raises(TransferError) as raised:
            MultitaskSettings(**{"data_dir": "d", **bad})
        assert fragment in str(raised.value)
    assert MultitaskSettings(data_dir="d", task_order="STS, sst,para").task_order == ("sts", "sst", "para")


# ------------------------------------------------------------------------------------------------ end to end

SUMMARY_KEYS = {"task", "preset", "num_layers", "trainable_layers", "lr", "batch_size", "seed", "metric",
                "trainable_params", "total_params", "compile_time_s", "epochs", "best_epoch", "stopped_early",
                "completed"}
SCORE_KEYS = {"sst_accuracy", "paraphrase_accuracy", "sts_pearson", "overall"}


@pytest.fixture(scope="module")
def runs(cs224n_dir, one_block_preset, tmp_path_factory):
    """Two one-epoch runs on the one-block preset (what they check holds at any depth; it traces in about half the
    three-block preset's time). The sequential run computes in float16 (its loss scaled), the summed one in bfloat16:
    each mixed precision trains end to end to a finite loss, and float32 runs are the resume's and the mirrored
    test's."""
    from tf_transfer.studies.multitask import multitask_task as multitask
    from tf_transfer.studies.multitask.multitask_settings import MultitaskSettings

    results = {}
    for schedule, overrides in (("sequential", {"pooling_sst": "mean", "llrd": 0.9, "precision": "mixed_float16"}),
                                # BitFit on the shared encoder: its biases and LayerNorms' betas train, and the heads.
                                ("summed", {"pair_head": "concat", "task_order": "sts,para,sst",
                                            "precision": "mixed_bfloat16", "method": "bitfit"})):
        settings = MultitaskSettings(
            data_dir=cs224n_dir, preset=one_block_preset, schedule=schedule, max_epochs=1, batch_size=8, lr=1e-3,
            max_seq_length=32, max_train_examples=16, **overrides)
        output_dir = str(tmp_path_factory.mktemp(schedule))
        results[schedule] = (settings, output_dir, multitask.run_multitask(settings, output_dir))
    return results


# The tests that read `runs` share one test process, so its two runs are trained once in the suite, not once in
# each xdist worker (about 20 s each).
RUNS_GROUP = pytest.mark.xdist_group("multitask_runs")


@RUNS_GROUP
@pytest.mark.parametrize("schedule", ["sequential", "summed"])
def test_one_epoch_run_writes_summary_weights_and_tensorboard(runs, schedule):
    settings, output_dir, summary = runs[schedule]
    with open(os.path.join(output_dir, "summary.json")) as f:
        on_disk = json.load(f)
    assert on_disk == json.loads(json.dumps(summary))
    assert SUMMARY_KEYS <= set(on_disk)
    assert on_disk["completed"] is True and on_disk["task"] == "multitask" and on_disk["metric"] == "overall"
    assert on_disk["num_layers"] == 1 and on_disk["trainable_layers"] == "all" and on_disk["compile_time_s"] > 0
    if schedule == "sequential":  # freezing: everything trains, and the record is what it was before --method
        assert on_disk["trainable_params"] == on_disk["total_params"] > 0 and on_disk["method"] == "freeze"
        assert "method" not in on_disk["config"] and not settings.run_name().startswith("freeze")
    else:  # BitFit: each block's biases (query, key, value, attention output: 16 each; feed-forward: 32 and 16)
        # and its two LayerNorms' betas (16 each)
        rows = {row["part"]: row for row in on_disk["parameter_table"]}
        assert rows["block_0"]["trainable"] == 144 and "block_1" not in rows
        assert rows["block_0"]["total"] > 144 and on_disk["method"] == on_disk["config"]["method"] == "bitfit"
        assert on_disk["bitfit"] == {"layer_norm": False} and settings.run_name().startswith("bitfit_")
    (epoch,) = on_disk["epochs"]
    assert {"epoch", "epoch_time_s", "train_time_s", "loss", "val", "test"} <= set(epoch)
    assert set(epoch["val"]) == set(epoch["test"]) == SCORE_KEYS and epoch["val"] == epoch["test"]
    assert set(epoch["task_loss"]) == {"sst", "para", "sts"} and np.isfinite(epoch["loss"]) and epoch["loss"] > 0
    assert 0 <= epoch["test"]["sst_accuracy"] <= 1 and 0 <= epoch["test"]["paraphrase_accuracy"] <= 1
    assert on_disk["examples"] == {"sst/train": 16, "sst/dev": 12, "para/train": 16, "para/dev": 6,
                                   "sts/train": 16, "sts/dev": 12}
    assert on_disk["skipped_rows"]["quora-dev.csv"] == 2 and on_disk["config"]["schedule"] == schedule
    assert on_disk["precision"] == on_disk["config"]["precision"] == {"sequential": "mixed_float16",
                                                                     "summed": "mixed_bfloat16"}[schedule]
    if epoch["test"]["overall"] is not None:
        assert on_disk["best_epoch"] == 1 and os.path.exists(os.path.join(output_dir, "best.weights.h5"))
    from tensorboard.backend.event_processing import event_accumulator

    (events,) = [name for name in os.listdir(output_dir) if name.startswith("events.out.tfevents")]
    accumulator = event_accumulator.EventAccumulator(os.path.join(output_dir, events), size_guidance={"tensors": 0})
    accumulator.Reload()
    tags = set(accumulator.Tags()["tensors"])
    assert {"epoch_time_s", "loss", "loss/sts", "val/overall", "test/sts_pearson"} <= tags
    assert "_hparams_/session_start_info" in tags
    if schedule == "sequential":
        lrs = on_disk["learning_rates"]
        # The run records the rates it trained with (their decay by depth: test_effective_first_step_...).
        assert lrs["block_0"] == pytest.approx(1e-3) and lrs["embeddings"] == pytest.approx(1e-3 * 0.9)


@RUNS_GROUP
def test_best_weights_reproduce_the_best_epochs_dev_scores(runs):
    """`--init_from` loads best.weights.h5: scoring the loaded model gives the best epoch's dev scores again."""
    from tf_transfer.data.multitask_feed import MultitaskFeed, encode_split
    from tf_transfer.models import backbones
    from tf_transfer.models.multitask_model import build_model
    from tf_transfer.studies.multitask import multitask_task as multitask
    from tf_transfer.studies.multitask.multitask_settings import MultitaskSettings
    from tf_transfer.studies.multitask.multitask_steps import make_predict, scores as multitask_scores

    import keras

    settings, output_dir, summary = runs["sequential"]
    assert summary["best_epoch"] == 1, "a finite overall score is expected on the fixture data"
    # As the run computed (mixed_float16); the summed run left mixed_bfloat16 set. float32 again afterwards.
    keras.mixed_precision.set_global_policy(settings.precision)
    try:
        loaded = backbones.load_preset(settings.preset)
        model = build_model(loaded.backbone, settings, 5)
        multitask.load_initial_weights(model, output_dir)
        data = multitask_data.load(settings.data_dir)
        dev = {task: encode_split(task, data.tasks[task].dev, loaded.tokenizer, settings.pair_head,
                                  settings.max_seq_length) for task in data.tasks}
        predict = {task: make_predict(model, task, settings.pair_head) for task in dev}
        feed = MultitaskFeed({"train": dev, "dev": dev}, InputSettings(batch_size=32, seed=0, eval_batch_size=64),
                             "sequential", tuple(dev))
        scores = multitask_scores(feed.predict(predict, "dev"), feed.labels("dev"))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert scores == pytest.approx(summary["epochs"][0]["test"], abs=1e-6)
    concat = MultitaskSettings(data_dir="d", preset=settings.preset, pair_head="concat", init_from=output_dir)
    with pytest.raises(TransferError, match="--pair_head=sbert"):
        multitask.check_init_from(concat)


def test_bad_data_exits_2_with_one_error_line(tmp_path):
    folder = write_cs224n(str(tmp_path / "data"))
    with open(f"{folder}/sts-train.csv", "a") as f:
        f.write("99\tx\ta\tb\tfive\n")
    done = run_module("tf_transfer.multitask", "--flagfile=flags/li_summed.flags", f"--data_dir={folder}",
                      f"--output_dir={tmp_path / 'run'}", "--preset=unused")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "sts-train.csv:26:" in errors[0] and "'five'" in errors[0]


def read_flagfile(path: str) -> dict:
    """`--name=value` lines of an absl flagfile, nested --flagfile included; later lines win, as in absl."""
    values = {}
    with open(os.path.join(REPO, path)) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, value = line[2:].partition("=")
            values.update(read_flagfile(value) if name == "flagfile" else {name: value})
    return values


def test_every_paper_flagfile_gives_valid_settings():
    """Each row's flagfile names only the entry point's flags and gives valid settings (absl itself parses them in
    test_bad_data_exits_2_with_one_error_line, through li_summed -> li_base -> li_common)."""
    import dataclasses
    import glob
    import re

    from tf_transfer.studies.multitask.multitask_settings import MultitaskSettings

    from tf_transfer import multitask as command

    with open(os.path.join(REPO, "tf_transfer", "multitask.py")) as f:
        defined = set(re.findall(r'DEFINE_\w+\(\s*"(\w+)"', f.read())) | set(command.COMMAND_FLAGS)
    defaults = {field.name: field.default for field in dataclasses.fields(MultitaskSettings)}
    convert = {bool: lambda v: v.lower() in ("true", "1"), int: int, float: float}
    rows = {}
    for path in sorted(glob.glob(os.path.join(REPO, "flags", "li_*.flags"))):
        name = os.path.basename(path)[:-len(".flags")]
        values = read_flagfile(path)
        assert set(values) <= defined, (name, set(values) - defined)
        if name in ("li_common", "li_base", "li_base_mean", "li_base_mixed"):
            continue  # included by the rows below
        settings = {k: convert.get(type(defaults[k]), str)(v) for k, v in values.items() if k in defaults}
        rows[name] = dict(MultitaskSettings(data_dir="d", **settings).to_dict(), output_dir=values.get("output_dir"))
    assert set(rows) == {"li_frozen_heads", "li_finetune", "li_heads_first", "li_heads_then_finetune",
                         "li_pooling_cls", "li_pooling_mean", "li_pooling_mixed", "li_sbert", "li_concat", "li_llrd",
                         "li_llrd_mixed", "li_no_llrd", "li_sequential", "li_summed"}
    assert rows["li_frozen_heads"]["lr"] == 1e-3 and rows["li_frozen_heads"]["trainable_layers"] == 0
    assert rows["li_frozen_heads"]["freeze_pooler"] is True
    assert rows["li_finetune"]["lr"] == 1e-5 and rows["li_finetune"]["trainable_layers"] == "all"
    assert rows["li_heads_then_finetune"]["init_from"] == rows["li_heads_first"]["output_dir"]
    assert rows["li_heads_first"]["trainable_layers"] == 0 and rows["li_heads_then_finetune"]["lr"] == 1e-5
    assert rows["li_pooling_mean"]["pooling_para"] == "mean" and rows["li_pooling_cls"]["pooling_sts"] == "cls"
    assert rows["li_concat"]["pair_head"] == "concat" and rows["li_sbert"]["pair_head"] == "sbert"
    assert rows["li_llrd"]["llrd"] == 0.95 and rows["li_no_llrd"]["llrd"] == 1.0
    assert rows["li_summed"]["schedule"] == "summed" and rows["li_sequential"]["schedule"] == "sequential"
    assert all(r["batch_size"] == 32 and r["max_epochs"] == 20 for r in rows.values())
    # The paper's bases: Table 2 (the baseline) [CLS] for all and the order sst, para, sts; after it the order para,
    # sts, sst, with the mean for all three tasks (Tables 3, 5) or [CLS] for sst and the mean for the pairs (4, 6, 7).
    poolings = {name: (r["pooling_sst"], r["pooling_para"], r["pooling_sts"]) for name, r in rows.items()}
    orders = {name: r["task_order"] for name, r in rows.items()}
    table = {"li_frozen_heads": 2, "li_finetune": 2, "li_heads_first": 2, "li_heads_then_finetune": 2,
             "li_pooling_cls": 2, "li_sbert": 2, "li_concat": 2, "li_pooling_mean": 3, "li_no_llrd": 5, "li_llrd": 5,
             "li_pooling_mixed": 4, "li_sequential": 6, "li_llrd_mixed": 6, "li_summed": 7}
    bases = {2: (("cls", "cls", "cls"), "sst,para,sts"), 3: (("mean", "mean", "mean"), "para,sts,sst"),
             5: (("mean", "mean", "mean"), "para,sts,sst"), 4: (("cls", "mean", "mean"), "para,sts,sst"),
             6: (("cls", "mean", "mean"), "para,sts,sst"), 7: (("cls", "mean", "mean"), "para,sts,sst")}
    assert set(table) == set(rows)
    for name, number in table.items():
        assert (poolings[name], orders[name]) == bases[number], name
    assert rows["li_llrd_mixed"]["llrd"] == 0.95 and rows["li_summed"]["llrd"] == 1.0
    # Rows that stand for each other have the same settings.
    same = lambda a, b: {**rows[a], "output_dir": None} == {**rows[b], "output_dir": None}  # noqa: E731
    assert same("li_finetune", "li_pooling_cls") and same("li_finetune", "li_sbert")
    assert same("li_pooling_mean", "li_no_llrd") and same("li_pooling_mixed", "li_sequential")
    assert None not in {r["output_dir"] for r in rows.values()}
    assert len({r["output_dir"] for r in rows.values()}) == len(rows)


def test_interrupted_run_resumes_to_the_same_numbers(cs224n_dir, one_block_preset, tmp_path, monkeypatch):
    """A straight run and its resume on the one-block preset: every variable trains (embeddings, the block, pooler,
    heads) and dropout is on, so the resume has weights, optimizer slots, dropout RNG and data order to continue, at
    a third of the 3-block preset's traces. What a process killed right after epoch 1 was saved leaves is the
    straight run's folder then (`conftest.copy_when_saved`)."""
    from tf_transfer.studies.multitask import multitask_task as multitask
    from tf_transfer.studies.multitask.multitask_settings import MultitaskSettings

    settings = MultitaskSettings(
        data_dir=cs224n_dir, preset=one_block_preset, schedule="summed", max_epochs=2, batch_size=8, lr=1e-3,
        max_seq_length=32, max_train_examples=16)
    resumed_dir = str(tmp_path / "resumed")
    copy_when_saved(monkeypatch, lambda folder, epoch: epoch == 1, tmp_path / "straight", resumed_dir)
    straight = multitask.run_multitask(settings, str(tmp_path / "straight"))
    with open(os.path.join(resumed_dir, "summary.json")) as f:
        partial = json.load(f)
    assert partial["completed"] is False and [e["epoch"] for e in partial["epochs"]] == [1]
    # An unfinished run is not continued with other settings (the resume below shows the refusals left it as it was).
    other = MultitaskSettings(**{**settings.to_dict(), "lr": 2e-3})
    bf16 = MultitaskSettings(**{**settings.to_dict(), "precision": "mixed_bfloat16"})
    for changed in (other, bf16):
        with pytest.raises(TransferError, match="other settings"):
            multitask.run_multitask(changed, resumed_dir)

    resumed = multitask.run_multitask(settings, resumed_dir)
    assert resumed["completed"] is True and [e["epoch"] for e in resumed["epochs"]] == [1, 2]
    assert resumed["epochs"][0] == partial["epochs"][0] and [r["after_epoch"] for r in resumed["resumes"]] == [1]
    # Weights, optimizer slots, dropout RNG and data order continue: the same losses and scores as unbroken.
    for got, want in zip(resumed["epochs"], straight["epochs"]):
        assert (got["loss"], got["task_loss"], got["test"]) == (want["loss"], want["task_loss"], want["test"])
    assert not [f for f in os.listdir(resumed_dir) if f.startswith("checkpoint-epoch")]

    # Finished: the same settings get the stored result without training; other settings are refused.
    again = multitask.run_multitask(settings, resumed_dir)
    assert again["epochs"] == json.loads(json.dumps(resumed["epochs"]))
    with pytest.raises(TransferError, match=r"holds a completed run with other settings \(lr\)"):
        multitask.run_multitask(other, resumed_dir)


EPOCH_KEYS = {"epoch", "epoch_time_s", "train_time_s", "cpu_utilization", "epoch_cpu_s", "train_cpu_s",
              "others_cpu_load", "speed_probe_cpu_ms", "peak_memory_mb", "loss", "val", "test", "task_loss"}


@pytest.mark.xdist_group(GROUP)
def test_mirrored_over_two_logical_cpus_computes_what_one_device_does(one_device_runs, tmp_path):
    """Batches of 5 and 2 per task split unevenly over two replicas; the default strategy's run is
    tests/study_runs.py's, shared with the two-worker test."""
    from tf_transfer.core import strategies

    strategy = strategies.make_strategy("mirrored", TWO_CPUS)
    assert strategy.num_replicas_in_sync == 2
    summary = json.loads(json.dumps(run_study("multitask", one_device_runs.specs["multitask"],
                                              str(tmp_path / "mirrored"), strategy, "mirrored")))
    reference = one_device_runs.run("multitask")
    assert summary["completed"] is True and len(summary["epochs"]) == len(reference["epochs"]) == 2
    for default, mirrored in zip(reference["epochs"], summary["epochs"]):
        assert set(mirrored) == EPOCH_KEYS == set(default)
        # Each replica's loss is its share of the step's mean, and the gradients are summed over the replicas.
        assert mirrored["loss"] == pytest.approx(default["loss"], rel=1e-5)
        assert mirrored["task_loss"] == pytest.approx(default["task_loss"], rel=1e-5)
        assert mirrored["test"] == pytest.approx(default["test"], abs=1e-3)  # Pearson on 12 dev pairs moves most
