"""`Study`: one row of the table of studies (`tf_transfer.studies.study_registry`): how a grid's run of the study
is trained, where it lives and how its completed result is read. Each study defines its row beside its own code
(`glue_study.py`, `stack_study.py`, ...); a `Grid` names its study and asks the row, never the study's code.

Example (the GLUE trainer's row, what a grid that names no study runs):

>>> from tf_transfer.studies import study_registry
>>> study_registry.get().settings_class.__name__
'GlueSettings'
>>> study_registry.get("stack").run_dir  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from tf_transfer.training import run_record


def completed_summary(run: dict, folder: str) -> Optional[dict]:
    """The run's `summary.json` in `folder` if it is marked completed, else None: most studies' result (as
    `run_record` reads it: older runs' missing keys filled in)."""
    summary = run_record.read_summary(folder)
    return summary if summary and summary.get("completed") else None


def is_pending(value) -> bool:
    """A dependent setting's placeholder, not resolved yet (e.g. "<line search>"; `Grid.dependent`)."""
    return isinstance(value, str) and value.startswith("<")


def no_data(data_dir, data) -> dict:
    """Nothing: a study whose runs need no data to be listed or reported."""
    return {}


@dataclasses.dataclass(frozen=True)
class Study:
    """A study's row. `settings_class`: the settings of one run (a `core.settings.RunSettings`); `train(run,
    folder)`: trains the run (a dict of settings plus its `part`) in `folder`, importing TensorFlow only then;
    `run_dir(runs_dir, grid, run) -> folder`: where a grid's run lives (a grid may place its runs itself, `Grid.layout`);
    `result(run, folder) -> completed result or None`; `data_settings(data_dir, data) -> settings`: what the
    `experiments` command's --data_dir and --data become for every run it trains, checked (bad data: a
    `TransferError`); `listed_data(data_dir, data) -> settings`: what they become for every run also when the grid is
    only listed or reported (e.g. the data folder whose dev set gives a report's majority baseline); `command_flags`:
    the study command's flags that are not settings but that its flagfiles may set (`{name: kind}`)."""

    name: str
    settings_class: type
    train: Callable
    run_dir: Callable
    data_settings: Callable
    result: Callable = completed_summary
    listed_data: Callable = no_data
    command_flags: Optional[dict] = None
