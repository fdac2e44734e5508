"""The registry of training methods: the only list of them. A method is a `Method` subclass decorated with
`@register`, in a module of this package; the GLUE trainer, its settings and grids, the sweep, the bench and the
reports ask the registry for the method's pieces and never name a method themselves (docs/layout.md, "Adding a
training method").

A method gives `name`, `title`, `help` and `apply` (`REQUIRED`); every other piece of `PIECES` has a default on
`Method` (no settings, nothing recorded, the sweep's default candidate and pricing, ...) that the method overrides
only where it differs, as Hugging Face PEFT's `BaseTuner` and TF Model Garden's `Task` do. A method's settings are
its `config`, a frozen dataclass as PEFT's `LoraConfig`: each field a setting (`core.settings.setting(default,
help)`; `older=` the value runs made before it had, when not its default; `only_for_method=True` to leave it out of
other methods' records), checked in its `__post_init__`. A method that forgets a required piece, or gives one that
breaks a rule, is refused when it registers, with a line naming the method and the piece, never a bare `KeyError`
later. A method registered after the settings classes were made (outside this package) brings its settings to them
(`follow`).

Example (a method trained by its `apply` alone; tests/studies/test_method_plugin.py trains one like it):

>>> from tf_transfer.models.methods import registry
>>> @registry.register
... class LayerNormsOnly(registry.Method):
...     name, title, help = "layernorms", "LayerNorms only", "the LayerNorms of those blocks; the head"
...     def apply(self, backbone, options, trainable_layers):
...         pass
>>> registry.get("layernorms").run_name_part(None), registry.get("freeze").run_name_part(None)
('layernorms_', '')
>>> registry.unregister("layernorms")
>>> registry.get("prompt")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
tf_transfer.core.errors.TransferError: --method='prompt' is not a training method: use one of freeze, ...
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Callable, Optional

from tf_transfer.core.errors import TransferError

# Runs made before --method existed trained by the freezing rule: a settings dict or summary without `method` is
# this method's.
DEFAULT = "freeze"

# piece -> what it is, for the line that names a forgotten or broken one; `Method` gives each a default but those in
# `REQUIRED`.
PIECES = {
    "name": "--method's value and the runs' `method`",
    "title": "its name in reports' prose (e.g. 'LoRA')",
    "help": "its words in --method's help",
    "color": "its colour in figures",
    "config": "its settings: a frozen dataclass, each field a core.settings.setting(default, help) and a flag, "
              "checked in its __post_init__ (NoSettings for none)",
    "run_defaults": "({setting: value}, why): what the glue command takes from the method where neither a flag nor "
                    "a flagfile gives it, and why, for the run's first line (({}, '') for nothing)",
    "check_together": "check_together(settings): [(ok, message)] rules across its settings and the scope",
    "apply": "apply(backbone, options, trainable_layers): sets what trains (after the freezing rule set the scope)",
    "describe": "describe(settings): what the run's first line adds ('' for nothing)",
    "summary_facts": "summary_facts(options, backbone): what summary.json records beside `method` ({} for nothing)",
    "record_fields": "the keys summary_facts (or its trainer) adds to summary.json, or with per_epoch=True to each "
                     "epoch's record: core.record_schema.Field(name, types, meaning, required=False) each (() for "
                     "none); tf_transfer/training/run_record.py reads them",
    "added_weights": "added_weights(summary): weights the method adds to the model, from a summary (None if none)",
    "hparams": "hparams(settings): its TensorBoard HParams under it ({} for none)",
    "hparams_off": "its HParams' values in runs of other methods ({} for none)",
    "run_name_part": "run_name_part(settings): what the run folder's name starts with ('' for nothing)",
    "closing_line": "closing_line(summary): what the glue command prints about the finished run before its last "
                    "line ('' for nothing)",
    "table_label": "table_label(summary): its cell in the `method` column of `experiments table`",
    "backward_passes": "work of a trained block's backward pass in forward passes (2: weights' gradients too; 1: "
                       "activations' only): how the sweep prices a candidate and the bench counts FLOPs",
    "sweep_candidates": "sweep_candidates(num_layers, options): [(settings overrides, learning rates)] the budgeted "
                        "sweep may try ([] for none)",
    "sweep_left_out": "why the sweep's default --methods leave it out, from a committed study ('' where they take it "
                      "in; --methods still names it)",
    "sweep_options": "the sweep's flags for its candidates: {flag: (default list, help, int|float|str)} ({} for none)",
    "sweep_columns": "settings shown as columns of the sweep's candidates table (() for none)",
    "candidate_tag": "candidate_tag(settings): how a sweep candidate's name starts",
    "merge_for_export": "merge_for_export(backbone): makes the trained backbone a plain one before it is exported",
    "trainer": "None (the GLUE trainer's task trains it), or the class the GLUE study mixes into its task to train "
               "it (a method decided while training, as AutoFreeze)",
}
REQUIRED = ("name", "title", "help", "apply")
# The sweep's rates for a method that gives no `sweep_candidates` of its own: a partial method's, 10-100x full
# fine-tuning's (LoRA's and BitFit's papers).
SWEEP_RATES = (1e-4, 1e-3)

_METHODS: dict = {}
# Told `(method, registered)` of each method registered (True) or taken out (False) from then on: the settings
# classes made before, so that a method registered later brings them its settings (`follow`).
_FOLLOWERS: list = []


@dataclasses.dataclass(frozen=True, kw_only=True)
class NoSettings:
    """The config of a method without settings of its own."""


class Method:
    """A training method: subclass it, give `name`, `title`, `help` and `apply`, override the other pieces of `PIECES`
    where the method differs from the defaults here, and decorate it with `@register`. The defaults: no settings
    (`config` is `NoSettings`), nothing taken from the method where no flag is given, no rule across settings,
    nothing added to the run's first line, to `summary.json` or to TensorBoard, no weights added, the run folder's
    name and the sweep's candidates starting with `name`, `name` in `experiments table`, one sweep candidate (every
    block, at `SWEEP_RATES`) priced as freezing's (the weights' gradients too), no sweep flags, nothing to merge
    before an export, and the GLUE trainer's own task.

    Example:

    >>> class Plain(Method):
    ...     name, title, help = "plain", "plain", "nothing more"
    ...     def apply(self, backbone, options, trainable_layers):
    ...         pass
    >>> Plain().sweep_candidates(12, {}), Plain().backward_passes, Plain().run_defaults
    ([({'method': 'plain', 'trainable_layers': 'all'}, (0.0001, 0.001))], 2, ({}, ''))
    """

    color = "tab:gray"
    config = NoSettings
    run_defaults = ({}, "")
    record_fields = ()
    hparams_off = {}
    backward_passes = 2
    sweep_left_out = ""
    sweep_options = {}
    sweep_columns = ()
    trainer = None

    @property
    def settings(self) -> dict:
        """`{field: (type, dataclass field)}` of its `config`, in their order (read from it, not a piece)."""
        return config_fields(self.config)

    def options(self, values: dict):
        """Its `config`: its settings' defaults, updated from `values` (a settings object's fields or keyword
        arguments; other names are ignored), checked as the config checks them (`TransferError`)."""
        return self.config(**{k: v for k, v in values.items() if k in self.settings})

    def check_together(self, settings) -> list:
        return []

    def describe(self, settings) -> str:
        return ""

    def summary_facts(self, options, backbone) -> dict:
        return {}

    def added_weights(self, summary: dict) -> Optional[int]:
        return None

    def hparams(self, settings) -> dict:
        return {}

    def run_name_part(self, settings) -> str:
        return f"{self.name}_"

    def closing_line(self, summary: dict) -> str:
        return ""

    def table_label(self, summary: dict) -> str:
        return self.name

    def sweep_candidates(self, num_layers: int, options: dict) -> list:
        return [({"method": self.name, "trainable_layers": "all"}, SWEEP_RATES)]

    def candidate_tag(self, settings: dict) -> str:
        return self.name

    def merge_for_export(self, backbone) -> None:
        pass  # the trained weights are the backbone's own


def register(cls: type) -> type:
    """Class decorator: checks that `cls` gives the required pieces and that its pieces keep the rules, and adds one
    instance of it to the registry."""
    name = getattr(cls, "name", None) or cls.__name__  # a subclass of a registered method may keep its name
    missing = [piece for piece in REQUIRED if not any(piece in klass.__dict__ for klass in cls.__mro__
                                                      if klass is not Method and klass is not object)]
    if missing:
        raise TransferError(f"training method {name!r} has no {missing[0]!r} ({PIECES[missing[0]]}): give it in its "
                            "class before registering it")
    broken = _broken_piece(cls)
    if broken:
        raise TransferError(f"training method {name!r}: its {broken[0]!r} {broken[1]} ({PIECES[broken[0]]})")
    if name in _METHODS and type(_METHODS[name]) is not cls:
        raise TransferError(f"training method {name!r} is registered twice ({_METHODS[name].__class__.__module__} "
                            f"and {cls.__module__})")
    # A setting two methods share (AutoFreeze's and FreezeOut's --min_trainable_layers) is one field: declared the
    # same way by each.
    taken = {field: (other.name, other.settings[field]) for other in _METHODS.values() if other.name != name
             for field in other.settings}
    clash = [field for field, (kind, spec) in config_fields(cls.config).items() if field in taken and (
        taken[field][1][0] is not kind or taken[field][1][1].default != spec.default
        or taken[field][1][1].metadata != spec.metadata)]
    if clash:
        raise TransferError(f"training method {name!r}: setting {clash[0]!r} is already {taken[clash[0]][0]!r}'s, "
                            "declared otherwise")
    known = name in _METHODS
    _METHODS[name] = cls()
    if not known:
        for follower in _FOLLOWERS:
            follower(_METHODS[name], True)
    return cls


def _broken_piece(cls: type) -> Optional[tuple]:
    """`(piece, what is wrong)` for the first piece of `cls` that breaks its rule, or None."""
    config = cls.config
    if not (dataclasses.is_dataclass(config) and isinstance(config, type) and config.__dataclass_params__.frozen):
        return "config", "is not a frozen dataclass"
    helpless = [field.name for field in dataclasses.fields(config) if not field.metadata.get("help")]
    if helpless:
        return "config", f"has no help for {helpless[0]!r}: declare it with core.settings.setting(default, help)"
    try:
        config()
    except TypeError:
        return "config", "has a setting without a default"
    values, why = cls.run_defaults if isinstance(cls.run_defaults, tuple) and len(cls.run_defaults) == 2 else (
        None, None)
    if not hasattr(values, "items") or not isinstance(why, str) or (values and not why):
        return "run_defaults", "must be a pair ({setting: value}, why), with a reason when it takes anything"
    if not isinstance(cls.sweep_left_out, str):
        return "sweep_left_out", "must be a string: why the sweep's default --methods leave it out ('' for not)"
    if cls.backward_passes not in (1, 2):
        return "backward_passes", f"is {cls.backward_passes!r}, not 1 or 2"
    return None


def unregister(name: str) -> None:
    """Takes a method out (tests that register a method of their own), and its settings out of the settings classes
    that followed it in."""
    method = _METHODS.pop(name, None)
    if method is not None:
        for follower in _FOLLOWERS:
            follower(method, False)


def follow(follower: Callable) -> None:
    """Calls `follower(method, registered)` for every method registered (True) or taken out (False) from now on: a
    settings class made before a method outside this package registers takes its settings so (the GLUE trainer's:
    `studies/glue/glue_settings.py`)."""
    _FOLLOWERS.append(follower)


@functools.lru_cache(maxsize=None)
def config_fields(config: type) -> dict:
    """`{field: (type, dataclass field)}` of a method's config dataclass, in their order."""
    hints = typing.get_type_hints(config)
    return {field.name: (hints[field.name], field) for field in dataclasses.fields(config)}


