"""The committed grid runs are the grids' own: every summary under `reports/runs/<study>` is a run its report reads
(or a stand-in it reads), so `tensorboard --logdir reports/runs` shows what the reports are made of. Runs a rerun
superseded leave the folder; git keeps them."""

import glob
import os

import pytest

from conftest import REPO
from experiments import load_grid
from tf_transfer.studies import grid

RUNS = os.path.join(REPO, "reports", "runs")


@pytest.mark.parametrize("name", ["transfer_learning", "layer_freezing", "methods", "adaptive_freezing"])
def test_every_committed_run_is_one_its_report_reads(name):
    study = load_grid(name)
    read = set()
    for entry in grid.collect(study, study.runs("cpu"), RUNS):
        read.add(os.path.normpath(entry["folder"]))
        if entry["stand_in"]:
            read.add(os.path.normpath(entry["stand_in"]["folder"]))
    committed = {os.path.normpath(os.path.dirname(path))
                 for path in glob.glob(os.path.join(RUNS, name, "*", "*", "*", "summary.json"))}
    assert committed and not committed - read, sorted(committed - read)[:5]
