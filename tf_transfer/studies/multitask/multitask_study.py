"""The multi-task study's row of the table of studies (`tf_transfer.studies.study_registry`): a grid's run is one
`python -m tf_transfer.multitask` run (`MultitaskSettings`) in `<runs_dir>/<part>` (one row of the study's table
per part), its result a completed `summary.json`, its data the CS224N minBERT folder (--data_dir).

Example:

>>> from tf_transfer.studies.multitask.multitask_study import STUDY
>>> STUDY.run_dir("runs", None, {"part": "li_finetune", "seed": 0})
'runs/li_finetune'
"""

from __future__ import annotations

import os

from tf_transfer.core.errors import TransferError
from tf_transfer.studies.multitask.multitask_settings import MultitaskSettings
from tf_transfer.studies.study import Study


def run_dir(runs_dir: str, grid, run: dict) -> str:
    return os.path.join(runs_dir, run["part"])


def train(run: dict, folder: str) -> None:
    from tf_transfer.studies.multitask.multitask_task import run_multitask

    run_multitask(MultitaskSettings.from_dict({k: v for k, v in run.items() if k != "part"}), folder)


def data_settings(data_dir, data) -> dict:
    if not data_dir:
        raise TransferError("--data_dir is required: the CS224N minBERT data folder, e.g. "
                            "../shared/data/cs224n_minbert")
    return {"data_dir": data_dir}


def listed_data(data_dir, data) -> dict:
    """The data folder, where given, also when the grid is reported: the report's constant prediction reads it."""
    return {"data_dir": data_dir} if data_dir else {}


# The row flagfiles (flags/li_*.flags) name their own --output_dir; the grid places its runs itself.
STUDY = Study(name="multitask", settings_class=MultitaskSettings, train=train, run_dir=run_dir,
              data_settings=data_settings, listed_data=listed_data, command_flags={"output_dir": str})
