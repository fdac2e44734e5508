"""One GLUE run from a `RunConfig`: data -> inputs -> model -> epoch loop -> summary.json and TensorBoard.

This is what `python -m tf_transfer.glue` and the experiment runner call.

Example:

>>> from tf_transfer.config import RunConfig
>>> from tf_transfer import runner
>>> config = RunConfig(task="rte", preset="all_minilm_l6_v2_en", trainable_layers=4, lr=1e-3,
...                    data_dir="../shared/data/glue", max_train_examples=64, max_epochs=2, batch_size=8)
>>> summary = runner.run_glue(config, "/tmp/rte")  # doctest: +SKIP
>>> summary["completed"], summary["epochs"][-1]["test"]  # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
from typing import Optional

import numpy as np
from absl import logging

from tf_transfer import record, tasks
from tf_transfer.config import RunConfig


def load_data(config: RunConfig):
    """Returns `(train, validation, {test name: Examples}, skipped_rows)` for `config`'s task."""
    task = config.task_spec
    train_full, tests = tasks.load_task_data(task, config.data_dir, config.skip_bad_rows)
    train, validation = tasks.train_validation_split(train_full, config.validation_fraction, config.seed)
    if config.max_train_examples is not None and config.max_train_examples < len(train):
        train = train.take(range(config.max_train_examples))
    skipped = {"train": train_full.skipped_rows, **{name: t.skipped_rows for name, t in tests.items()}}
    return train, validation, tests, skipped


def predict_scores(model, encoded, task, eval_batch_size: int, padding: str, bucket_step: int) -> dict:
    """Scores `encoded` in inference mode with every metric of `task`."""
    from tf_transfer import inputs, metrics

    plan = inputs.plan_eval_batches(encoded.lengths, eval_batch_size, padding)
    outputs = model.predict(inputs.to_dataset(encoded, plan, padding, bucket_step, with_labels=False), verbose=0)
    ordered = np.empty_like(outputs)
    ordered[np.concatenate(plan)] = outputs
    predictions = ordered[:, 0] if task.is_regression else ordered.argmax(axis=-1)
    return metrics.compute(task.metrics, encoded.labels, predictions)


def _scores_to_scalars(val: dict, test: dict, single_test: bool) -> dict:
    scalars = record.flatten_scores("val", val)
    scalars.update(record.flatten_scores("test", next(iter(test.values())) if single_test else test))
    return scalars


