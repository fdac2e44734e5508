"""Adaptive freezing (--method=autofreeze, freezeout): the rule and schedule, the gradient sums, the growing cache,
a run that freezes, its record, its resume, and bad input."""

import math

import numpy as np
import pytest

from tf_transfer.core.errors import TransferError
from tf_transfer.models.methods.adaptive import schedules as fs
from tf_transfer.studies.glue import glue_task
from tf_transfer.studies.glue.glue_settings import GlueSettings
from tf_transfer.training import record

from conftest import copy_when_saved, run_module
from study_runs import GROUP


# --- the rule and the schedule (numbers only) ------------------------------------------------------------------------

def test_autofreeze_freezes_the_blocks_below_the_first_that_still_changes():
    # Changes 0.25, 0.5, 0.75, 0.625: median 0.5625, block 2 is the first at or above it: blocks 0 and 1 freeze.
    frozen, changes, threshold = fs.autofreeze_frozen([2.0] * 4, [1.5, 1.0, 0.5, 0.75], 0, 50, 1)
    assert (frozen, threshold) == (2, 0.5625) and changes == [0.25, 0.5, 0.75, 0.625]
    # The first interval only measures.
    assert fs.autofreeze_frozen(None, [1.0] * 4, 0, 50, 1) == (0, None, None)


def test_autofreeze_never_unfreezes_never_freezes_above_a_training_block_and_keeps_the_top():
    # Block 0 changes most: nothing above it may freeze, even blocks that changed little.
    assert fs.autofreeze_frozen([1.0] * 4, [0.1, 1.0, 1.0, 1.0], 0, 50, 1)[0] == 0
    # Equal changes: the first block reaches the percentile, nothing freezes.
    assert fs.autofreeze_frozen([1.0] * 4, [1.0, 1.0, 1.0, 1.0], 0, 50, 1)[0] == 0
    # Only the top block changing: all but the top min_trainable freeze.
    assert fs.autofreeze_frozen([1.0] * 4, [1.0, 1.0, 1.0, 0.1], 0, 100, 1)[0] == 3
    assert fs.autofreeze_frozen([1.0] * 4, [1.0, 1.0, 1.0, 0.1], 0, 100, 2)[0] == 2
    # Two blocks frozen already: the percentile is over the other two (changes 0.1 and 0.8: median 0.45).
    frozen, changes, threshold = fs.autofreeze_frozen([0, 0, 1.0, 1.0], [0, 0, 0.9, 0.2], 2, 50, 1)
    assert frozen == 3 and threshold == pytest.approx(0.45) and changes[:2] == [None, None]
    # ... and the count never goes down.
    assert fs.autofreeze_frozen([1.0] * 3, [0.9, 0.9, 0.9], 2, 50, 0)[0] == 2


def test_freezeout_times_are_the_authors_cubic_schedule():
    times = fs.freezeout_times(num_blocks=6, t0=0.8, scale="cubic", min_trainable=1)
    # Layer i of N = 7 (embeddings 0, blocks 1..6, head 7): (0.8 + 0.2 i / 7)^3; the top block is kept (t = 1).
    assert times[:6] == pytest.approx([(0.8 + 0.2 * i / 7) ** 3 for i in range(6)])
    assert times[6] == 1.0 and times == sorted(times)
    steps = fs.freezeout_freeze_steps(times, 1000)
    assert steps[0] == 512 and steps[6] is None
    assert fs.freezeout_frozen(511, steps) == -1 and fs.freezeout_frozen(512, steps) == 0
    assert fs.freezeout_frozen(1000, steps) == 5  # the kept block never freezes
    linear = fs.freezeout_times(num_blocks=2, t0=0.5, scale="linear", min_trainable=0)
    assert linear == pytest.approx([0.5, 0.5 + 0.5 / 3, 0.5 + 1 / 3])


def test_freezeout_rate_anneals_to_zero_by_cosine():
    assert fs.freezeout_rate_factor(0, 0.5, 100, scale_lr=True) == pytest.approx(2.0)
    assert fs.freezeout_rate_factor(25, 0.5, 100, scale_lr=False) == pytest.approx(0.5)
    assert fs.freezeout_rate_factor(50, 0.5, 100, scale_lr=False) == 0.0


# --- the TensorFlow parts ---------------------------------------------------------------------------------------------

