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

from absl import flags

from tf_transfer import grid_flags
from tf_transfer import sweep as sweep_command  # `sweep` is the sweep's command (its flags are defined)
from tf_transfer.core import cli
from tf_transfer.core import flags as flags_lib

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
    from tf_transfer.studies import grid_session

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
    options = grid_session.GridOptions(
        variant=FLAGS.variant, tasks=FLAGS.tasks, presets=FLAGS.presets, axes=grid_flags.axes_given(),
        given=grid_flags.given_settings(), data_dir=FLAGS.data_dir, data=FLAGS.data, runs_dir=FLAGS.runs_dir,
        cache_dir=FLAGS.cache_dir, shard=FLAGS.shard, dry_run=FLAGS.dry_run, isolate_runs=FLAGS.isolate_runs,
        out=FLAGS.out)
    counts = grid_session.run_or_report(command, study, name, options)
    if counts and counts["failed"]:
        # Scripts chaining a grid and its report must see that the grid is not whole.
        cli.fail(f"{counts['failed']} runs failed; each one's error is in the error.json beside it under "
                 f"{FLAGS.runs_dir} (rerun the same command to retry them)", status=1)


if __name__ == "__main__":
    cli.run(main, COMMAND_FLAGS)
