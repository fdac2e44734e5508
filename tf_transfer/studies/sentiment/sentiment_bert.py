"""Hart's BERT models: one model of the study trained once per seed on one held-out split and scored on the rest.

Frozen (k=0): the features are computed once, in inference mode, and each seed trains only the dense head.
Otherwise each seed starts from the preset's weights again and trains backbone blocks and head end to end. Every
seed is a task of the runner (`SeedTask`) in the model's work folder (`bert_<model>_<pooling>.in_progress/`), so
its epochs are timed, checkpointed and resumed as every other study's; the model's results file collects the seeds.

Example:

>>> from tf_transfer.studies.sentiment.sentiment_settings import SentimentBertSettings
>>> from tf_transfer.studies.sentiment import sentiment_bert
>>> settings = SentimentBertSettings(preset="all_minilm_l6_v2_en", mode="frozen", distribution="default")
>>> sentiment_bert.run_bert(data, "out/hart", settings)["f1_mean"]  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from typing import Optional

import numpy as np
from absl import logging

from tf_transfer.core import machine
from tf_transfer.core.errors import TransferError
from tf_transfer.core.setting_groups import InputSettings
from tf_transfer.data import feeds
from tf_transfer.data.examples import Examples
from tf_transfer.data.labelled_texts import LabelledTexts
from tf_transfer.models import freezing
from tf_transfer.models.sentence_features import build_feature_model, head_outputs
from tf_transfer.core import stats
from tf_transfer.studies.sentiment.sentiment_results import (TENSORBOARD_DIR, f1_description, fresh_event_dir,
                                                             held_out_split, read_json, refuse_other_settings, score)
from tf_transfer.studies import study_method
from tf_transfer.studies.sentiment.sentiment_settings import SentimentBertSettings
from tf_transfer.core import strategies
from tf_transfer.training import checkpoints, distributed, record, runner
from tf_transfer.training.run_folder import RunFolder, now
from tf_transfer.training.task import Task

# Batch size for computing frozen features and scoring: inference only, so it changes speed, never results.
INFERENCE_BATCH_SIZE = 64


def feed_settings(settings: SentimentBertSettings, seed: int) -> InputSettings:
    """The token feed's settings of BERT run r: its seed (`--seed` + r) orders the batches; bucketed padding."""
    return dataclasses.replace(settings.inputs, seed=seed, eval_batch_size=INFERENCE_BATCH_SIZE)


def _compile(model, num_classes: int, lr: float, strategy) -> None:
    import keras

    loss = (keras.losses.BinaryCrossentropy() if num_classes == 2
            else keras.losses.SparseCategoricalCrossentropy())
    # Several replicas: summed, with the feeds' weights, so that each step is one device's.
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=lr), loss=distributed.loss_under(strategy, loss))


def _predicted_classes(probabilities: np.ndarray, num_classes: int) -> np.ndarray:
    if num_classes == 2:
        return (probabilities[:, 0] >= 0.5).astype(np.int64)
    return probabilities.argmax(axis=-1).astype(np.int64)


def _encode(data: LabelledTexts, tokenizer, max_seq_length: int):
    from tf_transfer.data import inputs

    return inputs.encode(Examples(list(data.texts), None, data.labels), tokenizer, max_seq_length)


def _reseed(model, seed: int) -> None:
    """Sets every dropout seed generator of `model` from `seed` alone.

    Their states advance with every step and live in the backbone, which all seeds of a process share: without
    this, a seed's dropout masks depended on the seeds trained before it in the same process, so a run resumed in
    a new process could not repeat the numbers of an uninterrupted one.
    """
    generators = [v for v in model.variables if "seed_generator" in v.path]
    for index, variable in enumerate(generators):
        start = np.random.default_rng([seed, index]).integers(0, 2**31 - 1)
        variable.assign(np.asarray([start, 0], dtype=variable.dtype))


