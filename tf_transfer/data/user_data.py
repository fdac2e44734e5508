"""A user's own data set, trained as GLUE's are: files (`.csv`, `.tsv`, `.jsonl`) or a TensorFlow Datasets name.

`DataSpec` names where the data is and which columns hold the one or two texts and the label; `load` reads it into
`Examples` and describes it as a `tasks.Task` (its name, labels and metrics), so the GLUE trainer, its cache, grids
and reports take it as they take a GLUE task. CSV files are read with standard quoting, TSV files with quoting off
(as GLUE), JSON Lines one object per line.

Labels: for classification, strings or integers as written in the training file; the label set is the training
file's, sorted (numerically when every label is an integer); with two labels the positive class (class 1, whose F1
is reported) is `positive_label`, by default the second in that order. A label in the validation or test file that
the training file lacks is an error naming file, row and label. With `regression` the label is a number.

Metrics by kind: binary (accuracy, F1 of the positive class), multi-class (accuracy, macro F1), regression
(Spearman, Pearson, mean squared error); the first is the default stopping metric.

Example:

>>> import os, tempfile
>>> from tf_transfer.data import user_data
>>> path = os.path.join(tempfile.mkdtemp(), "reviews.csv")
>>> _ = open(path, "w").write('review,stars\\n"Great, really",good\\nawful,bad\\nfine,good\\n')
>>> task, train, validation, tests = user_data.load(user_data.DataSpec(train_file=path, text_columns=("review",),
...                                                                    label_column="stars"))
>>> task.name, task.labels, task.metrics, train.labels.tolist(), validation, tests
('reviews', ('bad', 'good'), ('accuracy', 'f1'), [1, 0, 1], None, {})
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

import numpy as np

from tf_transfer.core.errors import TransferError
from tf_transfer.data import examples, table_reader
from tf_transfer.data.examples import Examples
from tf_transfer.data.tasks import Task

FORMATS = (".csv", ".tsv", ".jsonl")
BINARY_METRICS = ("accuracy", "f1")
MULTICLASS_METRICS = ("accuracy", "macro_f1")
REGRESSION_METRICS = ("spearman", "pearson", "mse")
TFDS_PREFIX = "tfds:"
# Fewer training rows per label than this on average (with three labels or more) is refused: a label per row, or an
# id or free-text column given as the label, trains a classifier that can learn nothing.
MIN_ROWS_PER_LABEL = 5


@dataclasses.dataclass(frozen=True)
class DataSpec:
    """Where a data set is and how to read it: files, or `tfds` (a TensorFlow Datasets name) with its split names."""

    train_file: Optional[str] = None
    validation_file: Optional[str] = None
    test_file: Optional[str] = None
    tfds: Optional[str] = None
    train_split: str = "train"
    validation_split: Optional[str] = None
    test_split: Optional[str] = None
    text_columns: tuple = ()
    label_column: Optional[str] = None
    regression: bool = False
    positive_label: Optional[str] = None
    allow_many_labels: bool = False
    encoding: str = "utf-8"

    @property
    def name(self) -> str:
        """The data set's name in folders, HParams and tables: the training file's stem, or `tfds_<name>`."""
        if self.tfds:
            return "tfds_" + self.tfds.replace("/", "_").replace(":", "_")
        return os.path.splitext(os.path.basename(self.train_file))[0]


def check_file(path: str, flag: str) -> None:
    """One error line for a file that is not there or has no format this module reads."""
    if os.path.splitext(path)[1].lower() not in FORMATS:
        raise TransferError(f"--{flag}={path}: use a .csv, .tsv or .jsonl file")
    if not os.path.isfile(path):
        raise TransferError(f"--{flag}={path} does not exist")


def file_hashes(spec: Optional[DataSpec]) -> dict:
    """`{flag: SHA-256}` of every file a data set reads (`train_file`, `validation_file`, `test_file`): what makes two
    runs of one name the same data; `{}` for a GLUE task (`spec` None) or a TensorFlow Datasets name.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "train.csv")
    >>> _ = open(path, "w").write("text,label\\nhi,1\\n")
    >>> file_hashes(DataSpec(train_file=path))["train_file"][:12]
    '602cc555926d'
    """
    return {flag: entry["sha256"] for flag, entry in data_files(spec).items()}


def data_files(spec: Optional[DataSpec]) -> dict:
    """`{flag: {"path", "sha256"}}` of the files a data set reads, as a run's summary records them; `{}` for a GLUE
    task (`spec` None) or a TensorFlow Datasets name."""
    if spec is None or spec.tfds:
        return {}
    return examples.data_files({"train_file": spec.train_file, "validation_file": spec.validation_file,
                                "test_file": spec.test_file})


def _raw_table(path: str, columns: tuple, skip_bad_rows: bool, encoding: str) -> tuple:
    """`(records [(texts, label text, line)], skipped, labels stripped [(line, label as written)])` of a CSV or TSV
    file."""
    stripped = []
    dialect = table_reader.TSV if path.lower().endswith(".tsv") else table_reader.CSV

    def converter(header):
        found = table_reader.positions(path, header, columns, "no column(s) {missing} in the header (found: "
                                       "{found}): name them with --text_columns and --label_column")

        def convert(row):
            if len(row.fields) <= max(found):
                raise table_reader.BadRow(f"expected at least {max(found) + 1} columns, found {len(row.fields)}")
            values = [row.fields[p] for p in found]
            return _record(values, row.line, stripped)

        return convert

    rows = table_reader.read_rows(path, converter, dialect, skip_bad_rows=skip_bad_rows, encoding=encoding)
    return rows.records, rows.skipped, stripped


def _record(values: list, line: int, stripped: list) -> tuple:
    """`(texts, label, line)` of a row's values (the label last); a label written with spaces around it is read
    without them, and `(line, label as written)` added to `stripped`."""
    texts, label = tuple(values[:-1]), values[-1]
    if any(not str(t).strip() for t in texts):
        raise table_reader.BadRow("empty text")
    if str(label).strip() == "":
        raise table_reader.BadRow("empty label")
    if str(label).strip() != str(label):
        stripped.append((line, str(label)))
    return texts, str(label).strip(), line


def _raw_jsonl(path: str, columns: tuple, skip_bad_rows: bool, encoding: str) -> tuple:
    records, skipped, stripped = [], 0, []
    try:
        with open(path, encoding=table_reader.text_encoding(encoding)) as f:
            for line_number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line, object_pairs_hook=_unique_keys)
                    if not isinstance(row, dict):
                        raise table_reader.BadRow("not a JSON object")
                    missing = [c for c in columns if c not in row]
                    if missing:
                        raise table_reader.BadRow(f"no key(s) {', '.join(map(repr, missing))} (found: "
                                                  f"{', '.join(map(repr, row))}): name them with --text_columns and "
                                                  "--label_column")
                    records.append(_record([row[c] for c in columns], line_number, stripped))
                except (ValueError, table_reader.BadRow) as bad:
                    if not skip_bad_rows:
                        hint = table_reader.SKIP_HINT if not isinstance(bad, json.JSONDecodeError) else ""
                        raise TransferError(f"{path}:{line_number}: {bad}{hint}") from None
                    skipped += 1
    except UnicodeDecodeError as e:
        raise table_reader.undecodable(path, encoding, e) from None
    if not records:
        raise TransferError(f"{path}: no data rows")
    return records, skipped, stripped


def _unique_keys(pairs: list) -> dict:
    """A JSON object's keys, refused when one appears twice (json keeps the last of them without a word)."""
    keys = [key for key, _ in pairs]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise table_reader.BadRow(f"the key(s) {', '.join(map(repr, twice))} appear more than once in the object")
    return dict(pairs)


