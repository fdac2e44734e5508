"""Settings: each study's settings are one frozen dataclass extending `RunSettings`, and each field is a flag.

A field is declared with `setting(default, help)`: its metadata carries the flag's help text (and, where the flag's
name differs from the field's, the flag's name), its type the flag's kind (str, int, float, bool; a tuple is a
comma-separated list). So one declaration gives the command its flag (`tf_transfer.core.flags.settings_flags`), the
study its setting, a flagfile its meaning (`read_flagfile`, the one reader every study's grid uses) and a run's
`summary.json` its `config` entry (`to_dict`). A setting that several studies have is declared once, by the group
of settings that owns it (`tf_transfer.core.setting_groups`: inputs, model, optimizer, loop, runtime), and a study
takes it by name with `take(vars(), name)`; the components of a run get the groups back from the settings object
(`settings.optimizer`, `settings.loop`, ...).

Checks live in one table, `CHECKS`: for a setting name, the rule its value must meet and what the error line says
(a class may change a rule in its own `CHECKS`); a settings object applies the rules of its own fields when it is
built, plus its `check_together()`, and raises `TransferError` naming the flag, before any data is read or
TensorFlow imported. `NOT_RESULT_SETTINGS` names a class's settings that never change a result (where data lives,
speed knobs): a rerun may change them and still resume or find its run completed.

Example:

>>> from tf_transfer.core import settings
>>> from tf_transfer.studies.glue.glue_settings import GlueSettings
>>> settings.read_flagfile("flags/wang_transfer_k4.flags", GlueSettings)["trainable_layers"]
'4'
>>> GlueSettings(task="rte", lr=-1.0)
Traceback (most recent call last):
...
tf_transfer.core.errors.TransferError: --lr must be a positive number, got -1.0
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import typing
from typing import Callable, ClassVar, Optional

from tf_transfer.core import setting_groups as groups
from tf_transfer.core.setting_groups import setting  # noqa: F401 (the studies' and methods' word)
from tf_transfer.core.choices import DISTRIBUTIONS, PRECISIONS
from tf_transfer.core.errors import TransferError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def add_fields(namespace: dict, fields: dict) -> None:
    """Declares `{name: (type, setting(...))}` in a settings class's body (`add_fields(vars(), ...)`), in the order
    given, where the call stands among the class's own fields: settings another module owns (a training method's)."""
    for name, (kind, field) in fields.items():
        namespace.setdefault("__annotations__", {})[name] = kind
        namespace[name] = field


# settings class -> callables told `(added {name: (type, field)}, removed names)` when `change_fields` changes it.
_FIELD_FOLLOWERS: dict = {}
# What `dataclasses.dataclass` writes into a class: taken out before it makes the class again (it keeps what it finds).
_MADE_BY_DATACLASS = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__", "__match_args__")


def change_fields(settings_class, added: dict = None, removed: tuple = ()) -> None:
    """Adds `added` (`{name: (type, field)}`, those it does not have yet) to a settings class already made, after its
    fields, and takes the fields `removed` out, then tells its followers (`follow_fields`): the settings of a training
    method registered after the class was made (outside the package), or taken out again. The class stays the same
    object, so every module that imported it sees the change."""
    added = {name: spec for name, spec in (added or {}).items() if name not in settings_class.__dataclass_fields__}
    removed = tuple(name for name in removed if name in settings_class.__dict__.get("__annotations__", {}))
    if not added and not removed:
        return
    own = settings_class.__dict__["__annotations__"]
    for field in dataclasses.fields(settings_class):
        if field.name in own:  # `dataclass` reads each field's declaration from the class body: put it back
            setattr(settings_class, field.name, field)
    for name in removed:
        del own[name]
        delattr(settings_class, name)
    namespace = {"__annotations__": own}
    add_fields(namespace, added)
    for name in added:
        setattr(settings_class, name, namespace[name])
    for name in _MADE_BY_DATACLASS:
        if name in settings_class.__dict__:
            delattr(settings_class, name)
    params = settings_class.__dataclass_params__
    dataclasses.dataclass(frozen=params.frozen, kw_only=True)(settings_class)
    _type_hints.cache_clear()
    for follower in _FIELD_FOLLOWERS.get(settings_class, ()):
        follower(added, removed)


def follow_fields(settings_class, follower: Callable) -> None:
    """Calls `follower(added, removed)` whenever `change_fields` changes `settings_class` (a command's flags)."""
    _FIELD_FOLLOWERS.setdefault(settings_class, []).append(follower)


def flag_name(field: dataclasses.Field) -> str:
    return field.metadata.get("flag", field.name)


def check(flag: str, value, rule_and_message: tuple) -> None:
    """Raises `TransferError` with the commands' line (`--lr must be a positive number, got -1.0`) when `value` of
    setting `flag` breaks its rule: the settings classes and the Python API check alike."""
    rule, message = rule_and_message
    if not rule(value):
        raise TransferError(f"--{flag} {message}, got {value!r}")


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def at_least(low) -> Callable:
    return lambda value: value is not None and value >= low


def in_range(low, high, low_open: bool = False) -> Callable:
    """`low <= value < high` (`low < value` when `low_open`)."""
    return lambda value: _finite(value) and (low < value if low_open else low <= value) and value < high


def one_of(choices) -> tuple:
    return (lambda value: value in choices), f"must be one of {', '.join(choices)}"


def known_encoding(name) -> bool:
    """Whether `name` is a text encoding Python can read (`codecs.lookup`)."""
    import codecs

    try:
        codecs.lookup(str(name))
        return True
    except LookupError:
        return False


positive = (lambda value: _finite(value) and value > 0, "must be a positive number")
optional_at_least_1 = (lambda value: value is None or value >= 1, "must be >= 1")

# setting name -> (rule, what the error line says after "--<flag> ").
CHECKS = {
    "lr": positive,
    "batch_size": (at_least(1), "must be at least 1"),
    "eval_batch_size": (at_least(1), "must be at least 1"),
    "bucket_step": (at_least(1), "must be at least 1"),
    "max_epochs": (at_least(1), "must be at least 1"),
    "patience": (at_least(0), "must be >= 0 (0 turns early stopping off)"),
    "min_delta": (at_least(0), "must be >= 0"),
    "max_seq_length": (at_least(8), "must be at least 8"),
    "max_train_examples": optional_at_least_1,
    "validation_fraction": (in_range(0.0, 1.0), "must be in [0, 1)"),
    "weight_decay": (at_least(0), "must be >= 0"),
    "clip_norm": (at_least(0), "must be >= 0 (0 turns clipping off)"),
    "dropout": (in_range(0.0, 1.0), "must be in [0, 1)"),
    "precision": one_of(PRECISIONS),
    "distribution": one_of(DISTRIBUTIONS),
}

# Names that studies give to settings that mean different things: each such study declares its own, with its help.
OWN_MEANINGS = {
    "task": "the GLUE trainer's GLUE task or TFDS data set; the stack study's kind of data (conll_ner, ...)",
    "data_dir": "the GLUE trainer's GLUE folder; the multi-task study's CS224N folder",
    "trainable_layers": "the sentiment study's overrides --bert_mode and is unset (None) by default",
}
_GROUP_DEFAULT = object()


def take(namespace: dict, *names: str, default=_GROUP_DEFAULT, note: str = "", why: str = "") -> None:
    """Declares the group settings `names` in a settings class's body (`take(vars(), "lr")`), where the call stands
    among the class's own fields: type, default and help as their group declares them
    (`tf_transfer.core.setting_groups`), the study's `note` after the help (what the setting also says in that
    study); a study that keeps another `default` (its paper's) gives it with `why`, a sentence appended to the help.
    `default`, `note` and `why` are for one name at a time.

    >>> take({}, "lr", default=1e-3)
    Traceback (most recent call last):
    ...
    TypeError: lr: a default other than OptimizerSettings's 2e-05 needs its why (take(..., why=...))
    >>> body = {}
    >>> take(body, "lr", default=1e-3, why="The paper: 1e-3.")
    >>> body["__annotations__"]["lr"], body["lr"].default, body["lr"].metadata["help"]
    (<class 'float'>, 0.001, 'Peak learning rate. The paper: 1e-3.')
    """
    if len(names) > 1 and (default is not _GROUP_DEFAULT or note or why):
        raise TypeError("take(...): a default, note or why is for one setting at a time")
    for name in names:
        if name not in groups.declared():
            raise TypeError(f"{name!r} is not a setting of any group in tf_transfer/core/setting_groups.py: declare "
                            "it there, or as the study's own with setting(...)")
        group, kind, declared = groups.declared()[name]
        chosen = declared.default if default is _GROUP_DEFAULT else default
        if chosen != declared.default and not why:
            raise TypeError(f"{name}: a default other than {group.__name__}'s {declared.default!r} needs its why "
                            "(take(..., why=...))")
        help_text = " ".join(part for part in (declared.metadata["help"], note, why) if part)
        add_fields(namespace, {name: (kind, dataclasses.field(default=chosen, metadata={
            "help": help_text, "group": group.__name__, **({"why": why} if why else {})}))})


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSettings:
    """What every study's run is set by; a study's settings class extends it with its own fields and the group
    settings it takes, and may take a field here again with a `note` or its own default (`take`)."""

    take(vars(), "preset", "seed", "batch_size", "max_seq_length", "precision", "distribution")

    CHECKS: ClassVar[dict] = CHECKS
    # Settings that never change a result: a rerun may change them and still resume its run or find it completed.
    NOT_RESULT_SETTINGS: ClassVar[tuple] = ()

    def __post_init__(self):
        for field in dataclasses.fields(self):
            if field.name in self.CHECKS:
                check(flag_name(field), getattr(self, field.name), self.CHECKS[field.name])
        for ok, message in self.check_together():
            if not ok:
                raise TransferError(message)

    def check_together(self) -> list:
        """`[(ok, error line)]`: rules that involve several settings."""
        return []

    # The settings grouped by concern, what each component of a run takes (`tf_transfer.core.setting_groups`):
    # built from the fields above and a subclass's, not fields (no flags, nothing in `config`).
    inputs: ClassVar = groups.Group(groups.InputSettings)
    model: ClassVar = groups.Group(groups.ModelSettings)
    optimizer: ClassVar = groups.Group(groups.OptimizerSettings)
    loop: ClassVar = groups.Group(groups.LoopSettings)
    runtime: ClassVar = groups.Group(groups.RuntimeSettings)

    def _set(self, name: str, value) -> None:
        """Normalises a value while the frozen object is being built (in a subclass's `__post_init__`)."""
        object.__setattr__(self, name, value)

    def to_dict(self) -> dict:
        """Every setting by its flag's name, as `summary.json`'s `config` records it."""
        return {flag_name(f): _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, values: dict):
        """The settings of `values` keyed by flag names (as `to_dict`, a flagfile or a grid gives them)."""
        by_flag = {flag_name(f): f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(by_flag))
        if unknown:
            raise TransferError(f"--{unknown[0]} is not a setting of {cls.__name__}")
        return cls(**{by_flag[k]: v for k, v in values.items()})


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


@functools.lru_cache(maxsize=None)
def _type_hints(settings_class) -> dict:
    # A class's fields are fixed when it is defined, and resolving every annotation of a settings class (about half
    # a millisecond) once per field made each flagfile read cost some 25 ms: a grid command reads dozens.
    return typing.get_type_hints(settings_class)


def flag_kind(settings_class, field: dataclasses.Field) -> type:
    """The flag kind of a field: str, int, float, bool, or tuple (a comma-separated list)."""
    hint = _type_hints(settings_class)[field.name]
    if typing.get_origin(hint) is typing.Union:
        members = [m for m in typing.get_args(hint) if m is not type(None)]
        hint = members[0] if len(members) == 1 else str  # e.g. trainable_layers: a number or "all"
    if typing.get_origin(hint) is tuple:
        return tuple
    return hint if hint in (str, int, float, bool, tuple) else str


def convert(text: str, kind: type):
    """A flag's text as a value of `kind`, as absl parses it on a command line."""
    if kind is bool:
        if text.lower() not in ("1", "true", "t", "yes", "0", "false", "f", "no"):
            raise ValueError(f"not a boolean: {text!r}")
        return text.lower() in ("1", "true", "t", "yes")
    if kind is tuple:
        return tuple(part.strip() for part in text.split(",") if part.strip())
    return kind(text)


def read_flagfile(path: str, settings_class, command_flags: Optional[dict] = None) -> dict:
    """`--name=value` lines of a flagfile (and the flagfiles it includes with `--flagfile=`, relative to the
    repository like the flagfiles in `flags/`) as the settings of `settings_class` they set, keyed by flag name.
    `command_flags` (`{name: kind}`) are the command's other flags the flagfile may set (e.g. an output folder)."""
    kinds = {**(command_flags or {}),
             **{flag_name(f): flag_kind(settings_class, f) for f in dataclasses.fields(settings_class)}}
    values = {}
    full = path if os.path.isabs(path) else os.path.join(REPO, path)
    with open(full) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, text = line.lstrip("-").partition("=")
            if name == "flagfile":
                values.update(read_flagfile(text, settings_class, command_flags))
            elif name in kinds:
                try:
                    values[name] = convert(text, kinds[name])
                except ValueError as e:
                    raise TransferError(f"{path}: --{name}={text}: {e}") from None
            else:
                raise TransferError(f"{path}: --{name} is not a setting of {settings_class.__name__}")
    return values
