"""Every task's TSV layout parses; bad rows are reported with file and line; the split is seeded; the table reader
and the examples container every format shares."""

import os

import numpy as np
import pytest

from tf_transfer.data import table_reader, tasks
from tf_transfer.data.examples import train_validation_split
from tf_transfer.core.errors import TransferError


@pytest.mark.parametrize("name", sorted(tasks.TASKS))
def test_each_task_parses_train_and_dev(glue_dir, name):
    task = tasks.get_task(name)
    train, tests = tasks.load_task_data(task, glue_dir)
    assert len(train) == 40
    assert set(tests) == set(task.test_files)
    assert (train.text_b is not None) == task.is_pair
    if task.is_regression:
        assert train.labels.dtype == np.float32
        assert 0.0 <= train.labels.min() and train.labels.max() <= 5.0
    else:
        assert train.labels.dtype == np.int64
        assert set(np.unique(train.labels)) <= set(range(task.num_labels))


def test_cola_has_no_header_and_dev_has_no_final_newline(glue_dir):
    with open(os.path.join(glue_dir, "CoLA", "dev.tsv"), "rb") as f:
        raw = f.read()
    assert not raw.endswith(b"\n")
    dev = tasks.read_glue_split(tasks.get_task("cola"), glue_dir, "dev")
    assert len(dev) == 12  # the first line is data, and so is the unterminated last one
    assert dev.text_a[0] == "a dog runs in the house" and dev.labels[0] == 0


def test_mrpc_byte_order_mark(glue_dir):
    with open(os.path.join(glue_dir, "MRPC", "train.tsv"), "rb") as f:
        assert f.read(3) == b"\xef\xbb\xbf"
    train = tasks.read_glue_split(tasks.get_task("mrpc"), glue_dir, "train")
    assert train.labels[:4].tolist() == [0, 1, 0, 1]


def test_qqp_quote_character_is_kept_literally(glue_dir):
    train = tasks.read_glue_split(tasks.get_task("qqp"), glue_dir, "train")
    quoted = [t for t in train.text_a if '"' in t]
    assert quoted == ['he said " yes'] * len(quoted) and quoted
    # A quoting reader would have swallowed rows after the quote; every row is still there.
    assert len(train) == 40


def test_mnli_has_both_dev_sets_and_gold_labels(glue_dir):
    task = tasks.get_task("mnli")
    _, tests = tasks.load_task_data(task, glue_dir)
    assert list(tests) == ["dev_matched", "dev_mismatched"]
    assert len(tests["dev_matched"]) == 12 and len(tests["dev_mismatched"]) == 6
    assert tests["dev_matched"].labels[:3].tolist() == [0, 1, 2]  # entailment, neutral, contradiction


def _write_rows(tmp_path, folder, header, rows):
    os.makedirs(tmp_path / folder, exist_ok=True)
    (tmp_path / folder / "train.tsv").write_text("\n".join(([header] if header else []) + rows) + "\n")
    return str(tmp_path)


def test_too_few_columns_names_file_and_line(tmp_path):
    root = _write_rows(tmp_path, "RTE", "index\tsentence1\tsentence2\tlabel",
                       ["0\ta\tb\tentailment", "1\tonly two"])
    with pytest.raises(TransferError, match=r"RTE/train\.tsv:3: expected at least 4 tab-separated columns, found 2"):
        tasks.read_glue_split(tasks.get_task("rte"), root, "train")


def test_unknown_label_names_file_and_line(tmp_path):
    root = _write_rows(tmp_path, "RTE", "index\tsentence1\tsentence2\tlabel",
                       ["0\ta\tb\tentailment", "1\ta\tb\tmaybe"])
    with pytest.raises(TransferError, match=r"train\.tsv:3: label 'maybe' is not one of entailment, not_entailment"):
        tasks.read_glue_split(tasks.get_task("rte"), root, "train")


def test_skip_bad_rows_counts_them(tmp_path):
    root = _write_rows(tmp_path, "STS-B", "index\tsentence1\tsentence2\tscore",
                       ["0\ta\tb\t1.0", "1\ta\tb\tnot-a-number", "2\ta", "3\tc\td\t4.5"])
    examples = tasks.read_glue_split(tasks.get_task("stsb"), root, "train", skip_bad_rows=True)
    assert examples.labels.tolist() == [1.0, 4.5]
    assert examples.skipped_rows == 2


def test_missing_folder_and_file(tmp_path, glue_dir):
    with pytest.raises(TransferError, match="does not exist"):
        tasks.read_glue_split(tasks.get_task("rte"), str(tmp_path / "nowhere"), "train")
    with pytest.raises(TransferError, match="has no QQP/ folder"):
        tasks.read_glue_split(tasks.get_task("qqp"), str(tmp_path), "train")


def test_missing_header_column(tmp_path):
    root = _write_rows(tmp_path, "QNLI", "index\tquestion\tlabel", ["0\tq\tentailment"])
    with pytest.raises(TransferError, match="header lacks column"):
        tasks.read_glue_split(tasks.get_task("qnli"), root, "train")


