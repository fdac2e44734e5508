"""One setting, one declaration: a setting of several studies is declared once, by the group of settings that owns it
(`core.setting_groups`), and taken by name (`core.settings.take`); a method's settings by its config dataclass; and
every flag of every command leads back to exactly one declaration of its type, default and help. Imports the settings
classes and the command modules only: nothing trains."""

import dataclasses
import importlib.util
import os
import typing

import pytest

from conftest import REPO
from tf_transfer.core import flags as flags_lib
from tf_transfer.core import setting_groups
from tf_transfer.core import settings as settings_lib
from tf_transfer.models.methods import registry as methods_registry
from tf_transfer.studies import study_registry

SETTINGS_CLASSES = [row.settings_class for row in study_registry.STUDIES.values()]


def _method_settings() -> dict:
    """`{name: (type, field)}` of every registered method's settings, `method` included (each study declares it)."""
    return {"method": None, **methods_registry.setting_fields()}


def test_each_group_setting_is_declared_by_one_group_and_no_method_reuses_its_name():
    declared = setting_groups.declared()
    assert set(declared) == {f.name for group in setting_groups.GROUPS for f in dataclasses.fields(group)}
    assert not set(declared) & set(_method_settings())
    for name, (group, kind, field) in declared.items():
        assert field.metadata["help"], f"{group.__name__}.{name} has no help"


@pytest.mark.parametrize("settings_class", SETTINGS_CLASSES, ids=lambda cls: cls.__name__)
def test_a_study_takes_a_group_setting_with_its_type_help_and_default(settings_class):
    hints = typing.get_type_hints(settings_class)
    for field in dataclasses.fields(settings_class):
        if field.name not in setting_groups.declared():
            assert "group" not in field.metadata
            continue
        if field.name in settings_lib.OWN_MEANINGS and "group" not in field.metadata:
            continue  # the study's own meaning of the name, declared by the study
        group, kind, declared = setting_groups.declared()[field.name]
        where = f"{settings_class.__name__}.{field.name}"
        assert field.metadata.get("group") == group.__name__, f"{where}: take it, take(vars(), {field.name!r})"
        assert hints[field.name] == kind, where
        assert field.metadata["help"].startswith(declared.metadata["help"]), where
        assert field.default == declared.default or field.metadata.get("why"), where


def test_a_study_keeps_another_default_only_with_its_why_and_takes_only_what_a_group_declares():
    with pytest.raises(TypeError, match="a default other than LoopSettings's 0 needs its why"):
        settings_lib.take({}, "patience", default=2)
    body = {}
    settings_lib.take(body, "patience", default=2, note="Counted per phase.", why="The paper: 2.")
    assert body["__annotations__"] == {"patience": int}
    assert (body["patience"].default, body["patience"].metadata["help"]) == (
        2, setting_groups.LoopSettings.__dataclass_fields__["patience"].metadata["help"]
        + " Counted per phase. The paper: 2.")
    with pytest.raises(TypeError, match="'weight_deacy' is not a setting of any group"):
        settings_lib.take({}, "weight_deacy")  # misspelt: refused, not given a default


def _flag_reference():
    spec = importlib.util.spec_from_file_location("flag_reference", os.path.join(REPO, "docs", "flag_reference.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _declarations(name: str, kind: str, default, help_text: str) -> list:
    """Every declaration a flag shown as `--name` (absl's `kind`) with `default` and `help_text` can come from."""
    kinds = {str: "string", int: "int", float: "float", bool: "bool", tuple: "list"}
    found = []
    if name in setting_groups.declared():
        group, hint, field = setting_groups.declared()[name]
        takers = [cls for cls in SETTINGS_CLASSES if cls.__dataclass_fields__.get(name) is not None
                  and cls.__dataclass_fields__[name].metadata.get("group") == group.__name__]
        if help_text.startswith(field.metadata["help"]) and takers:
            assert kinds[settings_lib.flag_kind(takers[0], takers[0].__dataclass_fields__[name])] == kind, name
            # Another default says why: in the study's take (`why`), or in the command's help (bench's --padding).
            assert default == field.default or any(cls.__dataclass_fields__[name].default == default
                                                   and cls.__dataclass_fields__[name].metadata.get("why")
                                                   for cls in takers) or not any(
                help_text == cls.__dataclass_fields__[name].metadata["help"] for cls in takers), \
                f"--{name}={default!r}: another default without its why"
            found.append(f"{group.__name__}.{name}")
    method_settings = methods_registry.setting_fields()
    if name in method_settings and method_settings[name][1].metadata["help"] == help_text:
        found.append(f"the method setting {name}")
    for cls in SETTINGS_CLASSES:
        field = next((f for f in dataclasses.fields(cls) if settings_lib.flag_name(f) == name), None)
        if (field is not None and "group" not in field.metadata and name not in method_settings
                and field.metadata["help"] == help_text and field.default == (
                    tuple(default) if isinstance(default, list) else default)):
            found.append(f"{cls.__name__}.{field.name}")
    if name == "method":
        found = found[:1]  # each study says what --method acts on in it, from the one registry's words
    return found


def test_every_flag_of_every_command_has_one_declaration_of_its_type_default_and_help():
    """Walks every command's flags as docs/flags.md lists them (the default and help each command gives them): each
    is a group's setting a study takes, a method's setting or a study's own, each declared once; or a flag that is
    no setting, a shared one of `core/flags.py` or the command's own, which docs/layout.md lists with why
    (`tests/test_layout.py`)."""
    from absl import flags

    reference = _flag_reference()
    outside = 0
    for command in reference.COMMANDS:
        module = importlib.import_module(f"tf_transfer.{command}")
        own = {flag.name for flag in flags.FLAGS.get_flags_for_module(f"tf_transfer.{command}")}
        for name, kind, default, help_text in reference.command_flags(command):
            if name in flags_lib.HF_ALIASES:
                continue  # another name of a flag that is walked itself
            found = _declarations(name, kind, default, help_text)
            if not found:
                assert name in flags_lib.COMMON or name in own or name in flags.FLAGS.get_flags_for_module(
                    "tf_transfer.grid_flags") or name in getattr(module, "COMMAND_FLAGS", {}), f"{command} --{name}"
                assert not any(settings_lib.flag_name(f) == name and f.metadata["help"] == help_text
                               for cls in SETTINGS_CLASSES for f in dataclasses.fields(cls)), f"{command} --{name}"
                outside += 1
                continue
            assert len(found) == 1, f"{command} --{name} has {len(found)} declarations: {found}"
    assert outside  # the walk reached the flags that are not settings too
