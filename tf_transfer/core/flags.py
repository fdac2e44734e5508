"""A command's flags: its settings class's fields, plus the few shared flags that are not settings.

`settings_flags(SettingsClass)` defines one flag per field of the class (kind from the field's type, help from its
metadata: `tf_transfer.core.settings`), `common(...)` the shared non-settings flags a command names (where results
go, `--overwrite`, `--report`). Both return `{name: (default, help)}`, which `tf_transfer.core.cli.run(main, ...)`
puts on the flags before the command line is parsed: every command can be imported into one process (the tests do,
and `docs/flag_reference.py`) although they give one flag different defaults and help texts.
`settings_from_flags(SettingsClass, chosen)` then builds the settings from the parsed flags.

Example (in a command module):

>>> FLAGS_OF = {**settings_flags(GlueSettings), **common(output_dir=None)}  # doctest: +SKIP
>>> cli.run(main, FLAGS_OF)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import sys

from absl import flags
from absl.flags import _helpers

from tf_transfer.core import settings as settings_lib

FLAGS = flags.FLAGS

# Shared flags that are not settings: name -> (absl definer, generic help). A command's own help replaces the generic.
# Each is in docs/layout.md's "Flags outside the settings", with why it is not a setting.
COMMON = {
    "data": (flags.DEFINE_string, "The training data file."),
    "data_dir": (flags.DEFINE_string, "Data folder."),
    "cache_dir": (flags.DEFINE_string, "Keep frozen-prefix caches on disk here (memory-mapped) and reuse them."),
    "batch_size": (flags.DEFINE_integer, "Batch size."),
    "output_dir": (flags.DEFINE_string, "Where summary.json, checkpoints and TensorBoard events go."),
    "overwrite": (flags.DEFINE_bool, "Start afresh even if --output_dir holds a completed run."),
    "runs_dir": (flags.DEFINE_string, "Root of the default --output_dir."),
    "text_column": (flags.DEFINE_string, "Column holding the text."),
    "label_column": (flags.DEFINE_string, "Column holding the label."),
    "text_columns": (flags.DEFINE_list, "Columns holding the texts, comma-separated."),
    "export_dir": (flags.DEFINE_string, "A classifier exported by glue --export_dir (a keras-hub preset folder)."),
    "export_format": (flags.DEFINE_string, "What --export_dir writes: preset or saved_model."),
    "report": (flags.DEFINE_list, "Instead of training: print a Markdown table of these run folders."),
    "encoding": (flags.DEFINE_string, "Text encoding of the input files."),
    "padding": (flags.DEFINE_string, "How batches are laid out: bucket, fixed or pack."),
}

# Hugging Face's example scripts' names (run_glue.py, run_classification.py) for the same settings: alias -> flag.
# An alias sets its flag's value (absl's DEFINE_alias), so a run given either name has the same settings and name.
HF_ALIASES = {"learning_rate": "lr", "num_train_epochs": "max_epochs", "per_device_train_batch_size": "batch_size",
              "model_name_or_path": "preset", "text_column_names": "text_columns",
              "label_column_name": "label_column", "do_regression": "regression",
              "per_device_eval_batch_size": "eval_batch_size", "warmup_ratio": "warmup_proportion",
              "max_grad_norm": "clip_norm", "lr_scheduler_type": "lr_schedule"}

_DEFINERS = {str: flags.DEFINE_string, int: flags.DEFINE_integer, float: flags.DEFINE_float,
             bool: flags.DEFINE_bool, tuple: flags.DEFINE_list}
_ABSL_KINDS = {str: "string", int: "int", float: "float", bool: "bool", tuple: "list"}


def _calling_module(depth: int = 2) -> str:
    return _helpers.get_module_object_and_name(sys._getframe(depth).f_globals).module_name


def _define(name: str, definer, default, help_text: str, module: str) -> None:
    if name not in FLAGS:
        definer(name, default, help_text)
    # Shown by the command's --help like its own flags (absl lists only a module's key flags there).
    FLAGS.register_key_flag_for_module(module, FLAGS[name])


def common(**wanted) -> dict:
    """Defines the shared flags named in `wanted` (if not yet defined in this process) and returns `{name:
    (default, help)}` for `cli.run`. A value is the command's default, or `(default, help)`."""
    chosen, module = {}, _calling_module()
    for name, value in wanted.items():
        default, help_text = value if isinstance(value, tuple) else (value, None)
        definer, generic = COMMON[name]
        _define(name, definer, default, help_text or generic, module)
        chosen[name] = (default, help_text or generic)
    return chosen


