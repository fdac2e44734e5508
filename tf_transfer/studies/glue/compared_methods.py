"""Which of a grid's compared methods a GLUE run is: the methods grids name each compared setting
(`{name: settings}`), and a run's settings name one of them, where a setting the run lacks counts at the value runs
had before it existed (`GlueSettings.ADDED_SETTINGS`). Shared by the methods_full and methods_paired grids.

Example:

>>> from tf_transfer.studies.glue.compared_methods import method_named
>>> method_named({"BitFit": {"method": "bitfit"}}, {"method": "bitfit", "lr": 1e-3})
'BitFit'
"""

from __future__ import annotations

from tf_transfer.studies.glue.glue_settings import GlueSettings


def method_named(methods: dict, settings: dict) -> str:
    """The name in `methods` (`{name: settings}`) of a run's settings (a setting a method leaves out at its default)."""
    for name, method in methods.items():
        if all(settings.get(k, GlueSettings.ADDED_SETTINGS.get(k)) == v for k, v in method.items()
               if k != "cache_frozen") and settings.get("cache_frozen", False) == method.get("cache_frozen", False):
            return name
    raise KeyError(f"no method of the study has settings {settings}")
