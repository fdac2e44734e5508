"""Multi-task minBERT (Li, CS224N): one BERT, three heads, layer-wise learning-rate decay, two training schedules.

One backbone is shared by three tasks (see `tf_transfer.multitask_data`): sentiment (`sst`, accuracy), paraphrase
(`para`, accuracy) and similarity (`sts`, Pearson). The score that picks the best epoch is

    overall = mean(sst accuracy, paraphrase accuracy, (Pearson + 1) / 2).

What can be compared:
  * pooling per task: `cls` (BERT's pooler output: tanh(dense([CLS] vector)), as minBERT's `pooler_output` and the
    core trainer) or `mean` (mean of the last block's token vectors over the non-padded tokens);
  * pair head: `sbert` (each sentence encoded alone into u and v; [u, v, |u - v|] -> dropout -> linear) or `concat`
    (the pair packed as one sequence `[CLS] a [SEP] b [SEP]`, pooled, -> dropout -> linear);
  * layer-wise learning-rate decay xi: the i-th block from the top trains at lr * xi^(i-1) (the top block at lr), the
    embeddings at lr * xi^L, the pooler and the heads at lr (or `head_lr`);
  * schedule: `sequential` (per epoch one pass over each task in `task_order`) or `summed` (per step one batch of
    every task and the sum of the three losses; an epoch is one pass over the largest task, the smaller tasks are
    reshuffled and reused).

Optimizer: one AdamW (`tf_transfer.train.build_optimizer`) per parameter group: the embeddings, each encoder block,
the pooler, and each task head. Scaling gradients would not scale Adam's step (Adam divides by the gradient's own
magnitude), so each group gets its own learning rate, and decoupled weight decay scales with it as in PyTorch's
parameter groups. Separate optimizers also give each group its own Adam step count, as PyTorch keeps one per
parameter: a head trained only in its task's pass gets bias-corrected first steps of size lr, not the ~3-6 x lr a
shared step counter would give it. With clipping on (`clip_norm` > 0), all gradients of a step are clipped to one
global norm before they are split into groups.

Outputs in `output_dir`: `summary.json` (the core trainer's schema; `task` is "multitask", `metric` "overall"),
`best.weights.h5` (the weights of the best epoch on `val`) and TensorBoard scalars plus HParams.

Example (the tiny test preset or a real one, and a CS224N data folder):

>>> from tf_transfer import multitask_model
>>> settings = multitask_model.MultitaskSettings(
...     data_dir="../shared/data/cs224n_minbert", preset="all_minilm_l6_v2_en", max_train_examples=64,
...     max_epochs=1, batch_size=16)
>>> summary = multitask_model.run_multitask(settings, "/tmp/mt")  # doctest: +SKIP
>>> summary["epochs"][0]["test"]  # doctest: +SKIP
{'sst_accuracy': ..., 'paraphrase_accuracy': ..., 'sts_pearson': ..., 'overall': ...}
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from typing import Optional, Union

import keras
import numpy as np
from absl import logging
from keras import ops

from tf_transfer.models import freezing
from tf_transfer.models import heads
from tf_transfer.core import metrics
from tf_transfer.data import cs224n as multitask_data
from tf_transfer.training import record
from tf_transfer.data import tasks
from tf_transfer.core.config import PRECISIONS
from tf_transfer.core.errors import TransferError

TASK_NAMES = multitask_data.TASK_NAMES
POOLINGS = ("cls", "mean")
PAIR_HEADS = ("sbert", "concat")
SCHEDULES = ("sequential", "summed")
METRIC = "overall"
BEST_WEIGHTS = "best.weights.h5"
HEAD_GROUPS = {"sst": "head_sst", "para": "head_para", "sts": "head_sts"}
# Batches are padded to the next multiple of this above their longest example (never changes what is computed).
BUCKET_STEP = 16
PROGRESS_EVERY_S = 60.0


def parse_task_order(value) -> tuple:
    """`"sst,para,sts"` (or a sequence) -> a tuple that orders each of the three tasks exactly once."""
    names = [n.strip().lower() for n in (value.split(",") if isinstance(value, str) else value) if n.strip()]
    if sorted(names) != sorted(TASK_NAMES):
        raise TransferError(f"--task_order must name each of {', '.join(TASK_NAMES)} exactly once, comma-separated "
                            f"(e.g. sst,para,sts), got {','.join(names) or 'nothing'}")
    return tuple(names)


@dataclasses.dataclass(frozen=True)
class MultitaskSettings:
    """Every setting of one multi-task run; invalid values raise `TransferError` on construction.

    Defaults are the paper's where it gives them (AdamW, batch 32, 20 epochs, lr 1e-5 full fine-tuning, best dev
    epoch kept), else those of the CS224N starter code the paper builds on (AdamW without weight decay or clipping,
    epsilon 1e-6, head dropout 0.3) or the core trainer's (128 tokens); docs_multitask.md lists them.
    """

    data_dir: Optional[str] = None
    data_format: str = "cs224n"
    preset: str = "bert_base_en_uncased"
    pooling_sst: str = "cls"
    pooling_para: str = "cls"
    pooling_sts: str = "cls"
    pair_head: str = "sbert"
    llrd: float = 1.0
    schedule: str = "sequential"
    task_order: tuple = TASK_NAMES
    trainable_layers: Union[int, str] = freezing.ALL
    freeze_pooler: bool = False
    lr: float = 1e-5
    head_lr: Optional[float] = None
    batch_size: int = 32
    max_epochs: int = 20
    max_train_examples: Optional[int] = None
    max_seq_length: int = 128
    seed: int = 0
    split_seed: int = 0
    quora_dev_fraction: float = 0.2
    validation_fraction: float = 0.0
    weight_decay: float = 0.0
    clip_norm: float = 0.0
    dropout: float = 0.1
    head_dropout: float = 0.3
    eval_batch_size: int = 64
    skip_bad_rows: bool = False
    init_from: Optional[str] = None
    precision: str = "float32"

    def __post_init__(self):
        object.__setattr__(self, "task_order", parse_task_order(self.task_order))
        object.__setattr__(self, "trainable_layers", freezing.parse_trainable_layers(self.trainable_layers))
        for flag in ("pooling_sst", "pooling_para", "pooling_sts", "pair_head", "schedule", "data_format"):
            choices = {"pair_head": PAIR_HEADS, "schedule": SCHEDULES,
                       "data_format": multitask_data.DATA_FORMATS}.get(flag, POOLINGS)
            value = str(getattr(self, flag)).strip().lower()
            if value not in choices:
                raise TransferError(f"--{flag} must be one of {', '.join(choices)}, got {getattr(self, flag)!r}")
            object.__setattr__(self, flag, value)
        checks = [
            (bool(self.data_dir), "--data_dir is required: the CS224N minBERT data folder (or a GLUE folder with "
                                  "--data_format=glue)"),
            (self.lr > 0 and math.isfinite(self.lr), "--lr must be a positive number"),
            (self.head_lr is None or (self.head_lr > 0 and math.isfinite(self.head_lr)),
             "--head_lr must be a positive number (or left unset to use --lr)"),
            (0.0 < self.llrd <= 1.0, "--llrd must be in (0, 1]: the decay factor per block (1.0 turns it off)"),
            (self.batch_size >= 1, "--batch_size must be at least 1"),
            (self.max_epochs >= 1, "--max_epochs must be at least 1"),
            (self.max_train_examples is None or self.max_train_examples >= 1, "--max_train_examples must be >= 1"),
            (self.max_seq_length >= 8, "--max_seq_length must be at least 8"),
            (0.0 < self.quora_dev_fraction < 1.0, "--quora_dev_fraction must be between 0 and 1 (exclusive)"),
            (0.0 <= self.validation_fraction < 1.0,
             "--validation_fraction must be in [0, 1): 0 selects the best epoch on dev, as the paper"),
            (self.weight_decay >= 0, "--weight_decay must be >= 0"),
            (self.clip_norm >= 0, "--clip_norm must be >= 0 (0 turns clipping off)"),
            (0.0 <= self.dropout < 1.0, "--dropout must be in [0, 1)"),
            (0.0 <= self.head_dropout < 1.0, "--head_dropout must be in [0, 1)"),
            (self.eval_batch_size >= 1, "--eval_batch_size must be at least 1"),
            (self.precision in PRECISIONS, f"--precision must be one of {', '.join(PRECISIONS)}, "
                                           f"got {self.precision!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise TransferError(message)

    @property
    def poolings(self) -> dict:
        return {"sst": self.pooling_sst, "para": self.pooling_para, "sts": self.pooling_sts}

    def to_dict(self) -> dict:
        settings = dataclasses.asdict(self)
        settings["task_order"] = ",".join(self.task_order)
        return settings

    def run_name(self) -> str:
        """A readable name plus a hash of every setting that can change results (not the seed or paths)."""
        ignored = ("seed", "data_dir", "init_from", "eval_batch_size")
        settings = {k: v for k, v in self.to_dict().items() if k not in ignored}
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
        return f"{self.schedule}_{self.pair_head}_k{self.trainable_layers}_lr{self.lr:g}_llrd{self.llrd:g}_{digest}"


# ----------------------------------------------------------------------------------------------------------------
# Model


@keras.saving.register_keras_serializable(package="tf_transfer")
class MeanPooling(keras.layers.Layer):
    """Mean of the token vectors at non-padded positions (`padding_mask` 1); padded positions never contribute."""

    def call(self, sequence, padding_mask):
        mask = ops.cast(padding_mask, "bool")[..., None]
        sequence = ops.cast(sequence, "float32")  # sum in float32 under mixed precision
        # where(), not a product with the mask: padded positions may hold anything, NaN included.
        total = ops.sum(ops.where(mask, sequence, ops.zeros_like(sequence)), axis=1)
        count = ops.maximum(ops.sum(ops.cast(mask, sequence.dtype), axis=1), 1.0)
        return total / count


@keras.saving.register_keras_serializable(package="tf_transfer")
class SbertPairFeatures(keras.layers.Layer):
    """Sentence-BERT's classification features of a pair: [u, v, |u - v|]."""

    def call(self, u, v):
        return ops.concatenate([u, v, ops.abs(u - v)], axis=-1)


