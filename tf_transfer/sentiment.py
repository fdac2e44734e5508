"""Hart's disaster-tweet study: sparse baselines, BERT frozen / unfrozen / top-2 over seeds, and the report.

    python -m tf_transfer.sentiment --flagfile=flags/hart_sparse.flags --data=train.csv --output_dir=runs/hart
    python -m tf_transfer.sentiment --flagfile=flags/hart_bert_top2.flags --data=train.csv --output_dir=runs/hart
    python -m tf_transfer.sentiment --approach=report --output_dir=runs/hart

Every approach rewrites `report.md` in --output_dir from all the results there. The work itself is in
`tf_transfer.studies.sentiment*` and `tf_transfer.reporting.sentiment_report`; this module only reads flags.
"""

from __future__ import annotations

from absl import flags, logging

from tf_transfer.core import cli
from tf_transfer.core import flags as flags_lib
from tf_transfer.training import locks
from tf_transfer.studies.sentiment.sentiment_settings import SentimentBertSettings

FLAGS = flags.FLAGS

COMMAND_FLAGS = {
    **flags_lib.settings_flags(SentimentBertSettings),
    **flags_lib.common(
        data=(None, "CSV or TSV file with a header row, e.g. Kaggle's 'NLP with Disaster Tweets' train.csv. Standard "
                    "CSV quoting (quoted commas, quotes and line breaks inside texts are fine)."),
        output_dir=(None, "Folder for sparse_baselines.json/.md, bert_<model>_<pooling>.json, report.md and the box "
                          "plots; the approaches accumulate in it."),
        text_column=("text", "Column holding the text to classify (Kaggle: text)."),
        label_column=("target", "Column holding the label (Kaggle: target)."),
        text_columns=([], "Extra columns appended to the text, separated by a space, e.g. keyword (may be empty per "
                          "row)."),
        overwrite=(False, "Start this approach afresh: replace sparse_baselines.* or bert_<model>_<pooling>.json and "
                          "its in-progress seed. Without it, a rerun continues where a killed run stopped (finished "
                          "folds, seeds and epochs are kept), adds missing seeds, and refuses other settings."),
    ),
}
flags_lib.follow(SentimentBertSettings, COMMAND_FLAGS)  # a method registered later brings its settings' flags

flags.DEFINE_string("approach", "sparse",
                    "sparse: TF-IDF, count and hashed features + logistic regression, k-fold cross-validation. "
                    "bert: one BERT model (--bert_mode) trained --runs times on one held-out split. "
                    "report: only rewrite report.md and the box plots from the results in --output_dir.")
flags.DEFINE_string("delimiter", None,
                    "Field separator; 'tab' for tabs. Default: tab for .tsv/.tab files, comma otherwise.")
flags.DEFINE_string("labels", None,
                    "Allowed label values in class order, comma-separated (default 0,1). Two values: binary, F1 "
                    "of the second; more: multi-class, macro F1.")
flags.DEFINE_integer("folds", 10, "Stratified cross-validation folds for the sparse baselines (the paper: 10).")

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
    from tf_transfer.studies.sentiment.sentiment_settings import APPROACHES, check_choice

    # Every value is checked before any data is read or TensorFlow imported, so a typo fails in a second.
    check_choice("approach", FLAGS.approach, APPROACHES)
    if not FLAGS.output_dir:
        raise TransferError("--output_dir is required: the folder for the results and report.md")
    settings = None
    if FLAGS.approach == "bert":
        settings = flags_lib.settings_from_flags(SentimentBertSettings, COMMAND_FLAGS)
    elif FLAGS.approach == "sparse" and FLAGS.folds < 2:
        raise TransferError(f"--folds must be at least 2, got {FLAGS.folds}")
    logging.set_verbosity(logging.INFO)
    with locks.run_folder(FLAGS.output_dir, FLAGS.distribution):  # writable and this command's alone, first
        _run(settings)


def _run(settings) -> None:
    from tf_transfer.reporting import sentiment_report

    if FLAGS.approach == "sparse":
        from tf_transfer.studies.sentiment.sentiment_sparse import run_sparse_baselines

        data = _read_data()
        results = run_sparse_baselines(data, FLAGS.output_dir, FLAGS.folds, FLAGS.seed, overwrite=FLAGS.overwrite)
        sentiment_report.write_sparse_markdown(FLAGS.output_dir, data, FLAGS.folds, FLAGS.seed)
        for name, result in results.items():
            print(f"{name}: accuracy {result['accuracy_mean']:.4f}, F1 {result['f1_mean']:.4f}")
    elif FLAGS.approach == "bert":
        from tf_transfer.studies.sentiment.sentiment_bert import run_bert

        results = run_bert(_read_data(), FLAGS.output_dir, settings, overwrite=FLAGS.overwrite)
        print(f"bert {results['model']} ({results['pooling']}), {len(results['runs'])} run(s): accuracy "
              f"{results['accuracy_mean']:.4f}, F1 {results['f1_mean']:.4f}")
    from tf_transfer.core import strategies

    if FLAGS.distribution == "multi_worker" and not strategies.chief_by_tf_config():
        print(f"report: written by the chief worker in {FLAGS.output_dir}")  # this worker wrote nothing there
        return
    print(f"report: {sentiment_report.write_report(FLAGS.output_dir)}")


if __name__ == "__main__":
    cli.run(main, COMMAND_FLAGS)
