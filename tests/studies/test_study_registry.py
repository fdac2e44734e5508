"""The table of studies: the only list of them; every grid names a study in it, a grid that names none runs the
default study's runs, and the grid runner names no study."""

import ast
import os

import pytest

from experiments import GRIDS
from tf_transfer.core.errors import TransferError
from tf_transfer.studies import grid as studies
from tf_transfer.studies import study_registry

from conftest import REPO


def test_every_grid_names_a_study_of_the_table_and_a_grid_naming_none_runs_the_default():
    assert {grid.entry.name for grid in GRIDS.values()} == set(study_registry.STUDIES)
    plain = studies.Grid(name="mine", paper="", flagfile="flags/freezing.flags", axes={}, variants={}, report=None)
    assert plain.entry is study_registry.get(study_registry.DEFAULT)
    assert plain.settings_class is plain.entry.settings_class
    with pytest.raises(TransferError, match="unknown study 'ner': a grid names one of glue, multitask, sentiment, "
                                            "stack"):
        studies.Grid(name="mine", paper="", flagfile="", axes={}, variants={}, report=None, study="ner")


def test_a_stack_grid_without_its_own_layout_places_runs_by_part_head_strategy_and_seed():
    grid = studies.Grid(name="mine", paper="", flagfile="flags/stack_common.flags",
                        axes={"head": ["linear"], "strategy": ["finetune_only"], "seed": [0, 1]},
                        variants={"paper": studies.Variant(settings={"task": "quora"})}, report=None, study="stack")
    assert [studies.run_dir("r", grid, run) for run in grid.runs()] == [
        "r/mine/main/linear_finetune_only/seed0", "r/mine/main/linear_finetune_only/seed1"]
    with pytest.raises(TransferError, match="--data is required"):
        grid.data_for("some/folder", None)


def test_the_grid_runner_names_no_study():
    """Not a study's name, settings class or module in grid.py's code (its docstrings may speak of them)."""
    with open(os.path.join(REPO, "tf_transfer", "studies", "grid.py")) as f:
        tree = ast.parse(f.read())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    words = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.append(node.id)
        elif isinstance(node, ast.Attribute):
            words.append(node.attr)
        elif isinstance(node, ast.ImportFrom):
            words += [node.module or ""] + [alias.name for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.append(node.value)
    rows = study_registry.STUDIES
    names = set(rows) | {row.settings_class.__name__ for row in rows.values()}
    found = [word for word in words for name in names if name.lower() in word.lower()]
    assert not found, found
