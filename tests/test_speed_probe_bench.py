"""benchmarks/speed_probe.py refuses what cannot give a correlation's interval, in one line."""

import subprocess
import sys

from conftest import REPO


def test_too_few_rounds_are_refused():
    done = subprocess.run([sys.executable, "benchmarks/speed_probe.py", "--data_dir=/nowhere", "--rounds=3"],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("error: --steps must be 1 or more and --rounds 4 or more")
    assert done.stderr.count("\n") == 1