def names() -> tuple:
    """Every registered method, in registration order."""
    return tuple(_METHODS)


def get(name: str) -> Method:
    if name not in _METHODS:
        raise TransferError(f"--method={name!r} is not a training method: use one of {', '.join(_METHODS)}")
    return _METHODS[name]


def name_check() -> tuple:
    """`--method`'s rule and message (`core.settings.CHECKS` style): one of the registered methods."""
    return (lambda value: value in _METHODS), f"must be one of {', '.join(_METHODS)}"


def set_before_training() -> tuple:
    """The methods that set what trains before training starts and leave the loop alone (`trainer` None): those a
    study with a training loop of its own (stack, multitask, sentiment BERT) can run."""
    return tuple(name for name, method in _METHODS.items() if method.trainer is None)


def name_of(settings: dict) -> str:
    """The method of a settings dict or a summary (runs from before methods existed: `DEFAULT`)."""
    return settings.get("method") or DEFAULT


def of(settings: dict) -> Method:
    return get(name_of(settings))


def method_help(chosen: Optional[tuple] = None, what: str = "What trains") -> str:
    """--method's help: every method (or those `chosen`) in its own words, after `what`."""
    parts = [f"{method.name} ({method.help})" for method in _chosen(chosen)]
    listed = ", ".join(parts[:-1]) + " or " + parts[-1] if len(parts) > 1 else parts[0]
    return f"{what} (docs/methods.md): {listed}."


