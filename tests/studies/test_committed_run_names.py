"""Every committed run is still found by the settings classes of today: its settings, rebuilt from its
`summary.json`'s `config` (or the sentiment results' `settings`), record that same `config` and give the run the
name and folder it was written under. So old runs still resume and are still found as completed, whatever moves
inside the settings (issue 39: settings grouped by concern). Reads files only: nothing trains."""

import glob
import json
import os

import pytest

from conftest import REPO
from tf_transfer.training import record
from tf_transfer.studies.stack import stack_ensemble
from tf_transfer.studies.glue.glue_settings import GlueSettings
from tf_transfer.studies.glue.glue_task import GlueTask
from tf_transfer.studies.multitask.multitask_settings import MultitaskSettings
from tf_transfer.studies.multitask.multitask_task import MultitaskTask
from tf_transfer.studies.sentiment.sentiment_settings import SentimentBertSettings
from tf_transfer.studies.stack.stack_settings import StackSettings


def _summaries(*parts) -> list:
    paths = sorted(glob.glob(os.path.join(REPO, "reports", *parts, "**", "summary.json"), recursive=True))
    assert paths, parts
    return [(os.path.dirname(path), json.load(open(path))) for path in paths]


def _found_as_completed(task, summary: dict, folder: str) -> None:
    """The runner's own check (`runner.run`): the run in `folder` has the task's settings, so it is completed (or
    resumed), not refused; and the settings record its `config` entry for entry."""
    settings = task.settings
    record.refuse_other_settings(summary, task.compared_settings(), folder, settings.NOT_RESULT_SETTINGS,
                                 added=task.added_settings)
    recorded = settings.to_dict()
    assert {k: v for k, v in recorded.items() if k in summary["config"]} == summary["config"], folder


def test_every_committed_glue_run_keeps_its_config_name_and_folder():
    runs = _summaries("runs")
    for folder, summary in runs:
        config = summary["config"]
        # Settings added since the run was made had the value `ADDED_SETTINGS` gives (LoRA's init: gaussian).
        settings = GlueSettings.from_dict({**GlueSettings.from_dict(config).added_settings(), **config})
        _found_as_completed(GlueTask(settings), summary, folder)
        assert settings.run_name() == summary["run_name"], folder
        seed_folder, name_folder = os.path.basename(folder), os.path.basename(os.path.dirname(folder))
        assert (name_folder, seed_folder) == (settings.run_name(), f"seed{settings.seed}"), folder
    assert len(runs) >= 300


def test_every_committed_multitask_run_keeps_its_config_and_name():
    for folder, summary in _summaries("multitask", "runs"):
        settings = MultitaskSettings.from_dict(summary["config"])
        _found_as_completed(MultitaskTask(settings), summary, folder)
        assert settings.run_name() == summary["run_name"], folder


def test_every_committed_stack_run_keeps_its_config_and_folder():
    for folder, summary in _summaries("stack_quora", "runs"):
        settings = StackSettings.from_dict(summary["config"])
        assert stack_ensemble.completed_result(settings, folder) == summary
        # runs/stack/<task>/<heads>_<strategy>/seed<seed>: the grid keeps the run's own name, with or without seeds
        name = settings.default_output_dir("runs").split(os.sep)[-2]
        assert name in folder.split(os.sep)[-2:], folder


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO, "reports", "sentiment", "hart", "bert_*.json"))))
def test_every_committed_sentiment_model_keeps_its_settings_and_file(path):
    held = json.load(open(path))["settings"]
    given = {"preset": held["preset"], "mode": held["model"], "pooling": held["pooling"], "seed": held["split_seed"],
             **{k: held[k] for k in ("test_fraction", "epochs", "batch_size", "lr", "hidden_units", "max_seq_length",
                                     "precision")}}
    settings = SentimentBertSettings(**given)
    assert settings.comparable() == held
    assert settings.file_name == os.path.basename(path)
