"""A budgeted sweep over training methods on a GLUE task or your own data: which method, depth and rate to train
within a training-time budget (Optuna's successive halving; docs/methods.md), on one machine or many sharing a
PostgreSQL server (docs/distributed.md).

    python -m tf_transfer.sweep --task=mrpc --methods=freeze,lora,bitfit --budget=20m
    python -m tf_transfer.sweep --train_file=reviews.csv --text_columns=review --label_column=stars --budget=2h
    python -m tf_transfer.sweep --task=mrpc --budget=3h --sweep_name=mrpc-methods \\
        --storage=postgresql+psycopg://sweeper:secret@db.lab:5432/sweeps --runs_dir=/shared/runs

It prints each trial as it starts and ends, then the recommendation, and writes the report (`--out`, default the
sweep's folder under `<runs_dir>/sweep/`). A rerun with the same flags goes on where the last one stopped; one with a
larger `--budget` spends the difference. `python -m tf_transfer.sweep ...` is the same command.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys
import time

from absl import flags, logging

from tf_transfer import grid_flags
from tf_transfer.core import cli, isolated
from tf_transfer.core import flags as flags_lib
from tf_transfer.core import settings as settings_lib
from tf_transfer.models import methods
from tf_transfer.studies.glue.glue_settings import GlueSettings

FLAGS = flags.FLAGS

flags.DEFINE_list("methods", list(methods.registry.in_sweep()), "The training methods whose candidates compete "
                  "(docs/methods.md).")
flags.DEFINE_string("budget", None, "Wall time the sweep may take on this machine, e.g. 30m, 2h, 1h30m, 90s: its "
                    "--workers train up to that long each (the budget of training time is that times the workers, "
                    "summed over the sweep's runs). It says first what an answer needs. A rerun with a larger budget "
                    "goes on.")
flags.DEFINE_integer("workers", 0, "Processes of this machine that train the sweep's trials at once, each pinned to "
                     "a core of its own (0: one per usable core; 1: one process whose runs use every core).")
for _flag, (_default, _help, _) in methods.registry.sweep_options().items():  # e.g. LoRA's --lora_ranks
    flags.DEFINE_list(_flag, _default, _help)
flags.DEFINE_integer("sweep_top", 3, "How many of the best candidates run again at more seeds.")
flags.DEFINE_integer("sweep_seeds", 3, "Seeds of those candidates; a candidate is recommended only from 2 or more "
                     "seeds that ran to their stopping rule (3 in practice), so 1 recommends nothing.")
flags.DEFINE_string("storage", None, "The Optuna storage, an SQLAlchemy URL: e.g. "
                    "postgresql://user:password@host:5432/sweeps, a server that several machines share (pip install "
                    "-e '.[postgres]'; docs/distributed.md); default SQLite in the sweep's folder.")
flags.DEFINE_string("sweep_name", None, "The sweep's name, its Optuna study on --storage and its folder under "
                    "<runs_dir>/sweep/ (default: the data set and a hash of the sweep's settings, e.g. mrpc-1a2b3c4d). "
                    "Processes and machines that give one name (and the same settings) work on one sweep.")
flags.DEFINE_integer("sweep_heartbeat", 20, "Seconds between a process's heartbeats for the trial it runs; a trial "
                     "whose process missed 3 is failed and queued again by any other process on the sweep.")
flags.DEFINE_integer("storage_retry_s", 180, "Seconds the sweep waits for a --storage that does not answer (a "
                     "server restarting, a network blinking), trying again with backoff, before it stops with one "
                     "error line; a rerun goes on where it stopped.")
flags.adopt_module_key_flags(grid_flags)
COMMAND_FLAGS = {
    **grid_flags.COMMAND_FLAGS,
    "out": (None, "Where the sweep's report goes (default: the sweep's folder under <runs_dir>/sweep/)."),
    "presets": (None, "The backbone to sweep (its first name; default flags/sweep.flags'): a keras-hub preset name "
                      "or a local folder."),
    "lrs": (None, "Learning rates every method tries, instead of each method's own (e.g. 1e-4,1e-3)."),
    "isolate_runs": (True, "Train each trial in a fresh process (its memory is returned when it ends, and a trial "
                           "whose process dies is retried)."),
    "padding": ("pack", "How a new sweep's runs lay out their batches: pack (end to end, the same model on fewer "
                        "tokens), bucket or fixed (padded; docs/glue.md#padding)."),
}
del COMMAND_FLAGS["seeds"]  # the sweep chooses its own seeds (--sweep_seeds); `main` refuses the flag
# --help shows the values every run takes (flags/sweep.flags': batch 32, up to 9 epochs), not the GLUE trainer's
# defaults: only flags given on the command line replace the flagfile's (`grid_flags.given_settings`).
COMMAND_FLAGS.update({name: (value, f"{COMMAND_FLAGS[name][1]} The sweep's runs: flags/sweep.flags' value, "
                                     "unless given.")
                      for name, value in settings_lib.read_flagfile("flags/sweep.flags", GlueSettings).items()
                      if name in COMMAND_FLAGS})
DEFAULT_PADDING = COMMAND_FLAGS["padding"][0]  # a new sweep's, where neither --padding nor its flagfile says one
HF_ALIASES = flags_lib.hf_aliases(COMMAND_FLAGS)  # --text_column_names for --text_columns, ... (as glue: docs/glue.md)
WORKER = "TF_TRANSFER_SWEEP_WORKER"  # set in the workers this command starts: their number, then their deadline


def _disk_full_is_one_line(main):
    """`main`, where a full disk (or quota) met while writing the sweep's own files (its folder, its SQLite file,
    its runs' folders) is one line, not a traceback."""
    @functools.wraps(main)
    def wrapped(argv):
        try:
            return main(argv)
        except OSError as e:
            _no_space(e, FLAGS.runs_dir, "the sweep's files")
            raise
    return wrapped


