"""Your own data through the GLUE trainer: a CSV of texts and labels, a regression target, a sentence-pair file, with
and without the frozen-prefix cache; the same file read as GLUE's task and as a user's file gives the same numbers;
TFDS by name (mock data, offline); the exported classifier predicts the file's own labels; bad input is one line."""

import csv
import json
import os

import pytest

from conftest import SENTENCES, run_module, write_csv


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    root = tmp_path_factory.mktemp("own")
    rows = [(f"{SENTENCES[i % len(SENTENCES)]}, {SENTENCES[(i * 3) % len(SENTENCES)]}", ("bad", "good", "ok")[i % 3],
             (i * 0.37) % 5, SENTENCES[(i * 7 + 1) % len(SENTENCES)]) for i in range(48)]
    return {
        "labels": write_csv(root / "reviews.csv", ["review", "stars"], [(t, label) for t, label, _, _ in rows]),
        "scores": write_csv(root / "scores.csv", ["review", "score"], [(t, score) for t, _, score, _ in rows]),
        "pairs": write_csv(root / "pairs.csv", ["title_a", "title_b", "same"],
                           [(t, b, label) for t, label, _, b in rows]),
        "root": root,
    }


def _train(one_block_preset, out, *flags):
    # The cache as asked (a first run on a user's file caches whatever is frozen unless told: test_first_day.py).
    cache = [] if any("cache_frozen" in f for f in flags) else ["--cache_frozen=false"]
    done = run_module("tf_transfer.glue", f"--preset={one_block_preset}", "--trainable_layers=1", "--max_epochs=2",
                      "--batch_size=8", "--lr=1e-3", "--max_seq_length=32", f"--output_dir={out}", *cache, *flags)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


LABELS = ("--text_columns=review", "--label_column=stars")


@pytest.fixture(scope="module")
def exported_run(reviews, one_block_preset, tmp_path_factory):
    """The reviews file's labels trained without the cache and exported: one run that both the training checks
    and the exported classifier's predictions read (tests that use it carry `SHARED_RUN`)."""
    root = tmp_path_factory.mktemp("exported_run")
    summary = _train(one_block_preset, root / "run", f"--train_file={reviews['labels']}", *LABELS,
                     f"--export_dir={root / 'model'}")
    return {"summary": summary, "model": root / "model"}


# The tests that read `exported_run` share one test process, so that its run trains once in the suite.
SHARED_RUN = pytest.mark.xdist_group("own_data_exported_run")


def _assert_trained_on_the_labels(summary, cache: bool) -> None:
    assert summary["completed"] and summary["task"] == "reviews" and summary["labels"] == ["bad", "good", "ok"]
    assert summary["dataset"]["kind"] == "multiclass" and summary["metric"] == "accuracy"
    assert set(summary["epochs"][0]["val"]) == {"accuracy", "macro_f1"} and summary["epochs"][0]["test"] == {}
    assert summary["examples"] == {"train": 43, "validation": 5}  # a seeded, stratified tenth held out
    assert summary["cache_frozen"] is cache and summary["peak_memory_mb"] > 0


@SHARED_RUN
def test_a_csv_of_texts_and_string_labels_trains(exported_run):
    _assert_trained_on_the_labels(exported_run["summary"], cache=False)


def test_a_numeric_target_trains_as_regression_scored_by_spearman(reviews, one_block_preset, tmp_path):
    summary = _train(one_block_preset, tmp_path / "run", f"--train_file={reviews['scores']}", "--text_columns=review",
                     "--label_column=score", "--regression", "--cache_frozen", f"--test_file={reviews['scores']}")
    assert summary["metric"] == "spearman" and summary["labels"] is None
    assert set(summary["epochs"][-1]["test"]) == {"spearman", "pearson", "mse"}


def test_a_sentence_pair_file_with_its_own_validation_file_and_positive_label(reviews, one_block_preset, tmp_path):
    binary = write_csv(tmp_path / "binary.csv", ["title_a", "title_b", "same"],
                       [r for r in csv.reader(open(reviews["pairs"]))][1:][:40])
    rows = [r for r in csv.reader(open(binary))][1:]
    two = write_csv(tmp_path / "two.csv", ["title_a", "title_b", "same"],
                    [(a, b, "good" if s == "good" else "no") for a, b, s in rows])
    summary = _train(one_block_preset, tmp_path / "run", f"--train_file={two}", "--text_columns=title_a,title_b",
                     "--label_column=same", f"--validation_file={two}", "--positive_label=good", "--metric=f1")
    assert summary["labels"] == ["no", "good"] and summary["metric"] == "f1"
    assert summary["examples"]["validation"] == 40 and summary["dataset"]["text_columns"] == ["title_a", "title_b"]


def test_a_glue_file_read_as_a_users_file_gives_the_glue_tasks_numbers(glue_dir, one_block_preset, tmp_path):
    # Packed as a user's file's first run is.
    glue = _train(one_block_preset, tmp_path / "glue", "--task=sst2", f"--data_dir={glue_dir}", "--padding=pack")
    own = _train(one_block_preset, tmp_path / "own", f"--train_file={glue_dir}/SST-2/train.tsv",
                 f"--test_file={glue_dir}/SST-2/dev.tsv", "--text_columns=sentence", "--label_column=label")
    assert [e["loss"] for e in own["epochs"]] == [e["loss"] for e in glue["epochs"]]
    assert [e["val"]["accuracy"] for e in own["epochs"]] == [e["val"]["accuracy"] for e in glue["epochs"]]
    assert [e["test"]["accuracy"] for e in own["epochs"]] == [e["test"]["accuracy"] for e in glue["epochs"]]


