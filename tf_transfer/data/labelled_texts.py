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

import csv
import dataclasses
import hashlib
import os
import sys
from typing import Optional, Sequence

import numpy as np

from tf_transfer.core.errors import TransferError

BINARY_LABELS = ("0", "1")

# Kaggle texts can be long after joining columns; the csv module's default 128 KiB field limit is not a bound on them.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


@dataclasses.dataclass
class LabelledTexts:
    """Texts with class indices; `label_names[i]` is the value written in the file for class `i`."""

    texts: list
    labels: np.ndarray
    label_names: tuple
    source: str
    sha256: str
    text_columns: tuple = ("text",)
    label_column: str = "target"

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    @property
    def is_binary(self) -> bool:
        return self.num_classes == 2

    def class_counts(self) -> dict:
        counts = np.bincount(self.labels, minlength=self.num_classes)
        return {name: int(count) for name, count in zip(self.label_names, counts)}

    def take(self, indices) -> "LabelledTexts":
        return dataclasses.replace(self, texts=[self.texts[i] for i in indices], labels=self.labels[indices])

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


def _file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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
    separator = delimiter_for(path, delimiter)
    label_names = parse_labels(labels)
    label_index = {name: i for i, name in enumerate(label_names)}
    wanted = [text_column, *extra_text_columns, label_column]
    texts, class_indices = [], []
    try:
        # utf-8-sig: files saved by spreadsheet programs often start with a byte-order mark that would glue
        # itself to the first column's name.
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows = csv.reader(f, delimiter=separator)
            header = next(rows, None)
            if header is None:
                raise TransferError(f"{path} is empty: expected a header row naming the columns")
            header = [name.strip() for name in header]
            missing = [name for name in dict.fromkeys(wanted) if name not in header]
            if missing:
                kind = "tab" if separator == "\t" else repr(separator)
                raise TransferError(
                    f"{path}: no column(s) {', '.join(repr(m) for m in missing)} in the header; found "
                    f"{', '.join(repr(h) for h in header)} ({kind}-separated; set --text_column, --label_column, "
                    "--text_columns or --delimiter)")
            positions = [header.index(name) for name in wanted]
            needed = max(positions) + 1
            for row_number, row in enumerate(rows, start=1):
                if not row:
                    continue  # a blank line, e.g. at the end of the file
                where = f"{path}: data row {row_number} (ending on line {rows.line_num})"
                if len(row) < needed:
                    raise TransferError(f"{where} has {len(row)} field(s), the header {len(header)}: is a "
                                        "text with the delimiter in it missing its quotes?")
                fields = [row[i].strip() for i in positions]
                if not fields[0]:
                    raise TransferError(f"{where}: empty text in column {text_column!r}")
                label = fields[-1]
                if label not in label_index:
                    hint = "" if labels else " (declare other label values with --labels)"
                    raise TransferError(f"{where}: label {label!r} in column {label_column!r} is not one of "
                                        f"{', '.join(label_names)}{hint}")
                texts.append(" ".join(field for field in fields[:-1] if field))
                class_indices.append(label_index[label])
    except UnicodeDecodeError as e:
        raise TransferError(f"{path}: not valid UTF-8 text ({e.reason} at byte {e.start})") from None
    except csv.Error as e:
        raise TransferError(f"{path}: unreadable {'TSV' if separator == chr(9) else 'CSV'} ({e})") from None
    if not texts:
        raise TransferError(f"{path} has a header but no data rows")
    return LabelledTexts(texts, np.asarray(class_indices, np.int64), label_names, path, _file_sha256(path),
                         (text_column, *extra_text_columns), label_column)


def check_rows_per_class(data: LabelledTexts, minimum: int, why: str) -> None:
    """Raises `TransferError` naming the first class with fewer than `minimum` rows."""
    for name, count in data.class_counts().items():
        if count < minimum:
            raise TransferError(f"{data.source} has {count} row(s) with label {name!r}, fewer than {minimum}: {why}")