def _read_raw(path: str, flag: str, spec: DataSpec, skip_bad_rows: bool) -> tuple:
    check_file(path, flag)
    columns = (*spec.text_columns, spec.label_column)
    reader = _raw_jsonl if path.lower().endswith(".jsonl") else _raw_table
    return reader(path, columns, skip_bad_rows, spec.encoding)


def _label_set(records: list, path: str, spec: DataSpec) -> tuple:
    """The classes of the training file in class order; the positive one second when there are two."""
    values = sorted({label for _, label, _ in records})
    if all(_is_int(v) for v in values):
        values.sort(key=int)
    if len(values) < 2:
        raise TransferError(f"{path}: every row has the label {values[0]!r}; classification needs two labels or "
                            "more (for a numeric target pass --regression)")
    if len(values) > 2 and len(records) < MIN_ROWS_PER_LABEL * len(values) and not spec.allow_many_labels:
        raise TransferError(f"{path}: {len(values):,} labels in --label_column={spec.label_column} for {len(records):,} "
                            f"rows ({len(records) / len(values):.1f} per label; fewer than {MIN_ROWS_PER_LABEL} per "
                            "label cannot be learnt): name the label column, or pass --allow_many_labels to train "
                            "anyway")
    if spec.positive_label is not None:
        if spec.positive_label not in values:
            raise TransferError(f"--positive_label={spec.positive_label} is not a label of {path} (labels: "
                                f"{', '.join(values)})")
        if len(values) != 2:
            raise TransferError(f"--positive_label needs two labels; {path} has {len(values)}")
        values = [v for v in values if v != spec.positive_label] + [spec.positive_label]
    return tuple(values)


