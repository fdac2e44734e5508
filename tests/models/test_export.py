"""Export to a keras-hub preset folder: it loads back with from_preset and predicts what the trained model did."""

import csv
import json
import os

import numpy as np
import pytest

from tf_transfer.models import export
from tf_transfer.studies.glue import glue_task as runner
from tf_transfer.data import tasks
from tf_transfer.studies.glue.glue_settings import GlueSettings

from conftest import run_module


@pytest.fixture(scope="module")
def exported(glue_dir, one_block_preset, tmp_path_factory):
    """A cached run exported at its best epoch. One block, the one trained (the cache holds the embeddings): what the
    tests check, the export's files, its loading and its outputs, is the same at any depth."""
    root = tmp_path_factory.mktemp("export")
    config = GlueSettings(task="rte", preset=one_block_preset, trainable_layers=1, lr=1e-3, batch_size=8, max_epochs=2,
                       data_dir=glue_dir, max_seq_length=32, cache_frozen=True)
    summary = runner.run_glue(config, str(root / "run"), export_dir=str(root / "model"))
    return config, summary, root


def test_export_loads_with_from_preset_and_predicts_the_same(exported, glue_dir):
    config, summary, root = exported
    assert summary["exported"]["epoch"] == summary["best_epoch"]
    classifier, meta = export.load(str(root / "model"))
    digests = meta.pop("sha256")
    assert meta == {"task": "rte", "labels": ["entailment", "not_entailment"], "regression": False, "pair": True,
                    "text_columns": ["sentence1", "sentence2"], "label_column": "label", "max_seq_length": 32,
                    "padding": "bucket"}
    # Every file keras-hub wrote is recorded (and checked whenever the folder is read), the weights among them.
    assert "model.weights.h5" in digests and "config.json" in digests
    assert any(name.startswith("assets" + os.sep) for name in digests)
    dev = tasks.read_glue_split(tasks.get_task("rte"), glue_dir, "dev")
    outputs, predictions = export.predict(classifier, meta, dev.text_a, dev.text_b)
    accuracy = np.mean([meta["labels"].index(p) == y for p, y in zip(predictions, dev.labels)])
    # The exported model is the best epoch's: it scores what the summary recorded for that epoch on GLUE dev.
    assert accuracy == pytest.approx(summary["epochs"][summary["best_epoch"] - 1]["test"]["accuracy"])
    assert outputs.shape == (len(dev), 2)
    # Packed to each length group's length, or every row to the full length: the same outputs (padding is masked).
    padded, _ = export.predict(classifier, meta, dev.text_a, dev.text_b, bucket_step=10**6)
    assert np.abs(padded - outputs).max() < 1e-5
    # The second sentence of each pair is read: other second sentences give other outputs (a dataset of
    # (text_a, text_b) elements once gave Keras text_b as labels, and the model the first sentences alone).
    others, _ = export.predict(classifier, meta, dev.text_a, dev.text_b[1:] + dev.text_b[:1])
    assert np.abs(others - outputs).max() > 1e-6


def test_packed_scoring_gives_the_bucketed_outputs_in_the_rows_order(exported, glue_dir, monkeypatch):
    """Rows laid end to end (several to a row of 32 tokens: every other second sentence is one word), tokenized in
    chunks of 5 rows and batched by 4 so that chunks, batches and rows all cut across the file: the bucketed
    outputs, within float32 rounding (1e-5 on logits of order 0.1), so the same labels and probabilities, in the
    rows' order."""
    from tf_transfer.data import packing

    _, _, root = exported
    classifier, meta = export.load(str(root / "model"))
    dev = tasks.read_glue_split(tasks.get_task("rte"), glue_dir, "dev")
    text_b = [b if i % 2 else "yes" for i, b in enumerate(dev.text_b)]
    bucketed, labels = export.predict(classifier, meta, dev.text_a, text_b, batch_size=4)
    monkeypatch.setattr(export, "PACK_CHUNK_ROWS", 5)
    laid_out, features = [], packing.features  # (examples, rows) of every packed batch

    def recorded(*args, **kwargs):
        packed_batch = features(*args, **kwargs)
        laid_out.append((len(packed_batch["cls_positions"]), len(packed_batch["token_ids"])))
        return packed_batch

    monkeypatch.setattr(packing, "features", recorded)
    done = []
    packed, packed_labels = export.predict(classifier, meta, dev.text_a, text_b, batch_size=4, progress=done.append,
                                           padding="pack")
    assert [examples for examples, _ in laid_out] == [4, 1, 4, 1, 2]  # chunks of 5, batches of 4
    assert any(rows < examples for examples, rows in laid_out)  # rows shared: the packing is exercised
    np.testing.assert_allclose(packed, bucketed, rtol=0, atol=1e-5)
    assert packed_labels == labels
    np.testing.assert_allclose(export.probabilities(packed), export.probabilities(bucketed), rtol=0, atol=1e-5)
    assert done == sorted(done) and done[-1] == len(dev)
    with pytest.raises(export.TransferError, match="--padding=fixed: predict scores with one of bucket, pack"):
        export.predict(classifier, meta, dev.text_a, dev.text_b, padding="fixed")


