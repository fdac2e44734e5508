"""Feeds: where a run's batches come from, token ids through the whole backbone or cached frozen-prefix outputs.

Both give the same interface to the runner and the benchmark: `plan(epoch)`, `dataset(plan)`, `train_dataset(epoch)`,
`warmup_dataset()`, `padded_length(indices)`, `predict(model, split)`,
`steps_per_epoch`, `padding_efficiency`, and `use_strategy(strategy)`: under a strategy with several replicas or
workers, every batch of a plan is split into one share per replica (`inputs.distribute`), so the batch of a step
stays `batch_size` examples in all (the single-device batch), each share padded to its own bucket, and each
training example weighted so that the replicas' summed gradients are one device's (`loss_units`). The
stack-and-finetune study's `tf_transfer.studies.stack_feed.StackFeed` builds on the same base (`Feed`) for one or
two sequences and per-token labels.

Example:

>>> feed = feeds.TokenFeed(encoded_splits, batch_size=32, seed=0, padding="bucket", bucket_step=16)  # doctest: +SKIP
>>> model.fit(feed.train_dataset(epoch=1))  # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from tf_transfer.data import cache
from tf_transfer.data import inputs


def train_bucket_step(batch_size: int, bucket_step: int, jit: bool) -> int:
    """At batch size 1 nothing needs padding: without XLA the step function takes any length, so pad nothing
    (step 1); XLA compiles one program per shape, so keep the buckets bounded there."""
    return 1 if batch_size == 1 and jit is not True else bucket_step


class Feed:
    """What both feeds share: the seeded epoch plans, warm-up shapes, scoring and the interface above.

    A feed holds the encoded (or cached) splits and knows `padding`; subclasses say how a plan becomes a
    `tf.data.Dataset` (`_to_dataset`).
    """

    def __init__(self, splits: dict, batch_size: int, seed: int, padding: str, bucket_step: int,
                 max_seq_length: int, eval_batch_size: int = 64, jit=False):
        self.splits = splits
        self.batch_size, self.seed, self.padding = batch_size, seed, padding
        self.bucket_step = train_bucket_step(batch_size, bucket_step, jit) if padding == "bucket" else bucket_step
        self.eval_bucket_step = bucket_step
        self.max_seq_length = max_seq_length
        self.eval_batch_size = eval_batch_size
        self.jit = jit
        # Under XLA the epoch's one partial batch is filled with zero-weight repeats: one shape per bucket length.
        self.fill_to = batch_size if jit is True else None
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
                                         self.max_seq_length, self.bucket_step)

    @property
    def steps_per_epoch(self) -> int:
        return len(self.plan(1))

    def padded_length(self, indices) -> int:
        return inputs.padded_length(self.train.lengths[indices], self.padding, self.max_seq_length,
                                    self.bucket_step)

    @property
    def padding_efficiency(self) -> float:
        """Real tokens / padded tokens over an epoch's training batches."""
        plan = self.plan(1)
        padded = sum(len(indices) * self.padded_length(indices) for indices in plan)
        return int(sum(self.train.lengths[indices].sum() for indices in plan)) / padded if padded else 0.0

    def train_dataset(self, epoch: int):
        return self.dataset(self.plan(epoch))

    def dataset(self, plan: list):
        """Training batches of `plan` (lists of example indices), with sample weights."""
        return self._planned(self.train, plan, self.bucket_step, True, self.fill_to)

    def warmup_plan(self) -> list:
        if self.jit is True:
            return inputs.one_per_bucket(self.train.lengths, self.padding, self.max_seq_length, self.bucket_step)
        first = {}
        for indices in self.plan(1):
            first.setdefault((len(indices), self.padded_length(indices)), indices)
        # Without XLA, Keras' step function relaxes its input shapes after a few traces: three shapes suffice.
        return list(first.values())[:3]

    def warmup_dataset(self):
        return self.dataset(self.warmup_plan())

    def predict(self, model, split: str) -> np.ndarray:
        data = self.splits[split]
        plan = inputs.plan_eval_batches(data.lengths, self.eval_batch_size, self.padding)
        dataset = self._planned(data, plan, self.eval_bucket_step, False, None)
        return _unsort(model.predict(dataset, verbose=0, steps=getattr(dataset, "num_steps", None)), plan)

    def labels(self, split: str) -> np.ndarray:
        return self.splits[split].labels


class TokenFeed(Feed):
    """Batches of token ids, segment ids and padding masks for the full model."""

    def __init__(self, splits: dict, batch_size: int, seed: int, padding: str, bucket_step: int,
                 eval_batch_size: int = 64, jit=False):
        super().__init__(splits, batch_size, seed, padding, bucket_step, splits["train"].max_seq_length,
                         eval_batch_size, jit)

    def _to_dataset(self, split, plan, bucket_step, with_labels, fill_to):
        return inputs.to_dataset(split, plan, self.padding, bucket_step, with_labels=with_labels, fill_to=fill_to)


class CachedFeed(Feed):
    """Batches of cached frozen-prefix outputs (float16) and padding masks for the suffix model (always
    bucketed: the cache holds only real tokens)."""

    def __init__(self, splits: dict, batch_size: int, seed: int, bucket_step: int, max_seq_length: int,
                 eval_batch_size: int = 64, jit=False):
        super().__init__(splits, batch_size, seed, "bucket", bucket_step, max_seq_length, eval_batch_size, jit)

    def _to_dataset(self, split, plan, bucket_step, with_labels, fill_to):
        return cache.to_dataset(split, plan, bucket_step, self.max_seq_length, with_labels=with_labels,
                                fill_to=fill_to)


def _unsort(outputs: np.ndarray, plan: list) -> np.ndarray:
    ordered = np.empty_like(outputs)
    ordered[np.concatenate(plan)] = outputs
    return ordered
