"""`MultitaskSettings`: every setting of one multi-task minBERT run, validated and hashed into the run's name.

Imports neither Keras nor TensorFlow, so that bad settings fail fast.

Example:

>>> from tf_transfer.studies.multitask_settings import MultitaskSettings
>>> settings = MultitaskSettings(data_dir="../shared/data/cs224n_minbert", task_order="sts,sst,para")
>>> settings.task_order, settings.poolings["para"]
(('sts', 'sst', 'para'), 'cls')
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Optional, Union

from tf_transfer.core.choices import DISTRIBUTIONS, PRECISIONS
from tf_transfer.core.errors import TransferError
from tf_transfer.data import cs224n
from tf_transfer.models import freezing

TASK_NAMES = cs224n.TASK_NAMES
POOLINGS = ("cls", "mean")
PAIR_HEADS = ("sbert", "concat")
SCHEDULES = ("sequential", "summed")
# A rerun may use other devices: the folder's run resumes (or is reported as done) on any of them.
NOT_COMPARED = ("distribution",)


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
    patience: int = 0
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
    distribution: str = "default"

    def __post_init__(self):
        object.__setattr__(self, "task_order", parse_task_order(self.task_order))
        object.__setattr__(self, "trainable_layers", freezing.parse_trainable_layers(self.trainable_layers))
        for flag in ("pooling_sst", "pooling_para", "pooling_sts", "pair_head", "schedule", "data_format"):
            choices = {"pair_head": PAIR_HEADS, "schedule": SCHEDULES,
                       "data_format": cs224n.DATA_FORMATS}.get(flag, POOLINGS)
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
            (self.patience >= 0, "--patience must be >= 0 (0 turns early stopping off)"),
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
            (self.distribution in DISTRIBUTIONS, f"--distribution must be one of {', '.join(DISTRIBUTIONS)}, "
                                                 f"got {self.distribution!r}"),
            # The float16 loss scale skips a step in a cond around the optimizer, which a replica cannot run.
            (self.precision != "mixed_float16" or self.distribution == "default",
             "--precision=mixed_float16 needs --distribution=default (use mixed_bfloat16 with other strategies)"),
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
        """A readable name plus a hash of every setting that can change results (not the seed, paths or devices)."""
        ignored = ("seed", "data_dir", "init_from", "eval_batch_size", "distribution")
        settings = {k: v for k, v in self.to_dict().items() if k not in ignored}
        if not self.patience:
            del settings["patience"]  # runs without early stopping keep the names they had before --patience
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
        return f"{self.schedule}_{self.pair_head}_k{self.trainable_layers}_lr{self.lr:g}_llrd{self.llrd:g}_{digest}"
