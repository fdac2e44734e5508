"""`experiments table`: one row per summary.json, compared with the task's fine-tuning (no TensorFlow needed)."""

import csv
import glob
import json
import os

import pytest

from tf_transfer.core.errors import TransferError
from tf_transfer.reporting import runs_table

from conftest import REPO


def _epoch(train_time_s, val, test):
    return {"train_time_s": train_time_s, "val": {"accuracy": val}, "test": test}


def _glue(folder, layers, lr, seed, epochs, best, completed=True, task="rte", **extra):
    """A tf_transfer.glue summary; `epochs` are (cumulative train seconds, validation score, test score)."""
    test = (lambda score: score) if task == "mnli" else (lambda score: {"accuracy": score})
    summary = {"task": task, "preset": "p", "trainable_layers": layers, "lr": lr, "batch_size": 32, "seed": seed,
               "metric": "accuracy", "epochs": [_epoch(t, v, test(s)) for t, v, s in epochs], "best_epoch": best,
               "completed": completed, "config": {"task": task, "trainable_layers": layers, "lr": lr, "seed": seed,
                                                  "data_dir": f"/data{seed}"}, **extra}
    _write(folder, summary)


def _write(folder, summary):
    os.makedirs(folder)
    with open(os.path.join(folder, "summary.json"), "w") as f:
        f.write(summary if isinstance(summary, str) else json.dumps(summary))


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    # The reference setting: fine-tuning at 2e-5 (mean validation 0.7), seeds 0 and 2.
    _glue(root / "rte/ft_2e-5/seed0", "all", 2e-5, 0, [(100, 0.6, 0.5), (200, 0.8, 0.75), (300, 0.7, 0.7)], 2)
    _glue(root / "rte/ft_2e-5/seed2", "all", 2e-5, 2, [(300, 0.6, 0.5)], 1)
    # A better test score, but a worse validation score: not the reference.
    _glue(root / "rte/ft_1e-3/seed0", "all", 1e-3, 0, [(50, 0.5, 0.9)], 1)
    # Transfer runs: seed 0 meets the reference's seed 0; seed 1 has none, so the mean of seeds 0 and 2.
    _glue(root / "rte/k2/seed0", 2, 1e-3, 0, [(20, 0.6, 0.5), (40, 0.7, 0.625)], 2, cache_time_s=10.0,
          cache_build_s=30.0)
    _glue(root / "rte/k2/seed1", 2, 1e-3, 1, [(100, 0.7, 0.625)], 1, cache_time_s=25.0)
    _glue(root / "rte/k1/seed0", 1, 1e-3, 0, [(10, 0.5, 0.5)], 1, completed=False)
    _glue(root / "rte/k1/seed1", 1, 1e-3, 1, [], None, completed=False)
    _glue(root / "mnli/k2/seed0", 2, 1e-3, 0,
          [(60, 0.7, {"dev_matched": {"accuracy": 0.8}, "dev_mismatched": {"accuracy": 0.75}})], 1, task="mnli")
    _write(root / "multitask/li", {"task": "multitask", "trainable_layers": "all", "metric": "overall",
                                   "epochs": [{"train_time_s": 9.0, "test": {"overall": 0.5}}], "best_epoch": 1,
                                   "completed": True})
    _write(root / "stack/linear_stack_only", {"task": "quora", "metric": "accuracy", "best_epoch": 1,
                                              "epochs": [{"train_time_s": 5.0, "test": None}], "completed": True})
    _write(root / "sentiment/bert_top2_cls.in_progress", {"seed": 0, "epochs": [], "completed": False})
    _write(root / "broken", '{"task": "rte", "epochs": [')  # truncated mid-write
    return str(root)