def _chosen(chosen: Optional[tuple]) -> list:
    return [method for name, method in _METHODS.items() if chosen is None or name in chosen]


# --- what the settings classes take from every method ---------------------------------------------------------------

def setting_fields(chosen: Optional[tuple] = None) -> dict:
    """`{field: (type, dataclass field)}` of every method's settings (or those of the `chosen` methods), in
    registration order (a shared one where its first method declares it)."""
    fields = {}
    for method in _chosen(chosen):
        for name, (kind, field) in method.settings.items():
            fields.setdefault(name, (kind, dataclasses.field(default=field.default, metadata=field.metadata)))
    return fields


def check_configs(settings, chosen: Optional[tuple] = None) -> None:
    """Raises `TransferError` (naming the flag) unless each method's config (or the `chosen` methods') takes its
    settings' values in a settings object, as each config's `__post_init__` checks them."""
    for method in _chosen(chosen):
        method.options({name: getattr(settings, name) for name in method.settings
                        if name in settings.__dataclass_fields__})


def older_value(field: dataclasses.Field):
    """The value a method's setting had in runs made before it existed: its `older`, else its default."""
    return field.metadata.get("older", field.default)


def older_runs(chosen: Optional[tuple] = None) -> dict:
    return {name: _plain(older_value(field)) for name, (_, field) in setting_fields(chosen).items()}


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def owners() -> dict:
    """`{setting: (method, ...)}`: the methods each method setting is for."""
    found = {}
    for method in _METHODS.values():
        for name in method.settings:
            found[name] = found.get(name, ()) + (method.name,)
    return found


