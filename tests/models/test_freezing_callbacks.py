"""AutoFreeze and FreezeOut as callbacks of a user's own `model.fit`: what freezes, when, and the record."""

import numpy as np
import pytest

import tf_transfer
import study_runs
from conftest import SENTENCES
from tf_transfer.core.errors import TransferError


def _classifier(preset, lr=3e-2):
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor.from_preset(preset, sequence_length=16)
    classifier = keras_hub.models.BertTextClassifier.from_preset(preset, num_classes=2, preprocessor=preprocessor,
                                                                 dropout=0.0)
    # SGD: every freeze traces the step again, and SGD's step traces in about a third of Adam's time (Adam's
    # per-variable update is most of the graph); the callbacks read gradients and steps, not the optimizer's rule.
    classifier.compile(optimizer=keras.optimizers.SGD(lr), loss=keras.losses.SparseCategoricalCrossentropy(True))
    return classifier


def test_freezeout_in_fit_freezes_on_the_commands_schedule(one_block_preset):
    classifier = _classifier(one_block_preset)
    freezeout = tf_transfer.FreezeOut(t0=0.5, scale="linear", min_trainable_layers=0)
    classifier.fit(SENTENCES[:8], np.arange(8) % 2, batch_size=2, epochs=1, verbose=0, callbacks=[freezeout])
    record = freezeout.record
    # Linear times over 4 steps: the embeddings at 0.5 (step 2), block 0 at 0.5 + 0.5 / 2 (step 3).
    assert record["freeze_steps"] == [2, 3]
    assert [(e["step"], e["frozen_blocks"], e["embeddings"]) for e in record["events"]] == [(2, 0, True),
                                                                                           (3, 1, False)]
    assert not classifier.backbone.transformer_layers[0].trainable_weights


@pytest.mark.parametrize("make, message", [
    (lambda: tf_transfer.AutoFreeze(interval_steps=0), "--freeze_interval_steps must be >= 1, got 0"),
    (lambda: tf_transfer.FreezeOut(scale="square"), "--freezeout_scale must be one of"),
    (lambda: tf_transfer.FreezeOut(min_trainable_layers=-1), "--min_trainable_layers must be >= 0, got -1"),
])
def test_bad_settings_are_the_commands_lines(make, message):
    with pytest.raises(TransferError, match=message):
        make()


@pytest.mark.xdist_group(study_runs.GROUP)
def test_autofreeze_in_fit_gives_the_commands_freezes_losses_and_scores(one_device_runs):
    """`fit` with `tf_transfer.AutoFreeze` against `--method=autofreeze` (the command's run of tests/study_runs.py,
    trained once per test process through `glue_task.run_glue`): the same classifier, optimizer and batches (the
    command's data, model and feed, built as `glue_task` builds them), the same seed, dropout 0.

    Up to the first freeze both compute the same steps: the decisions up to it and the freeze itself are equal,
    bit for bit. After it the command trains the top block on the float16 cache of the frozen prefix's output and
    the callback on the float32 forward pass: measured on 2026-11-27, the later decisions' norms within 4.5e-5 of
    each other (relative), the epoch's loss within 5e-8; tested at 1e-3 and 1e-5. The scores are equal. The frozen
    block stays as it was when it froze, and the record's trainable count is the parameter table's."""
    import keras

    from tf_transfer.data import feeds, inputs
    from tf_transfer.models import heads, loader
    from tf_transfer.studies.glue import glue_task
    from tf_transfer.studies.glue.glue_settings import GlueSettings
    from tf_transfer.training import optimizers

    command = one_device_runs.run("autofreeze")
    settings = GlueSettings(**one_device_runs.specs["autofreeze"])
    task, train, validation, tests, _ = glue_task.load_data(settings)
    keras.utils.set_random_seed(settings.seed)
    loaded = loader.load_model(settings.model)
    backbone = loaded.backbone
    classifier = heads.build_classifier(backbone, task.num_labels, settings.dropout,
                                        head=heads.pooled_head(task.num_labels, settings.dropout, backbone))
    splits = {"train": train, "validation": validation, **tests}
    feed = feeds.TokenFeed({name: inputs.encode(examples, loaded.tokenizer, settings.max_seq_length)
                            for name, examples in splits.items()}, settings.inputs, settings.runtime.jit)
    steps = feed.steps_per_epoch
    classifier.compile(optimizer=optimizers.build_optimizer(settings.optimizer, steps * settings.max_epochs),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    # Built before `fit`, as the command's warm-up builds it: Keras would create its variables while tracing the
    # step, and tf.function traces a step that created variables twice (this test: 5.7 -> 3.7 CPU s). The
    # FreezeOut test above and docs/python.md's AutoFreeze train with an optimizer `fit` builds.
    classifier.optimizer.build(classifier.trainable_variables)
    autofreeze = tf_transfer.AutoFreeze(interval_steps=settings.freeze_interval_steps,
                                        percentile=settings.freeze_percentile)
    block_0, at_freeze = backbone.transformer_layers[0], []
    freeze_step = command["freezing"]["events"][0]["step"]
    snapshot = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: batch + 1 == freeze_step and (
        at_freeze.extend(v.numpy().copy() for v in block_0.weights)))
    history = classifier.fit(feed.train_batches(1), epochs=1, steps_per_epoch=steps, shuffle=False, verbose=0,
                             callbacks=[autofreeze, snapshot])

    python, commands = autofreeze.record, command["freezing"]
    assert python["events"] and python["events"] == [
        {k: v for k, v in event.items() if k not in ("cache_s", "compile_s")} for event in commands["events"]]
    same = [d for d in commands["decisions"] if d["step"] <= freeze_step]
    assert python["decisions"][:len(same)] == same and len(same) < len(commands["decisions"])
    assert len(python["decisions"]) == len(commands["decisions"])
    for ours, theirs in zip(python["decisions"][len(same):], commands["decisions"][len(same):]):
        assert (ours["step"], ours["frozen_blocks"]) == (theirs["step"], theirs["frozen_blocks"])
        assert ours["norms"] == pytest.approx(theirs["norms"], rel=1e-3)
    for key in ("method", "min_trainable_layers", "total_steps", "interval_steps", "percentile", "global_step"):
        assert python[key] == commands[key], key
    (epoch,) = command["epochs"]
    assert history.history["loss"][0] == pytest.approx(epoch["loss"], rel=1e-5)
    assert glue_task.scores(feed, classifier, task, "validation") == epoch["val"]
    assert glue_task.scores(feed, classifier, task, "dev") == epoch["test"]
    assert not block_0.trainable_weights and at_freeze
    assert all((v.numpy() == frozen).all() for v, frozen in zip(block_0.weights, at_freeze))
    assert python["events"][-1]["trainable_params"] == tf_transfer.parameter_table(classifier).trainable