def test_rows_compare_with_the_fine_tuning_setting_of_best_validation(runs):
    table = runs_table.collect(runs)
    rows = {row["run"]: row for row in table.rows}
    assert table.skipped == 1 and len(rows) == 10
    assert table.unreadable == [os.path.join(runs, "broken", "summary.json") + " (JSONDecodeError: Expecting value: "
                                "line 1 column 28 (char 27))"]
    same_seed = rows[os.path.join("rte", "k2", "seed0")]
    assert same_seed["time_to_best_s"] == 40 + 30  # the cache's build, not the time this run spent reading it
    assert same_seed["time_saved_pct"] == 65.0  # against seed 0's 200 s
    assert same_seed["score_diff"] == 0.625 - 0.75
    other_seed = rows[os.path.join("rte", "k2", "seed1")]
    assert other_seed["time_saved_pct"] == 50.0  # 125 s against the mean of 200 s and 300 s
    assert other_seed["score_diff"] == 0.0  # 0.625 against the mean of 0.75 and 0.5
    assert rows[os.path.join("rte", "ft_1e-3", "seed0")]["time_saved_pct"] == 75.0
    assert len(table.references) == 1 and "lr 2e-05" in table.references[0] and "2 run(s)" in table.references[0]


def test_runs_on_other_data_are_compared_with_fine_tuning_on_their_own_data(tmp_path):
    root = tmp_path / "runs"
    small = {"max_train_examples": 1000}
    _glue(root / "full/ft/seed0", "all", 2e-5, 0, [(300, 0.8, 0.8)], 1)
    _glue(root / "full/k2/seed0", 2, 1e-3, 0, [(100, 0.7, 0.7)], 1)
    _glue(root / "small/ft/seed0", "all", 2e-5, 0, [(40, 0.9, 0.6)], 1)
    _glue(root / "small/k2/seed0", 2, 1e-3, 0, [(10, 0.6, 0.55)], 1)
    for folder in ("small/ft/seed0", "small/k2/seed0"):  # the same task and preset, trained on 1,000 examples
        path = root / folder / "summary.json"
        summary = json.loads(path.read_text())
        summary["config"].update(small)
        path.write_text(json.dumps(summary))
    table = runs_table.collect(str(root))
    rows = {row["run"]: row for row in table.rows}
    assert rows[os.path.join("full", "k2", "seed0")]["time_saved_pct"] == pytest.approx(100 * 200 / 300)
    assert rows[os.path.join("small", "k2", "seed0")]["time_saved_pct"] == pytest.approx(75.0)
    assert rows[os.path.join("small", "k2", "seed0")]["score_diff"] == pytest.approx(0.55 - 0.6)
    assert len(table.references) == 2 and "(p; max_train_examples 1000)" in table.references[1]


def test_unfinished_mnli_and_other_kinds_are_rows_without_a_comparison(runs):
    rows = {row["run"]: row for row in runs_table.collect(runs).rows}
    for name in ("k1/seed0", "k1/seed1"):
        row = rows[os.path.join("rte", *name.split("/"))]
        assert row["status"] == "unfinished" and row["time_saved_pct"] is None and row["score_diff"] is None
    assert rows[os.path.join("rte", "k1", "seed1")]["score"] is None
    mnli = rows[os.path.join("mnli", "k2", "seed0")]
    assert (mnli["score"], mnli["score_mismatched"], mnli["time_saved_pct"]) == (0.8, 0.75, None)  # no reference
    assert "0.800 (mm 0.750)" in runs_table._cells(mnli)
    multitask, stack = rows[os.path.join("multitask", "li")], rows[os.path.join("stack", "linear_stack_only")]
    assert (multitask["score"], multitask["best_epoch"], multitask["time_saved_pct"]) == (0.5, 1, None)
    assert (stack["score"], stack["time_to_best_s"]) == (None, 5.0)


def test_bad_folders_are_refused(tmp_path):
    with pytest.raises(TransferError, match="does not exist"):
        runs_table.collect(str(tmp_path / "nowhere"))
    with pytest.raises(TransferError, match="no summary.json"):
        runs_table.collect(str(tmp_path))


