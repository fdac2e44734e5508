"""Score a TSV, CSV or JSON Lines file with a classifier exported by `glue --export_dir`.

    python -m tf_transfer.predict --export_dir=exported/tweets --input=test.csv --output=submission.csv

Text columns default to the exported task's (e.g. sentence1/sentence2 for RTE, or the training file's own);
`--text_a_column` and `--text_b_column` name others. `.tsv` files are read with quoting disabled (GLUE), `.csv` with
standard quoting, `.jsonl` as one JSON object per line. Each output row is the input's id (`--id_column`, by default a
column named `id` when the input has one, else the row number from 0), then the predicted `label` and one
`prob_<label>` per label (a regression model: the predicted value, named as the trained label column). The output is
CSV, JSON Lines or TSV by `--output`'s extension (TSV on standard output); `--output_columns=id,target` keeps only
those columns, the predicted label under the trained label column's name (a Kaggle submission). `--encoding` reads
an input that is not UTF-8. `--padding=pack` lays each batch's rows end to end rather than padding them (the same
outputs up to float32 rounding, on fewer tokens; the default where the exported run trained packed). Progress (rows
done, rows per second) goes to standard error while it scores, and a final line there names the count and the
output.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time

from absl import flags

from tf_transfer.core import cli
from tf_transfer.core import flags as flags_lib

FLAGS = flags.FLAGS

flags.DEFINE_string("model", None, "Folder written by glue --export_dir (--export_dir names it too).")
flags.DEFINE_string("input", None, "TSV (quoting disabled, as GLUE) or CSV (standard quoting) with a header row, "
                    "or JSON Lines.")
flags.DEFINE_string("output", None, "Where to write predictions: .csv, .jsonl, or anything else as TSV; default "
                    "standard output (TSV).")
flags.DEFINE_string("text_a_column", None, "Header name of the first text (default: the exported task's).")
flags.DEFINE_string("text_b_column", None, "Header name of the second text of pair tasks (default: the task's).")
flags.DEFINE_string("id_column", None, "Column carried to the output as each row's id (default: a column named id "
                    "when the input has one, else the row number from 0).")
flags.DEFINE_list("output_columns", None, "Write only these columns, in this order: the id column (by its name, or "
                  "row), label (or the trained label column's name, e.g. target: the predicted label under that "
                  "name), prob_<label>. E.g. id,target for a Kaggle submission. Default: all of them.")

COMMAND_FLAGS = flags_lib.common(batch_size=(64, "Prediction batch size."),
                                 export_dir=(None, "The folder written by glue --export_dir (the same as --model)."),
                                 encoding=("utf-8", "Text encoding of --input (e.g. cp1252 or latin-1 for Windows or "
                                                    "older Western files)."),
                                 padding=(None, "bucket: score rows in groups of similar length, each padded to its "
                                                "group's; pack: lay each batch's rows end to end, each seeing only "
                                                "itself (the same outputs up to float32 rounding, fewer tokens). "
                                                "Default: pack where the exported run trained with --padding=pack, "
                                                "else bucket."))
PROGRESS_EVERY_S = 10.0  # the least seconds between two progress lines (the first comes after the first batch)


def read_rows(path: str, encoding: str = "utf-8"):
    """`(header, rows)` of a CSV, TSV or JSON Lines file in `encoding`; one `TransferError` line for a file that is
    missing, unreadable or not text in that encoding (naming its line and --encoding)."""
    from tf_transfer.core.errors import TransferError
    from tf_transfer.core.settings import known_encoding
    from tf_transfer.data import table_reader

    if not os.path.isfile(path):
        raise TransferError(f"--input {path} does not exist")
    if not known_encoding(encoding):
        raise TransferError(f"--encoding={encoding}: not a text encoding Python knows (e.g. utf-8, cp1252, latin-1)")
    try:
        if path.lower().endswith(".jsonl"):
            return _read_jsonl(path, encoding)
        csv.field_size_limit(2**31 - 1)
        options = ({"delimiter": ","} if path.lower().endswith(".csv")
                   else {"delimiter": "\t", "quoting": csv.QUOTE_NONE})
        with open(path, encoding=table_reader.text_encoding(encoding), newline="") as f:
            rows = list(csv.reader(f, **options))
    except UnicodeDecodeError as e:
        raise table_reader.undecodable(path, encoding, e) from None
    except csv.Error as e:
        raise TransferError(f"{path}: unreadable ({e})") from None
    if len(rows) < 2:
        raise TransferError(f"{path}: needs a header row and at least one data row")
    return rows[0], rows[1:]


def _read_jsonl(path: str, encoding: str):
    """JSON Lines as a header (the first object's keys) and rows of those keys' values."""
    from tf_transfer.core.errors import TransferError
    from tf_transfer.data import table_reader

    objects = []
    with open(path, encoding=table_reader.text_encoding(encoding)) as f:
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


def _columns(header: list, meta: dict, path: str) -> tuple:
    """`(text positions, id column name or None, id position or None)`, every name checked against the header."""
    from tf_transfer.core.errors import TransferError
    from tf_transfer.data import tasks

    duplicated = sorted({c for c in header if header.count(c) > 1})
    task = tasks.TASKS.get(meta.get("task", ""))
    # The training file's own columns (a user's data set), else the GLUE task's.
    trained_on = meta.get("text_columns") or (task.text_columns if task else [None, None])
    columns = [FLAGS.text_a_column or trained_on[0]]
    if meta.get("pair"):
        columns.append(FLAGS.text_b_column or trained_on[1])
    missing = [c for c in columns if c not in header]
    if missing:
        raise TransferError(f"{path}: no column(s) {', '.join(map(str, missing))} (found: {', '.join(header)});"
                            " name them with --text_a_column/--text_b_column")
    id_column = FLAGS.id_column or ("id" if "id" in header else None)
    if FLAGS.id_column and FLAGS.id_column not in header:
        raise TransferError(f"{path}: no column {FLAGS.id_column} for --id_column (found: {', '.join(header)})")
    clashes = [c for c in duplicated if c in columns + [id_column]]
    if clashes:
        raise TransferError(f"{path}: the header names {', '.join(clashes)} more than once: rename the copies")
    return [header.index(c) for c in columns], id_column, header.index(id_column) if id_column else None


class _Writer:
    """Rows out as CSV, JSON Lines (by the path's extension) or TSV (any other path, or standard output)."""

    def __init__(self, path, fields: list):
        self.path, self.fields = path, fields
        self.file = open(path, "w", newline="", encoding="utf-8") if path else sys.stdout
        self.jsonl = bool(path) and path.lower().endswith(".jsonl")
        if not self.jsonl:
            delimiter = "," if path and path.lower().endswith(".csv") else "\t"
            self.csv = csv.writer(self.file, delimiter=delimiter, lineterminator="\n")
            self.csv.writerow(fields)

    def write(self, values: list) -> None:
        if self.jsonl:
            self.file.write(json.dumps(dict(zip(self.fields, values))) + "\n")
        else:
            self.csv.writerow([f"{v:.6g}" if isinstance(v, float) else v for v in values])

    def close(self) -> None:
        if self.path:
            self.file.close()
        else:
            self.file.flush()


def _output_fields(meta: dict, id_column, classes: int) -> tuple:
    """The output's header, and the label names (None for regression)."""
    ident = id_column or "row"
    if meta.get("regression"):
        return [ident, meta.get("label_column") or "prediction"], None
    labels = [str(label) for label in (meta.get("labels") or range(classes))]
    return [ident, "label"] + [f"prob_{label}" for label in labels], labels


def selected_columns(fields: list, meta: dict, wanted) -> tuple:
    """`(header, positions in fields)` of the output columns `wanted` (every field when None): each a field's name,
    or the trained label column's name for `label` (the predicted label under the name a Kaggle submission wants).

    >>> selected_columns(["id", "label", "prob_0", "prob_1"], {"label_column": "target"}, ["id", "target"])
    (['id', 'target'], [0, 1])
    """
    from tf_transfer.core.errors import TransferError

    if not wanted:
        return list(fields), list(range(len(fields)))
    names = {name: position for position, name in enumerate(fields)}
    if meta.get("label_column") and "label" in names:
        names.setdefault(meta["label_column"], names["label"])
    unknown = [name for name in wanted if name not in names]
    if unknown:
        raise TransferError(f"--output_columns: no output column {', '.join(map(repr, unknown))} (choose from: "
                            f"{', '.join(names)})")
    return list(wanted), [names[name] for name in wanted]


class _Progress:
    """Called with the rows done after every batch: prints rows done, rate and time left on stderr after the first
    batch, then every `PROGRESS_EVERY_S` seconds."""

    def __init__(self, total: int):
        self.total, self.start, self.last = total, time.perf_counter(), None

    def __call__(self, done: int) -> None:
        now = time.perf_counter()
        if done >= self.total or (self.last is not None and now - self.last < PROGRESS_EVERY_S):
            return
        self.last = now
        rate = done / max(now - self.start, 1e-9)
        print(f"predict: {done:,}/{self.total:,} rows ({100 * done / self.total:.0f}%), {rate:,.1f} rows/s, about "
              f"{(self.total - done) / rate / 60:.1f} min left", file=sys.stderr, flush=True)


def main(argv):
    del argv
    from tf_transfer.core.errors import TransferError

    folder = FLAGS.model or FLAGS.export_dir
    if not folder or not FLAGS.input:
        raise TransferError("--export_dir (or --model: a folder written by glue --export_dir) and --input are "
                            "required")
    if FLAGS.model and FLAGS.export_dir and FLAGS.model != FLAGS.export_dir:
        raise TransferError("--model and --export_dir name the same folder: give one of them")
    from tf_transfer.models import export

    meta = export.read_meta(folder)  # the columns are checked before the model is loaded
    padding = export.check_padding(FLAGS.padding or export.trained_padding(meta))
    header, rows = read_rows(FLAGS.input, FLAGS.encoding)
    positions, id_column, id_position = _columns(header, meta, FLAGS.input)
    if meta.get("labels") or meta.get("regression"):  # the output's columns known before scoring
        selected_columns(_output_fields(meta, id_column, len(meta.get("labels") or []))[0], meta,
                         FLAGS.output_columns)
    needed = max(positions + [id_position or 0]) + 1
    for line, row in enumerate(rows, start=2):
        if len(row) < needed:
            raise TransferError(f"{FLAGS.input}:{line}: expected at least {needed} columns, found {len(row)}")
    classifier, meta = export.load(folder, meta)
    start = time.perf_counter()
    text_a = [row[positions[0]] for row in rows]
    text_b = [row[positions[1]] for row in rows] if len(positions) > 1 else None
    outputs, predictions = export.predict(classifier, meta, text_a, text_b, FLAGS.batch_size,
                                          progress=_Progress(len(rows)), padding=padding)
    fields, labels = _output_fields(meta, id_column, outputs.shape[1])
    fields, chosen = selected_columns(fields, meta, FLAGS.output_columns)
    probabilities = None if labels is None else export.probabilities(outputs)
    writer = _Writer(FLAGS.output, fields)
    try:
        for i, row in enumerate(rows):
            ident = row[id_position] if id_position is not None else i
            if labels is None:
                values = [ident, float(predictions[i])]
            else:
                values = [ident, str(predictions[i])] + [float(p) for p in probabilities[i]]
            writer.write([values[position] for position in chosen])
    finally:
        writer.close()
    print(f"predict: wrote {len(rows):,} rows ({', '.join(fields[:3])}{', ...' if len(fields) > 3 else ''}) to "
          f"{FLAGS.output or 'standard output'} in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    cli.run(main, COMMAND_FLAGS)
