"""One head's stack-and-finetune run as a task of the runner: the model, the phase switch, the phases as stages.

Each phase is one stage (`Engine.fit`) on the run's folder, up to the phase's last epoch, with its own stopper
(early stopping only in the last phase) and the gap rule as the hook after each epoch (`PhaseEpochs.after_epoch`).
A run resumed after a kill continues in the phase its last epoch belongs to.

Example:

>>> from tf_transfer.studies.stack import stack_task
>>> summary, probabilities = stack_task.train_head(settings, "bimpm", data, encoded, loaded, "/tmp/stack",
...                                                strategy)  # doctest: +SKIP
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
from tf_transfer.core.setting_groups import OptimizerSettings
from tf_transfer.data import stack_data
from tf_transfer.models import freezing, methods
from tf_transfer.studies.stack import stack_inputs
from tf_transfer.studies import study_method
from tf_transfer.studies.stack.stack_settings import PAIR_HEADS, StackSettings, plan_phases
from tf_transfer.training import record, runner
from tf_transfer.training.task import Stage, Task

FROZEN = "none"  # `trainable_layers` of phase 1: no part of the backbone trains, not even the pooler
PROBABILITIES_FILE = "probabilities.npz"  # an ensemble member's final probabilities, for resuming the ensemble


def make_loss(tagging: bool):
    import keras

    # Word pieces after a word's first one (and [CLS], [SEP], padding) carry IGNORED_LABEL and no loss.
    return keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, ignore_class=stack_data.IGNORED_LABEL if tagging else None)


def set_phase(model, backbone, phase: int, optimizer: OptimizerSettings, loss, method_trains=None,
              method_in_phase1: bool = False):
    """Freezes (phase 1) or unfreezes (phase 2) the backbone and compiles `model` with a fresh AdamW of the phase's
    `optimizer` settings (`Phase.optimizer`: its rate); returns it.
    `method_trains` (`freezing.trainability` of the backbone after the method was applied) is what phase 2 trains
    of it (None: everything), and phase 1 too with `method_in_phase1`.

    Keras reads `trainable` at compile time, and an optimizer built for phase 1's variables cannot update new
    ones; a fresh optimizer also starts phase 2 without phase 1's moment estimates, which were for a 50x higher rate.
    """
    from tf_transfer.training import optimizers

    if phase == 1 and not method_in_phase1:
        backbone.trainable = False
    elif method_trains is None:
        freezing.set_trainable_layers(backbone, freezing.ALL)
    else:
        freezing.set_trainability(method_trains)
    built = optimizers.build_optimizer(optimizer)
    model.compile(optimizer=built, loss=loss)
    return built


def build(config: StackSettings, backbone, head_name: str, num_labels: int, tagging: bool):
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

    def __init__(self, config: StackSettings, model, head, feed, encoded: dict, label_names: tuple, summary: dict):
        from tf_transfer.training.engine import keras_epoch

        self.config, self.model, self.head, self.feed = config, model, head, feed
        self.encoded, self.label_names, self.summary = encoded, label_names, summary
        self.fit_epoch = keras_epoch(model, feed.train_batches, feed.steps_per_epoch, len(encoded["train"]))
        self.scored = [name for name in ("validation", "test") if name in encoded]
        self.phase = self.phase_record = self.before = None
        self.latest, self.kept = {}, {}

    def train_epoch(self, epoch: int, progress) -> dict:
        from tf_transfer.training.engine import snapshot

        # The gap rule never undoes a phase's first epoch (see `tf_transfer.studies.stack.stack_ensemble`): nothing to
        # keep then.
        undoable = self.phase.gap_rule and epoch > self.phase_record["first_epoch"]
        self.before = snapshot(self.head.weights) if undoable else None
        return self.fit_epoch(epoch, progress)

    def _score(self, name: str, probabilities) -> dict:
        return stack_inputs.score(self.encoded[name], probabilities, self.label_names)

    def evaluate(self):
        self.latest = {name: self.feed.predict(self.model, name) for name in self.scored}
        scores = {name: self._score(name, probabilities) for name, probabilities in self.latest.items()}
        return scores["validation"], scores.get("test")

    def after_epoch(self, epoch_record: dict) -> bool:
        """Phase 1 scores the training sample (`train`, `gap`); the gap rule ends the phase (True) and undoes the
        epoch (`rolled_back`, head weights restored) unless it is the phase's first."""
        from tf_transfer.training.engine import restore

        epoch, phase, phase_record = epoch_record["epoch"], self.phase, self.phase_record
        phase_record["last_epoch"] = epoch
        if phase.number == 1:
            sample = self._score("train_sample", self.feed.predict(self.model, "train_sample"))
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


class StackHeadTask(Task):
    """One head's run under `settings.stack_strategy`; `data`, `encoded` and `loaded` (built in the strategy's scope)
    are the ensemble's, shared by its heads. `keep_probabilities` (ensemble members) writes the final probabilities
    to `PROBABILITIES_FILE`, so that a resumed ensemble need not train a finished member again."""

    summary_schema = "stack"  # tf_transfer.training.run_record

    def __init__(self, settings: StackSettings, head_name: str, data, encoded: dict, loaded,
                 keep_probabilities: bool = False):
        super().__init__(settings)
        self.head_name, self.data, self.encoded, self.loaded = head_name, data, encoded, loaded
        self.keep_probabilities = keep_probabilities
        self.metric = settings.metric
        self.tagging = settings.task == "conll_ner"
        self.final_probabilities = None

    def build(self, strategy) -> None:
        from tf_transfer.data.stack_feed import StackFeed
        from tf_transfer.training import distributed

        settings, self.strategy, self.backbone = self.settings, strategy, self.loaded.backbone
        with strategy.scope():
            # The method acts on every block; its weights (LoRA's) are made here, at the same point of every run
            # and resume, and each phase sets what trains from what it chose.
            study_method.apply(self.backbone, settings, freezing.ALL)
            self.method_trains = freezing.trainability(self.backbone)
            self.model, self.head = build(settings, self.backbone, self.head_name, len(self.data.label_names),
                                          self.tagging)
        self.feed = StackFeed(self.encoded, settings.inputs)
        # Several replicas: summed, with the feed's weights (StackFeed.loss_units), so that each step is one device's.
        self.loss = distributed.loss_under(strategy, make_loss(self.tagging))
        # Several replicas or workers: every batch is split into one share per replica here, once (as in GLUE).
        self.feed.use_strategy(strategy)
        stale = os.path.join(self.folder.path, PROBABILITIES_FILE)
        if not self.folder.resuming and os.path.exists(stale):
            os.remove(stale)

    def parameter_table(self) -> None:
        return None  # each phase trains other parameters: its stage records them

    def fresh_summary(self, table) -> dict:
        settings, data, encoded = self.settings, self.data, self.encoded
        return {
            "task": settings.task,
            "head": self.head_name,
            "strategy": settings.stack_strategy,
            **study_method.facts(settings, self.backbone),
            "method_in_phase1": settings.method_in_phase1,
            "preset": settings.preset,
            "preset_source": self.loaded.source,
            "num_layers": int(self.backbone.num_layers),
            "trainable_layers": None,
            "lr": None,
            "batch_size": settings.batch_size,
            "seed": settings.seed,
            "precision": settings.precision,
            "metric": settings.metric,
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
            "dataset": {"files": stack_inputs.data_files(settings)},
            **({"truncated_words": {n: s.truncated_words for n, s in encoded.items() if n != "train_sample"}}
               if self.tagging else {}),
            "machine": machine.describe(),
            "code": record.code_version(),
            "config": settings.to_dict(),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }

    def hparams(self) -> dict:
        s = self.settings
        return {"task": s.task, "head": self.head_name, "strategy": s.stack_strategy, "preset": s.preset,
                "phase1_lr": s.phase1_lr, "phase2_lr": s.phase2_lr, "phase1_epochs": s.phase1_epochs,
                "max_gap": s.max_gap, "max_epochs": s.max_epochs, "batch_size": s.batch_size, "seed": s.seed,
                "max_seq_length": s.max_seq_length, "precision": s.precision, **study_method.hparams(s),
                "method_in_phase1": s.method_in_phase1}

    def trial_name(self) -> str:
        s = self.settings
        return f"{s.task}/{s.run_prefix}{self.head_name}_{s.stack_strategy}/seed{s.seed}"

    def stages(self, engine):
        """One stage per phase still to train. A run resumed after a kill continues in the phase of its last epoch;
        a phase that had ended before it is skipped (a later epoch's checkpoint holds its weights)."""
        summary = engine.summary
        resumed_phase = summary["epochs"][-1]["phase"] if self.folder.resuming else None
        self.epochs = PhaseEpochs(self.settings, self.model, self.head, self.feed, self.encoded,
                                  self.data.label_names, summary)
        phases = plan_phases(self.settings)
        with _pooler_may_be_unused():
            for phase in phases:
                phase_record = next((p for p in summary["phases"] if p["phase"] == phase.number), None)
                resumes_here = resumed_phase == phase.number
                if phase_record is not None and phase_record["ended_by"] and not resumes_here:
                    continue  # ended before the interruption; the checkpoint of a later epoch holds its weights
                self._switch_to(phase)
                if phase_record is not None and phase_record["ended_by"]:
                    # The interruption fell between this phase's last epoch and the next phase's first: its weights,
                    # then on to the next phase as without the interruption.
                    with self.strategy.scope():
                        self.model.optimizer.build(self.model.trainable_variables)
                    engine.restore_last(self.model, phase=phase.number, compile_time_s=0.0)
                    continue
                stage = self._stage(engine, phase, phase_record, resumes_here, last=phase is phases[-1])
                yield stage
                if stage.ended_by == "patience":
                    self.epochs.phase_record["ended_by"] = "patience"
                    break

    def _switch_to(self, phase) -> None:
        from tf_transfer.training import distributed

        with self.strategy.scope():
            set_phase(self.model, self.backbone, phase.number, phase.optimizer, self.loss, self.method_trains,
                      self.settings.method_in_phase1)
        distributed.keras_distributed(self.model, self.strategy)

    def _stage(self, engine, phase, phase_record, resumes_here: bool, last: bool) -> Stage:
        """Warms the phase's training step up, records the phase (or continues its record) and resumes in it."""
        from tf_transfer.training.engine import EarlyStopping, warm_up

        summary, settings = engine.summary, self.settings
        table = freezing.parameter_table(self.model, self.backbone)
        compile_time_s = warm_up(self.model, self.feed.warmup_batches(), self.strategy)
        frozen = phase.number == 1 and not settings.method_in_phase1
        if phase_record is None:
            phase_record = {"phase": phase.number, "lr": phase.lr,
                            "trainable_layers": FROZEN if frozen else freezing.ALL,
                            "method": None if frozen else settings.method,
                            "trainable_params": table[-1][1], "first_epoch": engine.next_epoch,
                            "last_epoch": None, "compile_time_s": compile_time_s, "ended_by": None}
            summary["phases"].append(phase_record)
            summary["compile_time_s"] += compile_time_s
        summary.update(trainable_layers=phase_record["trainable_layers"], lr=phase.lr,
                       trainable_params=table[-1][1], total_params=table[-1][2])
        trains = ("head on frozen backbone" if frozen else "everything" if settings.method == methods.DEFAULT
                  else f"--method={settings.method}{study_method.describe(settings)}, and the head")
        logging.info("phase %d (%s): lr %g, %s of %s parameters trainable, compiled in %.1f s", phase.number, trains,
                     phase.lr, f"{table[-1][1]:,}", f"{table[-1][2]:,}", compile_time_s)
        # Only this phase's own epochs wrote the stopper's state that a resume within it continues.
        held = summary.get("early_stopping") if resumes_here else None
        stopper = EarlyStopping(**held) if held else EarlyStopping(self.settings.patience if last else 0)
        if resumes_here:
            # Compiling again after a resume is not training time: it goes with the resume, not the phase.
            engine.restore_last(self.model, phase=phase.number, compile_time_s=compile_time_s)
        self.epochs.phase, self.epochs.phase_record = phase, phase_record
        return Stage(self.epochs.train_epoch, self.epochs.evaluate, until_epoch=phase.last_epoch, stopper=stopper,
                     tags={"phase": phase.number}, after_epoch=self.epochs.after_epoch,
                     steps=self.feed.steps_per_epoch, examples=len(self.encoded["train"]))

    def finish(self, engine) -> None:
        self.final_probabilities = self.epochs.kept
        if self.keep_probabilities:
            if not self.final_probabilities:  # resumed with no epoch left to train: the restored model's are the same
                self.final_probabilities = {name: self.feed.predict(self.model, name) for name in self.epochs.scored}
            if self.folder.chief:
                save_probabilities(self.folder.path, self.final_probabilities)


def train_head(settings: StackSettings, head_name: str, data, encoded: dict, loaded, output_dir: str, strategy,
               overwrite: bool = False, keep_probabilities: bool = False):
    """Runs `settings.stack_strategy` with one head under `strategy` (`loaded` was built in its scope); returns
    `(summary, {split: final probabilities})`.

    An unfinished run in `output_dir` (unless `overwrite`) is resumed after its last epoch, in the phase that epoch
    belongs to: a phase that had ended is followed by the next one with a fresh optimizer, as without the
    interruption.
    """
    import keras

    from tf_transfer.training.run_folder import RunFolder

    task = StackHeadTask(settings, head_name, data, encoded, loaded, keep_probabilities)
    # Under a multi-worker strategy only the chief writes `output_dir`; the others a temporary folder.
    folder = RunFolder(output_dir, settings.to_dict(), settings.NOT_RESULT_SETTINGS, overwrite, strategy=strategy,
                       data=stack_inputs.data_hashes(settings))
    try:
        summary = runner.train(task, folder, strategy)
    finally:
        folder.cleanup()
    keras.backend.clear_session()  # the next ensemble member starts from the pretrained weights in fresh memory
    return summary, task.final_probabilities
