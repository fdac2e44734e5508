"""The one reader of CSV and TSV files: opening, dialect, header, numbered rows, bad rows and read errors.

Every tabular format (GLUE in `tasks`, CS224N in `cs224n`, stack's texts and pairs in `stack_data`, labelled texts in
`labelled_texts`) reads through `read_rows`; its own module only says which columns it needs and how a row becomes
a record (`convert`). A converter raises `BadRow` for a malformed row and `SkipRow` for a known quirk of a data set
(skipped and counted always); anything about the file itself is one `TransferError` line naming it.

Example:

>>> import os, tempfile
>>> from tf_transfer.data import table_reader
>>> path = os.path.join(tempfile.mkdtemp(), "train.tsv")
>>> _ = open(path, "w").write('sentence\\tlabel\\nhe said " yes\\t1\\nno label\\t\\n')
>>> def columns(header):
...     text, label = table_reader.positions("train.tsv", header, ["sentence", "label"], "lacks {missing}")
...     def convert(row):
...         if not row.fields[label]:
...             raise table_reader.SkipRow()
...         return row.fields[text], row.fields[label]
...     return convert
>>> rows = table_reader.read_rows(path, columns, table_reader.TSV)
>>> rows.records, rows.skipped_lines
([('he said " yes', '1')], [3])
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import re
import sys
from typing import Callable, Optional, Sequence

from tf_transfer.core.errors import TransferError

# Texts can be long (QNLI paragraphs, joined Kaggle columns); the csv module's 128 KiB default is no bound on them.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))

SKIP_HINT = " (or pass --skip_bad_rows to skip such rows)"


@dataclasses.dataclass(frozen=True)
class Dialect:
    """How fields are written: the delimiter, and whether quote characters quote (`quoted`) or are text."""

    delimiter: str
    quoted: bool

    @property
    def kind(self) -> str:
        return "TSV" if self.delimiter == "\t" else "CSV"


# GLUE requires quoting off for its TSVs (and CS224N's tab-separated .csv files follow it): QQP, MNLI, QNLI and Quora
# hold lone quote characters that a quoting reader would merge with the tabs and lines after them.
TSV = Dialect("\t", quoted=False)
CSV = Dialect(",", quoted=True)  # Kaggle-style: standard quoting keeps commas, quotes and line breaks inside texts


def sniff(header_line: str) -> Dialect:
    """A header line with a tab is a GLUE-style TSV (quoting off), any other a comma-separated CSV."""
    return TSV if "\t" in header_line else CSV


@dataclasses.dataclass(frozen=True)
class Row:
    """One non-blank data row: `number` counts data rows from 1 (blank ones too), `line` is the line it ends on."""

    path: str
    number: int
    line: int
    fields: list

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


class BadRow(Exception):
    """A converter's verdict on a malformed row; the message is the problem (`expected 4 columns, found 2`)."""


class SkipRow(Exception):
    """A converter's verdict on a row a data set is known to carry (an empty label): skip and count it."""


@dataclasses.dataclass
class Rows:
    """What `read_rows` returns: the converted records in file order and the rows left out."""

    records: list
    skipped_lines: list  # lines of the rows a converter skipped (`SkipRow`)
    bad_rows: int  # malformed rows skipped with skip_bad_rows

    @property
    def skipped(self) -> int:
        return len(self.skipped_lines) + self.bad_rows


def positions(path: str, header: Sequence[str], names: Sequence[str], problem: str) -> list:
    """The header positions of `names`, or `TransferError` `path:1: <problem>` with `{missing}` and `{found}` filled."""
    missing = [name for name in dict.fromkeys(names) if name not in header]
    if missing:
        listed = {"missing": missing, "found": header}
        # One pass, not str.format: a brace in a header name or a delimiter is text.
        message = re.sub(r"\{(missing|found)\}", lambda m: ", ".join(map(repr, listed[m.group(1)])), problem)
        raise TransferError(f"{path}:1: {message}")
    twice = {name: [i + 1 for i, found in enumerate(header) if found == name] for name in dict.fromkeys(names)}
    twice = {name: columns for name, columns in twice.items() if len(columns) > 1}
    if twice:  # reading the first of them would be a silent guess
        named = "; ".join(f"{name!r} in columns {', '.join(map(str, columns))}" for name, columns in twice.items())
        raise TransferError(f"{path}:1: the header names a column more than once ({named}): rename the copies so "
                            "that one column has the name")
    return [header.index(name) for name in names]