class MultitaskBert(keras.Model):
    """The shared backbone, pooling and pair features, and one head per task.

    `task_output(task, features)` gives sentiment logits `[B, classes]`, paraphrase logits `[B]` or similarity
    scores `[B]`. Features are the backbone's three inputs; for the SBERT pair head, `{"a": ..., "b": ...}`.
    """

    def __init__(self, backbone, num_sentiment_classes: int, poolings: dict, pair_head: str,
                 head_dropout: float = 0.3, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.poolings = dict(poolings)
        self.pair_head = pair_head
        self.num_sentiment_classes = num_sentiment_classes
        self.mean_pooling = MeanPooling(name="mean_pooling")
        self.pair_features = SbertPairFeatures(name="sbert_pair_features")
        # heads.PooledHead is dropout then a dense layer, float32; one per task.
        self.task_heads = {
            "sst": heads.PooledHead(num_sentiment_classes, head_dropout, dtype="float32", name="sentiment_head"),
            "para": heads.PooledHead(1, head_dropout, dtype="float32", name="paraphrase_head"),
            "sts": heads.PooledHead(1, head_dropout, dtype="float32", name="similarity_head"),
        }

    def build(self, input_shape=None):
        # The backbone comes built; the heads' input widths follow from its width and the pair head.
        hidden = self.backbone.hidden_dim
        pair_width = 3 * hidden if self.pair_head == "sbert" else hidden
        self.task_heads["sst"].build((None, hidden))
        self.task_heads["para"].build((None, pair_width))
        self.task_heads["sts"].build((None, pair_width))
        self.built = True

    def embed(self, features, pooling: str, training=None):
        outputs = self.backbone(features, training=training)
        if pooling == "cls":
            return outputs["pooled_output"]
        return self.mean_pooling(outputs["sequence_output"], features["padding_mask"])

    def task_output(self, task: str, features, training=None):
        pooling = self.poolings[task]
        if task != "sst" and self.pair_head == "sbert":
            pooled = self.pair_features(self.embed(features["a"], pooling, training),
                                        self.embed(features["b"], pooling, training))
        else:
            pooled = self.embed(features, pooling, training)
        output = self.task_heads[task](pooled, training=training)
        return output if task == "sst" else output[:, 0]

    def call(self, inputs, training=None):
        """`{task: features}` -> `{task: output}` for the tasks present."""
        return {task: self.task_output(task, features, training) for task, features in inputs.items()}


def build_model(backbone, settings: MultitaskSettings, num_sentiment_classes: int) -> MultitaskBert:
    """The multi-task model on `backbone` with the freezing rule applied; every variable exists on return."""
    freezing.set_trainable_layers(backbone, settings.trainable_layers)
    if settings.freeze_pooler:
        backbone.get_layer(freezing.POOLER).trainable = False
    model = MultitaskBert(backbone, num_sentiment_classes, settings.poolings, settings.pair_head,
                          settings.head_dropout, name="multitask_bert")
    model.build()
    return model


# ----------------------------------------------------------------------------------------------------------------
# Layer-wise learning rates


def layerwise_factors(num_layers: int, decay: float) -> dict:
    """`{part: learning-rate factor}`: block_{L-1} (the top) 1, block_i decay^(L-1-i), embeddings decay^L, pooler 1."""
    factors = {f"block_{i}": decay ** (num_layers - 1 - i) for i in range(num_layers)}
    factors["embeddings"] = decay ** num_layers
    factors["pooler"] = 1.0
    return factors


@dataclasses.dataclass
class ParameterGroup:
    name: str
    learning_rate: float
    variables: list
    optimizer: object = None


def parameter_groups(model: MultitaskBert, lr: float, decay: float, head_lr: Optional[float] = None) -> list:
    """The model's trainable variables grouped by learning rate: embeddings, blocks, pooler, one group per head.

    Groups without trainable variables (frozen blocks) are left out.
    """
    backbone = model.backbone
    factors = layerwise_factors(len(backbone.transformer_layers), decay)
    trainable = {id(v) for v in model.trainable_variables}
    by_part = {}
    for layer in backbone.layers:
        part = freezing.block_of(backbone, layer)
        by_part.setdefault(part, []).extend(v for v in layer.trainable_variables if id(v) in trainable)
    order = ["embeddings"] + [f"block_{i}" for i in range(len(backbone.transformer_layers))] + ["pooler"]
    groups = [ParameterGroup(part, lr * factors[part], by_part[part]) for part in order if by_part.get(part)]
    for task in TASK_NAMES:
        head_variables = [v for v in model.task_heads[task].trainable_variables if id(v) in trainable]
        groups.append(ParameterGroup(HEAD_GROUPS[task], head_lr or lr, head_variables))
    grouped = {id(v) for group in groups for v in group.variables}
    stray = [v.path for v in model.trainable_variables if id(v) not in grouped]
    if stray:  # a new layer in the model that the grouping does not know: a bug, not bad input
        raise RuntimeError(f"trainable variables outside every parameter group: {stray}")
    return groups


class GroupedAdamW:
    """One AdamW per parameter group, applied after clipping all gradients to one global norm.

    Args:
      groups: `ParameterGroup`s (their `optimizer` is filled in here).
      weight_decay: decoupled weight decay, scaled by each group's learning rate; not on LayerNorm or bias variables.
      clip_norm: global norm over every gradient of a step; 0 turns clipping off.
    """

    def __init__(self, groups: list, weight_decay: float = 0.0, clip_norm: float = 0.0, epsilon: float = 1e-6):
        from tf_transfer.training import train

        self.groups = groups
        self.clip_norm = clip_norm
        # Under mixed_float16 the step scales the loss by this (halved after a step with non-finite gradients,
        # which is then skipped), so small float16 gradients do not underflow; None otherwise.
        self.loss_scale = None
        if keras.mixed_precision.global_policy().name == "mixed_float16":
            self.loss_scale = keras.Variable(2.0 ** 15, dtype="float32", trainable=False, name="loss_scale")
        self._group_of = {}
        for index, group in enumerate(groups):
            group.optimizer = train.build_optimizer(group.learning_rate, weight_decay=weight_decay, clip_norm=0,
                                                    epsilon=epsilon)
            group.optimizer.build(group.variables)
            self._group_of.update({id(v): index for v in group.variables})

    @property
    def variables(self) -> list:
        return [v for group in self.groups for v in group.optimizer.variables]

    def learning_rates(self) -> dict:
        return {group.name: group.learning_rate for group in self.groups}

    def apply(self, gradients, variables) -> None:
        """Applies `gradients` (None for variables a step did not use) to `variables`; callable in a tf.function."""
        import tensorflow as tf

        pairs = [(g, v) for g, v in zip(gradients, variables) if g is not None]
        if self.clip_norm > 0 and pairs:
            clipped, _ = tf.clip_by_global_norm([g for g, _ in pairs], self.clip_norm)
            pairs = list(zip(clipped, [v for _, v in pairs]))
        by_group = {}
        for gradient, variable in pairs:
            by_group.setdefault(self._group_of[id(variable)], []).append((gradient, variable))
        for index, group_pairs in sorted(by_group.items()):
            self.groups[index].optimizer.apply_gradients(group_pairs)


# ----------------------------------------------------------------------------------------------------------------
# Inputs


@dataclasses.dataclass
class TaskSplit:
    """One task's split, tokenized: one packed sequence per example, or two (sentence a, sentence b) for SBERT."""

    segments: tuple
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def lengths(self) -> np.ndarray:
        return np.max([segment.lengths for segment in self.segments], axis=0)

    def features(self, indices: np.ndarray):
        from tf_transfer.data import inputs

        parts = [next(inputs.batches(segment, [indices], "bucket", BUCKET_STEP, with_labels=False))
                 for segment in self.segments]
        return parts[0] if len(parts) == 1 else {"a": parts[0], "b": parts[1]}

    def batch(self, indices: np.ndarray):
        labels = self.labels[indices]
        return self.features(indices), labels.astype(np.int32 if labels.dtype.kind == "i" else np.float32)


def encode_split(task: str, examples: tasks.Examples, tokenizer, pair_head: str, max_seq_length: int) -> TaskSplit:
    from tf_transfer.data import inputs

    if examples.text_b is not None and pair_head == "sbert":
        segments = tuple(inputs.encode(tasks.Examples(texts, None, examples.labels), tokenizer, max_seq_length)
                         for texts in (examples.text_a, examples.text_b))
    else:
        segments = (inputs.encode(examples, tokenizer, max_seq_length),)
    labels = examples.labels.astype(np.float32) if task == "para" else examples.labels
    return TaskSplit(segments, labels)


def epoch_batches(sizes: dict, batch_size: int, seed: int, epoch: int, schedule: str, order: tuple) -> list:
    """The epoch's training steps: a list of `{task: index array}` (one task per step, or all three when summed).

    Sequential: each task in `order`, one seeded permutation cut into batches. Summed: as many steps as the largest
    task needs; every step takes equally many examples of each task, from a stream of fresh seeded permutations, so
    smaller tasks are reshuffled and reused within the epoch.
    """
    def stream(task: str, repeat: int) -> np.ndarray:
        return np.random.default_rng([seed, epoch, TASK_NAMES.index(task), repeat]).permutation(sizes[task])

    if schedule == "sequential":
        steps = []
        for task in order:
            permutation = stream(task, 0)
            steps += [{task: permutation[i:i + batch_size]} for i in range(0, sizes[task], batch_size)]
        return steps
    largest = max(sizes.values())
    step_sizes = [min(batch_size, largest - start) for start in range(0, largest, batch_size)]
    total = sum(step_sizes)
    indices = {}
    for task in order:
        repeats = math.ceil(total / sizes[task])
        indices[task] = np.concatenate([stream(task, r) for r in range(repeats)])[:total]
    bounds = np.cumsum([0] + step_sizes)
    return [{task: indices[task][bounds[i]:bounds[i + 1]] for task in order} for i in range(len(step_sizes))]


# ----------------------------------------------------------------------------------------------------------------
# Losses, steps and scores


def task_loss(task: str, output, labels):
    if task == "sst":
        return ops.mean(keras.losses.sparse_categorical_crossentropy(labels, output, from_logits=True))
    if task == "para":
        return ops.mean(ops.binary_crossentropy(labels, output, from_logits=True))
    return ops.mean(ops.square(output - labels))


def _feature_spec(task: str, pair_head: str):
    import tensorflow as tf

    one = {name: tf.TensorSpec([None, None], tf.int32) for name in ("token_ids", "segment_ids", "padding_mask")}
    return {"a": one, "b": dict(one)} if task != "sst" and pair_head == "sbert" else one


def _label_spec(task: str):
    import tensorflow as tf

    return tf.TensorSpec([None], tf.int32 if task == "sst" else tf.float32)


def make_train_step(model: MultitaskBert, optimizer: GroupedAdamW, step_tasks: tuple, pair_head: str):
    """A tf.function: `{task: (features, labels)}` -> (summed loss, {task: loss}); one trace for all batch shapes."""
    import tensorflow as tf

    variables = list(model.trainable_variables)
    signature = {task: (_feature_spec(task, pair_head), _label_spec(task)) for task in step_tasks}

    @tf.function(input_signature=[signature])
    def step(batch):
        with tf.GradientTape() as tape:
            losses = {task: task_loss(task, model.task_output(task, features, training=True), labels)
                      for task, (features, labels) in batch.items()}
            total = tf.add_n(list(losses.values()))
            scale = optimizer.loss_scale
            scaled = total if scale is None else total * scale
        gradients = tape.gradient(scaled, variables)
        if scale is None:
            optimizer.apply(gradients, variables)
            return total, losses
        gradients = [None if g is None else g / scale for g in gradients]
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in gradients if g is not None])

        def apply():
            optimizer.apply(gradients, variables)
            return tf.constant(True)

        def skip():
            scale.assign(scale / 2.0)
            return tf.constant(False)

        tf.cond(finite, apply, skip)
        return total, losses

    return step


