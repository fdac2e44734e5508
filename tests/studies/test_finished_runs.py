"""A finished run on a user's file: found again only on the same data (a file of the same name with other contents
is refused in one line naming both SHA-256), and exported without training from the weights it kept, the exported
classifier scoring the test file as the run did. One small training run serves every check."""

import csv
import hashlib
import json
import os

import pytest

from conftest import SENTENCES, run_module, write_csv
from tf_transfer.core.errors import TransferError
from tf_transfer.studies.glue import glue_study
from tf_transfer.training import checkpoints, record


def _rows(n: int, shift: int = 0) -> list:
    return [(100 + i, f"{SENTENCES[(i + shift) % len(SENTENCES)]} {SENTENCES[(i * 5 + 3) % len(SENTENCES)]}",
             (i + shift) % 2) for i in range(n)]


def _sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_a_finished_run_is_found_by_content_and_exported_without_training(one_block_preset, tmp_path):
    # Two labels written with a space after them (a spreadsheet's export): read as the others, and said once.
    train = write_csv(tmp_path / "train.csv", ["id", "text", "target"],
                      [(i, text, f"{label} " if i < 102 else label) for i, text, label in _rows(40)])
    test = write_csv(tmp_path / "test.csv", ["id", "text", "target"], _rows(12, shift=1))
    out = tmp_path / "run"
    command = [f"--preset={one_block_preset}", f"--train_file={train}", f"--test_file={test}",
               "--text_columns=text", "--label_column=target", "--trainable_layers=1", "--max_epochs=2",
               "--batch_size=8", "--lr=1e-3", "--max_seq_length=32", "--cache_frozen=false", f"--output_dir={out}"]
    done = run_module("tf_transfer.glue", *command)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] and os.path.exists(checkpoints.path(str(out), "best")) and summary["labels"] == ["0", "1"]
    stripped = f"{train}: 2 labels had spaces around them and were read without them (line 2: '0 ')"
    assert done.stdout.count(stripped) == 1, done.stdout[-2000:]

    # The same command with --export_dir: exported from the kept weights, nothing trained again.
    model = tmp_path / "model"
    exported = run_module("tf_transfer.glue", *command, f"--export_dir={model}")
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert "not training again: exported its epoch-" in exported.stdout
    after = json.loads((out / "summary.json").read_text())
    assert after["epochs"] == summary["epochs"] and after["exported"]["folder"] == str(model)
    _assert_exported_holds_the_kept_weights(str(model), checkpoints.path(str(out), "best"))
    predictions = tmp_path / "predictions.csv"
    scored = run_module("tf_transfer.predict", f"--model={model}", f"--input={test}", f"--output={predictions}")
    assert scored.returncode == 0, scored.stderr[-3000:]
    predicted = [row["label"] for row in csv.DictReader(open(predictions))]
    truth = [str(label) for _, _, label in _rows(12, shift=1)]
    accuracy = sum(p == t for p, t in zip(predicted, truth)) / len(truth)
    best = summary["best_epoch"] or len(summary["epochs"])
    assert accuracy == pytest.approx(summary["epochs"][best - 1]["test"]["accuracy"])

    # A Kaggle-style file: the id and the predicted label under the trained label column's name.
    submission = tmp_path / "submission.csv"
    kaggle = run_module("tf_transfer.predict", f"--model={model}", f"--input={test}", f"--output={submission}",
                        "--output_columns=id,target")
    assert kaggle.returncode == 0, kaggle.stderr[-3000:]
    written = list(csv.reader(open(submission)))
    assert written[0] == ["id", "target"] and [row[1] for row in written[1:]] == predicted
    assert [row[0] for row in written[1:]] == [str(100 + i) for i in range(12)]
    # An input in Latin-1: refused naming its line and --encoding, which reads it.
    latin = tmp_path / "test_latin1.csv"
    latin.write_bytes(open(test, "rb").read().replace(b"the cat", "the caf\u00e9".encode("latin-1"), 1))
    refused = run_module("tf_transfer.predict", f"--model={model}", f"--input={latin}")
    assert refused.returncode == 2 and f"{latin}:" in refused.stderr and "--encoding" in refused.stderr
    read = run_module("tf_transfer.predict", f"--model={model}", f"--input={latin}", "--encoding=latin-1",
                      "--output_columns=id,target", f"--output={tmp_path / 'latin.csv'}")
    assert read.returncode == 0 and len(list(csv.reader(open(tmp_path / "latin.csv")))) == 13, read.stderr[-2000:]

    # Another file of the same name in the same place: refused in one line naming both hashes and the way out.
    old_hash = _sha256(train)
    original = open(train, "rb").read()
    write_csv(train, ["id", "text", "target"], _rows(30, shift=1))
    refused = run_module("tf_transfer.glue", *command)
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert refused.returncode == 2 and len(errors) == 1 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    assert old_hash in errors[0] and _sha256(train) in errors[0] and "--overwrite" in errors[0]
    assert "--output_dir" in errors[0] and "not training again" not in refused.stdout
    assert refused.stdout.strip() == "", refused.stdout  # the refusal alone: no "first run ... chose" line before it

    # The identical file again: the completed run is found.
    open(train, "wb").write(original)
    again = run_module("tf_transfer.glue", *command)
    assert again.returncode == 0 and "already holds a completed run; not training again" in again.stdout
    found = again.stdout.strip().splitlines()[-1]  # its scores said again, as its `done:` line said them
    assert found.endswith(done.stdout.strip().splitlines()[-1].split("done: ")[1].split("; summary in")[0]), found