def _is_int(text: str) -> bool:
    try:
        int(text)
        return True
    except ValueError:
        return False


def _examples(records: list, skipped: int, stripped: list, path: str, labels: Optional[tuple]) -> Examples:
    """Examples of raw records: class indices in `labels`' order, or numbers when `labels` is None; `stripped`
    the labels read without the spaces around them (`_record`)."""
    converted = []
    for texts, label, line in records:
        if labels is None:
            try:
                value = float(label)
            except ValueError:
                raise TransferError(f"{path}:{line}: label {label!r} is not a number (--regression needs a numeric "
                                    "target)") from None
            if not np.isfinite(value):
                raise TransferError(f"{path}:{line}: label {label!r} is not a finite number")
        elif label not in labels:
            raise TransferError(f"{path}:{line}: label {label!r} is not in the training file's labels "
                                f"({', '.join(labels)}): fix the row or add examples of it to the training file")
        else:
            value = labels.index(label)
        converted.append((texts, value))
    return Examples.from_records(converted, np.float32 if labels is None else np.int64, source=path,
                                 skipped_rows=skipped, label_names=labels, stripped_labels=tuple(stripped))


def describe(spec: DataSpec, labels: Optional[tuple]) -> Task:
    """The data set as a `tasks.Task`: its name, text columns, labels and metrics by kind."""
    metrics = (REGRESSION_METRICS if labels is None else BINARY_METRICS if len(labels) == 2
               else MULTICLASS_METRICS)
    test_files = {"test": spec.test_file or spec.test_split} if (spec.test_file or spec.test_split) else {}
    return Task(spec.name, folder="", test_files=test_files, text_columns=tuple(spec.text_columns),
                label_column=spec.label_column, labels=labels, metrics=metrics, tfds_text_fields=(),
                tfds_test_splits=())


def load(spec: DataSpec, skip_bad_rows: bool = False) -> tuple:
    """Returns `(task, train, validation or None, {"test": Examples} or {})` of the data set."""
    if spec.tfds:
        return load_tfds(spec)
    records, skipped, stripped = _read_raw(spec.train_file, "train_file", spec, skip_bad_rows)
    labels = None if spec.regression else _label_set(records, spec.train_file, spec)
    train = _examples(records, skipped, stripped, spec.train_file, labels)
    others = {}
    for split, path in (("validation", spec.validation_file), ("test", spec.test_file)):
        if path:
            others[split] = _examples(*_read_raw(path, f"{split}_file", spec, skip_bad_rows), path, labels)
    tests = {"test": others["test"]} if "test" in others else {}
    return describe(spec, labels), train, others.get("validation"), tests


def check_metric(task: Task, metric: Optional[str]) -> None:
    """`TransferError` for a `--metric` the data set's kind does not compute (None: the default, always fine)."""
    if metric and metric not in task.metrics:
        raise TransferError(f"--metric={metric} is not computed for {task.name}'s "
                            f"{len(task.labels) if task.labels else 'numeric'} labels: use one of "
                            f"{', '.join(task.metrics)}")


