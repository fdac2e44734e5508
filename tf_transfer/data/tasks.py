"""The GLUE tasks, described once, and the readers that turn their files into examples.

Every task is one row of `TASKS`: where its files are, which columns hold the texts and the label, the label
values in TensorFlow Datasets' index order, and its metrics (the first is the primary metric the paper reports).
Readers return plain Python/NumPy `Examples` or raise `TransferError`; they never touch TensorFlow. The files are
read by `table_reader` as TSV with quoting off, as GLUE requires; CoLA's have no header row, MRPC's a byte-order mark.

Example:

>>> from tf_transfer.data import tasks
>>> task = tasks.get_task("rte")
>>> examples = tasks.read_glue_split(task, "../shared/data/glue", "train")  # doctest: +SKIP
>>> from tf_transfer.data.examples import train_validation_split
>>> train, validation = train_validation_split(examples, fraction=0.1, seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

import numpy as np

from tf_transfer.core.errors import TransferError
from tf_transfer.data import table_reader
from tf_transfer.data.examples import Examples


@dataclasses.dataclass(frozen=True)
class Task:
    """One GLUE task: files, columns, labels and metrics.

    Attributes:
      name: the `--task` value.
      folder: the task's folder under a GLUE directory (`$GLUE_DIR/<folder>/train.tsv`).
      test_files: the GLUE dev files used as test sets, by the name under which they are reported.
      text_columns: header names of the one or two text columns.
      label_column: header name of the label column.
      column_names: names for a file without header row (CoLA); `None` when the file has a header.
      labels: label values as written in the TSV, in TensorFlow Datasets' index order; `None` for regression.
      metrics: metrics to compute; the first is the primary metric (the one the paper reports).
      tfds_text_fields: the same texts' feature names in TFDS `glue/<name>`.
      tfds_test_splits: TFDS split names for `test_files`, in the same order.
    """

    name: str
    folder: str
    test_files: dict
    text_columns: tuple
    label_column: str
    labels: Optional[tuple]
    metrics: tuple
    tfds_text_fields: tuple
    tfds_test_splits: tuple
    column_names: Optional[tuple] = None
    train_file: str = "train.tsv"

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        return 1 if self.labels is None else len(self.labels)

    @property
    def primary_metric(self) -> str:
        return self.metrics[0]

    @property
    def is_pair(self) -> bool:
        return len(self.text_columns) == 2


_BINARY = ("0", "1")
_NLI2 = ("entailment", "not_entailment")

TASKS = {
    t.name: t
    for t in [
        Task("cola", "CoLA", {"dev": "dev.tsv"}, ("sentence",), "label", _BINARY, ("mcc", "accuracy"),
             ("sentence",), ("validation",), column_names=("source", "label", "original_label", "sentence")),
        Task("sst2", "SST-2", {"dev": "dev.tsv"}, ("sentence",), "label", _BINARY, ("accuracy",),
             ("sentence",), ("validation",)),
        Task("mrpc", "MRPC", {"dev": "dev.tsv"}, ("#1 String", "#2 String"), "Quality", _BINARY, ("f1", "accuracy"),
             ("sentence1", "sentence2"), ("validation",)),
        Task("stsb", "STS-B", {"dev": "dev.tsv"}, ("sentence1", "sentence2"), "score", None, ("spearman", "pearson"),
             ("sentence1", "sentence2"), ("validation",)),
        Task("qqp", "QQP", {"dev": "dev.tsv"}, ("question1", "question2"), "is_duplicate", _BINARY, ("f1", "accuracy"),
             ("question1", "question2"), ("validation",)),
        Task("mnli", "MNLI", {"dev_matched": "dev_matched.tsv", "dev_mismatched": "dev_mismatched.tsv"},
             ("sentence1", "sentence2"), "gold_label", ("entailment", "neutral", "contradiction"), ("accuracy",),
             ("premise", "hypothesis"), ("validation_matched", "validation_mismatched")),
        Task("qnli", "QNLI", {"dev": "dev.tsv"}, ("question", "sentence"), "label", _NLI2, ("accuracy",),
             ("question", "sentence"), ("validation",)),
        Task("rte", "RTE", {"dev": "dev.tsv"}, ("sentence1", "sentence2"), "label", _NLI2, ("accuracy",),
             ("sentence1", "sentence2"), ("validation",)),
        Task("wnli", "WNLI", {"dev": "dev.tsv"}, ("sentence1", "sentence2"), "label", _BINARY, ("accuracy",),
             ("sentence1", "sentence2"), ("validation",)),
    ]
}


def get_task(name: str) -> Task:
    """Returns the task called `name`, or raises `TransferError` naming the known ones."""
    try:
        return TASKS[name.lower()]
    except KeyError:
        raise TransferError(f"unknown task {name!r}: choose one of {', '.join(TASKS)}") from None


def _parse_label(task: Task, value: str):
    value = value.strip()
    if task.is_regression:
        number = float(value)  # ValueError is reported by the caller with file and line
        if not np.isfinite(number):
            raise ValueError(value)
        return number
    return task.labels.index(value)  # ValueError likewise


def read_tsv(task: Task, path: str, skip_bad_rows: bool = False) -> Examples:
    """Reads one GLUE TSV file of `task` (train or dev layout).

    A row with too few columns, an empty text or an unknown label raises `TransferError` naming the file and line,
    unless `skip_bad_rows`, which skips and counts it (`Examples.skipped_rows`).
    """
    if not os.path.isfile(path):
        raise TransferError(
            f"missing data file {path}: --data_dir must be a GLUE folder in the original TSV layout "
            f"(it needs {task.folder}/{os.path.basename(path)})"
        )

    def columns(header):
        wanted = [*task.text_columns, task.label_column]
        found = table_reader.positions(path, header, wanted,
                                 f"header lacks column(s) {{missing}} needed by task {task.name} (found: {{found}})")
        needed = max(found) + 1

        def convert(row):
            if len(row.fields) < needed:
                raise table_reader.BadRow(f"expected at least {needed} tab-separated columns, found {len(row.fields)}")
            texts = tuple(row.fields[p] for p in found[:-1])
            if any(not t.strip() for t in texts):
                raise table_reader.BadRow("empty text")
            try:
                return texts, _parse_label(task, row.fields[found[-1]])
            except ValueError:
                expected = "a number" if task.is_regression else "one of " + ", ".join(task.labels)
                raise table_reader.BadRow(f"label {row.fields[found[-1]]!r} is not {expected}") from None

        return convert

    rows = table_reader.read_rows(path, columns, table_reader.TSV, task.column_names, skip_bad_rows)
    return Examples.from_records(rows.records, np.float32 if task.is_regression else np.int64, source=path,
                                 skipped_rows=rows.skipped, label_names=task.labels)


def check_data_dir(data_dir: str) -> None:
    """Raises the one-line error for a GLUE folder that is not there."""
    if not os.path.isdir(data_dir):
        raise TransferError(f"data folder {data_dir} does not exist: point --data_dir (or $GLUE_DIR) at a GLUE folder")


def read_glue_split(task: Task, data_dir: str, split: str, skip_bad_rows: bool = False) -> Examples:
    """Reads `split` ("train" or a key of `task.test_files`) from a GLUE folder in the original layout."""
    folder = os.path.join(data_dir, task.folder)
    check_data_dir(data_dir)
    if not os.path.isdir(folder):
        raise TransferError(f"{data_dir} has no {task.folder}/ folder for task {task.name}")
    file_name = task.train_file if split == "train" else task.test_files[split]
    return read_tsv(task, os.path.join(folder, file_name), skip_bad_rows)


def read_tfds_split(task: Task, split: str, data_dir: Optional[str] = None) -> Examples:
    """Reads `split` ("train" or a key of `task.test_files`) from TensorFlow Datasets `glue/<task>`."""
    import tensorflow_datasets as tfds  # heavy; only this path needs it

    if split == "train":
        tfds_split = "train"
    else:
        tfds_split = task.tfds_test_splits[list(task.test_files).index(split)]
    try:
        dataset = tfds.load(f"glue/{task.name}", split=tfds_split, data_dir=data_dir, shuffle_files=False)
    except Exception as e:  # TFDS raises many types (download, missing builder); all mean "not available"
        raise TransferError(
            f"could not load tensorflow-datasets glue/{task.name} ({type(e).__name__}: {str(e).splitlines()[0]}); "
            "offline, pass --data_dir (or set $GLUE_DIR) to a GLUE folder in the original TSV layout"
        ) from None
    fields = task.tfds_text_fields
    text_a, text_b, labels = [], [], []
    for row in tfds.as_numpy(dataset):
        text_a.append(row[fields[0]].decode("utf-8"))
        if task.is_pair:
            text_b.append(row[fields[1]].decode("utf-8"))
        labels.append(row["label"])
    dtype = np.float32 if task.is_regression else np.int64
    return Examples(text_a, text_b if task.is_pair else None, np.asarray(labels, dtype=dtype), f"tfds:glue/{task.name}",
                    label_names=task.labels)


def load_task_data(task: Task, data_dir: Optional[str], skip_bad_rows: bool = False):
    """Returns `(train, {test name: Examples})` from a GLUE folder, or from TFDS when `data_dir` is None."""
    if data_dir:
        read = lambda split: read_glue_split(task, data_dir, split, skip_bad_rows)  # noqa: E731
    else:
        read = lambda split: read_tfds_split(task, split)  # noqa: E731
    return read("train"), {name: read(name) for name in task.test_files}
