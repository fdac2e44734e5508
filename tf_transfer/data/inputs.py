"""Tokenization, packing and the tf.data pipelines (fixed or length-bucketed padding).

Texts are tokenized once with the preset's own tokenizer and packed as its family packs them (`[CLS] a [SEP] b
[SEP]` with segment ids; RoBERTa `<s> a </s></s> b </s>`, as keras-hub's preprocessors), truncated to
`max_seq_length` (round robin, which removes tokens from the longer segment first, like BERT's
`_truncate_seq_pair`). Batches are planned in NumPy from a seeded permutation per epoch, so epoch `e` of seed `s`
always sees the same batches in the same order, whatever ran before (resuming needs no iterator state).

Several replicas (`distribute`): each replica takes its share of every planned batch, so the replicas of a step
together hold the single-device batch, and training weights make the step's gradient the single-device one.

Padding:
  * `fixed`: every batch padded to `max_seq_length` (the paper's setting).
  * `bucket`: examples grouped by length; each batch is padded to its bucket's boundary, a multiple of
    `bucket_step`, so compiled programs see a bounded handful of shapes. Grouping changes which examples share a
    batch, never what the model computes for an example (padding is masked out of attention).
  * `pack`: the batches of `fixed`, each laid end to end in rows (`tf_transfer.data.packing`); the step these functions
    take is then the rows' width step (`packing.ROW_STEP` from the feeds), not `bucket_step`.

Example:

>>> from tf_transfer.data import inputs
>>> encoded = inputs.encode(examples, tokenizer, max_seq_length=128)  # doctest: +SKIP
>>> dataset = inputs.train_dataset(encoded, batch_size=32, seed=0, epoch=1)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Optional

import numpy as np

from tf_transfer.data import packing

PADDINGS = ("bucket", "fixed", "pack")


@dataclasses.dataclass
class Encoded:
    """Packed inputs of one split: int32 arrays `[N, max_seq_length]` padded with the pad id, plus lengths."""

    token_ids: np.ndarray
    segment_ids: np.ndarray
    lengths: np.ndarray
    labels: np.ndarray
    regression: bool = False
    # What a batch holds: the inputs the backbone takes (RoBERTa, DistilBERT and DeBERTa-v3 take no segment ids).
    input_names: tuple = ("token_ids", "segment_ids", "padding_mask")

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def max_seq_length(self) -> int:
        return self.token_ids.shape[1]


def encode(examples, tokenizer, max_seq_length: int, chunk_size: int = 4096) -> Encoded:
    """Tokenizes and packs `examples` (an `examples.Examples`) with `tokenizer` (a keras-hub tokenizer of one of
    `families.FAMILIES`), the way that family's keras-hub TextClassifierPreprocessor packs them."""
    import keras_hub
    import tensorflow as tf

    from tf_transfer.core import family_table

    family = family_table.of_tokenizer(tokenizer)
    packer = keras_hub.layers.MultiSegmentPacker(
        sequence_length=max_seq_length,
        start_value=tokenizer.start_token_id,
        end_value=tokenizer.end_token_id,
        sep_value=[tokenizer.end_token_id] * family.pair_separator,
        pad_value=tokenizer.pad_token_id,
        truncate="round_robin",
    )
    nothing = np.zeros((0, max_seq_length), np.int32)  # a split of no examples (nothing held out) packs to (0, L)
    token_chunks, segment_chunks = [nothing], [nothing]
    columns = [examples.text_a] + ([examples.text_b] if examples.text_b is not None else [])
    tokenize_and_pack = _tokenize_and_pack(tokenizer, packer, max_seq_length, len(columns), len(examples.text_a))
    for start in range(0, len(examples.text_a), chunk_size):
        stop = start + chunk_size
        token_ids, segment_ids = tokenize_and_pack(*[tf.constant(column[start:stop]) for column in columns])
        token_chunks.append(np.asarray(token_ids, np.int32))
        segment_chunks.append(np.asarray(segment_ids, np.int32))
    token_ids = np.concatenate(token_chunks)
    lengths = (token_ids != tokenizer.pad_token_id).sum(axis=1).astype(np.int32)
    regression = examples.labels.dtype.kind == "f"
    return Encoded(token_ids, np.concatenate(segment_chunks), lengths, examples.labels, regression, family.inputs)