def _is_blank(fields: list) -> bool:
    # A line with nothing on it, or a quoted CSV's `""`: neither is a row of anything.
    return not fields or fields == [""]


def text_encoding(encoding: Optional[str]) -> str:
    """The codec a file is opened with: UTF-8 (and None) as `utf-8-sig`, which drops a byte-order mark (MRPC's
    header, files saved by spreadsheets); any other as given.

    >>> text_encoding(None), text_encoding("UTF8"), text_encoding("cp1252")
    ('utf-8-sig', 'utf-8-sig', 'cp1252')
    """
    if encoding is None or codecs.lookup(encoding).name == "utf-8":
        return "utf-8-sig"
    return encoding


def undecodable(path: str, encoding: Optional[str], error: UnicodeDecodeError) -> TransferError:
    """The one line for a file that is not text in its encoding: the line it fails on (found again, line by line:
    a line ending is one byte in every encoding a user's file comes in) and the byte; where the reader has an
    `--encoding` flag (`encoding` given), the hint to name the file's own."""
    codec = text_encoding(encoding)
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            try:
                line.decode(codec)
            except UnicodeDecodeError as e:
                where, bad = f"{path}:{number}", f"byte 0x{line[e.start]:02x}"
                break
        else:
            where, bad = path, f"at byte {error.start}"
    name = "UTF-8" if codec == "utf-8-sig" else encoding
    hint = (": give the file's encoding with --encoding (e.g. --encoding=cp1252 or latin-1 for Windows or older "
            "Western files), or save it as UTF-8" if encoding is not None else "")
    return TransferError(f"{where}: not valid {name} text ({error.reason}, {bad}){hint}")


def read_rows(path: str, columns: Callable[[list], Callable[[Row], object]], dialect: Optional[Dialect] = None,
              column_names: Optional[Sequence[str]] = None, skip_bad_rows: Optional[bool] = None,
              encoding: Optional[str] = None) -> Rows:
    """Reads `path` (UTF-8 with an optional byte-order mark, or `encoding`) and converts every non-blank row.

    `columns(header)` checks the header and returns the row converter. `dialect` None: `sniff` the header line.
    `column_names` stand in for the header of a file without one (CoLA). A `BadRow` from the converter is skipped and
    counted when `skip_bad_rows`, else one `TransferError` `path:line: problem`, with a hint to pass --skip_bad_rows
    when the reader has that option (`skip_bad_rows` not None). No records at all is an error; so is a file that is
    not text in its encoding (`undecodable`: its line, and the hint to pass --encoding where `encoding` is given, the
    reader then having that flag).
    """
    try:
        # newline="" lets the csv module see line breaks inside quoted fields, and counts a lone carriage return as a
        # line end.
        with open(path, encoding=text_encoding(encoding), newline="") as f:
            if dialect is None:
                dialect = sniff(f.readline())
                f.seek(0)
            reader = csv.reader(f, delimiter=dialect.delimiter,
                                quoting=csv.QUOTE_MINIMAL if dialect.quoted else csv.QUOTE_NONE)
            header = list(column_names) if column_names is not None else _header(path, reader)
            convert = columns(header)
            rows = Rows([], [], 0)
            for number, fields in enumerate(reader, start=1):
                if _is_blank(fields):
                    continue  # e.g. the blank line at the end of a file
                row = Row(path, number, reader.line_num, fields)
                try:
                    rows.records.append(convert(row))
                except SkipRow:
                    rows.skipped_lines.append(row.line)
                except BadRow as bad:
                    if not skip_bad_rows:
                        raise TransferError(f"{row.where}: {bad}{SKIP_HINT if skip_bad_rows is False else ''}")
                    rows.bad_rows += 1
    except UnicodeDecodeError as e:
        raise undecodable(path, encoding, e) from None
    except csv.Error as e:
        raise TransferError(f"{path}: unreadable {dialect.kind} ({e})") from None
    if not rows.records:
        raise TransferError(f"{path}: no usable rows ({rows.skipped} skipped)" if rows.skipped
                            else f"{path}: no data rows")
    return rows


def _header(path: str, reader) -> list:
    header = next(reader, None)
    if header is None:
        raise TransferError(f"{path}: the file is empty; expected a header row")
    if not any(name.strip() for name in header):
        raise TransferError(f"{path}:1: the first line is blank; expected a header row")
    return [name.strip() for name in header]  # `text ` from a spreadsheet is the column `text`
