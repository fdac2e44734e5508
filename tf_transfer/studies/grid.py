"""Studies as data: a study's `Grid` of runs, the runner that works through it, and where each run lives.

A study module in `experiments/` defines `GRID = Grid(...)`: its fixed settings (read from its flagfile in
`flags/`), the axes of its grid, named variants (e.g. `cpu`: the settings this project's 2-core machine can afford,
with the differences from the paper listed) and a `report(runs, out, grid, variant)` function. A grid names its
study, the kind of run it lists (`Grid(study="stack", ...)`), and asks the study's row of the table of studies
(`tf_transfer.studies.study_registry`) how a run is trained, where it lives and how its result is read; a grid that
names none runs the table's default study. The runner never reads flags.

Example:

>>> from experiments import load_grid
>>> grid = load_grid("transfer_learning")
>>> len(grid.runs(variant="paper"))  # 8 tasks x 5 settings x 2 rates x 2 seeds
160
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, Optional

from tf_transfer.core import disk
from tf_transfer.core import settings as settings_lib
from tf_transfer.models import backbones, methods
from tf_transfer.training import locks, record, run_folder, run_record
from tf_transfer.studies import study_registry
from tf_transfer.models.first_run_rates import first_run_lr
from tf_transfer.studies.study import Study, is_pending
from tf_transfer.core.errors import TransferError

# Encoder depth of presets the studies name, so a grid can be listed without loading a model.
PRESET_DEPTHS = {"bert_base_en_uncased": 12, "bert_base_en": 12, "bert_large_en_uncased": 24,
                 "all_minilm_l6_v2_en": 6, "bert_tiny_en_uncased": 2, "bert_small_en_uncased": 4,
                 "bert_medium_en_uncased": 8, "roberta_base_en": 12, "roberta_large_en": 24,
                 "distil_bert_base_en_uncased": 6, "distil_bert_base_en": 6, "distil_bert_base_multi": 6,
                 "electra_small_discriminator_uncased_en": 12, "electra_base_discriminator_uncased_en": 12,
                 "electra_large_discriminator_uncased_en": 24, "deberta_v3_extra_small_en": 6,
                 "deberta_v3_small_en": 6, "deberta_v3_base_en": 12, "deberta_v3_large_en": 24}


def preset_depth(preset: str) -> int:
    """The encoder depth of `preset`, read without loading its weights, so that a grid is listed in a moment: the
    studies' presets from `PRESET_DEPTHS`, a folder's or an installed package's from its `config.json`
    (`backbones.preset_depth`), any other from the `config.json` the hub gives, once `backbones.check_preset` has
    refused a preset no source gives (a misspelled name, a folder that does not exist, the hub unreachable)."""
    depth = PRESET_DEPTHS.get(preset) or backbones.preset_depth(preset)
    if depth is not None:
        return depth
    backbones.check_preset(preset)
    from keras_hub.src.utils.preset_utils import get_file  # keras-hub 0.32: one file of a preset, cached

    depth = None if os.path.isdir(preset) else backbones.config_depth(get_file(preset, "config.json"))
    if depth is None:
        raise TransferError(f"preset {preset!r}: its config.json gives no encoder depth (num_layers or "
                            "num_hidden_layers); give a preset of an encoder family tf_transfer trains")
    return depth


def own_settings(path: str, base: str, settings_class=None) -> dict:
    """The settings of flagfile `path` that differ from those of `base` (which `path` usually includes): what a
    part of a grid (e.g. a line search) changes on top of the study's flagfile; `settings_class` default: the default
    study's."""
    settings_class = settings_class or study_registry.get().settings_class
    below = settings_lib.read_flagfile(base, settings_class)
    return {k: v for k, v in settings_lib.read_flagfile(path, settings_class).items()
            if k not in below or below[k] != v}


SHOWN = ("task", "trainable_layers", "lr", "batch_size", "max_epochs", "seed", "metric", "cache_frozen", "preset")


