"""What training under a distribution strategy needs beyond TensorFlow and Keras: values from the chief on every
worker (`from_chief`, `sync_variables`: no shared file system needed), lost workers as one error line
(`lost_workers`), the single-device step's gradient and loss whatever the replicas' shares (`loss_under` with
`inputs.distribute`'s weights, `keras_distributed`'s training step), and workarounds for Keras 3.15's TensorFlow
trainer (`keras_distributed`, `clip_after_summing`; docs/distributed.md says why).

Example:

>>> from tf_transfer.training import distributed
>>> summary = distributed.from_chief(strategy, read_summary)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
from typing import Callable, Optional

import numpy as np

from tf_transfer.core.errors import TransferError
from tf_transfer.core.strategies import is_chief, is_distributed, is_multi_worker, worker_name


def _from_replica_zero(strategy, value: Optional[np.ndarray], shape, dtype) -> np.ndarray:
    """Every worker gets `value` as held by the chief's first replica (a sum where all others give zeros)."""
    import tensorflow as tf

    zeros = np.zeros(shape, dtype)
    local = zeros if value is None else np.asarray(value, dtype).reshape(shape)

    def contribute():
        first = tf.equal(tf.distribute.get_replica_context().replica_id_in_sync_group, 0)
        return tf.where(first, tf.constant(local), tf.constant(zeros))

    total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(contribute), axis=None)
    return np.asarray(total.numpy(), dtype).reshape(shape)


def broadcast_json(strategy, value):
    """The chief's JSON-able `value` on every worker (the others' argument is ignored)."""
    data = np.frombuffer(json.dumps(value).encode(), np.uint8).astype(np.int32) if is_chief(strategy) else None
    size = int(_from_replica_zero(strategy, None if data is None else [len(data)], (1,), np.int64)[0])
    received = _from_replica_zero(strategy, data, (size,), np.int32)
    return json.loads(received.astype(np.uint8).tobytes().decode())


def from_chief(strategy, produce: Callable):
    """`produce()` run on the chief only, its JSON-able result returned on every worker; a `TransferError` it
    raises is raised on every worker, so that all stop together. Without a multi-worker cluster: `produce()`."""
    if not is_multi_worker(strategy):
        return produce()
    payload = None
    if is_chief(strategy):
        try:
            payload = {"value": produce()}
        except TransferError as e:
            payload = {"error": str(e)}
    payload = broadcast_json(strategy, payload)
    if "error" in payload:
        raise TransferError(payload["error"])
    return payload["value"]


# Values per collective operation when syncing variables (64 MB of float32): bounds the memory it takes.
SYNC_CHUNK = 1 << 24


def sync_variables(strategy, variables) -> None:
    """Assigns the chief's values of `variables` (Keras or TF variables, in the same order on every worker) to
    every worker's: after the chief alone restored a checkpoint. A few collective operations per kind of value
    (float32, float16, integers...; `SYNC_CHUNK` values each), not one per variable. Without a multi-worker
    cluster: nothing."""
    if not is_multi_worker(strategy):
        return
    import tensorflow as tf

    variables = list(variables)
    chief = is_chief(strategy)
    groups = {}  # carrier dtype -> indices of the variables that travel in it
    for i, variable in enumerate(variables):
        dtype = tf.as_dtype(variable.dtype)
        if dtype in (tf.float16, tf.float32, tf.float64):
            carrier = dtype.as_numpy_dtype
        elif dtype.is_floating:  # bfloat16: exactly representable in float32
            carrier = np.float32
        else:  # integers, bool, uint32 seed states: exactly representable in int64
            carrier = np.int64
        groups.setdefault(np.dtype(carrier), []).append(i)
    for carrier, members in groups.items():
        sizes = [int(np.prod(variables[i].shape)) for i in members]
        flat = (np.concatenate([np.asarray(variables[i].numpy()).astype(carrier).ravel() for i in members])
                if chief else None)
        total = sum(sizes)
        received = np.concatenate([
            _from_replica_zero(strategy, None if flat is None else flat[start:start + SYNC_CHUNK],
                               (min(SYNC_CHUNK, total - start),), carrier)
            for start in range(0, total, SYNC_CHUNK)] or [np.zeros(0, carrier)])
        for i, part in zip(members, np.split(received, np.cumsum(sizes)[:-1])):
            variables[i].assign(tf.cast(part.reshape(tuple(variables[i].shape)), variables[i].dtype))


