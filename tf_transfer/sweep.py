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

import sys

from absl import flags

from tf_transfer import grid_flags
from tf_transfer.core import cli
from tf_transfer.core import flags as flags_lib
from tf_transfer.core import settings as settings_lib
from tf_transfer.models import methods
from tf_transfer.studies.glue.glue_settings import GlueSettings

FLAGS = flags.FLAGS

_LEFT_OUT = methods.registry.left_out_of_default_sweep()
flags.DEFINE_list("methods", list(methods.registry.in_default_sweep()), "The training methods whose candidates "
                  "compete (docs/methods.md)" + "".join(f"; also {name}, left out by default: {why}"
                                                        for name, why in _LEFT_OUT.items()) + ".")
flags.DEFINE_string("budget", None, "Wall time the sweep may take on this machine, e.g. 30m, 2h, 1h30m, 90s: its "
                    "--workers train up to that long each (the budget of training time is that times the workers, "
                    "summed over the sweep's runs). It says first what an answer needs. A rerun with a larger budget "
                    "goes on.")
flags.DEFINE_integer("workers", 0, "Processes of this machine that train the sweep's trials at once, each pinned to "
                     "a core of its own (0: one per usable core; 1: one process whose runs use every core).")
for _flag, (_default, _help, _) in methods.registry.sweep_options().items():  # e.g. LoRA's --lora_ranks
    flags.DEFINE_list(_flag, _default, _help)
flags.DEFINE_integer("sweep_top", 3, "How many of the best candidates run again at more seeds (the seed round), "
                     "each setting once, at its best rate at seed 0.")
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
# --help shows the values every run takes (flags/sweep.flags': batch 32, up to 5 epochs), not the GLUE trainer's
# defaults: only flags given on the command line replace the flagfile's (`grid_flags.given_settings`).
COMMAND_FLAGS.update({name: (value, f"{COMMAND_FLAGS[name][1]} The sweep's runs: flags/sweep.flags' value, "
                                     "unless given.")
                      for name, value in settings_lib.read_flagfile("flags/sweep.flags", GlueSettings).items()
                      if name in COMMAND_FLAGS})
DEFAULT_PADDING = COMMAND_FLAGS["padding"][0]  # a new sweep's, where neither --padding nor its flagfile says one
HF_ALIASES = flags_lib.hf_aliases(COMMAND_FLAGS)  # --text_column_names for --text_columns, ... (as glue: docs/glue.md)


def main(argv):
    from tf_transfer.studies.sweep import sweep_session

    options = options_of_flags(argv)  # the sweep's own flags first: they are checked before any file is read
    base, settings, lrs, sweep_options = _settings_of_flags()
    sweep_session.run(options, base, settings, lrs, sweep_options, _write_report)


def _write_report(study, sweep_dir: str, out: str) -> tuple:
    from tf_transfer.reporting import sweep_report  # at the end only, as a worker that writes no report never needs it

    return sweep_report.write_report(study, sweep_dir, out)


def options_of_flags(argv=("sweep",)):
    """The sweep's own flags (not its runs' settings) as a checked `sweep_session.SweepOptions`."""
    from tf_transfer.core.errors import TransferError
    from tf_transfer.studies.sweep import sweep_session

    if len(argv) > 1:
        raise TransferError(f"sweep takes flags only, got {' '.join(argv[1:])}: e.g. python -m tf_transfer.sweep "
                            "--task=mrpc --budget=30m")
    if FLAGS["seeds"].present:
        raise TransferError("--seeds: the sweep chooses its own seeds; give --sweep_seeds (how many) instead")
    # A worker the sweep starts is given the flags given here, but its own number and the sweep's name.
    given = tuple(FLAGS[flag].serialize() for flag in FLAGS
                  if FLAGS[flag].present and flag not in ("workers", "sweep_name"))
    return sweep_session.SweepOptions(
        budget=FLAGS.budget, methods=FLAGS.methods, workers=FLAGS.workers, top=FLAGS.sweep_top,
        seeds=FLAGS.sweep_seeds, storage=FLAGS.storage, name=FLAGS.sweep_name, heartbeat_s=FLAGS.sweep_heartbeat,
        retry_s=FLAGS.storage_retry_s, isolate_runs=FLAGS.isolate_runs, out=FLAGS.out, runs_dir=FLAGS.runs_dir,
        default_padding=DEFAULT_PADDING, command=" ".join(["python -m tf_transfer.sweep", *sys.argv[1:]]),
        worker_flags=given)


def _settings_of_flags() -> tuple:
    """`(base, settings, lrs, options)`: every trial's settings (flags/sweep.flags, then the flags given) as a dict
    and checked, the rates given, the methods' sweep options. Bad flags and files fail here, before TensorFlow."""
    from tf_transfer.models import backbones
    from tf_transfer.studies.sweep import sweep_search as sweep, sweep_session

    base = settings_lib.read_flagfile("flags/sweep.flags", GlueSettings)
    base.update(grid_flags.given_settings())
    base.update({k: v for k, v in {"preset": (FLAGS.presets or [None])[0], "cache_dir": FLAGS.cache_dir}.items() if v})
    settings = GlueSettings.from_dict(base)
    grid_flags.check_files()
    backbones.check_preset(settings.preset)  # before the sweep's storage holds a study of it
    if settings.data_spec is None:
        base["data_dir"] = grid_flags.glue_data_dir()
    base = {k: list(v) if isinstance(v, tuple) else v for k, v in base.items()}
    options = sweep_session.parse_sweep_options({flag: FLAGS[flag].value for flag in methods.registry.sweep_options()})
    sweep.check_methods(FLAGS.methods)
    return base, settings, grid_flags.axes_given().get("lr"), options


if __name__ == "__main__":
    cli.run(main, COMMAND_FLAGS)