@dataclasses.dataclass
class Variant:
    """Settings layered over the study's flagfile; `axes`/`parts` replace the study's; `differences` says, one
    sentence each, how the variant departs from the paper (reports print them); `clock` is the time reports
    compare: `wall` (the paper's), or `cpu` for grids run one core per process (see `reports.elapsed`); `commands`
    are the exact commands that produce the variant's runs (reports print them); `task_settings` maps a task to
    settings only its runs take in this variant, layered over the grid's `task_flagfiles`."""

    settings: dict = dataclasses.field(default_factory=dict)
    axes: Optional[dict] = None
    parts: Optional[dict] = None
    differences: tuple = ()
    clock: str = "wall"
    commands: tuple = ()
    task_settings: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Grid:
    """A study's grid of runs. `axes` values may be callables of the preset's depth (e.g. a layer sweep); `parts` are
    sub-grids whose extra axes are merged with `axes` (e.g. a line search, then the sweep). `preset` may be an axis
    (placed before the callables, which then take each preset's own depth).

    `dependent` maps a setting to a function `(settings, runs_dir, study) -> value or None` resolved when a run
    starts (e.g. the learning rate chosen by the line search); until then it is a placeholder such as
    "<line search>". A setting `cache_frozen="auto"` caches the frozen prefix whenever something is frozen.

    `task_flagfiles` maps a task to a flagfile of settings only its runs take (e.g. Wang's CoLA: early stopping on
    accuracy), layered over the study's flagfile and the variant's settings.

    `stand_in` maps a run's settings to `(older settings, reason)` or None: when the protocol of a run changed
    (a setting that is part of its name), the completed run of the older settings stands in for it in reports,
    marked with the reason, until the run itself has completed (`run` trains the new run; it never reads stand-ins).

    `study` names the grid's study in `study_registry.STUDIES` (None: `study_registry.DEFAULT`); its row (`entry`)
    gives the settings class, how a run is trained, where it lives, how its result is read and what --data_dir and
    --data become. A grid may place its runs itself, `layout(runs_dir, grid, run) -> folder`, read --data_dir and
    --data itself, `data_settings(data_dir, data) -> settings` (experiments/stack_quora.py does both), and do
    something after each run it trains, `after_run(run, folder)` (experiments/hart_sentiment.py rewrites its
    report).
    """

    name: str
    paper: str
    flagfile: str
    axes: dict
    variants: dict
    report: Callable
    parts: Optional[dict] = None
    dependent: Optional[dict] = None
    task_flagfiles: Optional[dict] = None
    stand_in: Optional[Callable] = None
    study: Optional[str] = None
    layout: Optional[Callable] = None
    data_settings: Optional[Callable] = None
    after_run: Optional[Callable] = None
    shown: tuple = SHOWN  # the settings a line of `experiments run` shows

    def __post_init__(self):
        study_registry.get(self.study)  # an unknown study fails when the grid is defined, naming the known ones

    @property
    def entry(self) -> Study:
        """The grid's study's row of the table of studies."""
        return study_registry.get(self.study)

    @property
    def settings_class(self) -> type:
        return self.entry.settings_class

    @property
    def command_flags(self) -> Optional[dict]:
        return self.entry.command_flags

    def data_for(self, data_dir, data) -> dict:
        """What --data_dir and --data become for every run this grid trains (checked)."""
        return (self.data_settings or self.entry.data_settings)(data_dir, data)

    def read_flagfile(self, path: str) -> dict:
        return settings_lib.read_flagfile(path, self.settings_class, self.command_flags)

    def variant(self, name: str) -> Variant:
        if name not in self.variants:
            raise TransferError(f"study {self.name} has no variant {name!r}: use {', '.join(self.variants)}")
        return self.variants[name]

    def base(self, variant: str) -> dict:
        return {**self.read_flagfile(self.flagfile), **self.variant(variant).settings}

    def runs(self, variant: str = "paper", tasks=None, presets=None, axes: Optional[dict] = None) -> list:
        """Every run of the grid as a dict of settings (plus `part`), in a fixed order. `presets` (a list) replaces
        the variant's preset or preset axis: the grid sweeps those backbones instead; `axes` replace axes of the
        same name (e.g. the seeds)."""
        chosen = self.variant(variant)
        base = self.base(variant)
        parts = chosen.parts or self.parts or {"main": {}}
        per_task = {task: {k: v for k, v in self.read_flagfile(path).items() if k != "task"}
                    for task, path in (self.task_flagfiles or {}).items()}
        listed = []
        for part, extra in parts.items():
            part_axes = {**(chosen.axes or self.axes), **extra}
            part_axes.update({k: v for k, v in (axes or {}).items() if k in part_axes})
            if presets:
                part_axes = {"preset": list(presets), **{k: v for k, v in part_axes.items() if k != "preset"}}
            preset = base.get("preset", getattr(self.settings_class, "preset", None))
            for chosen_values in _combinations(part_axes, preset):
                task = chosen_values.get("task", base.get("task"))
                settings = {**base, **per_task.get(task, {}), **chosen.task_settings.get(task, {}), **chosen_values,
                            "part": part}
                if settings.get("cache_frozen") == "auto":
                    settings["cache_frozen"] = settings["trainable_layers"] != "all"
                if settings.get("lr") == FIRST_RUN_RATE:
                    settings["lr"] = first_run_lr(settings.get("method", methods.DEFAULT), settings["trainable_layers"])
                if tasks and settings.get("task") not in tasks:
                    continue
                listed.append(settings)
        return listed


