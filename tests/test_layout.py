"""The package's layers import downwards only, no function runs over 60 lines, no module at the package's top over
150, and a command's flags come from its settings class or are listed in docs/layout.md with why they are not
settings.

Layers, lowest first: core (errors, settings, choices, machine facts), data (arrays and datasets), models (Keras
models), training (the runner and engine), studies (what each paper does with them), reporting (tables, figures),
then the commands at the top of `tf_transfer/`. docs/layout.md draws the same picture."""

from __future__ import annotations

import ast
import functools
import graphlib
import os

from conftest import REPO

LAYERS = ("core", "data", "models", "training", "studies", "reporting", "commands")


@functools.lru_cache(maxsize=None)
def _sources(folder: str) -> tuple:
    """`(path, tree)` of every module under `folder`, parsed once per test process: the tests here only read them."""
    found = []
    for root, _, files in os.walk(os.path.join(REPO, folder)):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path) as f:
                    found.append((os.path.relpath(path, REPO), ast.parse(f.read())))
    return tuple(found)


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


def test_no_function_runs_over_60_lines():
    """Report writers too: each writes its report one section per function (as
    tf_transfer/reporting/methods_report.py)."""
    long = []
    for folder in ("tf_transfer", "experiments"):
        for path, tree in _sources(folder):
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > 60:
                        long.append(f"{path}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


DOOR_LINES = 150  # a command that declares flags, builds settings and calls one function fits in this


def test_every_module_at_the_top_of_the_package_is_a_thin_door():
    """The modules at the top of tf_transfer/ (the commands, the flags two of them share, the Python API's door)
    hold no work of their own: each is at most `DOOR_LINES` lines, the work in its layer (docs/layout.md)."""
    long = {}
    for name in sorted(os.listdir(os.path.join(REPO, "tf_transfer"))):
        if name.endswith(".py"):
            with open(os.path.join(REPO, "tf_transfer", name), encoding="utf-8") as f:
                lines = len(f.read().splitlines())
            if lines > DOOR_LINES:
                long[name] = lines
    assert not long, f"over {DOOR_LINES} lines: {long}"


def _module_name(path: str) -> str:
    name = path[:-len(".py")].replace(os.sep, ".")
    return name[:-len(".__init__")] if name.endswith(".__init__") else name


def _imported_modules(tree, known: set, packages: set) -> set:
    """The package's own modules `tree` imports, at the top or inside functions: `from a.b import c` is a.b.c where
    that is a module, else a.b; and a.b as well where a.b is a package, since the name c is read from a.b's
    `__init__` (so `from experiments import methods`, inside a grid that `experiments/__init__` imports, is a
    cycle; `import experiments.methods as grid` is not)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in packages:
                found.add(node.module)
            for alias in node.names:
                inner = f"{node.module}.{alias.name}"
                found.add(inner if inner in known else node.module)
    return found & known


def test_no_import_cycle_in_the_package_or_the_experiments():
    """Not even through imports inside functions, nor through a package's `__init__`: a cycle there is a pair of
    modules that can only be read together (the methods grids and their report were one, until the grids handed the
    report a `Design`)."""
    paths = {_module_name(path): (path, tree)
             for folder in ("tf_transfer", "experiments") for path, tree in _sources(folder)}
    sources = {name: tree for name, (_, tree) in paths.items()}
    packages = {name for name, (path, _) in paths.items() if path.endswith("__init__.py")}
    graph = {name: _imported_modules(tree, set(sources), packages) - {name} for name, tree in sources.items()}
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        raise AssertionError(f"import cycle: {' -> '.join(error.args[1])}") from None


def test_only_the_commands_read_flags_and_only_they_load_the_experiments():
    """The library takes plain arguments (studies, reports and experiments/ never read absl's FLAGS), and only the
    commands at the top of tf_transfer/ reach up into experiments/."""
    wrong = []
    for folder in ("tf_transfer", "experiments"):
        for path, tree in _sources(folder):
            command = folder == "tf_transfer" and _layer(path) == "commands"
            helpers = path in (os.path.join("tf_transfer", "core", "flags.py"), os.path.join("tf_transfer", "core", "cli.py"))
            reads_flags = any(isinstance(node, ast.Name) and node.id == "FLAGS" or
                              isinstance(node, ast.Attribute) and node.attr == "FLAGS" for node in ast.walk(tree))
            if reads_flags and not (command or helpers):
                wrong.append(f"{path} reads FLAGS")
            loads_experiments = any(isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "experiments"
                                    for node in ast.walk(tree))
            if folder == "tf_transfer" and loads_experiments and not command:
                wrong.append(f"{path} imports experiments/")
    assert not wrong, wrong


def _flags_outside_settings() -> dict:
    """`{module: {flag, ...}}` of docs/layout.md's table "Flags outside the settings"."""
    import re

    with open(os.path.join(REPO, "docs", "layout.md"), encoding="utf-8") as f:
        section = f.read().split("## Flags outside the settings", 1)[1].split("\n## ", 1)[0]
    listed = {}
    for row in section.splitlines():
        cells = row.split("|")
        if row.startswith("| `") and len(cells) > 3:
            module = "tf_transfer." + re.fullmatch(r" `([\w/]+)\.py` ", cells[1]).group(1).replace("/", ".")
            listed.setdefault(module, set()).update(re.findall(r"`--(\w+)`", cells[2]))
    return listed


def test_every_flag_a_command_defines_is_a_setting_or_listed_in_the_layout():
    """A flag defined with absl's DEFINE_* in a command (not generated from a settings class or `core/flags.py`'s
    shared flags, nor a Hugging Face alias) is in docs/layout.md's table, with why it is not a setting."""
    import importlib

    from absl import flags

    from tf_transfer.models.methods import registry

    for name in sorted(os.listdir(os.path.join(REPO, "tf_transfer"))):
        if name.endswith(".py") and name not in ("__init__.py", "__main__.py"):
            importlib.import_module(f"tf_transfer.{name[:-3]}")
    from tf_transfer.core import flags as flags_lib

    listed = _flags_outside_settings()
    # The shared flags a command takes by name (`flags_lib.common`): each listed, none listed that is not one.
    assert listed.pop("tf_transfer.core.flags") == set(flags_lib.COMMON)
    listed["tf_transfer.sweep"] |= set(registry.sweep_options())  # each method's, e.g. --lora_ranks
    defined = {module: {flag.name for flag in found if type(flag).__name__ != "_FlagAlias"}
               for module, found in flags.FLAGS.flags_by_module_dict().items()
               if module.startswith("tf_transfer.") and module != "tf_transfer.core.flags"}
    unlisted = {module: sorted(names - listed.get(module, set())) for module, names in defined.items()}
    assert not {module: names for module, names in unlisted.items() if names}, unlisted
    stale = {module: sorted(names - defined.get(module, set())) for module, names in listed.items()}
    assert not {module: names for module, names in stale.items() if names}, stale


# The shared modules of tf_transfer/studies/ beside the study folders: used by every study, owned by none.
STUDIES_SHARED = {"__init__.py", "grid.py", "grid_session.py", "study.py", "study_method.py", "study_registry.py"}
# Modules of a study folder whose name does not start with the study's (each says what it is).
STUDY_OWN_NAMES = {"glue": ("comparison_runs.py", "compared_methods.py", "pinned_shards.py")}
# A grid that reads another grid's runs as its own names it by import (methods_paired reuses the adaptive-freezing
# study's rate search and full fine-tuning runs): the only grids another module imports, besides the registry.
GRIDS_READ_BY_GRIDS = {"experiments.methods_paired": {"experiments.adaptive_freezing"}}


def test_the_studies_folder_holds_one_folder_per_study_and_the_shared_modules():
    """`ls tf_transfer/studies`: a folder per study (its settings, task and own pieces; docs/layout.md, "Adding a
    study"), beside the few modules every study uses."""
    folder = os.path.join(REPO, "tf_transfer", "studies")
    entries = {name for name in os.listdir(folder) if name != "__pycache__"}
    modules = {name for name in entries if not os.path.isdir(os.path.join(folder, name))}
    assert modules == STUDIES_SHARED, f"modules beside the study folders: {sorted(modules - STUDIES_SHARED)}"
    studies = entries - modules
    assert studies >= {"glue", "stack", "multitask", "sentiment", "sweep"}, sorted(studies)
    for name in studies:
        own = [f for f in os.listdir(os.path.join(folder, name)) if f.endswith(".py") and f != "__init__.py"]
        assert all(f.startswith(name + "_") or f in STUDY_OWN_NAMES.get(name, ()) for f in own), (name, own)


def test_no_two_modules_share_a_name():
    """A module's name says what it is, once: `grep -rn sweep_search` finds one module (no `from ... import sweep`
    that could be either of two)."""
    seen = {}
    for folder in ("tf_transfer", "experiments"):
        for path, _ in _sources(folder):
            name = os.path.basename(path)
            if name != "__init__.py":
                seen.setdefault(name, []).append(path)
    shared = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not shared, shared


def test_no_report_imports_another_report_and_no_grid_takes_a_constant_from_one():
    """Reports (tf_transfer/reporting/*_report.py) share their pieces through shared modules (`method_comparison`,
    `adaptive_freezing_protocol`, `<paper>_paper`), never through another report; a grid names its report's entry
    point (`report=...`) and takes nothing else from it; and no module imports a grid but the grid registry
    (`experiments/__init__.py`) and the grids listed in `GRIDS_READ_BY_GRIDS`."""
    import importlib

    paths = {_module_name(path): (path, tree)
             for folder in ("tf_transfer", "experiments") for path, tree in _sources(folder)}
    known = set(paths)
    packages = {name for name, (path, _) in paths.items() if path.endswith("__init__.py")}
    reports = {name for name in known if name.startswith("tf_transfer.reporting.") and name.endswith("_report")}
    grids = {name for name in known if name.startswith("experiments.") and name != "experiments"}
    wrong = []
    for name, (path, tree) in paths.items():
        imported = _imported_modules(tree, known, packages) - {name}
        if name in reports and imported & reports:
            wrong.append(f"{path} imports the report(s) {sorted(imported & reports)}")
        if name != "experiments" and imported & grids - GRIDS_READ_BY_GRIDS.get(name, set()):
            wrong.append(f"{path} imports the grid(s) {sorted(imported & grids)}")
        if name not in grids:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in reports:
                wrong.append(f"{path} takes {[a.name for a in node.names]} from {node.module}")
            bound = {alias.asname or alias.name: f"{node.module}.{alias.name}" for alias in node.names
                     if f"{node.module}.{alias.name}" in reports} if isinstance(node, ast.ImportFrom) else {}
            for alias, report in bound.items():
                module = importlib.import_module(report)
                used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                        and isinstance(n.value, ast.Name) and n.value.id == alias}
                wrong += [f"{path} takes {report}.{attr}, not a function" for attr in sorted(used)
                          if not callable(getattr(module, attr))]
    assert not wrong, wrong
