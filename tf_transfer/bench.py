"""Benchmark training throughput with the trainer's own flags; the last line printed is one JSON object.

    python -m tf_transfer.bench --task=mrpc --preset=all_minilm_l6_v2_en --data_dir=$GLUE_DIR \
        --max_train_examples=512 --batch_size=32 --trainable_layers=all
    python -m tf_transfer.bench ... --trainable_layers=2 --cache_frozen --compare_naive

Only training steps are timed, after --warmup_steps (which include compilation). Batches are packed unless
--padding says otherwise (or --jit_compile=true asks for XLA: then bucketed).
"""

from __future__ import annotations

import collections
import json
import os

from absl import flags, logging

from tf_transfer.core import cli
from tf_transfer import glue  # noqa: F401  (defines the trainer's flags, which the benchmark shares)

FLAGS = flags.FLAGS
# The trainer's flags, with its defaults but for packed batches (the same model on fewer tokens; padded batches:
# --padding=bucket, and with --jit_compile=true, whose one program per row count packing does not suit). A view of
# the trainer's, not a copy: a training method registered later brings its flags to both, and takes them out of both.
COMMAND_FLAGS = collections.ChainMap(
    {"padding": ("pack", glue.COMMAND_FLAGS["padding"][1] + " The benchmark's default: pack (bucket with "
                                                            "--jit_compile=true).")},
    glue.COMMAND_FLAGS)

flags.DEFINE_integer("steps", 16, "Training steps to time.")
flags.DEFINE_integer("warmup_steps", 3, "Untimed training steps first (compilation happens here).")
flags.DEFINE_integer("repeats", 3, "Times the timed steps are run (one fit call each); the median is reported.")
flags.DEFINE_string("profile_dir", None,
                    "Also trace one more run of the timed steps with tf.profiler into this folder (TensorBoard's "
                    "Profile tab) and add the time per op type to the JSON as `profile`.")
flags.DEFINE_bool("matmul_peak", False,
                  "Also time TensorFlow's matrix product at the feed-forward's shape (batch x 64 tokens) in float32 "
                  "and bfloat16, and add `matmul_gflop_per_s` and the run's `share_of_matmul_peak` (its executed "
                  "GFLOP/s over the peak of its precision's matmul).")
flags.DEFINE_bool("wait_between_repeats", False,
                  "Before each timed repeat print `ready <repeat>` and wait for a line on stdin: lets a runner "
                  "(benchmarks/fair.py) interleave this benchmark's repeats with another program's, one at a time.")
flags.DEFINE_bool("compare_naive", False,
                  "Also time keras-hub's BertTextClassifier.fit at fixed --max_seq_length with XLA, and add the ratio.")


def main(argv):
    del argv
    from tf_transfer.core.errors import TransferError

    if FLAGS.steps < 1 or FLAGS.warmup_steps < 0 or FLAGS.repeats < 1:
        raise TransferError("--steps and --repeats must be >= 1 and --warmup_steps >= 0")
    if str(FLAGS.jit_compile).lower() == "true" and not FLAGS["padding"].present:
        FLAGS.padding = "bucket"
    config = glue.settings_from_flags()
    logging.set_verbosity(logging.WARNING)
    from tf_transfer.studies.glue import glue_benchmark as benchmark

    result = benchmark.measure(config, FLAGS.steps, FLAGS.warmup_steps, FLAGS.repeats,
                               profile_dir=FLAGS.profile_dir,
                               before_repeat=benchmark.wait_for_go if FLAGS.wait_between_repeats else None)
    if FLAGS.compare_naive:
        result.update(benchmark.measure_naive(config, FLAGS.steps, FLAGS.warmup_steps))
        result["speedup_vs_naive"] = result["train_examples_per_s"] / result["naive_train_examples_per_s"]
    if FLAGS.matmul_peak:
        shape = dict(rows=config.batch_size * 64, hidden=result["hidden_dim"], intermediate=result["intermediate_dim"])
        peaks = {dtype: benchmark.matmul_peak(**shape, dtype=dtype) for dtype in ("float32", "bfloat16")}
        result["matmul_gflop_per_s"] = peaks
        result["share_of_matmul_peak"] = result["gflop_per_s"] / peaks[
            "bfloat16" if config.precision == "mixed_bfloat16" else "float32"]
    result["settings"] = {k: v for k, v in config.to_dict().items() if v is not None}
    result["settings"].update(steps=FLAGS.steps, warmup_steps=FLAGS.warmup_steps, repeats=FLAGS.repeats,
                              onednn=os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
                              threads={name: os.environ.get(f"TF_NUM_{name.upper()}_THREADS")
                                       for name in ("intraop", "interop")})
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    cli.run(main, COMMAND_FLAGS)