def test_predict_entry_point_scores_a_tsv(exported, glue_dir, tmp_path):
    _, _, root = exported
    out = tmp_path / "predictions.tsv"
    done = run_module("tf_transfer.predict", f"--model={root / 'model'}", f"--input={glue_dir}/RTE/dev.tsv",
                      f"--output={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    with open(out) as f:
        rows = list(csv.reader(f, delimiter="\t"))
    # No id column in RTE's dev file: the row number from 0 (its `index` column is not taken for one).
    assert rows[0] == ["row", "label", "prob_entailment", "prob_not_entailment"] and len(rows) == 1 + 12
    assert [r[0] for r in rows[1:]] == [str(i) for i in range(12)]
    assert {r[1] for r in rows[1:]} <= {"entailment", "not_entailment"}
    bad = run_module("tf_transfer.predict", f"--model={root / 'model'}", f"--input={glue_dir}/CoLA/train.tsv")
    assert bad.returncode == 2 and "no column(s)" in bad.stderr
    # Packed scoring from the command: tests/studies/test_own_data.py (a run that packed, so predict packs).
    bad = run_module("tf_transfer.predict", f"--model={root / 'model'}", f"--input={glue_dir}/RTE/dev.tsv",
                     "--padding=fixed")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("error: --padding=fixed")
    json.loads((root / "model" / "tf_transfer_task.json").read_text())


def test_predict_for_a_pipeline_ids_probabilities_csv_and_json_lines(exported, glue_dir, tmp_path):
    """A Kaggle-style file: its id column carried to each output row, the label and a probability per label
    (summing to 1), CSV or JSON Lines by the output's extension, progress and a final line on stderr."""
    _, _, root = exported
    dev = tasks.read_glue_split(tasks.get_task("rte"), glue_dir, "dev")
    test = tmp_path / "test.csv"
    with open(test, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "sentence1", "sentence2"])
        writer.writerows([(f"x{i}", a, b) for i, (a, b) in enumerate(zip(dev.text_a, dev.text_b))])
    out = tmp_path / "out.csv"
    done = run_module("tf_transfer.predict", f"--export_dir={root / 'model'}", f"--input={test}", f"--output={out}",
                      "--batch_size=1")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = list(csv.DictReader(open(out)))
    assert list(rows[0]) == ["id", "label", "prob_entailment", "prob_not_entailment"]
    assert [r["id"] for r in rows] == [f"x{i}" for i in range(12)]
    for r in rows:
        probs = {"entailment": float(r["prob_entailment"]), "not_entailment": float(r["prob_not_entailment"])}
        assert sum(probs.values()) == pytest.approx(1, abs=1e-5) and r["label"] == max(probs, key=probs.get)
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("predict: wrote 12 rows (id, label, prob_entailment, ...) to ") and str(out) in lines[-1]
    # Batch size 1: the first batch's progress line, with the rate, comes before the end.
    assert any(line.startswith("predict: 1/12 rows (8%), ") and " rows/s" in line for line in lines[:-1]), lines
    jsonl = tmp_path / "out.jsonl"
    done = run_module("tf_transfer.predict", f"--export_dir={root / 'model'}", f"--input={test}",
                      f"--output={jsonl}", "--id_column=sentence1")
    assert done.returncode == 0, done.stderr[-3000:]
    objects = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [o["sentence1"] for o in objects] == dev.text_a
    assert {o["label"] for o in objects} <= {"entailment", "not_entailment"}
    bad = run_module("tf_transfer.predict", f"--export_dir={root / 'model'}", f"--input={test}", "--id_column=key")
    assert bad.returncode == 2 and "no column key for --id_column" in bad.stderr