def _tiny_dense_model():
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(4, name="b0")(inputs)
    outputs = keras.layers.Dense(1, name="b1")(hidden)
    return keras.Model(inputs, outputs)


def test_block_gradient_sums_are_the_steps_gradients_summed():
    import keras
    import tensorflow as tf

    from tf_transfer.models.methods.adaptive.block_gradients import BlockGradients

    model = _tiny_dense_model()
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    blocks = [model.get_layer("b0").trainable_variables, model.get_layer("b1").trainable_variables]
    sums = BlockGradients(None, blocks)
    sums.install(model.optimizer)
    x, y = np.random.default_rng(0).normal(size=(8, 3)).astype("float32"), np.ones((8, 1), "float32")
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)  # two steps; lr 0: the same weights
    expected = []
    for block in blocks:
        total = [0.0 * v.numpy() for v in block]
        for half in (slice(0, 4), slice(4, 8)):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x[half]) - y[half]))
            total = [t + g.numpy() for t, g in zip(total, tape.gradient(loss, [v.value for v in block]))]
        expected.append(sum(np.abs(t).sum() for t in total))
    assert sums.norms() == pytest.approx(expected, rel=1e-5)
    sums.reset()
    assert sums.norms() == [0.0, 0.0]


def test_layer_rates_anneal_each_layers_updates():
    import keras

    from tf_transfer.models.methods.adaptive import layer_rates

    model = _tiny_dense_model()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    b0, b1 = model.get_layer("b0"), model.get_layer("b1")
    model.optimizer.build(model.trainable_variables)
    # b0 frozen after 1 of 4 steps (t = 0.25), b1 never (no layer: t = 1).
    layer_rates.anneal_layers(model.optimizer, [b0.trainable_variables], [0.25], total_steps=4, scale_lr=False)
    x, y = np.ones((8, 3), "float32"), np.zeros((8, 1), "float32")
    before = [v.numpy().copy() for v in b0.trainable_variables]
    model.fit(x[:2], y[:2], batch_size=2, epochs=1, verbose=0)  # step 0: factor 1
    after_one = [v.numpy().copy() for v in b0.trainable_variables]
    assert any(not np.allclose(a, b) for a, b in zip(before, after_one))
    model.fit(x[:4], y[:4], batch_size=2, epochs=1, verbose=0)  # steps 1, 2: past t_0 T = 1, factor 0
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(after_one, b0.trainable_variables))


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_an_extended_cache_is_the_deeper_prefix_computed_from_the_stored_outputs(tiny_preset, packed):
    """Padded, or packed (`--padding=pack`: built, extended and compared on packed rows, two or three of these
    sentences to a row of 16 tokens)."""
    from tf_transfer.core.setting_groups import InputSettings
    from tf_transfer.data import cache, inputs
    from tf_transfer.data.examples import Examples
    from tf_transfer.models import backbones, cached_prefix

    loaded = backbones.load_preset(tiny_preset)
    sentences = ["the cat is happy", "a dog runs in the house now", "she eats", "who ran from the green house ?"]
    examples = Examples(sentences, None, np.array([0, 1, 0, 1]))
    encoded = inputs.encode(examples, loaded.tokenizer, 16)
    backbone = loaded.backbone
    batching = InputSettings(max_seq_length=16, eval_batch_size=3)
    keys = [f"ext-test-{packed}-{depth}" for depth in ("d1", "d1+3", "d3")]
    one, _, _ = cache.build(cached_prefix.prefix_model(backbone, 2, packed), encoded, keys[0], batching,
                            packed=packed)
    extended, seconds, reused = cache.extend(cached_prefix.blocks_model(backbone, 1, 3, packed=packed), one, keys[1],
                                             batching, packed=packed)
    at_once, _, _ = cache.build(cached_prefix.prefix_model(backbone, 0), encoded, keys[2], batching)
    assert not reused and seconds > 0
    assert extended.hidden.shape == at_once.hidden.shape
    # The same blocks on the same inputs; only the float16 rounding of the stored depth-1 outputs differs.
    np.testing.assert_allclose(extended.hidden.astype("float32"), at_once.hidden.astype("float32"), atol=2e-2)
    for key in keys:
        cache.forget(key)


# --- runs -------------------------------------------------------------------------------------------------------------