def check_files(spec: DataSpec, skip_bad_rows: bool, metric: Optional[str]) -> list:
    """Reads a data set's files as `load` does, for every check of them (encoding, columns, labels, empty, one
    class, the metric) before a command imports TensorFlow; TFDS data sets need TensorFlow to be read, so not those.
    Returns the lines a command prints once about what it read (`stripped_labels_lines`)."""
    if spec.tfds:
        return []
    task, train, validation, tests = load(spec, skip_bad_rows)
    check_metric(task, metric)
    return stripped_labels_lines([train, validation, *tests.values()])


def stripped_labels_lines(splits: list) -> list:
    """One line per file whose labels were written with spaces around them (read without them): how many, and the
    first as written, e.g. `train.csv: 3 labels had spaces around them and were read without them (line 2: '1 ')`.

    >>> from tf_transfer.data.examples import Examples
    >>> stripped_labels_lines([Examples(["a"], None, np.zeros(1), "train.csv", stripped_labels=((2, "1 "),)), None])
    ["train.csv: 1 label had spaces around it and was read without them (line 2: '1 ')"]
    """
    lines = []
    for split in splits:
        if split is None or not split.stripped_labels:
            continue
        count, (line, written) = len(split.stripped_labels), split.stripped_labels[0]
        what = ("1 label had spaces around it and was" if count == 1
                else f"{count:,} labels had spaces around them and were")
        lines.append(f"{split.source}: {what} read without them (line {line}: {written!r})")
    return lines


def load_tfds(spec: DataSpec) -> tuple:
    """The same from TensorFlow Datasets: `spec.tfds`'s splits, its label feature's class names as labels."""
    import tensorflow_datasets as tfds  # heavy; only this path needs it

    try:
        builder = tfds.builder(spec.tfds)
        builder.download_and_prepare()
    except Exception as e:  # TFDS raises many types (download, missing builder); all mean "not available"
        raise TransferError(f"could not load tensorflow-datasets {spec.tfds} ({type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else ''}); offline, export it to a file and pass "
                            "--train_file") from None
    features = builder.info.features
    missing = [c for c in (*spec.text_columns, spec.label_column) if c not in features]
    if missing:
        raise TransferError(f"tfds:{spec.tfds} has no feature(s) {', '.join(missing)} (features: "
                            f"{', '.join(features)}): name them with --text_columns and --label_column")
    label_feature = features[spec.label_column]
    labels = None if spec.regression else tuple(getattr(label_feature, "names", None) or ())
    if not spec.regression and len(labels) < 2:
        raise TransferError(f"tfds:{spec.tfds} feature {spec.label_column} is not a class label: pass --regression "
                            "for a numeric target")
    splits = {"train": spec.train_split, "validation": spec.validation_split, "test": spec.test_split}
    read = {name: _tfds_split(builder, split, spec, labels) for name, split in splits.items() if split}
    tests = {"test": read["test"]} if "test" in read else {}
    return describe(spec, labels), read["train"], read.get("validation"), tests


def _tfds_split(builder, split: str, spec: DataSpec, labels: Optional[tuple]) -> Examples:
    import tensorflow_datasets as tfds

    try:
        dataset = builder.as_dataset(split=split, shuffle_files=False)
    except Exception as e:
        raise TransferError(f"tfds:{spec.tfds} has no split {split!r} ({type(e).__name__}): choose one of "
                            f"{', '.join(builder.info.splits)}") from None
    texts, values = [], []
    for row in tfds.as_numpy(dataset):
        texts.append(tuple(_text(row[c]) for c in spec.text_columns))
        values.append(row[spec.label_column])
    text_a = [t[0] for t in texts]
    text_b = [t[1] for t in texts] if len(spec.text_columns) == 2 else None
    dtype = np.float32 if labels is None else np.int64
    return Examples(text_a, text_b, np.asarray(values, dtype=dtype), f"tfds:{spec.tfds}/{split}", label_names=labels)


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
