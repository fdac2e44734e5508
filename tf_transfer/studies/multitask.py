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
the pooler, each task head). Epochs run through `training.engine.Engine` (timing, best epoch, early stopping with
`patience`, checkpoints, resume); each epoch record adds `task_loss`, the mean loss of each task.

Outputs in `output_dir`: `summary.json` (the core trainer's schema; `task` is "multitask", `metric` "overall"),
`best.weights.h5` (the weights of the best epoch on `val`) and TensorBoard scalars plus HParams.

Example (the tiny test preset or a real one, and a CS224N data folder):

>>> from tf_transfer.studies import multitask
>>> from tf_transfer.studies.multitask_settings import MultitaskSettings
>>> settings = MultitaskSettings(data_dir="../shared/data/cs224n_minbert", preset="all_minilm_l6_v2_en",
...                              max_train_examples=64, max_epochs=1, batch_size=16)
>>> summary = multitask.run_multitask(settings, "/tmp/mt")  # doctest: +SKIP
>>> summary["epochs"][0]["test"]  # doctest: +SKIP
{'sst_accuracy': ..., 'paraphrase_accuracy': ..., 'sts_pearson': ..., 'overall': ...}
"""

from __future__ import annotations

import os
import time
import types
from typing import Optional

import numpy as np
from absl import logging

from tf_transfer.core import machine
from tf_transfer.core.errors import TransferError
from tf_transfer.data import cs224n
from tf_transfer.data.examples import train_validation_split
from tf_transfer.data.multitask_inputs import encode_split, epoch_batches
from tf_transfer.studies.multitask_settings import NOT_COMPARED, TASK_NAMES, MultitaskSettings
from tf_transfer.studies.multitask_steps import METRIC
from tf_transfer.training import record

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


def prepare(settings: MultitaskSettings, strategy=None) -> types.SimpleNamespace:
    """Reads and encodes the data, loads the backbone and builds the model and its optimizer under `strategy`
    (default: `settings.distribution`'s). Bad data fails before TensorFlow is imported."""
    check_init_from(settings)
    data = cs224n.load(settings.data_dir, settings.data_format, settings.quora_dev_fraction, settings.split_seed,
                       settings.skip_bad_rows)
    raw = _split_validation(data, settings)

    import keras

    from tf_transfer.core import strategies
    from tf_transfer.models import backbones
    from tf_transfer.models import freezing
    from tf_transfer.models.multitask import build_model
    from tf_transfer.training.optimizers import GroupedAdamW, parameter_groups

    strategy = strategy if strategy is not None else strategies.make_strategy(settings.distribution)
    # The policy is global in Keras and read when layers are built: set it (float32 included) before loading.
    # The heads are float32 under any policy, so logits, scores and losses are too.
    keras.mixed_precision.set_global_policy(settings.precision)
    # Seeded before the backbone is built: its dropout layers draw their seed generators' seeds when made, so
    # seeding only afterwards left them to whatever ran before in the process (two runs in one process differed).
    keras.utils.set_random_seed(settings.seed)
    with strategy.scope():
        loaded = backbones.load_preset(settings.preset, dropout=settings.dropout, supported=("bert",),
                                        purpose="the multi-task study")
    freezing.check_trainable_layers(settings.trainable_layers, loaded.backbone.num_layers)
    logging.info("preset %s: weights from %s", settings.preset, loaded.source)
    keras.utils.set_random_seed(settings.seed)

    def encode(task, examples):
        return encode_split(task, examples, loaded.tokenizer, settings.pair_head, settings.max_seq_length)

    splits = {"train": {task: encode(task, raw[task][0]) for task in TASK_NAMES},
              "dev": {task: encode(task, raw[task][2]) for task in TASK_NAMES},
              "validation": ({task: encode(task, raw[task][1]) for task in TASK_NAMES}
                             if settings.validation_fraction > 0 else None)}
    with strategy.scope():
        model = build_model(loaded.backbone, settings, data.num_sentiment_classes)
        if settings.init_from:
            load_initial_weights(model, settings.init_from)
            logging.info("initial weights from %s", os.path.join(settings.init_from, BEST_WEIGHTS))
        optimizer = GroupedAdamW(parameter_groups(model, settings.lr, settings.llrd, settings.head_lr),
                                 settings.weight_decay, settings.clip_norm)
    return types.SimpleNamespace(data=data, loaded=loaded, splits=splits, model=model, optimizer=optimizer,
                                 strategy=strategy)


def _fresh_summary(settings: MultitaskSettings, prepared, table: list) -> dict:
    splits = prepared.splits
    examples = {}
    for task in TASK_NAMES:
        examples[f"{task}/train"] = len(splits["train"][task])
        if splits["validation"]:
            examples[f"{task}/validation"] = len(splits["validation"][task])
        examples[f"{task}/dev"] = len(splits["dev"][task])
    return {
        "task": "multitask",
        "preset": settings.preset,
        "preset_source": prepared.loaded.source,
        "num_layers": int(prepared.loaded.backbone.num_layers),
        "trainable_layers": settings.trainable_layers,
        "lr": settings.lr,
        "batch_size": settings.batch_size,
        "seed": settings.seed,
        "precision": settings.precision,
        "machine": machine.describe(),
        "code": record.code_version(),
        "metric": METRIC,
        "trainable_params": table[-1][1],
        "total_params": table[-1][2],
        "parameter_table": [{"part": p, "trainable": t, "total": n} for p, t, n in table],
        "learning_rates": prepared.optimizer.learning_rates(),
        "val_is_dev": splits["validation"] is None,
        "examples": examples,
        "skipped_rows": prepared.data.skipped_rows,
        "data_notes": prepared.data.notes,
        "init_from": settings.init_from,
        "compile_time_s": None,
        "epochs": [],
        "best_epoch": None,
        "stopped_early": False,
        "completed": False,
        "config": settings.to_dict(),
        "run_name": settings.run_name(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def run_multitask(settings: MultitaskSettings, output_dir: str, overwrite: bool = False, strategy=None) -> dict:
    """Trains and scores one multi-task run; returns the final summary (also in `output_dir/summary.json`).
    `strategy` (default: `settings.distribution`'s) is where the model lives and the training steps run.

    Raises `TransferError` for bad input before training starts, or (non-finite loss) after the completed
    epochs' summary has been written with `completed: false`.

    Under `--distribution=multi_worker` the workers join first, so that the chief can tell the others what
    `output_dir` holds; only the chief writes there, the others a temporary folder they remove (docs/distributed.md).
    """
    from tf_transfer.core import strategies
    from tf_transfer.training import distributed
    from tf_transfer.training.run_folder import RunFolder

    if strategy is None and settings.distribution == "multi_worker":
        strategy = strategies.make_strategy(settings.distribution)
    with distributed.lost_workers(strategy):
        folder = RunFolder(output_dir, settings.to_dict(), NOT_COMPARED, overwrite, added={"patience": 0},
                           strategy=strategy)
        try:
            if folder.completed:
                logging.info("%s is already completed; not training again (pass --overwrite to start afresh)",
                             output_dir)
                return folder.existing
            return _train(settings, folder, strategy)
        finally:
            folder.cleanup()


def _train(settings: MultitaskSettings, folder, strategy) -> dict:
    """`run_multitask` once the run folder is known: writes in `folder.path` (`output_dir`, or a non-chief
    worker's temporary folder)."""
    from tf_transfer.models import freezing
    from tf_transfer.studies.multitask_steps import make_predict, make_train_step, score
    from tf_transfer.training import engine as engine_lib

    output_dir = folder.path
    prepared = prepare(settings, strategy)
    model, optimizer, strategy = prepared.model, prepared.optimizer, prepared.strategy
    train, dev, validation = (prepared.splits[name] for name in ("train", "dev", "validation"))

    table = freezing.parameter_table(model, prepared.loaded.backbone)
    print(f"trainable parameters per block (multitask, trainable_layers={settings.trainable_layers}):")
    print(freezing.format_table(table), flush=True)
    print("learning rate per parameter group: " +
          ", ".join(f"{name} {lr:.3g}" for name, lr in optimizer.learning_rates().items()), flush=True)
    summary = folder.start(_fresh_summary(settings, prepared, table))

    step_task_sets = ([(task,) for task in settings.task_order] if settings.schedule == "sequential"
                      else [settings.task_order])
    steps = {tuple(sorted(s)): make_train_step(model, optimizer, s, settings.pair_head, strategy)
             for s in step_task_sets}
    predict = {task: make_predict(model, task, settings.pair_head) for task in TASK_NAMES}
    sizes = {task: len(split) for task, split in train.items()}

    def plan(epoch: int) -> list:
        return epoch_batches(sizes, settings.batch_size, settings.seed, epoch, settings.schedule, settings.task_order)

    def run_step(step_indices: dict):
        batch = {task: train[task].batch(indices) for task, indices in step_indices.items()}
        return steps[tuple(sorted(batch))](batch)

    # Trace every training step once on a real batch, then put every variable back (weights, optimizer slots and
    # step counts, dropout RNG state): compilation is timed apart from training and changes nothing.
    warm_up_plan = plan(0)
    saved = engine_lib.snapshot(list(model.variables) + optimizer.variables)
    start = time.perf_counter()
    first = {}
    for step_indices in warm_up_plan:
        first.setdefault(tuple(sorted(step_indices)), step_indices)
    for step_indices in first.values():
        run_step(step_indices)
    compile_time_s = time.perf_counter() - start
    engine_lib.restore(saved)
    logging.info("compiled the training step(s) in %.1f s", compile_time_s)

    def train_epoch(epoch: int, progress) -> dict:
        losses = {task: [] for task in TASK_NAMES}
        for number, step_indices in enumerate(plan(epoch), start=1):
            total, step_losses = run_step(step_indices)
            for task, value in step_losses.items():
                losses[task].append(value)
            progress.step(number, loss=total)
        task_losses = {task: float(np.mean([float(v) for v in values])) for task, values in losses.items() if values}
        return {"loss": float(sum(task_losses.values())), "task_loss": task_losses}

    def evaluate():
        test = score(predict, dev, settings.eval_batch_size)
        return (score(predict, validation, settings.eval_batch_size) if validation else dict(test)), test

    def on_best(epoch: int) -> None:
        if folder.chief:
            save_weights_atomic(model, os.path.join(output_dir, BEST_WEIGHTS))

    hparams = {"task": "multitask", "preset": settings.preset, "trainable_layers": str(settings.trainable_layers),
               "lr": settings.lr, "head_lr": settings.head_lr or settings.lr, "batch_size": settings.batch_size,
               "seed": settings.seed, "pooling_sst": settings.pooling_sst, "pooling_para": settings.pooling_para,
               "pooling_sts": settings.pooling_sts, "pair_head": settings.pair_head, "llrd": settings.llrd,
               "schedule": settings.schedule, "task_order": ",".join(settings.task_order),
               "max_seq_length": settings.max_seq_length, "init_from": bool(settings.init_from)}
    recorder = record.TensorBoardRecorder(output_dir, hparams, f"multitask/{settings.run_name()}/seed{settings.seed}")
    engine = engine_lib.Engine(folder, METRIC, settings.max_epochs, settings.patience, recorder=recorder,
                               strategy=strategy)
    # Weights, optimizer slots and step counts, dropout RNG state come back; the data order of epoch e depends
    # only on the seed and e. So the remaining epochs compute what they would have without the interruption.
    if engine.restore_last(model, optimizer, compile_time_s=compile_time_s) is None:
        summary["compile_time_s"] = compile_time_s
    with engine:
        engine.fit(model, train_epoch, evaluate, optimizer=optimizer, on_best=on_best, steps=len(warm_up_plan),
                   examples=sum(len(indices) for step in warm_up_plan for indices in step.values()))
        return engine.finish()
