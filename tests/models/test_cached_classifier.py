"""The frozen-prefix cache from Python: the command's `--cache_frozen` numbers from `CachedClassifier.fit`."""

import numpy as np
import pytest

import tf_transfer
from tf_transfer.core.errors import TransferError


def _command_and_python_losses(folder, glue_dir, preset, method, options, padding):
    import keras

    from tf_transfer.models import backbones, heads
    from tf_transfer.studies.glue import glue_task
    from tf_transfer.studies.glue.glue_settings import GlueSettings
    from tf_transfer.training import optimizers

    # No validation split (and so no early stopping): only the training losses are compared, and a validation
    # split is one more cache to build and score every epoch (0.3-0.4 s of each case's 3-4 s, pytest --durations).
    settings = GlueSettings(task="sst2", preset=preset, data_dir=glue_dir, trainable_layers=1, cache_frozen=True,
                            lr=1e-3, batch_size=4, max_epochs=2, patience=0, validation_fraction=0.0,
                            max_seq_length=32, dropout=0.1, seed=0, max_train_examples=16, method=method,
                            padding=padding,
                            **{f"{method}_{k}": v for k, v in options.items()})
    summary = glue_task.run_glue(settings, str(folder))
    _, train, _, _, _ = glue_task.load_data(settings)  # the command's training texts

    # The same steps from Python, in the order the command takes them.
    keras.utils.set_random_seed(0)
    loaded = backbones.load_preset(preset, dropout=0.1)
    classifier = heads.build_classifier(loaded.backbone, 2, 0.1, head=heads.pooled_head(2, 0.1, loaded.backbone))
    tf_transfer.apply_method(classifier, method, trainable_layers=1, **options)
    cached = tf_transfer.CachedClassifier(classifier, trainable_layers=1, tokenizer=loaded.tokenizer,
                                          max_seq_length=32, batch_size=4, seed=0, padding=padding)
    steps = cached.cached(train.text_a, train.labels).steps_per_epoch
    cached.compile(optimizer=optimizers.build_optimizer(settings.optimizer, steps * 2),
                   loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = cached.fit(train.text_a, train.labels, epochs=2, verbose=0)
    return [epoch["loss"] for epoch in summary["epochs"]], history.history["loss"], cached, train


# The runs are shared by the tests of this module (`cached_runs`), so they run in one test process.
GROUP = "cached_classifier"


@pytest.fixture(scope="module")
def cached_runs(tmp_path_factory, glue_dir, two_block_preset):
    """Each method's command and Python runs, made once in the module: the predict and evaluate test reads
    freezing's. Two blocks, the last training: the cache holds the embeddings and a frozen block."""
    done = {}

    def run(method, options, padding="bucket"):
        if (method, padding) not in done:
            done[method, padding] = _command_and_python_losses(tmp_path_factory.mktemp(method), glue_dir,
                                                               two_block_preset, method, options, padding)
        return done[method, padding]

    return run


@pytest.mark.xdist_group(GROUP)
@pytest.mark.parametrize("method, options, padding", [("freeze", {}, "bucket"), ("lora", {"rank": 2}, "bucket"),
                                                     ("bitfit", {}, "bucket"), ("freeze", {}, "pack")])
def test_the_python_cache_trains_as_the_command_does(cached_runs, method, options, padding):
    """`fit` gives the command's epoch losses: each method over bucketed batches, and freezing over packed rows
    (`padding="pack"`, the command's `--cache_frozen --padding=pack`)."""
    command, python, cached, train = cached_runs(method, options, padding)
    assert len(command) == 2 and command[0] != command[1]
    if padding == "pack":  # rows that hold several of the texts
        feed = cached.cached(train.text_a, train.labels)
        assert any(feed.computed_shape(batch)[0] < len(batch) for batch in feed.plan(1))
    np.testing.assert_allclose(python, command, rtol=1e-5)


def test_a_classifier_the_cache_cannot_split_is_refused(tiny_preset):
    from conftest import make_tiny_backbone

    backbone = make_tiny_backbone()
    with pytest.raises(TransferError, match=r"the frozen-prefix cache cannot split BertBackbone \(BERT\): it takes "
                       "keras-hub's BertTextClassifier as keras-hub builds it .* train this one with tf_transfer.freeze"):
        tf_transfer.CachedClassifier(backbone, trainable_layers=1, tokenizer=object())
    with pytest.raises(TransferError, match="--cache_frozen needs frozen embeddings"):
        tf_transfer.CachedClassifier(backbone, trainable_layers="all")
    with pytest.raises(TransferError, match="--trainable_layers=5 exceeds the backbone's 3 encoder blocks"):
        tf_transfer.CachedClassifier(backbone, trainable_layers=5)
    with pytest.raises(TransferError, match="--padding must be one of bucket, pack, got 'fixed'"):
        tf_transfer.CachedClassifier(backbone, trainable_layers=1, padding="fixed")


def test_packed_rows_give_the_bucketed_logits_and_loss(two_block_preset):
    """`padding="pack"` (the commands' `--cache_frozen --padding=pack`): the prefix and the suffix on rows of
    several texts each, a cache of their own, the same classifier's outputs as bucketed batches'."""
    import keras
    import keras_hub

    from conftest import SENTENCES

    preprocessor = keras_hub.models.BertTextClassifierPreprocessor.from_preset(two_block_preset, sequence_length=16)
    classifier = keras_hub.models.BertTextClassifier.from_preset(two_block_preset, num_classes=2,
                                                                 preprocessor=preprocessor)
    texts, labels = SENTENCES, np.arange(len(SENTENCES)) % 2
    outputs, losses, inputs = {}, {}, {}
    for padding in ("bucket", "pack"):
        cached = tf_transfer.CachedClassifier(classifier, trainable_layers=1, batch_size=4, padding=padding)
        cached.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        outputs[padding], losses[padding] = cached.predict(texts, verbose=0), cached.evaluate(texts, labels, verbose=0)
        inputs[padding] = {tensor.name for tensor in cached.inputs}
    assert "example_ids" in inputs["pack"] and "padding_mask" in inputs["bucket"]
    assert outputs["pack"].shape == (len(texts), 2)
    # Packed: rows of up to 16 tokens hold several of these short texts where that computes fewer tokens than a row
    # each (on a tie the narrower rows win: 4 rows of 8 tokens rather than 2 of 16).
    feed = cached.cached(texts, labels)
    assert any(feed.computed_shape(batch)[0] < len(batch) for batch in feed.plan(1))
    np.testing.assert_allclose(outputs["pack"], outputs["bucket"], rtol=1e-5, atol=1e-7)
    assert losses["pack"] == pytest.approx(losses["bucket"], rel=1e-5)


@pytest.mark.xdist_group(GROUP)
def test_the_trained_cache_predicts_and_evaluates_texts_from_a_list_or_a_dataset(cached_runs):
    """`fit`, `evaluate` and `predict` read a `tf.data.Dataset` of texts (batched or not) into the texts it holds:
    the same cache, batches and numbers, bit for bit, as the texts in a list."""
    import tensorflow as tf

    _, _, cached, train = cached_runs("freeze", {})
    texts, labels = list(train.text_a), train.labels
    predictions = cached.predict(texts)
    assert predictions.shape == (len(texts), 2)
    batched = tf.data.Dataset.from_tensor_slices((texts, labels)).batch(3)
    np.testing.assert_array_equal(cached.predict(tf.data.Dataset.from_tensor_slices(texts)), predictions)
    np.testing.assert_array_equal(cached.predict(batched.map(lambda x, y: x)), predictions)
    loss = cached.evaluate(texts, labels, verbose=0)
    assert np.isfinite(loss) and cached.evaluate(batched, verbose=0) == loss

    # A third epoch from the same weights and optimizer state, once from each.
    saved = [v.numpy() for v in cached.variables + cached.optimizer.variables]
    trained = []
    for x, y in (((texts, labels)), (batched, None)):
        for variable, value in zip(cached.variables + cached.optimizer.variables, saved):
            variable.assign(value)
        history = cached.fit(x, y, epochs=3, initial_epoch=2, verbose=0, validation_data=batched)
        trained.append((history.history, [v.numpy() for v in cached.trainable_variables]))
    (list_history, list_weights), (dataset_history, dataset_weights) = trained
    assert dataset_history == list_history and set(list_history) == {"loss", "val_loss"}
    assert all((a == b).all() for a, b in zip(dataset_weights, list_weights))
    with pytest.raises(TransferError, match="a tf.data.Dataset of texts, .* and no separate labels"):
        cached.evaluate(batched, labels)
