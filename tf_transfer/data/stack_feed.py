"""The stack-and-finetune study's feed: length-bucketed batches of one or two packed sequences (one per question
for the matching heads) and per-token labels when tagging, scored as class probabilities through one traced
predictor. It keeps the feeds' protocol (`tf_transfer.data.feeds`).

Example:

>>> from tf_transfer.data.stack_feed import StackFeed
>>> from tf_transfer.core.setting_groups import InputSettings
>>> feed = StackFeed(encoded, InputSettings(batch_size=32, seed=0))  # doctest: +SKIP
>>> probabilities = feed.predict(model, "validation")  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tf_transfer.core.setting_groups import InputSettings
from tf_transfer.data import feeds
from tf_transfer.data import inputs
from tf_transfer.data import stack_data


class StackFeed(feeds.Feed):
    """Length-bucketed batches of one or two packed sequences (and per-token labels when tagging).

    The epoch plans, warm-up shapes and training datasets are `feeds.Feed`'s; what is its own is the features of
    one or two sequences, per-token labels, and scoring through one traced predictor (`probabilities`).
    """

    FEATURES = ("token_ids", "segment_ids", "padding_mask")

    def __init__(self, splits: dict, settings: InputSettings):
        max_seq_length = next(iter(splits["train"].inputs.values())).token_ids.shape[1]
        super().__init__(splits, dataclasses.replace(settings, padding="bucket"), max_seq_length, jit=False)
        self.feature_names = [f"{n}{s}" for s in self.train.inputs for n in self.FEATURES]
        self._predictors = {}

    def _length(self, split, indices, bucket_step) -> int:
        return inputs.padded_length(split.lengths[indices], "bucket", self.max_seq_length, bucket_step)

    def features(self, split: stack_data.EncodedSplit, indices, length: int) -> dict:
        features = {}
        for suffix, sequences in split.inputs.items():
            features[f"token_ids{suffix}"] = sequences.token_ids[indices, :length]
            features[f"segment_ids{suffix}"] = sequences.segment_ids[indices, :length]
            features[f"padding_mask{suffix}"] = (
                np.arange(length)[None, :] < sequences.lengths[indices, None]).astype(np.int32)
        return features

    def _batches(self, split, plan, bucket_step):
        for indices in plan:
            length = self._length(split, indices, bucket_step)
            labels = split.labels[indices, :length] if split.tagging else split.labels[indices]
            yield self.features(split, indices, length), labels.astype(np.int32)

    def _to_dataset(self, split, plan, bucket_step, with_labels, fill_to):
        """Training batches with labels (scoring goes through `probabilities`); never filled (no XLA here)."""
        import tensorflow as tf

        signature = ({name: tf.TensorSpec([None, None], tf.int32) for name in self.feature_names},
                     tf.TensorSpec([None, None] if split.tagging else [None], tf.int32))
        dataset = tf.data.Dataset.from_generator(lambda: self._batches(split, plan, bucket_step),
                                                 output_signature=signature)
        # A fixed prefetch buffer, autotuning off: its thread made every fit's teardown wait (inputs.prefetched).
        return inputs.prefetched(dataset, len(plan))

    def loss_units(self, split):
        """Tagging: the loss averages over a batch's labelled word pieces (the others carry `IGNORED_LABEL`), so
        those are what each share's weights divide by under several replicas; otherwise the examples."""
        if not split.tagging:
            return len
        return lambda indices: int(np.count_nonzero(split.labels[indices] != stack_data.IGNORED_LABEL))

    def _predictor(self, model):
        """`model` in inference mode, traced once for any batch shape. `predict_on_batch` would trace again for
        each new padded length, and a trace of a two-sentence model costs more than scoring a split."""
        import tensorflow as tf

        if id(model) not in self._predictors:
            signature = {name: tf.TensorSpec([None, None], tf.int32) for name in self.feature_names}
            self._predictors[id(model)] = tf.function(lambda features: model(features, training=False),
                                                      input_signature=[signature], autograph=False)
        return self._predictors[id(model)]

    def predict(self, model, split_name: str):
        """Class probabilities in inference mode: `[N, C]`, or for tagging one `[length_i, C]` array per example."""
        split = self.splits[split_name]
        plan = inputs.plan_eval_batches(split.lengths, self.eval_batch_size, "bucket")
        results = [None] * len(split)
        predict = self._predictor(model)
        for indices in plan:
            length = self._length(split, indices, self.eval_width_step)
            logits = np.asarray(predict(self.features(split, indices, length)), np.float64)
            probabilities = np.exp(logits - logits.max(axis=-1, keepdims=True))
            probabilities /= probabilities.sum(axis=-1, keepdims=True)
            for row, index in enumerate(indices):
                results[index] = (probabilities[row, :split.lengths[index]] if split.tagging
                                  else probabilities[row])
        return results if split.tagging else np.stack(results)
