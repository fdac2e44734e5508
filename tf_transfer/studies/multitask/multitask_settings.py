"""`MultitaskSettings`: every setting of one multi-task minBERT run, validated and hashed into the run's name.

Imports neither Keras nor TensorFlow, so that bad settings fail fast.

Example:

>>> from tf_transfer.studies.multitask.multitask_settings import MultitaskSettings
>>> settings = MultitaskSettings(data_dir="../shared/data/cs224n_minbert", task_order="sts,sst,para")
>>> settings.task_order, settings.poolings["para"]
(('sts', 'sst', 'para'), 'cls')
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import ClassVar, Optional

from tf_transfer.core import settings as settings_lib
from tf_transfer.core.errors import TransferError
from tf_transfer.core.settings import RunSettings, setting, take
from tf_transfer.data import cs224n
from tf_transfer.models import freezing
from tf_transfer.studies import study_method

TASK_NAMES = cs224n.TASK_NAMES
POOLINGS = ("cls", "mean")
PAIR_HEADS = ("sbert", "concat")
SCHEDULES = ("sequential", "summed")


def parse_task_order(value) -> tuple:
    """`"sst,para,sts"` (or a sequence) -> a tuple that orders each of the three tasks exactly once."""
    names = [n.strip().lower() for n in (value.split(",") if isinstance(value, str) else value) if n.strip()]
    if sorted(names) != sorted(TASK_NAMES):
        raise TransferError(f"--task_order must name each of {', '.join(TASK_NAMES)} exactly once, comma-separated "
                            f"(e.g. sst,para,sts), got {','.join(names) or 'nothing'}")
    return tuple(names)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultitaskSettings(RunSettings):
    """Every setting of one multi-task run; invalid values raise `TransferError` on construction.

    Defaults are the paper's where it gives them (AdamW, batch 32, 20 epochs, lr 1e-5 full fine-tuning, best dev
    epoch kept), else those of the CS224N starter code the paper builds on (AdamW without weight decay or clipping,
    epsilon 1e-6, head dropout 0.3) or the core trainer's (128 tokens); docs/multitask.md lists them.
    """

    data_dir: Optional[str] = setting(None, "CS224N minBERT data folder (ids-sst-train.csv, quora-dev.csv, "
                                            "sts-train.csv, ...), or a GLUE folder with --data_format=glue.")
    data_format: str = setting("cs224n", "cs224n: the course's tab-separated files (SST-5, Quora, STS). glue: SST-2 "
                                         "(2 classes), QQP and STS-B from a GLUE folder in the original TSV layout.")
    pooling_sst: str = setting("cls", "Sentence vector for sentiment: cls (BERT's pooler output) or mean (mean of the "
                                      "last block's vectors over non-padded tokens).")
    pooling_para: str = setting("cls", "Sentence (or pair) vector for paraphrase: cls or mean.")
    pooling_sts: str = setting("cls", "Sentence (or pair) vector for similarity: cls or mean.")
    pair_head: str = setting("sbert", "sbert: encode each sentence alone, [u, v, |u-v|] -> linear. concat: encode the "
                                      "pair as one sequence [CLS] a [SEP] b [SEP], pool -> linear.")
    llrd: float = setting(1.0, "Layer-wise learning-rate decay xi: the i-th block from the top trains at lr*xi^(i-1), "
                               "the embeddings at lr*xi^L; the pooler and heads at lr. 1.0 turns it off.")
    schedule: str = setting("sequential", "sequential: per epoch one pass over each task in --task_order. summed: per "
                                          "step one batch of every task and the summed loss; an epoch is one pass "
                                          "over the largest task.")
    task_order: tuple = setting(TASK_NAMES, "Order of the tasks within an epoch (sequential schedule).")
    take(vars(), "trainable_layers")
    # The method's settings (LoRA's rank, ...), each a flag; recorded in `config` and the run's name only for a method
    # other than the default (`study_method.record`), so that runs from before --method keep their names.
    settings_lib.add_fields(vars(), study_method.fields("What of the shared BERT trains, within --trainable_layers"))
    freeze_pooler: bool = setting(False, "Freeze BERT's pooler too (with --trainable_layers=0: a fully frozen BERT, "
                                         "only the heads train).")
    take(vars(), "lr", default=1e-5, why="The paper: 1e-5 fine-tuning, 1e-3 frozen BERT.")
    head_lr: Optional[float] = setting(None, "Learning rate of the three task heads (default: --lr).")
    take(vars(), "batch_size", note="Per task (the paper: 32).")
    take(vars(), "max_epochs", default=20, why="The paper trains 20 and keeps the best on validation.")
    take(vars(), "patience", note="The paper: 0.")
    take(vars(), "max_train_examples", note="Counted per task.")
    take(vars(), "max_seq_length", note="Per sentence with --pair_head=sbert, per packed pair with concat.")
    take(vars(), "seed", note="Here --split_seed draws the splits instead.")
    split_seed: int = setting(0, "Seed for the Quora train/dev split and --validation_fraction; kept apart from --seed "
                                 "so that every seed is scored on the same examples.")
    quora_dev_fraction: float = setting(0.2, "Without quora-train.csv, this share of quora-dev.csv becomes dev and "
                                             "the rest train.")
    take(vars(), "validation_fraction", default=0.0, note="Here of each task's train set, to pick the best epoch.",
         why="0 picks it on dev, as the paper (val and test are then the same dev scores).")
    take(vars(), "weight_decay", default=0.0, why="Here 0, as in the CS224N starter code.")
    take(vars(), "clip_norm", default=0.0, why="Here 0 (off), as in the CS224N starter code.")
    take(vars(), "dropout", note="The heads have --head_dropout.")
    head_dropout: float = setting(0.3, "Dropout before each task head (the CS224N starter's hidden_dropout_prob).")
    take(vars(), "eval_batch_size", "skip_bad_rows")
    init_from: Optional[str] = setting(None, "A previous run's --output_dir: start from its best.weights.h5 (same "
                                             "--preset and --pair_head), e.g. heads trained first on a frozen BERT.")
    take(vars(), "distribution", note="Each replica trains on its slice of every batch; mixed_float16 needs default.")

    CHECKS: ClassVar[dict] = {
        **settings_lib.CHECKS,
        "head_lr": (lambda value: value is None or settings_lib.positive[0](value),
                    "must be a positive number (or left unset to use --lr)"),
        "llrd": ((lambda value: settings_lib.in_range(0.0, 1.0, low_open=True)(value) or value == 1.0),
                 "must be in (0, 1]: the decay factor per block (1.0 turns it off)"),
        "quora_dev_fraction": (settings_lib.in_range(0.0, 1.0, low_open=True), "must be between 0 and 1 (exclusive)"),
        "validation_fraction": (settings_lib.in_range(0.0, 1.0),
                                "must be in [0, 1): 0 selects the best epoch on dev, as the paper"),
        "head_dropout": (settings_lib.in_range(0.0, 1.0), "must be in [0, 1)"),
        **study_method.checks("the multi-task study"),
    }
    # A rerun may use other devices: the folder's run resumes (or is reported as done) on any of them.
    NOT_RESULT_SETTINGS: ClassVar[tuple] = ("distribution",)
    # The group settings not taken have their group's default (`tf_transfer.core.setting_groups`): a constant rate
    # and epsilon 1e-6, as the CS224N starter code; its feed pads each batch to its length bucket
    # (`multitask_feed.BUCKET_STEP`); backbones from presets only.

    def __post_init__(self):
        self._set("task_order", parse_task_order(self.task_order))
        self._set("trainable_layers", freezing.parse_trainable_layers(self.trainable_layers))
        study_method.normalise(self)
        for flag in ("pooling_sst", "pooling_para", "pooling_sts", "pair_head", "schedule", "data_format"):
            choices = {"pair_head": PAIR_HEADS, "schedule": SCHEDULES,
                       "data_format": cs224n.DATA_FORMATS}.get(flag, POOLINGS)
            value = str(getattr(self, flag)).strip().lower()
            if value not in choices:
                raise TransferError(f"--{flag} must be one of {', '.join(choices)}, got {getattr(self, flag)!r}")
            self._set(flag, value)
        if not self.data_dir:
            raise TransferError("--data_dir is required: the CS224N minBERT data folder (or a GLUE folder with "
                                "--data_format=glue)")
        super().__post_init__()

    def check_together(self) -> list:
        # The float16 loss scale skips a step in a cond around the optimizer, which a replica cannot run.
        return [(self.precision != "mixed_float16" or self.distribution == "default",
                 "--precision=mixed_float16 needs --distribution=default (use mixed_bfloat16 with other strategies)"),
                *study_method.rules(self, self.trainable_layers)]

    @property
    def poolings(self) -> dict:
        return {"sst": self.pooling_sst, "para": self.pooling_para, "sts": self.pooling_sts}

    def to_dict(self) -> dict:
        settings = study_method.record(self, super().to_dict())
        settings["task_order"] = ",".join(self.task_order)
        return settings

    def run_name(self) -> str:
        """A readable name plus a hash of every setting that can change results (not the seed, paths or devices)."""
        ignored = ("seed", "data_dir", "init_from", "eval_batch_size", "distribution")
        settings = {k: v for k, v in self.to_dict().items() if k not in ignored}
        if not self.patience:
            del settings["patience"]  # runs without early stopping keep the names they had before --patience
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
        method = study_method.name_part(self)  # '' for freezing: older runs keep their names
        return (f"{method}{self.schedule}_{self.pair_head}_k{self.trainable_layers}_lr{self.lr:g}_llrd{self.llrd:g}_"
                f"{digest}")


study_method.follow(MultitaskSettings)  # a method registered later brings its settings
