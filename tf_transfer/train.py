"""The epoch loop: train, time, score validation and test, stop early.

Timing is split so that it measures what the studies compare:
  * `compile_time_s`: tracing/compiling the training step, done once up front on one batch of every distinct
    shape, after which the weights, optimizer slots and dropout RNG are restored, so it changes nothing.
  * `epoch_time_s`: wall time of one epoch's training steps only (no scoring, no compilation).
  * `train_time_s`: the running sum of `epoch_time_s`.
  * `cpu_utilization`: the process's CPU seconds per wall second during the epoch's training: about 2 on this
    2-core machine when TensorFlow's kernels use both cores, about 1 when a fit call ran them on one core (see
    benchmarks/README.md), so an epoch time can be read with how it was obtained.
  * `epoch_cpu_s` / `train_cpu_s`: the process's CPU seconds for the epoch's training steps, and their running
    sum. For a run pinned to one core these equal the wall time on a dedicated core even when other processes
    share it, which is how a grid can run beside other work and still be timed (the study reports say which
    clock they use).

Example:

>>> from tf_transfer import train
>>> loop = train.EpochLoop(model, metric="accuracy", max_epochs=30, patience=2)  # doctest: +SKIP
>>> loop.run(make_train_dataset, warmup_dataset, evaluate, on_epoch_end)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from typing import Callable, Optional

import keras
import numpy as np
from absl import logging

from tf_transfer import machine
from tf_transfer import metrics as metrics_lib
from tf_transfer.errors import TransferError


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


@dataclasses.dataclass
class EarlyStopping:
    """Stops after `patience` epochs in a row without an improvement of more than `min_delta`."""

    patience: int
    min_delta: float = 0.0
    best: Optional[float] = None
    best_epoch: Optional[int] = None
    wait: int = 0

    def update(self, value, epoch: int) -> bool:
        """Records `value` for `epoch`; returns True when training should stop."""
        if metrics_lib.is_better(value, self.best, self.min_delta):
            self.best, self.best_epoch, self.wait = value, epoch, 0
        else:
            if self.best_epoch is None and value is not None and not _is_nan(value):
                self.best, self.best_epoch = value, epoch
            self.wait += 1
        return self.wait >= self.patience

    def state(self) -> dict:
        return dataclasses.asdict(self)


def _is_nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


class ProgressLogger(keras.callbacks.Callback):
    """One line every `every_s` seconds inside an epoch (batch size 1 epochs last hours)."""

    def __init__(self, epoch: int, steps: int, examples: int, every_s: float = 30.0):
        super().__init__()
        self.epoch, self.steps, self.examples, self.every_s = epoch, steps, examples, every_s

    def on_epoch_begin(self, epoch, logs=None):
        self.start = self.last = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        if now - self.last >= self.every_s:
            self.last = now
            done = batch + 1
            rate = done / (now - self.start)
            eta = (self.steps - done) / rate if rate > 0 else float("nan")
            loss = (logs or {}).get("loss")
            logging.info("epoch %d: step %d/%d, loss %.4f, %.1f steps/s, about %.0f s left in the epoch",
                         self.epoch, done, self.steps, float(loss) if loss is not None else float("nan"), rate, eta)


def snapshot(model) -> list:
    variables = list(model.variables) + (list(model.optimizer.variables) if model.optimizer else [])
    return [(v, np.array(v.numpy())) for v in variables]


def restore(saved: list) -> None:
    for variable, value in saved:
        variable.assign(value)


def compile_steps(model, warmup_dataset) -> float:
    """Traces/compiles the training step on each batch of `warmup_dataset`, then restores every variable.

    Returns the seconds spent. The optimizer is built first so that its slots exist and are restored too.
    """
    model.optimizer.build(model.trainable_variables)
    saved = snapshot(model)
    start = time.perf_counter()
    model.fit(warmup_dataset, epochs=1, verbose=0, shuffle=False)
    elapsed = time.perf_counter() - start
    restore(saved)
    model.reset_metrics()
    return elapsed


def check_finite(loss: float, epoch: int) -> None:
    if loss is None or not math.isfinite(loss):
        raise TransferError(
            f"training loss became {loss} in epoch {epoch}: lower --lr or set --clip_norm; "
            "the summary keeps the epochs completed before it"
        )


class EpochLoop:
    """Runs epochs until early stopping or `max_epochs`, reporting each finished epoch to a callback.

    Args:
      model: a compiled Keras model (under the strategy's scope).
      metric: the validation metric that drives stopping (higher is better).
      max_epochs, patience, min_delta: the stopping rule.
    """

    def __init__(self, model, metric: str, max_epochs: int, patience: int, min_delta: float = 0.0):
        self.model = model
        self.metric = metric
        self.max_epochs = max_epochs
        self.stopper = EarlyStopping(patience, min_delta)
        self.epochs: list = []
        self.train_time_s = 0.0
        self.train_cpu_s = 0.0
        self.stopped_early = False

    def resume_from(self, epochs: list, stopper_state: dict) -> None:
        """Continues after `epochs` (records of completed epochs) with the saved early-stopping state."""
        self.epochs = list(epochs)
        self.train_time_s = self.epochs[-1]["train_time_s"] if self.epochs else 0.0
        # Summaries written before CPU seconds were recorded continue from 0: their CPU clock is incomplete.
        self.train_cpu_s = self.epochs[-1].get("train_cpu_s", 0.0) if self.epochs else 0.0
        self.stopper = EarlyStopping(**stopper_state)

    @property
    def next_epoch(self) -> int:
        return len(self.epochs) + 1

    def done(self) -> bool:
        return self.stopped_early or self.next_epoch > self.max_epochs

    def run(self, make_train_dataset: Callable, evaluate: Callable, on_epoch_end: Callable,
            steps_per_epoch: Optional[int] = None, examples_per_epoch: Optional[int] = None) -> None:
        """`make_train_dataset(epoch)` gives the epoch's batches; `evaluate()` returns `(val, test)` score dicts;
        `on_epoch_end(record)` persists each finished epoch before the next one starts."""
        while not self.done():
            epoch = self.next_epoch
            dataset = make_train_dataset(epoch)
            callbacks = [ProgressLogger(epoch, steps_per_epoch or 0, examples_per_epoch or 0)]
            start, cpu_start = time.perf_counter(), machine.cpu_seconds()
            history = self.model.fit(dataset, epochs=1, verbose=0, shuffle=False, callbacks=callbacks)
            epoch_time_s = time.perf_counter() - start
            epoch_cpu_s = machine.cpu_seconds() - cpu_start
            cpu_utilization = epoch_cpu_s / epoch_time_s
            loss = float(history.history["loss"][-1])
            check_finite(loss, epoch)
            self.train_time_s += epoch_time_s
            self.train_cpu_s += epoch_cpu_s
            val, test = evaluate()
            record = {
                "epoch": epoch,
                "epoch_time_s": epoch_time_s,
                "train_time_s": self.train_time_s,
                "cpu_utilization": cpu_utilization,
                "epoch_cpu_s": epoch_cpu_s,
                "train_cpu_s": self.train_cpu_s,
                "loss": loss,
                "val": val,
                "test": test,
            }
            self.epochs.append(record)
            self.stopped_early = self.stopper.update(val.get(self.metric), epoch) and epoch < self.max_epochs
            on_epoch_end(record)
            sys.stdout.flush()
