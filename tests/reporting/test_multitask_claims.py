"""The multi-task study's claims table (`tf_transfer/reporting/multitask_claims.py`): the constant prediction it is
gated on, computed from CS224N files and kept beside the runs, the verdicts on made-up rows, and the committed
report regenerated from the committed runs and that file alone (a fresh clone has no data)."""

import json
import os
import shutil

import numpy as np
import pytest

from conftest import REPO
from experiments import li_multitask
from tf_transfer.core import stats
from tf_transfer.core.errors import TransferError
from tf_transfer.data import cs224n
from tf_transfer.reporting import multitask_claims
from tf_transfer.studies import grid as studies

RUNS = os.path.join(REPO, "reports", "multitask", "runs")


def _write(path, header, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join([header, *rows]) + "\n")


def _cs224n(root, sst_train, sst_dev, quora):
    """CS224N files in their layout (tab-separated, an unnamed index column first, no quora-train.csv)."""
    for split, labels in (("train", sst_train), ("dev", sst_dev)):
        _write(f"{root}/ids-sst-{split}.csv", "\tid\tsentence\tsentiment",
               [f"{i}\tid{i}\tsentence {i}\t{label}" for i, label in enumerate(labels)])
        _write(f"{root}/sts-{split}.csv", "\tid\tsentence1\tsentence2\tsimilarity",
               [f"{i}\tid{i}\tone {i}\ttwo {i}\t{i % 5}.0" for i in range(6)])
    _write(f"{root}/quora-dev.csv", "\tid\tsentence1\tsentence2\tis_duplicate",
           [f"{i}\tid{i}\tq {i}\tr {i}\t{label}.0" for i, label in enumerate(quora)])
    return str(root)


def test_the_constant_predicts_the_majority_of_the_examples_the_runs_trained_on(tmp_path):
    # SST: the first 4 training examples' majority is class 2, the whole training set's class 4.
    data_dir = _cs224n(tmp_path, [2, 2, 2, 1, 4, 4, 4, 4, 4, 4], [2, 2, 4, 0], [0] * 18 + [1, 1])
    config = {"data_format": "cs224n", "split_seed": 0, "quora_dev_fraction": 0.2, "max_train_examples": 4}
    found = multitask_claims.constant_prediction(config, data_dir)
    sst, para, sts = (found["tasks"][t] for t in ("sst", "para", "sts"))
    assert (sst["predicts"], sst["score"], sst["train_examples"]) == (2, 0.5, 4)
    dev = cs224n.load(data_dir).tasks["para"].dev.labels
    assert para["predicts"] == 0 and para["score"] == pytest.approx(float(np.mean(dev == 0)))
    assert sts["score"] == 0.0
    assert found["overall"] == pytest.approx((0.5 + para["score"] + 0.5) / 3)
    assert set(found["files"]) == {"ids-sst-train.csv", "ids-sst-dev.csv", "quora-dev.csv", "sts-train.csv",
                                   "sts-dev.csv"} and all(len(sha) == 64 for sha in found["files"].values())
    whole = multitask_claims.constant_prediction({**config, "max_train_examples": None}, data_dir)
    assert (whole["tasks"]["sst"]["predicts"], whole["tasks"]["sst"]["score"]) == (4, 0.25)
    with pytest.raises(TransferError, match="does not exist"):
        multitask_claims.constant_prediction(config, str(tmp_path / "nowhere"))


def _summary(sst, para, sts, seed=0):
    overall = (sst + para + (sts + 1) / 2) / 3
    return {"seed": seed, "best_epoch": 1, "epochs": [{"test": {"sst_accuracy": sst, "paraphrase_accuracy": para,
                                                                "sts_pearson": sts, "overall": overall}}]}


CONSTANT = {"overall": (0.25 + 0.6 + 0.5) / 3, "tasks": {"sst": {"score": 0.25}, "para": {"score": 0.6},
                                                        "sts": {"score": 0.0}}}


def _rows(seeds, full_sst=0.25):
    """Every row of the grid over `seeds`; the fine-tuned rows learn STS, heads first learns paraphrase too."""
    return {row: [_summary(0.25 if row != "li_finetune" else full_sst,
                           0.65 if row == "li_heads_then_finetune" else 0.6,
                           -0.6 if row == "li_heads_first" else 0.2 + 0.01 * seed + 0.005 * (row == "li_concat"),
                           seed) for seed in seeds] for row in li_multitask.ROWS}


def test_claims_are_not_testable_while_full_fine_tuning_is_within_10_points_of_the_constant():
    found = multitask_claims.claims_of(_rows([0]), CONSTANT)
    assert [c.verdict for c in found] == [stats.NOT_TESTABLE] * 7 + [stats.NOT_RUN] * 2
    assert "full fine-tuning is 3.3 points above the constant prediction on dev (under 10), and one seed gives no " \
           "interval" in found[0].basis_cell()
    # The summed row scores as the sequential one (neither way); the packed pair is ahead of SBERT (the other way).
    assert "+0.000, neither way" in found[5].basis and "the other way by 0.001" in found[6].basis


def test_testable_claims_are_decided_on_the_interval_over_seeds():
    one = multitask_claims.claims_of(_rows([0], full_sst=0.6), CONSTANT)
    assert "full fine-tuning is 15.0 points above" in one[0].basis and one[0].verdict == stats.INCONCLUSIVE
    three = multitask_claims.claims_of(_rows([0, 1, 2], full_sst=0.6), CONSTANT)
    frozen_weakest = three[0]
    assert frozen_weakest.verdict == stats.REPRODUCED and "per comparison: overall li_finetune − li_heads_first" \
        in frozen_weakest.basis
    assert multitask_claims.claims_of({}, None)[0].verdict == stats.NOT_RUN


def test_a_fresh_clone_regenerates_the_committed_report_from_the_runs_and_the_constant_file(tmp_path):
    """No --data_dir: the constant comes from the committed file, and the README's generated blocks come out as
    committed (the hand-written rest untouched)."""
    runs, out = tmp_path / "runs", tmp_path / "report"
    shutil.copytree(RUNS, runs)
    out.mkdir()
    committed = os.path.join(REPO, "reports", "multitask", "README.md")
    shutil.copy(committed, out / "README.md")
    (out / "README.md").write_text(multitask_claims.with_blocks(
        (out / "README.md").read_text(), {"claims table": ["stale"], "rows' table": ["stale"]}))
    grid = li_multitask.GRID
    collected = studies.collect(grid, grid.runs("cpu"), str(runs))
    assert grid.report(collected, str(out), grid, "cpu") == str(out / "README.md")
    with open(committed, encoding="utf-8") as f:
        assert (out / "README.md").read_text() == f.read()
    with open(runs / multitask_claims.FILE) as f:
        assert "--data_dir=" in json.load(f)["command"]
    # A folder without the README's blocks gets the two tables as files of their own.
    assert grid.report(collected, str(tmp_path / "scratch"), grid, "cpu") == str(tmp_path / "scratch")
    assert (tmp_path / "scratch" / "claims.md").read_text().count("| not testable at this budget |") == 7
