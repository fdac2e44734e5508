"""Feeds: where a run's batches come from. Every feed keeps one protocol, which the runner's tasks and the
benchmark rely on:

    steps_per_epoch, num_examples    training steps and examples per epoch
    train_batches(epoch)             the epoch's batches (seeded by the seed and the epoch alone: resumable)
    warmup_batches()                 one batch of every shape the training step will see (None: no warm-up)
    predict(model, split)            the model's outputs on a split, in the split's own order
    labels(split)                    the split's labels
    use_strategy(strategy)           under several replicas or workers every batch is split into one share per
                                     replica (`inputs.distribute`), so a step is still the single-device batch

Here: `TokenFeed` (token ids through the whole model, bucketed by length), `CachedFeed` (the frozen prefix's
cached outputs, `tf_transfer.data.cache`) and `ArrayFeed` (precomputed feature arrays, e.g. a frozen backbone's
sentence vectors). `tf_transfer.data.stack_feed.StackFeed` (one or two sequences, per-token labels) builds on `Feed`
too; `tf_transfer.data.multitask_feed.MultitaskFeed` keeps the protocol for a custom training loop. Under several
replicas each training example is weighted so that the replicas' summed gradients are one device's (`loss_units`).

Example:

>>> from tf_transfer.core.setting_groups import InputSettings
>>> feed = feeds.TokenFeed(encoded_splits, InputSettings(batch_size=32, seed=0))  # doctest: +SKIP
>>> model.fit(feed.train_batches(epoch=1))  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tf_transfer.core.setting_groups import InputSettings
from tf_transfer.data import cache
from tf_transfer.data import inputs, packing


def train_bucket_step(batch_size: int, bucket_step: int, jit: bool) -> int:
    """At batch size 1 nothing needs padding: without XLA the step function takes any length, so pad nothing
    (step 1); XLA compiles one program per shape, so keep the buckets bounded there."""
    return 1 if batch_size == 1 and jit is not True else bucket_step


class Feed:
    """What the token, cached and stack feeds share: seeded epoch plans of length-bucketed batches, warm-up shapes,
    scoring, and the protocol above.

    A feed holds the encoded (or cached) splits and takes from the run's `InputSettings` its batch sizes, the
    seed of its order, `padding` and `bucket_step`; `jit` is the run's `RuntimeSettings.jit` (XLA wants bounded
    shapes). Subclasses say how a plan becomes a `tf.data.Dataset` (`_to_dataset`).
    """

    def __init__(self, splits: dict, settings: InputSettings, max_seq_length: int, jit=False):
        self.splits = splits
        self.batch_size, self.seed, self.padding = settings.batch_size, settings.seed, settings.padding
        # What a batch's length is rounded up to: a multiple of --bucket_step when bucketed, of the packing's own
        # step when packed (`packing.ROW_STEP`: finer, since a packed row's rounding is all the padding it has).
        self.eval_width_step = packing.ROW_STEP if settings.padding == "pack" else settings.bucket_step
        self.width_step = (train_bucket_step(settings.batch_size, self.eval_width_step, jit)
                           if settings.padding in ("bucket", "pack") else settings.bucket_step)
        self.max_seq_length = max_seq_length
        self.eval_batch_size = settings.eval_batch_size
        self.jit = jit
        # Under XLA the epoch's one partial batch is filled with zero-weight repeats: one shape per bucket length.
        self.fill_to = settings.batch_size if jit is True else None
        self.train = splits["train"]
        self.strategy = None

    def use_strategy(self, strategy):
        """Datasets from now on are distributed over `strategy`'s replicas when it has several replicas or
        workers (`inputs.distribute`); one replica on one worker keeps plain datasets. Returns the feed."""
        from tf_transfer.core import strategies

        self.strategy = strategy if strategies.is_distributed(strategy) else None
        return self

    def _planned(self, split, plan: list, bucket_step: int, with_labels: bool, fill_to):
        if self.strategy is None:
            return self._to_dataset(split, plan, bucket_step, with_labels, fill_to)
        return inputs.distribute(self.strategy,
                                 lambda shares, fill: self._to_dataset(split, shares, bucket_step, with_labels, fill),
                                 plan, fill_to, loss_units=self.loss_units(split) if with_labels else None)

    def loss_units(self, split):
        """What one device's training loss averages over in a batch of `split` (given its indices): its examples.
        Under several replicas each example is weighted by 1 / this (`inputs.distribute`)."""
        return len

    def _to_dataset(self, split, plan: list, bucket_step: int, with_labels: bool, fill_to):
        raise NotImplementedError

    def plan(self, epoch: int) -> list:
        return inputs.plan_train_batches(self.train.lengths, self.batch_size, self.seed, epoch, self.padding,
                                         self.max_seq_length, self.width_step)

    @property
    def steps_per_epoch(self) -> int:
        return len(self.plan(1))

    def padded_length(self, indices) -> int:
        return inputs.padded_length(self.train.lengths[indices], self.padding, self.max_seq_length,
                                    self.width_step)

    def computed_shape(self, indices) -> tuple:
        """`(rows, width)` of the token grid the training step computes for this batch: its examples by their
        padded length, or the rows and width of its packed layout (`--padding=pack`)."""
        if self.padding == "pack":
            rows, width = packing.layout(self.train.lengths[indices], self.max_seq_length, self.width_step)
            return len(rows), width
        return len(indices), self.padded_length(indices)

    @property
    def padding_efficiency(self) -> float:
        """Real tokens / computed tokens (padding included) over an epoch's training batches."""
        plan = self.plan(1)
        padded = sum(int(np.prod(self.computed_shape(indices))) for indices in plan)
        return int(sum(self.train.lengths[indices].sum() for indices in plan)) / padded if padded else 0.0

    @property
    def num_examples(self) -> int:
        return len(self.train)

    def train_batches(self, epoch: int):
        return self.dataset(self.plan(epoch))

    def dataset(self, plan: list):
        """Training batches of `plan` (lists of example indices), with sample weights."""
        return self._planned(self.train, plan, self.width_step, True, self.fill_to)

    def warmup_plan(self) -> list:
        if self.jit is True:
            return inputs.one_per_bucket(self.train.lengths, self.padding, self.max_seq_length, self.width_step)
        first = {}
        for indices in self.plan(1):
            first.setdefault((len(indices), *self.computed_shape(indices)), indices)
        # Without XLA, Keras' step function relaxes its input shapes after a few traces: three shapes suffice.
        return list(first.values())[:3]

    def warmup_batches(self):
        return self.dataset(self.warmup_plan())

    def predict(self, model, split: str) -> np.ndarray:
        data = self.splits[split]
        plan = inputs.plan_eval_batches(data.lengths, self.eval_batch_size, self.padding)
        dataset = self._planned(data, plan, self.eval_width_step, False, None)
        return _unsort(inputs.predict(model, dataset), plan)

    def labels(self, split: str) -> np.ndarray:
        return self.splits[split].labels


