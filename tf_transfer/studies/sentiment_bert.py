"""Hart's BERT models: one model of the study trained once per seed on one held-out split and scored on the rest.

Frozen (k=0): the features are computed once, in inference mode, and each seed trains only the dense head.
Otherwise each seed starts from the preset's weights again and trains backbone blocks and head end to end. Every
seed is a run of the training engine in the model's work folder (`bert_<model>_<pooling>.in_progress/`), so its
epochs are timed, checkpointed and resumed as every other study's; the model's results file collects the seeds.

Example:

>>> from tf_transfer.studies.sentiment import BertSettings
>>> from tf_transfer.studies import sentiment_bert
>>> settings = BertSettings(preset="all_minilm_l6_v2_en", mode="frozen", distribution="default")
>>> sentiment_bert.run_bert(data, "out/hart", settings)["f1_mean"]  # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import shutil
import time
from typing import Optional

import numpy as np
from absl import logging

from tf_transfer.core import machine
from tf_transfer.core.errors import TransferError
from tf_transfer.data.examples import Examples
from tf_transfer.data.labelled_texts import LabelledTexts
from tf_transfer.models import freezing
from tf_transfer.models.sentence_features import build_feature_model, head_outputs
from tf_transfer.reporting import stats
from tf_transfer.studies.sentiment import (TENSORBOARD_DIR, BertSettings, f1_description, fresh_event_dir,
                                           held_out_split, read_json, refuse_other_settings, score)
from tf_transfer.core import strategies
from tf_transfer.training import checkpoints, distributed, record
from tf_transfer.training.run_folder import RunFolder, now

# Batch size for computing frozen features and scoring: inference only, so it changes speed, never results.
INFERENCE_BATCH_SIZE = 64


def _compile(model, num_classes: int, lr: float, strategy) -> None:
    import keras

    loss = (keras.losses.BinaryCrossentropy() if num_classes == 2
            else keras.losses.SparseCategoricalCrossentropy())
    # Several replicas: summed, with `_planned`'s weights, so that each step is one device's.
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=lr), loss=distributed.loss_under(strategy, loss))


def _predicted_classes(probabilities: np.ndarray, num_classes: int) -> np.ndarray:
    if num_classes == 2:
        return (probabilities[:, 0] >= 0.5).astype(np.int64)
    return probabilities.argmax(axis=-1).astype(np.int64)


def _planned(strategy, make_dataset, plan: list, training: bool = False):
    """`make_dataset(plan)`, or under a strategy with several replicas or workers every batch of `plan` split into
    one share per replica (`inputs.distribute`, as the GLUE feeds do): a step still sees the single-device batch,
    and each worker reads only its own replicas' shares. `training` batches are weighted per example so that the
    replicas' summed gradients are one device's (`inputs.distribute`'s `loss_units`)."""
    from tf_transfer.core import strategies
    from tf_transfer.data import inputs

    if strategy is None or not strategies.is_distributed(strategy):
        return make_dataset(plan)
    return inputs.distribute(strategy, lambda shares, fill: make_dataset(shares), plan,
                             loss_units=len if training else None)


def _predict_in_order(model, encoded, strategy=None) -> np.ndarray:
    """Predicts `encoded` in length-sorted batches (little padding) and returns rows in the original order."""
    from tf_transfer.data import inputs

    plan = inputs.plan_eval_batches(encoded.lengths, INFERENCE_BATCH_SIZE, "bucket")
    dataset = _planned(strategy, lambda p: inputs.to_dataset(encoded, p, "bucket", 16, with_labels=False), plan)
    outputs = model.predict(dataset, verbose=0, steps=getattr(dataset, "num_steps", None))
    ordered = np.empty_like(outputs)
    ordered[np.concatenate(plan)] = outputs
    return ordered


def _encode(data: LabelledTexts, tokenizer, max_seq_length: int):
    from tf_transfer.data import inputs

    return inputs.encode(Examples(list(data.texts), None, data.labels), tokenizer, max_seq_length)


def _array_dataset(arrays: tuple, batch_size: int):
    """In-memory arrays as consecutive batches of `batch_size` (the last may be smaller), the way Keras batches
    arrays given to fit/predict, but without tf.data autotuning (see `inputs.prefetched`)."""
    import tensorflow as tf

    from tf_transfer.data import inputs

    dataset = tf.data.Dataset.from_tensor_slices(arrays if len(arrays) > 1 else arrays[0]).batch(batch_size)
    return inputs.prefetched(dataset, math.ceil(len(arrays[0]) / batch_size))


def _array_batches(arrays: tuple, batch_size: int, strategy):
    """`_array_dataset`, or under a strategy with several replicas or workers the same consecutive batches split
    into one share per replica (`_planned`)."""
    import tensorflow as tf

    from tf_transfer.core import strategies
    from tf_transfer.data import inputs

    if strategy is None or not strategies.is_distributed(strategy):
        return _array_dataset(arrays, batch_size)
    n = len(arrays[0])
    plan = [np.arange(start, min(start + batch_size, n)) for start in range(0, n, batch_size)]

    def make_dataset(share_plan):
        signature = tuple(tf.TensorSpec((None, *a.shape[1:]), tf.as_dtype(a.dtype)) for a in arrays)
        if len(arrays) == 1:
            signature = signature[0]
        dataset = tf.data.Dataset.from_generator(
            lambda: ((tuple(a[indices] for a in arrays) if len(arrays) > 1 else arrays[0][indices])
                     for indices in share_plan), output_signature=signature)
        return inputs.prefetched(dataset, len(share_plan))

    return _planned(strategy, make_dataset, plan, training=len(arrays) > 1)  # features alone: for predict


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


def _seed_folder(work_dir: str, seed: int, settings: BertSettings, strategy=None) -> RunFolder:
    """The started run folder of `seed`: its unfinished run is resumed; the work of another seed or other settings
    (left by a kill between a seed's results and its clean-up, or by a run that was replaced) is discarded. Under a
    multi-worker strategy it is `work_dir` on the chief only, a temporary folder on the others (`RunFolder`)."""
    config = {**settings.comparable(), "seed": seed}
    try:
        folder = RunFolder(work_dir, config, strategy=strategy)
    except TransferError:  # raised on every worker alike (the chief's verdict)
        folder = RunFolder(work_dir, config, overwrite=True, strategy=strategy)
    folder.start({"seed": seed, "config": config, "distribution": settings.distribution, "epochs": [],
                  "compile_time_s": None, "completed": False, "started_at": now()})
    return folder


def _fit_seed(folder: RunFolder, model, train_epoch, strategy, compile_time_s: Optional[float],
              distribution: str) -> dict:
    """Trains the epochs `folder` does not hold yet; returns its summary. There is no validation split, so nothing
    is scored between epochs and nothing stops early."""
    from tf_transfer.training.engine import Engine

    engine = Engine(folder, "accuracy", folder.summary["config"]["epochs"], strategy=strategy)
    if engine.restore_last(model, compile_time_s=compile_time_s, distribution=distribution) is None:
        folder.summary["compile_time_s"] = compile_time_s
    engine.fit(model, train_epoch, lambda: ({}, {}))
    return folder.summary


def _run_record(seed: int, scores: dict, summary: dict, **extra) -> dict:
    epochs = summary["epochs"]
    run = {"seed": seed, **scores, "train_time_s": epochs[-1]["train_time_s"],
           "train_cpu_s": epochs[-1]["train_cpu_s"], "final_loss": epochs[-1]["loss"], **extra,
           "distribution": summary["distribution"], "epochs": epochs}
    if summary.get("resumes"):
        run["resumes"] = summary["resumes"]
    return run


class _FrozenTrainer:
    """Static features: the backbone runs once over every text in inference mode; seeds train only the head."""

    def __init__(self, backbone, settings: BertSettings, num_classes: int, encoded_train, encoded_test, strategy):
        self.settings, self.num_classes, self.strategy = settings, num_classes, strategy
        with strategy.scope():
            feature_model = build_feature_model(backbone, settings.pooling)
        start = time.perf_counter()
        # Kept in float32 whatever the backbone computed in: the head is float32.
        if strategies.is_distributed(strategy):
            distributed.keras_distributed(feature_model, strategy)
        self.train_features = _predict_in_order(feature_model, encoded_train, strategy).astype(np.float32)
        self.test_features = _predict_in_order(feature_model, encoded_test, strategy).astype(np.float32)
        self.feature_time_s = time.perf_counter() - start
        self.train_labels, self.test_labels = encoded_train.labels, encoded_test.labels

    def describe(self) -> dict:
        return {"feature_time_s": self.feature_time_s, "num_features": int(self.train_features.shape[1])}

    def run(self, seed: int, folder: RunFolder) -> dict:
        import keras

        from tf_transfer.training.engine import keras_epoch

        keras.utils.set_random_seed(seed)
        with self.strategy.scope():
            features = keras.Input(shape=(self.train_features.shape[1],), name="features")
            model = keras.Model(features, head_outputs(features, self.num_classes, self.settings.hidden_units))
            _compile(model, self.num_classes, self.settings.lr, self.strategy)
            model.optimizer.build(model.trainable_variables)  # its slots exist before a checkpoint is restored
        # BinaryCrossentropy wants float targets; SparseCategoricalCrossentropy wants class indices.
        targets = self.train_labels.astype(np.float32 if self.num_classes == 2 else np.int64)

        def epoch_batches(epoch):
            # Shuffled afresh each epoch, as fit(shuffle=True) would, but from (seed, epoch) alone: resumable.
            order = np.random.default_rng([seed, epoch]).permutation(len(targets))
            return _array_batches((self.train_features[order], targets[order]), self.settings.batch_size,
                                  self.strategy)

        steps = math.ceil(len(targets) / self.settings.batch_size)
        distributed.keras_distributed(model, self.strategy)
        # No warm-up: compiling the small head's step stays part of its first epoch, as in the results so far.
        summary = _fit_seed(folder, model, keras_epoch(model, epoch_batches, steps, len(targets)), self.strategy,
                            None, self.settings.distribution)
        test_batches = _array_batches((self.test_features,), INFERENCE_BATCH_SIZE, self.strategy)
        probabilities = model.predict(test_batches, verbose=0, steps=getattr(test_batches, "num_steps", None))
        scores = score(self.test_labels, _predicted_classes(probabilities, self.num_classes), self.num_classes)
        return _run_record(seed, scores, summary)


class _FineTuner:
    """Backbone blocks and head trained end to end; every seed starts again from the preset's weights."""

    def __init__(self, backbone, settings: BertSettings, num_classes: int, encoded_train, encoded_test, strategy):
        self.backbone, self.settings, self.num_classes, self.strategy = backbone, settings, num_classes, strategy
        self.encoded_train, self.encoded_test = encoded_train, encoded_test
        self.pretrained = [np.array(w) for w in backbone.get_weights()]
        self.table = None

    def describe(self) -> dict:
        return {}

    def _build(self):
        import keras

        with self.strategy.scope():
            feature_model = build_feature_model(self.backbone, self.settings.pooling)
            outputs = head_outputs(feature_model.output, self.num_classes, self.settings.hidden_units)
            model = keras.Model(feature_model.inputs, outputs, name=f"bert_{self.settings.model_name}")
            freezing.set_trainable_layers(self.backbone, self.settings.k)  # before compile: Keras reads it there
            _compile(model, self.num_classes, self.settings.lr, self.strategy)
        return model

    def run(self, seed: int, folder: RunFolder) -> dict:
        import keras

        from tf_transfer.data import inputs
        from tf_transfer.training.engine import keras_epoch, warm_up

        keras.utils.set_random_seed(seed)
        self.backbone.set_weights(self.pretrained)
        model = self._build()
        _reseed(model, seed)
        table = freezing.parameter_table(model, self.backbone)
        if self.table is None:
            print(f"trainable parameters per block (bert {self.settings.model_name}):")
            print(freezing.format_table(table), flush=True)
            self.table = table
        train, batch_size = self.encoded_train, self.settings.batch_size
        first_plan = inputs.plan_train_batches(train.lengths, batch_size, seed, 1, "bucket", train.max_seq_length, 16)
        shapes = inputs.distinct_shapes(train, first_plan, "bucket", 16)
        batches = lambda plan: inputs.to_dataset(train, plan, "bucket", 16)  # noqa: E731
        compile_time_s = warm_up(model, _planned(self.strategy, batches, shapes, training=True), self.strategy)

        def epoch_batches(epoch):
            if not strategies.is_distributed(self.strategy):
                return inputs.train_dataset(train, batch_size, seed, epoch)
            return _planned(self.strategy, batches, inputs.plan_train_batches(
                train.lengths, batch_size, seed, epoch, "bucket", train.max_seq_length, 16), training=True)

        # Every epoch has as many batches as the first (inputs.plan_train_batches).
        train_epoch = keras_epoch(model, epoch_batches, len(first_plan), len(train))
        summary = _fit_seed(folder, model, train_epoch, self.strategy, compile_time_s, self.settings.distribution)
        probabilities = _predict_in_order(model, self.encoded_test, self.strategy)
        scores = score(self.encoded_test.labels, _predicted_classes(probabilities, self.num_classes),
                       self.num_classes)
        return _run_record(seed, scores, summary, compile_time_s=summary["compile_time_s"],
                           trainable_params=int(table[-1][1]), total_params=int(table[-1][2]))


def _load_results(path: str, settings: BertSettings, data: LabelledTexts, overwrite: bool) -> Optional[dict]:
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


def write_bert_events(output_dir: str, settings: BertSettings, run: dict) -> None:
    """TensorBoard for one seed: per epoch `loss`, `epoch_time_s`, `train_time_s` (step = epoch), the held-out
    `accuracy` and `f1` at the last epoch, and an HParams entry with the model's settings and the seed.

    Written once the seed is done, from its records, so that a resumed seed leaves one events file, not two."""
    logdir = fresh_event_dir(output_dir, settings.stem, f"seed{run['seed']}")
    hparams = {**settings.comparable(), "model": f"BERT {settings.model_name} ({settings.pooling})",
               "seed": run["seed"]}
    recorder = record.TensorBoardRecorder(logdir, hparams, f"{settings.stem}/seed{run['seed']}")
    for epoch in run["epochs"]:
        recorder.scalars(epoch["epoch"], {key: epoch.get(key) for key in ("loss", "epoch_time_s", "train_time_s")})
    recorder.scalars(run["epochs"][-1]["epoch"], {"accuracy": run["accuracy"], "f1": run["f1"]})
    recorder.close()


def run_bert(data: LabelledTexts, output_dir: str, settings: BertSettings, overwrite: bool = False,
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


def _run_bert(data: LabelledTexts, output_dir: str, settings: BertSettings, overwrite: bool, strategy) -> dict:
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

    # TensorFlow is imported only after the data has been read and checked, so bad input fails fast.
    import keras

    from tf_transfer.models import backbones

    strategy = strategy if strategy is not None else strategies.make_strategy(settings.distribution)
    if settings.batch_size < strategy.num_replicas_in_sync:
        raise TransferError(f"--batch_size={settings.batch_size} is smaller than the "
                            f"{strategy.num_replicas_in_sync} replicas of --distribution={settings.distribution}")
    # The policy is global in Keras and read when layers are built: set it (float32 included) before loading.
    keras.mixed_precision.set_global_policy(settings.precision)
    with strategy.scope():
        loaded = backbones.load_preset(settings.preset, supported=("bert",), purpose="the sentiment study")
    backbone = loaded.backbone
    freezing.check_trainable_layers(settings.k, backbone.num_layers)
    logging.info("preset %s: weights from %s", settings.preset, loaded.source)
    encoded_train = _encode(train_data, loaded.tokenizer, settings.max_seq_length)
    encoded_test = _encode(test_data, loaded.tokenizer, settings.max_seq_length)

    results = existing or {}
    continuing = bool(results)
    results.update({
        "model": settings.model_name,
        "pooling": settings.pooling,
        "settings": settings.comparable(),
        "precision": settings.precision,
        "data": os.path.abspath(data.source),
        **data.identity(),
        "preset_source": loaded.source,
        "num_layers": int(backbone.num_layers),
        "f1_definition": f1_description(data),
        "examples": {"train": len(train_data), "test": len(test_data)},
        # Texts that fill the token budget were probably cut; many of them mean --max_seq_length is too small.
        "texts_at_max_seq_length": int(np.sum(np.concatenate([encoded_train.lengths, encoded_test.lengths])
                                              >= settings.max_seq_length)),
        "completed": False,
    })
    if chief:
        os.makedirs(output_dir, exist_ok=True)
    trainer = (_FrozenTrainer if settings.k == 0 else _FineTuner)(backbone, settings, data.num_classes,
                                                                   encoded_train, encoded_test, strategy)
    described = trainer.describe()
    if continuing:
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
        try:
            run = trainer.run(seed, folder)
        finally:
            folder.cleanup()  # a non-chief worker's temporary folder
        done[seed] = run
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
