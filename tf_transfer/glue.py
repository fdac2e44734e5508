"""Train BERT on a GLUE task with the last k encoder blocks trainable; score validation and GLUE dev each epoch.

    python -m tf_transfer.glue --task=rte --trainable_layers=4 --lr=1e-3
    python -m tf_transfer.glue --flagfile=flags/transfer_k4.flags --task=mrpc

Writes `summary.json` and TensorBoard events to --output_dir (default runs/<task>/<run name>/seed<seed>).
"""

from __future__ import annotations

import os

from absl import flags

from tf_transfer.core import cli
from tf_transfer.core import flags as flags_lib
from tf_transfer.studies.glue.glue_settings import GlueSettings, first_run_defaults

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
    from tf_transfer.studies.glue import glue_session

    glue_session.run(config, first_run, FLAGS.output_dir, FLAGS.runs_dir, overwrite=FLAGS.overwrite,
                     export_dir=FLAGS.export_dir, export_format=FLAGS.export_format)


if __name__ == "__main__":
    cli.run(main, COMMAND_FLAGS)
