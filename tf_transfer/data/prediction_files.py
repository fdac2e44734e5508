"""The files `python -m tf_transfer.predict` reads and writes: rows in (CSV, TSV or JSON Lines), the exported model's
columns found in them, predictions out.

Example:

>>> from tf_transfer.data import prediction_files
>>> prediction_files.output_fields({"labels": ["neg", "pos"]}, "id", 2)
(['id', 'label', 'prob_neg', 'prob_pos'], ['neg', 'pos'])
"""

from __future__ import annotations

import csv
import json
import os
import sys
from typing import Optional


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


def text_columns(header: list, meta: dict, path: str, text_a_column: Optional[str] = None,
                 text_b_column: Optional[str] = None, id_column: Optional[str] = None) -> tuple:
    """`(text positions, id column name or None, id position or None)` in `header` of the exported model's text
    columns (`text_a_column`, `text_b_column` where given) and of `id_column` (else a column named `id`, if any),
    every name checked against the header."""
    from tf_transfer.core.errors import TransferError
    from tf_transfer.data import tasks

    duplicated = sorted({c for c in header if header.count(c) > 1})
    task = tasks.TASKS.get(meta.get("task", ""))
    # The training file's own columns (a user's data set), else the GLUE task's.
    trained_on = meta.get("text_columns") or (task.text_columns if task else [None, None])
    columns = [text_a_column or trained_on[0]]
    if meta.get("pair"):
        columns.append(text_b_column or trained_on[1])
    missing = [c for c in columns if c not in header]
    if missing:
        raise TransferError(f"{path}: no column(s) {', '.join(map(str, missing))} (found: {', '.join(header)});"
                            " name them with --text_a_column/--text_b_column")
    if id_column and id_column not in header:
        raise TransferError(f"{path}: no column {id_column} for --id_column (found: {', '.join(header)})")
    id_column = id_column or ("id" if "id" in header else None)
    clashes = [c for c in duplicated if c in columns + [id_column]]
    if clashes:
        raise TransferError(f"{path}: the header names {', '.join(clashes)} more than once: rename the copies")
    return [header.index(c) for c in columns], id_column, header.index(id_column) if id_column else None


class Writer:
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


def output_fields(meta: dict, id_column, classes: int) -> tuple:
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


def write_predictions(path: Optional[str], fields: list, chosen: list, idents, predictions: list,
                      probabilities=None) -> None:
    """Writes one row per prediction to `path` (`Writer`: by its extension; standard output for None): of the
    values id, label (or score) and each probability (`probabilities`' row, a classifier's), the `chosen` positions,
    under the header `fields`."""
    writer = Writer(path, fields)
    try:
        for i, ident in enumerate(idents):
            if probabilities is None:
                cells = [ident, float(predictions[i])]
            else:
                cells = [ident, str(predictions[i])] + [float(p) for p in probabilities[i]]
            writer.write([cells[position] for position in chosen])
    finally:
        writer.close()