@_disk_full_is_one_line
def main(argv):
    from tf_transfer.core import metrics
    from tf_transfer.studies.sweep import sweep_search as sweep, sweep_storage

    started = time.time()
    budget_s = _check_command(argv)
    base, settings, lrs, options = _settings_of_flags()
    identity = _identity(base, settings, lrs, options)
    sweep_dir, name = _sweep_place(settings.dataset, identity)
    if FLAGS.storage:  # a missing driver or a server that does not answer: one line, before anything is loaded
        sweep_storage.storage_of(FLAGS.storage, None)
    cores = sorted(os.sched_getaffinity(0))
    worker, deadline = _worker_of_environment()  # (None, None) in the process the user started
    workers = 1 if name == sweep_storage.LEGACY_NAME else FLAGS.workers or len(cores)

    def make_candidates():
        from tf_transfer.models import backbones

        depth = backbones.load_preset(settings.preset).backbone.num_layers
        return sweep.candidates(FLAGS.methods, depth, lrs, options)

    log = (lambda line: print(line.replace("[sweep]", f"[sweep w{worker}]"), flush=True)) if worker \
        else (lambda line: print(line, flush=True))
    # A new sweep's runs pack their batches (the same model on fewer tokens) unless its flagfile says otherwise. Not
    # part of its identity: a sweep begun before keeps its name and the settings it stored, so its runs are found.
    study, where = sweep.open_study(sweep_dir, {"padding": DEFAULT_PADDING, **base}, make_candidates,
                                    workers * budget_s, FLAGS.storage, settings.metric_name in metrics.LOWER_IS_BETTER,
                                    name=name, identity=identity, heartbeat_s=FLAGS.sweep_heartbeat,
                                    command=" ".join(["python -m tf_transfer.sweep", *sys.argv[1:]]),
                                    log=log, workers=workers, retry_s=FLAGS.storage_retry_s)
    if workers > 1:  # each worker on a core of its own: its runs' threads do not contend with the others'
        os.sched_setaffinity(0, {cores[worker % len(cores) if worker else 0]})
    if not worker:
        deadline = started + max(workers * budget_s - sweep.spent_s(study), 0.0) / workers
        _say_what_it_needs(study, base, workers, deadline - time.time())
        print(f"[sweep] {study.study_name} on {sweep_storage.shown_url(where[0])}; runs in {sweep_dir}", flush=True)
    spawned = [] if worker else [_start_worker(number, workers, name, cores, deadline) for number in range(1, workers)]
    logging.set_verbosity(logging.INFO)

    def train(*args, **kwargs):
        return isolated.call(_train_trial, *args, **kwargs) if FLAGS.isolate_runs else _train_trial(*args, **kwargs)

    ended = sweep.run_sweep(study, where, sweep_dir, train, FLAGS.sweep_top, FLAGS.sweep_seeds, log=log,
                            deadline=deadline)
    if worker:
        return
    for process in spawned:
        process.wait()
    _finish(study, sweep_dir, ended, workers, started)


