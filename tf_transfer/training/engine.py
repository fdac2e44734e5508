"""The one training engine: every study's epochs run here.

A study hands the engine what differs, as plain objects: a way to train one epoch (`keras_epoch` for `fit`, or
any function of `(epoch, progress)` returning `{"loss": ..., extras}`), a way to score (`evaluate() -> (val,
test)`), and optionally a hook after each epoch (a stack's gap rule). The engine owns what is the same everywhere:
wall and CPU timing, peak memory, the non-finite-loss stop, early stopping, the best epoch, checkpoint and summary
after every epoch (through `RunFolder`), resume, TensorBoard scalars and progress. Every epoch record has the keys
`epoch, epoch_time_s, train_time_s, cpu_utilization, epoch_cpu_s, train_cpu_s, others_cpu_load, speed_probe_cpu_ms,
peak_memory_mb, loss, val, test` plus the study's own (`phase`, `task_loss`, ...); the summary keeps the run's
`peak_memory_mb` (the largest of its epochs') and `peak_memory_source`, the resident set right before this process's
first training step (`resident_before_training_mb`) and the largest peak above it (`peak_above_start_mb`: what
training adds, i.e. gradients, optimizer slots, activations and traced steps; a resumed run measures from its new
process's start). Timing and memory: docs/outputs.md.

A study with stages (stack-and-finetune's two phases) calls `fit` once per stage on the same engine, with
`until_epoch`, its own stopper and `tags` such as `{"phase": 2}`.

Example:

>>> engine = Engine(folder, metric="accuracy", max_epochs=30, patience=2)  # doctest: +SKIP
>>> engine.fit(model, keras_epoch(model, feed.train_dataset, steps, examples), evaluate)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import time
from typing import Callable, Optional

import numpy as np
from absl import logging

from tf_transfer.core import machine, memory
from tf_transfer.core import metrics as metrics_lib
from tf_transfer.core.errors import TransferError
from tf_transfer.training import distributed, record
from tf_transfer.training.progress import Progress

# What an `after_epoch` hook returns to end a run unfinished on purpose: its last epoch's checkpoint stays and the
# summary is not marked completed, so that a later run of the same folder resumes after that epoch (a sweep's
# reference: full fine-tuning's seed 0 continues from the epochs it trained).
PAUSE = "pause"
from tf_transfer.training.run_folder import RunFolder


@dataclasses.dataclass
class EarlyStopping:
    """Stops after `patience` epochs in a row without an improvement of more than `min_delta` (patience 0: never)."""

    patience: int
    min_delta: float = 0.0
    best: Optional[float] = None
    best_epoch: Optional[int] = None
    wait: int = 0

    def update(self, value, epoch: int, lower: bool = False) -> bool:
        """Records `value` for `epoch` (`lower`: lower is better); returns True when training should stop."""
        if metrics_lib.is_better(value, self.best, self.min_delta, lower):
            self.best, self.best_epoch, self.wait = value, epoch, 0
        else:
            self.wait += 1
        return bool(self.patience) and self.wait >= self.patience

    def state(self) -> dict:
        return dataclasses.asdict(self)


def snapshot(variables) -> list:
    return [(v, np.array(v.numpy())) for v in variables]


def restore(saved: list) -> None:
    for variable, value in saved:
        variable.assign(value)


def warm_up(model, dataset, strategy=None) -> float:
    """Traces the training step on each batch of `dataset` (one of every shape), then puts every variable back
    (weights, optimizer slots, dropout RNG): compilation is timed apart from training and changes nothing.

    `dataset` may be distributed already (`inputs.distribute`); under a strategy with several replicas Keras'
    faults there are worked around first (`distributed.keras_distributed`), for this and every later `fit`."""
    distributed.keras_distributed(model, strategy)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model.optimizer.build(model.trainable_variables)
        saved = snapshot(list(model.variables) + list(model.optimizer.variables))
    # Outside the scope, as every epoch's `fit`: a traced step function is keyed by the strategy scope it was
    # traced in, so a warm-up inside it would leave the first epoch to trace again.
    start = time.perf_counter()
    model.fit(dataset, epochs=1, verbose=0, shuffle=False, steps_per_epoch=steps_of(dataset))
    elapsed = time.perf_counter() - start
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        restore(saved)
        model.reset_metrics()
    return elapsed


def steps_of(dataset) -> Optional[int]:
    """Steps per epoch of a dataset distributed by `inputs.distribute` (which counts its elements, i.e. steps
    times local replicas); None for a plain dataset, whose own length Keras reads."""
    return getattr(dataset, "num_steps", None)


def fit_epoch(model, dataset, progress) -> dict:
    """One epoch as one Keras `fit` call on `dataset` (a plain or an already distributed dataset)."""
    history = model.fit(dataset, epochs=1, verbose=0, shuffle=False, callbacks=[progress],
                        steps_per_epoch=steps_of(dataset))
    return {"loss": float(history.history["loss"][-1])}


def keras_epoch(model, make_dataset: Callable, steps: int, examples: int):
    """An epoch function for `Engine.fit`: `fit_epoch` on `make_dataset(epoch)`."""

    def train_epoch(epoch: int, progress: Progress) -> dict:
        return fit_epoch(model, make_dataset(epoch), progress)

    train_epoch.steps, train_epoch.examples = steps, examples
    return train_epoch


# After an epoch of at least 5 s, the machine's speed is probed for 1% of the epoch's time, at most 1 s
# (`machine.speed_probe`): enough calls for a median within a few percent, at a cost no timing can separate.
PROBE_SHARE, PROBE_MIN_S, PROBE_MAX_S = 0.01, 0.05, 1.0


def probe_after(epoch_time_s: float) -> Optional[float]:
    """`machine.speed_probe` with the budget above for an epoch of `epoch_time_s`; None after a shorter epoch."""
    budget_s = min(PROBE_SHARE * epoch_time_s, PROBE_MAX_S)
    return machine.speed_probe(budget_s) if budget_s >= PROBE_MIN_S else None


def check_finite(loss, epoch: int) -> None:
    """`TransferError` for a non-finite loss, naming its likely causes most likely first: a frozen-prefix cache this
    process read from disk (above all one that failed its check), then the inputs, then the learning rate (a user
    sent after the rate alone kept training on a damaged cache)."""
    if loss is None or not math.isfinite(loss):
        from tf_transfer.data import cache

        caches = sorted(cache.suspects().items(), key=lambda item: "failed" not in item[1])
        causes = [f"the frozen-prefix cache {folder}, which {what} (delete it to have it built afresh)"
                  for folder, what in caches]
        causes += ["the inputs (a row with extreme or missing values)", "the learning rate (lower --lr or set "
                   "--clip_norm)"]
        raise TransferError(f"training loss became {loss} in epoch {epoch}; likely causes, most likely first: "
                            f"{'; '.join(f'({n}) {cause}' for n, cause in enumerate(causes, start=1))}; the summary "
                            "keeps the epochs completed before it")


class Engine:
    """Epochs of one run in `folder` (started, i.e. `folder.summary` exists): `fit` trains until `max_epochs`
    (or a stage's `until_epoch`) or early stopping, recording every epoch in the summary.

    `metric` (higher is better) picks the best epoch and drives early stopping with `patience` (0: off) and
    `min_delta`. `recorder` (a `record.TensorBoardRecorder`) gets each epoch's numbers.
    """

    def __init__(self, folder: RunFolder, metric: str, max_epochs: int, patience: int = 0, min_delta: float = 0.0,
                 recorder=None, strategy=None):
        self.folder, self.metric, self.max_epochs = folder, metric, max_epochs
        self.recorder, self.strategy = recorder, strategy
        self.summary = folder.summary
        self.summary.setdefault("epochs", [])
        self.memory = memory.PeakMemory()
        self.resident_before_mb = None  # the process's resident set before its first training step
        held = self.summary.get("early_stopping")
        self.stopper = EarlyStopping(**held) if held else EarlyStopping(patience, min_delta)

    @property
    def epochs(self) -> list:
        return self.summary["epochs"]

    @property
    def next_epoch(self) -> int:
        return len(self.epochs) + 1

    def restore_last(self, model, optimizer=None, **facts) -> Optional[int]:
        """When resuming: loads the last finished epoch's checkpoint into `model` (and `optimizer`), notes the
        resume with `facts` (compile time, ...) and returns that epoch; else None."""
        if not self.epochs or self.summary.get("completed"):
            return None
        last = self.epochs[-1]["epoch"]
        scope = self.strategy.scope() if self.strategy is not None else contextlib.nullcontext()
        with scope:
            self.folder.restore(last, model, optimizer)
        self.folder.note_resume(last, **facts)
        logging.info("resuming %s after epoch %d", self.folder.path, last)
        return last

    def fit(self, model, train_epoch: Callable, evaluate: Callable, *, optimizer=None,
            until_epoch: Optional[int] = None, stopper: Optional[EarlyStopping] = None, tags: Optional[dict] = None,
            after_epoch: Optional[Callable] = None, on_best: Optional[Callable] = None,
            steps: Optional[int] = None, examples: Optional[int] = None) -> str:
        """Trains epochs `next_epoch..until_epoch` (default `max_epochs`); returns why it ended: "epochs",
        "patience", "hook" (`after_epoch(record)` returned True; it may also mark the record `rolled_back`,
        which keeps it out of the best epoch) or `PAUSE` (it returned `PAUSE`: the run is left to resume).

        `stopper` (default the run's) decides early stopping; `on_best(epoch)` runs when an epoch becomes the best.
        `steps`/`examples` per epoch feed the progress display (default: attributes of `train_epoch`).
        """
        until_epoch = min(until_epoch or self.max_epochs, self.max_epochs)
        stopper = stopper if stopper is not None else self.stopper
        steps = steps or getattr(train_epoch, "steps", 1)
        examples = examples or getattr(train_epoch, "examples", steps)
        label = "".join(f" ({k} {v})" for k, v in (tags or {}).items())
        if self.summary.get("stopped_early"):
            return "patience"  # resumed after the epoch that stopped the run, before `finish`: nothing left
        while self.next_epoch <= until_epoch:
            epoch = self.next_epoch
            progress = Progress(epoch, steps, examples, label=label)
            progress.on_epoch_begin(epoch)
            epoch_record = self._train_and_score(epoch, train_epoch, evaluate, progress, tags)
            hooked = after_epoch(epoch_record) if after_epoch is not None else None
            ended_by = PAUSE if hooked == PAUSE else "hook" if hooked else None
            self.epochs.append(epoch_record)
            if not epoch_record.get("rolled_back") and self._judge(epoch_record, stopper, on_best) and not ended_by:
                ended_by = "patience"
                self.summary["stopped_early"] = True
            self.folder.save_epoch(epoch, model, optimizer)
            self._report(epoch_record)
            sys.stdout.flush()
            if ended_by:
                return ended_by
        return "epochs"

    def _train_and_score(self, epoch: int, train_epoch: Callable, evaluate: Callable, progress,
                         tags: Optional[dict]) -> dict:
        """Trains one epoch (timed on the wall and the CPU clock), scores it; returns its record."""
        if self.resident_before_mb is None and not self.memory.devices:
            self.resident_before_mb = memory.resident_mb()
        self.memory.start()
        start, cpu_start, busy_start = time.perf_counter(), machine.cpu_seconds(), machine.busy_cpu_seconds()
        result = dict(train_epoch(epoch, progress))
        epoch_time_s = time.perf_counter() - start
        epoch_cpu_s = machine.cpu_seconds() - cpu_start
        busy_end = machine.busy_cpu_seconds()
        peak_memory_mb = self.memory.peak_mb()
        speed_probe_cpu_ms = probe_after(epoch_time_s)
        self._note_peak(peak_memory_mb)
        loss = result.pop("loss")
        check_finite(loss, epoch)
        previous = self.epochs[-1] if self.epochs else {}
        val, test = evaluate()
        return {
            "epoch": epoch,
            "epoch_time_s": epoch_time_s,
            "train_time_s": previous.get("train_time_s", 0.0) + epoch_time_s,
            "cpu_utilization": epoch_cpu_s / epoch_time_s,
            "epoch_cpu_s": epoch_cpu_s,
            # Summaries from before CPU seconds were recorded continue from 0: their CPU clock is incomplete.
            "train_cpu_s": previous.get("train_cpu_s", 0.0) + epoch_cpu_s,
            "others_cpu_load": machine.others_cpu_load(busy_start, busy_end, epoch_cpu_s, epoch_time_s),
            "speed_probe_cpu_ms": speed_probe_cpu_ms,
            "peak_memory_mb": peak_memory_mb,
            "loss": loss,
            **result,
            "val": val,
            "test": test,
            **(tags or {}),
        }

    def _note_peak(self, peak_memory_mb) -> None:
        """The run's peak memory over its epochs so far (a resumed run's earlier epochs count too)."""
        if peak_memory_mb is not None:
            self.summary["peak_memory_mb"] = max(peak_memory_mb, self.summary.get("peak_memory_mb") or 0.0)
            self.summary["peak_memory_source"] = self.memory.source
        if peak_memory_mb is not None and self.resident_before_mb is not None:
            self.summary.setdefault("resident_before_training_mb", self.resident_before_mb)
            self.summary["peak_above_start_mb"] = max(peak_memory_mb - self.resident_before_mb,
                                                      self.summary.get("peak_above_start_mb") or 0.0)

    def _judge(self, epoch_record: dict, stopper: Optional[EarlyStopping], on_best: Optional[Callable]):
        """Best epoch and early stopping after an epoch that counts; returns whether the stopper stops the run."""
        epoch, val = epoch_record["epoch"], epoch_record["val"]
        value = val.get(self.metric) if val else None
        lower = self.metric in metrics_lib.LOWER_IS_BETTER
        if metrics_lib.is_better(value, self._best_value(), stopper.min_delta if stopper else 0.0, lower):
            self.summary["best_epoch"] = epoch
            if on_best is not None:
                on_best(epoch)
        stops = stopper is not None and stopper.update(value, epoch, lower) and epoch < self.max_epochs
        if stopper is not None:
            self.summary["early_stopping"] = stopper.state()
        return stops

    def _best_value(self):
        best = self.summary.get("best_epoch")
        return self.epochs[best - 1]["val"].get(self.metric) if best else None

    def _report(self, epoch_record: dict) -> None:
        scalars = {key: epoch_record[key] for key in ("epoch_time_s", "train_time_s", "cpu_utilization", "loss")}
        for key, value in epoch_record.items():
            if key in ("epoch", *scalars, "epoch_cpu_s", "train_cpu_s", "others_cpu_load",
                       "speed_probe_cpu_ms") or value is None:
                continue
            if isinstance(value, dict):
                scalars.update(record.flatten_scores(key if key != "task_loss" else "loss", value))
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                scalars[key] = value
        if self.recorder is not None:
            self.recorder.scalars(epoch_record["epoch"], scalars)
        tags = "".join(f" ({k} {epoch_record[k]})" for k in ("phase",) if k in epoch_record)
        shown = {split: ", ".join(f"{k} {v:.4f}" for k, v in (epoch_record.get(split) or {}).items()
                                  if isinstance(v, (int, float)) and math.isfinite(v)) for split in ("val", "test")}
        logging.info("epoch %d%s: %.1f s (total %.1f s), loss %.4f%s%s", epoch_record["epoch"], tags,
                     epoch_record["epoch_time_s"], epoch_record["train_time_s"], epoch_record["loss"],
                     f", val {shown['val']}" if shown["val"] else "", f", test {shown['test']}" if shown["test"] else "")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.recorder is not None:
            self.recorder.close()
        return False

    def finish(self) -> dict:
        """Marks the run completed (use the engine as a context manager so TensorBoard's file is closed)."""
        summary = self.folder.finish()
        # At --verbosity=1 only: each command ends with its own line naming the best epoch's scores and the folder.
        logging.debug("done: best epoch %s, summary in %s", summary.get("best_epoch"), self.folder.summary_path)
        return summary