def recorded_only_for(chosen: Optional[tuple] = None) -> dict:
    """`{setting: method}`: settings that other methods' runs leave out of their records and names."""
    return {name: method.name for method in _chosen(chosen) for name, (_, field) in method.settings.items()
            if field.metadata.get("only_for_method")}


def method_rules(settings) -> list:
    """The chosen method's own rules across a settings object's settings (`Method.check_together`)."""
    if settings.method not in _METHODS:
        return []  # the `method` check has refused it already
    unknown = [name for name in get(settings.method).settings if name not in settings.__dataclass_fields__]
    if unknown:
        return [(False, f"--method={settings.method}: its setting {unknown[0]!r} is not one of "
                        f"{type(settings).__name__}'s (the method was registered after the settings class was "
                        "made: import its module in tf_transfer/models/methods/__init__.py)")]
    return get(settings.method).check_together(settings)


def other_methods_rules(settings) -> list:
    """Another method's setting changed from its default is refused, naming the methods it is for."""
    return [(settings.method in owned or getattr(settings, name) == settings.__dataclass_fields__[name].default,
             f"--{name} is for --method={' or '.join(owned)}, not --method={settings.method}")
            for name, owned in owners().items() if name in settings.__dataclass_fields__]


def options_of(settings) -> dict:
    """The chosen method's settings of a settings object, as keyword arguments of `apply`."""
    return {name: getattr(settings, name) for name in get(settings.method).settings}


def apply(backbone, method: str, trainable_layers="all", **options) -> None:
    """Sets what trains in `backbone` for `method` (in place): the freezing rule's scope of `trainable_layers`, then
    the method within it. Call it inside the strategy's scope, after the pretrained weights are loaded and before
    the model is compiled (LoRA creates variables)."""
    from tf_transfer.models import freezing

    chosen = get(method)
    unknown = [name for name in options if name not in chosen.settings]
    if unknown:
        raise TypeError(f"--method={method} has no setting {unknown[0]!r}")
    freezing.set_trainable_layers(backbone, trainable_layers)
    chosen.apply(backbone, chosen.options(options), trainable_layers)


def hparams(settings) -> dict:
    """Every method's HParams: the chosen method's values, the others' `hparams_off`."""
    values = {}
    for method in _METHODS.values():
        values.update(method.hparams(settings) if method.name == settings.method else method.hparams_off)
    return values


def table_label(summary: dict) -> str:
    """A run's cell in `experiments table`'s `method` column (a method not registered in this process: its name)."""
    name = name_of(summary)
    return _METHODS[name].table_label(summary) if name in _METHODS else name


def added_weights(summary: dict) -> Optional[int]:
    name = name_of(summary)
    return _METHODS[name].added_weights(summary) if name in _METHODS else None


def sweep_columns() -> tuple:
    return tuple(column for method in _METHODS.values() for column in method.sweep_columns)


def sweep_options() -> dict:
    return {flag: option for method in _METHODS.values() for flag, option in method.sweep_options.items()}


def in_sweep() -> tuple:
    """The methods that give the sweep candidates (`sweep_candidates` not empty at 12 blocks and the options'
    defaults): those --methods may name."""
    defaults = {flag: [kind(value) for value in default] for flag, (default, _, kind) in sweep_options().items()}
    return tuple(name for name, method in _METHODS.items() if method.sweep_candidates(12, defaults))


def in_default_sweep() -> tuple:
    """The sweep's default --methods: those of `in_sweep` without a `sweep_left_out` reason."""
    return tuple(name for name in in_sweep() if not _METHODS[name].sweep_left_out)


def left_out_of_default_sweep() -> dict:
    """`{method: why}` of the methods the sweep can try that its default --methods leave out."""
    return {name: _METHODS[name].sweep_left_out for name in in_sweep() if _METHODS[name].sweep_left_out}
