"""Progress inside an epoch: step, steps, examples/s and time left.

On a terminal, Keras' progress bar refreshed in place; otherwise (logs, CI, grids) one log line every `every_s`
seconds. At batch size 1 an SST-2 epoch is 60,000 steps, so the end of an epoch is too late to learn the rate.
It is a Keras callback, so `fit` drives it; a custom loop calls `step` after each step.

Example:

>>> from tf_transfer.training.progress import Progress
>>> progress = Progress(epoch=1, steps=100, examples=3200, interactive=False)
>>> progress.on_epoch_begin(0)
>>> progress.step(1, loss=0.69)
"""

from __future__ import annotations

import sys
import time
from typing import Optional

import keras
from absl import logging


class Progress(keras.callbacks.Callback):
    # Keras then calls the batch hook from its callback thread: the training loop never waits for the display
    # (a batch hook otherwise makes every step hand its logs to Python before the next one starts).
    async_safe = True

    def __init__(self, epoch: int, steps: int, examples: int, every_s: float = 30.0,
                 interactive: Optional[bool] = None, label: str = ""):
        super().__init__()
        self.epoch, self.steps, self.examples, self.every_s = epoch, max(int(steps), 1), examples, every_s
        self.label = label
        # Keras draws its bar on stdout (stderr goes through the quiet-start filter, never a terminal).
        self.interactive = sys.stdout.isatty() if interactive is None else interactive
        self.bar = None
        self.start = self.last = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self.start = self.last = time.perf_counter()
        if self.interactive:
            self.bar = keras.utils.Progbar(self.steps, stateful_metrics=["ex/s"], unit_name="step")

    def on_train_batch_end(self, batch, logs=None):
        self.step(batch + 1, **{k: v for k, v in (logs or {}).items() if k == "loss"})

    def step(self, done: int, **values) -> None:
        """`done` steps of `steps` are finished; `values` (e.g. loss) are shown beside the rate."""
        now = time.perf_counter()
        done = min(done, self.steps)
        examples_per_s = done * self.examples / self.steps / max(now - self.start, 1e-9)
        if self.bar is not None:
            self.bar.update(done, [("ex/s", examples_per_s)] + [(k, float(v)) for k, v in values.items()])
            return
        if now - self.last < self.every_s:
            return
        self.last = now
        left = (self.steps - done) * (now - self.start) / done
        shown = "".join(f", {k} {float(v):.4f}" for k, v in values.items())
        logging.info("epoch %d%s: step %d/%d%s, %.1f examples/s, about %.0f s left in the epoch", self.epoch,
                     self.label, done, self.steps, shown, examples_per_s, left)