def _settings(glue_dir, preset, **overrides):
    values = dict(task="sst2", preset=preset, method="autofreeze", lr=1e-3, batch_size=4, max_epochs=3,
                  patience=10, data_dir=glue_dir, max_seq_length=16, seed=0, freeze_interval_steps=2,
                  freeze_percentile=100.0)
    values.update(overrides)
    return GlueSettings(**values)


def test_autofreeze_records_its_freezes_and_resumes_after_one_with_the_same_numbers(glue_dir, two_block_preset,
                                                                                     tmp_path, monkeypatch, capsys):
    """Killed right after epoch 1 (whose step 4 froze the embeddings and block 0 of the two; the gradient sums of
    an unfinished interval pending), the rerun replays the freeze and ends with the unbroken run's numbers. What the
    kill leaves is the unbroken run's folder as it was right after epoch 1 was saved (`conftest.copy_when_saved`),
    so that the killed run's first epoch is not trained a second time. With `--padding=pack` and dropout on: the
    replayed freeze builds the packed cache again, and the suffix's dropout draws go on where they stopped (the
    packed run's numbers against the padded one's: the test below)."""
    settings = _settings(glue_dir, two_block_preset, max_epochs=2, padding="pack")
    copy_when_saved(monkeypatch, lambda folder, epoch: epoch == 1, tmp_path / "straight", tmp_path / "resumed")
    straight = glue_task.run_glue(settings, str(tmp_path / "straight"))
    freezing = straight["freezing"]
    events = freezing["events"]
    assert straight["completed"] and events, freezing["decisions"]
    # Bottom-up, never the top block, each with its step, epoch and the statistic that decided it.
    assert events[0]["embeddings"] and events[-1]["frozen_blocks"] == 1  # the top block is kept
    assert [e["frozen_blocks"] for e in events] == sorted({e["frozen_blocks"] for e in events})
    for event in events:
        assert event["step"] % 2 == 0 and event["changes"] and event["threshold"] is not None
        before = [c for c in event["changes"][:event["frozen_blocks"]] if c is not None]
        assert event["changes"][event["frozen_blocks"]] >= event["threshold"] > max(before)
    assert [d["step"] for d in freezing["decisions"]] == list(range(2, freezing["global_step"] + 1, 2))
    assert events[0]["epoch"] == 1, "the kill below must come after the first freeze"
    assert f"at step {events[0]['step']} (epoch 1)" in capsys.readouterr().out
    params = [e["trainable_params"] for e in straight["epochs"]]
    assert params == sorted(params, reverse=True) and params[-1] == events[-1]["trainable_params"]
    assert sum(p["steps"] for p in freezing["phases"]) == freezing["global_step"]
    from tf_transfer.reporting import runs_table

    shown = runs_table.collect(str(tmp_path / "straight")).rows[0]["method"]
    assert shown.startswith(f"autofreeze: k={2 - events[-1]['frozen_blocks']} at the end; froze "
                            f"{events[0]['frozen_blocks']}@{events[0]['step']}"), shown

    assert [e["epoch"] for e in record.read_summary(str(tmp_path / "resumed"))["epochs"]] == [1]
    resumed = glue_task.run_glue(settings, str(tmp_path / "resumed"))
    assert [r["after_epoch"] for r in resumed["resumes"]] == [1]
    timings = ("cache_s", "compile_s")
    assert [{k: v for k, v in e.items() if k not in timings} for e in resumed["freezing"]["events"]] == [
        {k: v for k, v in e.items() if k not in timings} for e in events]
    assert resumed["freezing"]["decisions"] == freezing["decisions"]
    for a, b in zip(straight["epochs"], resumed["epochs"]):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
        assert b["val"] == pytest.approx(a["val"])