def settings_flags(settings_class, exclude: tuple = (), module: str = None, only: tuple = None) -> dict:
    """Defines a flag for every field of `settings_class` (`only` these, if given) but `exclude` (if not yet
    defined in this process, with the same kind) and returns `{name: (default, help)}` for `cli.run`."""
    chosen, module = {}, module or _calling_module()
    for field in dataclasses.fields(settings_class):
        name = settings_lib.flag_name(field)
        if name in exclude or (only is not None and name not in only):
            continue
        kind = settings_lib.flag_kind(settings_class, field)
        if name in FLAGS and FLAGS[name].flag_type() != _ABSL_KINDS[kind] and "list" not in FLAGS[name].flag_type():
            raise TypeError(f"--{name} of {settings_class.__name__} is a {kind.__name__}, but another command "
                            f"defined it as {FLAGS[name].flag_type()}")
        default = list(field.default) if isinstance(field.default, tuple) else field.default
        _define(name, _DEFINERS[kind], default, field.metadata["help"], module)
        chosen[name] = (default, field.metadata["help"])
    return chosen


def follow(settings_class, chosen: dict) -> None:
    """Keeps a command's flags (`chosen`, its `COMMAND_FLAGS`) in step with its settings class: a setting added
    later (a training method registered outside the package) gets its flag, one taken out loses it."""
    module = _calling_module()

    def changed(added: dict, removed: tuple) -> None:
        for name in removed:
            if chosen.pop(name, None) is not None and name in FLAGS:
                delattr(FLAGS, name)
        chosen.update(settings_flags(settings_class, only=tuple(added), module=module))

    settings_lib.follow_fields(settings_class, changed)


def hf_aliases(chosen: dict) -> dict:
    """Defines Hugging Face's name (`HF_ALIASES`) for each of the command's flags in `chosen` that has one (listed
    by `--help` and found by absl's suggestions for a misspelt flag); returns `{alias: flag}`."""
    made, module = {}, _calling_module()
    for alias, name in HF_ALIASES.items():
        if name not in chosen:
            continue
        if alias not in FLAGS:
            flags.DEFINE_alias(alias, name, module_name=module)
        FLAGS[alias].help = f"Hugging Face's name (run_glue.py) for --{name}."
        FLAGS.register_key_flag_for_module(module, FLAGS[alias])
        made[alias] = name
    return made


def settings_from_flags(settings_class, chosen: dict, **overrides):
    """`settings_class` built from the parsed values of its flags in `chosen` (what `settings_flags` returned to the
    command), then `overrides`."""
    values = {}
    for field in dataclasses.fields(settings_class):
        name = settings_lib.flag_name(field)
        if name in chosen:
            value = FLAGS[name].value
            values[name] = tuple(value) if isinstance(value, list) else value
    return settings_class.from_dict({**values, **overrides})


def apply(chosen: dict) -> None:
    """Puts a command's defaults and help texts on the shared flags (before parsing)."""
    for name, (default, help_text) in chosen.items():
        FLAGS.set_default(name, default)
        FLAGS[name].help = help_text
        for alias in (alias for alias, target in HF_ALIASES.items() if target == name and alias in FLAGS):
            FLAGS.set_default(alias, default)  # an alias keeps a copy of the default it was defined with (--help)
