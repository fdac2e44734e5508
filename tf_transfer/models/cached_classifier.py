"""The frozen-prefix cache from Python: a Keras model of a user's classifier above its frozen blocks, whose `fit`,
`evaluate` and `predict` take texts; the frozen embeddings and blocks run once per set of texts (the commands'
`--cache_frozen`, bucketed or packed as `--padding` says, with the same cache, batches and suffix model:
`cached_prefix.cache_splits`, `feeds.CachedFeed`, `cached_prefix.suffix_classifier`).

Example:

>>> import tf_transfer
>>> cached = tf_transfer.CachedClassifier(classifier, trainable_layers=2)  # doctest: +SKIP
>>> cached.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))  # doctest: +SKIP
>>> cached.fit(texts, labels, epochs=3)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Optional

import keras
import numpy as np

from tf_transfer.core import settings as settings_lib
from tf_transfer.core.errors import TransferError
from tf_transfer.core.setting_groups import InputSettings
from tf_transfer.data import cache, examples, feeds, inputs
from tf_transfer.models import cached_prefix, families, freezing, packed, user_model


# A keras-hub text classifier's own layers after its backbone, in the order it applies them to the vector the
# cache's suffix pools (`cached_prefix.suffix_classifier`: the backbone's pooler output, or the first token's vector
# where the family has no pooler), as keras-hub's `*TextClassifier` of each family builds them.
POOLER_HEAD = ("output_dropout", "output_dense")  # BERT (and a classifier over ELECTRA's pooler)
FIRST_TOKEN_HEAD = ("pooled_dense", "output_dropout", "output_dense")  # DistilBERT: dense+relu before the logits
DROPOUT_FIRST_HEAD = ("pooled_dropout",) + FIRST_TOKEN_HEAD  # RoBERTa, DeBERTa-v3: dropout before that dense

# The cache holds real tokens only: its batches are padded to their length bucket or packed, never to a fixed length.
PADDINGS = ("bucket", "pack")


def _head_of(classifier):
    """What `classifier` computes from the pooled vector: the project's `head` layer, or a keras-hub text
    classifier's layers after its backbone (`POOLER_HEAD` or the first token's, by the backbone's family)."""
    try:
        return classifier.get_layer("head")
    except ValueError:
        pass
    backbone = user_model.backbone_of(classifier)
    family = families.of(backbone)
    names = POOLER_HEAD if family.pooler else DROPOUT_FIRST_HEAD if family.head_hidden_dropout else FIRST_TOKEN_HEAD
    layers = [getattr(classifier, name, None) for name in names]
    # Anything else after the backbone would be left out of the suffix: refused rather than silently dropped.
    others = [layer for layer in getattr(classifier, "layers", []) if layer is not backbone
              and not isinstance(layer, keras.layers.InputLayer) and all(layer is not known for known in layers)]
    if any(layer is None for layer in layers) or others or (family.pooler and not any(
            layer.name == freezing.POOLER for layer in backbone.layers)):
        built = f"keras-hub's {family.classifier}" if family.classifier else "a classifier over its pooler"
        raise TransferError(f"the frozen-prefix cache cannot split {type(classifier).__name__} ({family.name}): it "
                            f"takes {built} as keras-hub builds it (the layers {', '.join(names)} after the "
                            "backbone) or the project's own (a layer named 'head'); train this one with "
                            "tf_transfer.freeze and fit")

    def head(pooled):
        for layer in layers:
            pooled = layer(pooled)
        return pooled

    return head


def _examples(x, y) -> examples.Examples:
    """Texts (a list, array or pandas Series; a pair of them for sentence pairs) and labels as `Examples`."""
    labels = np.zeros(0) if y is None else np.asarray(y)
    pair = isinstance(x, tuple) and len(x) == 2
    first, second = (list(x[0]), list(x[1])) if pair else (list(x), None)
    if not all(isinstance(text, str) for text in first + (second or [])):
        raise TransferError("CachedClassifier takes texts (strings), or a tuple of two lists of texts for pairs")
    if y is None:
        labels = np.zeros(len(first), np.int64)
    elif len(labels) != len(first):
        raise TransferError(f"{len(first)} texts but {len(labels)} labels")
    labels = labels.astype(np.float32 if labels.dtype.kind == "f" else np.int64)
    return examples.Examples(first, second, labels)


