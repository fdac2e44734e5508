"""`--method` in the studies with a training loop of their own (stack-and-finetune, multi-task, sentiment BERT): the
settings fields, checks and record a study's settings class takes, and how its task applies and records the method,
all asked of the method registry (`tf_transfer.models.methods.registry`), so that no study names a method.

These studies run the methods that set what trains before training starts (`registry.set_before_training`:
freezing, LoRA, BitFit); a method that decides what trains as it trains brings its own trainer, mixed into the GLUE
trainer's task alone, and is refused with one line naming the study.

Runs of the default method (freezing) record nothing new in their `config`: their settings, folder names and run
names are those they had before `--method` came to these studies, so older runs still resume and are still found as
completed. A run of another method records `method` and that method's own settings.

Example (how a settings class takes it; `tf_transfer.studies.stack.stack_settings` is one):

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class StackSettings(RunSettings):
        settings_lib.add_fields(vars(), study_method.fields("What phase 2 trains"))
        CHECKS: ClassVar[dict] = {**settings_lib.CHECKS, **study_method.checks("the stack study")}

        def check_together(self):
            return study_method.rules(self, trainable_layers=freezing.ALL)

        def to_dict(self):
            return study_method.record(self, super().to_dict())

>>> from tf_transfer.models import methods
>>> from tf_transfer.studies import study_method
>>> [methods.get(name).trainer for name in study_method.usable()]  # those the GLUE trainer's task would train
[None, None, None]
>>> sorted(study_method.fields("What trains"))[:3]
['bitfit_layer_norm', 'lora_alpha', 'lora_init']
"""

from __future__ import annotations

import dataclasses
import types
from typing import Callable, Optional

from tf_transfer.core import settings as settings_lib
from tf_transfer.core.settings import setting
from tf_transfer.models import methods
from tf_transfer.models.methods import registry


def usable() -> tuple:
    """The methods these studies can run."""
    return registry.set_before_training()


def fields(what: str) -> dict:
    """`{field: (type, dataclass field)}`: `method` (its help starting with `what`, what the method acts on in the
    study) and the usable methods' own settings, for `settings_lib.add_fields(vars(), ...)`."""
    return {"method": (str, setting(methods.DEFAULT, registry.method_help(usable(), what))),
            **registry.setting_fields(usable())}


def follow(settings_class, takes: Callable = usable, also: Optional[Callable] = None) -> None:
    """A method registered after `settings_class` was made (outside the package) brings it its settings, when it is
    one of the methods the class `takes` (these studies: those that set what trains before training); taken out, it
    takes back those no other such method has. `also(method, registered)` follows too (the GLUE settings' records
    of older runs)."""
    def changed(method, registered: bool) -> None:
        if registered and method.name in takes():
            settings_lib.change_fields(settings_class, added=method.settings)
        elif not registered:
            kept = registry.setting_fields(takes())
            settings_lib.change_fields(settings_class, removed=tuple(name for name in method.settings
                                                                     if name not in kept))
        if also is not None:
            also(method, registered)

    registry.follow(changed)


def checks(study: str) -> dict:
    """The settings' rule (`RunSettings.CHECKS`): `method` must be one `study` can run (each method's config checks
    its own settings: `rules`)."""
    own_trainer = [name for name in methods.names() if name not in usable()]
    elsewhere = (f" ({', '.join(own_trainer)} decide what trains as they train, in the GLUE trainer alone: python -m "
                 "tf_transfer.glue)") if own_trainer else ""
    return {"method": ((lambda value: value in usable()),
                       f"must be one of {', '.join(usable())} in {study}{elsewhere}")}


def rules(settings, trainable_layers) -> list:
    """`check_together`'s rules of the method: each usable method's config takes its settings (`TransferError`
    otherwise), the chosen one's rules over `settings` with the study's scope of blocks (`trainable_layers`: what the
    freezing rule leaves trainable where the method acts), and no other method's setting changed."""
    registry.check_configs(settings, usable())
    if settings.method not in usable():
        return []  # refused by the `method` check
    chosen = methods.get(settings.method)
    unknown = [name for name in chosen.settings if name not in settings.__dataclass_fields__]
    if unknown:
        return [(False, f"--method={settings.method}: its setting {unknown[0]!r} is not one of "
                        f"{type(settings).__name__}'s (the method was registered after the settings class was made: "
                        "import its module in tf_transfer/models/methods/__init__.py)")]
    view = types.SimpleNamespace(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)})
    view.trainable_layers = trainable_layers
    return [*chosen.check_together(view), *registry.other_methods_rules(settings)]


def normalise(settings) -> None:
    """Makes list-valued method settings tuples (flags give lists), in a settings class's `__post_init__`."""
    for name, (kind, _) in registry.setting_fields(usable()).items():
        if kind is tuple:
            settings._set(name, tuple(getattr(settings, name)))


def recorded(settings) -> dict:
    """The method's entries of a run's settings record: none for the default method (as runs from before --method
    came to the study), else `method` and that method's own settings."""
    if settings.method == methods.DEFAULT:
        return {}
    own = {name: getattr(settings, name) for name in methods.get(settings.method).settings}
    return {"method": settings.method, **{k: list(v) if isinstance(v, tuple) else v for k, v in own.items()}}


def record(settings, values: dict) -> dict:
    """`values` (the settings' `to_dict()`) with the method's entries as a run records them (`recorded`)."""
    keys = {"method", *registry.setting_fields(usable())}
    return {**{name: value for name, value in values.items() if name not in keys}, **recorded(settings)}


def name_part(settings) -> str:
    """What a run's folder or model name starts with ('' for the default method)."""
    return methods.get(settings.method).run_name_part(settings)


def describe(settings) -> str:
    """What the run's first line adds (', LoRA r=8 on query,value'; '' for freezing)."""
    return methods.get(settings.method).describe(settings)


def apply(backbone, settings, trainable_layers) -> None:
    """Sets what trains in `backbone`: the freezing rule's `trainable_layers`, then the method within them (inside
    the strategy's scope, before the model is compiled: LoRA creates variables)."""
    methods.apply(backbone, settings.method, trainable_layers, **registry.options_of(settings))


def facts(settings, backbone) -> dict:
    """What `summary.json` records of the method: its name and its own facts (LoRA's rank, targets and weights)."""
    chosen = methods.get(settings.method)
    return {"method": settings.method, **chosen.summary_facts(chosen.options(registry.options_of(settings)), backbone)}


def hparams(settings) -> dict:
    """The method's TensorBoard HParams (`method`, and each method's own: the chosen one's values, the others')."""
    return {"method": settings.method, **registry.hparams(settings)}
