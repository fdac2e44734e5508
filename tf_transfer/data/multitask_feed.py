"""The multi-task study's feed: each task's split tokenized (`TaskSplit`), the training steps of an epoch
(`epoch_batches`), and `MultitaskFeed`, which keeps the feeds' protocol (`tf_transfer.data.feeds`) for the study's own
training loop: a batch is `{task: (features, labels)}`, a prediction `{task: outputs}`.

A step is `{task: index array}`: one task per step (the `sequential` schedule) or all three (`summed`). The steps of
epoch e depend only on the seed and e, so a resumed run sees the same batches.

Example:

>>> from tf_transfer.data.multitask_feed import epoch_batches
>>> steps = epoch_batches({"sst": 5, "para": 3, "sts": 2}, batch_size=2, seed=0, epoch=1, schedule="sequential",
...                       order=("sst", "para", "sts"))
>>> [sorted(step) for step in steps]
[['sst'], ['sst'], ['sst'], ['para'], ['para'], ['sts']]
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tf_transfer.core.setting_groups import InputSettings
from tf_transfer.data import inputs
from tf_transfer.data.examples import Examples
from tf_transfer.data.cs224n import TASK_NAMES

# Batches are padded to the next multiple of this above their longest example (never changes what is computed).
BUCKET_STEP = 16


@dataclasses.dataclass
class TaskSplit:
    """One task's split, tokenized: one packed sequence per example, or two (sentence a, sentence b) for SBERT."""

    segments: tuple
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def lengths(self) -> np.ndarray:
        return np.max([segment.lengths for segment in self.segments], axis=0)

    def features(self, indices: np.ndarray):
        parts = [next(inputs.batches(segment, [indices], "bucket", BUCKET_STEP, with_labels=False))
                 for segment in self.segments]
        return parts[0] if len(parts) == 1 else {"a": parts[0], "b": parts[1]}

    def batch(self, indices: np.ndarray):
        labels = self.labels[indices]
        return self.features(indices), labels.astype(np.int32 if labels.dtype.kind == "i" else np.float32)


def encode_split(task: str, examples: Examples, tokenizer, pair_head: str, max_seq_length: int) -> TaskSplit:
    """Tokenizes `examples`: a pair's sentences one by one for the SBERT head, else as one packed sequence."""
    if examples.text_b is not None and pair_head == "sbert":
        segments = tuple(inputs.encode(Examples(texts, None, examples.labels), tokenizer, max_seq_length)
                         for texts in (examples.text_a, examples.text_b))
    else:
        segments = (inputs.encode(examples, tokenizer, max_seq_length),)
    labels = examples.labels.astype(np.float32) if task == "para" else examples.labels
    return TaskSplit(segments, labels)


def epoch_batches(sizes: dict, batch_size: int, seed: int, epoch: int, schedule: str, order: tuple) -> list:
    """The epoch's training steps: a list of `{task: index array}` (one task per step, or all three when summed).

    Sequential: each task in `order`, one seeded permutation cut into batches. Summed: as many steps as the largest
    task needs; every step takes equally many examples of each task, from a stream of fresh seeded permutations, so
    smaller tasks are reshuffled and reused within the epoch.
    """
    def stream(task: str, repeat: int) -> np.ndarray:
        return np.random.default_rng([seed, epoch, TASK_NAMES.index(task), repeat]).permutation(sizes[task])

    if schedule == "sequential":
        steps = []
        for task in order:
            permutation = stream(task, 0)
            steps += [{task: permutation[i:i + batch_size]} for i in range(0, sizes[task], batch_size)]
        return steps
    largest = max(sizes.values())
    step_sizes = [min(batch_size, largest - start) for start in range(0, largest, batch_size)]
    total = sum(step_sizes)
    indices = {}
    for task in order:
        repeats = math.ceil(total / sizes[task])
        indices[task] = np.concatenate([stream(task, r) for r in range(repeats)])[:total]
    bounds = np.cumsum([0] + step_sizes)
    return [{task: indices[task][bounds[i]:bounds[i + 1]] for task in order} for i in range(len(step_sizes))]


class MultitaskFeed:
    """`splits` is `{split: {task: TaskSplit}}` ("train", "dev", and "validation" when one is held out)."""

    def __init__(self, splits: dict, settings: InputSettings, schedule: str, order: tuple):
        self.splits, self.batch_size, self.seed = splits, settings.batch_size, settings.seed
        self.schedule, self.order, self.eval_batch_size = schedule, order, settings.eval_batch_size
        self.sizes = {task: len(split) for task, split in splits["train"].items()}

    def plan(self, epoch: int) -> list:
        return epoch_batches(self.sizes, self.batch_size, self.seed, epoch, self.schedule, self.order)

    @property
    def steps_per_epoch(self) -> int:
        return len(self.plan(0))

    @property
    def num_examples(self) -> int:
        return sum(len(indices) for step in self.plan(0) for indices in step.values())

    def batch(self, step_indices: dict) -> dict:
        return {task: self.splits["train"][task].batch(indices) for task, indices in step_indices.items()}

    def train_batches(self, epoch: int):
        return (self.batch(step_indices) for step_indices in self.plan(epoch))

    def warmup_batches(self) -> list:
        """The first step of each kind (one task per step, or all three): one trace of each training step."""
        first = {}
        for step_indices in self.plan(0):
            first.setdefault(tuple(sorted(step_indices)), step_indices)
        return [self.batch(step_indices) for step_indices in first.values()]

    def predict(self, predictors: dict, split: str) -> dict:
        """`{task: outputs}` of `predictors[task]` (traced inference functions) in each task split's own order."""
        outputs = {}
        for task, task_split in self.splits[split].items():
            # Batches are sorted by length (less padding); put the predictions back in example order.
            plan = inputs.plan_eval_batches(task_split.lengths, self.eval_batch_size, "bucket")
            predicted = np.concatenate([np.asarray(predictors[task](task_split.features(indices))) for indices in plan])
            outputs[task] = np.empty_like(predicted)
            outputs[task][np.concatenate(plan)] = predicted
        return outputs

    def labels(self, split: str) -> dict:
        return {task: task_split.labels for task, task_split in self.splits[split].items()}
