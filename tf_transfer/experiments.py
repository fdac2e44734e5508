"""Run or report a study's grid.

    python -m tf_transfer.experiments run transfer_learning --variant=cpu --tasks=rte,mrpc --shard=1/2
    python -m tf_transfer.experiments run layer_freezing --dry_run
    python -m tf_transfer.experiments run layer_freezing --variant=cpu --presets=distil_bert_base_en_uncased --dry_run
    python -m tf_transfer.experiments report transfer_learning --variant=cpu --runs_dir=runs --out=reports/transfer_learning
    python -m tf_transfer.experiments run multitask --variant=cpu --data_dir=../shared/data/cs224n_minbert --dry_run
    python -m tf_transfer.experiments run freezing --train_file=reviews.csv --text_columns=review --label_column=stars
    python -m tf_transfer.experiments table reports/runs --out=/tmp/runs

Studies: transfer_learning, layer_freezing, methods and methods_full (freezing, LoRA and BitFit compared) and
adaptive_freezing (AutoFreeze and FreezeOut against full fine-tuning and the best static k) on GLUE, stack_quora,
multitask, sentiment, and freezing (every depth on a user's own data set: --train_file, --text_columns,
--label_column, ...), each a module of `experiments/`.
`run` skips completed runs and runs locked by another process (so several processes or machines can share one
grid and `runs/`), records a failed run's error beside it and goes on; it exits with status 1 when any run
failed. `report` writes Markdown, CSV and PNG. `table` prints one row per `summary.json` below a folder, of any
study or none, with the time saved and score difference against the task's fine-tuning
(`tf_transfer.reporting.runs_table`); `--out=PATH` also writes PATH.csv and PATH.md. `sweep` is the budgeted sweep,
`python -m tf_transfer.sweep` (its flags and docstring).
"""

from __future__ import annotations

import os
import time

from absl import flags, logging

from tf_transfer import grid_flags
from tf_transfer import sweep as sweep_command  # `sweep` is the sweep's command (its flags are defined)
from tf_transfer.core import cli, isolated
from tf_transfer.core import flags as flags_lib
from tf_transfer.studies.glue.glue_settings import GlueSettings

FLAGS = flags.FLAGS

flags.DEFINE_string("variant", "paper", "Which of the study's variants: paper, or cpu (what this project's 2-core "
                    "machines can afford; its report lists every difference from the paper).")
flags.DEFINE_list("tasks", None, "Only these tasks (comma-separated).")
flags.DEFINE_string("shard", None, "I/N: take every N-th run starting at the I-th (1 <= I <= N).")
flags.DEFINE_bool("dry_run", False, "List the runs, one per line, without touching data or presets.")
flags.adopt_module_key_flags(grid_flags)
COMMAND_FLAGS = grid_flags.COMMAND_FLAGS
HF_ALIASES = flags_lib.hf_aliases(COMMAND_FLAGS)  # --text_column_names for --text_columns, ... (as glue: docs/glue.md)

USAGE = ("usage: python -m tf_transfer.experiments run|report STUDY [flags], or table RUNS_DIR [--out=PATH] "
         "(and sweep --budget=30m [data flags], the same as python -m tf_transfer.sweep)")


def main(argv):
    from tf_transfer.core.errors import TransferError

    if len(argv) == 3 and argv[1] == "run" and not FLAGS.dry_run:
        grid_flags.check_files()  # before the grid's modules import TensorFlow
    from tf_transfer.studies import grid as studies

    if len(argv) == 3 and argv[1] == "table":
        from tf_transfer.reporting import runs_table

        runs_table.command(argv[2], FLAGS.out)
        return
    if len(argv) == 2 and argv[1] == "sweep":
        sweep_command.main(argv[1:])
        return
    if len(argv) != 3 or argv[1] not in ("run", "report"):
        raise TransferError(USAGE)
    command, name = argv[1], argv[2]
    from experiments import load_grid

    study = load_grid(name)
    runs = study.runs(FLAGS.variant, tasks=FLAGS.tasks, presets=FLAGS.presets, axes=grid_flags.axes_given())
    _override(study, name, runs)
    if FLAGS.tasks and not runs:
        raise TransferError(f"study {name} has no runs for tasks {','.join(FLAGS.tasks)}")
    listed = study.entry.listed_data(FLAGS.data_dir, FLAGS.data)  # e.g. GLUE's folder: reports read GLUE dev
    for settings in runs:
        settings.update(listed)
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


def _override(study, name: str, runs: list) -> None:
    """Puts the GLUE settings given on the command line on every run of the grid."""
    from tf_transfer.core.errors import TransferError

    given = grid_flags.given_settings()
    if not given:
        return
    if study.settings_class is not GlueSettings:
        raise TransferError(f"--{next(iter(given))} sets GLUE-trainer runs; study {name} takes its own settings "
                            "(see its module in experiments/)")
    for settings in runs:
        settings.update(given)
        if "cache_frozen" in given:  # full fine-tuning has nothing frozen to cache
            settings["cache_frozen"] = given["cache_frozen"] and settings["trainable_layers"] != "all"


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

    data = study.data_for(FLAGS.data_dir, FLAGS.data)
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


def _train_run(study, settings: dict, folder: str) -> None:
    import keras

    from tf_transfer.studies import grid as studies

    logging.use_absl_handler()  # a child process logs as its parent does
    logging.set_verbosity(logging.INFO)
    keras.backend.clear_session()  # with --noisolate_runs one process runs many models: drop the previous one
    studies.train_run(study, settings, folder)


if __name__ == "__main__":
    cli.run(main, COMMAND_FLAGS)
