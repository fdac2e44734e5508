"""`RunConfig`: every setting that defines a run, frozen, validated, and hashed into the run's name.

Example:

>>> from tf_transfer.studies.glue_config import RunConfig
>>> config = RunConfig(task="rte", trainable_layers=4, lr=1e-3)
>>> config.default_output_dir("runs")
'runs/rte/k4_lr0.001_bs1_.../seed0'
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from typing import Optional, Union

from tf_transfer.models import freezing
from tf_transfer.data import inputs
from tf_transfer.data import tasks
from tf_transfer.core.choices import DISTRIBUTIONS, JIT_COMPILE, LR_SCHEDULES, PRECISIONS
from tf_transfer.core.errors import TransferError


# Where data and caches live and knobs that only change speed: they never change a run's results.
NOT_RESULT_SETTINGS = ("data_dir", "cache_dir", "steps_per_execution", "eval_batch_size")

@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The settings of one training run. Defaults are the transfer-learning paper's (Wang) where it fixes them.

    `validation_fraction=0` trains on the whole of GLUE train (Lee, Tang & Lin's protocol): nothing is held out or
    scored as validation, so early stopping must be off (`patience=0`), every epoch up to `max_epochs` is trained,
    no epoch is chosen (`best_epoch` stays null) and the run's result is its last epoch.

    Optimizer defaults follow Google BERT's `optimization.py`: AdamW, decoupled weight decay 0.01 on all but
    LayerNorm and bias variables, epsilon 1e-6, gradients clipped to global norm 1.0.
    """

    task: str = "rte"
    preset: str = "bert_base_en_uncased"
    trainable_layers: Union[int, str] = freezing.ALL
    lr: float = 2e-5
    batch_size: int = 1
    max_epochs: int = 30
    patience: int = 2
    min_delta: float = 0.0
    seed: int = 0
    max_seq_length: int = 128
    data_dir: Optional[str] = None
    validation_fraction: float = 0.1
    max_train_examples: Optional[int] = None
    lr_schedule: str = "constant"
    warmup_proportion: float = 0.1
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    adam_epsilon: float = 1e-6
    dropout: float = 0.1
    metric: Optional[str] = None
    distribution: str = "default"
    padding: str = "bucket"
    bucket_step: int = 16
    eval_batch_size: int = 64
    skip_bad_rows: bool = False
    cache_frozen: bool = False
    cache_dir: Optional[str] = None
    precision: str = "float32"
    jit_compile: str = "auto"
    steps_per_execution: int = 1
    init_checkpoint: Optional[str] = None
    bert_config_file: Optional[str] = None
    vocab_file: Optional[str] = None

    def __post_init__(self):
        task = tasks.get_task(self.task)
        object.__setattr__(self, "task", task.name)
        object.__setattr__(self, "trainable_layers", freezing.parse_trainable_layers(self.trainable_layers))
        if self.metric is not None and self.metric not in task.metrics:
            raise TransferError(f"--metric={self.metric} is not computed for {task.name}: use one of "
                                f"{', '.join(task.metrics)}")
        checks = [
            (self.lr > 0 and math.isfinite(self.lr), "--lr must be a positive number"),
            (self.batch_size >= 1, "--batch_size must be at least 1"),
            (self.max_epochs >= 1, "--max_epochs must be at least 1"),
            (self.patience >= 0, "--patience must be >= 0 (0 turns early stopping off)"),
            (self.min_delta >= 0, "--min_delta must be >= 0"),
            (self.max_seq_length >= 8, "--max_seq_length must be at least 8"),
            (self.max_train_examples is None or self.max_train_examples >= 1, "--max_train_examples must be >= 1"),
            (0.0 <= self.validation_fraction < 1.0, "--validation_fraction must be in [0, 1)"),
            # Nothing held out: nothing to stop early on or to pick an epoch by (every epoch is trained).
            (self.validation_fraction > 0 or self.patience == 0,
             "--validation_fraction=0 holds nothing out to stop early on: give --patience=0 (early stopping off)"),
            (self.lr_schedule in LR_SCHEDULES, f"--lr_schedule must be one of {', '.join(LR_SCHEDULES)}"),
            (0.0 <= self.warmup_proportion < 1.0, "--warmup_proportion must be in [0, 1)"),
            (self.weight_decay >= 0, "--weight_decay must be >= 0"),
            (self.clip_norm >= 0, "--clip_norm must be >= 0 (0 turns clipping off)"),
            (0.0 <= self.dropout < 1.0, "--dropout must be in [0, 1)"),
            (self.distribution in DISTRIBUTIONS, f"--distribution must be one of {', '.join(DISTRIBUTIONS)}"),
            (self.padding in inputs.PADDINGS, f"--padding must be one of {', '.join(inputs.PADDINGS)}"),
            (self.bucket_step >= 1, "--bucket_step must be at least 1"),
            (self.eval_batch_size >= 1, "--eval_batch_size must be at least 1"),
            (self.precision in PRECISIONS, f"--precision must be one of {', '.join(PRECISIONS)}"),
            (str(self.jit_compile).lower() in JIT_COMPILE, f"--jit_compile must be one of {', '.join(JIT_COMPILE)}"),
            (self.steps_per_execution >= 1, "--steps_per_execution must be at least 1"),
            (not (self.cache_frozen and self.trainable_layers == freezing.ALL),
             "--cache_frozen needs frozen embeddings: use --trainable_layers=0..L, not 'all'"),
        ]
        for ok, message in checks:
            if not ok:
                raise TransferError(message)

    @property
    def task_spec(self) -> tasks.Task:
        return tasks.get_task(self.task)

    @property
    def metric_name(self) -> str:
        """The metric that drives early stopping and best-epoch selection."""
        return self.metric or self.task_spec.primary_metric

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def jit(self):
        """`jit_compile` for `Model.compile`: True, False or "auto"."""
        return {"true": True, "false": False}.get(str(self.jit_compile).lower(), "auto")

    def fingerprint(self) -> str:
        """A short hash of every setting that can change results: not the seed (a folder of its own), where the data
        and caches live, or knobs that only change speed."""
        settings = {k: v for k, v in self.to_dict().items() if k not in ("seed",) + NOT_RESULT_SETTINGS}
        return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]

    def run_name(self) -> str:
        k = self.trainable_layers
        return f"k{k}_lr{self.lr:g}_bs{self.batch_size}_{self.fingerprint()}"

    def default_output_dir(self, root: str = "runs") -> str:
        return os.path.join(root, self.task, self.run_name(), f"seed{self.seed}")