def _run_record(seed: int, scores: dict, summary: dict, **extra) -> dict:
    epochs = summary["epochs"]
    run = {"seed": seed, **scores, "train_time_s": epochs[-1]["train_time_s"],
           "train_cpu_s": epochs[-1]["train_cpu_s"], "final_loss": epochs[-1]["loss"], **extra,
           "distribution": summary["distribution"], "epochs": epochs}
    if summary.get("resumes"):
        run["resumes"] = summary["resumes"]
    return run


def _seed_folder(work_dir: str, seed: int, settings: SentimentBertSettings, strategy=None) -> RunFolder:
    """The run folder of `seed`: its unfinished run is resumed; the work of another seed or other settings (left by
    a kill between a seed's results and its clean-up, or by a run that was replaced) is discarded. Under a
    multi-worker strategy it is `work_dir` on the chief only, a temporary folder on the others (`RunFolder`)."""
    config = {**settings.comparable(), "seed": seed}
    try:
        return RunFolder(work_dir, config, strategy=strategy)
    except TransferError:  # raised on every worker alike (the chief's verdict)
        return RunFolder(work_dir, config, overwrite=True, strategy=strategy)


class SeedTask(Task):
    """One seed of one BERT model: `settings.epochs` epochs on the training rows. There is no validation split, so
    nothing is scored between epochs and nothing stops early; the held-out rows are scored once at the end
    (`result`). `model` says what is shared by the model's seeds (`FrozenFeatures` or `FineTuning`)."""

    summary_schema = "sentiment_bert"  # tf_transfer.training.run_record

    metric = "accuracy"

    def __init__(self, settings: SentimentBertSettings, seed: int, model, strategy):
        super().__init__(settings)
        self.seed, self.shared, self.strategy, self.table = seed, model, strategy, None

    def compared_settings(self) -> dict:
        return {**self.settings.comparable(), "seed": self.seed}

    def build(self, strategy) -> None:
        self.model, self.feed = self.shared.build(self.seed)
        self.backbone = getattr(self.shared, "backbone", None)

    def parameter_table(self):
        self.table = self.shared.parameter_table(self.model)
        return self.table

    def fresh_summary(self, table) -> dict:
        return {"seed": self.seed, "config": self.compared_settings(), "distribution": self.settings.distribution,
                "epochs": [], "compile_time_s": None, "completed": False, "started_at": now()}

    def warm_up(self):
        # The frozen head's small step compiles within its first epoch, as in the results so far.
        return super().warm_up() if self.shared.warms_up else None

    def resume_facts(self) -> dict:
        return {"distribution": self.settings.distribution}

    def evaluate(self):
        return {}, {}

    def result(self, summary: dict) -> dict:
        """The seed's entry in the model's results file: held-out scores, times and every epoch."""
        num_classes = self.shared.num_classes
        probabilities = self.feed.predict(self.model, "test")
        scores = score(self.feed.labels("test"), _predicted_classes(probabilities, num_classes), num_classes)
        extra = {}
        if self.table is not None:
            extra = {"compile_time_s": summary["compile_time_s"], "trainable_params": int(self.table[-1][1]),
                     "total_params": int(self.table[-1][2])}
        if self.backbone is not None:  # what the method trained (LoRA's rank and weights); nothing for freezing
            extra.update({k: v for k, v in study_method.facts(self.settings, self.backbone).items() if k != "method"})
        return _run_record(self.seed, scores, summary, **extra)