def test_unknown_task():
    with pytest.raises(TransferError, match="unknown task 'squad'"):
        tasks.get_task("squad")


def test_split_is_seeded_disjoint_and_complete(glue_dir):
    examples = tasks.read_glue_split(tasks.get_task("sst2"), glue_dir, "train")
    train, validation = train_validation_split(examples, 0.1, seed=3)
    again, _ = train_validation_split(examples, 0.1, seed=3)
    other, _ = train_validation_split(examples, 0.1, seed=4)
    assert len(validation) == 4 and len(train) == 36
    assert train.text_a == again.text_a
    assert train.text_a != other.text_a
    assert sorted(train.text_a + validation.text_a) == sorted(examples.text_a)


def test_tfds_path_with_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    task = tasks.get_task("rte")
    with tfds.testing.mock_data(num_examples=7):
        train, tests = tasks.load_task_data(task, None)
    assert len(train) == 7 and len(tests["dev"]) == 7
    assert all(isinstance(t, str) for t in train.text_a + train.text_b)
    assert set(train.labels.tolist()) <= {0, 1}


# --- the one table reader and examples container under every format ---------------------------------------------


def _columns(path, names=("text", "label")):
    """Columns `names`; a row with an empty last one is skipped, one whose last is `bad` is malformed."""

    def columns(header):
        found = table_reader.positions(str(path), header, names, "lacks {missing} (found: {found})")

        def convert(row):
            values = [row.fields[p] for p in found]
            if not values[-1]:
                raise table_reader.SkipRow()
            if values[-1] == "bad":
                raise table_reader.BadRow("a bad label")
            return row.line, values

        return convert

    return columns


def test_table_bad_rows_are_skipped_counted_or_one_error_line(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text("text\tlabel\na\t1\nb\t\nc\tbad\nd\t0\n")
    rows = table_reader.read_rows(str(path), _columns(path), table_reader.TSV, skip_bad_rows=True)
    assert rows.records == [(2, ["a", "1"]), (5, ["d", "0"])] and rows.skipped_lines == [3] and rows.skipped == 2
    with pytest.raises(TransferError, match=r"t\.tsv:4: a bad label \(or pass --skip_bad_rows"):
        table_reader.read_rows(str(path), _columns(path), table_reader.TSV, skip_bad_rows=False)
    with pytest.raises(TransferError, match=r"t\.tsv:4: a bad label$"):  # a reader without the option: no hint
        table_reader.read_rows(str(path), _columns(path), table_reader.TSV)


@pytest.mark.parametrize("content, message", [
    ("", "the file is empty; expected a header row"),
    ("\n\ntext,label\n", ":1: the first line is blank"),
    ("text,label\n\n", ": no data rows"),
    ("text,label\na,\n", r": no usable rows \(1 skipped\)"),
    ("text,kind\na,1\n", r":1: lacks 'label' \(found: 'text', 'kind'\)"),
    (b"text,label\na,\xff\n", "not valid UTF-8 text"),
])
def test_table_file_problems_are_one_error_line_naming_it(tmp_path, content, message):
    path = tmp_path / "t.csv"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(TransferError, match=message) as error:
        table_reader.read_rows(str(path), _columns(path))
    assert str(path) in str(error.value)


def test_table_dialect_bom_and_lines_of_quoted_rows(tmp_path):
    path = tmp_path / "t.csv"  # a byte-order mark, a padded header name, a quoted text over two lines
    path.write_bytes('\ufefftext ,label\n"two\nlines, one text",1\n""\nc,0\n'.encode())
    rows = table_reader.read_rows(str(path), _columns(path))  # no tab in the header line: CSV, quoted
    assert rows.records == [(3, ["two\nlines, one text", "1"]), (5, ["c", "0"])]
    tsv = tmp_path / "t.tsv"  # a tab in the header line: quoting off, the quote character is text
    tsv.write_text('text\tlabel\nhe said " yes\t1\nb\t0\n')
    assert table_reader.read_rows(str(tsv), _columns(tsv)).records == [(2, ['he said " yes', "1"]),
                                                                                (3, ["b", "0"])]


def test_examples_take_and_split_keep_every_field(tmp_path):
    from tf_transfer.data.labelled_texts import LabelledTexts

    data = LabelledTexts.from_records([((t,), i % 2) for i, t in enumerate("abcdefghij")], np.int64, source="s",
                                      label_names=("0", "1"), sha256="x", skipped_rows=3)
    part = data.take([2, 0])
    assert isinstance(part, LabelledTexts) and part.texts == ["c", "a"] and part.labels.tolist() == [0, 0]
    assert (part.sha256, part.label_names, part.skipped_rows, part.text_b) == ("x", ("0", "1"), 3, None)
    train, validation = train_validation_split(data, 0.2, seed=1)
    assert len(train) == 8 and len(validation) == 2 and sorted(train.texts + validation.texts) == data.texts
    with pytest.raises(TransferError, match="10 examples in s cannot be split"):
        train_validation_split(data, 0.01, seed=1)