def _finish(study, sweep_dir: str, ended: str, workers: int, started: float) -> None:
    """The report, and the sweep's last two lines: what it spent, and its recommendation (or why none)."""
    from tf_transfer.reporting import sweep_report
    from tf_transfer.studies.sweep import sweep_search as sweep

    out = FLAGS.out or sweep_dir
    try:
        _, line, use = sweep_report.write_report(study, sweep_dir, out)
    except OSError as e:
        _no_space(e, out, "the sweep's report")
        raise
    print(f"sweep {'done' if ended == 'done' else 'stopped: budget spent'}; "
          f"{sweep.spent_s(study) / 60:.1f} min of training on {workers} worker{'s' * (workers > 1)} in "
          f"{(time.time() - started) / 60:.1f} min (--budget={FLAGS.budget}); report in {out}/README.md")
    if use:
        print(f"to train it for use: {use}")
    print(line)


def _check_command(argv) -> float:
    """The budget in seconds, once the flags that are not settings have been checked."""
    from tf_transfer.core.errors import TransferError
    from tf_transfer.studies.sweep import sweep_search as sweep

    if len(argv) > 1:
        raise TransferError(f"sweep takes flags only, got {' '.join(argv[1:])}: e.g. python -m tf_transfer.sweep "
                            "--task=mrpc --budget=30m")
    if FLAGS["seeds"].present:
        raise TransferError("--seeds: the sweep chooses its own seeds; give --sweep_seeds (how many) instead")
    if not FLAGS.budget:
        raise TransferError("the sweep needs --budget: the wall time it may take, e.g. --budget=30m")
    if FLAGS.sweep_heartbeat < 1:
        raise TransferError(f"--sweep_heartbeat={FLAGS.sweep_heartbeat}: give whole seconds, 1 or more")
    if FLAGS.storage_retry_s < 0:
        raise TransferError(f"--storage_retry_s={FLAGS.storage_retry_s}: give whole seconds, 0 or more")
    if FLAGS.workers < 0:
        raise TransferError(f"--workers={FLAGS.workers}: give 1 or more processes, or 0 for one per usable core")
    return sweep.parse_budget(FLAGS.budget)


def _no_space(error: OSError, path: str, what: str) -> None:
    """One line for a full disk (or quota) met while writing the sweep's own files; any other `OSError` goes on."""
    from tf_transfer.studies.sweep import sweep_retries

    if error.errno in sweep_retries.NO_SPACE:
        raise sweep_retries.no_space(error.filename or path, what, "its trials are kept in its storage") from None


def _settings_of_flags() -> tuple:
    """`(base, settings, lrs, options)`: every trial's settings (flags/sweep.flags, then the flags given) as a dict
    and checked, the rates given, the methods' sweep options. Bad flags and files fail here, before TensorFlow."""
    from tf_transfer.core import settings as settings_lib
    from tf_transfer.studies.sweep import sweep_search as sweep

    base = settings_lib.read_flagfile("flags/sweep.flags", GlueSettings)
    base.update(grid_flags.given_settings())
    base.update({k: v for k, v in {"preset": (FLAGS.presets or [None])[0], "cache_dir": FLAGS.cache_dir}.items() if v})
    settings = GlueSettings.from_dict(base)
    grid_flags.check_files()
    if settings.data_spec is None:
        base["data_dir"] = grid_flags.glue_data_dir()
    base = {k: list(v) if isinstance(v, tuple) else v for k, v in base.items()}
    options = _sweep_options()
    sweep.check_methods(FLAGS.methods)
    return base, settings, grid_flags.axes_given().get("lr"), options