def _combinations(axes: dict, preset: str) -> list:
    """Every combination of the axes' values, the last axis varying fastest (as `itertools.product`); a callable
    axis is given the depth of the combination's preset (its `preset` axis so far, else `preset`)."""
    combinations = [{}]
    for name, axis in axes.items():
        combinations = [{**c, name: value} for c in combinations
                        for value in (axis(preset_depth(c.get("preset", preset))) if callable(axis) else axis)]
    return combinations


def run_dir(runs_dir: str, study: Grid, settings: dict) -> str:
    """Where a run of the grid lives: the grid's `layout`, else its study's rule."""
    return (study.layout or study.entry.run_dir)(runs_dir, study, settings)


# A rate axis's value that each run resolves to the first run's rate for its kind of route (full fine-tuning, the
# last k, a method: `models/first_run_rates.FIRST_RUN_LR`), as a user's first run would take it; `--lrs` replaces it.
FIRST_RUN_RATE = "<the first run's rate>"

# What a dependent setting resolves to when its run is not needed after all (e.g. a rate beyond the end of a search
# whose best rate sits inside it): such a run is neither trained nor reported.
NOT_NEEDED = "<not needed>"


def describe(settings: dict, keys=SHOWN) -> str:
    return " ".join(f"{k}={settings[k]}" for k in keys if k in settings)


def shard(runs: list, shard_spec: Optional[str]) -> list:
    """`I/N` (1 <= I <= N): every N-th run starting at the I-th, so N machines split one grid."""
    if not shard_spec:
        return runs
    try:
        index, count = (int(x) for x in shard_spec.split("/"))
    except ValueError:
        raise TransferError(f"--shard must look like I/N (e.g. 1/2), got {shard_spec!r}") from None
    if not 1 <= index <= count:
        raise TransferError(f"--shard={shard_spec}: I must be between 1 and N")
    return runs[index - 1::count]


# Locks: one process per run, across processes and machines sharing runs/ (`training.locks`; the names the grid
# has always had).
acquire_lock, release_lock, _pid_alive = locks.acquire, locks.release, locks.pid_alive


def resolve(study: Grid, settings: dict, runs_dir: str) -> Optional[dict]:
    """Fills dependent settings; None when they cannot be known yet (e.g. the line search is unfinished)."""
    resolved = dict(settings)
    for key, function in (study.dependent or {}).items():
        if is_pending(resolved.get(key)):
            try:
                value = function(resolved, runs_dir, study)
            except record.UnreadableRecord:  # a line search's run whose summary is lost: `run` trains it again
                return None
            if value is None:
                return None
            resolved[key] = value
    return resolved


def completed_result(study: Grid, settings: dict, folder: str) -> Optional[dict]:
    """The completed result of a run in `folder` (as its study reads it: most a completed `summary.json`), or None."""
    return study.entry.result(settings, folder)


def train_run(study: Grid, settings: dict, folder: str) -> None:
    """Trains one run of the grid in `folder` as its study does, then the grid's `after_run`, if any."""
    study.entry.train(settings, folder)
    if study.after_run is not None:
        study.after_run(settings, folder)


