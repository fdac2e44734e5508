"""Shares of unequal size still give the single-device step (docs/distributed.md).

MirroredStrategy over two logical CPU devices, batches of 5 examples (shares of 3 and 2) and an epoch's last batch
of 2 (shares of 1 and 1), dropout 0: the per-epoch losses and the weights trained in the first epoch equal the
default strategy's within 1e-5 relative (measured: below 6e-7; Keras' own weighting was 1.7e-6 to 2e-2 off in the
losses, 8e-4 to 5e-2 in the weights), for the stack study's tagging loss (a mean over labelled word pieces, no
weights in the data) and the sentiment study's head on arrays (binary cross-entropy, no weights). GLUE's weighted
mean (every example weighted) over the same shares is tests/training/test_mirrored.py's: its setting
(tests/study_runs.py) trains 12 examples in batches of 5, 5 and 2.
"""

import keras
import numpy as np
import pytest

from conftest import TWO_CPUS
from tf_transfer.core.setting_groups import InputSettings, OptimizerSettings

EPOCHS = 2
BATCH_SIZE = 5
EXAMPLES = 12  # batches of 5, 5 and 2
TOLERANCE = 1e-5


def _train(strategy, setup) -> tuple:
    """`setup(strategy)` gives `(model, make_dataset(epoch), steps, examples)`; trains `EPOCHS` epochs as the
    engine does (`keras_epoch`) and returns the per-epoch losses and the trainable weights after the first."""
    from tf_transfer.training import distributed
    from tf_transfer.training.engine import keras_epoch

    model, make_dataset, steps, examples = setup(strategy)
    distributed.keras_distributed(model, strategy)
    train_epoch = keras_epoch(model, make_dataset, steps, examples)
    losses, first_epoch_weights = [], None
    for epoch in range(1, EPOCHS + 1):
        losses.append(train_epoch(epoch, keras.callbacks.Callback())["loss"])
        if epoch == 1:
            first_epoch_weights = [np.array(v) for v in model.trainable_variables]
    return losses, first_epoch_weights


def _assert_mirrored_is_default(setup) -> None:
    from tf_transfer.core import strategies

    default = _train(strategies.make_strategy("default"), setup)
    mirrored_strategy = strategies.make_strategy("mirrored", TWO_CPUS)
    assert mirrored_strategy.num_replicas_in_sync == 2
    mirrored = _train(mirrored_strategy, setup)
    (default_losses, default_weights), (mirrored_losses, mirrored_weights) = default, mirrored
    assert default_losses[0] != default_losses[1]  # it trained
    assert mirrored_losses == pytest.approx(default_losses, rel=TOLERANCE)
    # All trainable weights as one vector: single elements whose gradient is zero in exact arithmetic (attention's
    # key biases) hold float noise that Adam scales up to steps of its own, the same on both sides only by chance.
    default_vector, mirrored_vector = (np.concatenate([w.ravel() for w in ws]) for ws in (default_weights,
                                                                                         mirrored_weights))
    assert np.linalg.norm(mirrored_vector - default_vector) <= TOLERANCE * np.linalg.norm(default_vector)


