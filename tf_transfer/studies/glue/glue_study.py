"""The GLUE trainer's row of the table of studies (`tf_transfer.studies.study_registry`): a grid's run is one
`python -m tf_transfer.glue` run, in `<runs_dir>/<grid>/<task or data set>/<run name>/seed<seed>`, its result a
completed `summary.json`, its data GLUE's folder (--data_dir, default $GLUE_DIR) or a user's files (settings).
It is what a grid that names no study runs (`registry.DEFAULT`).

Example:

>>> import types
>>> from tf_transfer.studies.glue.glue_study import STUDY
>>> grid = types.SimpleNamespace(name="mine")  # a Grid: only its name places a run
>>> STUDY.run_dir("runs", grid, {"task": "rte", "trainable_layers": 4, "lr": 1e-3, "seed": 0, "part": "main"})
'runs/mine/rte/k4_lr0.001_bs1_93f4de70/seed0'
"""

from __future__ import annotations

import os

from tf_transfer.studies.glue.glue_settings import GlueSettings
from tf_transfer.studies.study import Study, completed_summary, is_pending


def _settings(run: dict) -> GlueSettings:
    """The settings of a grid's run (its `part` and the settings a line search has not chosen yet left out)."""
    return GlueSettings(**{k: v for k, v in run.items() if k != "part" and not is_pending(v)})


def run_dir(runs_dir: str, grid, run: dict) -> str:
    """`<runs_dir>/<grid>/<task or data set>/<run name>/seed<seed>`; a run whose rate a line search has not chosen
    yet is named `k<k>_lr-search_bs<batch>`."""
    config = _settings(run)
    name = config.run_name()
    if any(is_pending(v) for v in run.values()):
        name = "k{}_lr-search_bs{}".format(run["trainable_layers"], run["batch_size"])
    return os.path.join(runs_dir, grid.name, config.dataset, name, f"seed{config.seed}")


def result(run: dict, folder: str):
    """The run's completed `summary.json` in `folder`, or None; `TransferError` where it records data files other
    than the run's (a user's file of the same name with other contents): a grid never reports another data set's
    run as this one's."""
    from tf_transfer.data import user_data
    from tf_transfer.training import record

    summary = completed_summary(run, folder)
    if summary is not None:
        record.refuse_other_data(summary, user_data.file_hashes(_settings(run).data_spec), folder,
                                 "give another --runs_dir for this file's runs, or move that folder away")
    return summary


def train(run: dict, folder: str) -> None:
    from tf_transfer.studies.glue.glue_task import run_glue

    run_glue(GlueSettings(**{k: v for k, v in run.items() if k != "part"}), folder)


def data_folder(data_dir):
    """--data_dir, else $GLUE_DIR, checked once (not one error per run); None: the runs read TFDS."""
    from tf_transfer.data import tasks

    data_dir = data_dir or os.environ.get("GLUE_DIR")
    if data_dir:
        tasks.check_data_dir(data_dir)
    return data_dir


def data_settings(data_dir, data) -> dict:
    return {"data_dir": data_folder(data_dir)}


def listed_data(data_dir, data) -> dict:
    """The data folder, unchecked (a list or a report reads no training data): reports read GLUE dev from it (the
    majority class's score)."""
    return {"data_dir": data_dir or os.environ.get("GLUE_DIR")}


STUDY = Study(name="glue", settings_class=GlueSettings, train=train, run_dir=run_dir, data_settings=data_settings,
              result=result, listed_data=listed_data)
