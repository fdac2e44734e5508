"""Train BERT on a GLUE task with the last k encoder blocks trainable; score validation and GLUE dev each epoch.

    python -m tf_transfer.glue --task=rte --trainable_layers=4 --lr=1e-3
    python -m tf_transfer.glue --flagfile=flags/transfer_k4.flags --task=mrpc

Writes `summary.json` and TensorBoard events to --output_dir (default runs/<task>/<run name>/seed<seed>).
"""

from __future__ import annotations

import os
from typing import Optional

from absl import flags, logging

from tf_transfer.core import cli
from tf_transfer.core import flags as flags_lib
from tf_transfer.core import strategies
from tf_transfer.core.errors import TransferError
from tf_transfer.training import locks
from tf_transfer.studies.glue_settings import GlueSettings, first_run_defaults

FLAGS = flags.FLAGS

COMMAND_FLAGS = {
    **flags_lib.settings_flags(GlueSettings),
    **flags_lib.common(
        output_dir=(None, "Where summary.json and TensorBoard events go."),
        runs_dir=("runs", "Root of the default --output_dir."),
        overwrite=(False, "Start afresh even if --output_dir holds a completed run."),
        export_dir=(None, "After training, save the best epoch's classifier here as a keras-hub preset folder "
                          "(backbone, tokenizer, preprocessor, task); score files with it using python -m "
                          "tf_transfer.predict. On a completed run: exports it without training (from the weights "
                          "the run kept)."),
        export_format=("preset", "What --export_dir writes: preset, a keras-hub preset folder (tf_transfer.predict "
                                 "and keras-hub load it), or saved_model, a TensorFlow SavedModel whose "
                                 "serving_default signature takes raw strings and returns label and probabilities "
                                 "(tf.saved_model.load, saved_model_cli and TensorFlow Serving load it without "
                                 "keras-hub or tf_transfer; BERT and DistilBERT presets)."),
    ),
}
HF_ALIASES = flags_lib.hf_aliases(COMMAND_FLAGS)  # --learning_rate for --lr, ... (docs/glue.md)
flags_lib.follow(GlueSettings, COMMAND_FLAGS)  # a method registered later brings its settings' flags


def settings_from_flags() -> GlueSettings:
    return first_run_settings()[0]


def first_run_settings() -> tuple:
    """`(settings, line)`: the settings of the flags, with a user's data set's first-run defaults and the method's
    own (`run_defaults`) where neither a flag nor a flagfile gives them, and the line saying which were chosen (None
    when none was)."""
    config = flags_lib.settings_from_flags(GlueSettings, COMMAND_FLAGS,
                                           data_dir=FLAGS.data_dir or os.environ.get("GLUE_DIR") or None)
    if cli.flagfile_given():
        return config, None
    return first_run_defaults(config, {name for name in COMMAND_FLAGS if FLAGS[name].present})


def main(argv):
    del argv
    config, first_run = first_run_settings()  # validates every setting before anything heavy is imported
    from tf_transfer.models import loader, serving

    serving.check_format(FLAGS.export_format)
    loader.check_depth(config.model)  # from the preset's config, before the data, TensorFlow or the weights
    read = []
    if config.data_spec is not None:  # bad files are one line within a second or two, not after TensorFlow's start
        from tf_transfer.data import user_data

        read = user_data.check_files(config.data_spec, config.skip_bad_rows, config.metric)  # said once, below
    output_dir = FLAGS.output_dir or config.default_output_dir(FLAGS.runs_dir)
    logging.set_verbosity(logging.INFO)
    with locks.run_folder(output_dir, config.distribution):  # writable and this command's alone, before TensorFlow
        _train(config, output_dir, [line for line in (first_run, *read) if line])