def test_command_prints_and_writes_csv_and_markdown(runs, tmp_path, capsys):
    from absl import flags

    from tf_transfer import experiments

    out = str(tmp_path / "table" / "runs")
    flags.FLAGS(["experiments", f"--out={out}"])
    try:
        experiments.main(["experiments", "table", runs])
    finally:
        flags.FLAGS["out"].unparse()
    printed = capsys.readouterr().out
    assert "10 runs (2 unfinished)" in printed and "1 summaries of other kinds skipped; 1 unreadable" in printed
    assert os.path.join(runs, "broken", "summary.json") in printed  # named, not hidden among the skipped
    with open(out + ".csv") as f:
        written = list(csv.DictReader(f))
    assert len(written) == 10 and list(written[0]) == list(runs_table.COLUMNS)
    with open(out + ".md") as f:
        assert f.read().startswith("| run ")


def test_the_committed_runs_are_one_table():
    root = os.path.join(REPO, "reports", "runs")
    table = runs_table.collect(root)
    found = glob.glob(os.path.join(root, "**", "summary.json"), recursive=True)
    assert len(table.rows) == len(found) >= 120 and table.skipped == 0
    assert all(row["score"] is not None and row["time_saved_pct"] is not None for row in table.rows)
    # One per task and data: cola, mrpc, rte and stsb on 90% of GLUE train (transfer learning, and RTE's line search
    # of the layer-freezing study), rte and stsb on all of it (the layer-freezing sweep), the five tasks of the
    # methods study on 1,000 examples, and each task of the full-budget methods study with a finished full
    # fine-tuning run on data of its own (SST-2's 5,000; the others share 90% of GLUE train with transfer learning),
    # and likewise the adaptive-freezing study's (SST-2's 10,000; MRPC and STS-B share 90% of GLUE train).
    def has_full_fine_tuning(study):
        return bool(glob.glob(os.path.join(root, study, "sst2", "kall_*", "seed*", "summary.json")))

    own_sst2 = has_full_fine_tuning("methods_full") + has_full_fine_tuning("adaptive_freezing")
    assert len(table.references) == 11 + own_sst2
    assert sum("max_train_examples 1000," in line for line in table.references) == 5


def test_a_users_file_without_a_test_file_is_compared_by_validation_with_its_full_fine_tuning(tmp_path):
    root = tmp_path / "runs"

    def own(folder, layers, epochs, sha256):
        _glue(root / folder, layers, 1e-4, 0, epochs, 1, task="tweets", method="freeze",
              dataset={"files": {"train_file": {"path": "/data/train.csv", "sha256": sha256}}})

    own("sweep/reference/freeze_kall_lr0.0001/seed0", "all", [(200, 0.8, None)], "a" * 64)
    own("sweep/freeze_k2_lr0.0001/seed0", 2, [(50, 0.75, None)], "a" * 64)
    own("other/freeze_k2_lr0.0001/seed0", 2, [(50, 0.7, None)], "b" * 64)  # another file of the same name
    table = runs_table.collect(str(root))
    rows = {row["run"].split(os.sep)[0]: row for row in table.rows}
    reference = [row for row in table.rows if row["trainable_layers"] == "all"][0]
    assert reference["method"] == "full fine-tuning" and reference["validation_score"] == 0.8
    compared = [row for row in table.rows if row["run"].startswith("sweep" + os.sep + "freeze")][0]
    assert compared["time_saved_pct"] == 75.0 and compared["score_diff"] == pytest.approx(0.75 - 0.8)
    assert rows["other"]["time_saved_pct"] is None and rows["other"]["score_diff"] is None
    assert len(table.references) == 1 and "(p; train_file aaaaaaaa)" in table.references[0]
    text = runs_table.render(table, str(root))
    assert "validation score" in text.splitlines()[0] and "Full fine-tuning references" in text
