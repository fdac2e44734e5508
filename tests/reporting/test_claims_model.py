"""The claims model every report's claims table is built from (`tf_transfer/reporting/claims.py`)."""

import pytest

from tf_transfer.core import stats
from tf_transfer.reporting import claims


def test_a_claim_takes_only_the_statistics_modules_verdicts():
    with pytest.raises(ValueError, match="verdict must be one of"):
        claims.Claim("saves time", "30%", "+40%", "probably", "made up")


def test_a_claim_with_no_runs_reads_not_run_yet_and_a_pending_task_keeps_it_open():
    assert claims.not_run("saves time", "30%", "no runs").row()[2:4] == [stats.NOT_RUN, stats.NOT_RUN]
    untestable = {"mrpc": None}  # the only task run is not testable; rte has not run
    found = claims.as_good_as(untestable, 0.01, pending=["rte"])
    assert found.verdict == stats.INCONCLUSIVE  # rte may still be testable
    assert found.cells(order=["mrpc", "rte"]) == "mrpc not testable at this budget; rte not run yet"
    assert claims.as_good_as(untestable, 0.01).verdict == stats.NOT_TESTABLE