def _train(config: GlueSettings, output_dir: str, announced: list) -> None:
    """Trains (or finds, or exports) the run; `announced` (what was chosen and read) is printed once the folder has
    not refused the run, so that a refusal's `error:` line comes alone."""
    from tf_transfer.models import methods
    from tf_transfer.studies import glue_task as study

    # Other settings or other data in a folder: exit 2, never a false "done". Multi-worker runs ask the chief inside
    # run_glue, once every worker has joined (a chief leaving alone would stop the others on the timeout).
    found = _completed_run(config, output_dir) if config.distribution != "multi_worker" else None
    for line in announced:
        print(line, flush=True)
    if found is not None:
        results = results_text(found)
        if FLAGS.export_dir:
            summary = study.export_finished(config, output_dir, FLAGS.export_dir, FLAGS.export_format)
            print(f"{output_dir} already holds a completed run; not training again: exported its epoch-"
                  f"{summary['exported']['epoch'] or len(summary['epochs'])} model to {FLAGS.export_dir}"
                  f"{f' ({results})' if results else ''}")
            return
        print(f"{output_dir} already holds a completed run; not training again (--overwrite starts afresh)"
              f"{f': {results}' if results else ''}")
        return
    summary = study.run_glue(config, output_dir, overwrite=FLAGS.overwrite, export_dir=FLAGS.export_dir,
                             keep_weights=True, export_format=FLAGS.export_format)
    closing = methods.get(config.method).closing_line(summary)  # e.g. when each block froze, before the last line
    if closing:
        print(closing)
    if summary["best_epoch"]:
        folder = strategies.results_folder(output_dir, config.distribution)
        print(f"done: {results_text(summary)}; summary in {folder}{not_beaten(summary.get('constant_prediction'))}")


def results_text(summary: dict) -> str:
    """`best epoch 2 of 4, validation accuracy 0.8261, test accuracy 0.8255` of a run's summary (what `done:` and a
    completed run found again say); empty when no epoch was chosen (nothing held out for validation).

    >>> results_text({"best_epoch": 1, "epochs": [{"val": {"accuracy": 0.5}, "test": None}]})
    'best epoch 1 of 1, validation accuracy 0.5000'
    """
    best = summary.get("best_epoch")
    if not best:
        return ""
    scores = summary["epochs"][best - 1]
    test = scores_text(scores.get("test"))
    return (f"best epoch {best} of {len(summary['epochs'])}, validation {scores_text(scores.get('val')) or 'none'}"
            f"{f', test {test}' if test else ''}")


def _completed_run(config: GlueSettings, output_dir: str) -> Optional[dict]:
    """The summary of the completed run of `config` that `output_dir` holds, else None (`TransferError` for another
    run there; a completed run whose kept best weights fail their check is one line too, said as an export's refusal
    with --export_dir)."""
    from tf_transfer.data import user_data
    from tf_transfer.training import checkpoints, record
    from tf_transfer.training.run_folder import RunFolder

    try:
        found = RunFolder(output_dir, config.to_dict(), config.NOT_RESULT_SETTINGS, FLAGS.overwrite,
                          data=user_data.file_hashes(config.data_spec))
        return found.existing if found.completed else None
    except record.UnreadableRecord as e:
        if not FLAGS.export_dir or os.path.basename(e.path) != checkpoints.BEST:
            raise
        raise TransferError(f"--export_dir: nothing exported: the completed run's best weights {e.path} are "
                            f"unreadable ({e.why}); rerun with --overwrite to train it again") from None


def scores_text(scores: dict, prefix: str = "") -> str:
    """`accuracy 0.8614, f1 0.8032` (4 decimals; MNLI's two dev sets by name); empty for no scores."""
    parts = []
    for name, value in (scores or {}).items():
        if isinstance(value, dict):
            parts.append(scores_text(value, f"{prefix}{name} "))
        elif isinstance(value, (int, float)) and value == value:  # NaN (an undefined correlation) left out
            parts.append(f"{prefix}{name} {value:.4f}")
    return ", ".join(p for p in parts if p)


def not_beaten(constant) -> str:
    """What the final line adds for a run whose best validation score does not beat the constant prediction."""
    if not constant or constant["beaten"]:
        return ""
    prediction = (f"always {constant['prediction']:.3g}" if isinstance(constant["prediction"], float)
                  else f"always {constant['prediction']!r}")
    return (f"; it does NOT beat the constant prediction ({prediction}: {constant['metric']} "
            f"{constant['score']:.3f} on validation): the model learnt nothing usable; more data, epochs, trainable "
            "blocks or another learning rate may help")


if __name__ == "__main__":
    cli.run(main, COMMAND_FLAGS)
