"""BERT's optimizer: AdamW with decoupled weight decay except on LayerNorm and bias, global-norm clipping, a
constant or warm-up-then-linear-decay schedule, and a fused Adam update for the per-step cost at batch size 1.

Example:

>>> from tf_transfer.training import optimizers
>>> optimizer = optimizers.build_optimizer(2e-5, "linear", total_steps=1000, warmup_proportion=0.1)
"""

from __future__ import annotations

import keras


@keras.saving.register_keras_serializable(package="tf_transfer")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `peak` over `warmup_steps`, then linear decay to 0 at `total_steps` (BERT's)."""

    def __init__(self, peak: float, total_steps: int, warmup_steps: int):
        self.peak = float(peak)
        self.total_steps = max(1, int(total_steps))
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        decayed = self.peak * keras.ops.maximum(0.0, 1.0 - step / self.total_steps)
        if self.warmup_steps <= 0:
            return decayed
        warm = self.peak * step / self.warmup_steps
        return keras.ops.where(step < self.warmup_steps, warm, decayed)

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps, "warmup_steps": self.warmup_steps}


@keras.saving.register_keras_serializable(package="tf_transfer")
class FusedAdamW(keras.optimizers.AdamW):
    """Keras' AdamW whose per-variable Adam update runs as TensorFlow's fused `ResourceApplyAdam` kernel.

    Same formula as `keras.optimizers.Adam.update_step` (bias-corrected step size, `m += (g - m)(1 - beta_1)`,
    `v += (g^2 - v)(1 - beta_2)`, `var -= lr_t m / (sqrt(v) + epsilon)`), in one pass over each variable instead of
    about ten elementwise ops with their own passes: per-step optimizer cost is what dominates at batch size 1.
    Weight decay stays Keras' own. Falls back to Keras' update off the TensorFlow backend, for non-float32
    variables, under a tf.distribute strategy, and with amsgrad.
    """

    def update_step(self, gradient, variable, learning_rate):
        import tensorflow as tf

        if (keras.backend.backend() != "tensorflow" or variable.dtype != "float32" or self.amsgrad
                or tf.distribute.has_strategy()):
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        step = tf.cast(self.iterations + 1, tf.float32)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=self._momentums[index].handle, v=self._velocities[index].handle,
            beta1_power=tf.pow(tf.constant(self.beta_1, tf.float32), step),
            beta2_power=tf.pow(tf.constant(self.beta_2, tf.float32), step),
            lr=tf.cast(learning_rate, tf.float32), beta1=tf.constant(self.beta_1, tf.float32),
            beta2=tf.constant(self.beta_2, tf.float32), epsilon=tf.constant(self.epsilon, tf.float32),
            grad=tf.cast(tf.convert_to_tensor(gradient), tf.float32))  # dense, like Keras' own Adam


def build_optimizer(lr: float, schedule: str = "constant", total_steps: int = 1, warmup_proportion: float = 0.0,
                    weight_decay: float = 0.01, clip_norm: float = 1.0, epsilon: float = 1e-6):
    """AdamW as in Google BERT's `optimization.py`: decoupled weight decay except on LayerNorm and bias variables,
    global-norm clipping (`clip_norm=0` turns it off). One difference: Keras' Adam corrects the moment bias."""
    learning_rate = lr
    if schedule == "linear":
        learning_rate = WarmupLinearDecay(lr, total_steps, int(round(total_steps * warmup_proportion)))
    optimizer = FusedAdamW(
        learning_rate=learning_rate,
        weight_decay=weight_decay,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=epsilon,
        global_clipnorm=clip_norm if clip_norm > 0 else None,
    )
    # Keras names LayerNormalization's variables gamma/beta; Dense and attention biases are "bias".
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer
