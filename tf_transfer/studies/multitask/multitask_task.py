"""Multi-task minBERT (Li, CS224N): one BERT, three heads, layer-wise learning-rate decay, two training schedules.

One backbone is shared by three tasks (see `tf_transfer.data.cs224n`): sentiment (`sst`, accuracy), paraphrase
(`para`, accuracy) and similarity (`sts`, Pearson); `overall` (`multitask_steps`) picks the best epoch.

What can be compared (`MultitaskSettings`):
  * pooling per task: `cls` (BERT's pooler output: tanh(dense([CLS] vector)), as minBERT's `pooler_output` and the
    core trainer) or `mean` (mean of the last block's token vectors over the non-padded tokens);
  * pair head: `sbert` (each sentence encoded alone into u and v; [u, v, |u - v|] -> dropout -> linear) or `concat`
    (the pair packed as one sequence `[CLS] a [SEP] b [SEP]`, pooled, -> dropout -> linear);
  * layer-wise learning-rate decay xi: the i-th block from the top trains at lr * xi^(i-1) (the top block at lr), the
    embeddings at lr * xi^L, the pooler and the heads at lr (or `head_lr`);
  * schedule: `sequential` (per epoch one pass over each task in `task_order`) or `summed` (per step one batch of
    every task and the sum of the three losses; an epoch is one pass over the largest task, the smaller tasks are
    reshuffled and reused).

Optimizer: `training.optimizers.GroupedAdamW`, one AdamW per parameter group (the embeddings, each encoder block,
the pooler, each task head). The run is a task of the runner (`tf_transfer.training.runner`: timing, best epoch,
early stopping with `patience`, checkpoints, resume) with its own training loop (`multitask_steps`); each epoch
record adds `task_loss`, the mean loss of each task.

Outputs in `output_dir`: `summary.json` (the core trainer's schema; `task` is "multitask", `metric` "overall"),
`best.weights.h5` (the weights of the best epoch on `val`) and TensorBoard scalars plus HParams.

Example (the tiny test preset or a real one, and a CS224N data folder):

>>> from tf_transfer.studies.multitask import multitask_task
>>> from tf_transfer.studies.multitask.multitask_settings import MultitaskSettings
>>> settings = MultitaskSettings(data_dir="../shared/data/cs224n_minbert", preset="all_minilm_l6_v2_en",
...                              max_train_examples=64, max_epochs=1, batch_size=16)
>>> summary = multitask_task.run_multitask(settings, "/tmp/mt")  # doctest: +SKIP
>>> summary["epochs"][0]["test"]  # doctest: +SKIP
{'sst_accuracy': ..., 'paraphrase_accuracy': ..., 'sts_pearson': ..., 'overall': ...}
"""

from __future__ import annotations

import os
import time
from typing import Optional

import numpy as np
from absl import logging

from tf_transfer.core import machine
from tf_transfer.core.errors import TransferError
from tf_transfer.data import cs224n
from tf_transfer.data.examples import train_validation_split
from tf_transfer.studies import study_method
from tf_transfer.studies.multitask.multitask_settings import TASK_NAMES, MultitaskSettings
from tf_transfer.training import record, runner
from tf_transfer.training.task import Task

METRIC = "overall"  # `multitask_steps.overall_score`

BEST_WEIGHTS = "best.weights.h5"


def check_init_from(settings: MultitaskSettings) -> Optional[dict]:
    """Checks that `settings.init_from` is a run whose weights fit this model; returns its summary (or None)."""
    if not settings.init_from:
        return None
    weights = os.path.join(settings.init_from, BEST_WEIGHTS)
    if not os.path.isfile(weights):
        raise TransferError(f"--init_from={settings.init_from} has no {BEST_WEIGHTS}: point it at the --output_dir "
                            "of a multitask run that finished at least one epoch")
    previous = record.read_summary(settings.init_from) or {}
    config = previous.get("config", {})
    for key in ("preset", "pair_head", "data_format"):
        if key in config and config[key] != getattr(settings, key):
            raise TransferError(f"--init_from={settings.init_from} was trained with --{key}={config[key]}, this run "
                                f"has --{key}={getattr(settings, key)}: the weights only fit the same model")
    return previous


def load_initial_weights(model, run_dir: str) -> None:
    """Loads `run_dir/best.weights.h5` into `model` (same preset, pair head and number of sentiment classes)."""
    path = os.path.join(run_dir, BEST_WEIGHTS)
    try:
        model.load_weights(path)
    except (ValueError, KeyError, OSError) as e:
        raise TransferError(f"--init_from: {path} does not fit this model ({type(e).__name__}: "
                            f"{str(e).strip().splitlines()[0][:200]}); use the same --preset and --pair_head "
                            "and data with the same sentiment classes") from None


def save_weights_atomic(model, path: str) -> None:
    """Writes the weights beside `path`, then renames: a crash never leaves half a weights file."""
    tmp_path = os.path.join(os.path.dirname(path), ".tmp-" + os.path.basename(path))
    model.save_weights(tmp_path)
    os.replace(tmp_path, path)


def _split_validation(data, settings: MultitaskSettings):
    """`{task: (train, validation or None, dev)}`: train capped at --max_train_examples, after the split."""
    splits = {}
    for task, task_data in data.tasks.items():
        train, validation = task_data.train, None
        if settings.validation_fraction > 0:
            train, validation = train_validation_split(train, settings.validation_fraction, settings.split_seed)
        splits[task] = (cs224n.cap(train, settings.max_train_examples), validation, task_data.dev)
    return splits


class MultitaskTask(Task):
    """One multi-task run of `settings`."""

    summary_schema = "multitask"  # tf_transfer.training.run_record

    metric = METRIC
    added_settings = {"patience": 0}  # runs from before --patience never stopped early

    def build(self, strategy=None) -> None:
        """Reads and encodes the data, loads the backbone and builds the model and its optimizer under `strategy`
        (default: the settings' distribution's). Bad data fails before TensorFlow is imported."""
        settings = self.settings
        check_init_from(settings)
        self.data = cs224n.load(settings.data_dir, settings.data_format, settings.quora_dev_fraction,
                                settings.split_seed, settings.skip_bad_rows)
        raw = _split_validation(self.data, settings)

        import keras

        from tf_transfer.core import strategies
        from tf_transfer.data.multitask_feed import MultitaskFeed

        runtime = settings.runtime
        self.strategy = strategy if strategy is not None else strategies.make_strategy(runtime.distribution)
        # The policy is global in Keras and read when layers are built: set it (float32 included) before loading.
        # The heads are float32 under any policy, so logits, scores and losses are too.
        keras.mixed_precision.set_global_policy(runtime.precision)
        # Seeded before the backbone is built: its dropout layers draw their seed generators' seeds when made, so
        # seeding only afterwards left them to whatever ran before in the process (two runs in one process differed).
        keras.utils.set_random_seed(settings.inputs.seed)
        self.loaded = self._load_backbone()
        self.backbone = self.loaded.backbone
        keras.utils.set_random_seed(settings.inputs.seed)
        self.feed = MultitaskFeed(self._encode(raw), settings.inputs, settings.schedule, settings.task_order)
        self._build_model()

    def _load_backbone(self):
        from tf_transfer.models import loader

        with self.strategy.scope():
            return loader.load_model(self.settings.model, supported=("bert",), purpose="the multi-task study")

    def _encode(self, raw: dict) -> dict:
        from tf_transfer.data.multitask_feed import encode_split

        settings = self.settings

        def encode(task, examples):
            return encode_split(task, examples, self.loaded.tokenizer, settings.pair_head, settings.max_seq_length)

        return {"train": {task: encode(task, raw[task][0]) for task in TASK_NAMES},
                "dev": {task: encode(task, raw[task][2]) for task in TASK_NAMES},
                **({"validation": {task: encode(task, raw[task][1]) for task in TASK_NAMES}}
                   if settings.validation_fraction > 0 else {})}

    def _build_model(self) -> None:
        from tf_transfer.models.multitask_model import build_model
        from tf_transfer.training.optimizers import GroupedAdamW, parameter_groups

        settings = self.settings
        with self.strategy.scope():
            self.model = build_model(self.backbone, settings, self.data.num_sentiment_classes)
            if settings.init_from:
                load_initial_weights(self.model, settings.init_from)
                logging.info("initial weights from %s", os.path.join(settings.init_from, BEST_WEIGHTS))
            self.optimizer = GroupedAdamW(parameter_groups(self.model, settings.lr, settings.llrd, settings.head_lr),
                                          settings.optimizer)

    def describe(self) -> str:
        settings = self.settings
        return f"multitask, trainable_layers={settings.trainable_layers}{study_method.describe(settings)}"

    def parameter_table(self) -> list:
        table = super().parameter_table()
        print("learning rate per parameter group: " +
              ", ".join(f"{name} {lr:.3g}" for name, lr in self.optimizer.learning_rates().items()), flush=True)
        return table

    def fresh_summary(self, table: list) -> dict:
        settings, splits = self.settings, self.feed.splits
        examples = {}
        for task in TASK_NAMES:
            examples[f"{task}/train"] = len(splits["train"][task])
            if "validation" in splits:
                examples[f"{task}/validation"] = len(splits["validation"][task])
            examples[f"{task}/dev"] = len(splits["dev"][task])
        return {
            "task": "multitask",
            **record.model_facts(settings.model, self.loaded),
            **study_method.facts(settings, self.backbone),
            "lr": settings.lr,
            "batch_size": settings.batch_size,
            "seed": settings.seed,
            "precision": settings.precision,
            "machine": machine.describe(),
            "code": record.code_version(),
            "metric": METRIC,
            **record.parameter_facts(table),
            "learning_rates": self.optimizer.learning_rates(),
            "val_is_dev": "validation" not in splits,
            "examples": examples,
            "skipped_rows": self.data.skipped_rows,
            "data_notes": self.data.notes,
            "init_from": settings.init_from,
            **record.nothing_trained_yet(settings.to_dict(), settings.run_name()),
        }

    def hparams(self) -> dict:
        s = self.settings
        return {"task": "multitask", "preset": s.preset, "trainable_layers": str(s.trainable_layers), "lr": s.lr,
                "head_lr": s.head_lr or s.lr, "batch_size": s.batch_size, "seed": s.seed,
                "pooling_sst": s.pooling_sst, "pooling_para": s.pooling_para, "pooling_sts": s.pooling_sts,
                "pair_head": s.pair_head, "llrd": s.llrd, "schedule": s.schedule,
                "task_order": ",".join(s.task_order), "max_seq_length": s.max_seq_length,
                "init_from": bool(s.init_from), **study_method.hparams(s)}

    def trial_name(self) -> str:
        return f"multitask/{self.settings.run_name()}/seed{self.settings.seed}"

    def warm_up(self) -> float:
        """Traces every training step once on a real batch, then puts every variable back (weights, optimizer
        slots and step counts, dropout RNG state): compilation is timed apart from training and changes nothing."""
        from tf_transfer.studies.multitask.multitask_steps import make_predict, make_train_step
        from tf_transfer.training import engine as engine_lib

        settings = self.settings
        step_task_sets = ([(task,) for task in settings.task_order] if settings.schedule == "sequential"
                          else [settings.task_order])
        self.steps = {tuple(sorted(s)): make_train_step(self.model, self.optimizer, s, settings.pair_head,
                                                        self.strategy) for s in step_task_sets}
        self.predictors = {task: make_predict(self.model, task, settings.pair_head) for task in TASK_NAMES}
        saved = engine_lib.snapshot(list(self.model.variables) + self.optimizer.variables)
        start = time.perf_counter()
        for batch in self.feed.warmup_batches():
            self._step(batch)
        compile_time_s = time.perf_counter() - start
        engine_lib.restore(saved)
        logging.info("compiled the training step(s) in %.1f s", compile_time_s)
        return compile_time_s

    def _step(self, batch: dict):
        return self.steps[tuple(sorted(batch))](batch)

    def train_epoch(self, epoch: int, progress) -> dict:
        losses = {task: [] for task in TASK_NAMES}
        for number, batch in enumerate(self.feed.train_batches(epoch), start=1):
            total, step_losses = self._step(batch)
            for task, value in step_losses.items():
                losses[task].append(value)
            progress.step(number, loss=total)
        task_losses = {task: float(np.mean([float(v) for v in values])) for task, values in losses.items() if values}
        return {"loss": float(sum(task_losses.values())), "task_loss": task_losses}

    def evaluate(self):
        from tf_transfer.studies.multitask.multitask_steps import scores

        def score(split):
            return scores(self.feed.predict(self.predictors, split), self.feed.labels(split))

        test = score("dev")
        return (score("validation") if "validation" in self.feed.splits else dict(test)), test

    def on_best(self, epoch: int) -> None:
        if self.folder.chief:
            save_weights_atomic(self.model, os.path.join(self.folder.path, BEST_WEIGHTS))


def run_multitask(settings: MultitaskSettings, output_dir: str, overwrite: bool = False, strategy=None) -> dict:
    """Trains and scores one multi-task run in `output_dir` (`runner.run`); returns the final summary."""
    return runner.run(MultitaskTask(settings), output_dir, strategy, overwrite)
