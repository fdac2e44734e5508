"""Every module's docstring examples run (`doctest`), and those marked `+SKIP` (they need a model or data) import
only what exists, so no example shows a name the package does not have."""

from __future__ import annotations

import ast
import doctest
import importlib
import os
import pkgutil
import re

import pytest

from conftest import REPO

import experiments
import tf_transfer


def _modules() -> list:
    names = []
    for package in (tf_transfer, experiments):
        names.append(package.__name__)
        names += [info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    return sorted(names)


MODULES = _modules()


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name, monkeypatch):
    monkeypatch.chdir(REPO)
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                                  verbose=False, report=True)
    assert failures == 0, f"{name}: {failures} docstring example(s) failed (printed above)"


IMPORT = re.compile(r">>> ((?:from \S+ )?import [^#]+?)(?:\s*#.*)?$")


@pytest.mark.parametrize("name", MODULES)
def test_every_example_imports_what_exists(name):
    module = importlib.import_module(name)
    tests = doctest.DocTestFinder(exclude_empty=True).find(module)
    for test in tests:
        for example in test.examples:
            source = example.source.strip()
            if not source.startswith(("import ", "from ")):
                continue
            for node in ast.parse(source).body:
                if isinstance(node, ast.ImportFrom):
                    imported = importlib.import_module(node.module)
                    for alias in node.names:
                        assert hasattr(imported, alias.name) or importlib.util.find_spec(
                            f"{node.module}.{alias.name}"), f"{name}: {source}"
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        importlib.import_module(alias.name)


def test_every_module_is_checked():
    found = {os.path.splitext(os.path.relpath(path, REPO))[0].replace(os.sep, ".").removesuffix(".__init__")
             for folder in ("tf_transfer", "experiments") for path in _python_files(os.path.join(REPO, folder))}
    assert found == set(MODULES)


def _python_files(folder: str) -> list:
    return [os.path.join(root, f) for root, _, files in os.walk(folder) for f in files if f.endswith(".py")]
