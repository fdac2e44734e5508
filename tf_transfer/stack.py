"""Stack-and-finetune (arXiv 1907.05338): a head on frozen BERT first, then BERT and the head fine-tuned together.

    python -m tf_transfer.stack --task=quora --data=../shared/data/cs224n_minbert/quora-dev.csv --head=bimpm \
        --strategy=stack_and_finetune --preset=all_minilm_l6_v2_en --phase1_epochs=1 --max_epochs=2 \
        --batch_size=16 --max_train_examples=256 --output_dir=/tmp/stack
    python -m tf_transfer.stack --flagfile=flags/stack_conll_ner.flags --data=eng.train --test_data=eng.testb

Writes `summary.json` (epochs marked with their phase) and TensorBoard events to --output_dir; an --ensemble writes
one folder per head and `ensemble.json`. Re-running the same command resumes an interrupted run after its last
finished epoch; a completed run is not trained again (exit 0); other settings in an unfinished run's folder are
refused (exit 2) unless --overwrite. The work is in `tf_transfer.studies.stack.stack_ensemble`; this module only
reads flags.
"""

from __future__ import annotations

from absl import flags, logging

from tf_transfer.core import cli
from tf_transfer.core import flags as flags_lib
from tf_transfer.core import strategies
from tf_transfer.training import locks
from tf_transfer.studies.stack.stack_settings import StackSettings

FLAGS = flags.FLAGS

COMMAND_FLAGS = {
    **flags_lib.settings_flags(StackSettings),
    **flags_lib.common(
        output_dir=(None, "Where summary.json and TensorBoard events go (default runs/stack/<task>/<head>_<strategy>/"
                          "seed<seed>)."),
        runs_dir=("runs", "Root of the default --output_dir."),
        report=(None, "Instead of training: print a Markdown table comparing these run folders (their summary.json): "
                      "validation scores after the last epoch and at the best one, how phase 1 ended, training time."),
        overwrite=(False, "Start afresh even if --output_dir holds a completed or unfinished run (an unfinished run "
                          "with the same settings is otherwise resumed after its last finished epoch)."),
    ),
}
flags_lib.follow(StackSettings, COMMAND_FLAGS)  # a method registered later brings its settings' flags


def main(argv):
    del argv
    if FLAGS.report:
        from tf_transfer.reporting import stack_report

        print(stack_report.report_table(FLAGS.report))
        return
    # Every value is checked before data is read or TensorFlow imported.
    config = flags_lib.settings_from_flags(StackSettings, COMMAND_FLAGS)
    output_dir = FLAGS.output_dir or config.default_output_dir(FLAGS.runs_dir)
    logging.set_verbosity(logging.INFO)
    with locks.run_folder(output_dir, FLAGS.distribution):  # writable and this command's alone, before TensorFlow
        _train(config, output_dir)


def _train(config: StackSettings, output_dir: str) -> None:
    from tf_transfer.studies.stack import stack_ensemble as study

    # Multi-worker runs ask the chief inside run_stack, once every worker has joined.
    if FLAGS.distribution != "multi_worker" and not FLAGS.overwrite and study.completed_result(config, output_dir):
        print(f"{output_dir} already holds a completed run; not training again (--overwrite starts afresh)")
        return
    result = study.run_stack(config, output_dir, overwrite=FLAGS.overwrite)
    if config.ensemble:
        print(f"ensemble of {', '.join(config.heads)}: val {result['val']}, test {result['test']}; "
              f"{study.ENSEMBLE_FILE} in {strategies.results_folder(output_dir, FLAGS.distribution)}")
    else:
        best = result["best_epoch"]
        scores = result["epochs"][best - 1] if best else result["epochs"][-1]
        print(f"best epoch {scores['epoch']} (phase {scores['phase']}): val {scores['val']}, test {scores['test']}; "
              f"summary in {strategies.results_folder(output_dir, FLAGS.distribution)}")


if __name__ == "__main__":
    cli.run(main, COMMAND_FLAGS)
