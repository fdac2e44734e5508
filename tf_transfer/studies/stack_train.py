"""One head's stack-and-finetune run: the model, the phase switch, and the phases trained through the `Engine`.

Each phase is one `Engine.fit` on the run's folder, up to the phase's last epoch, with its own stopper (early
stopping only in the last phase) and the gap rule as the hook after each epoch (`PhaseEpochs.after_epoch`).

Example:

>>> from tf_transfer.studies import stack_train
>>> summary, probabilities = stack_train.train_head(config, "bimpm", data, encoded, loaded, "/tmp/stack",
...                                                 strategy)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from typing import Optional

import numpy as np
from absl import logging

from tf_transfer.core import machine
from tf_transfer.data import stack_data
from tf_transfer.studies import stack_feed
from tf_transfer.studies.stack_config import NOT_RESULT_SETTINGS, PAIR_HEADS, StackConfig, plan_phases
from tf_transfer.training import record

FROZEN = "none"  # `trainable_layers` of phase 1: no part of the backbone trains, not even the pooler
PROBABILITIES_FILE = "probabilities.npz"  # an ensemble member's final probabilities, for resuming the ensemble


def make_loss(tagging: bool):
    import keras

    # Word pieces after a word's first one (and [CLS], [SEP], padding) carry IGNORED_LABEL and no loss.
    return keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, ignore_class=stack_data.IGNORED_LABEL if tagging else None)


def set_phase(model, backbone, phase: int, lr: float, loss, weight_decay: float = 0.01, clip_norm: float = 1.0):
    """Freezes (phase 1) or unfreezes (phase 2) the backbone and compiles `model` with a fresh AdamW; returns it.

    Keras reads `trainable` at compile time, and an optimizer built for phase 1's variables cannot update new
    ones; a fresh optimizer also starts phase 2 without phase 1's moment estimates, which were for a 50x higher rate.
    """
    from tf_transfer.models import freezing
    from tf_transfer.training import optimizers

    if phase == 1:
        backbone.trainable = False
    else:
        freezing.set_trainable_layers(backbone, freezing.ALL)
    optimizer = optimizers.build_optimizer(lr, "constant", weight_decay=weight_decay, clip_norm=clip_norm)
    model.compile(optimizer=optimizer, loss=loss)
    return optimizer


def build(config: StackConfig, backbone, head_name: str, num_labels: int, tagging: bool):
    from tf_transfer.models import stack_heads

    head = stack_heads.make_head(head_name, num_labels, tagging=tagging, units=config.head_units,
                                 dropout=config.dropout, perspectives=config.perspectives)
    return stack_heads.build_model(backbone, head, pair=head_name in PAIR_HEADS), head


@contextlib.contextmanager
def _pooler_may_be_unused():
    """Heads that read token outputs leave BERT's pooler without gradients in phase 2; Keras warns about that on
    every trace although nothing is wrong (the optimizer skips those variables)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Gradients do not exist for variables \['pooled_dense")
        yield


def _summary_skeleton(config, head_name, loaded, backbone, data, encoded) -> dict:
    tagging = config.task == "conll_ner"
    return {
        "task": config.task,
        "head": head_name,
        "strategy": config.strategy,
        "preset": config.preset,
        "preset_source": loaded.source,
        "num_layers": int(backbone.num_layers),
        "trainable_layers": None,
        "lr": None,
        "batch_size": config.batch_size,
        "seed": config.seed,
        "precision": config.precision,
        "metric": config.metric,
        "trainable_params": None,
        "total_params": None,
        "compile_time_s": 0.0,
        "epochs": [],
        "best_epoch": None,
        "stopped_early": False,
        "completed": False,
        "phases": [],
        "phase1_ended_by_gap": False,
        "labels": list(data.label_names),
        "examples": {name: len(split) for name, split in encoded.items() if name != "train_sample"},
        "train_sample_size": len(encoded["train_sample"]),
        "skipped_rows": data.skipped,
        **({"truncated_words": {n: s.truncated_words for n, s in encoded.items() if n != "train_sample"}}
           if tagging else {}),
        "machine": machine.describe(),
        "code": record.code_version(),
        "config": config.to_dict(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def save_probabilities(output_dir: str, probabilities: dict) -> None:
    """Writes `{split: probabilities}` (arrays, or per-example arrays when tagging) atomically."""
    from tf_transfer.training import checkpoints

    arrays = {}
    for name, value in probabilities.items():
        if isinstance(value, np.ndarray):
            arrays[name] = value
        else:
            arrays[name] = np.concatenate(value)
            arrays[f"{name}.lengths"] = np.asarray([len(v) for v in value])
    checkpoints.write_npz_atomic(os.path.join(output_dir, PROBABILITIES_FILE), arrays)


def load_probabilities(output_dir: str) -> Optional[dict]:
    path = os.path.join(output_dir, PROBABILITIES_FILE)
    if not os.path.exists(path):
        return None
    probabilities = {}
    with np.load(path) as saved:
        for name in [k for k in saved.files if not k.endswith(".lengths")]:
            if f"{name}.lengths" in saved.files:
                probabilities[name] = np.split(saved[name], np.cumsum(saved[f"{name}.lengths"])[:-1])
            else:
                probabilities[name] = saved[name]
    return probabilities


class PhaseEpochs:
    """What `Engine.fit` calls in the current `phase` (with its summary entry `phase_record`): train an epoch,
    score it, apply the gap rule. `kept` holds the probabilities of the last epoch that was not undone."""

    def __init__(self, config: StackConfig, model, head, feed, encoded: dict, label_names: tuple, summary: dict):
        from tf_transfer.training.engine import keras_epoch

        self.config, self.model, self.head, self.feed = config, model, head, feed
        self.encoded, self.label_names, self.summary = encoded, label_names, summary
        self.fit_epoch = keras_epoch(model, feed.train_dataset, feed.steps_per_epoch, len(encoded["train"]))
        self.scored = [name for name in ("validation", "test") if name in encoded]
        self.phase = self.phase_record = self.before = None
        self.latest, self.kept = {}, {}

    def train_epoch(self, epoch: int, progress) -> dict:
        from tf_transfer.training.engine import snapshot

        # The gap rule never undoes a phase's first epoch (see `tf_transfer.studies.stack`): nothing to keep then.
        undoable = self.phase.gap_rule and epoch > self.phase_record["first_epoch"]
        self.before = snapshot(self.head.weights) if undoable else None
        return self.fit_epoch(epoch, progress)

    def _score(self, name: str, probabilities) -> dict:
        return stack_feed.score(self.encoded[name], probabilities, self.label_names)

    def evaluate(self):
        self.latest = {name: self.feed.probabilities(self.model, name) for name in self.scored}
        scores = {name: self._score(name, probabilities) for name, probabilities in self.latest.items()}
        return scores["validation"], scores.get("test")

    def after_epoch(self, epoch_record: dict) -> bool:
        """Phase 1 scores the training sample (`train`, `gap`); the gap rule ends the phase (True) and undoes the
        epoch (`rolled_back`, head weights restored) unless it is the phase's first."""
        from tf_transfer.training.engine import restore

        epoch, phase, phase_record = epoch_record["epoch"], self.phase, self.phase_record
        phase_record["last_epoch"] = epoch
        if phase.number == 1:
            sample = self._score("train_sample", self.feed.probabilities(self.model, "train_sample"))
            epoch_record["train"] = sample
            epoch_record["gap"] = sample["accuracy"] - epoch_record["val"]["accuracy"]
        gap_exceeded = phase.gap_rule and epoch_record["gap"] > self.config.max_gap
        if gap_exceeded:
            phase_record["ended_by"] = "max_gap"
            self.summary["phase1_ended_by_gap"] = True
        if gap_exceeded and self.before is not None:
            restore(self.before)
            epoch_record["rolled_back"] = True
        else:
            self.kept = self.latest
        if not phase_record["ended_by"] and epoch >= phase.last_epoch:
            phase_record["ended_by"] = "phase1_epochs" if phase.gap_rule else "max_epochs"
        if "gap" in epoch_record:
            logging.info("epoch %d: train sample %s, gap %+.4f%s", epoch, _format(epoch_record["train"]),
                         epoch_record["gap"], (" > --max_gap: head restored, phase 1 ends" if self.before is not None
                                               else " > --max_gap on the phase's first epoch: kept, phase 1 ends")
                         if gap_exceeded else "")
        return gap_exceeded


def _format(scores: dict) -> str:
    return ", ".join(f"{k} {v:.4f}" for k, v in scores.items() if v is not None)


def train_head(config: StackConfig, head_name: str, data, encoded: dict, loaded, output_dir: str, strategy,
               overwrite: bool = False, keep_probabilities: bool = False):
    """Runs the strategy with one head under `strategy` (`loaded` was built in its scope); returns `(summary,
    {split: final probabilities})`.

    An unfinished run in `output_dir` (unless `overwrite`) is resumed after its last epoch, in the phase that epoch
    belongs to: a phase that had ended is followed by the next one with a fresh optimizer, as without the
    interruption. `keep_probabilities` (ensemble members) writes the final probabilities to `PROBABILITIES_FILE`,
    so that a resumed ensemble need not train a finished member again.
    """
    from tf_transfer.training import distributed
    from tf_transfer.training.run_folder import RunFolder

    tagging = config.task == "conll_ner"
    backbone = loaded.backbone
    with strategy.scope():
        model, head = build(config, backbone, head_name, len(data.label_names), tagging)
    feed = stack_feed.StackFeed(encoded, config.batch_size, config.seed, config.bucket_step, config.eval_batch_size)
    # Several replicas: summed, with the feed's weights (StackFeed.loss_units), so that each step is one device's.
    loss = distributed.loss_under(strategy, make_loss(tagging))

    # Several replicas or workers: every batch is split into one share per replica here, once (as in GLUE).
    feed.use_strategy(strategy)
    # Under a multi-worker strategy only the chief writes `output_dir`; the others a temporary folder.
    folder = RunFolder(output_dir, config.to_dict(), NOT_RESULT_SETTINGS, overwrite, strategy=strategy)
    try:
        return _train_in_folder(config, head_name, data, encoded, loaded, folder, strategy, model, head, feed,
                                loss, keep_probabilities)
    finally:
        folder.cleanup()


def _train_in_folder(config: StackConfig, head_name: str, data, encoded: dict, loaded, folder, strategy, model,
                     head, feed, loss, keep_probabilities: bool):
    """`train_head` once its run folder is known: writes in `folder.path` (`output_dir`, or a non-chief worker's
    temporary folder)."""
    import keras

    from tf_transfer.models import freezing
    from tf_transfer.training import distributed
    from tf_transfer.training.engine import EarlyStopping, Engine, warm_up

    output_dir, backbone = folder.path, loaded.backbone
    if not folder.resuming and os.path.exists(os.path.join(output_dir, PROBABILITIES_FILE)):
        os.remove(os.path.join(output_dir, PROBABILITIES_FILE))
    summary = folder.start(_summary_skeleton(config, head_name, loaded, backbone, data, encoded))
    resumed_phase = summary["epochs"][-1]["phase"] if folder.resuming else None
    hparams = {"task": config.task, "head": head_name, "strategy": config.strategy, "preset": config.preset,
               "phase1_lr": config.phase1_lr, "phase2_lr": config.phase2_lr, "phase1_epochs": config.phase1_epochs,
               "max_gap": config.max_gap, "max_epochs": config.max_epochs, "batch_size": config.batch_size,
               "seed": config.seed, "max_seq_length": config.max_seq_length, "precision": config.precision}
    recorder = record.TensorBoardRecorder(output_dir, hparams,
                                          f"{config.task}/{head_name}_{config.strategy}/seed{config.seed}")
    engine = Engine(folder, config.metric, config.max_epochs, recorder=recorder, strategy=strategy)
    epochs = PhaseEpochs(config, model, head, feed, encoded, data.label_names, summary)
    phases = plan_phases(config)
    with engine, _pooler_may_be_unused():
        for phase in phases:
            phase_record = next((p for p in summary["phases"] if p["phase"] == phase.number), None)
            resumes_here = resumed_phase == phase.number
            if phase_record is not None and phase_record["ended_by"] and not resumes_here:
                continue  # ended before the interruption; the checkpoint of a later epoch holds its weights
            with strategy.scope():
                set_phase(model, backbone, phase.number, phase.lr, loss, config.weight_decay, config.clip_norm)
            distributed.keras_distributed(model, strategy)
            if phase_record is not None and phase_record["ended_by"]:
                # The interruption fell between this phase's last epoch and the next phase's first: its weights,
                # then on to the next phase as without the interruption.
                with strategy.scope():
                    model.optimizer.build(model.trainable_variables)
                engine.restore_last(model, phase=phase.number, compile_time_s=0.0)
                continue
            table = freezing.parameter_table(model, backbone)
            compile_time_s = warm_up(model, feed.warmup_dataset(), strategy)
            if phase_record is None:
                phase_record = {"phase": phase.number, "lr": phase.lr,
                                "trainable_layers": FROZEN if phase.number == 1 else freezing.ALL,
                                "trainable_params": table[-1][1], "first_epoch": engine.next_epoch,
                                "last_epoch": None, "compile_time_s": compile_time_s, "ended_by": None}
                summary["phases"].append(phase_record)
                summary["compile_time_s"] += compile_time_s
            summary.update(trainable_layers=phase_record["trainable_layers"], lr=phase.lr,
                           trainable_params=table[-1][1], total_params=table[-1][2])
            logging.info("phase %d (%s): lr %g, %s of %s parameters trainable, compiled in %.1f s", phase.number,
                         "head on frozen backbone" if phase.number == 1 else "everything", phase.lr,
                         f"{table[-1][1]:,}", f"{table[-1][2]:,}", compile_time_s)
            # Only this phase's own epochs wrote the stopper's state that a resume within it continues.
            held = summary.get("early_stopping") if resumes_here else None
            stopper = EarlyStopping(**held) if held else EarlyStopping(
                config.patience if phase is phases[-1] else 0)
            if resumes_here:
                # Compiling again after a resume is not training time: it goes with the resume, not the phase.
                engine.restore_last(model, phase=phase.number, compile_time_s=compile_time_s)
            epochs.phase, epochs.phase_record = phase, phase_record
            ended_by = engine.fit(model, epochs.train_epoch, epochs.evaluate, until_epoch=phase.last_epoch,
                                  stopper=stopper, tags={"phase": phase.number}, after_epoch=epochs.after_epoch,
                                  steps=feed.steps_per_epoch, examples=len(encoded["train"]))
            if ended_by == "patience":
                phase_record["ended_by"] = "patience"
                break
        final_probabilities = epochs.kept
        if keep_probabilities:
            if not final_probabilities:  # resumed with no epoch left to train: the restored model's are the same
                final_probabilities = {name: feed.probabilities(model, name) for name in epochs.scored}
            if folder.chief:
                save_probabilities(output_dir, final_probabilities)
        summary = engine.finish()
    keras.backend.clear_session()  # the next ensemble member starts from the pretrained weights in fresh memory
    return summary, final_probabilities