# keras-hub's tokenizer and packer run eagerly at about 1 ms a pair of texts (0.4 ms a text) on one core, mostly in
# the packer's ragged ops; traced once (1-2 s), the same ops give the same arrays for 4,096 pairs in 0.06 s. A split
# this large pays the trace back (SST-2's 67,349 training sentences: 34.5 s eagerly, 1.6 traced; 2,490 RTE pairs: 5.1
# and 2.3; benchmarks/tokenize_speed.py); a smaller one (most validation splits, a small file) stays eager unless a
# larger one traced it already (1,500 STS-B pairs: 1.6 and 1.8).
TRACE_FROM_EXAMPLES = 2048
_traced: dict = {}  # (id(tokenizer), max_seq_length, segments) -> (tokenizer, its traced function): one per process


def _tokenize_and_pack(tokenizer, packer, max_seq_length: int, segments: int, size: int):
    """A function of `segments` string tensors that tokenizes them with `tokenizer` and packs them with `packer`:
    traced where `size` examples pay the trace back (`TRACE_FROM_EXAMPLES`) or one is traced already."""
    import tensorflow as tf

    key = (id(tokenizer), max_seq_length, segments)
    if key in _traced and _traced[key][0] is tokenizer:
        return _traced[key][1]

    def tokenize_and_pack(*texts):
        return packer(tuple(tokenizer(text) for text in texts))

    if size < TRACE_FROM_EXAMPLES:
        return tokenize_and_pack
    traced = tf.function(tf.autograph.experimental.do_not_convert(tokenize_and_pack),
                         input_signature=[tf.TensorSpec([None], tf.string)] * segments)
    if len(_traced) >= 4:  # a process that loads many tokenizers (a test process) keeps only the last few
        _traced.clear()
    _traced[key] = (tokenizer, traced)
    return traced


def bucket_boundaries(max_seq_length: int, bucket_step: int) -> np.ndarray:
    """Padded lengths a batch can have: multiples of `bucket_step`, and `max_seq_length` itself."""
    boundaries = list(range(bucket_step, max_seq_length, bucket_step)) + [max_seq_length]
    return np.asarray(boundaries, np.int32)


def padded_length(lengths: np.ndarray, padding: str, max_seq_length: int, bucket_step: int) -> int:
    """The length a batch with these example lengths is padded to."""
    if padding == "fixed":
        return max_seq_length
    boundaries = bucket_boundaries(max_seq_length, bucket_step)
    if len(lengths) == 0:  # a replica's share of a batch smaller than the number of replicas
        return int(boundaries[0])
    return int(boundaries[np.searchsorted(boundaries, int(lengths.max()))])


def plan_train_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int, padding: str,
                       max_seq_length: int, bucket_step: int) -> list:
    """Index arrays, one per batch, for `epoch` (from 1) of a run with `seed`; deterministic.

    With bucketing, a seeded stream of examples fills one pending batch per bucket and a batch is emitted when full
    (as `tf.data`'s `bucket_by_sequence_length` does). The examples left over in the buckets are sorted by length
    and batched together, so an epoch has `ceil(N / batch_size)` steps as with fixed padding, and only one batch
    (of `N % batch_size` examples, the same size every epoch) is partial: bucket-sized leftovers would give
    a few tiny batches of new sizes each epoch, and XLA compiles a program per shape. The batch order is then
    shuffled again so that the mixed batches are not all last.
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    if padding in ("fixed", "pack"):
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
    leftovers = np.asarray([i for _, b in sorted(pending.items()) for i in b], np.int64)
    leftovers = leftovers[np.argsort(lengths[leftovers], kind="stable")]
    batches += [leftovers[i:i + batch_size] for i in range(0, len(leftovers), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def plan_eval_batches(lengths: np.ndarray, batch_size: int, padding: str) -> list:
    """Index arrays for scoring: sorted by length so that little is padded (order does not change predictions)."""
    order = np.argsort(lengths, kind="stable") if padding in ("bucket", "pack") else np.arange(len(lengths))
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def _features(encoded: Encoded, indices: np.ndarray, length: int, padding: str, bucket_step: int) -> dict:
    if padding == "pack":
        return packing.features(encoded.token_ids[indices], encoded.segment_ids[indices], encoded.lengths[indices],
                                encoded.input_names, bucket_step)
    token_ids = encoded.token_ids[indices, :length]
    mask = (np.arange(length)[None, :] < encoded.lengths[indices, None]).astype(np.int32)
    features = {"token_ids": token_ids, "segment_ids": encoded.segment_ids[indices, :length], "padding_mask": mask}
    return {name: features[name] for name in encoded.input_names}


def _label_batch(encoded: Encoded, indices: np.ndarray) -> np.ndarray:
    labels = encoded.labels[indices]
    return labels.astype(np.float32)[:, None] if encoded.regression else labels.astype(np.int32)


def fill_batch(indices: np.ndarray, batch_size: Optional[int]):
    """`indices` grown to `batch_size` by repeating its own examples, and sample weights that are 0 on the repeats.

    XLA compiles one program per input shape; filling the one partial batch of an epoch keeps the shapes to the
    bucket lengths alone. With the losses' `mean_with_sample_weight` reduction, the zero-weight repeats change
    neither the loss nor the gradients (repeating real examples keeps their padded length the batch's own).
    """
    weights = np.ones(len(indices), np.float32)
    if batch_size is None or len(indices) >= batch_size or len(indices) == 0:
        return indices, weights
    extra = np.resize(indices, batch_size - len(indices))
    return np.concatenate([indices, extra]), np.concatenate([weights, np.zeros(len(extra), np.float32)])


def batches(encoded: Encoded, plan: list, padding: str, bucket_step: int, with_labels: bool = True,
            fill_to: Optional[int] = None) -> Iterator:
    """Yields `(features, labels, sample_weights)` (or features) as NumPy arrays for each index array of `plan`;
    `fill_to` fills partial batches with zero-weight repeats (see `fill_batch`)."""
    for indices in plan:
        length = padded_length(encoded.lengths[indices], padding, encoded.max_seq_length, bucket_step)
        if not with_labels:
            yield _features(encoded, indices, length, padding, bucket_step)
            continue
        indices, weights = fill_batch(indices, fill_to)
        yield _features(encoded, indices, length, padding, bucket_step), _label_batch(encoded, indices), weights


def _signature(encoded: Encoded, with_labels: bool, padding: str):
    import tensorflow as tf

    names = encoded.input_names
    if padding == "pack":
        names = [name for name in names if name != "padding_mask"] + list(packing.PACKED_INPUTS)
    features = {name: tf.TensorSpec([None] if name == "cls_positions" else [None, None], tf.int32)
                for name in names}
    if not with_labels:
        return features
    label = tf.TensorSpec([None, 1], tf.float32) if encoded.regression else tf.TensorSpec([None], tf.int32)
    return features, label, tf.TensorSpec([None], tf.float32)


def to_dataset(encoded: Encoded, plan: list, padding: str, bucket_step: int, with_labels: bool = True,
               fill_to: Optional[int] = None):
    """A prefetched `tf.data.Dataset` of the planned batches (`fill_to`: see `fill_batch`)."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_generator(
        lambda: batches(encoded, plan, padding, bucket_step, with_labels, fill_to),
        output_signature=_signature(encoded, with_labels, padding),
    )
    return prefetched(dataset, len(plan))


