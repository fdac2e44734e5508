"""Per-block gradient statistics from the gradients every training step already computes (AutoFreeze's input).

`BlockGradients` adds each step's gradient of every block variable into an accumulator of its shape (one add per
weight per step, inside the traced step: no extra forward or backward pass, no host transfer), by wrapping the
optimizer's `apply` (under mixed precision the inner optimizer's, after the loss scale is undone). At the end of an
interval `norms()` gives each block's L1 norm of its summed gradient, as the AutoFreeze authors' code measures it,
and `reset()` starts the next interval.

Several replicas or workers: the accumulators are variables synchronized on read with SUM aggregation, so each
replica adds its own share's gradient and reading them in cross-replica context all-reduces: every worker reads the
single-device sum (the replicas' gradients add up to one device's: `distributed.loss_under`) and so reaches the same
decision from the same numbers.

Example:

>>> grads = BlockGradients(strategy, [block.trainable_variables for block in backbone.transformer_layers])  # doctest: +SKIP
>>> grads.install(model.optimizer)  # doctest: +SKIP
>>> model.fit(...); grads.norms()  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np


def _inner(optimizer):
    """The optimizer that applies unscaled gradients (Keras' LossScaleOptimizer wraps it under mixed float16)."""
    return getattr(optimizer, "inner_optimizer", optimizer)


class BlockGradients:
    """Gradient sums of `blocks` (one list of Keras variables per block, bottom first) since the last `reset`."""

    def __init__(self, strategy, blocks: Sequence[Sequence]):
        import tensorflow as tf

        self.strategy = strategy or tf.distribute.get_strategy()
        self.num_blocks = len(blocks)
        self._of = {}  # id of a Keras variable -> its accumulator
        self.accumulators = []  # per block
        with self.strategy.scope():
            for b, variables in enumerate(blocks):
                sums = []
                for variable in variables:
                    total = tf.Variable(tf.zeros(variable.shape, tf.float32), trainable=False,
                                        name=f"block{b}_gradient_sum",
                                        synchronization=tf.VariableSynchronization.ON_READ,
                                        aggregation=tf.VariableAggregation.SUM)
                    self._of[id(variable)] = total
                    sums.append(total)
                self.accumulators.append(sums)
        self._norms = None

    def install(self, optimizer) -> None:
        """Makes `optimizer` (before its step is traced) add every block gradient it applies to its sum."""
        inner = _inner(optimizer)
        if getattr(inner, "_tf_transfer_block_gradients", None) is self:
            return
        apply = inner.apply

        def apply_and_accumulate(grads, trainable_variables=None):
            if trainable_variables is not None:
                import tensorflow as tf

                trainable_variables = list(trainable_variables)
                for grad, variable in zip(grads, trainable_variables):
                    total = self._of.get(id(variable))
                    if total is not None and grad is not None:
                        total.assign_add(tf.cast(tf.convert_to_tensor(grad), tf.float32))
            return apply(grads, trainable_variables)

        inner.apply = apply_and_accumulate
        inner._tf_transfer_block_gradients = self

    def norms(self) -> list:
        """Each block's L1 norm of its gradient summed over the interval (and over the replicas), as floats."""
        import tensorflow as tf

        if self._norms is None:
            self._norms = tf.function(lambda: [tf.add_n([tf.reduce_sum(tf.abs(tf.convert_to_tensor(total)))
                                                          for total in sums]) if sums else tf.constant(0.0)
                                                for sums in self.accumulators], autograph=False)
        with self.strategy.scope():
            return [float(v) for v in self._norms()]

    def reset(self) -> None:
        """Zeroes every sum (the start of an interval)."""
        for sums in self.accumulators:
            for total in sums:
                _assign(total, np.zeros(total.shape, np.float32))

    def state(self) -> dict:
        """The sums as read in cross-replica context, to save with a checkpoint: over every replica and, under
        several workers, every worker's (the chief saves them; `load` gives them back to the chief alone)."""
        return {f"b{b}_{i}": np.asarray(total.numpy()) for b, sums in enumerate(self.accumulators)
                for i, total in enumerate(sums)}

    def load(self, state: Optional[dict]) -> None:
        """Puts back `state` (from `state()`); None: zeros (a worker other than the chief, whose sums the chief's
        saved state already holds)."""
        for b, sums in enumerate(self.accumulators):
            for i, total in enumerate(sums):
                # Assigned in cross-replica context, a SUM-synchronized value is split evenly over the replicas.
                _assign(total, np.zeros(total.shape, np.float32) if state is None else state[f"b{b}_{i}"])


def _assign(total, value) -> None:
    """Sets a sum without reading it back: read back in cross-replica context, a sum synchronized on read is
    all-reduced, eagerly and one variable at a time (under `multi_worker` about 6 ms each, a second per worker in
    a small AutoFreeze run), for a value nobody uses."""
    total.assign(value, read_value=False)
