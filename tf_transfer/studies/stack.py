"""Stack-and-finetune (arXiv 1907.05338): train a head on a frozen BERT, then fine-tune BERT and the head together.

Strategies:
  * `stack_and_finetune`: phase 1 trains only the head (the whole backbone, pooler included, frozen) at
    `phase1_lr`, for `phase1_epochs` or until the head starts to overfit: as soon as an epoch leaves training
    accuracy more than `max_gap` above validation accuracy, phase 1 ends and that epoch's head weights are thrown
    away (the head is restored to what it was before the epoch), except on phase 1's first epoch, which is kept:
    undoing it would hand phase 2 the untrained head, and on a small validation set the gap after one epoch is
    often noise. Phase 2 unfreezes everything, recompiles with a
    fresh optimizer (no moments carried over from phase 1) and trains at `phase2_lr` for the remaining epochs of
    `max_epochs`.
  * `finetune_only`: phase 2 alone, for `max_epochs`.
  * `stack_only`: phase 1 alone, for `max_epochs` (no gap rule: there is no phase to hand over to).

Training accuracy for the gap rule is measured like validation accuracy (inference mode, no dropout) on a fixed
seeded sample of the training set as large as the validation set, so that the two numbers are comparable; the
running accuracy that Keras reports during an epoch is dropout-noised and averaged over changing weights.

Every epoch of either phase is checkpointed and an interrupted run resumes after its last epoch (`train_head`);
`precision` sets the backbone's Keras policy, while heads, logits and losses stay float32.

Both phases use BERT's AdamW (`tf_transfer.train.build_optimizer`: decoupled weight decay 0.01, not on LayerNorm
or bias, gradients clipped to norm 1.0) at a constant rate. `summary.json` has the core trainer's schema, every
epoch marked with its `phase`, plus `phases` (one entry per phase: rate, what trained, epochs, why it ended).

Example:

>>> from tf_transfer import stack_training
>>> config = stack_training.StackConfig(
...     task="quora", data="../shared/data/cs224n_minbert/quora-dev.csv", head="bimpm",
...     strategy="stack_and_finetune", preset="all_minilm_l6_v2_en", phase1_epochs=1, max_epochs=2,
...     batch_size=16, max_train_examples=256)
>>> summary = stack_training.run_stack(config, "/tmp/stack")  # doctest: +SKIP
>>> [(e["epoch"], e["phase"], e["val"]["accuracy"]) for e in summary["epochs"]]  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
import types
import warnings
from typing import Optional

import numpy as np
from absl import logging

from tf_transfer.core import metrics as metrics_lib
from tf_transfer.data import feeds
from tf_transfer.data import inputs
from tf_transfer.core import ner_metrics
from tf_transfer.training import record
from tf_transfer.data import stack_data
from tf_transfer.core.config import PRECISIONS
from tf_transfer.core.errors import TransferError

TASKS = ("conll_ner", "classification", "quora")
STRATEGIES = ("stack_and_finetune", "finetune_only", "stack_only")
HEADS = ("linear", "mlp", "bilstm", "cnn", "highway_lstm", "transformer", "bimpm", "sim_transformer")
PAIR_HEADS = ("bimpm", "sim_transformer")
# Which heads each task can use: tagging needs a per-token output (no cnn, no pair heads); matching needs pairs.
TASK_HEADS = {
    "conll_ner": ("linear", "mlp", "bilstm", "highway_lstm", "transformer"),
    "classification": ("linear", "mlp", "bilstm", "cnn", "highway_lstm", "transformer"),
    "quora": HEADS,
}
PRIMARY_METRIC = {"conll_ner": "f1", "classification": "accuracy", "quora": "accuracy"}
FROZEN = "none"  # `trainable_layers` of phase 1: no part of the backbone trains, not even the pooler
ENSEMBLE_FILE = "ensemble.json"
PROBABILITIES_FILE = "probabilities.npz"  # an ensemble member's final probabilities, for resuming the ensemble


def _choice(flag: str, value, allowed) -> None:
    if value not in allowed:
        raise TransferError(f"--{flag}={value} is not one of {', '.join(allowed)}")


@dataclasses.dataclass(frozen=True)
class StackConfig:
    """Every setting of one stack-and-finetune run (or ensemble). Defaults are the paper's where it gives them."""

    task: str
    data: str
    head: Optional[str] = None
    strategy: str = "stack_and_finetune"
    phase1_epochs: int = 3
    max_gap: float = 0.02
    phase1_lr: float = 1e-3
    phase2_lr: float = 2e-5
    max_epochs: int = 6
    batch_size: int = 32
    max_seq_length: int = 128
    seed: int = 0
    preset: str = "bert_base_en_uncased"
    validation_fraction: float = 0.1
    test_data: Optional[str] = None
    max_train_examples: Optional[int] = None
    ensemble: tuple = ()
    patience: int = 0
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    dropout: float = 0.1
    head_units: int = 128
    perspectives: int = 20
    text_column: Optional[str] = None
    label_column: Optional[str] = None
    eval_batch_size: int = 64
    bucket_step: int = 16
    precision: str = "float32"  # the backbone's Keras policy; heads, logits and losses are float32 under any

    def __post_init__(self):
        object.__setattr__(self, "ensemble", tuple(self.ensemble))
        _choice("task", self.task, TASKS)
        _choice("strategy", self.strategy, STRATEGIES)
        if not self.data:
            raise TransferError("--data is required: the training file of --task")
        if self.head and self.ensemble:
            raise TransferError("give --head or --ensemble, not both")
        if not self.head and not self.ensemble:
            raise TransferError(f"--head is required: one of {', '.join(TASK_HEADS[self.task])}")
        if self.ensemble and (len(self.ensemble) < 2 or len(set(self.ensemble)) != len(self.ensemble)):
            raise TransferError(f"--ensemble needs two or more different heads, got {','.join(self.ensemble)}")
        for head in self.heads:
            _choice("head" if self.head else "ensemble", head, HEADS)
            if head not in TASK_HEADS[self.task]:
                raise TransferError(f"head {head} does not fit --task={self.task}: use one of "
                                    f"{', '.join(TASK_HEADS[self.task])}")
        finite = lambda x: isinstance(x, (int, float)) and math.isfinite(x)  # noqa: E731
        checks = [
            (self.phase1_epochs >= 1, "--phase1_epochs must be at least 1"),
            (self.max_epochs >= 1, "--max_epochs must be at least 1"),
            (self.strategy != "stack_and_finetune" or self.phase1_epochs < self.max_epochs,
             f"--phase1_epochs={self.phase1_epochs} leaves no epoch for phase 2 within --max_epochs="
             f"{self.max_epochs}: --max_epochs counts both phases"),
            (finite(self.max_gap) and self.max_gap >= 0, "--max_gap must be a number >= 0"),
            (finite(self.phase1_lr) and self.phase1_lr > 0, "--phase1_lr must be a positive number"),
            (finite(self.phase2_lr) and self.phase2_lr > 0, "--phase2_lr must be a positive number"),
            (self.batch_size >= 1, "--batch_size must be at least 1"),
            (self.max_seq_length >= 8, "--max_seq_length must be at least 8"),
            (0.0 < self.validation_fraction < 1.0, "--validation_fraction must be between 0 and 1 (exclusive)"),
            (self.max_train_examples is None or self.max_train_examples >= 1, "--max_train_examples must be >= 1"),
            (self.patience >= 0, "--patience must be >= 0 (0 turns early stopping off)"),
            (self.weight_decay >= 0, "--weight_decay must be >= 0"),
            (self.clip_norm >= 0, "--clip_norm must be >= 0 (0 turns clipping off)"),
            (0.0 <= self.dropout < 1.0, "--dropout must be in [0, 1)"),
            (self.head_units >= 1, "--head_units must be at least 1"),
            (self.perspectives >= 1, "--perspectives must be at least 1"),
            (self.eval_batch_size >= 1 and self.bucket_step >= 1, "batch and bucket sizes must be at least 1"),
            (self.precision in PRECISIONS, f"--precision must be one of {', '.join(PRECISIONS)}, got "
                                           f"{self.precision!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise TransferError(message)

    @property
    def heads(self) -> tuple:
        return self.ensemble or (self.head,)

    @property
    def metric(self) -> str:
        return PRIMARY_METRIC[self.task]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def default_output_dir(self, root: str = "runs") -> str:
        return os.path.join(root, "stack", self.task, f"{'+'.join(self.heads)}_{self.strategy}", f"seed{self.seed}")


@dataclasses.dataclass(frozen=True)
class Phase:
    number: int  # 1: head on the frozen backbone; 2: everything
    lr: float
    last_epoch: int  # the run's epoch (counted over both phases) at which the phase ends at the latest
    gap_rule: bool  # end the phase (and undo the epoch, unless the phase's first) when train accuracy runs ahead


def plan_phases(config: StackConfig) -> list:
    if config.strategy == "finetune_only":
        return [Phase(2, config.phase2_lr, config.max_epochs, False)]
    if config.strategy == "stack_only":
        return [Phase(1, config.phase1_lr, config.max_epochs, False)]
    return [Phase(1, config.phase1_lr, config.phase1_epochs, True),
            Phase(2, config.phase2_lr, config.max_epochs, False)]


# --- data -------------------------------------------------------------------------------------------------------


def read_data(config: StackConfig) -> types.SimpleNamespace:
    """Reads --data (split into train and validation) and --test_data; no TensorFlow yet, so bad files fail fast."""
    test = None
    if config.task == "conll_ner":
        full = stack_data.read_conll(config.data)
        test = stack_data.read_conll(config.test_data) if config.test_data else None
        label_names = stack_data.tag_vocabulary(*[s for s in (full, test) if s is not None])
        skipped = {}
    else:
        if config.task == "classification":
            full = stack_data.read_texts(config.data, config.text_column, config.label_column)
            if config.test_data:
                test = stack_data.read_texts(config.test_data, config.text_column, config.label_column,
                                             full.label_names)
        else:
            full = stack_data.read_pairs(config.data)
            test = stack_data.read_pairs(config.test_data) if config.test_data else None
        label_names = full.label_names
        skipped = {"train": full.skipped_rows, **({"test": test.skipped_rows} if test is not None else {})}
        if len(label_names) < 2:
            raise TransferError(f"{config.data}: every row has the label {label_names[0]!r}; need two classes or more")
    train, validation = stack_data.split(full, config.validation_fraction, config.seed)
    if config.max_train_examples is not None and config.max_train_examples < len(train):
        train = train.take(range(config.max_train_examples))
    splits = {"train": train, "validation": validation, **({"test": test} if test is not None else {})}
    return types.SimpleNamespace(splits=splits, label_names=tuple(label_names), skipped=skipped)


def train_sample_indices(n_train: int, n_validation: int, seed: int) -> np.ndarray:
    """The training examples scored for the gap rule: a fixed seeded sample as large as the validation set."""
    size = min(n_train, n_validation)
    return np.sort(np.random.default_rng([seed, 7]).choice(n_train, size, replace=False))


def encode(config: StackConfig, data, tokenizer, pair_head: bool) -> dict:
    """Encodes every split for one kind of head, plus `train_sample` for the gap rule."""
    encoded = {}
    for name, split in data.splits.items():
        if config.task == "conll_ner":
            encoded[name] = stack_data.encode_sentences(split, tokenizer, config.max_seq_length, data.label_names)
        elif pair_head:
            encoded[name] = stack_data.encode_pairs_separately(split, tokenizer, config.max_seq_length)
        else:
            encoded[name] = stack_data.encode_texts(split, tokenizer, config.max_seq_length)
    encoded["train_sample"] = encoded["train"].take(
        train_sample_indices(len(encoded["train"]), len(encoded["validation"]), config.seed))
    return encoded


class StackFeed(feeds.Feed):
    """Length-bucketed batches of one or two packed sequences (and per-token labels when tagging).

    The epoch plans, warm-up shapes and training datasets are `feeds.Feed`'s; what is its own is the features of
    one or two sequences, per-token labels, and scoring through one traced predictor (`probabilities`).
    """

    FEATURES = ("token_ids", "segment_ids", "padding_mask")

    def __init__(self, splits: dict, batch_size: int, seed: int, bucket_step: int, eval_batch_size: int = 64):
        max_seq_length = next(iter(splits["train"].inputs.values())).token_ids.shape[1]
        super().__init__(splits, batch_size, seed, "bucket", bucket_step, max_seq_length, eval_batch_size, jit=False)
        self.feature_names = [f"{n}{s}" for s in self.train.inputs for n in self.FEATURES]
        self._predictors = {}

    def _length(self, split, indices, bucket_step) -> int:
        return inputs.padded_length(split.lengths[indices], "bucket", self.max_seq_length, bucket_step)

    def features(self, split: stack_data.EncodedSplit, indices, length: int) -> dict:
        features = {}
        for suffix, sequences in split.inputs.items():
            features[f"token_ids{suffix}"] = sequences.token_ids[indices, :length]
            features[f"segment_ids{suffix}"] = sequences.segment_ids[indices, :length]
            features[f"padding_mask{suffix}"] = (
                np.arange(length)[None, :] < sequences.lengths[indices, None]).astype(np.int32)
        return features

    def _batches(self, split, plan, bucket_step):
        for indices in plan:
            length = self._length(split, indices, bucket_step)
            labels = split.labels[indices, :length] if split.tagging else split.labels[indices]
            yield self.features(split, indices, length), labels.astype(np.int32)

    def _to_dataset(self, split, plan, bucket_step, with_labels, fill_to):
        """Training batches with labels (scoring goes through `probabilities`); never filled (no XLA here)."""
        import tensorflow as tf

        signature = ({name: tf.TensorSpec([None, None], tf.int32) for name in self.feature_names},
                     tf.TensorSpec([None, None] if split.tagging else [None], tf.int32))
        dataset = tf.data.Dataset.from_generator(lambda: self._batches(split, plan, bucket_step),
                                                 output_signature=signature)
        # A fixed prefetch buffer, autotuning off: its thread made every fit's teardown wait (inputs.prefetched).
        return inputs.prefetched(dataset, len(plan))

    def _predictor(self, model):
        """`model` in inference mode, traced once for any batch shape. `predict_on_batch` would trace again for
        each new padded length, and a trace of a two-sentence model costs more than scoring a split."""
        import tensorflow as tf

        if id(model) not in self._predictors:
            signature = {name: tf.TensorSpec([None, None], tf.int32) for name in self.feature_names}
            self._predictors[id(model)] = tf.function(lambda features: model(features, training=False),
                                                      input_signature=[signature])
        return self._predictors[id(model)]

    def probabilities(self, model, split_name: str):
        """Class probabilities in inference mode: `[N, C]`, or for tagging one `[length_i, C]` array per example."""
        split = self.splits[split_name]
        plan = inputs.plan_eval_batches(split.lengths, self.eval_batch_size, "bucket")
        results = [None] * len(split)
        predict = self._predictor(model)
        for indices in plan:
            length = self._length(split, indices, self.eval_bucket_step)
            logits = np.asarray(predict(self.features(split, indices, length)), np.float64)
            probabilities = np.exp(logits - logits.max(axis=-1, keepdims=True))
            probabilities /= probabilities.sum(axis=-1, keepdims=True)
            for row, index in enumerate(indices):
                results[index] = (probabilities[row, :split.lengths[index]] if split.tagging
                                  else probabilities[row])
        return results if split.tagging else np.stack(results)


# --- scores -----------------------------------------------------------------------------------------------------


def score(split: stack_data.EncodedSplit, probabilities, label_names: tuple) -> dict:
    """Tagging: conlleval's entity precision/recall/F1 and word accuracy. Otherwise accuracy and F1 (of class 1 for
    two classes, macro-averaged for more)."""
    if split.tagging:
        predicted = []
        for probs, positions, gold in zip(probabilities, split.word_positions, split.gold_tags):
            tags = [label_names[i] for i in probs[positions].argmax(axis=-1)]
            predicted.append(tags + [ner_metrics.OUTSIDE] * (len(gold) - len(tags)))  # words cut off by the budget
        return ner_metrics.compute(split.gold_tags, predicted)
    predictions = np.asarray(probabilities).argmax(axis=-1)
    scores = {"accuracy": metrics_lib.accuracy(split.labels, predictions)}
    if len(label_names) == 2:
        scores["f1"] = metrics_lib.f1(split.labels, predictions)
    else:
        from sklearn.metrics import f1_score

        scores["macro_f1"] = float(f1_score(split.labels, predictions, average="macro", zero_division=0.0))
    return scores


def average_probabilities(members: list):
    """The ensemble's probabilities: the mean of its members' (arrays, or per-example arrays when tagging)."""
    if isinstance(members[0], np.ndarray):
        return np.mean(np.stack(members), axis=0)
    return [np.mean(np.stack(per_example), axis=0) for per_example in zip(*members)]


# --- model and phases ---------------------------------------------------------------------------------------------


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
    from tf_transfer.training import train

    if phase == 1:
        backbone.trainable = False
    else:
        freezing.set_trainable_layers(backbone, freezing.ALL)
    optimizer = train.build_optimizer(lr, "constant", weight_decay=weight_decay, clip_norm=clip_norm)
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


# --- one run ------------------------------------------------------------------------------------------------------


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
        "code": record.code_version(),
        "config": config.to_dict(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _check_same_run(existing: dict, config: StackConfig, output_dir: str) -> None:
    """See `record.refuse_other_settings`."""
    record.refuse_other_settings(existing, config.to_dict(), output_dir)


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


def _clear(output_dir: str) -> None:
    """Removes what an earlier attempt left in `output_dir` (`--overwrite`, or a summary without epochs)."""
    from tf_transfer.training import checkpoints

    checkpoints.clear(output_dir)
    if os.path.exists(os.path.join(output_dir, PROBABILITIES_FILE)):
        os.remove(os.path.join(output_dir, PROBABILITIES_FILE))


def train_head(config: StackConfig, head_name: str, data, encoded: dict, loaded, output_dir: str,
               overwrite: bool = False, keep_probabilities: bool = False):
    """Runs the strategy with one head; returns `(summary, {split: final probabilities})`.

    After every epoch (either phase) the weights, optimizer state and dropout RNG state go to a checkpoint, then
    the summary (epochs, phases, early-stopping state) that refers to it. An unfinished run in `output_dir`
    (unless `overwrite`) is resumed after its last epoch, in the phase that epoch belongs to: a phase that had
    ended is followed by the next one with a fresh optimizer, as without the interruption; the data order of an
    epoch depends only on the seed and the epoch. `keep_probabilities` (ensemble members) writes the final
    probabilities to `PROBABILITIES_FILE`, so that a resumed ensemble need not train a finished member again.
    """
    import keras

    from tf_transfer.training import checkpoints
    from tf_transfer.models import freezing
    from tf_transfer.training import train

    tagging = config.task == "conll_ner"
    backbone = loaded.backbone
    model, head = build(config, backbone, head_name, len(data.label_names), tagging)
    feed = StackFeed(encoded, config.batch_size, config.seed, config.bucket_step, config.eval_batch_size)
    loss = make_loss(tagging)
    scored = [name for name in ("validation", "test") if name in encoded]

    existing = None if overwrite else record.read_summary(output_dir)
    resuming = bool(existing and existing.get("epochs"))
    os.makedirs(output_dir, exist_ok=True)
    if not resuming:
        _clear(output_dir)
    fresh = _summary_skeleton(config, head_name, loaded, backbone, data, encoded)
    summary, summary_path = record.start_summary(output_dir, fresh, existing, resuming)
    hparams = {"task": config.task, "head": head_name, "strategy": config.strategy, "preset": config.preset,
               "phase1_lr": config.phase1_lr, "phase2_lr": config.phase2_lr, "phase1_epochs": config.phase1_epochs,
               "max_gap": config.max_gap, "max_epochs": config.max_epochs, "batch_size": config.batch_size,
               "seed": config.seed, "max_seq_length": config.max_seq_length, "precision": config.precision}
    recorder = record.TensorBoardRecorder(output_dir, hparams,
                                          f"{config.task}/{head_name}_{config.strategy}/seed{config.seed}")
    epochs = summary["epochs"]
    train_time_s = epochs[-1]["train_time_s"] if epochs else 0.0
    best_epoch = summary["best_epoch"]
    best_value = epochs[best_epoch - 1]["val"].get(config.metric) if best_epoch else None
    # When resuming: the last finished epoch, whose checkpoint is restored once its phase is set up again.
    resume_epoch = epochs[-1] if resuming else None
    final_probabilities = {}

    def note_resume(compile_time_s):
        # Compiling again after a resume is not training time: it is recorded here, apart from the phases'.
        summary["resumes"].append({"after_epoch": resume_epoch["epoch"], "phase": resume_epoch["phase"],
                                   "compile_time_s": compile_time_s, "code": record.code_version(),
                                   "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        record.write_json_atomic(summary_path, summary)
        logging.info("resuming %s after epoch %d (phase %d)", output_dir, resume_epoch["epoch"],
                     resume_epoch["phase"])

    phases = plan_phases(config)
    try:
        for phase in phases:
            phase_record = next((p for p in summary["phases"] if p["phase"] == phase.number), None)
            resumes_here = resume_epoch is not None and resume_epoch["phase"] == phase.number
            if phase_record is not None and phase_record["ended_by"] and not resumes_here:
                continue  # ended before the interruption; the checkpoint of a later epoch holds its weights
            set_phase(model, backbone, phase.number, phase.lr, loss, config.weight_decay, config.clip_norm)
            if phase_record is not None and phase_record["ended_by"]:
                # The interruption fell between this phase's last epoch and the next phase's first: its weights,
                # then on to the next phase as without the interruption.
                model.optimizer.build(model.trainable_variables)
                checkpoints.restore(output_dir, resume_epoch["epoch"], model)
                note_resume(0.0)
                resume_epoch = None
                continue
            table = freezing.parameter_table(model, backbone)
            with _pooler_may_be_unused():
                compile_time_s = train.compile_steps(model, feed.warmup_dataset())
            if phase_record is None:
                phase_record = {"phase": phase.number, "lr": phase.lr,
                                "trainable_layers": FROZEN if phase.number == 1 else freezing.ALL,
                                "trainable_params": table[-1][1], "first_epoch": len(epochs) + 1,
                                "last_epoch": None, "compile_time_s": compile_time_s, "ended_by": None}
                summary["phases"].append(phase_record)
                summary["compile_time_s"] += compile_time_s
            summary.update(trainable_layers=phase_record["trainable_layers"], lr=phase.lr,
                           trainable_params=table[-1][1], total_params=table[-1][2])
            logging.info("phase %d (%s): lr %g, %s of %s parameters trainable, compiled in %.1f s", phase.number,
                         "head on frozen backbone" if phase.number == 1 else "everything", phase.lr,
                         f"{table[-1][1]:,}", f"{table[-1][2]:,}", compile_time_s)
            stopper = train.EarlyStopping(config.patience) if config.patience and phase is phases[-1] else None
            if resumes_here:
                checkpoints.restore(output_dir, resume_epoch["epoch"], model)
                if stopper is not None and summary.get("early_stopping"):
                    stopper = train.EarlyStopping(**summary["early_stopping"])
                note_resume(compile_time_s)
                resume_epoch = None
            while len(epochs) < phase.last_epoch:
                epoch = len(epochs) + 1
                # The gap rule never undoes a phase's first epoch (see the module docstring): nothing to keep.
                undoable = phase.gap_rule and epoch > phase_record["first_epoch"]
                before = [(v, np.array(v.numpy())) for v in head.weights] if undoable else None
                start = time.perf_counter()
                with _pooler_may_be_unused():
                    history = model.fit(feed.train_dataset(epoch), epochs=1, verbose=0, shuffle=False, callbacks=[
                        train.ProgressLogger(epoch, feed.steps_per_epoch, len(encoded["train"]))])
                epoch_time_s = time.perf_counter() - start
                epoch_loss = float(history.history["loss"][-1])
                train.check_finite(epoch_loss, epoch)
                train_time_s += epoch_time_s
                probabilities = {name: feed.probabilities(model, name) for name in scored}
                scores = {name: score(encoded[name], probabilities[name], data.label_names) for name in scored}
                epoch_record = {"epoch": epoch, "epoch_time_s": epoch_time_s, "train_time_s": train_time_s,
                                "loss": epoch_loss, "val": scores["validation"], "test": scores.get("test"),
                                "phase": phase.number}
                if phase.number == 1:
                    sample = score(encoded["train_sample"], feed.probabilities(model, "train_sample"),
                                   data.label_names)
                    epoch_record["train"] = sample
                    epoch_record["gap"] = sample["accuracy"] - scores["validation"]["accuracy"]
                gap_exceeded = phase.gap_rule and epoch_record["gap"] > config.max_gap
                rolled_back = gap_exceeded and undoable
                if gap_exceeded:
                    phase_record["ended_by"] = "max_gap"
                    summary["phase1_ended_by_gap"] = True
                if rolled_back:
                    train.restore(before)
                    epoch_record["rolled_back"] = True
                else:
                    final_probabilities = probabilities
                    value = scores["validation"].get(config.metric)
                    if metrics_lib.is_better(value, best_value):
                        best_value, summary["best_epoch"] = value, epoch
                epochs.append(epoch_record)
                phase_record["last_epoch"] = epoch
                stop = stopper is not None and stopper.update(scores["validation"].get(config.metric), epoch)
                stop = stop and epoch < config.max_epochs
                if stopper is not None:
                    summary["early_stopping"] = stopper.state()
                if stop:
                    phase_record["ended_by"] = "patience"
                    summary["stopped_early"] = True
                elif not phase_record["ended_by"] and epoch >= phase.last_epoch:
                    phase_record["ended_by"] = "phase1_epochs" if phase.gap_rule else "max_epochs"
                # Checkpoint first, then the summary that refers to it, then drop the older checkpoint.
                checkpoints.save(output_dir, epoch, model)
                record.write_json_atomic(summary_path, summary)
                checkpoints.prune(output_dir, epoch)
                recorder.scalars(epoch, {
                    "phase": phase.number, "epoch_time_s": epoch_time_s, "train_time_s": train_time_s,
                    "loss": epoch_loss, **record.flatten_scores("val", scores["validation"]),
                    **(record.flatten_scores("test", scores["test"]) if "test" in scores else {}),
                    **(record.flatten_scores("train", epoch_record["train"]) if "train" in epoch_record else {}),
                    **({"gap": epoch_record["gap"]} if "gap" in epoch_record else {})})
                logging.info("epoch %d (phase %d): %.1f s, loss %.4f, val %s%s", epoch, phase.number, epoch_time_s,
                             epoch_loss, _format(scores["validation"]),
                             f", train sample {_format(epoch_record['train'])}, gap {epoch_record['gap']:+.4f}"
                             + (" > --max_gap: head restored, phase 1 ends" if rolled_back else
                                " > --max_gap on the phase's first epoch: kept, phase 1 ends" if gap_exceeded
                                else "")
                             if "train" in epoch_record else "")
                if gap_exceeded or stop:
                    break
            if summary["stopped_early"]:
                break
    finally:
        recorder.close()
    if keep_probabilities:
        if not final_probabilities:  # resumed with no epoch left to train: the restored model's are the same
            final_probabilities = {name: feed.probabilities(model, name) for name in scored}
        save_probabilities(output_dir, final_probabilities)
    summary["completed"] = True
    summary["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    record.write_json_atomic(summary_path, summary)
    checkpoints.prune(output_dir, keep_epoch=-1)  # finished: nothing left to resume
    keras.backend.clear_session()  # the next ensemble member starts from the pretrained weights in fresh memory
    return summary, final_probabilities


def _format(scores: dict) -> str:
    return ", ".join(f"{k} {v:.4f}" for k, v in scores.items() if v is not None)


def result_path(config: StackConfig, output_dir: str) -> str:
    """Where the run's result goes: `summary.json`, or for an ensemble `ensemble.json`."""
    return os.path.join(output_dir, ENSEMBLE_FILE if config.ensemble else record.SUMMARY)


def completed_result(config: StackConfig, output_dir: str):
    """The result of a completed run of `config` in `output_dir`, or None; `TransferError` if the completed run
    there had other settings (so that a changed command is never answered with an old result)."""
    path = result_path(config, output_dir)
    if not os.path.exists(path):
        return None
    existing = _read_json(path)
    if not existing.get("completed"):
        return None
    _check_same_run(existing, config, output_dir)
    return existing


def run_stack(config: StackConfig, output_dir: str, overwrite: bool = False) -> dict:
    """Trains every head of `config` (one, or the members of --ensemble) and returns the result.

    One head: its `summary.json` in `output_dir`. An ensemble: each member's `summary.json` in
    `output_dir/<head>/`, and the averaged probabilities' scores in `output_dir/ensemble.json`.

    A completed run is returned as it is (unless `overwrite`); an unfinished one resumes (see `train_head`;
    an ensemble's finished members are not trained again) if it has the same settings, else `TransferError`.
    """
    member_dirs = {head: os.path.join(output_dir, head) if config.ensemble else output_dir for head in config.heads}
    if not overwrite:
        existing = completed_result(config, output_dir)
        if existing:
            logging.info("%s is already completed; not training again (pass --overwrite to start afresh)", output_dir)
            return existing
        for member_dir in member_dirs.values():
            held = record.read_summary(member_dir)
            if held:
                _check_same_run(held, config, member_dir)

    data = read_data(config)
    import keras

    from tf_transfer.models import backbones

    # The policy is global in Keras and read when layers are built: set it (float32 included) before loading.
    keras.mixed_precision.set_global_policy(config.precision)
    if config.ensemble and os.path.exists(result_path(config, output_dir)):
        os.remove(result_path(config, output_dir))  # an --overwrite: the old result no longer holds
    loaded, encodings, members = None, {}, {}
    for head_name in config.heads:
        member_dir = member_dirs[head_name]
        held = None if overwrite or not config.ensemble else record.read_summary(member_dir)
        probabilities = load_probabilities(member_dir) if held and held.get("completed") else None
        if probabilities is not None:
            logging.info("ensemble member %s is already completed in %s", head_name, member_dir)
            members[head_name] = (held, probabilities)
            continue
        keras.utils.set_random_seed(config.seed)
        # Each member starts from the pretrained weights: the preset is loaded afresh for every head.
        loaded = backbones.load_preset(config.preset, dropout=config.dropout)
        pair_head = head_name in PAIR_HEADS
        if pair_head not in encodings:
            encodings[pair_head] = encode(config, data, loaded.tokenizer, pair_head)
        members[head_name] = train_head(config, head_name, data, encodings[pair_head], loaded, member_dir,
                                        overwrite=overwrite, keep_probabilities=bool(config.ensemble))
    if not config.ensemble:
        return members[config.head][0]

    if not encodings:  # every member had finished before: their labels are still needed for the scores
        loaded = backbones.load_preset(config.preset, dropout=config.dropout)
        encodings[False] = encode(config, data, loaded.tokenizer, False)
    encoded = next(iter(encodings.values()))
    result = {"task": config.task, "heads": list(config.heads), "strategy": config.strategy,
              "preset": config.preset, "seed": config.seed, "precision": config.precision, "metric": config.metric,
              "members": {}, "completed": True}
    for name in [n for n in ("validation", "test") if n in encoded]:
        averaged = average_probabilities([probabilities[name] for _, probabilities in members.values()])
        result["val" if name == "validation" else "test"] = score(encoded[name], averaged, data.label_names)
    if "test" not in result:
        result["test"] = None
    for head_name, (summary, _) in members.items():
        last = summary["epochs"][-1]
        result["members"][head_name] = {"summary": os.path.join(head_name, record.SUMMARY),
                                        "final_val": last["val"], "final_test": last["test"]}
    result["config"] = config.to_dict()
    record.write_json_atomic(result_path(config, output_dir), result)
    return result


def _read_json(path: str):
    with open(path) as f:
        return json.load(f)
