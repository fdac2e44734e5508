"""Every setting of a stack-and-finetune run (`StackSettings`) and its phases (`plan_phases`); no TensorFlow here,
so bad settings fail before anything heavy is imported. Each setting is a flag of `python -m tf_transfer.stack`.

Example:

>>> from tf_transfer.studies.stack.stack_settings import StackSettings, plan_phases
>>> settings = StackSettings(task="quora", data="quora-dev.csv", head="bimpm", phase1_epochs=1, max_epochs=2)
>>> [(p.number, p.last_epoch) for p in plan_phases(settings)]
[(1, 1), (2, 2)]
"""

from __future__ import annotations

import dataclasses
import os
from typing import ClassVar, Optional

from tf_transfer.core import setting_groups
from tf_transfer.core import settings as settings_lib
from tf_transfer.core.errors import TransferError
from tf_transfer.core.settings import RunSettings, setting, take
from tf_transfer.models import freezing, methods
from tf_transfer.studies import study_method

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


def _choice(flag: str, value, allowed) -> None:
    if value not in allowed:
        raise TransferError(f"--{flag}={value} is not one of {', '.join(allowed)}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StackSettings(RunSettings):
    """Every setting of one stack-and-finetune run (or ensemble). Defaults are the paper's where it gives them.

    `stack_strategy` (the flag `--strategy`) is the paper's training strategy, not a tf.distribute strategy
    (that is `distribution`)."""

    task: Optional[str] = setting(
        None, "conll_ner (CoNLL-2003 column file, entity F1), classification (CSV/TSV with text and label columns, "
              "accuracy) or quora (question pairs, GLUE QQP or CS224N Quora layout, accuracy).")
    data: Optional[str] = setting(None, "Training file; a seeded --validation_fraction of it is held out for "
                                        "validation and the gap rule, unless --validation_data is given.")
    head: Optional[str] = setting(
        None, "linear, mlp, bilstm, cnn, highway_lstm, transformer (any task but conll_ner takes cnn), or for quora "
              "bimpm and sim_transformer (the two questions encoded separately by the shared BERT).")
    stack_strategy: str = setting(
        "stack_and_finetune", "stack_and_finetune: phase 1 trains the head on frozen BERT, phase 2 fine-tunes "
                              "everything; finetune_only: phase 2 alone; stack_only: phase 1 alone.", flag="strategy")
    phase1_epochs: int = setting(3, "Most epochs of phase 1 (stack_and_finetune).")
    max_gap: float = setting(0.02, "Phase 1 ends early once training accuracy exceeds validation accuracy by more "
                                   "than this; the head weights from before that epoch are restored.")
    phase1_lr: float = setting(1e-3, "Learning rate of phase 1, the head alone (the paper: 1e-3).")
    phase2_lr: float = setting(2e-5, "Learning rate of phase 2, BERT and head together (the paper: about 2e-5).")
    take(vars(), "max_epochs", default=6, note="Both phases together.",
         why="Here 6: phase 1's 3 (--phase1_epochs) and 3 of phase 2.")
    take(vars(), "max_seq_length", note="Per question for bimpm and sim_transformer; CoNLL words beyond it are "
                                        "predicted O and counted.")
    take(vars(), "seed", "preset")
    take(vars(), "validation_fraction", note="Here of --data, also for the gap rule.")
    test_data: Optional[str] = setting(None, "Optional test file in the same format, scored after every epoch.")
    validation_data: Optional[str] = setting(
        None, "Optional validation file in the same format (CoNLL-2003: eng.testa), for picking the best epoch, "
              "early stopping and the gap rule; --data is then all training data (--validation_fraction unused).")
    take(vars(), "max_train_examples")
    train_sample_seed: Optional[int] = setting(
        None, "With --max_train_examples: train on a random sample of that many training examples drawn with this "
              "seed, the same whatever --seed (so runs of every strategy and seed share it); default: the first "
              "--max_train_examples in file order.")
    ensemble: tuple = setting((), "Instead of --head: train each of these heads (e.g. cnn,highway_lstm) the same way "
                                  "and average their class probabilities.")
    take(vars(), "patience", note="Counted in the last phase.")
    take(vars(), "weight_decay", "clip_norm")  # the paper's values
    take(vars(), "dropout", note="Also in the head.")
    head_units: int = setting(128, "Width of the heads: MLP hidden layer, LSTM units per direction, convolution "
                                   "filters, 1/4 of the transformer feed-forward width, matching heads' projection and "
                                   "ReLU layer.")
    perspectives: int = setting(20, "Matching perspectives of bimpm and sim_transformer (BiMPM: 20).")
    text_column: Optional[str] = setting(None, "classification: the text column (default: the first of text, "
                                               "sentence, review, content).")
    take(vars(), "label_column", note="With --task=classification; default: the first of label, sentiment, target, "
                                      "class.")
    take(vars(), "eval_batch_size", "bucket_step", "precision")
    # The method's settings (LoRA's rank, ...), each a flag; recorded in `config` only for a method other than the
    # default (`study_method.record`), so that runs from before --method keep their settings and folders.
    settings_lib.add_fields(vars(), study_method.fields("What of BERT phase 2 trains (and phase 1 with "
                                                        "--method_in_phase1), every block in scope: the methods' "
                                                        "--trainable_layers is 'all' here"))
    method_in_phase1: bool = setting(False, "Phase 1 trains what --method trains too (LoRA's updates, BitFit's "
                                            "biases), beside the head at --phase1_lr. Default: phase 1 is the paper's, "
                                            "the head alone on frozen BERT; --method acts in phase 2.")

    CHECKS: ClassVar[dict] = {
        **settings_lib.CHECKS,
        "validation_fraction": (settings_lib.in_range(0.0, 1.0, low_open=True),
                                "must be between 0 and 1 (exclusive)"),
        "phase1_epochs": (settings_lib.at_least(1), "must be at least 1"),
        "max_gap": (lambda value: settings_lib.in_range(0.0, float("inf"))(value), "must be a number >= 0"),
        "phase1_lr": settings_lib.positive,
        "phase2_lr": settings_lib.positive,
        "head_units": (settings_lib.at_least(1), "must be at least 1"),
        "train_sample_seed": (lambda value: value is None or value >= 0, "must be a number >= 0"),
        "perspectives": (settings_lib.at_least(1), "must be at least 1"),
        **study_method.checks("the stack study"),
    }
    # Where a run computes, not what: a rerun may change it, and runs from before it existed still match.
    NOT_RESULT_SETTINGS: ClassVar[tuple] = ("distribution",)
    # The group settings not taken have their group's default (`tf_transfer.core.setting_groups`): no --lr, each
    # phase has its rate (`plan_phases`' views); no --trainable_layers, the head alone then everything; its feed pads
    # each batch to its length bucket; a constant rate in each phase, BERT's epsilon; backbones from presets only.

    def __post_init__(self):
        self._set("ensemble", tuple(self.ensemble))
        study_method.normalise(self)
        if not self.task:
            raise TransferError("--task is required: conll_ner, classification or quora")
        _choice("task", self.task, TASKS)
        _choice("strategy", self.stack_strategy, STRATEGIES)
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
        super().__post_init__()

    def check_together(self) -> list:
        phases = {phase.number for phase in plan_phases(self)}
        return [(self.stack_strategy != "stack_and_finetune" or self.phase1_epochs < self.max_epochs,
                 f"--phase1_epochs={self.phase1_epochs} leaves no epoch for phase 2 within --max_epochs="
                 f"{self.max_epochs}: --max_epochs counts both phases"),
                *study_method.rules(self, trainable_layers=freezing.ALL),
                (self.train_sample_seed is None or self.max_train_examples is not None,
                 f"--train_sample_seed={self.train_sample_seed} draws a sample of --max_train_examples training "
                 "examples: give --max_train_examples too, or leave --train_sample_seed out"),
                (not self.method_in_phase1 or self.method != methods.DEFAULT,
                 f"--method_in_phase1 with --method={self.method} would train all of BERT in phase 1 (that is "
                 "--strategy=finetune_only): give another --method, or leave --method_in_phase1 off"),
                (not self.method_in_phase1 or 1 in phases,
                 f"--method_in_phase1: --strategy={self.stack_strategy} has no phase 1"),
                (self.method == methods.DEFAULT or 2 in phases or self.method_in_phase1,
                 f"--method={self.method} acts in phase 2, which --strategy={self.stack_strategy} does not have: add "
                 "--method_in_phase1, or use another --strategy")]

    def to_dict(self) -> dict:
        """Every setting by its flag's name; the method's only for another method than the default, and
        --method_in_phase1, --validation_data and --train_sample_seed only when set (`study_method.record`): older
        runs' settings stay what they were."""
        values = study_method.record(self, super().to_dict())
        # `is`, not `in (None, False)`: a sample seed of 0 equals False.
        for name in ("method_in_phase1", "validation_data", "train_sample_seed"):
            if values[name] is None or values[name] is False:
                del values[name]
        return values

    @property
    def run_prefix(self) -> str:
        """What the run's folder name starts with: the method's part ('' for freezing)."""
        return study_method.name_part(self)

    @property
    def heads(self) -> tuple:
        return self.ensemble or (self.head,)

    @property
    def metric(self) -> str:
        return PRIMARY_METRIC[self.task]

    def default_output_dir(self, root: str = "runs") -> str:
        return os.path.join(root, "stack", self.task,
                            f"{self.run_prefix}{'+'.join(self.heads)}_{self.stack_strategy}", f"seed{self.seed}")


study_method.follow(StackSettings)  # a method registered later brings its settings


@dataclasses.dataclass(frozen=True)
class Phase:
    number: int  # 1: head on the frozen backbone; 2: everything
    optimizer: setting_groups.OptimizerSettings  # the run's, at the phase's rate
    last_epoch: int  # the run's epoch (counted over both phases) at which the phase ends at the latest
    gap_rule: bool  # end the phase (and undo the epoch, unless the phase's first) when train accuracy runs ahead

    @property
    def lr(self) -> float:
        return self.optimizer.lr


def plan_phases(config: StackSettings) -> list:
    def at(lr: float) -> setting_groups.OptimizerSettings:
        return setting_groups.view(config, setting_groups.OptimizerSettings, lr=lr)

    if config.stack_strategy == "finetune_only":
        return [Phase(2, at(config.phase2_lr), config.max_epochs, False)]
    if config.stack_strategy == "stack_only":
        return [Phase(1, at(config.phase1_lr), config.max_epochs, False)]
    return [Phase(1, at(config.phase1_lr), config.phase1_epochs, True),
            Phase(2, at(config.phase2_lr), config.max_epochs, False)]