def test_a_packed_autofreeze_run_trains_as_the_padded_one(glue_dir, two_block_preset, tmp_path, monkeypatch):
    """`--padding=pack` after a freeze: the cache is built on packed rows and the suffix trains on packed rows (the
    cache's and the suffix model's kind recorded below), so `summary.json`'s padding efficiency is the packed
    layout's. Against `--padding=fixed`, whose batches are pack's (bucket batches by length), dropout 0: the same
    decisions and freezes at the same steps, from every block's gradient sums within 1e-5 relative (1e-7 seen),
    before the freeze and after it (the suffix's): float32 sums in other shapes, which the float16 cache may round to
    a neighbouring value (2**-11 relative; 2 of 4,224 cached values here); the same scores and epoch losses (each a
    mean over examples: tf_transfer/data/packing.py on `cls_positions`). A packed run's resume is the test above's."""
    from tf_transfer.data import cache
    from tf_transfer.models import cached_prefix

    runs = {padding: _settings(glue_dir, two_block_preset, max_epochs=2, dropout=0.0, padding=padding)
            for padding in ("pack", "fixed")}
    built, suffixes = [], []  # each cache built: packed?; each suffix model trained: its name
    build, suffix_classifier = cache.build, cached_prefix.suffix_classifier

    def recorded_suffix(*args, **kwargs):
        model = suffix_classifier(*args, **kwargs)
        suffixes.append(model.name)
        return model

    monkeypatch.setattr(cache, "build", lambda *args, **kwargs: built.append(kwargs.get("packed")) or build(
        *args, **kwargs))
    monkeypatch.setattr(cached_prefix, "suffix_classifier", recorded_suffix)
    summaries = {padding: glue_task.run_glue(settings, str(tmp_path / padding)) for padding, settings in runs.items()}
    packed, padded = summaries["pack"], summaries["fixed"]
    # The packed run first: its splits' caches packed, then the padded run's not; one suffix model per freeze.
    assert built == sorted(built, reverse=True) and built.count(True) == built.count(False) > 0
    assert suffixes == ["packed_cached_classifier"] * (len(suffixes) // 2) + ["cached_classifier"] * (
        len(suffixes) // 2), suffixes
    assert packed["config"]["padding"] == "pack" and packed["padding_efficiency"] > padded["padding_efficiency"]
    events = packed["freezing"]["events"]
    assert events and events[0]["epoch"] == 1
    decisions = packed["freezing"]["decisions"]
    assert decisions[-1]["step"] > events[-1]["step"] and len(decisions) == len(padded["freezing"]["decisions"])
    for a, b in zip(padded["freezing"]["decisions"], decisions):
        assert (b["step"], b["frozen_blocks"]) == (a["step"], a["frozen_blocks"])
        assert b["norms"] == pytest.approx(a["norms"], rel=1e-5)
    assert [(e["step"], e["frozen_blocks"]) for e in events] == [
        (e["step"], e["frozen_blocks"]) for e in padded["freezing"]["events"]]
    assert [e["val"] for e in packed["epochs"]] == [e["val"] for e in padded["epochs"]]
    assert [e["loss"] for e in packed["epochs"]] == pytest.approx([e["loss"] for e in padded["epochs"]], rel=1e-5)


def test_freezeout_on_a_users_file_prints_when_each_block_froze(two_block_preset, tmp_path):
    from conftest import SENTENCES, write_csv

    rows = [(i, SENTENCES[i % len(SENTENCES)], i % 2) for i in range(40)]
    data = write_csv(tmp_path / "mine.csv", ["id", "text", "target"], rows)
    result = run_module("tf_transfer.glue", f"--train_file={data}", "--text_columns=text", "--label_column=target",
                        f"--preset={two_block_preset}", "--method=freezeout", "--freezeout_t0=0.3", "--lr=1e-3",
                        "--batch_size=4", "--max_epochs=2", "--max_seq_length=16", f"--output_dir={tmp_path / 'run'}")
    assert result.returncode == 0, result.stderr[-2000:]
    summary = record.read_summary(str(tmp_path / "run"))
    freezing = summary["freezing"]
    # 36 rows (4 held out) in batches of 4, 2 epochs: 18 steps. Cubic from t0 = 0.3: the embeddings at 0.027 T
    # (step 1), block 0 at (0.3 + 0.7/3)^3 T (step 3); the top block is kept.
    assert freezing["total_steps"] == 18 and freezing["freeze_steps"][2] is None
    assert freezing["freeze_steps"][:2] == [math.ceil(t ** 3 * 18 - 1e-9) for t in (0.3, 0.3 + 0.7 / 3)] == [1, 3]
    events = freezing["events"]
    assert [(e["embeddings"], e["frozen_blocks"], e["step"]) for e in events] == [(True, 0, 1), (False, 1, 3)]
    for event in events:
        assert event["rule"] == "freezeout"
    lines = result.stdout.strip().splitlines()
    assert lines[-2].startswith("froze the embeddings at step 1 (epoch 1); block 0 at step 3 (epoch 1); the last 1 "
                                "of 2 blocks trained at the end"), lines[-2]
    assert lines[-1].startswith("done: best epoch")


@pytest.mark.parametrize("flags, message", [
    (["--method=autofreeze", "--freeze_interval_steps=0"], "--freeze_interval_steps"),
    (["--method=autofreeze", "--freeze_percentile=150"], "--freeze_percentile"),
    (["--method=autofreeze", "--freeze_percentile=0"], "--freeze_percentile"),
    (["--method=freezeout", "--freezeout_t0=1"], "--freezeout_t0"),
    (["--method=autofreeze", "--cache_frozen"], "caches each frozen prefix itself"),
    (["--method=autofreeze", "--lora_rank=4"], "--lora_rank is for --method=lora"),
    (["--method=freezeout", "--freeze_percentile=40"], "--freeze_percentile is for --method=autofreeze"),
    (["--method=freeze", "--min_trainable_layers=2"], "--min_trainable_layers is for"),
    (["--method=autofreeze", "--trainable_layers=1"], "can never freeze a block"),
    (["--method=autofreeze", "--min_trainable_layers=4"], "exceeds the backbone's 3 encoder blocks"),
], ids=["interval0", "percentile150", "percentile0", "t0", "cache", "lora", "percentile_freezeout", "freeze_min",
        "k_bound", "beyond_depth"])
def test_bad_adaptive_input_is_one_error_line_and_nothing_completed(glue_dir, tiny_preset, tmp_path, flags, message):
    result = run_module("tf_transfer.glue", "--task=sst2", f"--data_dir={glue_dir}", f"--preset={tiny_preset}",
                        "--max_epochs=1", f"--output_dir={tmp_path}", *flags)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], result.stderr[-2000:]
    summary = record.read_summary(str(tmp_path))
    assert not (summary or {}).get("completed")


