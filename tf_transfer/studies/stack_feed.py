"""The stack study's data in and scores out: reading `--data`/`--test_data`, encoding for one kind of head, the
length-bucketed feed (`StackFeed`), and scoring class probabilities (`score`), also an ensemble's averaged ones.

Example:

>>> from tf_transfer.studies import stack_feed
>>> data = stack_feed.read_data(config)  # doctest: +SKIP
>>> encoded = stack_feed.encode(config, data, tokenizer, pair_head=True)  # doctest: +SKIP
>>> feed = stack_feed.StackFeed(encoded, batch_size=32, seed=0, bucket_step=16)  # doctest: +SKIP
>>> stack_feed.score(encoded["validation"], feed.probabilities(model, "validation"), data.label_names)  # doctest: +SKIP
"""

from __future__ import annotations

import types

import numpy as np

from tf_transfer.core import metrics as metrics_lib
from tf_transfer.core import ner_metrics
from tf_transfer.core.errors import TransferError
from tf_transfer.data import feeds
from tf_transfer.data import inputs
from tf_transfer.data import stack_data
from tf_transfer.data.examples import train_validation_split
from tf_transfer.studies.stack_config import StackConfig


def read_data(config: StackConfig) -> types.SimpleNamespace:
    """Reads --data (split into train and validation) and --test_data; no TensorFlow yet, so bad files fail fast."""
    test = None
    if config.task == "conll_ner":
        full = stack_data.read_conll(config.data)
        test = stack_data.read_conll(config.test_data) if config.test_data else None
        label_names = stack_data.tag_vocabulary(*[s for s in (full, test) if s is not None])
        skipped = {}
    else:
        if config.task == "classification":
            full = stack_data.read_texts(config.data, config.text_column, config.label_column)
            if config.test_data:
                test = stack_data.read_texts(config.test_data, config.text_column, config.label_column,
                                             full.label_names)
        else:
            full = stack_data.read_pairs(config.data)
            test = stack_data.read_pairs(config.test_data) if config.test_data else None
        label_names = full.label_names
        skipped = {"train": full.skipped_rows, **({"test": test.skipped_rows} if test is not None else {})}
        if len(label_names) < 2:
            raise TransferError(f"{config.data}: every row has the label {label_names[0]!r}; need two classes or more")
    train, validation = train_validation_split(full, config.validation_fraction, config.seed)
    if config.max_train_examples is not None and config.max_train_examples < len(train):
        train = train.take(range(config.max_train_examples))
    splits = {"train": train, "validation": validation, **({"test": test} if test is not None else {})}
    return types.SimpleNamespace(splits=splits, label_names=tuple(label_names), skipped=skipped)


def train_sample_indices(n_train: int, n_validation: int, seed: int) -> np.ndarray:
    """The training examples scored for the gap rule: a fixed seeded sample as large as the validation set."""
    size = min(n_train, n_validation)
    return np.sort(np.random.default_rng([seed, 7]).choice(n_train, size, replace=False))


def encode(config: StackConfig, data, tokenizer, pair_head: bool) -> dict:
    """Encodes every split for one kind of head, plus `train_sample` for the gap rule."""
    encoded = {}
    for name, split in data.splits.items():
        if config.task == "conll_ner":
            encoded[name] = stack_data.encode_sentences(split, tokenizer, config.max_seq_length, data.label_names)
        elif pair_head:
            encoded[name] = stack_data.encode_pairs_separately(split, tokenizer, config.max_seq_length)
        else:
            encoded[name] = stack_data.encode_texts(split, tokenizer, config.max_seq_length)
    encoded["train_sample"] = encoded["train"].take(
        train_sample_indices(len(encoded["train"]), len(encoded["validation"]), config.seed))
    return encoded


class StackFeed(feeds.Feed):
    """Length-bucketed batches of one or two packed sequences (and per-token labels when tagging).

    The epoch plans, warm-up shapes and training datasets are `feeds.Feed`'s; what is its own is the features of
    one or two sequences, per-token labels, and scoring through one traced predictor (`probabilities`).
    """

    FEATURES = ("token_ids", "segment_ids", "padding_mask")

    def __init__(self, splits: dict, batch_size: int, seed: int, bucket_step: int, eval_batch_size: int = 64):
        max_seq_length = next(iter(splits["train"].inputs.values())).token_ids.shape[1]
        super().__init__(splits, batch_size, seed, "bucket", bucket_step, max_seq_length, eval_batch_size, jit=False)
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

    def probabilities(self, model, split_name: str):
        """Class probabilities in inference mode: `[N, C]`, or for tagging one `[length_i, C]` array per example."""
        split = self.splits[split_name]
        plan = inputs.plan_eval_batches(split.lengths, self.eval_batch_size, "bucket")
        results = [None] * len(split)
        predict = self._predictor(model)
        for indices in plan:
            length = self._length(split, indices, self.eval_bucket_step)
            logits = np.asarray(predict(self.features(split, indices, length)), np.float64)
            probabilities = np.exp(logits - logits.max(axis=-1, keepdims=True))
            probabilities /= probabilities.sum(axis=-1, keepdims=True)
            for row, index in enumerate(indices):
                results[index] = (probabilities[row, :split.lengths[index]] if split.tagging
                                  else probabilities[row])
        return results if split.tagging else np.stack(results)


def score(split: stack_data.EncodedSplit, probabilities, label_names: tuple) -> dict:
    """Tagging: conlleval's entity precision/recall/F1 and word accuracy. Otherwise accuracy and F1 (of class 1 for
    two classes, macro-averaged for more)."""
    if split.tagging:
        predicted = []
        for probs, positions, gold in zip(probabilities, split.word_positions, split.gold_tags):
            tags = [label_names[i] for i in probs[positions].argmax(axis=-1)]
            predicted.append(tags + [ner_metrics.OUTSIDE] * (len(gold) - len(tags)))  # words cut off by the budget
        return ner_metrics.compute(split.gold_tags, predicted)
    predictions = np.asarray(probabilities).argmax(axis=-1)
    scores = {"accuracy": metrics_lib.accuracy(split.labels, predictions)}
    if len(label_names) == 2:
        scores["f1"] = metrics_lib.f1(split.labels, predictions)
    else:
        from sklearn.metrics import f1_score

        scores["macro_f1"] = float(f1_score(split.labels, predictions, average="macro", zero_division=0.0))
    return scores


def average_probabilities(members: list):
    """The ensemble's probabilities: the mean of its members' (arrays, or per-example arrays when tagging)."""
    if isinstance(members[0], np.ndarray):
        return np.mean(np.stack(members), axis=0)
    return [np.mean(np.stack(per_example), axis=0) for per_example in zip(*members)]