class FrozenFeatures:
    """Static features: the backbone runs once over every text in inference mode; each seed trains only the head."""

    warms_up = False

    def __init__(self, backbone, settings: SentimentBertSettings, num_classes: int, encoded_train, encoded_test,
                 strategy):
        self.settings, self.num_classes, self.strategy = settings, num_classes, strategy
        with strategy.scope():
            feature_model = build_feature_model(backbone, settings.pooling)
        start = time.perf_counter()
        if strategies.is_distributed(strategy):
            distributed.keras_distributed(feature_model, strategy)
        texts = feeds.TokenFeed({"train": encoded_train, "test": encoded_test},
                                feed_settings(settings, seed=0)).use_strategy(strategy)
        # Kept in float32 whatever the backbone computed in: the head is float32.
        self.features = {split: texts.predict(feature_model, split).astype(np.float32) for split in ("train", "test")}
        self.feature_time_s = time.perf_counter() - start
        # BinaryCrossentropy wants float targets; SparseCategoricalCrossentropy wants class indices.
        self.labels = {"train": encoded_train.labels.astype(np.float32 if num_classes == 2 else np.int64),
                       "test": encoded_test.labels}

    def describe(self) -> dict:
        return {"feature_time_s": self.feature_time_s, "num_features": int(self.features["train"].shape[1])}

    def build(self, seed: int):
        import keras

        keras.utils.set_random_seed(seed)
        with self.strategy.scope():
            features = keras.Input(shape=(self.features["train"].shape[1],), name="features")
            model = keras.Model(features, head_outputs(features, self.num_classes, self.settings.hidden_units))
            _compile(model, self.num_classes, self.settings.lr, self.strategy)
            model.optimizer.build(model.trainable_variables)  # its slots exist before a checkpoint is restored
        feed = feeds.ArrayFeed(self.features, self.labels, self.settings.batch_size, seed,
                               INFERENCE_BATCH_SIZE).use_strategy(self.strategy)
        distributed.keras_distributed(model, self.strategy)
        return model, feed

    def parameter_table(self, model):
        return None


class FineTuning:
    """Backbone blocks and head trained end to end by the settings' method; every seed starts again from the
    preset's weights. `reload` gives a fresh backbone: a seed after one whose method added weights of its own to the
    backbone (LoRA's) starts from a fresh one, as the first seed of a process does, so that a seed trained after
    others computes what it computes when a resumed process trains it first."""

    warms_up = True

    def __init__(self, backbone, settings: SentimentBertSettings, num_classes: int, encoded_train, encoded_test,
                 strategy, reload=None):
        self.backbone, self.settings, self.num_classes, self.strategy = backbone, settings, num_classes, strategy
        self.reload = reload
        self.encoded = {"train": encoded_train, "test": encoded_test}
        self.pretrained = [np.array(w) for w in backbone.get_weights()]
        self.shown_table = False

    def describe(self) -> dict:
        return {}

    def build(self, seed: int):
        model = self.model(seed)
        feed = feeds.TokenFeed(self.encoded, feed_settings(self.settings, seed)).use_strategy(self.strategy)
        return model, feed

    def model(self, seed: int):
        """The model of `seed`: the preset's weights, a fresh head, dropout seeded by `seed` alone."""
        import keras

        if len(self.backbone.weights) != len(self.pretrained):  # the method added weights to it for an earlier seed
            self.backbone = self.reload()  # before seeding: building a backbone draws seeds
        keras.utils.set_random_seed(seed)
        self.backbone.set_weights(self.pretrained)
        settings = self.settings
        with self.strategy.scope():
            feature_model = build_feature_model(self.backbone, settings.pooling)
            outputs = head_outputs(feature_model.output, self.num_classes, settings.hidden_units)
            model = keras.Model(feature_model.inputs, outputs, name=f"bert_{settings.model_name}")
            study_method.apply(self.backbone, settings, settings.k)  # before compile: Keras reads it there
            _compile(model, self.num_classes, settings.lr, self.strategy)
        _reseed(model, seed)
        return model

    def parameter_table(self, model) -> list:
        table = freezing.parameter_table(model, self.backbone)
        if not self.shown_table:
            print(f"trainable parameters per block (bert {self.settings.model_name}):")
            print(freezing.format_table(table), flush=True)
            self.shown_table = True
        return table


def _load_results(path: str, settings: SentimentBertSettings, data: LabelledTexts, overwrite: bool) -> Optional[dict]:
    if overwrite or not os.path.exists(path):
        return None
    existing = read_json(path)
    wanted = {**settings.comparable(), **data.identity()}
    held = {**existing.get("settings", {}), **{key: existing.get(key) for key in data.identity()}}
    refuse_other_settings(path, {"precision": "float32", **held}, wanted, "runs")  # older files: float32
    return existing


