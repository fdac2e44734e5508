"""Every task's TSV layout parses; bad rows are reported with file and line; the split is seeded."""

import os

import numpy as np
import pytest

from tf_transfer.data import tasks
from tf_transfer.core.errors import TransferError

from conftest import write_glue


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
    train, validation = tasks.train_validation_split(examples, 0.1, seed=3)
    again, _ = tasks.train_validation_split(examples, 0.1, seed=3)
    other, _ = tasks.train_validation_split(examples, 0.1, seed=4)
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
