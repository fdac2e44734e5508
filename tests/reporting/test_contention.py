"""Contended runs by a rule fixed in advance (`tables.CONTENDED_BELOW`): a run with any epoch below 0.9 CPU/wall
waited for its core, and reports list it beside their time claims."""

from tf_transfer.reporting import tables


def _run(*pairs):
    return {"epochs": [{"epoch_cpu_s": cpu, "epoch_time_s": wall} for cpu, wall in pairs]}


def test_one_epoch_below_the_threshold_makes_the_run_contended():
    assert not tables.contended(_run((95.0, 100.0), (91.0, 100.0)))
    assert tables.contended(_run((95.0, 100.0), (89.0, 100.0)))
    assert not tables.contended({"epochs": [{"epoch_time_s": 100.0}]})  # no CPU seconds: nothing to judge


def test_contended_runs_are_listed_lowest_ratio_first_with_their_seconds():
    rows = tables.contended_rows([("a", _run((95.0, 100.0))), ("b", _run((60.0, 100.0), (100.0, 100.0))),
                                  ("c", _run((10.0, 100.0)))])
    assert rows == [["c", "0.10", "100", "10"], ["b", "0.60", "200", "160"]]