def run_study(study: Grid, runs: list, runs_dir: str, run_one: Callable = None, log=print) -> dict:
    """Works through `runs`: skips completed ones and ones locked by another process, records failures and goes
    on. `run_one(settings, output_dir)` trains one run (default `train_run`). Returns counts."""
    run_one = run_one or (lambda settings, folder: train_run(study, settings, folder))
    counts = {"completed": 0, "ran": 0, "failed": 0, "locked": 0, "waiting": 0, "not needed": 0}
    start = time.time()
    total = len(runs)
    for position, settings in enumerate(runs, start=1):
        resolved = resolve(study, settings, runs_dir)
        if resolved is None:
            counts["waiting"] += 1
            log(f"[{position}/{total}] waiting: {describe(settings, study.shown)} (needs the results of the runs it depends on, "
                "e.g. a line search, first)")
            continue
        if NOT_NEEDED in resolved.values():
            counts["not needed"] += 1
            continue
        folder = run_dir(runs_dir, study, resolved)
        if _readable_result(study, resolved, folder):
            counts["completed"] += 1
            continue
        if not acquire_lock(folder):
            counts["locked"] += 1
            log(f"[{position}/{total}] taken by {locks.describe(locks.holder(folder))}: {folder}")
            continue
        try:
            # Again, under the lock: another process may have finished it since. An unreadable record is set aside.
            if _result_or_set_aside(study, resolved, folder, lambda line: log(f"[{position}/{total}] {line}")):
                counts["completed"] += 1
                continue
            ran_before = counts["ran"] + counts["failed"]
            elapsed = time.time() - start
            pace = (f"about {elapsed / ran_before * (total - position + 1) / 60:.0f} min left at this pace"
                    if ran_before else "no estimate of the time left until a run has finished")
            log(f"[{position}/{total}] {describe(resolved, study.shown)} -> {folder} (elapsed {elapsed / 60:.1f} min, "
                f"{pace})")
            _train_once_more_if_unreadable(run_one, resolved, folder, lambda line: log(f"[{position}/{total}] {line}"))
            counts["ran"] += 1
            _clear_error(folder)
        except disk.DiskFull:  # every later run would fail alike: the grid stops, its finished runs kept
            raise
        except Exception as e:  # a failed run must not stop the grid; its error is kept beside it
            if disk.is_no_space(e):  # a write not named by its writer (a library's own files)
                raise disk.DiskFull(getattr(e, "filename", None) or folder, "the run's files") from None
            counts["failed"] += 1
            record.write_json_atomic(os.path.join(folder, "error.json"),
                                     {"error": f"{type(e).__name__}: {e}", "at": time.strftime("%Y-%m-%dT%H:%M:%S")},
                                     "the grid's record of a failed run")
            log(f"[{position}/{total}] failed: {type(e).__name__}: {e}")
        finally:
            release_lock(folder)
    return counts


def _readable_result(study: Grid, settings: dict, folder: str) -> Optional[dict]:
    """`completed_result`, None when its record is unreadable (`run_study` sets it aside under the run's lock)."""
    try:
        return completed_result(study, settings, folder)
    except record.UnreadableRecord:
        return None


def _result_or_set_aside(study: Grid, settings: dict, folder: str, log) -> Optional[dict]:
    """`completed_result`; an unreadable record file (a truncated summary.json, an unfinished run's cut-short
    checkpoint) is renamed `<name>.corrupt` (a checkpoint with its summary), said, and None returned, so that the run
    is trained afresh: its record is lost, and a run is never dropped."""
    try:
        result = completed_result(study, settings, folder)
        summary = None if result else record.read_summary(folder)
        if summary:  # unfinished: is its checkpoint whole? (cheap; else found only after the model is built)
            run_folder.check_resumable(folder, summary)
        return result
    except record.UnreadableRecord as e:
        log(f"{e.path} is unreadable ({e.why}): its record is lost; set aside as {os.path.basename(e.path)}.corrupt, "
            "training the run afresh")
        _set_aside(e.path)
        return completed_result(study, settings, folder)


