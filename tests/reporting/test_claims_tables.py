"""Every study report opens with its claims table: within the first 60 lines of its README, a Markdown table whose
first column is headed `claim`, each row with the paper's number, ours, a verdict and its basis."""

import os

import pytest

from conftest import REPO

VERDICTS = {"reproduced", "not reproduced", "inconclusive"}


@pytest.mark.parametrize("study", ["transfer_learning", "layer_freezing", "sentiment", "stack_quora", "multitask"])
def test_report_opens_with_a_claims_table(study):
    with open(os.path.join(REPO, "reports", study, "README.md"), encoding="utf-8") as f:
        lines = f.read().split("\n")[:60]
    header = next(i for i, line in enumerate(lines) if line.replace(" ", "").startswith("|claim|"))
    rows = []
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.replace("\\|", "").strip("|").split("|")])
    assert rows and all(len(row) == 5 for row in rows), rows
    assert {row[3] for row in rows} <= VERDICTS