def _assert_exported_holds_the_kept_weights(model: str, kept: str) -> None:
    import keras_hub
    import numpy as np

    exported = [w.numpy() for w in keras_hub.models.TextClassifier.from_preset(model).weights]
    with np.load(kept) as saved:
        arrays = [saved[f"v{i}"] for i in range(len(saved["paths"]))]
    assert arrays and all(any(w.shape == a.shape and np.array_equal(w, a) for w in exported) for a in arrays)


def test_a_grid_refuses_a_completed_run_on_other_data(tmp_path):
    train = write_csv(tmp_path / "train.csv", ["text", "target"], [(s, i % 2) for i, s in enumerate(SENTENCES)])
    run = {"train_file": train, "text_columns": ("text",), "label_column": "target", "part": "main"}
    folder = tmp_path / "run"
    folder.mkdir()
    summary = {"completed": True, "dataset": {"files": {"train_file": {"path": train, "sha256": _sha256(train)}}}}
    record.write_json_atomic(str(folder / "summary.json"), summary)
    assert glue_study.result(run, str(folder))["completed"]
    summary["dataset"]["files"]["train_file"]["sha256"] = "0" * 64
    record.write_json_atomic(str(folder / "summary.json"), summary)
    with pytest.raises(TransferError, match=f"{'0' * 64} recorded, {_sha256(train)} given.*another --runs_dir"):
        glue_study.result(run, str(folder))
    # A run that records no data files (made from a GLUE folder) is compared by its settings alone.
    record.refuse_other_data({"completed": True}, {"train_file": _sha256(train)}, str(folder))


def test_a_stack_run_is_refused_on_other_data(tmp_path):
    from conftest import quora_rows
    from tf_transfer.studies.stack import stack_ensemble
    from tf_transfer.studies.stack.stack_settings import StackSettings

    data = tmp_path / "quora.csv"
    data.write_text(quora_rows(12))
    config = StackSettings(task="quora", data=str(data), head="linear")
    folder = tmp_path / "run"
    folder.mkdir()
    files = {"data": {"path": str(data), "sha256": _sha256(data)}}
    summary = {"completed": True, "config": config.to_dict(), "dataset": {"files": files}}
    record.write_json_atomic(str(folder / "summary.json"), summary)
    assert stack_ensemble.completed_result(config, str(folder)) == summary
    data.write_text(quora_rows(14))
    with pytest.raises(TransferError, match=f"other data.*{files['data']['sha256']} recorded, {_sha256(data)} given"):
        stack_ensemble.completed_result(config, str(folder))
