"""Every study report opens with its claims table: within the first 60 lines of its README, a Markdown table whose
first column is headed `claim`, each row with the paper's number, ours, a verdict and its basis. The basis names where
the claim's margin comes from (`claims.source_of`), the verdict is a word of that source's vocabulary
(`claims.vocabulary`), and every decided one states the interval it rests on."""

import os
import re

import pytest

from conftest import REPO
from tf_transfer.core import stats
from tf_transfer.reporting import claims

STUDIES = ["transfer_learning", "layer_freezing", "sentiment", "stack_quora", "multitask", "methods",
           "adaptive_freezing", "methods_paired", "stack_conll"]
# An interval as `stats.Interval.text` writes it: `-1.6 [-5.8, +2.7]`, in any unit.
INTERVAL = re.compile(r"\[[+\-−]?[0-9.]+[^\],]*, [+\-−]?[0-9.]+[^\]]*\]")


def _rows(study):
    with open(os.path.join(REPO, "reports", study, "README.md"), encoding="utf-8") as f:
        lines = f.read().split("\n")[:60]
    header = next(i for i, line in enumerate(lines) if line.replace(" ", "").startswith("|claim|"))
    rows = []
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.replace("\\|", "").strip("|").split("|")])
    return rows


@pytest.mark.parametrize("study", STUDIES)
def test_report_opens_with_a_claims_table(study):
    rows = _rows(study)
    assert rows and all(len(row) == 5 for row in rows), rows
    assert {row[3] for row in rows} <= set(claims.VERDICTS)


@pytest.mark.parametrize("study", STUDIES)
def test_every_verdict_is_worded_by_its_margins_source(study):
    for claim, _, ours, verdict, basis in _rows(study):
        source = claims.source_of(basis)
        assert source, f"{study}: '{claim}' does not say where its margin comes from"
        assert verdict in claims.vocabulary(source), f"{study}: '{claim}' reads {verdict!r} for a {source} margin"
        assert stats.NOT_REPRODUCED not in re.sub(claims.NOT_REPRODUCED_AT_PROTOCOL, "", ours), (study, claim)


@pytest.mark.parametrize("study", STUDIES)
def test_every_decided_verdict_states_its_interval(study):
    for claim, _, ours, verdict, basis in _rows(study):
        if verdict not in claims.UNDECIDED:
            assert INTERVAL.search(ours + " " + basis), f"{study}: '{claim}' is {verdict} without an interval"
