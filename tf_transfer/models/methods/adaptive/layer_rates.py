"""Per-layer learning rates for FreezeOut: each layer's rate is the optimizer's times its own annealing factor.

`anneal_layers(optimizer, layers, times, total_steps, scale_lr)` wraps the optimizer's `update_step` so that the
rate it gives a variable of layer i is multiplied by `(1 / t_i if scale_lr) * 0.5 (1 + cos(pi step / (t_i T)))`
(0 once the layer's time has passed), computed inside the traced step from the optimizer's own step counter: the
factor changes every step without retracing, and resumes with the counter. AdamW's decoupled weight decay keeps the
optimizer's rate (Keras applies it apart from `update_step`) until the layer freezes.
`schedules.freezeout_rate_factor` is the same factor in Python.

Example:

>>> anneal_layers(model.optimizer, [embedding_vars, block0_vars, ...], times, total_steps=600, scale_lr=True)  # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Sequence


def anneal_layers(optimizer, layers: Sequence[Sequence], times: Sequence[float], total_steps: int,
                  scale_lr: bool) -> None:
    """Anneals the rate of each of `layers` (lists of Keras variables) over its share `times[i]` of `total_steps`;
    variables of no layer (the pooler, the head) anneal over all steps (t = 1)."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if getattr(inner, "_tf_transfer_layer_rates", False):
        return
    time_of = {}
    for variables, time in zip(layers, times):
        for variable in variables:
            time_of[inner._var_key(variable)] = float(time)
    update_step = inner.update_step

    def annealed_update_step(gradient, variable, learning_rate):
        import tensorflow as tf

        time = time_of.get(inner._var_key(variable), 1.0)
        end = time * total_steps
        step = tf.cast(inner.iterations, tf.float32)
        factor = (1.0 / time if scale_lr else 1.0) * 0.5 * (1.0 + tf.cos(math.pi * tf.minimum(step / end, 1.0)))
        factor = tf.where(step < end, factor, 0.0)
        rate = tf.cast(learning_rate, tf.float32) * factor
        return update_step(gradient, variable, tf.cast(rate, tf.convert_to_tensor(learning_rate).dtype))

    inner.update_step = annealed_update_step
    inner._tf_transfer_layer_rates = True
