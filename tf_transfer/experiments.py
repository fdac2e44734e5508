"""Run or report a study's grid.

    python -m tf_transfer.experiments run transfer_learning --variant=cpu --tasks=rte,mrpc --shard=1/2
    python -m tf_transfer.experiments run layer_freezing --dry_run
    python -m tf_transfer.experiments run layer_freezing --variant=cpu --presets=distil_bert_base_en_uncased --dry_run
    python -m tf_transfer.experiments report transfer_learning --variant=cpu --runs_dir=runs --out=reports/transfer_learning
    python -m tf_transfer.experiments run multitask --variant=cpu --data_dir=../shared/data/cs224n_minbert --dry_run
    python -m tf_transfer.experiments run freezing --train_file=reviews.csv --text_columns=review --label_column=stars
    python -m tf_transfer.experiments table reports/runs --out=/tmp/runs

Studies: transfer_learning, layer_freezing and methods (freezing, LoRA and BitFit compared) on GLUE, stack_quora,
multitask, sentiment, and freezing (every depth on a user's own data set: --train_file, --text_columns,
--label_column, ...), each a module of `experiments/`.
`run` skips completed runs and runs locked by another process (so several processes or machines can share one
grid and `runs/`), records a failed run's error beside it and goes on; it exits with status 1 when any run
failed. `report` writes Markdown, CSV and PNG. `table` prints one row per `summary.json` below a folder, of any
study or none, with the time saved and score difference against the task's fine-tuning
(`tf_transfer.reporting.runs_table`); `--out=PATH` also writes PATH.csv and PATH.md.
"""

from __future__ import annotations

import os
import sys
import time

from absl import flags, logging

from tf_transfer.core import cli, isolated
from tf_transfer.core import flags as flags_lib
from tf_transfer.models import methods
from tf_transfer.studies.glue_settings import GlueSettings

FLAGS = flags.FLAGS

flags.DEFINE_string("variant", "paper", "Which of the study's variants: paper, or cpu (what this project's 2-core "
                    "machines can afford; its report lists every difference from the paper).")
flags.DEFINE_list("tasks", None, "Only these tasks (comma-separated).")
flags.DEFINE_list("presets", None, "Sweep these backbones instead of the variant's (comma-separated keras-hub preset "
                  "names or local folders of any encoder family: BERT, RoBERTa, DistilBERT, ELECTRA, DeBERTa-v3).")
flags.DEFINE_string("shard", None, "I/N: take every N-th run starting at the I-th (1 <= I <= N).")
flags.DEFINE_bool("isolate_runs", True, "run: train each run in a fresh process. In one process TensorFlow keeps "
                  "part of every finished run's model alive (about 350 MB per fine-tuned all-MiniLM-L6 run), which "
                  "adds up over a grid and into later runs' peak_memory_mb; --noisolate_runs saves the few seconds "
                  "of importing TensorFlow per run.")
flags.DEFINE_bool("dry_run", False, "List the runs, one per line, without touching data or presets.")
flags.DEFINE_string("out", None, "report: output folder (default reports/<study>); table: PATH (no extension) "
                    "to write PATH.csv and PATH.md (default: print only).")
# Settings of a grid of GLUE-trainer runs that the command line may give the whole grid (a user's data set, the
# budget): a flag given overrides the grid's setting in every run, a flag not given changes nothing.
OVERRIDABLE = ("task", "train_file", "validation_file", "test_file", "text_columns", "label_column", "regression",
               "positive_label", "train_split", "validation_split", "test_split", "metric", "max_train_examples",
               "max_epochs", "batch_size", "patience", "max_seq_length", "precision", "cache_frozen",
               "allow_many_labels")
flags.DEFINE_list("methods", list(methods.registry.in_sweep()), "sweep: the training methods whose candidates compete "
                  "(docs/methods.md).")
flags.DEFINE_string("budget", None, "sweep: training wall time to spend, summed over its runs: e.g. 30m, 2h, 1h30m, "
                    "90s. A rerun with a larger budget goes on.")
for _flag, (_default, _help, _) in methods.registry.sweep_options().items():  # e.g. LoRA's --lora_ranks
    flags.DEFINE_list(_flag, _default, _help)
flags.DEFINE_integer("sweep_top", 3, "sweep: how many of the best candidates run again at more seeds.")
flags.DEFINE_integer("sweep_seeds", 3, "sweep: seeds of those candidates; a candidate is recommended only from 2 "
                     "or more seeds that ran to their stopping rule (3 in practice), so 1 recommends nothing.")
