"""The flags the grid commands share (`experiments` and `sweep`): the data set and run folders every run of a grid
or sweep takes, the axes given on the command line, and what they become.

A grid command imports this module for its flags and puts `COMMAND_FLAGS` on the command line's shared flags
(`tf_transfer.core.cli.run(main, COMMAND_FLAGS)`); only commands read these flags.

Example (in a grid command module):

>>> from tf_transfer import grid_flags  # doctest: +SKIP
>>> cli.run(main, grid_flags.COMMAND_FLAGS)  # doctest: +SKIP
"""

from __future__ import annotations

from absl import flags

from tf_transfer.core import flags as flags_lib
from tf_transfer.core.errors import TransferError
from tf_transfer.studies.glue.glue_settings import GlueSettings

FLAGS = flags.FLAGS

flags.DEFINE_list("presets", None, "Sweep these backbones instead of the variant's (comma-separated keras-hub preset "
                  "names or local folders of any encoder family: BERT, RoBERTa, DistilBERT, ELECTRA, DeBERTa-v3).")
flags.DEFINE_bool("isolate_runs", True, "run: train each run in a fresh process. In one process TensorFlow keeps "
                  "part of every finished run's model alive (about 350 MB per fine-tuned all-MiniLM-L6 run), which "
                  "adds up over a grid and into later runs' peak_memory_mb; --noisolate_runs saves the few seconds "
                  "of importing TensorFlow per run.")
flags.DEFINE_string("out", None, "report: output folder (default reports/<study>); table: PATH (no extension) "
                    "to write PATH.csv and PATH.md (default: print only).")
flags.DEFINE_list("seeds", None, "Seeds of every setting, instead of the grid's (e.g. 0,1,2).")
flags.DEFINE_list("lrs", None, "Learning rates of every setting, instead of the grid's (e.g. 2e-5,1e-4).")
# Settings of a grid of GLUE-trainer runs that the command line may give the whole grid (a user's data set, the
# budget): a flag given overrides the grid's setting in every run, a flag not given changes nothing.
OVERRIDABLE = ("task", "train_file", "validation_file", "test_file", "text_columns", "label_column", "regression",
               "positive_label", "train_split", "validation_split", "test_split", "metric", "max_train_examples",
               "max_epochs", "batch_size", "patience", "max_seq_length", "precision", "cache_frozen",
               "allow_many_labels", "encoding", "padding")
COMMAND_FLAGS = flags_lib.common(
    runs_dir=("runs", "Root folder of the runs."),
    data_dir=(None, "Data folder for every run: GLUE's (default $GLUE_DIR), or the CS224N files (multitask; "
                    "stack_quora: the folder of quora-dev.csv)."),
    data=(None, "Data file for every run of a study that reads one file (stack_quora: the Quora pairs; sentiment: "
                "the labelled texts)."),
    cache_dir=(None, "Frozen-prefix cache folder shared by the runs (variants that cache)."),
)
COMMAND_FLAGS.update(flags_lib.settings_flags(GlueSettings, only=OVERRIDABLE))
COMMAND_FLAGS.update({name: (FLAGS[name].default, FLAGS[name].help)
                      for name in ("presets", "isolate_runs", "out", "seeds", "lrs")})


def given_settings() -> dict:
    """The GLUE-trainer settings given on the command line (`OVERRIDABLE`), as settings values."""
    given = {flag: FLAGS[flag].value for flag in OVERRIDABLE if FLAGS[flag].present}
    if "text_columns" in given:
        given["text_columns"] = tuple(given["text_columns"])
    return given


def check_files() -> None:
    """A user's files given on the command line read and checked as every run will read them: a bad file is one line
    within a second or two, not after TensorFlow's start; what was read without a word (labels with spaces around
    them) is said once here."""
    if FLAGS.train_file and FLAGS.text_columns and FLAGS.label_column:
        from tf_transfer.data import user_data

        spec = user_data.DataSpec(FLAGS.train_file, FLAGS.validation_file, FLAGS.test_file,
                                  text_columns=tuple(FLAGS.text_columns), label_column=FLAGS.label_column,
                                  regression=FLAGS.regression, positive_label=FLAGS.positive_label,
                                  allow_many_labels=FLAGS.allow_many_labels, encoding=FLAGS.encoding)
        for line in user_data.check_files(spec, False, FLAGS.metric):
            print(line, flush=True)


def axes_given() -> dict:
    """`--seeds` and `--lrs` as grid axes (`{"seed": [...], "lr": [...]}`, those given)."""
    axes = {}
    try:
        if FLAGS.seeds:
            axes["seed"] = [int(seed) for seed in FLAGS.seeds]
        if FLAGS.lrs:
            axes["lr"] = [float(lr) for lr in FLAGS.lrs]
    except ValueError as e:
        raise TransferError(f"--seeds takes integers and --lrs numbers, comma-separated ({e})") from None
    return axes


def glue_data_dir():
    """--data_dir, else $GLUE_DIR, checked once (not one error per run); None: the runs read TFDS."""
    from tf_transfer.studies.glue import glue_study

    return glue_study.data_folder(FLAGS.data_dir)
