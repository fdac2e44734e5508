"""Hostile files: every reader parses them or raises the project's one error type, never anything else."""

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tf_transfer import predict
from tf_transfer.data import tasks
from tf_transfer.core.errors import TransferError
from tf_transfer.data.labelled_texts import read_labelled_texts

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Cells: printable text with the characters that break naive readers: tabs, quotes, commas, newlines, BOMs.
cell = st.text(alphabet=st.characters(blacklist_categories=("Cs",)) | st.sampled_from(
    ["\t", '"', "'", ",", "\n", "\r", "\ufeff", "\\"]), max_size=30)
row = st.lists(cell, min_size=0, max_size=8)


def _write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _rows_to_bytes(header, rows, delimiter="\t", encoding="utf-8"):
    text = "\n".join(delimiter.join(r) for r in [header] + rows)
    return text.encode(encoding, errors="replace")


@SETTINGS
@given(data=st.binary(max_size=2000))
def test_glue_reader_on_random_bytes(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("glue")
    os.makedirs(root / "RTE")
    (root / "RTE" / "train.tsv").write_bytes(data)
    try:
        examples = tasks.read_glue_split(tasks.get_task("rte"), str(root), "train")
    except TransferError as e:
        assert str(e)
    else:
        assert len(examples) == len(examples.labels) >= 1


@SETTINGS
@given(rows=st.lists(row, max_size=12), task_name=st.sampled_from(sorted(tasks.TASKS)),
       encoding=st.sampled_from(["utf-8", "latin-1", "utf-16"]), skip=st.booleans())
def test_glue_reader_on_structured_garbage(tmp_path_factory, rows, task_name, encoding, skip):
    task = tasks.get_task(task_name)
    header = list(task.column_names or []) if task.column_names else ["index", *task.text_columns,
                                                                       task.label_column]
    root = tmp_path_factory.mktemp("glue")
    os.makedirs(root / task.folder)
    lines = rows if task.column_names else [header] + rows
    (root / task.folder / "train.tsv").write_bytes("\n".join("\t".join(r) for r in lines).encode(encoding,
                                                                                                  errors="replace"))
    try:
        examples = tasks.read_glue_split(task, str(root), "train", skip_bad_rows=skip)
    except TransferError as e:
        assert str(e)
    else:
        assert len(examples.text_a) == len(examples.labels)
        assert all(isinstance(t, str) and t.strip() for t in examples.text_a)


@SETTINGS
@given(text=st.text(min_size=1, max_size=5).filter(lambda t: t.strip() and "\t" not in t and "\n" not in t
                                                   and "\r" not in t))
def test_glue_reader_huge_line(tmp_path_factory, text):
    root = tmp_path_factory.mktemp("glue")
    os.makedirs(root / "SST-2")
    huge = (text * 200_000)[:1_000_000]
    (root / "SST-2" / "train.tsv").write_text(f"sentence\tlabel\n{huge}\t1\n", encoding="utf-8")
    try:
        examples = tasks.read_glue_split(tasks.get_task("sst2"), str(root), "train")
    except TransferError:
        return  # a text that is only spaces after all, say
    assert len(examples.text_a[0]) == len(huge)


@SETTINGS
@given(header=row, rows=st.lists(row, max_size=10), extension=st.sampled_from([".csv", ".tsv"]))
def test_sentiment_reader(tmp_path_factory, header, rows, extension):
    folder = tmp_path_factory.mktemp("sentiment")
    path = _write(folder, "data" + extension, _rows_to_bytes(["id", "text", "target"] + header, rows,
                                                            "," if extension == ".csv" else "\t"))
    try:
        data = read_labelled_texts(path)
    except TransferError as e:
        assert str(e)
    else:
        assert len(data.texts) == len(data.labels)


@SETTINGS
@given(data=st.binary(max_size=1500), extension=st.sampled_from([".csv", ".tsv"]))
def test_sentiment_and_predict_readers_on_random_bytes(tmp_path_factory, data, extension):
    folder = tmp_path_factory.mktemp("bytes")
    path = _write(folder, "data" + extension, data)
    for read in (read_labelled_texts, predict.read_rows):
        try:
            read(path)
        except TransferError as e:
            assert str(e)


@SETTINGS
@given(data=st.binary(max_size=1500), layout=st.sampled_from(["sst", "para", "sts"]), skip=st.booleans())
def test_cs224n_readers_on_random_bytes(tmp_path_factory, data, layout, skip):
    from tf_transfer.data.cs224n import CS224N_LAYOUTS, read_cs224n_file

    path = _write(tmp_path_factory.mktemp("cs224n"), "data.csv", data)
    try:
        examples = read_cs224n_file(path, CS224N_LAYOUTS[layout], skip_bad_rows=skip)
    except TransferError as e:
        assert str(e)
    else:
        assert len(examples.text_a) == len(examples.labels)


@SETTINGS
@given(rows=st.lists(row, max_size=10), layout=st.sampled_from(["sst", "para", "sts"]))
def test_cs224n_readers_on_ragged_rows(tmp_path_factory, rows, layout):
    from tf_transfer.data.cs224n import CS224N_LAYOUTS, read_cs224n_file

    spec = CS224N_LAYOUTS[layout]
    header = ["", "id", *spec.text_columns, spec.label_column] if hasattr(spec, "text_columns") else ["", "id"]
    path = _write(tmp_path_factory.mktemp("cs224n"), "data.csv", _rows_to_bytes(header, rows))
    try:
        read_cs224n_file(path, spec)
    except TransferError as e:
        assert str(e)


@SETTINGS
@given(data=st.binary(max_size=1500))
def test_stack_readers_on_random_bytes(tmp_path_factory, data):
    from tf_transfer.data import stack_data

    folder = tmp_path_factory.mktemp("stack")
    for name, read in (("ner.txt", stack_data.read_conll), ("texts.csv", stack_data.read_texts),
                       ("pairs.tsv", stack_data.read_pairs)):
        try:
            read(_write(folder, name, data))
        except TransferError as e:
            assert str(e)


@SETTINGS
@given(lines=st.lists(row, max_size=15))
def test_conll_reader_on_ragged_columns(tmp_path_factory, lines):
    from tf_transfer.data import stack_data

    text = "-DOCSTART- -X- -X- O\n\n" + "\n".join(" ".join(r) for r in lines)
    path = _write(tmp_path_factory.mktemp("conll"), "ner.txt", text.encode("utf-8", errors="replace"))
    try:
        stack_data.read_conll(path)
    except TransferError as e:
        assert str(e)


@SETTINGS
@given(data=st.binary(max_size=1500), dialect=st.sampled_from([None, "TSV", "CSV"]),
       skip=st.sampled_from([None, False, True]))
def test_table_reader_on_random_bytes(tmp_path_factory, data, dialect, skip):
    from tf_transfer.data import table_reader

    def columns(header):
        def convert(row):
            if len(row.fields) < 2:
                raise table_reader.BadRow("short")
            if not row.fields[1]:
                raise table_reader.SkipRow()
            return row.line

        return convert

    path = _write(tmp_path_factory.mktemp("table"), "data.tsv", data)
    try:
        rows = table_reader.read_rows(path, columns, dialect and getattr(table_reader, dialect), skip_bad_rows=skip)
    except TransferError as e:
        assert str(e)
    else:
        assert rows.records == sorted(rows.records) and rows.records and not (rows.bad_rows and not skip)