flags.DEFINE_string("storage", None, "sweep: the Optuna storage, an SQLAlchemy URL: e.g. "
                    "postgresql://user:password@host:5432/sweeps, a server that several machines share (pip install "
                    "-e '.[postgres]'; docs/distributed.md); default SQLite in the sweep's folder.")
flags.DEFINE_string("sweep_name", None, "sweep: the sweep's name, its Optuna study on --storage and its folder under "
                    "<runs_dir>/sweep/ (default: the data set and a hash of the sweep's settings, e.g. mrpc-1a2b3c4d). "
                    "Processes and machines that give one name (and the same settings) work on one sweep.")
flags.DEFINE_integer("sweep_heartbeat", 20, "sweep: seconds between a process's heartbeats for the trial it runs; "
                     "a trial whose process missed 3 is failed and queued again by any other process on the sweep.")
flags.DEFINE_list("seeds", None, "Seeds of every setting, instead of the grid's (e.g. 0,1,2).")
flags.DEFINE_list("lrs", None, "Learning rates of every setting, instead of the grid's (e.g. 2e-5,1e-4).")
COMMAND_FLAGS = flags_lib.common(
    runs_dir=("runs", "Root folder of the runs."),
    data_dir=(None, "Data folder for every run: GLUE's (default $GLUE_DIR), or the CS224N files (multitask; "
                    "stack_quora: the folder of quora-dev.csv)."),
    data=(None, "Data file for every run of a study that reads one file (stack_quora: the Quora pairs; sentiment: "
                "the labelled texts)."),
    cache_dir=(None, "Frozen-prefix cache folder shared by the runs (variants that cache)."),
)
COMMAND_FLAGS.update(flags_lib.settings_flags(GlueSettings, only=OVERRIDABLE))

USAGE = ("usage: python -m tf_transfer.experiments run|report STUDY [flags], sweep --budget=30m [data flags], or "
         "table RUNS_DIR [--out=PATH]")


def main(argv):
    from tf_transfer.core.errors import TransferError

    if len(argv) == 3 and argv[1] == "run" and not FLAGS.dry_run:
        _check_files()  # before the grid's modules import TensorFlow
    from tf_transfer.studies import grid as studies

    if len(argv) == 3 and argv[1] == "table":
        from tf_transfer.reporting import runs_table

        runs_table.command(argv[2], FLAGS.out)
        return
    if len(argv) == 2 and argv[1] == "sweep":
        _sweep()
        return
    if len(argv) != 3 or argv[1] not in ("run", "report"):
        raise TransferError(USAGE)
    command, name = argv[1], argv[2]
    from experiments import load_study

    study = load_study(name)
    runs = study.runs(FLAGS.variant, tasks=FLAGS.tasks, presets=FLAGS.presets, axes=_axes_given())
    _override(study, name, runs)
    if FLAGS.tasks and not runs:
        raise TransferError(f"study {name} has no runs for tasks {','.join(FLAGS.tasks)}")
    if study.data_settings is None:  # GLUE runs: reports read GLUE dev from the same folder
        for settings in runs:
            settings["data_dir"] = FLAGS.data_dir or os.environ.get("GLUE_DIR")
    if command == "report":
        _report(study, name, runs)
        return
    selected = studies.shard(runs, FLAGS.shard)
    if FLAGS.dry_run:
        for position, settings in enumerate(selected, start=1):
            print(f"{position:4d} {studies.describe(settings, study.shown)} part={settings['part']} -> "
                  f"{studies.run_dir(FLAGS.runs_dir, study, settings)}")
        print(f"{len(selected)} runs ({len(runs)} in the whole grid)")
        return
    _run(study, name, runs, selected)


def _check_files() -> None:
    """A user's files given on the command line read and checked as every run will read them: a bad file is one line
    within a second or two, not after TensorFlow's start."""
    if FLAGS.train_file and FLAGS.text_columns and FLAGS.label_column:
        from tf_transfer.data import user_data

        spec = user_data.DataSpec(FLAGS.train_file, FLAGS.validation_file, FLAGS.test_file,
                                  text_columns=tuple(FLAGS.text_columns), label_column=FLAGS.label_column,
                                  regression=FLAGS.regression, positive_label=FLAGS.positive_label,
                                  allow_many_labels=FLAGS.allow_many_labels)
        user_data.check_files(spec, False, FLAGS.metric)