def replica_share(indices: np.ndarray, share: int, shares: int) -> np.ndarray:
    """Share `share` of `shares` of one batch: consecutive slices, the first ones one example longer when the
    batch does not divide evenly (as `tf.distribute` splits a batch), so that the shares in order are the batch."""
    return np.array_split(np.asarray(indices), shares)[share]


def local_shares(num_replicas: int, num_workers: int, worker: int) -> list:
    """The shares of every batch that this worker's replicas take, in the order of its local replicas.

    Local replica j of worker w takes share `j * num_workers + w`: the order in which Keras puts the replicas'
    predictions back together under a multi-worker strategy, so that predictions come back in batch order.
    """
    local = num_replicas // num_workers
    return [j * num_workers + worker for j in range(local)]


def distribute(strategy, make_dataset, plan: list, fill_to: Optional[int] = None, loss_units=None):
    """`plan`'s batches spread over `strategy`'s replicas: each replica gets its share of every batch
    (`replica_share`), so the replicas of one step together hold exactly the batch, padded per share to its own
    bucket. `make_dataset(share_plan, fill_to)` builds one worker's `tf.data.Dataset` of its replicas' shares
    (its local replicas' shares of a step in a row, as `distribute_datasets_from_function` hands them out).

    Training batches give `loss_units(indices)`: what one device's loss averages over in that batch (its examples,
    `len`; its labelled tokens when tagging). Each share's sample weights are then multiplied by 1 / the units of
    its whole batch (weights of 1 are made where the dataset has none, 0 stays 0 on fill repeats), to go with a
    loss compiled with reduction "sum" (`training.distributed.loss_under`): each replica's loss is its share of
    the batch's mean, so the gradients summed over the replicas are one device's, whatever the shares' sizes.

    The dataset is distributed here, once, the way TensorFlow expects (`distribute_datasets_from_function`):
    Keras then uses it as it is. `num_steps` holds the steps per epoch, for `fit`'s `steps_per_epoch` and
    `predict`'s `steps`.
    """
    import tensorflow as tf

    replicas = strategy.num_replicas_in_sync
    share_fill = -(-fill_to // replicas) if fill_to else None
    unit_weights = None  # per batch of `plan`: 1 / its loss units
    if loss_units is not None:
        units = [loss_units(indices) for indices in plan]
        unit_weights = np.asarray([1.0 / n if n else 0.0 for n in units], np.float32)

    def dataset_fn(context):
        shares = local_shares(replicas, context.num_input_pipelines, context.input_pipeline_id)
        share_plan = [replica_share(indices, share, replicas) for indices in plan for share in shares]
        dataset = make_dataset(share_plan, share_fill)
        if unit_weights is not None:
            dataset = _weighted_per_batch(dataset, np.repeat(unit_weights, len(shares)))
        # Of unknown length: the known one would count elements (steps times local replicas), and Keras, told
        # the steps (`num_steps`), would start one more pass over a dataset of known length after each epoch.
        return dataset.filter(lambda *_: tf.constant(True))

    dataset = strategy.distribute_datasets_from_function(dataset_fn)
    dataset.num_steps = len(plan)
    return dataset


def _weighted_per_batch(dataset, share_factors: np.ndarray):
    """`dataset`'s `(features, labels[, weights])` with the weights multiplied by each element's factor (weights
    of the labels' shape, all 1, where there are none: per token when tagging)."""
    import tensorflow as tf

    def weighted(element, factor):
        if len(element) == 3:
            features, labels, weights = element
            return features, labels, weights * factor
        features, labels = element
        return features, labels, tf.fill(tf.shape(labels), factor)

    return tf.data.Dataset.zip((dataset, tf.data.Dataset.from_tensor_slices(share_factors))).map(weighted)


# Batches ahead of the model: the generators only slice arrays, so two hide them behind a training step.
PREFETCH_BATCHES = 2


def prefetched(dataset, num_batches: int):
    """`dataset` with its known length and a fixed prefetch buffer, and tf.data's autotuning switched off.

    Why off: autotuning runs a model thread that re-optimizes with a period starting at 10 ms and doubling, and
    destroying the iterator (every `fit`/`predict` call, so every epoch and every scoring) waited for that
    thread's next wake-up: epochs whose steps took 13.5 s of CPU ended at exactly 20.47 s (10 ms x (2^11 - 1))
    of wall time, which looked like TensorFlow using one core (benchmarks/LOG.md, history). A fixed buffer has no
    such thread.
    """
    import tensorflow as tf

    # A generator's length is unknown to tf.data; Keras needs it to size epochs and progress bars.
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(num_batches))
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.prefetch(PREFETCH_BATCHES).with_options(options)


