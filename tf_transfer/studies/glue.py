"""One GLUE run from a `RunConfig`: data -> inputs -> model -> epoch loop -> summary.json and TensorBoard.

This is what `python -m tf_transfer.glue` and the experiment runner call.

Example:

>>> from tf_transfer.studies.glue_config import RunConfig
>>> from tf_transfer.studies import glue
>>> config = RunConfig(task="rte", preset="all_minilm_l6_v2_en", trainable_layers=4, lr=1e-3,
...                    data_dir="../shared/data/glue", max_train_examples=64, max_epochs=2, batch_size=8)
>>> summary = glue.run_glue(config, "/tmp/rte")  # doctest: +SKIP
>>> summary["completed"], summary["epochs"][-1]["test"]  # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
import types
from typing import Optional

from absl import logging

from tf_transfer.core import machine
from tf_transfer.training import distributed, record
from tf_transfer.data import tasks
from tf_transfer.data.examples import train_validation_split
from tf_transfer.studies.glue_config import NOT_RESULT_SETTINGS, RunConfig


def load_data(config: RunConfig):
    """Returns `(train, validation, {test name: Examples}, skipped_rows)` for `config`'s task."""
    task = config.task_spec
    train_full, tests = tasks.load_task_data(task, config.data_dir, config.skip_bad_rows)
    if config.validation_fraction:
        train, validation = train_validation_split(train_full, config.validation_fraction, config.seed)
    else:  # --validation_fraction=0: train on all of it; the empty validation split is never scored
        train, validation = train_full, train_full.take([])
    if config.max_train_examples is not None and config.max_train_examples < len(train):
        train = train.take(range(config.max_train_examples))
    skipped = {"train": train_full.skipped_rows, **{name: t.skipped_rows for name, t in tests.items()}}
    return train, validation, tests, skipped


def scores(feed, model, task, split: str) -> dict:
    """Scores one split in inference mode with every metric of `task`; `{}` for an empty split."""
    from tf_transfer.core import metrics

    if not len(feed.labels(split)):
        return {}
    outputs = feed.predict(model, split)
    predictions = outputs[:, 0] if task.is_regression else outputs.argmax(axis=-1)
    return metrics.compute(task.metrics, feed.labels(split), predictions)


def _cached_feed(config: RunConfig, backbone, encoded: dict):
    """Builds (or reuses) the frozen-prefix cache of every split; returns the feed, the seconds this run spent
    building, and what the caches cost to build (`{build_s, build_cpu_s}`, None where unknown)."""
    from tf_transfer.data import cache
    from tf_transfer.data import feeds

    prefix = cache.prefix_model(backbone, config.trainable_layers)
    depth = cache.frozen_depth(config.trainable_layers, backbone.num_layers)
    cls_only = depth == backbone.num_layers
    cached, seconds = {}, 0.0
    cost = {"build_s": 0.0, "build_cpu_s": 0.0}
    for name, split in encoded.items():
        key = cache.cache_key(config.init_checkpoint or config.preset, config.task, name, split, depth, cls_only, config.precision)
        cached[name], spent, reused = cache.build(prefix, split, key, cls_only, config.cache_dir,
                                                  config.eval_batch_size, config.bucket_step)
        seconds += spent
        for field in cost:
            value = getattr(cached[name], field)
            cost[field] = None if value is None or cost[field] is None else cost[field] + value
        logging.info("frozen-prefix cache of %s: %s (%.1f MB)", name, "reused" if reused else f"built in {spent:.1f} s",
                     cached[name].nbytes / 1e6)
    feed = feeds.CachedFeed(cached, config.batch_size, config.seed, config.bucket_step, config.max_seq_length,
                            config.eval_batch_size, config.jit)
    return feed, seconds, cost


def _export(config: RunConfig, prepared, output_dir: str, export_dir: str, summary: dict) -> None:
    """Exports the best epoch's weights (the early-stopping choice) as a keras-hub preset folder."""
    from tf_transfer.training import checkpoints
    from tf_transfer.models import export

    best = summary.get("best_epoch")
    if best and os.path.exists(checkpoints.path(output_dir, "best")):
        with prepared.strategy.scope():
            checkpoints.restore(output_dir, "best", prepared.model)
    export.export_classifier(prepared.backbone, prepared.loaded.tokenizer, prepared.model.get_layer("head"),
                             prepared.task, config.max_seq_length, export_dir, config.dropout)
    summary["exported"] = {"folder": os.path.abspath(export_dir), "epoch": best}
    logging.info("exported the epoch-%s model to %s", best, export_dir)