def _axes_given() -> dict:
    from tf_transfer.core.errors import TransferError

    axes = {}
    try:
        if FLAGS.seeds:
            axes["seed"] = [int(seed) for seed in FLAGS.seeds]
        if FLAGS.lrs:
            axes["lr"] = [float(lr) for lr in FLAGS.lrs]
    except ValueError as e:
        raise TransferError(f"--seeds takes integers and --lrs numbers, comma-separated ({e})") from None
    return axes


def _override(study, name: str, runs: list) -> None:
    """Puts the GLUE settings given on the command line on every run of the grid."""
    from tf_transfer.core.errors import TransferError

    given = {flag: FLAGS[flag].value for flag in OVERRIDABLE if FLAGS[flag].present}
    if not given:
        return
    if study.settings_class is not GlueSettings:
        raise TransferError(f"--{next(iter(given))} sets GLUE-trainer runs; study {name} takes its own settings "
                            "(see its module in experiments/)")
    if "text_columns" in given:
        given["text_columns"] = tuple(given["text_columns"])
    for settings in runs:
        settings.update(given)
        if "cache_frozen" in given:  # full fine-tuning has nothing frozen to cache
            settings["cache_frozen"] = given["cache_frozen"] and settings["trainable_layers"] != "all"


def _data_settings(study) -> dict:
    """What --data_dir and --data are for the study's runs (GLUE: the data folder, default $GLUE_DIR)."""
    if study.data_settings is not None:
        return study.data_settings(FLAGS.data_dir, FLAGS.data)
    return {"data_dir": _glue_data_dir()}


def _glue_data_dir():
    """--data_dir, else $GLUE_DIR, checked once (not one error per run); None: the runs read TFDS."""
    from tf_transfer.data import tasks

    data_dir = FLAGS.data_dir or os.environ.get("GLUE_DIR")
    if data_dir:
        tasks.check_data_dir(data_dir)
    return data_dir


def _report(study, name: str, runs: list) -> None:
    from tf_transfer.core.errors import TransferError
    from tf_transfer.studies import grid as studies

    out = FLAGS.out or os.path.join("reports", name)
    if not os.path.isdir(FLAGS.runs_dir):
        raise TransferError(f"runs folder {FLAGS.runs_dir} does not exist: point --runs_dir at the grid's runs "
                            "(the committed reproductions are under reports/)")
    collected = studies.collect(study, runs, FLAGS.runs_dir)
    if not any(c["summary"] for c in collected):
        # A report of nothing but "missing" would overwrite a real one at --out and look like a result.
        raise TransferError(f"no completed run of {name} (--variant={FLAGS.variant}) under {FLAGS.runs_dir}: "
                            "run the grid first, or point --runs_dir at its runs; nothing written")
    written = study.report(collected, out, study, FLAGS.variant)
    done = sum(1 for c in collected if c["summary"])
    variant = f" ({FLAGS.variant} variant)" if len(study.variants) > 1 or FLAGS.variant != "paper" else ""
    print(f"report of {name}{variant}: {done}/{len(collected)} runs completed; written to {written or out}")


def _run(study, name: str, runs: list, selected: list) -> None:
    from tf_transfer.studies import grid as studies
    from tf_transfer.training import locks

    data = _data_settings(study)
    locks.check_writable(FLAGS.runs_dir, "--runs_dir")  # before any run: not one traceback per run
    for settings in selected:
        settings.update(data)
        if FLAGS.cache_dir and settings.get("cache_frozen"):
            settings["cache_dir"] = FLAGS.cache_dir
    logging.set_verbosity(logging.INFO)

    def run_one(settings, folder):
        if FLAGS.isolate_runs:
            isolated.call(_train_run, study, settings, folder)
        else:
            _train_run(study, settings, folder)

    start = time.time()
    counts = studies.run_until_settled(study, selected, FLAGS.runs_dir, run_one,
                                       log=lambda line: print(line, flush=True))
    print(f"{name}: {counts['ran']} ran, {counts['completed']} already completed, {counts['failed']} failed, "
          f"{counts['locked']} taken by other processes, {counts['waiting']} waiting, "
          f"{counts['not needed']} not needed; "
          f"{(time.time() - start) / 60:.1f} min")
    if counts["failed"]:
        # Scripts chaining a grid and its report must see that the grid is not whole.
        cli.fail(f"{counts['failed']} runs failed; each one's error is in the error.json beside it under "
                 f"{FLAGS.runs_dir} (rerun the same command to retry them)", status=1)