def make_predict(model: MultitaskBert, task: str, pair_head: str):
    import tensorflow as tf

    return tf.function(lambda features: model.task_output(task, features, training=False),
                       input_signature=[_feature_spec(task, pair_head)])


def overall_score(sst_accuracy, paraphrase_accuracy, sts_pearson) -> float:
    """mean(SST accuracy, paraphrase accuracy, (Pearson + 1) / 2); NaN when any part is undefined."""
    parts = [sst_accuracy, paraphrase_accuracy, None if sts_pearson is None else (sts_pearson + 1.0) / 2.0]
    if any(p is None or not math.isfinite(p) for p in parts):
        return float("nan")
    return float(np.mean(parts))


def score(predict: dict, splits: dict, eval_batch_size: int) -> dict:
    """Scores `{task: TaskSplit}` in inference mode: the three task metrics and `overall`."""
    from tf_transfer.data import inputs

    outputs = {}
    for task, split in splits.items():
        # Batches are sorted by length (less padding); put the predictions back in example order.
        plan = inputs.plan_eval_batches(split.lengths, eval_batch_size, "bucket")
        predicted = np.concatenate([np.asarray(predict[task](split.features(indices))) for indices in plan])
        outputs[task] = np.empty_like(predicted)
        outputs[task][np.concatenate(plan)] = predicted
    result = {
        "sst_accuracy": metrics.accuracy(splits["sst"].labels, outputs["sst"].argmax(axis=-1)),
        "paraphrase_accuracy": metrics.accuracy(splits["para"].labels, (outputs["para"] > 0).astype(np.float32)),
        "sts_pearson": metrics.pearson(splits["sts"].labels, outputs["sts"]),
    }
    result[METRIC] = overall_score(result["sst_accuracy"], result["paraphrase_accuracy"], result["sts_pearson"])
    return result