def loss_under(strategy, loss):
    """`loss` (a fresh Keras loss) to compile under `strategy`: itself with one replica on one worker, so that
    nothing changes there; summed (reduction "sum") under several replicas or workers, to go with the weights of
    `inputs.distribute` (1 / the examples, or labelled tokens, of the whole batch).

    Why: Keras 3.15 reduces a mean loss on each replica over that replica's share (`reduce_values` in
    keras/src/losses/loss.py: the sum divided by the share's size, or its weights' sum, then by the replicas in
    `scale_loss_for_distribution`) and sums the replicas' gradients, so the examples of a smaller share weighed
    more than one device weighs them. A summed loss is neither divided per share nor scaled per replica: with
    those weights a replica's loss is exactly its examples' part of the batch's mean, and the replicas' summed
    gradients are one device's gradient for any shares.
    """
    if is_distributed(strategy):
        loss.reduction = "sum"
    return loss


def _train_step_recording_the_mean(model):
    """Keras 3.15's TensorFlow `train_step` (keras/src/backend/tensorflow/trainer.py), but recording the loss for
    the epoch's mean as one device does: weighted by the step's real examples.

    Keras records each replica's loss times the replicas (`unscale_loss_for_distribution`) weighted by the rows of
    the replica's share: with unequal shares (and a loss from `loss_under`: each replica's part of the step's
    mean), that is no longer the mean over examples. Here each replica adds its part of the step's loss times
    the step's examples, and a count of the step's examples / replicas (one scalar all-reduce per step), so that
    the epoch's loss is what Keras records on one device: each step's loss weighted by its examples."""
    import warnings

    import keras
    import tensorflow as tf

    def real_rows(x, sample_weight):
        """The rows of this share that are examples, not zero-weight fill repeats (`inputs.fill_batch`)."""
        if sample_weight is None:
            return tf.shape(tf.nest.flatten(x)[0])[0]
        weights = tf.nest.flatten(sample_weight)[0]
        weights = tf.reshape(weights, [tf.shape(weights)[0], -1])
        return tf.reduce_sum(tf.cast(tf.reduce_any(tf.not_equal(weights, 0), axis=1), tf.int32))

    def train_step(data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True) if model._call_has_training_arg else model(x)
            loss = model._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
            scaled_loss = model.optimizer.scale_loss(loss)
        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync
        step_examples = context.all_reduce(tf.distribute.ReduceOp.SUM,
                                           tf.cast(real_rows(x, sample_weight), tf.float32))
        # Summed over the replicas: total = step examples x the step's loss, count = step examples.
        model._loss_tracker.update_state(loss * replicas, sample_weight=step_examples / replicas)
        if model.trainable_weights:
            gradients = tape.gradient(scaled_loss, model.trainable_weights)
            model.optimizer.apply_gradients(zip(gradients, model.trainable_weights))
        else:
            warnings.warn("The model does not have any trainable weights.")
        return model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    return train_step


def _refuse_compiled_outside_the_scope(model) -> None:
    """A `ValueError` if `model`'s loss tracker is not the strategy's: its variables would be this process's own,
    and each worker's epoch loss its own share's."""
    import tensorflow as tf

    tracker = getattr(model, "_loss_tracker", None)  # None: not compiled (a model that only predicts)
    if tracker is not None and not all(isinstance(v.value, tf.distribute.DistributedValues)
                                       for v in tracker.variables):
        raise ValueError(f"{model.name} was compiled outside the strategy's scope; compile it in `strategy.scope()`")


