"""The stack study's data in and scores out: reading `--data`/`--test_data`, encoding for one kind of head, and
scoring class probabilities (`score`), also an ensemble's averaged ones. Batches come from
`tf_transfer.data.stack_feed.StackFeed`.

Example:

>>> from tf_transfer.studies.stack import stack_inputs
>>> data = stack_inputs.read_data(settings)  # doctest: +SKIP
>>> encoded = stack_inputs.encode(settings, data, tokenizer, pair_head=True)  # doctest: +SKIP
>>> stack_inputs.score(encoded["validation"], feed.predict(model, "validation"), data.label_names)  # doctest: +SKIP
"""

from __future__ import annotations

import types

import numpy as np

from tf_transfer.core import metrics as metrics_lib
from tf_transfer.core import ner_metrics
from tf_transfer.core.errors import TransferError
from tf_transfer.data import examples, stack_data
from tf_transfer.data.examples import train_validation_split
from tf_transfer.studies.stack.stack_settings import StackSettings


def data_files(config: StackSettings) -> dict:
    """`{flag: {"path", "sha256"}}` of the files the run reads (`--data`, `--validation_data`, `--test_data`): part
    of what a rerun in its folder must match (`record.refuse_other_data`)."""
    return examples.data_files({"data": config.data, "validation_data": config.validation_data,
                                "test_data": config.test_data})


def data_hashes(config: StackSettings) -> dict:
    """`{flag: SHA-256}` of `data_files`."""
    return {flag: entry["sha256"] for flag, entry in data_files(config).items()}


def read_data(config: StackSettings) -> types.SimpleNamespace:
    """Reads --data (split into train and validation, unless --validation_data is given), --validation_data and
    --test_data, and takes the training sample (`training_sample`); no TensorFlow yet, so bad files fail fast."""
    read = {"data": config.data, "validation": config.validation_data, "test": config.test_data}
    if config.task == "conll_ner":
        found = {name: stack_data.read_conll(path) for name, path in read.items() if path}
        label_names = stack_data.tag_vocabulary(*found.values())
        skipped = {}
    else:
        if config.task == "classification":
            full = stack_data.read_texts(config.data, config.text_column, config.label_column)
            found = {"data": full, **{name: stack_data.read_texts(path, config.text_column, config.label_column,
                                                                  full.label_names)
                                      for name, path in read.items() if path and name != "data"}}
        else:
            found = {name: stack_data.read_pairs(path) for name, path in read.items() if path}
        label_names = found["data"].label_names
        skipped = {"train" if name == "data" else name: split.skipped_rows for name, split in found.items()}
        if len(label_names) < 2:
            raise TransferError(f"{config.data}: every row has the label {label_names[0]!r}; need two classes or more")
    if "validation" in found:
        train, validation = found["data"], found["validation"]
    else:
        train, validation = train_validation_split(found["data"], config.validation_fraction, config.seed)
    train = training_sample(train, config.max_train_examples, config.train_sample_seed)
    splits = {"train": train, "validation": validation, **({"test": found["test"]} if "test" in found else {})}
    return types.SimpleNamespace(splits=splits, label_names=tuple(label_names), skipped=skipped)


def training_sample(train, max_examples, sample_seed):
    """The training examples a run trains on: all of them (`max_examples` None or not below their number), the
    first `max_examples` in file order (`sample_seed` None), or a random sample of `max_examples` drawn with
    `sample_seed`, kept in file order: the same sample for every `--seed` and strategy, so that runs compared by seed
    differ in their initialisation and batch order only.

    >>> words = stack_data.Sentences([[w] for w in "abcdef"], [["O"]] * 6)
    >>> training_sample(words, 3, None).words, training_sample(words, 3, 0).words == training_sample(words, 3, 0).words
    ([['a'], ['b'], ['c']], True)
    """
    if max_examples is None or max_examples >= len(train):
        return train
    if sample_seed is None:
        chosen = range(max_examples)
    else:
        chosen = np.sort(np.random.default_rng([sample_seed, 11]).choice(len(train), max_examples, replace=False))
    return train.take(chosen)


def train_sample_indices(n_train: int, n_validation: int, seed: int) -> np.ndarray:
    """The training examples scored for the gap rule: a fixed seeded sample as large as the validation set."""
    size = min(n_train, n_validation)
    return np.sort(np.random.default_rng([seed, 7]).choice(n_train, size, replace=False))


def encode(config: StackSettings, data, tokenizer, pair_head: bool) -> dict:
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
