"""Settings grouped by concern: what each component of a run takes instead of many loose arguments, as TF Model
Garden nests a task's config into data, model, optimizer and runtime.

    InputSettings      how examples are read and batched        the feeds (`tf_transfer.data.feeds`), data loading
    ModelSettings      which backbone, what of it trains        `tf_transfer.models.loader.load_model`
    OptimizerSettings  AdamW, its schedule and clipping         `tf_transfer.training.optimizers.build_optimizer`
    LoopSettings       epochs, early stopping, the seed         the epoch loop (`Task.loop`, `Engine`)
    RuntimeSettings    devices, precision, compilation          the strategy, the dtype policy, `Model.compile`

The method's group is per method: its settings dataclass in `tf_transfer.models.methods` (`registry.options_of`).

A study's flat settings class (`tf_transfer.core.settings.RunSettings`) stays the one surface of flags, flagfiles,
`summary.json`'s `config` and run fingerprints; each settings object gives its groups as views (`settings.inputs`,
`settings.model`, `settings.optimizer`, `settings.loop`, `settings.runtime`), built by `view` from its fields of the
same names. So a group changes nothing a user or an older run sees: no flag, `config` entry or folder name.
A group's defaults are its component's own, used where a study has no such setting; the study names each such
field, with why, in `GROUP_FIELDS_NOT_SET` (the stack study has no `lr_schedule`: its optimizer's schedule is
constant), and `view` refuses a settings class with a group field neither declared nor named there.

Example:

>>> from tf_transfer.core import setting_groups
>>> from tf_transfer.studies.glue.glue_settings import GlueSettings
>>> settings = GlueSettings(task="rte", lr=1e-3, clip_norm=0.5)
>>> settings.optimizer.lr, settings.optimizer.clip_norm, settings.optimizer.lr_schedule
(0.001, 0.5, 'constant')
>>> settings.loop.max_epochs, settings.inputs.batch_size, settings.runtime.jit
(30, 1, 'auto')
>>> setting_groups.view(settings, setting_groups.OptimizerSettings, lr=2e-5).lr
2e-05
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional, Union


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputSettings:
    """How examples are read and become batches: the training batch and its seeded order, the token budget,
    padding, scoring batches, and what of the data is used."""

    batch_size: int = 32
    seed: int = 0  # the data order (and the held-out split's draw)
    max_seq_length: int = 128
    padding: str = "bucket"  # bucket: each batch padded to its length bucket; fixed: to max_seq_length
    bucket_step: int = 16
    eval_batch_size: int = 64
    max_train_examples: Optional[int] = None
    validation_fraction: float = 0.0
    skip_bad_rows: bool = False
    data_dir: Optional[str] = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """Which backbone (a preset, or an original Google BERT checkpoint), its dropout, and how many of its blocks
    the freezing rule leaves trainable."""

    preset: str = "bert_base_en_uncased"
    dropout: Optional[float] = None  # None: the preset's own
    trainable_layers: Union[int, str, None] = "all"
    init_checkpoint: Optional[str] = None
    bert_config_file: Optional[str] = None
    vocab_file: Optional[str] = None

    @property
    def weights(self) -> str:
        """Where the weights come from, as summaries and cache names record it: the checkpoint, else the preset."""
        return self.init_checkpoint or self.preset


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerSettings:
    """AdamW as Google BERT's `optimization.py`: peak rate, schedule, decoupled weight decay, clipping, epsilon."""

    lr: float
    lr_schedule: str = "constant"  # or linear: warm-up, then linear decay to 0
    warmup_proportion: float = 0.0
    weight_decay: float = 0.01
    clip_norm: float = 1.0  # 0: no clipping
    adam_epsilon: float = 1e-6


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoopSettings:
    """The epochs: how many at most, when to stop early, and the seed of initialisation and dropout."""

    max_epochs: int
    patience: int = 0  # 0: never stop early
    min_delta: float = 0.0
    seed: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeSettings:
    """Where and how the steps run; none of it is meant to change what is computed beyond rounding."""

    distribution: str = "default"
    precision: str = "float32"
    jit_compile: str = "auto"
    steps_per_execution: int = 1

    @property
    def jit(self):
        """`jit_compile` for `Model.compile`: True, False or "auto"."""
        return {"true": True, "false": False}.get(str(self.jit_compile).lower(), "auto")


GROUPS = (InputSettings, ModelSettings, OptimizerSettings, LoopSettings, RuntimeSettings)


class Group:
    """A settings class's view of one group: `settings.<name>` is `view(settings, group)`."""

    def __init__(self, group: type):
        self.group = group

    def __get__(self, settings, owner=None):
        return self if settings is None else view(settings, self.group)


@functools.lru_cache(maxsize=None)
def check_fields(settings_class: type) -> None:
    """Raises `TypeError` (a bug in a study, not bad input) unless every field of every group is a field of
    `settings_class` or one of its `GROUP_FIELDS_NOT_SET` (`{field: why}`: the group's default applies, or the
    study's view gives it), and none of those is a field too: a misspelt or missing setting does not silently take
    the group's default."""
    declared = set(settings_class.__dataclass_fields__)
    not_set = settings_class.GROUP_FIELDS_NOT_SET
    both = sorted(declared & set(not_set))
    if both:
        raise TypeError(f"{settings_class.__name__}.GROUP_FIELDS_NOT_SET names its own setting {both[0]!r}")
    for group in GROUPS:
        for field in dataclasses.fields(group):
            if field.name not in declared and field.name not in not_set:
                raise TypeError(f"{settings_class.__name__} has no setting {field.name!r} for its {group.__name__}: "
                                "declare it, or name it in GROUP_FIELDS_NOT_SET with why the group's default "
                                "applies")


def view(settings, group: type, **values):
    """The `group` of `settings`: each of the group's fields from the settings' field of the same name, the group's
    default for those the settings class names in `GROUP_FIELDS_NOT_SET`, and `values` over both (a study whose
    setting has another name or meaning: the stack study's rate per phase, sentiment's `epochs`)."""
    check_fields(type(settings))
    own = {f.name: getattr(settings, f.name) for f in dataclasses.fields(group)
           if f.name in settings.__dataclass_fields__ and f.name not in values}
    missing = [f.name for f in dataclasses.fields(group) if f.default is dataclasses.MISSING
               and f.name not in own and f.name not in values]
    if missing:  # a bug in a study, not bad input
        raise TypeError(f"{type(settings).__name__} has no {missing[0]!r}: give its {group.__name__} one "
                        f"(setting_groups.view(settings, {group.__name__}, {missing[0]}=...))")
    return group(**own, **values)
