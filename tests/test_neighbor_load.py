"""benchmarks/neighbor_load.py refuses what it cannot measure in one line: it needs two different cores."""

import subprocess
import sys

from conftest import REPO


def test_one_core_for_both_processes_is_refused():
    done = subprocess.run([sys.executable, "benchmarks/neighbor_load.py", "--data_dir=/nowhere", "--core=0",
                           "--neighbor_core=0"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("error: --core=0 and --neighbor_core=0 must be two")
    assert done.stderr.count("\n") == 1