# ----------------------------------------------------------------------------------------------------------------
# Warm start from a previous run


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


def load_initial_weights(model: MultitaskBert, run_dir: str) -> None:
    """Loads `run_dir/best.weights.h5` into `model` (same preset, pair head and number of sentiment classes)."""
    path = os.path.join(run_dir, BEST_WEIGHTS)
    try:
        model.load_weights(path)
    except (ValueError, KeyError, OSError) as e:
        raise TransferError(f"--init_from: {path} does not fit this model ({type(e).__name__}: "
                            f"{str(e).strip().splitlines()[0][:200]}); use the same --preset and --pair_head "
                            "and data with the same sentiment classes") from None


def save_weights_atomic(model: MultitaskBert, path: str) -> None:
    """Writes the weights beside `path`, then renames: a crash never leaves half a weights file."""
    tmp_path = os.path.join(os.path.dirname(path), ".tmp-" + os.path.basename(path))
    model.save_weights(tmp_path)
    os.replace(tmp_path, path)


# ----------------------------------------------------------------------------------------------------------------
# The run


def _split_validation(data, settings: MultitaskSettings):
    """`{task: (train, validation or None, dev)}`: train capped at --max_train_examples, after the split."""
    splits = {}
    for task, task_data in data.tasks.items():
        train, validation = task_data.train, None
        if settings.validation_fraction > 0:
            train, validation = tasks.train_validation_split(train, settings.validation_fraction, settings.split_seed)
        splits[task] = (multitask_data.cap(train, settings.max_train_examples), validation, task_data.dev)
    return splits