def _sweep() -> None:
    """A budgeted sweep over training methods on the data the flags name (`tf_transfer.studies.sweep`)."""
    from tf_transfer.core import metrics
    from tf_transfer.core import settings as settings_lib
    from tf_transfer.core.errors import TransferError
    from tf_transfer.reporting import sweep_report
    from tf_transfer.studies import sweep, sweep_storage

    if not FLAGS.budget:
        raise TransferError("experiments sweep needs --budget: the training time to spend, e.g. --budget=30m")
    budget_s = sweep.parse_budget(FLAGS.budget)
    if FLAGS.sweep_heartbeat < 1:
        raise TransferError(f"--sweep_heartbeat={FLAGS.sweep_heartbeat}: give whole seconds, 1 or more")
    base = settings_lib.read_flagfile("flags/sweep.flags", GlueSettings)
    base.update({flag: FLAGS[flag].value for flag in OVERRIDABLE if FLAGS[flag].present})
    base.update({k: v for k, v in {"preset": (FLAGS.presets or [None])[0], "cache_dir": FLAGS.cache_dir}.items() if v})
    settings = GlueSettings.from_dict(base)  # bad data flags fail here, before anything is written
    if settings.data_spec is None:
        base["data_dir"] = _glue_data_dir()
    base = {k: list(v) if isinstance(v, tuple) else v for k, v in base.items()}
    lrs = _axes_given().get("lr")
    options = _sweep_options()
    sweep.check_methods(FLAGS.methods)
    # What names the sweep (`sweep_storage.default_name`): its settings, methods, rates and the methods' options.
    identity = {"base": base, "methods": sorted(FLAGS.methods), "lrs": lrs, **options}
    sweep_dir, name = _sweep_place(settings.dataset, identity)
    if FLAGS.storage:  # a missing driver or a server that does not answer: one line, before anything is loaded
        sweep_storage.storage_of(FLAGS.storage, None)

    def make_candidates():
        from tf_transfer.models import backbones

        depth = backbones.load_preset(settings.preset).backbone.num_layers
        return sweep.candidates(FLAGS.methods, depth, lrs, options)

    study, where = sweep.open_study(sweep_dir, base, make_candidates, budget_s, FLAGS.storage,
                                    settings.metric_name in metrics.LOWER_IS_BETTER, name=name, identity=identity,
                                    heartbeat_s=FLAGS.sweep_heartbeat,
                                    command=" ".join(["python -m tf_transfer.experiments", *sys.argv[1:]]),
                                    log=lambda line: print(line, flush=True))
    print(f"[sweep] {study.study_name} on {sweep_storage.shown_url(where[0])}; runs in {sweep_dir}", flush=True)
    logging.set_verbosity(logging.INFO)

    def train(*args):
        return isolated.call(_train_trial, *args) if FLAGS.isolate_runs else _train_trial(*args)

    ended = sweep.run_sweep(study, where, sweep_dir, train, FLAGS.sweep_top, FLAGS.sweep_seeds,
                            log=lambda line: print(line, flush=True))
    out = FLAGS.out or sweep_dir
    _, line = sweep_report.write_report(study, sweep_dir, out)
    print(f"sweep {'done' if ended == 'done' else 'stopped: budget spent'}; "
          f"{sweep.spent_s(study) / 60:.1f} min of {budget_s / 60:.1f} spent; report in {out}/README.md")
    print(line)


def _sweep_place(dataset: str, identity: dict) -> tuple:
    """`(the sweep's folder, its name)`: `--sweep_name` or one derived from the settings, under
    <runs_dir>/sweep/; a sweep begun before names (SQLite in <runs_dir>/sweep/<data set>/) goes on there."""
    from tf_transfer.studies import sweep_storage

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


def _train_trial(*args) -> dict:
    from tf_transfer.studies import sweep_trial

    logging.use_absl_handler()
    logging.set_verbosity(logging.INFO)
    return sweep_trial.train_trial(*args)


def _train_run(study, settings: dict, folder: str) -> None:
    import keras

    from tf_transfer.studies import grid as studies

    logging.use_absl_handler()  # a child process logs as its parent does
    logging.set_verbosity(logging.INFO)
    keras.backend.clear_session()  # with --noisolate_runs one process runs many models: drop the previous one
    studies.train_run(study, settings, folder)


if __name__ == "__main__":
    cli.run(main, COMMAND_FLAGS)
