"""Tokenization, packing and the tf.data pipelines (fixed or length-bucketed padding).

Texts are tokenized once with the preset's own tokenizer and packed as `[CLS] a [SEP] b [SEP]` with segment ids,
truncated to `max_seq_length` (round robin, which removes tokens from the longer segment first, like BERT's
`_truncate_seq_pair`). Batches are planned in NumPy from a seeded permutation per epoch, so epoch `e` of seed `s`
always sees the same batches in the same order, whatever ran before (resuming needs no iterator state).

Padding:
  * `fixed`: every batch padded to `max_seq_length` (the paper's setting).
  * `bucket`: examples grouped by length; each batch is padded to its bucket's boundary, a multiple of
    `bucket_step`, so compiled programs see a bounded handful of shapes. Grouping changes which examples share a
    batch, never what the model computes for an example (padding is masked out of attention).

Example:

>>> from tf_transfer import inputs
>>> encoded = inputs.encode(examples, tokenizer, max_seq_length=128)  # doctest: +SKIP
>>> dataset = inputs.train_dataset(encoded, batch_size=32, seed=0, epoch=1)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Optional

import numpy as np

PADDINGS = ("bucket", "fixed")


@dataclasses.dataclass
class Encoded:
    """Packed inputs of one split: int32 arrays `[N, max_seq_length]` padded with the pad id, plus lengths."""

    token_ids: np.ndarray
    segment_ids: np.ndarray
    lengths: np.ndarray
    labels: np.ndarray
    regression: bool = False

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def max_seq_length(self) -> int:
        return self.token_ids.shape[1]


def encode(examples, tokenizer, max_seq_length: int, chunk_size: int = 4096) -> Encoded:
    """Tokenizes and packs `examples` (a `tasks.Examples`) with `tokenizer` (a keras-hub BertTokenizer)."""
    import keras_hub
    import tensorflow as tf

    packer = keras_hub.layers.MultiSegmentPacker(
        sequence_length=max_seq_length,
        start_value=tokenizer.cls_token_id,
        end_value=tokenizer.sep_token_id,
        pad_value=tokenizer.pad_token_id,
        truncate="round_robin",
    )
    token_chunks, segment_chunks = [], []
    for start in range(0, len(examples.text_a), chunk_size):
        stop = start + chunk_size
        segments = [tokenizer(tf.constant(examples.text_a[start:stop]))]
        if examples.text_b is not None:
            segments.append(tokenizer(tf.constant(examples.text_b[start:stop])))
        token_ids, segment_ids = packer(tuple(segments))
        token_chunks.append(np.asarray(token_ids, np.int32))
        segment_chunks.append(np.asarray(segment_ids, np.int32))
    token_ids = np.concatenate(token_chunks)
    lengths = (token_ids != tokenizer.pad_token_id).sum(axis=1).astype(np.int32)
    regression = examples.labels.dtype.kind == "f"
    return Encoded(token_ids, np.concatenate(segment_chunks), lengths, examples.labels, regression)


def bucket_boundaries(max_seq_length: int, bucket_step: int) -> np.ndarray:
    """Padded lengths a batch can have: multiples of `bucket_step`, and `max_seq_length` itself."""
    boundaries = list(range(bucket_step, max_seq_length, bucket_step)) + [max_seq_length]
    return np.asarray(boundaries, np.int32)


def padded_length(lengths: np.ndarray, padding: str, max_seq_length: int, bucket_step: int) -> int:
    """The length a batch with these example lengths is padded to."""
    if padding == "fixed":
        return max_seq_length
    boundaries = bucket_boundaries(max_seq_length, bucket_step)
    return int(boundaries[np.searchsorted(boundaries, int(lengths.max()))])


def plan_train_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int, padding: str,
                       max_seq_length: int, bucket_step: int) -> list:
    """Index arrays, one per batch, for `epoch` (from 1) of a run with `seed`; deterministic.

    With bucketing, a seeded stream of examples fills one pending batch per bucket and a batch is emitted when full
    (as `tf.data`'s `bucket_by_sequence_length` does); the partial batches left at the end follow, and the batch
    order is shuffled again so that they are not all last.
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    if padding == "fixed":
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    boundaries = bucket_boundaries(max_seq_length, bucket_step)
    bucket_of = np.searchsorted(boundaries, lengths)
    pending = {}
    batches = []
    for index in order:
        bucket = pending.setdefault(int(bucket_of[index]), [])
        bucket.append(index)
        if len(bucket) == batch_size:
            batches.append(np.asarray(bucket))
            pending[int(bucket_of[index])] = []
    batches += [np.asarray(b) for _, b in sorted(pending.items()) if b]
    return [batches[i] for i in rng.permutation(len(batches))]


def plan_eval_batches(lengths: np.ndarray, batch_size: int, padding: str) -> list:
    """Index arrays for scoring: sorted by length so that little is padded (order does not change predictions)."""
    order = np.argsort(lengths, kind="stable") if padding == "bucket" else np.arange(len(lengths))
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def _features(encoded: Encoded, indices: np.ndarray, length: int) -> dict:
    token_ids = encoded.token_ids[indices, :length]
    mask = (np.arange(length)[None, :] < encoded.lengths[indices, None]).astype(np.int32)
    return {"token_ids": token_ids, "segment_ids": encoded.segment_ids[indices, :length], "padding_mask": mask}


def _label_batch(encoded: Encoded, indices: np.ndarray) -> np.ndarray:
    labels = encoded.labels[indices]
    return labels.astype(np.float32)[:, None] if encoded.regression else labels.astype(np.int32)


def batches(encoded: Encoded, plan: list, padding: str, bucket_step: int, with_labels: bool = True) -> Iterator:
    """Yields `(features, labels)` (or features) as NumPy arrays for each index array of `plan`."""
    for indices in plan:
        length = padded_length(encoded.lengths[indices], padding, encoded.max_seq_length, bucket_step)
        features = _features(encoded, indices, length)
        yield (features, _label_batch(encoded, indices)) if with_labels else features


def _signature(encoded: Encoded, with_labels: bool):
    import tensorflow as tf

    features = {name: tf.TensorSpec([None, None], tf.int32) for name in ("token_ids", "segment_ids", "padding_mask")}
    if not with_labels:
        return features
    label = tf.TensorSpec([None, 1], tf.float32) if encoded.regression else tf.TensorSpec([None], tf.int32)
    return features, label


def to_dataset(encoded: Encoded, plan: list, padding: str, bucket_step: int, with_labels: bool = True):
    """A prefetched `tf.data.Dataset` of the planned batches."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_generator(
        lambda: batches(encoded, plan, padding, bucket_step, with_labels),
        output_signature=_signature(encoded, with_labels),
    )
    # A generator's length is unknown to tf.data; Keras needs it to size epochs and progress bars.
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(len(plan)))
    return dataset.prefetch(tf.data.AUTOTUNE)


def train_dataset(encoded: Encoded, batch_size: int, seed: int, epoch: int, padding: str = "bucket",
                  bucket_step: int = 16):
    plan = plan_train_batches(encoded.lengths, batch_size, seed, epoch, padding, encoded.max_seq_length, bucket_step)
    return to_dataset(encoded, plan, padding, bucket_step)


def distinct_shapes(encoded: Encoded, plan: list, padding: str, bucket_step: int) -> list:
    """One index array per distinct padded batch shape in `plan` (to compile each shape once, up front)."""
    first = {}
    for indices in plan:
        shape = (len(indices), padded_length(encoded.lengths[indices], padding, encoded.max_seq_length, bucket_step))
        first.setdefault(shape, indices)
    return list(first.values())


def padding_efficiency(encoded: Encoded, plan: list, padding: str, bucket_step: int) -> float:
    """Real tokens / padded tokens over the planned batches."""
    real = padded = 0
    for indices in plan:
        real += int(encoded.lengths[indices].sum())
        padded += len(indices) * padded_length(encoded.lengths[indices], padding, encoded.max_seq_length, bucket_step)
    return real / padded if padded else 0.0


def subset(encoded: Encoded, indices: Optional[np.ndarray]) -> Encoded:
    if indices is None:
        return encoded
    return Encoded(encoded.token_ids[indices], encoded.segment_ids[indices], encoded.lengths[indices],
                   encoded.labels[indices], encoded.regression)