def keras_distributed(model, strategy) -> None:
    """Makes Keras 3's `fit` compute the single-device step on datasets distributed by `inputs.distribute` (faults
    of its TensorFlow trainer, 3.15).

    1. `fit` builds the model on its first batch after `strategy.reduce("MEAN", batch)`: across replicas that adds
       up the replicas' batches element by element, which fails when their shares differ in shape (a share padded
       to another bucket, or one example fewer: "Inputs to operation AddN ... must have the same size and
       shape"), and which `MultiWorkerMirroredStrategy` cannot do at all for a dict of features ("Attempt to
       convert a value ({'token_ids': PerReplica...})": KNOWN_TRAPS.md, trap 14). Building needs only shapes:
       this builds from this process's first replica's share, and not at all once everything is built.
    2. Under a multi-worker strategy each step's logs are reduced across workers with
       `strategy.reduce("MEAN", value, axis=0)`, which fails on the scalar loss ("Invalid reduction dimension 0
       for input with 0 dimensions"): the step's scalars are given that axis (the epoch's loss is read from the
       synchronized metric, not from these logs).
    3. The epoch's loss: each step's loss is recorded weighted by the step's real examples
       (`_train_step_recording_the_mean`), not by each replica's rows. The model must have been compiled in the
       strategy's scope (a `ValueError` otherwise): outside it, `compile` makes a loss tracker of this process's
       own variables, and each worker's `fit` reports its own share's loss (in one process, where every replica
       adds to the same variable, nothing shows).

    Idempotent; nothing happens for a strategy with one replica on one worker.
    """
    if not is_distributed(strategy) or getattr(model, "_tf_transfer_distributed", False):
        return
    import tensorflow as tf

    _refuse_compiled_outside_the_scope(model)

    def built() -> bool:
        return (all(layer.built for layer in model._flatten_layers())
                and (model._compile_metrics is None or model._compile_metrics.built)
                and (model._compile_loss is None or model._compile_loss.built)
                and (model.optimizer is None or model.optimizer.built))

    def maybe_symbolic_build(iterator=None, data_batch=None):
        if built():
            return
        if iterator is not None:
            for _, _, it in iterator:
                data_batch = next(it)
                break
        data_batch = tf.nest.map_structure(
            lambda v: strategy.experimental_local_results(v)[0] if isinstance(v, tf.distribute.DistributedValues)
            else v, data_batch)
        with strategy.scope():
            model._symbolic_build(data_batch=data_batch)

    model._maybe_symbolic_build = maybe_symbolic_build
    model.train_step = _train_step_recording_the_mean(model)
    if is_multi_worker(strategy):
        train_step = model.train_step

        def train_step_with_axis(data):
            return tf.nest.map_structure(lambda v: tf.reshape(v, [1]) if v.shape.rank == 0 else v,
                                         train_step(data))

        model.train_step = train_step_with_axis
    model._tf_transfer_distributed = True


def clip_after_summing(optimizer) -> None:
    """Makes a Keras optimizer clip the gradient one device would have had: the replicas' sum.

    Keras 3 clips each replica's own gradient (`_clip_gradients`) and only then sums them over the replicas
    (`_all_reduce_sum_gradients`): with `global_clipnorm` a distributed run then clips by other norms than one
    device. Here the sum comes first and is clipped (still one all-reduce per step), so a step under any strategy is
    the single-device step. Idempotent; outside a multi-replica step Keras' own methods run unchanged.
    """
    if getattr(optimizer, "_tf_transfer_clip_after_summing", False):
        return
    import tensorflow as tf

    clip, reduce_sum = optimizer._clip_gradients, optimizer._all_reduce_sum_gradients

    def replicated():
        context = tf.distribute.get_replica_context()
        return context if context is not None and context.num_replicas_in_sync > 1 else None

    def clip_gradients(grads):
        context = replicated()
        if context is None:
            return clip(grads)
        present = [g for g in grads if g is not None]
        summed = iter(context.all_reduce(tf.distribute.ReduceOp.SUM, present) if present else [])
        return clip([None if g is None else next(summed) for g in grads])

    def all_reduce_sum_gradients(grads_and_vars):
        if replicated() is None:
            return reduce_sum(grads_and_vars)
        return list(grads_and_vars)  # summed in clip_gradients already

    optimizer._clip_gradients = clip_gradients
    optimizer._all_reduce_sum_gradients = all_reduce_sum_gradients
    optimizer._tf_transfer_clip_after_summing = True


@contextlib.contextmanager
def lost_workers(strategy):
    """Turns the errors TensorFlow raises when a peer is gone (its process killed, its machine unreachable, a
    collective operation past the timeout) into one `TransferError` line; resuming is rerunning every worker."""
    if not is_multi_worker(strategy):
        yield
        return
    import tensorflow as tf

    try:
        yield
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.AbortedError,
            tf.errors.CancelledError) as e:
        first = next((line for line in str(e.message if hasattr(e, "message") else e).splitlines() if line.strip()),
                     "")
        raise TransferError(f"--distribution=multi_worker: {worker_name(strategy)} lost another worker "
                            f"({type(e).__name__}: {first[:200]}); rerun every worker's command to resume after the "
                            "last finished epoch") from None
