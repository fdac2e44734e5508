"""Step 4 of the checklist, the row of the table of studies: how a grid's run of the toy study is trained, where it
lives and what --data_dir/--data become (no data: the toy draws its own). Light: the task, and TensorFlow, only
inside `train`."""

from __future__ import annotations

import os

from tf_transfer.studies.study import Study, no_data
from toy_study.toy_settings import ToySettings


def train(run: dict, folder: str) -> None:
    from toy_study.toy_task import run_toy

    run_toy(ToySettings.from_dict({k: v for k, v in run.items() if k != "part"}), folder)


def run_dir(runs_dir: str, grid, run: dict) -> str:
    return os.path.join(runs_dir, grid.name, f"rate{run['rate']:g}", f"seed{run['seed']}")


STUDY = Study(name="toy", settings_class=ToySettings, train=train, run_dir=run_dir, data_settings=no_data)
