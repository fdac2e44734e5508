"""One GLUE run as a task of the runner: data -> tokens -> backbone with the freezing rule (or the frozen prefix's
cache) -> classifier -> epochs scored on validation and GLUE dev -> summary.json, TensorBoard, an optional export.

This is what `python -m tf_transfer.glue`, the grid runner and the benchmark build.

Example:

>>> from tf_transfer.studies.glue.glue_settings import GlueSettings
>>> from tf_transfer.studies.glue import glue_task
>>> settings = GlueSettings(task="rte", preset="all_minilm_l6_v2_en", trainable_layers=4, lr=1e-3,
...                         data_dir="../shared/data/glue", max_train_examples=64, max_epochs=2, batch_size=8)
>>> summary = glue_task.run_glue(settings, "/tmp/rte")  # doctest: +SKIP
>>> summary["completed"], summary["epochs"][-1]["test"]  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import os
import types
from typing import Optional

from absl import logging

from tf_transfer.core import machine
from tf_transfer.data import tasks, user_data
from tf_transfer.data.examples import train_validation_split
from tf_transfer.studies import study_method
from tf_transfer.studies.glue.glue_settings import GlueSettings
from tf_transfer.training import distributed, record, runner
from tf_transfer.training.task import Task


def load_data(settings: GlueSettings):
    """Returns `(task, train, validation, {test name: Examples}, skipped_rows)` for the settings' GLUE task or own
    data set (`user_data`; its own validation file or split, where it has one, instead of a held-out share)."""
    spec, validation, given = settings.data_spec, None, settings.inputs
    if spec is None:
        task = settings.task_spec
        train_full, tests = tasks.load_task_data(task, given.data_dir, given.skip_bad_rows)
    else:
        task, train_full, validation, tests = user_data.load(spec, given.skip_bad_rows)
        user_data.check_metric(task, settings.metric)
    if validation is not None:
        train = train_full
    elif given.validation_fraction:
        train, validation = train_validation_split(train_full, given.validation_fraction, given.seed)
    else:  # --validation_fraction=0: train on all of it; the empty validation split is never scored
        train, validation = train_full, train_full.take([])
    if given.max_train_examples is not None and given.max_train_examples < len(train):
        train = train.take(range(given.max_train_examples))
    for line in label_coverage(task, train, validation):
        logging.warning("%s", line)
    skipped = {"train": train_full.skipped_rows, **{name: t.skipped_rows for name, t in tests.items()}}
    return task, train, validation, tests, skipped


def label_coverage(task, train, validation) -> list:
    """Lines saying which labels the validation split (held out or a file) has that training lacks, and which it has
    no example of: its scores count the first as errors and say nothing about the second."""
    if task.is_regression or not len(validation):
        return []
    in_train, in_validation = set(train.labels.tolist()), set(validation.labels.tolist())

    def named(indices):
        names = [repr(task.labels[i]) for i in sorted(indices)]
        return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")

    lines = []
    unseen = in_validation - in_train
    if unseen:
        lines.append(f"{len(unseen)} of the {task.num_labels} labels are in the validation split but not in what "
                     f"trains ({named(unseen)}): the model never sees them, and they count as errors")
    absent = set(range(task.num_labels)) - in_validation
    if absent:
        lines.append(f"the validation split ({len(validation)} examples) has no example of {len(absent)} of the "
                     f"{task.num_labels} labels ({named(absent)}): its scores say nothing about them; a "
                     "--validation_file with every label, or a larger --validation_fraction, would")
    return lines


def scores(feed, model, task, split: str) -> dict:
    """Scores one split in inference mode with every metric of `task`; `{}` for an empty split."""
    from tf_transfer.core import metrics

    if not len(feed.labels(split)):
        return {}
    outputs = feed.predict(model, split)
    predictions = outputs[:, 0] if task.is_regression else outputs.argmax(axis=-1)
    return metrics.compute(task.metrics, feed.labels(split), predictions)


class GlueTask(Task):
    """A GLUE run of `settings` (a GLUE task, or a user's own data set read the same way); `export_dir` saves the
    best epoch's classifier there after training, in `export_format` (`export.FORMATS`); `keep_weights` keeps the
    best epoch's trained weights in the run's folder once it completes (`checkpoints.BEST`), so that
    `export_finished` can export it later."""

    summary_schema = "glue"  # tf_transfer.training.run_record

    def __init__(self, settings: GlueSettings, export_dir: Optional[str] = None, keep_weights: bool = False,
                 export_format: str = "preset"):
        super().__init__(settings)
        self.added_settings = settings.added_settings()
        self.export_dir, self.keep_weights, self.export_format = export_dir, keep_weights, export_format
        self.trained = []  # the variables training may change (`checkpoints.trained_variables`), once built
        self.metric = settings.metric_name
        self.task = None  # a `tasks.Task`, known once the data has been read
        self.cache_time_s, self.cache_cost, self.cache_mb = 0.0, None, None
        self.cache_split_cost = {}  # {split: {"s", "cpu_s"}} built by this run (the benchmark charges train's)

    def data_hashes(self) -> dict:
        return user_data.file_hashes(self.settings.data_spec)

    def build(self, strategy=None) -> None:
        """Reads the data, loads the backbone, encodes every split and builds the compiled model and its feed.
        TensorFlow is imported only once the data has been read, so that bad data fails fast."""
        from tf_transfer.data import inputs
        from tf_transfer.training import checkpoints

        settings = self.settings
        splits = self._data_and_backbone(strategy)
        strategy = self.strategy
        self.encoded = {name: inputs.encode(examples, self.loaded.tokenizer, settings.inputs.max_seq_length)
                        for name, examples in splits.items()}
        with strategy.scope():
            self.model, self.feed = self._model_and_feed()
            self._compile()
        self.trained = checkpoints.trained_variables(self.model)
        # Several replicas or workers: every batch is split into one share per replica here, once (Keras must not
        # distribute it again), and Keras' faults with such datasets are worked around (docs/distributed.md).
        self.feed.use_strategy(strategy)
        distributed.keras_distributed(self.model, strategy)
        if self.export_dir:  # refused before training, not after it
            from tf_transfer.models import export

            export.check_exportable(self.backbone, self.export_format)

    def _data_and_backbone(self, strategy) -> dict:
        """Reads the data (the task, its labels) and loads the backbone under the run's strategy, seed and dtype
        policy; returns the splits' examples by name."""
        import keras

        settings = self.settings
        self.task, train, validation, tests, self.skipped = load_data(settings)
        self.test_names = list(tests)
        keras.utils.set_random_seed(settings.inputs.seed)
        self.strategy = self._strategy(strategy)
        # The policy is global in Keras and read when layers are built: set it (float32 included) before loading.
        keras.mixed_precision.set_global_policy(settings.runtime.precision)
        with self.strategy.scope():
            self.loaded = self._load_backbone()
        self.backbone = self.loaded.backbone
        return {"train": train, "validation": validation, **tests}

    def _strategy(self, strategy):
        from tf_transfer.core import strategies
        from tf_transfer.core.errors import TransferError

        runtime, batch_size = self.settings.runtime, self.settings.inputs.batch_size
        if strategy is None:
            strategy = strategies.make_strategy(runtime.distribution)
        if batch_size < strategy.num_replicas_in_sync:
            raise TransferError(f"--batch_size={batch_size} is smaller than the {strategy.num_replicas_in_sync} "
                                f"replicas of --distribution={runtime.distribution}")
        if runtime.steps_per_execution > 1 and strategies.is_distributed(strategy):
            # Keras 3.15's loop of several steps per call fails on a distributed iterator ("You must feed a value
            # for placeholder tensor ... while/cond/Placeholder"), whoever distributed the dataset.
            raise TransferError(f"--steps_per_execution={runtime.steps_per_execution} does not work with several "
                                f"replicas (--distribution={runtime.distribution}) in Keras 3.15: use 1")
        return strategy

    def _load_backbone(self):
        from tf_transfer.models import loader

        return loader.load_model(self.settings.model)

    def _model_and_feed(self, with_feed: bool = True):
        """`(model, feed)`: the classifier that trains (over the frozen prefix's cache with --cache_frozen) and its
        batches; `with_feed` False: the same model and no feed (nothing to train or score: an export)."""
        from tf_transfer.data import feeds
        from tf_transfer.models import cached_prefix, heads, methods, packed

        settings, model, backbone = self.settings, self.settings.model, self.backbone
        head = heads.pooled_head(self.task.num_labels, model.dropout, backbone)
        methods.apply(backbone, settings.method, model.trainable_layers, **methods.registry.options_of(settings))
        if settings.cache_frozen:
            feed = self._cached_feed() if with_feed else None
            return cached_prefix.suffix_classifier(backbone, model.trainable_layers, head,
                                                   packed=settings.padding == "pack"), feed
        feed = feeds.TokenFeed(self.encoded, settings.inputs, settings.runtime.jit) if with_feed else None
        if settings.padding == "pack":
            return packed.build_classifier(backbone, head), feed
        return heads.build_classifier(backbone, self.task.num_labels, model.dropout, head=head), feed

    def _cached_feed(self):
        """Builds (or reuses) the frozen-prefix cache of every split; notes the seconds this run spent building and
        what the caches cost to build (`{build_s, build_cpu_s}`, None where unknown)."""
        from tf_transfer.data import feeds
        from tf_transfer.models import cached_prefix

        settings = self.settings
        built = cached_prefix.cache_splits(self.backbone, settings.trainable_layers, self.encoded,
                                           settings.model.weights, settings.dataset, settings.inputs,
                                           settings.precision, settings.cache_dir, packed=settings.padding == "pack",
                                           pooled=("train", "validation"))
        cached, self.cache_cost, self.cache_mb = {}, {"build_s": 0.0, "build_cpu_s": 0.0}, 0.0
        for name, (cached[name], spent, reused) in built.items():
            self.cache_time_s += spent
            if not reused:
                self.cache_split_cost[name] = {"s": spent, "cpu_s": cached[name].build_cpu_s}
            self.cache_mb += cached[name].nbytes / 2**20
            for field in self.cache_cost:
                value = getattr(cached[name], field)
                self.cache_cost[field] = None if value is None or self.cache_cost[field] is None else (
                    self.cache_cost[field] + value)
            logging.info("frozen-prefix cache of %s: %s (%.1f MB)", name,
                         "reused" if reused else f"built in {spent:.1f} s", cached[name].nbytes / 1e6)
        return feeds.CachedFeed(cached, settings.inputs, settings.runtime.jit, packed=settings.padding == "pack")

    def _compile(self) -> None:
        import keras

        from tf_transfer.training import optimizers

        settings = self.settings
        optimizer = optimizers.build_optimizer(settings.optimizer, self.feed.steps_per_epoch * settings.loop.max_epochs)
        # Averaged over the sample weights, so that the zero-weight examples filling a partial batch under XLA
        # (inputs.fill_batch) change nothing; with all weights 1 this is the usual mean. Several replicas: summed,
        # each example weighted 1 / its batch's examples, so that every step is one device's (loss_under).
        loss = (keras.losses.MeanSquaredError(reduction="mean_with_sample_weight") if self.task.is_regression
                else keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight"))
        self.model.compile(optimizer=optimizer, loss=distributed.loss_under(self.strategy, loss),
                           jit_compile=settings.runtime.jit, steps_per_execution=settings.runtime.steps_per_execution)

    def describe(self) -> str:
        from tf_transfer.models import methods

        settings = self.settings
        method = methods.get(settings.method).describe(settings)
        return f"{settings.dataset}, trainable_layers={settings.trainable_layers}{method}"

    def fresh_summary(self, table: list) -> dict:
        settings, cost = self.settings, self.cache_cost or {}
        return {
            "task": settings.dataset,
            **self._dataset_facts(),
            **record.model_facts(settings.model, self.loaded),
            **study_method.facts(settings, self.backbone),
            "lr": settings.lr,
            "batch_size": settings.batch_size,
            "seed": settings.seed,
            "metric": self.metric,
            **record.parameter_facts(table),
            "examples": {"train": len(self.encoded["train"]), "validation": len(self.encoded["validation"]),
                         **{f"test/{name}": len(self.encoded[name]) for name in self.test_names}},
            "skipped_rows": self.skipped,
            "padding_efficiency": self.feed.padding_efficiency,
            "cache_frozen": settings.cache_frozen,
            "cache_time_s": self.cache_time_s,
            # What the caches this run used cost to build, whether this run built them or reused them.
            "cache_build_s": cost.get("build_s"),
            "cache_build_cpu_s": cost.get("build_cpu_s"),
            # What the caches hold in memory: resident before the first step, so not in `peak_above_start_mb`.
            "cache_mb": self.cache_mb,
            "machine": machine.describe(),
            "code": record.code_version(),
            "precision": settings.precision,
            "jit_compile": settings.jit_compile,
            **record.nothing_trained_yet(settings.to_dict(), settings.run_name()),
        }

    def _dataset_facts(self) -> dict:
        """For a user's own data set: where it came from, its labels in class order (positive last of two), its
        kind and the SHA-256 of each file, so that runs can tell which data they trained on."""
        spec = self.settings.data_spec
        if spec is None:
            return {}
        kind = "regression" if self.task.is_regression else "binary" if self.task.num_labels == 2 else "multiclass"
        return {"dataset": {"name": spec.name, "tfds": spec.tfds, "text_columns": list(spec.text_columns),
                            "label_column": spec.label_column, "kind": kind,
                            "files": user_data.data_files(spec)},
                "labels": list(self.task.labels) if self.task.labels else None}

    def hparams(self) -> dict:
        from tf_transfer.models import methods

        s = self.settings
        return {"task": s.dataset, "preset": s.preset, "trainable_layers": str(s.trainable_layers), "lr": s.lr,
                "batch_size": s.batch_size, "seed": s.seed, "padding": s.padding, "max_seq_length": s.max_seq_length,
                "lr_schedule": s.lr_schedule, "cache_frozen": s.cache_frozen, "precision": s.precision,
                "method": s.method, **methods.registry.hparams(s)}

    def trial_name(self) -> str:
        return f"{self.settings.dataset}/{self.settings.run_name()}/seed{self.settings.seed}"

    def resume_facts(self) -> dict:
        return {"cache_time_s": self.cache_time_s}  # a cache rebuilt in this process is not training time either

    def evaluate(self):
        test = {name: scores(self.feed, self.model, self.task, name) for name in self.test_names}
        if len(test) == 1:  # one dev set (MNLI has two: matched and mismatched)
            test = next(iter(test.values()))
        return scores(self.feed, self.model, self.task, "validation"), test

    @property
    def _keeps_weights(self) -> bool:
        return bool(self.export_dir or self.keep_weights) and self.folder.chief

    def on_best(self, epoch: int) -> None:
        from tf_transfer.training import checkpoints

        if self._keeps_weights:
            checkpoints.save_weights(self.folder.path, self.trained)

    def finish(self, engine) -> None:
        from tf_transfer.training import checkpoints

        summary = engine.summary
        summary["train_time_s"] = engine.epochs[-1]["train_time_s"] if engine.epochs else 0.0
        summary["constant_prediction"] = self._constant_prediction(summary)
        if self._keeps_weights and not summary.get("best_epoch"):  # no epoch chosen: the result is the last one's
            checkpoints.save_weights(self.folder.path, self.trained)
        if self.export_dir and self.folder.chief:
            self._export(summary)

    def _constant_prediction(self, summary: dict) -> Optional[dict]:
        """The validation score of the best constant prediction beside the best epoch's, and whether the run beat
        it (None without a validation split or a best epoch)."""
        from tf_transfer.core import metrics

        labels, best = self.feed.labels("validation"), summary.get("best_epoch")
        if not len(labels) or not best:
            return None
        value = summary["epochs"][best - 1]["val"].get(self.metric)
        regression = self.task.is_regression
        score, constant = metrics.best_constant(self.metric, labels, None if regression else self.task.num_labels)
        return {"metric": self.metric, "score": score, "best": value,
                "prediction": constant if regression else self.task.labels[constant],
                "beaten": metrics.is_better(value, score, lower=self.metric in metrics.LOWER_IS_BETTER)}

    def _export(self, summary: dict) -> None:
        """Exports the best epoch's weights (the early-stopping choice) as a keras-hub preset folder."""
        from tf_transfer.models import export, methods
        from tf_transfer.training import checkpoints

        best = summary.get("best_epoch")
        if os.path.exists(checkpoints.path(self.folder.path, "best")):
            with self.strategy.scope():
                checkpoints.restore_weights(self.folder.path, self.trained)
        methods.get(self.settings.method).merge_for_export(self.backbone)
        export.export_classifier(self.backbone, self.loaded.tokenizer, self.model.get_layer("head"), self.task,
                                 self.settings.max_seq_length, self.export_dir, self.settings.dropout,
                                 self.settings.padding, self.export_format)
        summary["exported"] = {"folder": os.path.abspath(self.export_dir), "epoch": best}
        logging.info("exported the epoch-%s model to %s", best, self.export_dir)


    def export_finished(self, output_dir: str) -> dict:
        """Exports the completed run in `output_dir` to `export_dir` without training: the model built again as it
        trained (no data encoded, no cache built), its kept best weights (`keep_weights`) assigned. Returns the run's
        summary, its `exported` entry updated. `TransferError` for a run that kept no weights."""
        from tf_transfer.core.errors import TransferError
        from tf_transfer.training import checkpoints
        from tf_transfer.training.run_folder import RunFolder

        self.folder = folder = RunFolder(output_dir, self.compared_settings(), self.settings.NOT_RESULT_SETTINGS,
                                         added=self.added_settings, data=self.data_hashes())
        if not folder.completed:
            raise TransferError(f"{output_dir} holds no completed run to export")
        if not os.path.exists(checkpoints.path(output_dir, "best")):
            raise TransferError(f"{output_dir} holds a completed run but not its trained weights (a run made before "
                                "runs kept them, or by a grid or sweep): pass --overwrite to train it again with "
                                "--export_dir")
        self._data_and_backbone(None)
        with self.strategy.scope():
            self.model, _ = self._model_and_feed(with_feed=False)
        self.trained = checkpoints.trained_variables(self.model)
        from tf_transfer.models import export

        export.check_exportable(self.backbone, self.export_format)
        folder.summary, folder.kind = dict(folder.existing), self.summary_schema
        self._export(folder.summary)
        folder.write()
        return folder.summary


def run_glue(settings: GlueSettings, output_dir: str, strategy=None, overwrite: bool = False,
             export_dir: Optional[str] = None, keep_weights: bool = False, export_format: str = "preset") -> dict:
    """Trains and scores one GLUE run in `output_dir` (`runner.run`); returns the final summary. `keep_weights`:
    the run keeps its best epoch's trained weights, for `export_finished`."""
    return runner.run(task_for(settings, export_dir, keep_weights, export_format), output_dir, strategy, overwrite)


def export_finished(settings: GlueSettings, output_dir: str, export_dir: str, export_format: str = "preset") -> dict:
    """Exports the completed run of `settings` in `output_dir` to `export_dir` in `export_format` without training
    (`GlueTask.export_finished`); returns its summary."""
    return task_for(settings, export_dir, export_format=export_format).export_finished(output_dir)


def task_for(settings: GlueSettings, export_dir: Optional[str] = None, keep_weights: bool = False,
             export_format: str = "preset") -> GlueTask:
    """The task of a GLUE run: `GlueTask`, with the run's method's `trainer` mixed in before it where the method has
    one (a method decided while training)."""
    from tf_transfer.models import methods

    trainer = methods.get(settings.method).trainer
    if trainer is None:
        return GlueTask(settings, export_dir, keep_weights, export_format)
    return _trained_by(trainer)(settings, export_dir, keep_weights, export_format)


@functools.lru_cache(maxsize=None)
def _trained_by(trainer: type) -> type:
    # A method's trainer lives with the method, in the models layer, which may not import the training layer or this
    # one: it is mixed into the task here and handed what it calls of them.
    return type(f"{trainer.__name__}GlueTask", (trainer, GlueTask), {"tools": trainer_tools()})


def trainer_tools() -> types.SimpleNamespace:
    """The functions of the training layer and of this module that a method's `trainer` (a mixin of `GlueTask` in
    the models layer, as `models.methods.adaptive.run`'s) calls, as its `tools`.

    Example:

    >>> sorted(vars(trainer_tools()))
    ['Stage', 'from_chief', 'keras_distributed', 'scores', 'steps_of', 'warm_up', 'write_npz_atomic']
    """
    from tf_transfer.training import checkpoints, engine
    from tf_transfer.training.task import Stage

    return types.SimpleNamespace(warm_up=engine.warm_up, steps_of=engine.steps_of, Stage=Stage,
                                 from_chief=distributed.from_chief, keras_distributed=distributed.keras_distributed,
                                 write_npz_atomic=checkpoints.write_npz_atomic, scores=scores)