class TokenFeed(Feed):
    """Batches of token ids, segment ids and padding masks for the full model."""

    def __init__(self, splits: dict, settings: InputSettings, jit=False):
        super().__init__(splits, settings, splits["train"].max_seq_length, jit)

    def _to_dataset(self, split, plan, bucket_step, with_labels, fill_to):
        return inputs.to_dataset(split, plan, self.padding, bucket_step, with_labels=with_labels, fill_to=fill_to)


class CachedFeed(Feed):
    """Batches of cached frozen-prefix outputs (float16) for the suffix model: bucketed with padding masks, or
    (`packed`: `--padding=pack`) laid end to end in rows for the packed suffix (`packed.suffix_classifier`). The
    cache holds only real tokens either way, so it is laid out per batch as training asks."""

    def __init__(self, splits: dict, settings: InputSettings, jit=False, packed: bool = False):
        super().__init__(splits, dataclasses.replace(settings, padding="pack" if packed else "bucket"),
                         settings.max_seq_length, jit)

    def _to_dataset(self, split, plan, bucket_step, with_labels, fill_to):
        return cache.to_dataset(split, plan, bucket_step, self.max_seq_length, with_labels=with_labels,
                                fill_to=fill_to, packed=self.padding == "pack")


class ArrayFeed:
    """Precomputed feature arrays and their labels, `{split: array}` each: every epoch one permutation seeded by
    (seed, epoch) alone, in consecutive batches (as `fit(shuffle=True)`, but resumable); scoring in order, in
    batches of `eval_batch_size`. No warm-up: a small model's step compiles within its first epoch."""

    def __init__(self, features: dict, labels: dict, batch_size: int, seed: int, eval_batch_size: int = 64):
        self.features, self._labels = features, labels
        self.batch_size, self.seed, self.eval_batch_size = batch_size, seed, eval_batch_size
        self.strategy = None

    def use_strategy(self, strategy):
        """See `Feed.use_strategy`."""
        from tf_transfer.core import strategies

        self.strategy = strategy if strategies.is_distributed(strategy) else None
        return self

    @property
    def num_examples(self) -> int:
        return len(self._labels["train"])

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.num_examples // self.batch_size)

    def train_batches(self, epoch: int):
        order = np.random.default_rng([self.seed, epoch]).permutation(self.num_examples)
        return self._batches((self.features["train"][order], self._labels["train"][order]), self.batch_size)

    def warmup_batches(self):
        return None

    def predict(self, model, split: str) -> np.ndarray:
        batches = self._batches((self.features[split],), self.eval_batch_size)
        return inputs.predict(model, batches)

    def labels(self, split: str) -> np.ndarray:
        return self._labels[split]

    def _batches(self, arrays: tuple, batch_size: int):
        """Consecutive batches of `arrays` (features alone, or features and labels for training), prefetched without
        tf.data autotuning (`inputs.prefetched`); under several replicas split into one share per replica."""
        import tensorflow as tf

        n = len(arrays[0])
        if self.strategy is None:
            dataset = tf.data.Dataset.from_tensor_slices(arrays if len(arrays) > 1 else arrays[0]).batch(batch_size)
            return inputs.prefetched(dataset, -(-n // batch_size))
        plan = [np.arange(start, min(start + batch_size, n)) for start in range(0, n, batch_size)]
        signature = tuple(tf.TensorSpec((None, *a.shape[1:]), tf.as_dtype(a.dtype)) for a in arrays)

        def make_dataset(shares, fill):
            dataset = tf.data.Dataset.from_generator(
                lambda: ((tuple(a[i] for a in arrays) if len(arrays) > 1 else arrays[0][i]) for i in shares),
                output_signature=signature if len(arrays) > 1 else signature[0])
            return inputs.prefetched(dataset, len(shares))

        return inputs.distribute(self.strategy, make_dataset, plan, loss_units=len if len(arrays) > 1 else None)


def _unsort(outputs: np.ndarray, plan: list) -> np.ndarray:
    ordered = np.empty_like(outputs)
    ordered[np.concatenate(plan)] = outputs
    return ordered
