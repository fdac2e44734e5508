"""The claims model every report's claims table is built from (`tf_transfer/reporting/claims.py`)."""

import pytest

from tf_transfer.core import stats
from tf_transfer.reporting import claims


def test_a_claim_takes_only_the_statistics_modules_verdicts():
    with pytest.raises(ValueError, match="verdict must be one of"):
        claims.Claim("saves time", "30%", "+40%", "probably", "made up")


def test_a_claim_with_no_runs_reads_not_run_yet_and_a_pending_task_keeps_it_open():
    assert claims.not_run("saves time", "30%", "no runs", source=claims.TARGET).row()[2:4] == [stats.NOT_RUN,
                                                                                               stats.NOT_RUN]
    untestable = {"mrpc": None}  # the only task run is not testable; rte has not run
    found = claims.as_good_as(untestable, 0.01, pending=["rte"])
    assert found.verdict == stats.INCONCLUSIVE  # rte may still be testable
    assert found.cells(order=["mrpc", "rte"]) == "mrpc not testable at this budget; rte not run yet"
    assert claims.as_good_as(untestable, 0.01).verdict == stats.NOT_TESTABLE


def test_a_claims_verdict_reads_in_the_words_of_its_margins_source():
    def claim(verdict, source, protocol="MiniLM on a CPU"):
        return claims.Claim("scores as full does", "-0.1", "sst2 not reproduced: -2.0 [-3.0, -1.0]", verdict,
                            "reproduced where above -1", source=source, protocol=protocol)

    assert claim("not reproduced", claims.PAPER).verdict == claims.CONTRADICTED
    at_protocol = claim("not reproduced", claims.PAPER_AT_PROTOCOL)
    assert at_protocol.verdict == claims.NOT_REPRODUCED_AT_PROTOCOL
    assert at_protocol.ours == "sst2 not reproduced at this protocol: -2.0 [-3.0, -1.0]"
    assert at_protocol.row()[4].startswith("the paper's claim at a smaller protocol (MiniLM on a CPU); ")
    target = claim("not reproduced", claims.TARGET)
    assert (target.verdict, target.ours) == (stats.TARGET_MISSED, "sst2 target missed: -2.0 [-3.0, -1.0]")
    assert target.row()[4] == "this project's target; target met where above -1"
    assert claim(stats.INCONCLUSIVE, claims.TARGET).verdict == stats.INCONCLUSIVE


@pytest.mark.parametrize("verdict, source", [(stats.TARGET_MET, claims.PAPER), (claims.CONTRADICTED, claims.TARGET),
                                             (claims.CONTRADICTED, claims.PAPER_AT_PROTOCOL),
                                             (claims.NOT_REPRODUCED_AT_PROTOCOL, claims.PAPER)])
def test_a_claim_worded_for_another_margin_source_is_refused(verdict, source):
    with pytest.raises(ValueError, match="is not a word for a claim whose margin is"):
        claims.Claim("saves time", "30%", "+40%", verdict, "rule", source=source, protocol="MiniLM")


def test_a_claim_declares_its_margins_source_and_a_smaller_protocol_names_it():
    with pytest.raises(ValueError, match="margin source must be one of"):
        claims.Claim("saves time", "30%", "+40%", stats.REPRODUCED, "rule")
    with pytest.raises(ValueError, match="names it"):
        claims.Claim("saves time", "30%", "+40%", stats.REPRODUCED, "rule", source=claims.PAPER_AT_PROTOCOL)


def test_every_source_is_read_back_from_its_basis_cell():
    for source in claims.SOURCES:
        row = claims.not_run("saves time", "30%", "no runs", source=source, protocol="MiniLM").row()
        assert claims.source_of(row[4]) == source and row[3] in claims.vocabulary(source)