def _say_what_it_needs(study, base: dict, workers: int, left_s: float) -> None:
    """The sweep's first line, before it trains: what an answer needs on this machine and what the budget left
    decides (`sweep_plan`), from a few training steps on the data, timed on one worker's core. A sweep
    that goes on (a trial has measured the machine) skips the measurement."""
    from tf_transfer.studies.sweep import sweep_search as sweep, sweep_plan

    if any(t.user_attrs.get("epoch_time_s") for t in study.get_trials(deepcopy=False)):
        return
    speed = isolated.call(sweep_plan.measure, base) if FLAGS.isolate_runs else sweep_plan.measure(base)
    found = study.user_attrs["candidates"]
    p = sweep_plan.plan(found, sweep.reference(found), speed, workers, int(base.get("max_epochs", 9)),
                        int(base.get("patience") or 0), FLAGS.sweep_top, FLAGS.sweep_seeds, budget_s=left_s)
    line = sweep_plan.first_line(p, left_s)
    study.set_user_attr("plan", {"line": line, "speed": dataclasses.asdict(speed), **dataclasses.asdict(p)})
    print(line, flush=True)


def _worker_of_environment() -> tuple:
    """`(number, deadline)` of a worker this command started (`_start_worker`), else `(None, None)`."""
    given = os.environ.get(WORKER)
    if not given:
        return None, None
    number, deadline = given.split()
    return int(number), float(deadline)


def _start_worker(number: int, workers: int, name: str, cores: list, deadline: float):
    """Another process of this sweep (this command's flags, the sweep's name, the count of its `workers`, which
    its own core alone would not give), pinned to its own core; it stops at `deadline` and leaves the report to
    this one. It dies with this process."""
    given = [FLAGS[flag].serialize() for flag in FLAGS if FLAGS[flag].present and flag not in ("workers", "sweep_name")]
    env = {**os.environ, WORKER: f"{number} {deadline!r}"}

    def pin():
        isolated.die_with_parent()
        os.sched_setaffinity(0, {cores[number % len(cores)]})

    return subprocess.Popen([sys.executable, "-m", "tf_transfer.sweep", *dict.fromkeys(given),
                             f"--workers={workers}", f"--sweep_name={name}"], env=env, preexec_fn=pin)


def _identity(base: dict, settings: GlueSettings, lrs, options: dict) -> dict:
    """What names the sweep (`sweep_storage.default_name`): its settings, methods, rates and the methods' options, and
    the SHA-256 of a user's files, so that another file of the same name is another sweep (a GLUE task's sweep keeps
    the name it had before files were hashed)."""
    from tf_transfer.data import user_data

    hashes = user_data.file_hashes(settings.data_spec)
    # Packing is a new sweep's own default (`main`): --padding=pack given or not names the same sweep.
    named = {k: v for k, v in base.items() if (k, v) != ("padding", DEFAULT_PADDING)}
    return {"base": named, "methods": sorted(FLAGS.methods), "lrs": lrs, **options,
            **({"data_sha256": hashes} if hashes else {})}


def _sweep_place(dataset: str, identity: dict) -> tuple:
    """`(the sweep's folder, its name)`: `--sweep_name` or one derived from the settings, under
    <runs_dir>/sweep/; a sweep begun before names (SQLite in <runs_dir>/sweep/<data set>/) goes on there."""
    from tf_transfer.studies.sweep import sweep_storage

    legacy = os.path.join(FLAGS.runs_dir, "sweep", dataset)
    if not FLAGS.sweep_name and not FLAGS.storage and os.path.exists(os.path.join(legacy, "sweep.db")):
        return legacy, sweep_storage.LEGACY_NAME
    name = sweep_storage.check_name(FLAGS.sweep_name) if FLAGS.sweep_name else sweep_storage.default_name(
        dataset, identity)
    return os.path.join(FLAGS.runs_dir, "sweep", name), name


def _sweep_options() -> dict:
    """The methods' sweep flags (`methods.registry.sweep_options`, e.g. --lora_ranks), parsed."""
    from tf_transfer.core.errors import TransferError

    words = {int: "whole numbers", float: "numbers", str: "words"}
    parsed = {}
    for flag, (_, _, kind) in methods.registry.sweep_options().items():
        try:
            parsed[flag] = [kind(value) for value in FLAGS[flag].value]
        except ValueError:
            raise TransferError(f"--{flag} takes {words.get(kind, kind.__name__)}, comma-separated, got "
                                f"{','.join(FLAGS[flag].value)}") from None
    return parsed


def _train_trial(*args, **kwargs) -> dict:
    from tf_transfer.studies.sweep import sweep_trial

    logging.use_absl_handler()
    logging.set_verbosity(logging.INFO)
    return sweep_trial.train_trial(*args, **kwargs)


if __name__ == "__main__":
    cli.run(main, COMMAND_FLAGS)