class CachedClassifier(keras.Model):
    """`classifier` above its frozen prefix: its last `trainable_layers` blocks, pooler and head as a Keras model on
    the prefix's cached outputs (the weights are the classifier's own: training this trains it). The classifier's
    embeddings and lower blocks must be frozen (`tf_transfer.freeze` or `apply_method` with the same
    `trainable_layers`; nothing frozen yet: frozen here by the freezing rule). Each epoch's batches are the
    commands': length buckets (or packed rows) in an order seeded by `seed` and the epoch.

    `fit`, `evaluate` and `predict` take texts as a list, NumPy array or pandas Series (a tuple of two for sentence
    pairs) with labels beside them, or a `tf.data.Dataset` of texts, `(texts_a, texts_b)`, `(texts, labels)` or
    `((texts_a, texts_b), labels)`, batched or not: its batches are not kept (the cache batches the texts by
    length as the commands do), so a dataset gives the numbers of the same texts in a list. Anything else is Keras'
    own, on cached batches.

    Args:
      classifier: keras-hub's text classifier of any family the commands train (`BertTextClassifier`,
        `RobertaTextClassifier`, `DistilBertTextClassifier`, `DebertaV3TextClassifier`; ELECTRA, which keras-hub
        has no classifier for, as a classifier over its pooler) or the project's classifier.
      trainable_layers: the top blocks that train, 0..L (the rest are cached).
      tokenizer: the classifier's tokenizer; default its preprocessor's.
      max_seq_length: tokens per text, [CLS] and [SEP] included; default the preprocessor's, else 128.
      batch_size: training batch size.
      seed: the order of the batches.
      padding: `"bucket"`: each batch padded to its length bucket; `"pack"`: each batch's examples laid end to end
        in rows of `max_seq_length` tokens, each attending only to itself (the commands' `--padding=pack`: the
        same function on fewer tokens, with a cache of its own; dropout draws differ from bucket's).

    Raises:
      TransferError: a classifier the cache cannot split, `trainable_layers` beyond the depth or `"all"`, a
        prefix with weights that still train, a `padding` other than the two, a family that cannot pack.

    Examples:

    >>> import tf_transfer
    >>> tf_transfer.CachedClassifier(classifier, trainable_layers="all")  # doctest: +SKIP
    Traceback (most recent call last):
    ...
    tf_transfer.core.errors.TransferError: --cache_frozen needs frozen embeddings: use --trainable_layers=0..L, not 'all'
    """

    def __init__(self, classifier, trainable_layers: int, tokenizer=None, max_seq_length: Optional[int] = None,
                 batch_size: int = 32, seed: int = 0, padding: str = "bucket", **kwargs):
        backbone = user_model.backbone_of(classifier)
        trainable_layers = freezing.parse_trainable_layers(trainable_layers)
        settings_lib.check("padding", padding, settings_lib.one_of(PADDINGS))
        if padding == "pack":
            packed.check_packable(backbone)  # refused before anything is frozen
        freezing.check_trainable_layers(trainable_layers, backbone.num_layers)
        depth = cache.frozen_depth(trainable_layers, backbone.num_layers)
        head = _head_of(classifier)
        preprocessor = getattr(classifier, "preprocessor", None)
        tokenizer = tokenizer or getattr(preprocessor, "tokenizer", None)
        if tokenizer is None:
            raise TransferError("CachedClassifier needs the classifier's tokenizer: pass tokenizer=")
        _freeze_prefix(classifier, backbone, depth, trainable_layers)
        self.packed = padding == "pack"
        suffix = cached_prefix.suffix_classifier(backbone, trainable_layers, head, packed=self.packed)
        super().__init__(suffix.inputs, suffix.outputs, name=kwargs.pop("name", "cached_classifier"), **kwargs)
        # Outside Keras' tracking: the backbone's and tokenizer's weights are not this model's own as well.
        self._source = _Source(backbone, tokenizer)
        self.trainable_layers = trainable_layers
        self.batching = InputSettings(batch_size=batch_size, seed=seed, padding=padding, max_seq_length=(
            max_seq_length or getattr(preprocessor, "sequence_length", None) or 128))
        self._epochs_done = 0

    def cached(self, x, y=None, split: str = "train"):
        """The feed of texts `x` (and labels `y`) over the cache, built once per distinct tokens (kept in memory for
        the process, as the commands keep theirs)."""
        backbone = self._source.backbone
        encoded = inputs.encode(_examples(x, y), self._source.tokenizer, self.batching.max_seq_length)
        built = cached_prefix.cache_splits(backbone, self.trainable_layers, {split: encoded}, f"model{id(backbone)}",
                                           "python", self.batching, packed=self.packed)
        return feeds.CachedFeed({"train": built[split][0], split: built[split][0]}, self.batching,
                                packed=self.packed)

    def fit(self, x=None, y=None, epochs: int = 1, initial_epoch: Optional[int] = None, validation_data=None,
            **kwargs):
        """Trains on texts `x` and labels `y` (or a dataset of cached batches, as Keras' `fit`); each call goes on
        from the epochs before it, in the commands' order of batches. `validation_data`: `(texts, labels)` or a
        dataset of them."""
        x, y = _read_texts(x, y)
        if self.optimizer is not None and not self.optimizer.built:
            # Keras would build it while tracing the first step, and tf.function traces a step that created
            # variables a second time.
            self.optimizer.build(self.trainable_variables)
        if not _texts(x):
            return super().fit(x, y, epochs=epochs, validation_data=validation_data, **kwargs)
        feed = self.cached(x, y)
        first = self._epochs_done if initial_epoch is None else initial_epoch
        dataset = feed.train_batches(first + 1)
        for epoch in range(first + 2, epochs + 1):
            dataset = dataset.concatenate(feed.train_batches(epoch))
        if validation_data is not None:
            validation_data = self._scored(*_read_texts(*(validation_data if isinstance(validation_data, tuple)
                                                          else (validation_data, None))))
        history = super().fit(dataset, epochs=epochs, initial_epoch=first, steps_per_epoch=feed.steps_per_epoch,
                              validation_data=validation_data, shuffle=False, **kwargs)
        self._epochs_done = epochs
        return history

    def _scored(self, x, y):
        feed = self.cached(x, y, "scored")
        split = feed.splits["scored"]
        plan = inputs.plan_eval_batches(split.lengths, self.batching.eval_batch_size, self.batching.padding)
        return cache.to_dataset(split, plan, feed.eval_width_step, self.batching.max_seq_length,
                                packed=self.packed)

    def evaluate(self, x=None, y=None, **kwargs):
        """Scores texts `x` with labels `y` (or a dataset of cached batches) in inference mode."""
        x, y = _read_texts(x, y)
        if not _texts(x):
            return super().evaluate(x, y, **kwargs)
        return super().evaluate(self._scored(x, y), **kwargs)

    def predict(self, x, **kwargs):
        """The classifier's outputs for texts `x`, in their order (or Keras' `predict` of cached batches)."""
        x, _ = _read_texts(x, None)
        if not _texts(x):
            return super().predict(x, **kwargs)
        return self.cached(x, split="predicted").predict(self, "predicted")


