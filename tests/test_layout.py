"""The package's layers import downwards only, and no function outside the report writers runs over 60 lines.

Layers, lowest first: core (errors, settings, choices, machine facts), data (arrays and datasets), models (Keras
models), training (the runner and engine), studies (what each paper does with them), reporting (tables, figures),
then the commands at the top of `tf_transfer/`. docs/layout.md draws the same picture."""

from __future__ import annotations

import ast
import os

from conftest import REPO

LAYERS = ("core", "data", "models", "training", "studies", "reporting", "commands")
# Functions that write a report's Markdown line by line, left whole so that the report reads as its code does.
REPORT_WRITERS = {("experiments/layer_freezing.py", "report"), ("experiments/layer_freezing.py", "_claims"),
                  ("experiments/transfer_learning_report.py", "write_report"),
                  ("experiments/transfer_learning_claims.py", "claims")}


def _sources(folder: str):
    for root, _, files in os.walk(os.path.join(REPO, folder)):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path) as f:
                    yield os.path.relpath(path, REPO), ast.parse(f.read())


def _layer(path: str) -> str:
    parts = path.split(os.sep)
    return parts[1] if len(parts) > 2 else "commands"


def _imported_layers(tree) -> set:
    found = set()
    for node in ast.walk(tree):  # imports inside functions count as much as those at the top
        names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                 [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
        if isinstance(node, ast.ImportFrom) and node.module == "tf_transfer":
            names = [f"tf_transfer.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "tf_transfer" and len(parts) > 1 and parts[1] in LAYERS:
                found.add(parts[1])
    return found


def test_layers_import_only_themselves_and_the_layers_below():
    upward = []
    for path, tree in _sources("tf_transfer"):
        layer = _layer(path)
        for target in _imported_layers(tree):
            if LAYERS.index(target) > LAYERS.index(layer):
                upward.append(f"{path} ({layer}) imports {target}")
    assert not upward, upward


def test_no_function_runs_over_60_lines_outside_the_report_writers():
    long = []
    for folder in ("tf_transfer", "experiments"):
        for path, tree in _sources(folder):
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > 60 and (path, node.name) not in REPORT_WRITERS:
                        long.append(f"{path}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long
