"""One setting, one declaration: a name that several studies' settings classes use is declared once
(`core.settings.SHARED`, by `shared_setting`), and every field of every group of settings (`core.setting_groups`)
is a setting of each study or named by it as not set, so a misspelt setting fails loudly instead of silently taking
the group's default. Imports the settings classes only: nothing trains."""

import collections
import dataclasses
import typing
from typing import ClassVar

import pytest

from tf_transfer.core import setting_groups
from tf_transfer.core import settings as settings_lib
from tf_transfer.models.methods import registry as methods_registry
from tf_transfer.studies import study_registry

SETTINGS_CLASSES = [row.settings_class for row in study_registry.STUDIES.values()]


def _declarations() -> dict:
    """`{name: {settings class: field}}` of every study's settings."""
    found = collections.defaultdict(dict)
    for settings_class in SETTINGS_CLASSES:
        for field in dataclasses.fields(settings_class):
            found[field.name][settings_class] = field
    return found


def test_a_name_several_studies_use_is_declared_once_with_its_type():
    method_settings = {"method", *methods_registry.setting_fields()}  # declared once by their method
    for name, by_class in _declarations().items():
        if name in method_settings:
            continue
        own_meaning = name in settings_lib.OWN_MEANINGS
        if len(by_class) > 1:
            assert name in settings_lib.SHARED or own_meaning, f"several studies declare {name}: add it to SHARED"
        for settings_class, field in by_class.items():
            if name in settings_lib.SHARED and field.metadata.get("shared") != name:
                assert own_meaning, f"{settings_class.__name__}.{name}: declare it with shared_setting({name!r})"
            if field.metadata.get("shared") == name:
                assert typing.get_type_hints(settings_class)[name] == settings_lib.SHARED[name][0], \
                    f"{settings_class.__name__}.{name}"
                assert field.metadata["help"].startswith(settings_lib.SHARED[name][2])


def test_a_study_keeps_another_default_only_with_its_why():
    with pytest.raises(TypeError, match="needs its why"):
        settings_lib.shared_setting("patience", 2)
    field = settings_lib.shared_setting("patience", 2, note="Counted per phase.", why="The paper: 2.")
    assert (field.default, field.metadata["help"]) == (
        2, settings_lib.SHARED["patience"][2] + " Counted per phase. The paper: 2.")


@pytest.mark.parametrize("settings_class", SETTINGS_CLASSES, ids=lambda cls: cls.__name__)
def test_every_group_field_is_a_setting_of_the_study_or_named_as_not_set(settings_class):
    setting_groups.check_fields(settings_class)
    declared = set(settings_class.__dataclass_fields__)
    for group in setting_groups.GROUPS:
        for field in dataclasses.fields(group):
            assert (field.name in declared) != (field.name in settings_class.GROUP_FIELDS_NOT_SET), field.name


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Misspelt(settings_lib.RunSettings):
    """A study that means `weight_decay` but spells it otherwise."""

    weight_deacy: float = settings_lib.setting(0.0, "Misspelt.")

    GROUP_FIELDS_NOT_SET: ClassVar[dict] = {
        field.name: "not in this study" for group in setting_groups.GROUPS for field in dataclasses.fields(group)
        if field.name not in settings_lib.RunSettings.__dataclass_fields__ and field.name != "weight_decay"}


def test_a_misspelt_setting_is_refused_not_given_the_groups_default():
    with pytest.raises(TypeError, match="_Misspelt has no setting 'weight_decay' for its OptimizerSettings"):
        _Misspelt()


def test_a_setting_also_named_as_not_set_is_refused():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Both(_Misspelt):
        GROUP_FIELDS_NOT_SET: ClassVar[dict] = {**_Misspelt.GROUP_FIELDS_NOT_SET, "weight_decay": "not set",
                                                "seed": "not set"}

    with pytest.raises(TypeError, match="names its own setting 'seed'"):
        setting_groups.check_fields(Both)


# Group fields whose component default is not the studies' shared one, and why.
GROUP_DEFAULTS_OF_THEIR_OWN = {
    "validation_fraction": "a feed holds nothing out unless a study asks",
    "dropout": "None: the preset's own rate, for a backbone loaded outside the studies",
    "lr": "no default: every optimizer is given its rate",
    "max_epochs": "no default: every loop is given its length",
}


def test_a_group_field_defaults_to_the_shared_setting_of_that_name():
    for group in setting_groups.GROUPS:
        for field in dataclasses.fields(group):
            if field.name in settings_lib.SHARED and field.name not in GROUP_DEFAULTS_OF_THEIR_OWN:
                assert field.default == settings_lib.SHARED[field.name][1], f"{group.__name__}.{field.name}"
