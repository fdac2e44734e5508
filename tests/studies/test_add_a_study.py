"""docs/layout.md's "Adding a study", followed: the toy study in tests/toy_study/ has each piece the checklist names,
is registered with one row, runs its grid through the grid runner (what `experiments run` calls), resumes nothing it
finished, and reports."""

from __future__ import annotations

import os
import re

import pytest

from conftest import REPO
from experiments import GRIDS, load_grid
from tf_transfer.core.errors import TransferError
from tf_transfer.studies import grid as studies
from tf_transfer.studies import study_registry
from toy_study import toy_study
from toy_study.toy_settings import ToySettings

# The checklist's file for each piece -> the toy study's module of that piece (the toy keeps them in one folder).
PIECES = {"tf_transfer/studies/<study>/<study>_settings.py": "toy_settings.py",
          "tf_transfer/studies/<study>/<study>_task.py": "toy_task.py",
          "tf_transfer/studies/<study>/<study>_study.py": "toy_study.py",
          "experiments/<grid>.py": "toy_grid.py",
          "tf_transfer/reporting/<grid>_report.py": "toy_report.py"}


def _checklist() -> str:
    with open(os.path.join(REPO, "docs", "layout.md"), encoding="utf-8") as f:
        return f.read().split("## Adding a study", 1)[1].split("\n## ", 1)[0]


def test_the_checklist_names_every_piece_the_toy_study_has():
    checklist = _checklist()
    steps = re.findall(r"^\d+\. \*\*", checklist, flags=re.M)
    assert len(steps) >= len(PIECES)
    for piece, toy in PIECES.items():
        assert f"`{piece}`" in checklist, f"docs/layout.md's checklist no longer names {piece}"
        assert os.path.exists(os.path.join(REPO, "tests", "toy_study", toy)), toy
    assert "study_registry.py" in checklist and "`GRIDS`" in checklist  # the two registrations


def test_a_toy_setting_out_of_range_is_one_error_line():
    with pytest.raises(TransferError, match=r"^--rate must be a positive number, got -1\.0$"):
        ToySettings(rate=-1.0)


def test_the_toy_study_registers_runs_its_grid_and_reports(tmp_path, monkeypatch):
    monkeypatch.setitem(study_registry.STUDIES, "toy", toy_study.STUDY)  # its row: the one registration of a study
    from toy_study import toy_grid  # a grid names a registered study

    monkeypatch.setitem(GRIDS, "toy", toy_grid.GRID)  # its line in experiments/__init__.py
    grid = load_grid("toy")
    runs = grid.runs("paper")
    assert [(run["rate"], run["seed"], run["epochs"]) for run in runs] == [(0.05, 0, 2), (0.2, 0, 2)]
    runs_dir = str(tmp_path / "runs")
    lines = []
    counts = studies.run_until_settled(grid, runs, runs_dir, log=lines.append)
    assert (counts["ran"], counts["failed"]) == (2, 0), lines
    again = studies.run_until_settled(grid, runs, runs_dir, log=lines.append)
    assert (again["ran"], again["completed"]) == (0, 2)  # a finished run is found, not trained again

    collected = studies.collect(grid, runs, runs_dir)
    summaries = [entry["summary"] for entry in collected]
    assert all(s["completed"] and len(s["epochs"]) == 2 for s in summaries)
    assert [s["config"]["rate"] for s in summaries] == [0.05, 0.2]
    path = grid.report(collected, str(tmp_path / "report"), grid, "paper")
    with open(path) as f:
        rows = [line for line in f.read().splitlines() if re.match(r"\| 0\.", line)]
    best = [s["epochs"][s["best_epoch"] - 1]["val"]["accuracy"] for s in summaries]
    assert [row.split(" | ")[2] for row in rows] == [f"{value:.3f}" for value in best]