def _train_once_more_if_unreadable(run_one: Callable, settings: dict, folder: str, log) -> None:
    """`run_one(settings, folder)`; when training finds a record it cannot read (a truncated checkpoint, a member's
    summary.json), that file is set aside and the run trained afresh, once."""
    try:
        run_one(settings, folder)
    except record.UnreadableRecord as e:
        log(f"{e.path} is unreadable ({e.why}): set aside as {os.path.basename(e.path)}.corrupt, training the run "
            "afresh")
        _set_aside(e.path)
        run_one(settings, folder)


def _set_aside(path: str) -> None:
    """Renames an unreadable record `<name>.corrupt`; a checkpoint takes the summary.json beside it along (that
    summary lists epochs no checkpoint can continue any more)."""
    record.set_aside(path)
    summary = os.path.join(os.path.dirname(path), record.SUMMARY)
    if path.endswith(".npz") and os.path.exists(summary):
        record.set_aside(summary)


def run_until_settled(study: Grid, runs: list, runs_dir: str, run_one: Callable = None, log=print) -> dict:
    """`run_study` pass after pass while a pass trained something and runs still wait on others (e.g. a grid's
    runs that take a line search's rate, listed after it): a grid that depends on itself finishes in one command.
    Runs waiting on runs no pass here can train (locked by another process) are left; their count is returned."""
    counts = run_study(study, runs, runs_dir, run_one, log)
    ran = counts["ran"]
    while counts["waiting"] and counts["ran"]:
        log(f"{counts['waiting']} runs waited for runs that may have finished since: another pass")
        counts = run_study(study, runs, runs_dir, run_one, log)
        ran += counts["ran"]
    # The last pass counts this command's earlier runs as completed: they are counted as ran instead.
    return {**counts, "ran": ran, "completed": counts["completed"] - (ran - counts["ran"])}


def _clear_error(folder: str) -> None:
    path = os.path.join(folder, "error.json")
    if os.path.exists(path):
        os.remove(path)


def collect(study: Grid, runs: list, runs_dir: str, log=print) -> list:
    """Each run's settings with its summary (None when missing or unfinished) and error (if any; an unreadable
    record is one, said through `log`).

    A run not completed yet whose `study.stand_in` run has completed gets that run's summary, with `stand_in`:
    `{"folder", "reason"}` (else None); `partial` and `error` stay the run's own."""
    collected = []
    for settings in runs:
        resolved = resolve(study, settings, runs_dir) or settings
        if NOT_NEEDED in resolved.values():
            continue
        folder = run_dir(runs_dir, study, resolved)
        entry = _entry(study, resolved, folder, log)
        older = study.stand_in(resolved) if study.stand_in and not entry["summary"] else None
        if older:
            older_settings, reason = older
            older_folder = run_dir(runs_dir, study, older_settings)
            older_summary = _readable(lambda: run_record.read_summary(older_folder), log)
            if older_summary and older_summary.get("completed"):
                entry["summary"] = older_summary
                entry["stand_in"] = {"folder": older_folder, "reason": reason}
        collected.append(entry)
    return collected


def _entry(study: Grid, settings: dict, folder: str, log) -> dict:
    """What `collect` says of one run: its completed result, partial summary and error."""
    error_file = os.path.join(folder, "error.json")
    error = (_readable(lambda: record.read_json(error_file), log) or {}).get("error")
    try:
        result, summary = completed_result(study, settings, folder), run_record.read_summary(folder)
    except record.UnreadableRecord as e:  # listed as not completed, with why; `run` trains it afresh
        result = summary = None
        error = f"unreadable {os.path.basename(e.path)} ({e.why}): the next `experiments run` trains it afresh"
        log(f"{e.path} is unreadable ({e.why}): reported as not completed; `experiments run` trains it afresh")
    return {"settings": settings, "folder": folder, "summary": result,
            "partial": summary if summary and not result else None, "error": error, "stand_in": None}


def _readable(read: Callable, log) -> Optional[dict]:
    """`read()`, None when the file is missing or unreadable (said through `log`)."""
    try:
        return read()
    except FileNotFoundError:
        return None
    except record.UnreadableRecord as e:
        log(f"{e.path} is unreadable ({e.why}): left out")
        return None