def predict(model, dataset, callbacks=None) -> np.ndarray:
    """`model.predict` over `dataset` (plain, or distributed by `distribute`), its step traced once; `callbacks`
    are Keras callbacks of the prediction (e.g. progress).

    Keras traces its predict step for the first batch's shapes and again for later shapes until a trace with
    relaxed dimensions serves them (bucketed padding: two or three traces; three for batches of three lengths in
    `tests/training/test_performance.py`). Traced first for the dataset's own element spec (the batch and length
    dimensions unknown), every batch reuses that one trace, the kind of graph that served most batches already. The
    first batches' outputs can differ in float32 rounding (presumably kernels chosen without their static shapes):
    measured on 2026-11-26 with all-MiniLM-L6-v2 (last 2 blocks, 256 training examples, one epoch), STS-B test
    Pearson -0.04340054431 before and -0.04340054146 after (7e-8 relative), its validation scores and MRPC's equal
    to the last digit. Datasets distributed over several replicas keep Keras' way (their elements are per-replica
    values), and so do datasets of anything but dense tensors (a ragged or sparse spec is not a shape to relax).
    """
    import tensorflow as tf

    steps = getattr(dataset, "num_steps", None)
    if (model.predict_function is None and not model.run_eagerly and isinstance(dataset, tf.data.Dataset)
            and all(type(spec) is tf.TensorSpec for spec in tf.nest.flatten(dataset.element_spec))):
        model.make_predict_function()
        relaxed = tf.nest.map_structure(
            lambda spec: tf.TensorSpec([None] * len(spec.shape), spec.dtype) if spec.shape.rank else spec,
            dataset.element_spec)
        model.predict_function.get_concrete_function([relaxed])
    return model.predict(dataset, verbose=0, steps=steps, callbacks=callbacks)


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


def one_per_bucket(lengths: np.ndarray, padding: str, max_seq_length: int, bucket_step: int) -> list:
    """One single-example index array per padded length that a batch can have on this data: filled to full size
    (`fill_batch`), these are every shape an XLA-compiled step will meet in any epoch."""
    first = {}
    for index in np.argsort(lengths, kind="stable"):
        first.setdefault(padded_length(lengths[[index]], padding, max_seq_length, bucket_step), index)
    return [np.asarray([index]) for index in first.values()]