def test_tfds_by_name_with_mock_data(one_block_preset, tmp_path):
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=24):
        summary = _train(one_block_preset, tmp_path / "run", "--task=tfds:glue/rte", "--text_columns=sentence1,sentence2",
                         "--label_column=label", "--test_split=validation")
    assert summary["task"] == "tfds_glue_rte" and summary["labels"] == ["entailment", "not_entailment"]
    assert summary["examples"] == {"train": 22, "validation": 2, "test/test": 24}


@SHARED_RUN
def test_the_exported_classifier_predicts_the_files_labels(reviews, exported_run, tmp_path):
    out = tmp_path / "predictions.tsv"
    done = run_module("tf_transfer.predict", f"--model={exported_run['model']}", f"--input={reviews['labels']}",
                      f"--output={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = list(csv.reader(open(out), delimiter="\t"))
    assert rows[0] == ["row", "label", "prob_bad", "prob_good", "prob_ok"]
    assert len(rows) == 49 and {r[1] for r in rows[1:]} <= {"bad", "good", "ok"}
    # The run packed (a first run's default), so predict packed too.
    assert json.loads((exported_run["model"] / "tf_transfer_task.json").read_text())["padding"] == "pack"


@pytest.mark.parametrize("flags, fragment", [
    (["--task=rte", "--train_file={labels}"], "give --task (a GLUE task, or tfds:<name>) or --train_file"),
    (["--train_file={labels}", "--text_columns=text", "--label_column=stars"], "no column(s) 'text' in the header"),
    (["--train_file={labels}", "--text_columns=review", "--label_column=stars", "--regression"],
     "label 'bad' is not a number"),
    (["--train_file={labels}", "--text_columns=review"], "needs --text_columns (one column, or two"),
    (["--train_file={labels}", "--text_columns=review", "--label_column=stars", "--metric=f1"],
     "--metric=f1 is not computed for reviews's 3 labels"),
    (["--task=sst2", "--label_column=x"], "--label_column is for your own data"),
])
def test_bad_input_is_one_error_line_and_exit_2(reviews, tmp_path, flags, fragment):
    out = tmp_path / "run"
    done = run_module("tf_transfer.glue", "--preset=unused", f"--output_dir={out}",
                      *[f.format(labels=reviews["labels"]) for f in flags])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and fragment in errors[0], done.stderr[-2000:]
    assert not os.path.exists(out / "summary.json")


def test_freezing_grid_over_a_users_file_runs_resumes_and_reports(reviews, one_block_preset, tmp_path):
    """Every depth of the preset (k = 0, 1 of its one block) and full fine-tuning on the file, one seed; a run killed
    mid-grid is trained again by the rerun and the finished ones are not; the report has the table, figure and CSV.
    Its k = 1 run is the file's labels trained over the cache (the embeddings frozen and cached, as a first run on a
    user's file caches what is frozen), as the exported run trains them without."""
    common = ["freezing", f"--train_file={reviews['labels']}", "--text_columns=review", "--label_column=stars",
              f"--presets={one_block_preset}", "--seeds=0", "--lrs=1e-3", "--max_epochs=1", "--max_seq_length=32",
              f"--runs_dir={tmp_path / 'runs'}"]
    listed = run_module("tf_transfer.experiments", "run", *common, "--dry_run")
    assert listed.stdout.strip().splitlines()[-1] == "3 runs (3 in the whole grid)"
    assert "trainable_layers=0 " in listed.stdout and "trainable_layers=all " in listed.stdout
    # The three runs in this process (--noisolate_runs); the rerun below trains its run in a child, the default.
    first = run_module("tf_transfer.experiments", "run", *common, "--noisolate_runs")
    assert first.returncode == 0 and "3 ran" in first.stdout, first.stderr[-3000:]
    # As a kill leaves it: one run's summary unfinished, its checkpoint gone.
    summaries = sorted((tmp_path / "runs").rglob("summary.json"))
    killed = json.loads(summaries[0].read_text())
    killed.update(completed=False, epochs=[])
    summaries[0].write_text(json.dumps(killed))
    again = run_module("tf_transfer.experiments", "run", *common)
    assert again.returncode == 0 and "1 ran, 2 already completed" in again.stdout, again.stdout[-2000:]
    (last_block,) = [s for s in map(json.loads, (p.read_text() for p in summaries)) if s["trainable_layers"] == 1]
    _assert_trained_on_the_labels(last_block, cache=True)
    report = run_module("tf_transfer.experiments", "report", *common, f"--out={tmp_path / 'report'}")
    assert report.returncode == 0, report.stderr[-3000:]
    text = (tmp_path / "report" / "README.md").read_text()
    assert "# How much of" in text and "| all (full fine-tuning) |" in text and "| last 1 |" in text
    assert "peak memory (MB)" in text and (tmp_path / "report" / "score_vs_time.png").stat().st_size > 1000
    assert "| beats constant |" in text  # and which runs do not, where some do not (test_first_day.py)
    assert len((tmp_path / "report" / "runs.csv").read_text().splitlines()) == 4