# Run by the venv's Python in a fresh process where keras-hub and tf_transfer cannot be imported: the SavedModel
# must serve with TensorFlow and tensorflow-text alone (tensorflow_text itself imports Keras for its own layers).
STANDALONE = """
import json, sys
for name in ("keras_hub", "tf_transfer"):
    sys.modules[name] = None  # every later `import keras_hub...` raises ImportError
import tensorflow as tf
import tensorflow_text  # registers the tokenizer's ops
for name in ("keras_hub", "tf_transfer"):
    try:
        __import__(name)
        sys.exit(name + " was importable")
    except ImportError:
        pass
texts = json.load(sys.stdin)
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
outputs = serve(**{name: tf.constant(values) for name, values in texts.items()})
print(json.dumps({"inputs": sorted(serve.structured_input_signature[1]),
                  **{name: value.numpy().tolist() for name, value in outputs.items()}}, default=bytes.decode))
"""


def test_saved_model_serves_raw_strings_as_predict_without_keras_hub_or_tf_transfer(exported, glue_dir, tmp_path):
    """The finished run exported again as a SavedModel (no training), loaded in a process that cannot import
    keras-hub or tf_transfer and called on the raw dev pairs: predict's labels and probabilities (float32
    rounding), under inputs named as the training file's columns."""
    import subprocess
    import sys

    config, _, root = exported
    served = tmp_path / "served"
    summary = runner.export_finished(config, str(root / "run"), str(served), "saved_model")
    assert summary["exported"] == {"folder": str(served), "epoch": summary["best_epoch"]}
    classifier, meta = export.load(str(root / "model"))
    dev = tasks.read_glue_split(tasks.get_task("rte"), glue_dir, "dev")
    logits, labels = export.predict(classifier, meta, dev.text_a, dev.text_b)
    texts = {"sentence1": dev.text_a, "sentence2": dev.text_b}
    done = subprocess.run([sys.executable, "-c", STANDALONE, str(served)], input=json.dumps(texts), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = json.loads(done.stdout.strip().splitlines()[-1])
    assert outputs["inputs"] == ["sentence1", "sentence2"]
    assert outputs["label"] == labels
    np.testing.assert_allclose(outputs["probabilities"], export.probabilities(logits), rtol=0, atol=1e-5)
    assert outputs["label_names"] == [["entailment", "not_entailment"]] * len(dev)
    record = json.loads((served / "assets.extra" / "tf_transfer_task.json").read_text())
    assert record["inputs"] == ["sentence1", "sentence2"] and record["labels"] == ["entailment", "not_entailment"]
    # predict scores with either format: the SavedModel's rows as the preset folder's.
    out = tmp_path / "served.csv"
    done = run_module("tf_transfer.predict", f"--model={served}", f"--input={glue_dir}/RTE/dev.tsv", f"--output={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = list(csv.DictReader(open(out)))
    assert [r["label"] for r in rows] == labels
    np.testing.assert_allclose([[float(r["prob_entailment"]), float(r["prob_not_entailment"])] for r in rows],
                               export.probabilities(logits), rtol=0, atol=1e-5)


def test_glue_refuses_an_unknown_export_format_before_training(glue_dir, tmp_path):
    bad = run_module("tf_transfer.glue", "--task=rte", f"--data_dir={glue_dir}", f"--output_dir={tmp_path / 'run'}",
                     f"--export_dir={tmp_path / 'model'}", "--export_format=onnx")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == "error: --export_format=onnx: choose one of preset, saved_model"
    assert not (tmp_path / "run").exists()
