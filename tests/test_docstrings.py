"""Every module's docstring examples run (`doctest`), and those marked `+SKIP` (they need a model or data) import
only what exists, so no example shows a name the package does not have."""

from __future__ import annotations

import ast
import doctest
import importlib
import linecache
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
    monkeypatch.setattr(linecache, "checkcache", _checkcache)
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                                  verbose=False, report=True)
    assert failures == 0, f"{name}: {failures} docstring example(s) failed (printed above)"


_CHECKCACHE = linecache.checkcache


def _checkcache(filename=None) -> None:
    """`linecache.checkcache`, which doctest's debugger reset calls, walked again where an entry vanished mid-walk:
    SQLAlchemy's generated functions, left by earlier tests' Optuna storages, drop theirs from a weakref finalizer
    whenever the collector frees them, any thread's collection included (`.ci/run` at c97ad76: a KeyError on one).
    It only drops stale source lines, so a walk that keeps meeting them is left undone."""
    for _ in range(3):
        try:
            return _CHECKCACHE(filename)
        except KeyError:
            continue


class _Vanishing(dict):
    """A cache whose one entry is freed as it is read, as a finalizer run mid-walk frees it."""

    def __getitem__(self, key):
        self.pop(key)
        raise KeyError(key)


def test_the_doctest_cache_walk_survives_an_entry_freed_mid_walk(monkeypatch):
    monkeypatch.setattr(linecache, "cache", _Vanishing({"<sqlalchemy generated __init__>": (1, None, ["x"], "")}))
    with pytest.raises(KeyError):
        _CHECKCACHE()
    linecache.cache["<sqlalchemy generated __init__>"] = (1, None, ["x"], "")
    _checkcache()
    assert not linecache.cache


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