def _token_tagger(vocabulary: int, tags: int):
    """Embeddings and a dense layer per word piece: what the stack study's tagging heads are to its loss."""
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    segment_ids = keras.Input((None,), dtype="int32", name="segment_ids")
    padding_mask = keras.Input((None,), dtype="int32", name="padding_mask")
    hidden = keras.layers.Embedding(vocabulary, 8)(token_ids) + keras.layers.Embedding(2, 8)(segment_ids)
    hidden = hidden * keras.ops.expand_dims(keras.ops.cast(padding_mask, "float32"), -1)
    logits = keras.layers.Dense(tags)(keras.layers.Dense(8, activation="tanh")(hidden))
    return keras.Model({"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}, logits)


def test_stack_tagging_mean_over_labelled_pieces():
    from tf_transfer.data import stack_data
    from tf_transfer.data import stack_feed
    from tf_transfer.studies.stack import stack_task as stack_train
    from tf_transfer.training import distributed, optimizers

    rng = np.random.default_rng(0)
    vocabulary, tags, max_length = 30, 3, 16
    lengths = rng.integers(4, max_length + 1, EXAMPLES).astype(np.int32)  # two buckets of 8
    token_ids = np.zeros((EXAMPLES, max_length), np.int32)
    labels = np.full((EXAMPLES, max_length), stack_data.IGNORED_LABEL, np.int32)
    for i, length in enumerate(lengths):
        token_ids[i, :length] = rng.integers(5, vocabulary, length)
        # From 1 to `length - 2` labelled pieces: the loss's units are not the examples.
        labelled = 1 + rng.choice(length - 2, 1 + i % (length - 2), replace=False)
        labels[i, labelled] = rng.integers(0, tags, len(labelled))
    split = stack_data.EncodedSplit({"": stack_data.Sequences(token_ids, np.zeros_like(token_ids), lengths)}, labels)

    def setup(strategy):
        settings = InputSettings(batch_size=BATCH_SIZE, seed=0, bucket_step=8)
        feed = stack_feed.StackFeed({"train": split}, settings).use_strategy(strategy)
        keras.utils.set_random_seed(0)
        with strategy.scope():
            model = _token_tagger(vocabulary, tags)
            model.compile(optimizer=optimizers.build_optimizer(OptimizerSettings(lr=1e-2, clip_norm=0.0)),
                          loss=distributed.loss_under(strategy, stack_train.make_loss(tagging=True)))
        return model, feed.train_batches, feed.steps_per_epoch, EXAMPLES

    _assert_mirrored_is_default(setup)


def test_sentiment_head_on_arrays():
    from tf_transfer.models.sentence_features import head_outputs
    from tf_transfer.data import feeds
    from tf_transfer.studies.sentiment import sentiment_bert

    rng = np.random.default_rng(1)
    features = rng.normal(size=(EXAMPLES, 6)).astype(np.float32)
    targets = (rng.random(EXAMPLES) < 0.5).astype(np.float32)

    def setup(strategy):
        keras.utils.set_random_seed(0)
        with strategy.scope():
            inputs = keras.Input((6,), name="features")
            model = keras.Model(inputs, head_outputs(inputs, 2, hidden_units=4))
            sentiment_bert._compile(model, 2, 1e-1, strategy)

        # Each epoch one permutation seeded by (0, epoch), in consecutive batches.
        feed = feeds.ArrayFeed({"train": features}, {"train": targets}, BATCH_SIZE, seed=0).use_strategy(strategy)
        return model, feed.train_batches, feed.steps_per_epoch, EXAMPLES

    _assert_mirrored_is_default(setup)


def test_a_model_compiled_outside_the_strategy_scope_is_refused():
    """Its loss tracker would be each process's own variable: under `multi_worker` each worker's `fit` reported its
    own share's loss (AutoFreeze's suffix until 2026-11-26); mirrored in one process hides it, so it is refused."""
    from tf_transfer.core import strategies
    from tf_transfer.training import distributed

    strategy = strategies.make_strategy("mirrored", TWO_CPUS)

    def compiled(in_scope: bool):
        with strategy.scope():
            inputs = keras.Input((3,))
            model = keras.Model(inputs, keras.layers.Dense(2)(inputs), name=f"in_scope_{in_scope}")
            if in_scope:
                model.compile(optimizer="adam", loss="mse")
        if not in_scope:
            model.compile(optimizer="adam", loss="mse")
        return model

    with pytest.raises(ValueError, match="in_scope_False was compiled outside the strategy's scope"):
        distributed.keras_distributed(compiled(in_scope=False), strategy)
    inside = compiled(in_scope=True)
    distributed.keras_distributed(inside, strategy)
    assert inside._tf_transfer_distributed
