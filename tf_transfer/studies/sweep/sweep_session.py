"""One process's part of a budgeted sweep, as `python -m tf_transfer.sweep` runs it: the sweep's folder and name, its
Optuna study opened or joined, the first line (what an answer needs), the workers it starts on this machine's other
cores, the trials, and at the end the report and the last lines (what it spent, the recommendation).

The command reads its flags into `SweepOptions` (the sweep's own choices, checked) and its runs' settings, and
calls `run`; a worker it started (`sweep_search.WORKER` in its environment) runs the same `run` and leaves the
report to it.

Example:

>>> options = SweepOptions(budget="30m", methods=["freeze", "lora"])
>>> options.budget_s
1800.0
>>> SweepOptions(budget=None)
Traceback (most recent call last):
...
tf_transfer.core.errors.TransferError: the sweep needs --budget: the wall time it may take, e.g. --budget=30m
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import subprocess
import sys
import time
from typing import Callable, Optional

from absl import logging

from tf_transfer.core import cli, isolated
from tf_transfer.core.errors import TransferError
from tf_transfer.models import methods as methods_lib
from tf_transfer.studies.sweep import sweep_search as sweep, sweep_storage


@dataclasses.dataclass(frozen=True)
class SweepOptions:
    """What the sweep itself is given (its runs' settings apart), each named by its flag of `tf_transfer.sweep`:
    `budget` (--budget), `methods`, `workers`, `top` (--sweep_top), `seeds` (--sweep_seeds), `storage`, `name`
    (--sweep_name), `heartbeat_s` (--sweep_heartbeat), `retry_s` (--storage_retry_s), `isolate_runs`, `out`,
    `runs_dir`; `default_padding`, a new sweep's padding where nothing says one; `command`, the command line stored
    with the sweep; `worker_flags`, the flags given, which the workers it starts are given too. Checked when made,
    in the order the command has always said them."""

    budget: Optional[str]
    methods: list = dataclasses.field(default_factory=lambda: list(methods_lib.registry.in_default_sweep()))
    workers: int = 0
    top: int = 3
    seeds: int = 3
    storage: Optional[str] = None
    name: Optional[str] = None
    heartbeat_s: int = sweep_storage.HEARTBEAT_S
    retry_s: int = sweep_storage.RETRY_S
    isolate_runs: bool = True
    out: Optional[str] = None
    runs_dir: str = "runs"
    default_padding: str = "pack"
    command: str = "python -m tf_transfer.sweep"
    worker_flags: tuple = ()

    def __post_init__(self):
        if not self.budget:
            raise TransferError("the sweep needs --budget: the wall time it may take, e.g. --budget=30m")
        if self.heartbeat_s < 1:
            raise TransferError(f"--sweep_heartbeat={self.heartbeat_s}: give whole seconds, 1 or more")
        if self.retry_s < 0:
            raise TransferError(f"--storage_retry_s={self.retry_s}: give whole seconds, 0 or more")
        if self.workers < 0:
            raise TransferError(f"--workers={self.workers}: give 1 or more processes, or 0 for one per usable core")
        sweep.parse_budget(self.budget)  # a budget that is not a duration: said before anything is read

    @property
    def budget_s(self) -> float:
        return sweep.parse_budget(self.budget)


def parse_sweep_options(given: dict) -> dict:
    """The methods' sweep flags (`methods.registry.sweep_options`, e.g. --lora_ranks) from their words as given
    (`{flag: [word, ...]}`), each word of its kind."""
    words = {int: "whole numbers", float: "numbers", str: "words"}
    parsed = {}
    for flag, (_, _, kind) in methods_lib.registry.sweep_options().items():
        try:
            parsed[flag] = [kind(value) for value in given[flag]]
        except ValueError:
            raise TransferError(f"--{flag} takes {words.get(kind, kind.__name__)}, comma-separated, got "
                                f"{','.join(given[flag])}") from None
    return parsed


def _disk_full_is_one_line(body):
    """`body`, where a full disk (or quota) met while writing the sweep's own files (its folder, its SQLite file,
    its runs' folders) is one line, not a traceback."""
    @functools.wraps(body)
    def wrapped(options: SweepOptions, *args):
        try:
            return body(options, *args)
        except OSError as e:
            _no_space(e, options.runs_dir, "the sweep's files")
            raise
    return wrapped


@_disk_full_is_one_line
def run(options: SweepOptions, base: dict, settings, lrs, sweep_options: dict, write_report: Callable) -> None:
    """Runs this process's part of the sweep of `base` (every trial's settings as a dict; `settings`, the same
    checked) over `options.methods` at the rates `lrs` (None: each method's own) with the methods' `sweep_options`:
    in the process the user started, the workers, the first line, the report (`write_report(study, sweep_dir,
    out)`, `reporting.sweep_report`'s, handed down by the command: a study does not import the reporting layer) and
    the last lines too."""
    from tf_transfer.core import metrics

    started = time.time()
    budget_s = options.budget_s
    identity = _identity(options, base, settings, lrs, sweep_options)
    sweep_dir, name = _sweep_place(options, settings.dataset, identity)
    if options.storage:  # a missing driver or a server that does not answer: one line, before anything is loaded
        sweep_storage.storage_of(options.storage, None)
    cores = sorted(os.sched_getaffinity(0))
    worker, deadline = sweep.worker_of_environment()  # (None, None) in the process the user started
    workers = 1 if name == sweep_storage.LEGACY_NAME else options.workers or len(cores)

    def make_candidates():
        from tf_transfer.models import backbones

        depth = backbones.load_preset(settings.preset).backbone.num_layers
        return sweep.candidates(options.methods, depth, lrs, sweep_options)

    log = (lambda line: print(sweep.said(line), flush=True))  # `[sweep w1]` from the worker on the second core
    # A new sweep's runs pack their batches (the same model on fewer tokens) unless its flagfile says otherwise. Not
    # part of its identity: a sweep begun before keeps its name and the settings it stored, so its runs are found.
    lower_is_better = settings.metric_name in metrics.LOWER_IS_BETTER
    planned = {}  # a new sweep's plan: it orders its queue (`_orderer`) and says its first line
    if workers > 1:  # each worker on a core of its own: its runs' threads do not contend with the others'; the
        # plan's probe too, which times one worker's steps
        os.sched_setaffinity(0, {cores[worker % len(cores) if worker else 0]})
    runs_base = {"padding": options.default_padding, **base}  # what its runs train with, and its probe times
    study, where = sweep.open_study(sweep_dir, runs_base, make_candidates, workers * budget_s, options.storage,
                                    lower_is_better, name=name,
                                    identity=identity, heartbeat_s=options.heartbeat_s, command=options.command,
                                    log=log, workers=workers, retry_s=options.retry_s,
                                    order=None if worker else _orderer(options, runs_base, workers, started + budget_s,
                                                                       planned), seeds=options.seeds)
    if not worker:
        deadline = started + max(workers * budget_s - sweep.spent_s(study), 0.0) / workers
        _say_what_it_needs(options, study, workers, deadline, planned)
        print(f"[sweep] {study.study_name} on {sweep_storage.shown_url(where[0])}; runs in {sweep_dir}", flush=True)
    spawned = [] if worker else [_start_worker(options, number, workers, name, cores, deadline)
                                 for number in range(1, workers)]
    logging.set_verbosity(logging.INFO)

    def train(*args, **kwargs):
        # Looked up at each trial (not bound once): a test puts its own trial function in `_train_trial`'s place.
        return isolated.call(_train_trial, *args, **kwargs) if options.isolate_runs else _train_trial(*args, **kwargs)

    ended = sweep.run_sweep(study, where, sweep_dir, train, options.top, options.seeds, log=log, deadline=deadline)
    if worker:
        return
    for process in spawned:
        process.wait()
    _finish(options, study, sweep_dir, ended, workers, started, write_report)


def _finish(options: SweepOptions, study, sweep_dir: str, ended: str, workers: int, started: float,
            write_report: Callable) -> None:
    """The report, and the sweep's last two lines: what it spent, and its recommendation (or why none)."""
    out = options.out or sweep_dir
    try:
        _, line, use = write_report(study, sweep_dir, out)
    except OSError as e:
        _no_space(e, out, "the sweep's report")
        raise
    # "done" where the queue emptied and no run was cut short by the budget (a seed-round run cut by the deadline
    # leaves the queue empty too: on STS-B, LoRA's two further seeds one epoch short of their stopping rule).
    cut = sum(1 for t in study.get_trials(deepcopy=False) if t.user_attrs.get("cut") == "budget")
    state = "done" if ended == "done" and not cut else "stopped: budget spent"
    if cut:
        state += f" ({cut} run{'s' if cut > 1 else ''} cut short by it)"
    print(f"sweep {state}; "
          f"{sweep.spent_s(study) / 60:.1f} min of training on {workers} worker{'s' * (workers > 1)} in "
          f"{(time.time() - started) / 60:.1f} min (--budget={options.budget}); report in {out}/README.md")
    if use:
        print(f"to train it for use: {use}")
    print(line)


def _no_space(error: OSError, path: str, what: str) -> None:
    """One line for a full disk (or quota) met while writing the sweep's own files; any other `OSError` goes on."""
    from tf_transfer.studies.sweep import sweep_retries

    if error.errno in sweep_retries.NO_SPACE:
        raise sweep_retries.no_space(error.filename or path, what, "its trials are kept in its storage") from None


def _orderer(options: SweepOptions, base: dict, workers: int, deadline: float, planned: dict) -> Callable:
    """`open_study`'s `order` for a new sweep: its plan on this machine's measured speed (kept in `planned`) says
    whether full fine-tuning goes first."""
    def order(found: dict, reference: str) -> list:  # `reference` is `sweep.reference(found)`, as `_played` says
        planned["queue"], planned["plan"], planned["speed"] = _plan(options, base, found, workers, deadline)
        return planned["queue"]
    return order


def _plan(options: SweepOptions, base: dict, found: dict, workers: int, deadline: float) -> tuple:
    """`(queue, plan, speed)` of `found` (`sweep_plan.order`) from a few training steps on the data, timed on one
    worker's core (`sweep_plan.measure`), within the wall time left to `deadline` (a `time.time()`) once measured."""
    from tf_transfer.studies.sweep import sweep_plan

    speed = _measure(options, base)
    queue, p = sweep_plan.order(**_played(options, base, found, speed, workers), budget_s=deadline - time.time())
    return queue, p, speed


def _likely(options: SweepOptions, base: dict, found: dict, p, speed, workers: int):
    """The plan `p` where successive halving stops full fine-tuning at its second rung (`sweep_plan.plan`'s
    `full_pruned`), the case its first line states beside the bound; None where full fine-tuning goes first."""
    from tf_transfer.studies.sweep import sweep_plan

    if p.full_first:
        return None
    return sweep_plan.plan(**_played(options, base, found, speed, workers), budget_s=p.budget_s, full_first=False,
                           full_pruned=True)


def _played(options: SweepOptions, base: dict, found: dict, speed, workers: int) -> dict:
    """What `sweep_plan.plan` (and `order`) play `found` out with on `workers`: its reference, the runs' epoch cap
    and patience (`base`, the runs' settings), the seed round's size (`options`), and whether `found` are the
    front's candidates (`_front`)."""
    return {"found": found, "reference": sweep.reference(found), "speed": speed, "workers": workers,
            "max_epochs": int(base.get("max_epochs", 9)), "patience": int(base.get("patience") or 0),
            "top": options.top, "seeds": options.seeds, "front": _front(found, speed)}


def _front(found: dict, speed) -> bool:
    """Whether `found` are the default candidates, chosen from the first-run benchmark's score/time front: the plan
    then expects each to go past the rungs (`sweep_plan._goes_on`)."""
    return set(found) == set(sweep.candidates(list(methods_lib.registry.in_default_sweep()), speed.num_layers))


def _measure(options: SweepOptions, base: dict):
    from tf_transfer.studies.sweep import sweep_plan

    return isolated.call(sweep_plan.measure, base) if options.isolate_runs else sweep_plan.measure(base)


def _say_what_it_needs(options: SweepOptions, study, workers: int, deadline: float, planned: dict) -> None:
    """The sweep's first line, before it trains: what an answer needs on this machine and what the budget left
    decides (`sweep_plan`): the plan that ordered a new sweep's queue (`planned`), else one measured now. A sweep
    that goes on (a trial has measured the machine) says nothing."""
    from tf_transfer.studies.sweep import sweep_plan

    if any(t.user_attrs.get("epoch_time_s") for t in study.get_trials(deepcopy=False)):
        return
    found, base = study.user_attrs["candidates"], study.user_attrs["base"]  # the runs' settings, as stored
    if planned:
        p, speed = planned["plan"], planned["speed"]
    else:  # a sweep created before, or by another process, that has trained nothing yet: its queue is as it is
        queued = [sweep_storage.key_of(t)[0] for t in study.get_trials(deepcopy=False)
                  if not t.user_attrs.get("reference")]
        speed = _measure(options, base)
        p = sweep_plan.plan(**_played(options, base, found, speed, workers), budget_s=deadline - time.time(),
                            full_first=bool(queued) and queued[0] == sweep.reference(found))
    likely = _likely(options, base, found, p, speed, workers)
    stated = (p, p.budget_s, options.budget, likely, options.budget_s - p.budget_s)
    line = sweep_plan.first_line(*stated)
    study.set_user_attr("plan", {"line": line, "second_case": sweep_plan.second_case_line(*stated),
                                 "for_budget_s": study.user_attrs["budget_s"], "speed": dataclasses.asdict(speed),
                                 **dataclasses.asdict(p)})
    print(line, flush=True)


def _start_worker(options: SweepOptions, number: int, workers: int, name: str, cores: list, deadline: float):
    """Another process of this sweep (the command's flags given, the sweep's name, the count of its `workers`,
    which its own core alone would not give), pinned to its own core; it stops at `deadline` and leaves the report
    to this one. It dies with this process."""
    env = {**os.environ, sweep.WORKER: f"{number} {deadline!r}"}

    def pin():
        isolated.die_with_parent()
        os.sched_setaffinity(0, {cores[number % len(cores)]})

    return subprocess.Popen([sys.executable, "-m", "tf_transfer.sweep", *dict.fromkeys(options.worker_flags),
                             f"--workers={workers}", f"--sweep_name={name}"], env=env, preexec_fn=pin)


def _identity(options: SweepOptions, base: dict, settings, lrs, sweep_options: dict) -> dict:
    """What names the sweep (`sweep_storage.default_name`): its settings, methods, rates and the methods' options, and
    the SHA-256 of a user's files, so that another file of the same name is another sweep (a GLUE task's sweep keeps
    the name it had before files were hashed)."""
    from tf_transfer.data import user_data

    hashes = user_data.file_hashes(settings.data_spec)
    # Packing is a new sweep's own default (`run`): --padding=pack given or not names the same sweep.
    named = {k: v for k, v in base.items() if (k, v) != ("padding", options.default_padding)}
    return {"base": named, "methods": sorted(options.methods), "lrs": lrs, **sweep_options,
            **({"data_sha256": hashes} if hashes else {})}


def _sweep_place(options: SweepOptions, dataset: str, identity: dict) -> tuple:
    """`(the sweep's folder, its name)`: `--sweep_name` or one derived from the settings, under
    <runs_dir>/sweep/; a sweep begun before names (SQLite in <runs_dir>/sweep/<data set>/) goes on there."""
    legacy = os.path.join(options.runs_dir, "sweep", dataset)
    if not options.name and not options.storage and os.path.exists(os.path.join(legacy, "sweep.db")):
        return legacy, sweep_storage.LEGACY_NAME
    name = sweep_storage.check_name(options.name) if options.name else sweep_storage.default_name(dataset, identity)
    return os.path.join(options.runs_dir, "sweep", name), name


def _train_trial(where: tuple, trial_id: int, settings: dict, folder: str, *args, **kwargs) -> dict:
    from tf_transfer.studies.sweep import sweep_trial

    cli.log_like_a_command()
    # The run's lines name it as the sweep's line that started it does: "<candidate> seed <n>" (its folder is
    # `sweep_search.run_folder`'s, named after the candidate).
    with tagged_lines(f"{os.path.basename(os.path.dirname(folder))} seed {settings['seed']}"):
        return sweep_trial.train_trial(where, trial_id, settings, folder, *args, **kwargs)


@contextlib.contextmanager
def tagged_lines(tag: str):
    """Each line a trial's run logs (its epochs, its cache, its compilation) or prints (an AutoFreeze run's freezes)
    begins with `[tag] `: on two workers, two runs write into one terminal at once, and each line must say whose it
    is. A line that already names its source (`[sweep] ...`) is left as it is.

    >>> with tagged_lines("lora_r8_k2_lr0.002 seed 1"):
    ...     print("part  trainable")
    [lora_r8_k2_lr0.002 seed 1] part  trainable
    """
    prefix = f"[{tag}] "

    def tag_record(record) -> bool:
        if not str(record.msg).startswith("["):
            record.msg = prefix + str(record.msg)
        return True

    logger = logging.get_absl_logger()
    logger.addFilter(tag_record)
    try:
        with contextlib.redirect_stdout(_TaggedStream(sys.stdout, prefix)):
            yield
    finally:
        logger.removeFilter(tag_record)


class _TaggedStream:
    """A text stream that writes `prefix` before each line to `stream` (lines starting "[" as they are)."""

    def __init__(self, stream, prefix: str):
        self._stream, self._prefix, self._at_line_start = stream, prefix, True

    def write(self, text: str) -> int:
        for line in text.splitlines(keepends=True):
            tagged = self._at_line_start and not line.startswith("[") and line.strip()
            self._stream.write(self._prefix + line if tagged else line)
            self._at_line_start = line.endswith("\n")
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str):  # isatty, encoding, fileno...: the stream's
        return getattr(self._stream, name)