class _Source:
    def __init__(self, backbone, tokenizer):
        self.backbone, self.tokenizer = backbone, tokenizer


def _read_texts(x, y):
    """`(x, y)`, with a `tf.data.Dataset` of texts (see `CachedClassifier`) read into lists of texts and labels;
    anything else as it came."""
    import tensorflow as tf

    if not isinstance(x, tf.data.Dataset):
        return x, y

    def text(spec):
        return isinstance(spec, tf.TensorSpec) and spec.dtype == tf.string and spec.shape.rank in (0, 1)

    spec, labels_spec = x.element_spec, None
    if isinstance(spec, tuple) and len(spec) == 2 and not (text(spec[0]) and text(spec[1])):
        spec, labels_spec = spec
    parts = spec if isinstance(spec, tuple) else (spec,)
    if not any(text(part) for part in parts):
        return x, y  # not texts: Keras' own input (cached batches)
    ranks = {part.shape.rank for part in parts if text(part)}
    if labels_spec is not None:
        ranks.add(labels_spec.shape.rank if isinstance(labels_spec, tf.TensorSpec) else None)
    if y is not None or len(parts) > 2 or not all(text(part) for part in parts) or len(ranks) > 1:
        raise TransferError(f"CachedClassifier takes a tf.data.Dataset of texts, (texts_a, texts_b), (texts, "
                            f"labels) or ((texts_a, texts_b), labels), batched or not, and no separate labels; got "
                            f"elements {x.element_spec}"
                            + (" and labels" if y is not None else ""))
    if parts[0].shape.rank == 1:
        x = x.unbatch()

    def row(element) -> tuple:  # (text_a, [text_b], [label])
        texts, label = element if labels_spec is not None else (element, ())
        return (*(texts if len(parts) == 2 else (texts,)), *((label,) if labels_spec is not None else ()))

    columns = list(zip(*(row(element) for element in x.as_numpy_iterator()))) or [()] * (
        len(parts) + (labels_spec is not None))
    texts = [[value.decode("utf-8") for value in column] for column in columns[:len(parts)]]
    labels = np.asarray(columns[-1]) if labels_spec is not None else None
    return (tuple(texts) if len(parts) == 2 else texts[0]), labels


def _texts(x) -> bool:
    if isinstance(x, tuple) and len(x) == 2:
        x = x[0]
    return isinstance(x, (list, np.ndarray)) or type(x).__name__ == "Series"


def _freeze_prefix(classifier, backbone, depth: int, trainable_layers) -> None:
    """The prefix as the cache needs it: frozen. Nothing frozen yet: the freezing rule; frozen otherwise than the
    cache's depth (or LoRA's adapters in it): refused, since the cache would silently stop them training."""
    parts = {"embeddings"} | {f"block_{i}" for i in range(depth)}
    training = [layer for layer in backbone.layers if freezing.block_of(backbone, layer) in parts
                and layer.trainable_weights]
    if not training:
        return
    if len(training) == len([layer for layer in backbone.layers if freezing.block_of(backbone, layer) in parts
                             and layer.weights]):
        user_model.freeze(classifier, trainable_layers)
        return
    raise TransferError(f"--cache_frozen with --trainable_layers={trainable_layers}: the embeddings and blocks 0.."
                        f"{depth - 1} must be frozen, but {training[0].name} still trains; apply the method with "
                        f"trainable_layers={trainable_layers}")
