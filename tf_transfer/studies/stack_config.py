"""Every setting of a stack-and-finetune run (`StackConfig`) and its phases (`plan_phases`); no TensorFlow here, so
bad settings fail before anything heavy is imported.

Example:

>>> from tf_transfer.studies.stack_config import StackConfig, plan_phases
>>> config = StackConfig(task="quora", data="quora-dev.csv", head="bimpm", phase1_epochs=1, max_epochs=2)
>>> [(p.number, p.last_epoch) for p in plan_phases(config)]
[(1, 1), (2, 2)]
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Optional

from tf_transfer.core.choices import DISTRIBUTIONS, PRECISIONS
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
# Where a run computes, not what: a rerun may change them, and runs from before they existed still match.
NOT_RESULT_SETTINGS = ("distribution",)


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
    distribution: str = "default"  # a `tf_transfer.core.strategies` name

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
            (self.distribution in DISTRIBUTIONS, f"--distribution must be one of {', '.join(DISTRIBUTIONS)}, got "
                                                 f"{self.distribution!r}"),
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
