"""The multi-task study's losses, compiled training and scoring steps, and its scores.

Losses: cross-entropy over the sentiment classes, binary cross-entropy on the paraphrase logit, squared error of
the similarity score; each averaged over the task's examples in the step. The score that picks the best epoch is

    overall = mean(sst accuracy, paraphrase accuracy, (Pearson + 1) / 2).

Example:

>>> from tf_transfer.studies.multitask.multitask_steps import overall_score
>>> overall_score(0.25, 0.75, 0.0)
0.5
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from tf_transfer.core import metrics

METRIC = "overall"


def task_loss(task: str, output, labels, step_examples):
    """The task's loss summed over `labels` and divided by `step_examples`, the task's examples in the whole step:
    a replica's share, which summed over the replicas is the mean over the step (on one device, the mean)."""
    if task == "sst":
        per_example = keras.losses.sparse_categorical_crossentropy(labels, output, from_logits=True)
    elif task == "para":
        per_example = ops.binary_crossentropy(labels, output, from_logits=True)
    else:
        per_example = ops.square(output - labels)
    return ops.sum(per_example) / step_examples


def _feature_spec(task: str, pair_head: str):
    import tensorflow as tf

    # int32 throughout: a bool padding_mask breaks MirroredStrategy.
    one = {name: tf.TensorSpec([None, None], tf.int32) for name in ("token_ids", "segment_ids", "padding_mask")}
    return {"a": one, "b": dict(one)} if task != "sst" and pair_head == "sbert" else one


def _label_spec(task: str):
    import tensorflow as tf

    return tf.TensorSpec([None], tf.int32 if task == "sst" else tf.float32)


def make_train_step(model, optimizer, step_tasks: tuple, pair_head: str, strategy):
    """A tf.function: `{task: (features, labels)}` -> (summed loss, {task: loss}); one trace for all batch shapes.

    Each of `strategy`'s replicas trains on its own slice of every task's batch; the optimizer sums their
    gradients, so the step computes what one device would on the whole batch.
    """
    import tensorflow as tf

    variables = list(model.trainable_variables)
    signature = {task: (_feature_spec(task, pair_head), _label_spec(task)) for task in step_tasks}

    def replica_step(batch):
        context = tf.distribute.get_replica_context()
        replica, replicas = context.replica_id_in_sync_group, context.num_replicas_in_sync
        with tf.GradientTape() as tape:
            losses = {}
            for task, (features, labels) in batch.items():
                size = tf.shape(labels)[0]
                start, end = size * replica // replicas, size * (replica + 1) // replicas
                features, labels = tf.nest.map_structure(lambda t: t[start:end], (features, labels))
                output = model.task_output(task, features, training=True)
                losses[task] = task_loss(task, output, labels, tf.cast(size, tf.float32))
            total = tf.add_n(list(losses.values()))
            scaled = total if optimizer.loss_scale is None else total * optimizer.loss_scale
        optimizer.apply(tape.gradient(scaled, variables), variables)
        return total, losses

    # No AutoGraph, as Keras's own train functions: the step has no Python control flow on tensors, and converting
    # the Keras code it calls took a fifth of its trace.
    @tf.function(input_signature=[signature], autograph=False)
    def step(batch):
        total, losses = strategy.run(replica_step, args=(batch,))
        summed = lambda value: strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)  # noqa: E731
        return summed(total), {task: summed(loss) for task, loss in losses.items()}

    return step


def make_predict(model, task: str, pair_head: str):
    import tensorflow as tf

    return tf.function(lambda features: model.task_output(task, features, training=False),
                       input_signature=[_feature_spec(task, pair_head)], autograph=False)


def overall_score(sst_accuracy, paraphrase_accuracy, sts_pearson) -> float:
    """mean(SST accuracy, paraphrase accuracy, (Pearson + 1) / 2); NaN when any part is undefined."""
    parts = [sst_accuracy, paraphrase_accuracy, None if sts_pearson is None else (sts_pearson + 1.0) / 2.0]
    if any(p is None or not math.isfinite(p) for p in parts):
        return float("nan")
    return float(np.mean(parts))


def scores(outputs: dict, labels: dict) -> dict:
    """The three task metrics and `overall` of `{task: outputs}` (inference mode) against `{task: labels}`."""
    result = {
        "sst_accuracy": metrics.accuracy(labels["sst"], outputs["sst"].argmax(axis=-1)),
        "paraphrase_accuracy": metrics.accuracy(labels["para"], (outputs["para"] > 0).astype(np.float32)),
        "sts_pearson": metrics.pearson(labels["sts"], outputs["sts"]),
    }
    result[METRIC] = overall_score(result["sst_accuracy"], result["paraphrase_accuracy"], result["sts_pearson"])
    return result