def run_glue(config: RunConfig, output_dir: str, strategy=None, overwrite: bool = False) -> dict:
    """Trains and scores one run; returns the final summary (also in `output_dir/summary.json`).

    Raises `TransferError` for bad input before anything is written, or (non-finite loss) after the completed
    epochs' summary has been written with `completed: false`.
    """
    existing = record.read_summary(output_dir)
    if existing and existing.get("completed") and not overwrite:
        logging.info("%s is already completed; not training again (pass --overwrite to start afresh)", output_dir)
        return existing

    task = config.task_spec
    train_examples, validation_examples, test_examples, skipped = load_data(config)
    # TensorFlow is imported only once the data has been read, so that bad data fails fast.
    import keras
    import tensorflow as tf

    from tf_transfer import backbones, freezing, heads, inputs, train

    keras.utils.set_random_seed(config.seed)
    if strategy is None:
        from tf_transfer import strategies

        strategy = strategies.make_strategy(config.distribution)
    if config.batch_size < strategy.num_replicas_in_sync:
        from tf_transfer.errors import TransferError

        raise TransferError(f"--batch_size={config.batch_size} is smaller than the "
                            f"{strategy.num_replicas_in_sync} replicas of --distribution={config.distribution}")
    with strategy.scope():
        loaded = backbones.load_preset(config.preset, dropout=config.dropout)
        backbone = loaded.backbone
        freezing.check_trainable_layers(config.trainable_layers, backbone.num_layers)
        logging.info("preset %s: weights from %s", config.preset, loaded.source)

    encode = lambda examples: inputs.encode(examples, loaded.tokenizer, config.max_seq_length)  # noqa: E731
    encoded_train = encode(train_examples)
    encoded_validation = encode(validation_examples)
    encoded_tests = {name: encode(examples) for name, examples in test_examples.items()}

    first_plan = inputs.plan_train_batches(encoded_train.lengths, config.batch_size, config.seed, 1,
                                           config.padding, config.max_seq_length, config.bucket_step)
    steps_per_epoch = len(first_plan)
    with strategy.scope():
        model = heads.build_classifier(backbone, task.num_labels, config.dropout)
        freezing.set_trainable_layers(backbone, config.trainable_layers)
        optimizer = train.build_optimizer(
            config.lr, config.lr_schedule, steps_per_epoch * config.max_epochs, config.warmup_proportion,
            config.weight_decay, config.clip_norm, config.adam_epsilon)
        loss = (keras.losses.MeanSquaredError() if task.is_regression
                else keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.compile(optimizer=optimizer, loss=loss)

    table = freezing.parameter_table(model, backbone)
    print(f"trainable parameters per block ({config.task}, trainable_layers={config.trainable_layers}):")
    print(freezing.format_table(table), flush=True)
    trainable_params, total_params = table[-1][1], table[-1][2]

    os.makedirs(output_dir, exist_ok=True)
    summary = {
        "task": config.task,
        "preset": config.preset,
        "preset_source": loaded.source,
        "num_layers": int(backbone.num_layers),
        "trainable_layers": config.trainable_layers,
        "lr": config.lr,
        "batch_size": config.batch_size,
        "seed": config.seed,
        "metric": config.metric_name,
        "trainable_params": trainable_params,
        "total_params": total_params,
        "parameter_table": [{"part": p, "trainable": t, "total": n} for p, t, n in table],
        "examples": {"train": len(encoded_train), "validation": len(encoded_validation),
                     **{f"test/{name}": len(e) for name, e in encoded_tests.items()}},
        "skipped_rows": skipped,
        "padding_efficiency": inputs.padding_efficiency(encoded_train, first_plan, config.padding,
                                                         config.bucket_step),
        "compile_time_s": None,
        "epochs": [],
        "best_epoch": None,
        "stopped_early": False,
        "completed": False,
        "config": config.to_dict(),
        "run_name": config.run_name(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    summary_path = os.path.join(output_dir, record.SUMMARY)
    record.write_json_atomic(summary_path, summary)

    hparams = {"task": config.task, "preset": config.preset, "trainable_layers": str(config.trainable_layers),
               "lr": config.lr, "batch_size": config.batch_size, "seed": config.seed, "padding": config.padding,
               "max_seq_length": config.max_seq_length, "lr_schedule": config.lr_schedule}
    recorder = record.TensorBoardRecorder(output_dir, hparams, f"{config.task}/{config.run_name()}/seed{config.seed}")

    warmup_plan = inputs.distinct_shapes(encoded_train, first_plan, config.padding, config.bucket_step)
    with strategy.scope():  # the optimizer's slots are built here and must be mirrored like the weights
        summary["compile_time_s"] = train.compile_steps(
            model, inputs.to_dataset(encoded_train, warmup_plan, config.padding, config.bucket_step))
    logging.info("compiled %d batch shape(s) in %.1f s", len(warmup_plan), summary["compile_time_s"])

    def make_train_dataset(epoch):
        return inputs.train_dataset(encoded_train, config.batch_size, config.seed, epoch, config.padding,
                                    config.bucket_step)

    def evaluate():
        score = lambda encoded: predict_scores(model, encoded, task, config.eval_batch_size,  # noqa: E731
                                               config.padding, config.bucket_step)
        return score(encoded_validation), {name: score(encoded) for name, encoded in encoded_tests.items()}

    loop = train.EpochLoop(model, config.metric_name, config.max_epochs, config.patience, config.min_delta)

    def on_epoch_end(epoch_record):
        test = epoch_record["test"]
        epoch_record["test"] = next(iter(test.values())) if len(test) == 1 else test
        summary["epochs"] = loop.epochs
        summary["best_epoch"] = loop.stopper.best_epoch
        summary["early_stopping"] = loop.stopper.state()
        record.write_json_atomic(summary_path, summary)
        recorder.scalars(epoch_record["epoch"], {
            "epoch_time_s": epoch_record["epoch_time_s"],
            "train_time_s": epoch_record["train_time_s"],
            "loss": epoch_record["loss"],
            **_scores_to_scalars(epoch_record["val"], test, len(test) == 1),
        })
        val_text = ", ".join(f"{k} {v:.4f}" for k, v in epoch_record["val"].items() if v is not None)
        logging.info("epoch %d: %.1f s (total %.1f s), loss %.4f, val %s", epoch_record["epoch"],
                     epoch_record["epoch_time_s"], epoch_record["train_time_s"], epoch_record["loss"], val_text)

    try:
        loop.run(make_train_dataset, evaluate, on_epoch_end, steps_per_epoch, len(encoded_train))
    finally:
        recorder.close()
    summary["stopped_early"] = loop.stopped_early
    summary["completed"] = True
    summary["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    record.write_json_atomic(summary_path, summary)
    logging.info("done: best epoch %s, summary in %s", summary["best_epoch"], summary_path)
    return summary