def prepare(config: RunConfig, strategy=None) -> types.SimpleNamespace:
    """Reads the data, loads the backbone, encodes every split and builds the compiled model and its feed.

    Raises `TransferError` for bad input; TensorFlow is imported only after the data has been read, so that bad
    data fails fast.
    """
    task = config.task_spec
    train_examples, validation_examples, test_examples, skipped = load_data(config)
    # TensorFlow is imported only once the data has been read, so that bad data fails fast.
    import keras

    from tf_transfer.models import backbones
    from tf_transfer.data import cache
    from tf_transfer.data import feeds
    from tf_transfer.models import freezing
    from tf_transfer.models import heads
    from tf_transfer.data import inputs
    from tf_transfer.training import optimizers
    from tf_transfer.core import strategies
    from tf_transfer.core.errors import TransferError

    keras.utils.set_random_seed(config.seed)
    if strategy is None:
        strategy = strategies.make_strategy(config.distribution)
    if config.batch_size < strategy.num_replicas_in_sync:
        raise TransferError(f"--batch_size={config.batch_size} is smaller than the "
                            f"{strategy.num_replicas_in_sync} replicas of --distribution={config.distribution}")
    if config.steps_per_execution > 1 and strategies.is_distributed(strategy):
        # Keras 3.15's loop of several steps per call fails on a distributed iterator ("You must feed a value for
        # placeholder tensor ... while/cond/Placeholder"), whoever distributed the dataset.
        raise TransferError(f"--steps_per_execution={config.steps_per_execution} does not work with several "
                            f"replicas (--distribution={config.distribution}) in Keras 3.15: use 1")
    # The policy is global in Keras and read when layers are built: set it (float32 included) before loading.
    keras.mixed_precision.set_global_policy(config.precision)
    with strategy.scope():
        if config.init_checkpoint:
            from tf_transfer.models import tf1_checkpoint

            loaded = tf1_checkpoint.load_tf1_bert(config.init_checkpoint, config.bert_config_file,
                                                  config.vocab_file, dropout=config.dropout)
        else:
            loaded = backbones.load_preset(config.preset, dropout=config.dropout)
        backbone = loaded.backbone
        freezing.check_trainable_layers(config.trainable_layers, backbone.num_layers)
        logging.info("preset %s: weights from %s", config.preset, loaded.source)

    splits = {"train": train_examples, "validation": validation_examples, **test_examples}
    encoded = {name: inputs.encode(examples, loaded.tokenizer, config.max_seq_length)
               for name, examples in splits.items()}
    with strategy.scope():
        head = heads.pooled_head(task.num_labels, config.dropout, backbone)
        freezing.set_trainable_layers(backbone, config.trainable_layers)
        cache_time_s, cache_cost = 0.0, None
        if config.cache_frozen:
            feed, cache_time_s, cache_cost = _cached_feed(config, backbone, encoded)
            model = cache.suffix_classifier(backbone, config.trainable_layers, head)
        else:
            feed = feeds.TokenFeed(encoded, config.batch_size, config.seed, config.padding, config.bucket_step,
                                   config.eval_batch_size, config.jit)
            model = heads.build_classifier(backbone, task.num_labels, config.dropout, head=head)
        optimizer = optimizers.build_optimizer(
            config.lr, config.lr_schedule, feed.steps_per_epoch * config.max_epochs, config.warmup_proportion,
            config.weight_decay, config.clip_norm, config.adam_epsilon)
        # Averaged over the sample weights, so that the zero-weight examples filling a partial batch under XLA
        # (inputs.fill_batch) change nothing; with all weights 1 this is the usual mean. Several replicas: summed,
        # each example weighted 1 / its batch's examples, so that every step is one device's (loss_under).
        loss = (keras.losses.MeanSquaredError(reduction="mean_with_sample_weight") if task.is_regression
                else keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight"))
        loss = distributed.loss_under(strategy, loss)
        model.compile(optimizer=optimizer, loss=loss, jit_compile=config.jit,
                      steps_per_execution=config.steps_per_execution)
    # Several replicas or workers: every batch is split into one share per replica here, once (Keras must not
    # distribute it again), and Keras' faults with such datasets are worked around (docs/distributed.md).
    feed.use_strategy(strategy)
    distributed.keras_distributed(model, strategy)

    return types.SimpleNamespace(task=task, strategy=strategy, loaded=loaded, backbone=backbone, model=model,
                                 feed=feed, encoded=encoded, cache_time_s=cache_time_s, cache_cost=cache_cost,
                                 test_names=list(test_examples), skipped=skipped)


def run_glue(config: RunConfig, output_dir: str, strategy=None, overwrite: bool = False,
             export_dir: Optional[str] = None) -> dict:
    """Trains and scores one run; returns the final summary (also in `output_dir/summary.json`).

    Raises `TransferError` for bad input before anything is written, or (non-finite loss) after the completed
    epochs' summary has been written with `completed: false`.

    Under `--distribution=multi_worker` (one process per worker, `TF_CONFIG`) the workers join first, so that the
    chief can tell the others what `output_dir` holds; only the chief writes there (docs/distributed.md).
    """
    from tf_transfer.core import strategies
    from tf_transfer.training.run_folder import RunFolder

    if strategy is None and config.distribution == "multi_worker":
        strategy = strategies.make_strategy(config.distribution)
    with distributed.lost_workers(strategy):
        folder = RunFolder(output_dir, config.to_dict(), NOT_RESULT_SETTINGS, overwrite, strategy=strategy)
        try:
            if folder.completed:
                logging.info("%s is already completed; not training again (pass --overwrite to start afresh)",
                             output_dir)
                return folder.existing
            return _train(config, folder, strategy, export_dir)
        finally:
            folder.cleanup()


def _train(config: RunConfig, folder, strategy, export_dir: Optional[str]) -> dict:
    """`run_glue` once the run folder is known: trains in `folder.path` (`output_dir`, or a non-chief worker's
    temporary folder)."""
    from tf_transfer.training import checkpoints
    from tf_transfer.training.engine import Engine, keras_epoch, warm_up

    output_dir = folder.path
    prepared = prepare(config, strategy)
    if export_dir:  # refused before training, not after it
        from tf_transfer.models import export

        export.check_exportable(prepared.backbone)
    task, strategy, loaded, backbone = prepared.task, prepared.strategy, prepared.loaded, prepared.backbone
    model, feed, encoded, cache_time_s = prepared.model, prepared.feed, prepared.encoded, prepared.cache_time_s
    test_names = prepared.test_names
    from tf_transfer.models import freezing

    table = freezing.parameter_table(model, backbone)
    print(f"trainable parameters per block ({config.task}, trainable_layers={config.trainable_layers}):")
    print(freezing.format_table(table), flush=True)
    summary = folder.start({
        "task": config.task,
        "preset": config.init_checkpoint or config.preset,
        "preset_source": loaded.source,
        "num_layers": int(backbone.num_layers),
        "trainable_layers": config.trainable_layers,
        "lr": config.lr,
        "batch_size": config.batch_size,
        "seed": config.seed,
        "metric": config.metric_name,
        "trainable_params": table[-1][1],
        "total_params": table[-1][2],
        "parameter_table": [{"part": p, "trainable": t, "total": n} for p, t, n in table],
        "examples": {"train": len(encoded["train"]), "validation": len(encoded["validation"]),
                     **{f"test/{name}": len(encoded[name]) for name in test_names}},
        "skipped_rows": prepared.skipped,
        "padding_efficiency": feed.padding_efficiency,
        "cache_frozen": config.cache_frozen,
        "cache_time_s": cache_time_s,
        # What the caches this run used cost to build, whether this run built them or reused them.
        "cache_build_s": (prepared.cache_cost or {}).get("build_s"),
        "cache_build_cpu_s": (prepared.cache_cost or {}).get("build_cpu_s"),
        "machine": machine.describe(),
        "code": record.code_version(),
        "precision": config.precision,
        "jit_compile": config.jit_compile,
        "compile_time_s": None,
        "epochs": [],
        "best_epoch": None,
        "stopped_early": False,
        "completed": False,
        "config": config.to_dict(),
        "run_name": config.run_name(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    })
    hparams = {"task": config.task, "preset": config.preset, "trainable_layers": str(config.trainable_layers),
               "lr": config.lr, "batch_size": config.batch_size, "seed": config.seed, "padding": config.padding,
               "max_seq_length": config.max_seq_length, "lr_schedule": config.lr_schedule,
               "cache_frozen": config.cache_frozen, "precision": config.precision}
    recorder = record.TensorBoardRecorder(output_dir, hparams, f"{config.task}/{config.run_name()}/seed{config.seed}")

    compile_time_s = warm_up(model, feed.warmup_dataset(), strategy)
    logging.info("compiled the training step in %.1f s", compile_time_s)
    engine = Engine(folder, config.metric_name, config.max_epochs, config.patience, config.min_delta, recorder,
                    strategy)
    # Compilation after a resume (and a cache rebuilt in this process) is not training time.
    if engine.restore_last(model, compile_time_s=compile_time_s, cache_time_s=cache_time_s) is None:
        summary["compile_time_s"] = compile_time_s

    def evaluate():
        test = {name: scores(feed, model, task, name) for name in test_names}
        return scores(feed, model, task, "validation"), next(iter(test.values())) if len(test) == 1 else test

    def on_best(epoch):
        if export_dir and folder.chief:
            checkpoints.save(output_dir, "best", model)

    with engine:
        engine.fit(model, keras_epoch(model, feed.train_dataset, feed.steps_per_epoch, len(encoded["train"])),
                   evaluate, on_best=on_best)
        summary["train_time_s"] = engine.epochs[-1]["train_time_s"] if engine.epochs else 0.0
        if export_dir and folder.chief:
            _export(config, prepared, output_dir, export_dir, summary)
        return engine.finish()