def _remove_work(work_dir: str) -> None:
    """Deletes the in-progress folder's files (only the kinds a run folder holds) and the folder."""
    if os.path.isdir(work_dir):
        checkpoints.clear(work_dir)
        if not os.listdir(work_dir):
            os.rmdir(work_dir)


def write_bert_events(output_dir: str, settings: SentimentBertSettings, run: dict) -> None:
    """TensorBoard for one seed: per epoch `loss`, `epoch_time_s`, `train_time_s` (step = epoch), the held-out
    `accuracy` and `f1` at the last epoch, and an HParams entry with the model's settings and the seed.

    Written once the seed is done, from its records, so that a resumed seed leaves one events file, not two."""
    logdir = fresh_event_dir(output_dir, settings.stem, f"seed{run['seed']}")
    hparams = {**settings.comparable(), "model": f"BERT {settings.model_name} ({settings.pooling})",
               "seed": run["seed"], **study_method.hparams(settings)}
    recorder = record.TensorBoardRecorder(logdir, hparams, f"{settings.stem}/seed{run['seed']}")
    for epoch in run["epochs"]:
        recorder.scalars(epoch["epoch"], {key: epoch.get(key) for key in ("loss", "epoch_time_s", "train_time_s")})
    recorder.scalars(run["epochs"][-1]["epoch"], {"accuracy": run["accuracy"], "f1": run["f1"]})
    recorder.close()


def run_bert(data: LabelledTexts, output_dir: str, settings: SentimentBertSettings, overwrite: bool = False,
             strategy=None) -> dict:
    """Trains `settings.runs` seeds of one BERT model on one held-out split; returns the model's results file.

    Resuming: runs already in `output_dir/bert_<model>_<pooling>.json` with the same settings and data are kept and
    not repeated (the file is rewritten after every run); the seed in training is a run folder in
    `bert_<model>_<pooling>.in_progress/` (epoch e of a seed always has the same batches), so a killed run loses
    at most the epoch in progress. With every seed done it says so and trains nothing; `overwrite` starts afresh.
    `strategy` (default: `settings.distribution`'s) holds the backbone, model and optimizer.

    Under `--distribution=multi_worker` the workers join first, so that the chief can tell the others what
    `output_dir` holds; only the chief writes there (results file, TensorBoard, the seed's work folder), the other
    workers a temporary folder they remove (docs/distributed.md).
    """
    if strategy is None and settings.distribution == "multi_worker":
        strategy = strategies.make_strategy(settings.distribution)
    with distributed.lost_workers(strategy):
        return _run_bert(data, output_dir, settings, overwrite, strategy)


