"""Score a TSV, CSV or JSON Lines file with a classifier exported by `--export_dir`.

    python -m tf_transfer.predict --model=exported/rte --input=$GLUE_DIR/RTE/test.tsv --output=rte_predictions.tsv

Text columns default to the exported task's (e.g. sentence1/sentence2 for RTE); `--text_a_column` and
`--text_b_column` name others (a model trained on your own file expects that file's columns). `.tsv` files are read
with quoting disabled (GLUE), `.csv` with standard quoting, `.jsonl` as one JSON object per line.
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
flags.DEFINE_string("input", None, "TSV (quoting disabled, as GLUE) or CSV (standard quoting) with a header row, "
                    "or JSON Lines.")
flags.DEFINE_string("output", None, "Where to write predictions (TSV); default standard output.")
flags.DEFINE_string("text_a_column", None, "Header name of the first text (default: the exported task's).")
flags.DEFINE_string("text_b_column", None, "Header name of the second text of pair tasks (default: the task's).")
COMMAND_FLAGS = flags_lib.common(batch_size=(64, "Prediction batch size."))


def read_rows(path: str):
    from tf_transfer.core.errors import TransferError

    if not os.path.isfile(path):
        raise TransferError(f"--input {path} does not exist")
    if path.lower().endswith(".jsonl"):
        return _read_jsonl(path)
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


def _read_jsonl(path: str):
    """JSON Lines as a header (the first object's keys) and rows of those keys' values."""
    import json

    from tf_transfer.core.errors import TransferError

    objects = []
    with open(path, encoding="utf-8-sig") as f:
        for number, line in enumerate(f, start=1):
            if line.strip():
                try:
                    objects.append(json.loads(line))
                except ValueError as e:
                    raise TransferError(f"{path}:{number}: not JSON ({e})") from None
    if not objects or not isinstance(objects[0], dict):
        raise TransferError(f"{path}: needs at least one JSON object per line")
    header = list(objects[0])
    return header, [[str(o.get(k, "")) if isinstance(o, dict) else "" for k in header] for o in objects]


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
    # The training file's own columns (a user's data set), else the GLUE task's.
    trained_on = meta.get("text_columns") or (task.text_columns if task else [None, None])
    columns = [FLAGS.text_a_column or trained_on[0]]
    if meta.get("pair"):
        columns.append(FLAGS.text_b_column or trained_on[1])
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
