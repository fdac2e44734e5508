"""A user's own data set: CSV, TSV and JSON Lines files read into examples with the training file's labels, and every
kind of bad input one error line naming the file, row or column."""

import json

import pytest

from conftest import write_csv as _csv
from tf_transfer.core.errors import TransferError
from tf_transfer.data import user_data


def spec(path, **changes):
    return user_data.DataSpec(**{"train_file": path, "text_columns": ("text",), "label_column": "label", **changes})


def test_csv_with_quoted_commas_and_string_labels(tmp_path):
    path = _csv(tmp_path / "reviews.csv", ["id", "text", "label"],
                [[1, 'good, "really" good', "pos"], [2, "bad\nvery bad", "neg"], [3, "fine", "pos"]])
    task, train, validation, tests = user_data.load(spec(path))
    assert (task.name, task.labels, task.metrics, task.is_pair) == ("reviews", ("neg", "pos"), ("accuracy", "f1"),
                                                                    False)
    assert train.text_a == ['good, "really" good', "bad\nvery bad", "fine"] and train.labels.tolist() == [1, 0, 1]
    assert validation is None and tests == {}


def test_integer_labels_sort_as_numbers_and_the_positive_label_is_class_one(tmp_path):
    path = _csv(tmp_path / "stars.csv", ["text", "label"], [[f"t{i}", str(i % 3 * 5)] for i in range(15)])
    task, train, _, _ = user_data.load(spec(path))
    assert task.labels == ("0", "5", "10") and task.metrics == ("accuracy", "macro_f1")
    binary = _csv(tmp_path / "b.csv", ["text", "label"], [["a", "yes"], ["b", "no"], ["c", "yes"]])
    task, train, _, _ = user_data.load(spec(binary, positive_label="no"))
    assert task.labels == ("yes", "no") and train.labels.tolist() == [0, 1, 0]


def test_pairs_from_tsv_and_jsonl_with_validation_and_test_files(tmp_path):
    tsv = tmp_path / "train.tsv"
    tsv.write_text('a\tb\tscore\nhe said " yes\tno\t1.5\nx\ty\t2\n')
    jsonl = tmp_path / "dev.jsonl"
    jsonl.write_text("\n".join(json.dumps({"a": a, "b": b, "score": s}) for a, b, s in [("p", "q", 0.5)]) + "\n")
    task, train, validation, tests = user_data.load(spec(str(tsv), text_columns=("a", "b"), label_column="score",
                                                         regression=True, validation_file=str(jsonl),
                                                         test_file=str(jsonl)))
    assert task.is_pair and task.is_regression and task.metrics == ("spearman", "pearson", "mse")
    assert train.text_a == ['he said " yes', "x"] and train.labels.tolist() == [1.5, 2.0]  # quoting off in TSV
    assert validation.text_b == ["q"] and list(tests) == ["test"] and task.test_files == {"test": str(jsonl)}


@pytest.mark.parametrize("case, fragment", [
    ("missing_column", "reviews.csv:1: no column(s) 'label' in the header"),
    ("unknown_label", "dev.csv:3: label 'maybe' is not in the training file's labels (no, yes)"),
    ("not_numeric", "reviews.csv:2: label 'yes' is not a number (--regression needs a numeric target)"),
    ("empty_file", "reviews.csv: the file is empty; expected a header row"),
    ("one_label", "reviews.csv: every row has the label 'yes'"),
    ("bad_positive", "--positive_label=ok is not a label of"),
    ("bad_json", "reviews.jsonl:2: Expecting"),
    ("wrong_format", "reviews.txt: use a .csv, .tsv or .jsonl file"),
])
def test_bad_input_is_one_clear_error(tmp_path, case, fragment):
    train = _csv(tmp_path / "reviews.csv", ["text", "label"], [["a", "yes"], ["b", "no"]])
    changes = {}
    if case == "missing_column":
        changes = {"label_column": "label", "train_file": _csv(tmp_path / "reviews.csv", ["text", "stars"], [["a", 1]])}
    elif case == "unknown_label":
        changes = {"validation_file": _csv(tmp_path / "dev.csv", ["text", "label"], [["c", "yes"], ["d", "maybe"]])}
    elif case == "not_numeric":
        changes = {"regression": True}
    elif case == "empty_file":
        (tmp_path / "reviews.csv").write_text("")
    elif case == "one_label":
        changes = {"train_file": _csv(tmp_path / "reviews.csv", ["text", "label"], [["a", "yes"], ["b", "yes"]])}
    elif case == "bad_positive":
        changes = {"positive_label": "ok"}
    elif case == "bad_json":
        (tmp_path / "reviews.jsonl").write_text('{"text": "a", "label": "x"}\n{"text": "b", "label":\n')
        changes = {"train_file": str(tmp_path / "reviews.jsonl")}
    elif case == "wrong_format":
        (tmp_path / "reviews.txt").write_text("text,label\na,b\n")
        changes = {"train_file": str(tmp_path / "reviews.txt")}
    with pytest.raises(TransferError) as raised:
        user_data.load(spec(train, **changes))
    assert fragment in str(raised.value) and "\n" not in str(raised.value)


def test_skip_bad_rows_counts_and_skips(tmp_path):
    path = _csv(tmp_path / "t.csv", ["text", "label"], [["a", "x"], ["", "y"], ["c", "y"]])
    with pytest.raises(TransferError, match="t.csv:3: empty text"):
        user_data.load(spec(path))
    _, train, _, _ = user_data.load(spec(path), skip_bad_rows=True)
    assert len(train) == 2 and train.skipped_rows == 1


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_file_in_another_encoding_names_its_line_and_reads_with_encoding(tmp_path, suffix):
    rows = [("plain", "a"), ("more", "b"), ("caf\u00e9 cr\u00e8me", "a"), ("last", "b")]
    path = tmp_path / f"latin{suffix}"
    if suffix == ".csv":
        text = "text,label\n" + "".join(f"{t},{label}\n" for t, label in rows)
    else:
        text = "".join(json.dumps({"text": t, "label": label}, ensure_ascii=False) + "\n" for t, label in rows)
    path.write_bytes(text.encode("latin-1"))
    line = 4 if suffix == ".csv" else 3  # the header is line 1 of a CSV
    with pytest.raises(TransferError, match=rf"latin{suffix}:{line}: not valid UTF-8 text \(invalid "
                                            r"continuation byte, byte 0xe9\): give the file's encoding with "
                                            r"--encoding \(e\.g\. --encoding=cp1252"):
        user_data.load(spec(str(path)))
    _, train, _, _ = user_data.load(spec(str(path), encoding="latin-1"))
    assert train.text_a[2] == "caf\u00e9 cr\u00e8me"


def test_labels_with_spaces_around_them_are_read_without_and_said_once(tmp_path):
    path = _csv(tmp_path / "spaced.csv", ["text", "label"], [["a", "1 "], ["b", "0"], ["c", " 1"], ["d", "0"]])
    _, train, _, _ = user_data.load(spec(path))
    assert train.label_names == ("0", "1") and train.labels.tolist() == [1, 0, 1, 0]
    assert user_data.check_files(spec(path), False, None) == [
        f"{path}: 2 labels had spaces around them and were read without them (line 2: '1 ')"]
    plain = _csv(tmp_path / "plain.csv", ["text", "label"], [["a", "1"], ["b", "0"]])
    assert user_data.check_files(spec(plain), False, None) == []