def _run_bert(data: LabelledTexts, output_dir: str, settings: SentimentBertSettings, overwrite: bool,
              strategy) -> dict:
    """`run_bert` once a multi-worker cluster (if any) has joined."""
    chief = strategies.is_chief(strategy)
    path = os.path.join(output_dir, settings.file_name)
    work_dir = os.path.join(output_dir, settings.work_name)
    existing = distributed.from_chief(strategy, lambda: _load_results(path, settings, data, overwrite))
    if overwrite and chief:
        _remove_work(work_dir)
        shutil.rmtree(os.path.join(output_dir, TENSORBOARD_DIR, settings.stem), ignore_errors=True)
    train_data, test_data = held_out_split(data, settings.test_fraction, settings.seed)
    done = {run["seed"]: run for run in (existing or {}).get("runs", [])}
    seeds = [settings.seed + r for r in range(settings.runs)]
    todo = [seed for seed in seeds if seed not in done]
    if not todo:
        if chief:
            _remove_work(work_dir)  # left by a kill between the results file and the clean-up
        print(f"{path} already holds all {settings.runs} run(s) (seeds {seeds[0]}-{seeds[-1]}); nothing to train "
              "(pass --overwrite to start afresh)", flush=True)
        return existing
    strategy, loaded, encoded_train, encoded_test = _load(settings, strategy, train_data, test_data)
    results = _results_header(existing, settings, data, loaded, encoded_train, encoded_test)
    if chief:
        os.makedirs(output_dir, exist_ok=True)
    if settings.k == 0:
        shared = FrozenFeatures(loaded.backbone, settings, data.num_classes, encoded_train, encoded_test, strategy)
    else:
        shared = FineTuning(loaded.backbone, settings, data.num_classes, encoded_train, encoded_test, strategy,
                            reload=lambda: _backbone(settings, strategy).backbone)
    described = shared.describe()
    if existing:
        # The first attempt's feature time stays the model's; what a later attempt spent again is listed here.
        results.setdefault("resumes", []).append({
            "seeds_done": sorted(done), **described, "machine": machine.describe(), "code": record.code_version(),
            "at": now()})
    else:
        results.update({**described, "machine": machine.describe(), "code": record.code_version()})
    results.setdefault("runs", [])
    if chief:
        record.write_json_atomic(path, results)  # the settings are on disk before any training: a rerun checks them
    for seed in todo:
        folder = _seed_folder(work_dir, seed, settings, strategy)
        task = SeedTask(settings, seed, shared, strategy)
        try:
            done[seed] = run = task.result(runner.train(task, folder, strategy))
        finally:
            folder.cleanup()  # a non-chief worker's temporary folder
        results["runs"] = [done[s] for s in sorted(done)]
        results.update(stats.summarise({m: [r[m] for r in results["runs"]] for m in ("accuracy", "f1")}))
        results["completed"] = all(s in done for s in seeds)
        if chief:
            write_bert_events(output_dir, settings, run)
            record.write_json_atomic(path, results)  # the run is kept first, then its work is dropped
            _remove_work(work_dir)
        logging.info("%s seed %d: accuracy %.4f, F1 %.4f, %.1f s", settings.file_name, seed, run["accuracy"],
                     run["f1"], run["train_time_s"])
    return read_json(path) if chief else results


def _load(settings: SentimentBertSettings, strategy, train_data, test_data):
    """The strategy, the backbone from its preset and both parts encoded. TensorFlow is imported only here, after
    the data has been read and checked, so bad input fails fast."""
    import keras

    strategy = strategy if strategy is not None else strategies.make_strategy(settings.distribution)
    if settings.batch_size < strategy.num_replicas_in_sync:
        raise TransferError(f"--batch_size={settings.batch_size} is smaller than the "
                            f"{strategy.num_replicas_in_sync} replicas of --distribution={settings.distribution}")
    # The policy is global in Keras and read when layers are built: set it (float32 included) before loading.
    keras.mixed_precision.set_global_policy(settings.precision)
    loaded = _backbone(settings, strategy)
    encoded_train = _encode(train_data, loaded.tokenizer, settings.max_seq_length)
    encoded_test = _encode(test_data, loaded.tokenizer, settings.max_seq_length)
    return strategy, loaded, encoded_train, encoded_test


def _backbone(settings: SentimentBertSettings, strategy):
    """The preset loaded under `strategy` (`loader.load_model`'s result; the blocks trained are `k`)."""
    from tf_transfer.models import loader

    with strategy.scope():
        return loader.load_model(settings.model, supported=("bert",), purpose="the sentiment study")


def _results_header(existing, settings: SentimentBertSettings, data: LabelledTexts, loaded, encoded_train,
                    encoded_test) -> dict:
    """The model's results file before (more) seeds are trained: its settings, data and what it was made with."""
    results = existing or {}
    results.update({
        "model": settings.model_name,
        "method": settings.method,
        "pooling": settings.pooling,
        "settings": settings.comparable(),
        "precision": settings.precision,
        "data": os.path.abspath(data.source),
        **data.identity(),
        "preset_source": loaded.source,
        "num_layers": int(loaded.backbone.num_layers),
        "f1_definition": f1_description(data),
        "examples": {"train": len(encoded_train), "test": len(encoded_test)},
        # Texts that fill the token budget were probably cut; many of them mean --max_seq_length is too small.
        "texts_at_max_seq_length": int(np.sum(np.concatenate([encoded_train.lengths, encoded_test.lengths])
                                              >= settings.max_seq_length)),
        "completed": False,
    })
    return results
