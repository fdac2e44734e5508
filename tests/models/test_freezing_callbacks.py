"""AutoFreeze and FreezeOut as callbacks of a user's own `model.fit`: what freezes, when, and the record."""

import numpy as np
import pytest

import tf_transfer
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


def test_autofreeze_in_fit_freezes_blocks_as_the_command_decides_and_records_when(two_block_preset):
    """The command's AutoFreeze test setting (tests/study_runs.py): decisions every 2 steps at the 100th percentile,
    on two blocks; block 0 freezes with the embeddings at step 6, and stays as it was for steps 7 and 8."""
    import keras

    classifier = _classifier(two_block_preset)
    autofreeze = tf_transfer.AutoFreeze(interval_steps=2, percentile=100.0)
    block_0 = classifier.backbone.transformer_layers[0]
    at_freeze = []
    snapshot = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: batch == 5 and at_freeze.extend(
        v.numpy().copy() for v in block_0.weights))
    classifier.fit((SENTENCES * 3)[:32], np.arange(32) % 2, batch_size=4, epochs=1, verbose=0,
                   callbacks=[autofreeze, snapshot])
    record = autofreeze.record
    assert [d["step"] for d in record["decisions"]] == [2, 4, 6, 8] and record["decisions"][0]["changes"] is None
    assert (record["method"], record["interval_steps"], record["total_steps"], record["global_step"]) == (
        "autofreeze", 2, 8, 8)
    (event,) = record["events"]
    assert (event["step"], event["epoch"], event["frozen_blocks"], event["blocks"], event["embeddings"]) == (
        6, 1, 1, [0], True)
    assert event["changes"][1] >= event["threshold"] > event["changes"][0]
    assert not block_0.trainable_weights and event["trainable_params"] == tf_transfer.parameter_table(
        classifier).trainable
    assert all((v.numpy() == f).all() for v, f in zip(block_0.weights, at_freeze))


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
