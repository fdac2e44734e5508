"""Multi-task minBERT (Li, CS224N): one BERT for SST sentiment, Quora paraphrase and STS similarity at once.

    python -m tf_transfer.multitask --data_dir=../shared/data/cs224n_minbert --preset=all_minilm_l6_v2_en \\
        --max_train_examples=64 --max_epochs=1 --batch_size=16 --pair_head=sbert --output_dir=/tmp/mt
    python -m tf_transfer.multitask --flagfile=flags/li_finetune.flags --data_dir=../shared/data/cs224n_minbert

Writes `summary.json`, `best.weights.h5` and TensorBoard events to --output_dir. The work is done by
`tf_transfer.studies.multitask.multitask_task`; this module only reads flags.
"""

from __future__ import annotations

from absl import flags, logging

from tf_transfer.core import cli
from tf_transfer.core import flags as flags_lib
from tf_transfer.core import strategies
from tf_transfer.training import locks
from tf_transfer.studies.multitask.multitask_settings import MultitaskSettings

FLAGS = flags.FLAGS

COMMAND_FLAGS = {
    **flags_lib.settings_flags(MultitaskSettings),
    **flags_lib.common(
        output_dir=(None, "Where summary.json, best.weights.h5 and TensorBoard events go."),
        report=(None, "Instead of training: print a Markdown table of these run folders' best-on-dev scores (their "
                      "summary.json), e.g. --report=reports/multitask/runs/li_finetune,..."),
        overwrite=(False, "Start afresh even if --output_dir holds a completed run."),
    ),
}
flags_lib.follow(MultitaskSettings, COMMAND_FLAGS)  # a method registered later brings its settings' flags


def main(argv):
    del argv
    from tf_transfer.core.errors import TransferError

    if FLAGS.report:
        from tf_transfer.reporting import multitask_report

        print(multitask_report.report_table(FLAGS.report))
        return
    if not FLAGS.output_dir:
        raise TransferError("--output_dir is required: the folder for summary.json, best.weights.h5 and TensorBoard")
    settings = flags_lib.settings_from_flags(MultitaskSettings, COMMAND_FLAGS)
    logging.set_verbosity(logging.INFO)
    with locks.run_folder(FLAGS.output_dir, settings.distribution):  # writable and this command's alone, first
        _train(settings)


def _train(settings: MultitaskSettings) -> None:
    from tf_transfer.studies.multitask import multitask_task as multitask

    summary = multitask.run_multitask(settings, FLAGS.output_dir, overwrite=FLAGS.overwrite)
    best = summary["best_epoch"]
    if best:
        scores = summary["epochs"][best - 1]["test"]
        print(f"best epoch {best}: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items() if v is not None)
              + f"; summary in {strategies.results_folder(FLAGS.output_dir, settings.distribution)}")


if __name__ == "__main__":
    cli.run(main, COMMAND_FLAGS)
