"""Labelled texts from a CSV or TSV file with a header row: a text column (plus optional extra ones) and a label.

The defaults fit Kaggle's "Natural Language Processing with Disaster Tweets" `train.csv`
(`id,keyword,location,text,target`). Every problem in a file is one `TransferError` naming the row.

Example:

>>> from tf_transfer.data.labelled_texts import parse_labels, read_labelled_texts
>>> parse_labels("neg,neu,pos")
('neg', 'neu', 'pos')
>>> data = read_labelled_texts("train.csv", extra_text_columns=["keyword"])  # doctest: +SKIP
>>> data.class_counts()  # doctest: +SKIP
{'0': 4342, '1': 3271}
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

import numpy as np

from tf_transfer.core.errors import TransferError
from tf_transfer.data import table_reader
from tf_transfer.data.examples import Examples, file_sha256

BINARY_LABELS = ("0", "1")


@dataclasses.dataclass
class LabelledTexts(Examples):
    """`Examples` of one text each (`texts`) with class indices, and what identifies the file they were read from."""

    sha256: str = ""
    text_columns: tuple = ("text",)
    label_column: str = "target"

    @property
    def texts(self) -> list:
        return self.text_a

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    @property
    def is_binary(self) -> bool:
        return self.num_classes == 2

    def class_counts(self) -> dict:
        counts = np.bincount(self.labels, minlength=self.num_classes)
        return {name: int(count) for name, count in zip(self.label_names, counts)}

    def identity(self) -> dict:
        """What makes two readings of a file the same data: its bytes, the columns read, the labels declared."""
        return {"data_sha256": self.sha256, "text_columns": list(self.text_columns),
                "label_column": self.label_column, "labels": list(self.label_names)}


def delimiter_for(path: str, delimiter: Optional[str] = None) -> str:
    """`delimiter` if given (`tab` or a backslash-t mean a tab), else tab for .tsv/.tab files and comma otherwise."""
    if delimiter:
        named = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";"}
        value = named.get(delimiter.lower(), delimiter)
        if len(value) != 1:
            raise TransferError(f"--delimiter must be one character (or 'tab'), got {delimiter!r}")
        return value
    return "\t" if path.lower().endswith((".tsv", ".tab")) else ","


def parse_labels(labels) -> tuple:
    """`"neg,pos"` or a sequence -> the declared label values, in class-index order (default `0,1`)."""
    if labels is None or labels == "" or labels == []:
        return BINARY_LABELS
    values = [v.strip() for v in (labels.split(",") if isinstance(labels, str) else labels)]
    if len(values) < 2 or any(not v for v in values) or len(set(values)) != len(values):
        raise TransferError(f"--labels must list at least two distinct, non-empty values separated by commas, "
                            f"got {labels!r}")
    return tuple(values)


def read_labelled_texts(path: str, text_column: str = "text", label_column: str = "target",
                        extra_text_columns: Sequence[str] = (), labels=None,
                        delimiter: Optional[str] = None) -> LabelledTexts:
    """Reads a CSV/TSV with a header row, a text column and a label column (defaults fit Kaggle's `train.csv`).

    Fields are read with standard CSV quoting, so quoted commas, quotes and line breaks inside texts survive.
    `extra_text_columns` (e.g. `keyword`) are appended to the text, separated by a space; they may be empty (Kaggle
    leaves `keyword` and `location` blank for some tweets), the text column may not. `labels` declares the allowed
    label values in class order (default `0,1`); class 1 is the positive class of binary F1.

    Raises:
      TransferError: missing file, missing columns, a short row, an empty text, an undeclared label, no rows.
    """
    if not os.path.isfile(path):
        raise TransferError(f"data file {path} does not exist: pass --data=<CSV or TSV with a header row>")
    dialect = table_reader.Dialect(delimiter_for(path, delimiter), quoted=True)
    label_names = parse_labels(labels)
    label_index = {name: i for i, name in enumerate(label_names)}

    def columns(header):
        wanted = [text_column, *extra_text_columns, label_column]
        kind = "tab" if dialect.delimiter == "\t" else repr(dialect.delimiter)
        found = table_reader.positions(path, header, wanted, "no column(s) {missing} in the header; found {found} "
                                 f"({kind}-separated; set --text_column, --label_column, --text_columns or "
                                 "--delimiter)")
        needed = max(found) + 1

        def convert(row):
            # Quoted texts can span lines: name the data row, and the line it ends on.
            where = f"{path}: data row {row.number} (ending on line {row.line})"
            if len(row.fields) < needed:
                raise TransferError(f"{where} has {len(row.fields)} field(s), the header {len(header)}: is a text "
                                    "with the delimiter in it missing its quotes?")
            fields = [row.fields[i].strip() for i in found]
            if not fields[0]:
                raise TransferError(f"{where}: empty text in column {text_column!r}")
            if fields[-1] not in label_index:
                hint = "" if labels else " (declare other label values with --labels)"
                raise TransferError(f"{where}: label {fields[-1]!r} in column {label_column!r} is not one of "
                                    f"{', '.join(label_names)}{hint}")
            return (" ".join(field for field in fields[:-1] if field),), label_index[fields[-1]]

        return convert

    rows = table_reader.read_rows(path, columns, dialect)
    return LabelledTexts.from_records(rows.records, np.int64, source=path, label_names=label_names,
                                      sha256=file_sha256(path), text_columns=(text_column, *extra_text_columns),
                                      label_column=label_column)


def check_rows_per_class(data: LabelledTexts, minimum: int, why: str) -> None:
    """Raises `TransferError` naming the first class with fewer than `minimum` rows."""
    for name, count in data.class_counts().items():
        if count < minimum:
            raise TransferError(f"{data.source} has {count} row(s) with label {name!r}, fewer than {minimum}: {why}")