@pytest.mark.xdist_group(GROUP)
def test_two_replicas_freeze_the_same_blocks_at_the_same_steps_as_one_device(tmp_path, one_device_runs):
    """MirroredStrategy over two logical CPUs: the gradient sums are all-reduced on read, so the statistics, the
    decisions and (dropout 0) the losses are one device's. The one-device run is the two-worker test's too
    (tests/study_runs.py: trained once per test process)."""
    from conftest import TWO_CPUS
    from tf_transfer.core import strategies

    one = one_device_runs.run("autofreeze")
    settings = GlueSettings(**one_device_runs.specs["autofreeze"], distribution="mirrored")
    two = glue_task.run_glue(settings, str(tmp_path / "two"), strategies.make_strategy("mirrored", TWO_CPUS))
    same_freezing(one, two)


def same_freezing(one: dict, two: dict) -> None:
    """`two` froze the same blocks at the same steps as `one`, from the same statistics, with the same loss and
    scores."""
    assert one["freezing"]["events"], one["freezing"]["decisions"]
    assert len(two["freezing"]["decisions"]) == len(one["freezing"]["decisions"])
    for a, b in zip(one["freezing"]["decisions"], two["freezing"]["decisions"]):
        assert (b["step"], b["frozen_blocks"]) == (a["step"], a["frozen_blocks"])
        assert b["norms"] == pytest.approx(a["norms"], rel=1e-4)
    assert [e["frozen_blocks"] for e in two["freezing"]["events"]] == [
        e["frozen_blocks"] for e in one["freezing"]["events"]]
    assert two["freezing"]["traces"] == one["freezing"]["traces"]  # each process counts its own replicas' traces
    assert two["epochs"][0]["loss"] == pytest.approx(one["epochs"][0]["loss"], rel=1e-4)
    assert two["epochs"][0]["val"] == pytest.approx(one["epochs"][0]["val"], rel=1e-4)


def test_the_budgeted_sweep_refuses_adaptive_methods_with_a_pointer():
    from tf_transfer.studies.sweep import sweep_search as sweep

    with pytest.raises(TransferError, match="'autofreeze' is not a method: use some of freeze, lora, bitfit .*glue"):
        sweep.check_methods(["freeze", "autofreeze"])