def run_multitask(settings: MultitaskSettings, output_dir: str, overwrite: bool = False) -> dict:
    """Trains and scores one multi-task run; returns the final summary (also in `output_dir/summary.json`).

    Raises `TransferError` for bad input before training starts, or (non-finite loss) after the completed
    epochs' summary has been written with `completed: false`.
    """
    from tf_transfer.training import checkpoints

    existing = None if overwrite else record.read_summary(output_dir)
    if existing:
        record.refuse_other_settings(existing, settings.to_dict(), output_dir)
    if existing and existing.get("completed"):
        logging.info("%s is already completed; not training again (pass --overwrite to start afresh)", output_dir)
        return existing
    resuming = bool(existing and existing.get("epochs"))
    check_init_from(settings)
    data = multitask_data.load(settings.data_dir, settings.data_format, settings.quora_dev_fraction,
                               settings.split_seed, settings.skip_bad_rows)
    raw = _split_validation(data, settings)

    from tf_transfer.models import backbones
    from tf_transfer.training import train

    # The policy is global in Keras and read when layers are built: set it (float32 included) before loading.
    # The heads are float32 under any policy, so logits, scores and losses are too.
    keras.mixed_precision.set_global_policy(settings.precision)
    # Seeded before the backbone is built: its dropout layers draw their seed generators' seeds when made, so
    # seeding only afterwards left them to whatever ran before in the process (two runs in one process differed).
    keras.utils.set_random_seed(settings.seed)
    loaded = backbones.load_preset(settings.preset, dropout=settings.dropout)
    backbone = loaded.backbone
    freezing.check_trainable_layers(settings.trainable_layers, backbone.num_layers)
    logging.info("preset %s: weights from %s", settings.preset, loaded.source)
    keras.utils.set_random_seed(settings.seed)

    def encode(task, examples):
        return encode_split(task, examples, loaded.tokenizer, settings.pair_head, settings.max_seq_length)

    train_splits = {task: encode(task, raw[task][0]) for task in TASK_NAMES}
    dev_splits = {task: encode(task, raw[task][2]) for task in TASK_NAMES}
    validation_splits = ({task: encode(task, raw[task][1]) for task in TASK_NAMES}
                         if settings.validation_fraction > 0 else None)

    model = build_model(backbone, settings, data.num_sentiment_classes)
    if settings.init_from:
        load_initial_weights(model, settings.init_from)
        logging.info("initial weights from %s", os.path.join(settings.init_from, BEST_WEIGHTS))
    groups = parameter_groups(model, settings.lr, settings.llrd, settings.head_lr)
    optimizer = GroupedAdamW(groups, settings.weight_decay, settings.clip_norm)

    table = freezing.parameter_table(model, backbone)
    print(f"trainable parameters per block (multitask, trainable_layers={settings.trainable_layers}):")
    print(freezing.format_table(table), flush=True)
    print("learning rate per parameter group: " +
          ", ".join(f"{name} {lr:.3g}" for name, lr in optimizer.learning_rates().items()), flush=True)

    os.makedirs(output_dir, exist_ok=True)
    if not resuming:
        checkpoints.clear(output_dir)
    examples = {}
    for task in TASK_NAMES:
        examples[f"{task}/train"] = len(train_splits[task])
        if validation_splits:
            examples[f"{task}/validation"] = len(validation_splits[task])
        examples[f"{task}/dev"] = len(dev_splits[task])
    summary = {
        "task": "multitask",
        "preset": settings.preset,
        "preset_source": loaded.source,
        "num_layers": int(backbone.num_layers),
        "trainable_layers": settings.trainable_layers,
        "lr": settings.lr,
        "batch_size": settings.batch_size,
        "seed": settings.seed,
        "precision": settings.precision,
        "code": record.code_version(),
        "metric": METRIC,
        "trainable_params": table[-1][1],
        "total_params": table[-1][2],
        "parameter_table": [{"part": p, "trainable": t, "total": n} for p, t, n in table],
        "learning_rates": optimizer.learning_rates(),
        "val_is_dev": validation_splits is None,
        "examples": examples,
        "skipped_rows": data.skipped_rows,
        "data_notes": data.notes,
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
    summary, summary_path = record.start_summary(output_dir, summary, existing, resuming)

    step_task_sets = [(task,) for task in settings.task_order] if settings.schedule == "sequential" \
        else [settings.task_order]
    steps = {tuple(sorted(s)): make_train_step(model, optimizer, s, settings.pair_head) for s in step_task_sets}
    predict = {task: make_predict(model, task, settings.pair_head) for task in TASK_NAMES}
    sizes = {task: len(split) for task, split in train_splits.items()}

    def run_step(step_indices: dict):
        batch = {task: train_splits[task].batch(indices) for task, indices in step_indices.items()}
        return steps[tuple(sorted(batch))](batch)

    # Trace every training step once on a real batch, then put every variable back (weights, optimizer slots and
    # step counts, dropout RNG state): compilation is timed apart from training and changes nothing.
    saved = [(v, np.array(v.numpy())) for v in list(model.variables) + optimizer.variables]
    start = time.perf_counter()
    first = {}
    for step_indices in epoch_batches(sizes, settings.batch_size, settings.seed, 0, settings.schedule,
                                      settings.task_order):
        first.setdefault(tuple(sorted(step_indices)), step_indices)
    for step_indices in first.values():
        run_step(step_indices)
    compile_time_s = time.perf_counter() - start
    train.restore(saved)
    logging.info("compiled the training step(s) in %.1f s", compile_time_s)
    best = None
    train_time_s = 0.0
    first_epoch = 1
    if resuming:
        # Weights, optimizer slots and step counts, dropout RNG state; the data order of epoch e depends only on
        # the seed and e. So the remaining epochs compute what they would have without the interruption.
        last_epoch = summary["epochs"][-1]["epoch"]
        checkpoints.restore(output_dir, last_epoch, model, optimizer)
        train_time_s = summary["epochs"][-1]["train_time_s"]
        best = max((e["val"][METRIC] for e in summary["epochs"] if e["val"].get(METRIC) is not None), default=None)
        first_epoch = last_epoch + 1
        summary["resumes"].append({"after_epoch": last_epoch, "compile_time_s": compile_time_s,
                                   "code": record.code_version(), "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        record.write_json_atomic(summary_path, summary)
        logging.info("resuming %s after epoch %d", output_dir, last_epoch)
    else:
        summary["compile_time_s"] = compile_time_s

    hparams = {"task": "multitask", "preset": settings.preset, "trainable_layers": str(settings.trainable_layers),
               "lr": settings.lr, "head_lr": settings.head_lr or settings.lr, "batch_size": settings.batch_size,
               "seed": settings.seed, "pooling_sst": settings.pooling_sst, "pooling_para": settings.pooling_para,
               "pooling_sts": settings.pooling_sts, "pair_head": settings.pair_head, "llrd": settings.llrd,
               "schedule": settings.schedule, "task_order": ",".join(settings.task_order),
               "max_seq_length": settings.max_seq_length, "init_from": bool(settings.init_from)}
    recorder = record.TensorBoardRecorder(output_dir, hparams, f"multitask/{settings.run_name()}/seed{settings.seed}")
    try:
        for epoch in range(first_epoch, settings.max_epochs + 1):
            plan = epoch_batches(sizes, settings.batch_size, settings.seed, epoch, settings.schedule,
                                 settings.task_order)
            losses = {task: [] for task in TASK_NAMES}
            start = last_report = time.perf_counter()
            for number, step_indices in enumerate(plan, start=1):
                _, step_losses = run_step(step_indices)
                for task, value in step_losses.items():
                    losses[task].append(value)
                if time.perf_counter() - last_report >= PROGRESS_EVERY_S:
                    last_report = time.perf_counter()
                    logging.info("epoch %d: step %d/%d (%s), %.1f s so far", epoch, number, len(plan),
                                 ",".join(step_indices), last_report - start)
            epoch_time_s = time.perf_counter() - start
            train_time_s += epoch_time_s
            task_losses = {task: float(np.mean([float(v) for v in values])) for task, values in losses.items()
                           if values}
            loss = float(sum(task_losses.values()))
            train.check_finite(loss, epoch)
            test = score(predict, dev_splits, settings.eval_batch_size)
            val = score(predict, validation_splits, settings.eval_batch_size) if validation_splits else dict(test)
            epoch_record = {"epoch": epoch, "epoch_time_s": epoch_time_s, "train_time_s": train_time_s,
                            "loss": loss, "task_loss": task_losses, "val": val, "test": test}
            summary["epochs"].append(epoch_record)
            if metrics.is_better(val[METRIC], best):
                best = val[METRIC]
                summary["best_epoch"] = epoch
                save_weights_atomic(model, os.path.join(output_dir, BEST_WEIGHTS))
            # Checkpoint first, then the summary that refers to it, then drop the older checkpoint.
            checkpoints.save(output_dir, epoch, model, optimizer)
            record.write_json_atomic(summary_path, summary)
            checkpoints.prune(output_dir, epoch)
            recorder.scalars(epoch, {
                "epoch_time_s": epoch_time_s, "train_time_s": train_time_s, "loss": loss,
                **{f"loss/{task}": value for task, value in task_losses.items()},
                **record.flatten_scores("val", val), **record.flatten_scores("test", test),
            })
            logging.info("epoch %d: %.1f s (total %.1f s), loss %.4f, val %s", epoch, epoch_time_s, train_time_s,
                         loss, ", ".join(f"{k} {v:.4f}" for k, v in val.items() if v is not None and math.isfinite(v)))
    finally:
        recorder.close()
    summary["completed"] = True
    summary["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    record.write_json_atomic(summary_path, summary)
    checkpoints.prune(output_dir, keep_epoch=-1)  # finished: nothing left to resume
    logging.info("done: best epoch %s, summary in %s", summary["best_epoch"], summary_path)
    return summary


# ----------------------------------------------------------------------------------------------------------------
# Report

REPORT_COLUMNS = ("run", "SST acc", "para acc", "STS r", "overall", "best epoch", "epochs", "train time (s)",
                  "examples/task", "precision")


def report_table(run_dirs: list) -> str:
    """A Markdown table, one row per run folder (its summary.json): the best-on-dev epoch's dev scores.

    A folder without summary.json, or without a completed epoch, is listed as missing rather than left out.
    """
    lines = ["| " + " | ".join(REPORT_COLUMNS) + " |", "|" + "---|" * len(REPORT_COLUMNS)]
    for run_dir in run_dirs:
        name = os.path.basename(os.path.normpath(run_dir))
        summary = record.read_summary(run_dir)
        if not summary or not summary.get("epochs"):
            lines.append(f"| {name} | " + " | ".join(["missing"] + [""] * (len(REPORT_COLUMNS) - 2)) + " |")
            continue
        best = summary.get("best_epoch")
        scores = summary["epochs"][best - 1]["test"] if best else {}

        def cell(key, scores=scores):
            value = scores.get(key)
            return "n/a" if value is None else f"{value:.4f}"

        done = len(summary["epochs"])
        epochs = f"{done}/{summary['config']['max_epochs']}" + ("" if summary.get("completed") else " (unfinished)")
        train_s = summary["epochs"][-1]["train_time_s"]
        per_task = summary["config"].get("max_train_examples") or "all"
        lines.append("| " + " | ".join([name, cell("sst_accuracy"), cell("paraphrase_accuracy"), cell("sts_pearson"),
                                         cell("overall"), str(best), epochs, f"{train_s:.0f}", str(per_task),
                                         summary.get("precision", "float32")]) + " |")
    return "\n".join(lines)
