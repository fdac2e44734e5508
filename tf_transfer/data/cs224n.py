"""The three tasks of the CS224N multi-task minBERT project, read from the course's files or from GLUE.

Tasks (names as in `--task_order`):
  * `sst`: sentiment of one sentence. CS224N `ids-sst-{train,dev}.csv`: SST-5, labels 0..4 (`sentiment` column).
    GLUE layout: SST-2 (2 classes) stands in.
  * `para`: paraphrase detection of a question pair. CS224N `quora-{train,dev}.csv` (`is_duplicate` written
    `0.0`/`1.0`); GLUE layout: QQP.
  * `sts`: similarity of a sentence pair, a number in 0..5. CS224N `sts-{train,dev}.csv` (`similarity`); GLUE: STS-B.

The CS224N files are tab-separated despite `.csv`, start with a header row whose first column is an unnamed pandas
index, and are read with quoting disabled (Quora questions hold lone quote characters that a quoting reader would
merge with the rows after them; the quote characters stay in the text). Rows whose `is_duplicate` is empty (two in
the distributed `quora-dev.csv`) are skipped, counted, and logged once per file; any other malformed row raises
`TransferError` naming the file and line (or is skipped and counted with `skip_bad_rows`).

The distributed data lacks `quora-train.csv` (see the data folder's PROVENANCE.md). Without it, `quora-dev.csv` is
split into train and dev with `split_seed` (a share `quora_dev_fraction` becomes dev), and the log says so.
`split_seed` is separate from the training seed so that runs with different seeds score the same dev pairs.

Example (from the repository root; it needs the CS224N minBERT data, at ../shared/data on the project's machines, so
the suite skips it: a clone elsewhere has no such folder):

>>> from tf_transfer.data import cs224n
>>> data = cs224n.load("../shared/data/cs224n_minbert")  # doctest: +SKIP
>>> {name: (len(task.train), len(task.dev)) for name, task in data.tasks.items()}  # doctest: +SKIP
{'sst': (8544, 1101), 'para': (16170, 4042), 'sts': (6040, 863)}
>>> data.num_sentiment_classes, data.skipped_rows["quora-dev.csv"]  # doctest: +SKIP
(5, 2)
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Callable, Optional

import numpy as np
from absl import logging

from tf_transfer.core.errors import TransferError
from tf_transfer.data import table_reader, tasks
from tf_transfer.data.examples import Examples, train_validation_split

TASK_NAMES = ("sst", "para", "sts")
DATA_FORMATS = ("cs224n", "glue")


def _sentiment(value: str) -> int:
    label = int(value)  # "3.0" is not a class of SST-5; a ValueError is reported with file and line
    if not 0 <= label <= 4:
        raise ValueError(value)
    return label


def _is_duplicate(value: str) -> int:
    number = float(value)
    if number not in (0.0, 1.0):
        raise ValueError(value)
    return int(number)


def _similarity(value: str) -> float:
    number = float(value)
    if not (math.isfinite(number) and 0.0 <= number <= 5.0):
        raise ValueError(value)
    return number


@dataclasses.dataclass(frozen=True)
class FileLayout:
    """Columns of one CS224N task's files and how its label is written.

    Attributes:
      train_file, dev_file: file names in the data folder.
      text_columns: header names of the one or two text columns.
      label_column: header name of the label column.
      parse_label: turns the label field into a number; raises ValueError for anything else.
      expected_label: what `parse_label` accepts, for error messages.
      dtype: NumPy dtype of the labels.
      empty_label_skipped: rows with an empty label are a known quirk of the distributed data: skip and count them.
    """

    train_file: str
    dev_file: str
    text_columns: tuple
    label_column: str
    parse_label: Callable[[str], float]
    expected_label: str
    dtype: type
    empty_label_skipped: bool = False


CS224N_LAYOUTS = {
    "sst": FileLayout("ids-sst-train.csv", "ids-sst-dev.csv", ("sentence",), "sentiment", _sentiment,
                      "a whole number 0..4", np.int64),
    "para": FileLayout("quora-train.csv", "quora-dev.csv", ("sentence1", "sentence2"), "is_duplicate",
                       _is_duplicate, "0.0 or 1.0", np.int64, empty_label_skipped=True),
    "sts": FileLayout("sts-train.csv", "sts-dev.csv", ("sentence1", "sentence2"), "similarity", _similarity,
                      "a number 0..5", np.float32),
}

# The GLUE task standing in for each multitask task (tf_transfer.tasks names).
GLUE_TASKS = {"sst": "sst2", "para": "qqp", "sts": "stsb"}


@dataclasses.dataclass
class TaskData:
    train: Examples
    dev: Examples


@dataclasses.dataclass
class MultitaskData:
    """Train and dev examples of each task, in `TASK_NAMES` order.

    Attributes:
      tasks: `{"sst"|"para"|"sts": TaskData}`.
      num_sentiment_classes: 5 (SST-5) or 2 (GLUE SST-2).
      skipped_rows: `{file name: rows skipped}` for every file read.
      notes: what a reader of the results should know about the data (e.g. that Quora dev was split).
    """

    tasks: dict
    num_sentiment_classes: int
    skipped_rows: dict
    notes: list


def read_cs224n_file(path: str, layout: FileLayout, skip_bad_rows: bool = False) -> Examples:
    """Reads one CS224N file of `layout`; returns `Examples` with the skipped rows counted.

    Raises:
      TransferError: missing file, missing header columns, or a malformed row (unless `skip_bad_rows`), naming the
        file and line.
    """
    if not os.path.isfile(path):
        raise TransferError(
            f"missing data file {path}: --data_dir must be a CS224N minBERT data folder (ids-sst-train.csv, "
            "quora-dev.csv, sts-train.csv, ...), or pass --data_format=glue for a GLUE folder")

    def columns(header):
        wanted = [*layout.text_columns, layout.label_column]
        found = table_reader.positions(path, header, wanted,
                                 "header lacks column(s) {missing} (found: {found}); is this the right file?")

        def convert(row):
            if len(row.fields) != len(header):
                raise table_reader.BadRow(f"expected {len(header)} tab-separated columns as in the header, "
                                    f"found {len(row.fields)}")
            label = row.fields[found[-1]].strip()
            if not label and layout.empty_label_skipped:
                raise table_reader.SkipRow()
            texts = tuple(row.fields[p].strip() for p in found[:-1])
            if not all(texts):
                raise table_reader.BadRow("empty text")
            try:
                return texts, layout.parse_label(label)
            except ValueError:
                raise table_reader.BadRow(f"{layout.label_column} {row.fields[found[-1]]!r} is not "
                                    f"{layout.expected_label}") from None

        return convert

    # Tab-separated despite .csv, quoting off as for GLUE: Quora's lone quote characters stay text.
    rows = table_reader.read_rows(path, columns, table_reader.TSV, skip_bad_rows=skip_bad_rows)
    if rows.skipped_lines:
        lines = rows.skipped_lines
        shown = ", ".join(map(str, lines[:10])) + (", ..." if len(lines) > 10 else "")
        logging.warning("%s: skipped %d row(s) with an empty %s (line %s)", path, len(lines), layout.label_column,
                        shown)
    if rows.bad_rows:
        logging.warning("%s: skipped %d malformed row(s) (--skip_bad_rows)", path, rows.bad_rows)
    return Examples.from_records(rows.records, layout.dtype, source=path, skipped_rows=rows.skipped)


def load_cs224n(data_dir: str, quora_dev_fraction: float = 0.2, split_seed: int = 0,
                skip_bad_rows: bool = False) -> MultitaskData:
    """Reads the three tasks from a CS224N minBERT data folder; splits `quora-dev.csv` when Quora train is absent."""
    if not os.path.isdir(data_dir):
        raise TransferError(f"data folder {data_dir} does not exist: point --data_dir at the CS224N minBERT data")
    loaded, skipped, notes = {}, {}, []
    for name in TASK_NAMES:
        layout = CS224N_LAYOUTS[name]
        train_path = os.path.join(data_dir, layout.train_file)
        dev_path = os.path.join(data_dir, layout.dev_file)
        if name == "para" and not os.path.exists(train_path) and os.path.isfile(dev_path):
            pairs = read_cs224n_file(dev_path, layout, skip_bad_rows)
            skipped[layout.dev_file] = pairs.skipped_rows
            train, dev = train_validation_split(pairs, quora_dev_fraction, split_seed)
            note = (f"no {layout.train_file} in {data_dir}: split {layout.dev_file} ({len(pairs)} usable pairs) "
                    f"into train ({len(train)}) and dev ({len(dev)}), dev share {quora_dev_fraction:g}, "
                    f"--split_seed={split_seed}")
            logging.info("%s", note)
            notes.append(note)
        else:
            train = read_cs224n_file(train_path, layout, skip_bad_rows)
            dev = read_cs224n_file(dev_path, layout, skip_bad_rows)
            skipped[layout.train_file], skipped[layout.dev_file] = train.skipped_rows, dev.skipped_rows
        loaded[name] = TaskData(train, dev)
    return MultitaskData(loaded, 5, skipped, notes)


def load_glue(data_dir: str, skip_bad_rows: bool = False) -> MultitaskData:
    """Reads SST-2, QQP and STS-B train and dev from a GLUE folder as the three tasks."""
    loaded, skipped = {}, {}
    for name in TASK_NAMES:
        task = tasks.get_task(GLUE_TASKS[name])
        train = tasks.read_glue_split(task, data_dir, "train", skip_bad_rows)
        dev = tasks.read_glue_split(task, data_dir, "dev", skip_bad_rows)
        skipped[f"{task.folder}/train"], skipped[f"{task.folder}/dev"] = train.skipped_rows, dev.skipped_rows
        loaded[name] = TaskData(train, dev)
    notes = ["GLUE layout: SST-2 (2 classes) is the sentiment task, QQP the paraphrase task, STS-B the similarity task"]
    return MultitaskData(loaded, 2, skipped, notes)


def load(data_dir: str, data_format: str = "cs224n", quora_dev_fraction: float = 0.2, split_seed: int = 0,
         skip_bad_rows: bool = False) -> MultitaskData:
    """Reads the three tasks from `data_dir` in `data_format` ("cs224n" or "glue")."""
    if data_format == "cs224n":
        return load_cs224n(data_dir, quora_dev_fraction, split_seed, skip_bad_rows)
    if data_format == "glue":
        return load_glue(data_dir, skip_bad_rows)
    raise TransferError(f"--data_format must be one of {', '.join(DATA_FORMATS)}, got {data_format!r}")


def cap(examples: Examples, max_examples: Optional[int]) -> Examples:
    """The first `max_examples` examples (all when None), as the core trainer's --max_train_examples."""
    if max_examples is None or max_examples >= len(examples):
        return examples
    return examples.take(range(max_examples))
