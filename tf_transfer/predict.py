"""Score a TSV or CSV file with a classifier exported by `--export_dir`.

    python -m tf_transfer.predict --model=exported/rte --input=$GLUE_DIR/RTE/test.tsv --output=rte_predictions.tsv

Text columns default to the exported task's (e.g. sentence1/sentence2 for RTE); `--text_a_column` and
`--text_b_column` name others. `.tsv` files are read with quoting disabled (GLUE), `.csv` with standard quoting.
The output is a TSV of the input's row number, the prediction (label or score) and the raw outputs.
"""

from __future__ import annotations

import csv
import os
import sys

from absl import flags

from tf_transfer.core import cli
from tf_transfer.core import flags as flags_lib

FLAGS = flags.FLAGS

flags.DEFINE_string("model", None, "Folder written by --export_dir.")
flags.DEFINE_string("input", None, "TSV (quoting disabled, as GLUE) or CSV (standard quoting) with a header row.")
flags.DEFINE_string("output", None, "Where to write predictions (TSV); default standard output.")
flags.DEFINE_string("text_a_column", None, "Header name of the first text (default: the exported task's).")
flags.DEFINE_string("text_b_column", None, "Header name of the second text of pair tasks (default: the task's).")
COMMAND_FLAGS = flags_lib.common(batch_size=(64, "Prediction batch size."))


def read_rows(path: str):
    from tf_transfer.core.errors import TransferError

    if not os.path.isfile(path):
        raise TransferError(f"--input {path} does not exist")
    csv.field_size_limit(2**31 - 1)
    options = ({"delimiter": ","} if path.lower().endswith(".csv")
               else {"delimiter": "\t", "quoting": csv.QUOTE_NONE})
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows = list(csv.reader(f, **options))
    except (UnicodeDecodeError, csv.Error) as e:
        raise TransferError(f"{path}: unreadable ({e})") from None
    if len(rows) < 2:
        raise TransferError(f"{path}: needs a header row and at least one data row")
    return rows[0], rows[1:]


def main(argv):
    del argv
    from tf_transfer.data import tasks
    from tf_transfer.core.errors import TransferError

    if not FLAGS.model or not FLAGS.input:
        raise TransferError("--model (an --export_dir folder) and --input are required")
    header, rows = read_rows(FLAGS.input)
    from tf_transfer.models import export

    classifier, meta = export.load(FLAGS.model)
    task = tasks.TASKS.get(meta.get("task", ""))
    columns = [FLAGS.text_a_column or (task.text_columns[0] if task else None)]
    if meta.get("pair"):
        columns.append(FLAGS.text_b_column or (task.text_columns[1] if task else None))
    missing = [c for c in columns if c not in header]
    if missing:
        raise TransferError(f"{FLAGS.input}: no column(s) {', '.join(map(str, missing))} (found: {', '.join(header)});"
                            " name them with --text_a_column/--text_b_column")
    positions = [header.index(c) for c in columns]
    for line, row in enumerate(rows, start=2):
        if len(row) <= max(positions):
            raise TransferError(f"{FLAGS.input}:{line}: expected at least {max(positions) + 1} columns, found {len(row)}")
    text_a = [row[positions[0]] for row in rows]
    text_b = [row[positions[1]] for row in rows] if len(positions) > 1 else None
    outputs, predictions = export.predict(classifier, meta, text_a, text_b, FLAGS.batch_size)
    out = open(FLAGS.output, "w", newline="") if FLAGS.output else sys.stdout
    try:
        writer = csv.writer(out, delimiter="\t", lineterminator="\n")
        writer.writerow(["row", "prediction"] + [f"output_{i}" for i in range(outputs.shape[1])])
        for i, (prediction, values) in enumerate(zip(predictions, outputs)):
            writer.writerow([i, prediction] + [f"{v:.6g}" for v in values])
    finally:
        if FLAGS.output:
            out.close()


if __name__ == "__main__":
    cli.run(main, COMMAND_FLAGS)
