"""benchmarks/freeze_measure_overhead.py's verdict on issue 40's 3% target comes from the overhead's interval, never
from its estimate alone."""

import importlib.util
import os

from conftest import REPO

spec = importlib.util.spec_from_file_location(
    "freeze_measure_overhead", os.path.join(REPO, "benchmarks", "freeze_measure_overhead.py"))
overhead = importlib.util.module_from_spec(spec)
spec.loader.exec_module(overhead)


def test_the_verdict_reads_the_whole_interval_against_three_percent():
    assert overhead.verdict(0.001, 0.027) == "met"
    assert overhead.verdict(-0.011, 0.033) == "inconclusive"  # estimate about 1%, upper end above 3%
    assert overhead.verdict(0.031, 0.09) == "missed"
    assert overhead.verdict(float("nan"), float("nan")) == "inconclusive"  # one repeat: no interval
