"""What `python -m tf_transfer.experiments run|report STUDY` does with a study's grid once its flags are read: the
runs the command line selects (variant, tasks, presets, axes, the GLUE settings given, the data), then the grid run
(or listed, with --dry_run) or its report written.

The command builds `GridOptions` from its flags, loads the grid from `experiments/` and calls `run_or_report`.

Example:

>>> GridOptions(variant="cpu", tasks=["rte"], shard="1/2").runs_dir
'runs'
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from typing import Optional

from absl import logging

from tf_transfer.core import cli, isolated
from tf_transfer.core.errors import TransferError
from tf_transfer.models import backbones
from tf_transfer.studies import grid
from tf_transfer.studies.glue.glue_settings import GlueSettings


@dataclasses.dataclass(frozen=True)
class GridOptions:
    """What the command line says about a grid's runs, each named by its flag of `tf_transfer.experiments`:
    `variant`, `tasks`, `presets`, `axes` (`--seeds`, `--lrs` as `{"seed": [...], "lr": [...]}`), `given` (the
    GLUE-trainer settings given, put on every run), `data_dir`, `data`, `runs_dir`, `cache_dir`, `shard`, `dry_run`,
    `isolate_runs` and `out` (a report's folder)."""

    variant: str = "paper"
    tasks: Optional[list] = None
    presets: Optional[list] = None
    axes: dict = dataclasses.field(default_factory=dict)
    given: dict = dataclasses.field(default_factory=dict)
    data_dir: Optional[str] = None
    data: Optional[str] = None
    runs_dir: str = "runs"
    cache_dir: Optional[str] = None
    shard: Optional[str] = None
    dry_run: bool = False
    isolate_runs: bool = True
    out: Optional[str] = None


def run_or_report(command: str, study, name: str, options: GridOptions) -> Optional[dict]:
    """`command` ("run" or "report") on the grid `study` (named `name`) with the runs `options` select. Returns
    the counts of a run (`grid.run_until_settled`'s: "failed" among them), else None."""
    runs = study.runs(options.variant, tasks=options.tasks, presets=options.presets, axes=options.axes)
    _override(study, name, runs, options.given)
    if options.tasks and not runs:
        raise TransferError(f"study {name} has no runs for tasks {','.join(options.tasks)}")
    listed = study.entry.listed_data(options.data_dir, options.data)  # e.g. GLUE's folder: reports read GLUE dev
    for settings in runs:
        settings.update(listed)
    if command == "report":
        _report(study, name, runs, options)
        return None
    selected = grid.shard(runs, options.shard)
    if options.dry_run:
        for position, settings in enumerate(selected, start=1):
            print(f"{position:4d} {grid.describe(settings, study.shown)} part={settings['part']} -> "
                  f"{grid.run_dir(options.runs_dir, study, settings)}")
        print(f"{len(selected)} runs ({len(runs)} in the whole grid)")
        return None
    return _run(study, name, selected, options)


def _override(study, name: str, runs: list, given: dict) -> None:
    """Puts the GLUE settings given on the command line on every run of the grid."""
    if not given:
        return
    if study.settings_class is not GlueSettings:
        raise TransferError(f"--{next(iter(given))} sets GLUE-trainer runs; study {name} takes its own settings "
                            "(see its module in experiments/)")
    for settings in runs:
        settings.update(given)
        if "cache_frozen" in given:  # full fine-tuning has nothing frozen to cache
            settings["cache_frozen"] = given["cache_frozen"] and settings["trainable_layers"] != "all"


def _report(study, name: str, runs: list, options: GridOptions) -> None:
    out = options.out or os.path.join("reports", name)
    if not os.path.isdir(options.runs_dir):
        raise TransferError(f"runs folder {options.runs_dir} does not exist: point --runs_dir at the grid's runs "
                            "(the committed reproductions are under reports/)")
    collected = grid.collect(study, runs, options.runs_dir)
    if not any(c["summary"] for c in collected):
        # A report of nothing but "missing" would overwrite a real one at --out and look like a result.
        raise TransferError(f"no completed run of {name} (--variant={options.variant}) under {options.runs_dir}: "
                            "run the grid first, or point --runs_dir at its runs; nothing written")
    written = study.report(collected, out, study, options.variant)
    done = sum(1 for c in collected if c["summary"])
    variant = f" ({options.variant} variant)" if len(study.variants) > 1 or options.variant != "paper" else ""
    print(f"report of {name}{variant}: {done}/{len(collected)} runs completed; written to {written or out}")


def _run(study, name: str, selected: list, options: GridOptions) -> dict:
    from tf_transfer.training import locks

    data = study.data_for(options.data_dir, options.data)
    locks.check_writable(options.runs_dir, "--runs_dir")  # before any run: not one traceback per run
    # A misspelled preset name is one line, not a failed run each; an unreachable hub is each run's own failure, as
    # a missing data file is (the runs that can train still do).
    for preset in sorted({s["preset"] for s in selected if s.get("preset") and not s.get("init_checkpoint")}):
        backbones.check_name(preset)
    for settings in selected:
        settings.update(data)
        if options.cache_dir and settings.get("cache_frozen"):
            settings["cache_dir"] = options.cache_dir
    logging.set_verbosity(logging.INFO)

    start = time.time()
    counts = grid.run_until_settled(study, selected, options.runs_dir, functools.partial(_run_one, options, study),
                                    log=lambda line: print(line, flush=True))
    print(f"{name}: {counts['ran']} ran, {counts['completed']} already completed, {counts['failed']} failed, "
          f"{counts['locked']} taken by other processes, {counts['waiting']} waiting, "
          f"{counts['not needed']} not needed; "
          f"{(time.time() - start) / 60:.1f} min")
    return counts


def _run_one(options: GridOptions, study, settings: dict, folder: str) -> None:
    """Trains one run of the grid, with --isolate_runs in a process of its own. A preset that run found unreachable
    on the hub is marked here too (`backbones.HUB_UNREACHABLE_ENV`), as a sweep marks it for its trials: the runs
    after it load the installed package at once and do not repeat the line (a freezing grid of 8 runs offline said
    it 8 times, each run knocking on the hub again)."""
    if not options.isolate_runs:
        _train_run(study, settings, folder)
        return
    backbones.mark_unreachable(isolated.call(_train_run_marked, study, settings, folder))


def _train_run_marked(study, settings: dict, folder: str) -> Optional[str]:
    """`_train_run` in a process of its own; returns the presets marked unreachable on the hub there."""
    _train_run(study, settings, folder)
    return backbones.unreachable_marks()


def _train_run(study, settings: dict, folder: str) -> None:
    import keras

    cli.log_like_a_command()
    keras.backend.clear_session()  # with --noisolate_runs one process runs many models: drop the previous one
    grid.train_run(study, settings, folder)
