"""The suite's own setup: what setup.cfg asks of pytest-xdist reaches its scheduler."""

import pytest

from study_runs import GROUP


@pytest.mark.xdist_group(GROUP)
def test_xdist_groups_reach_the_scheduler(request):
    """`--dist=loadgroup` (setup.cfg) sends the tests of one `xdist_group` to one test process by a suffix it adds to
    their ids; with pytest 9.2 the suffix was lost and every group split over the processes, so the distributed tests
    trained their shared one-device runs once per process."""
    if not hasattr(request.config, "workerinput"):
        pytest.skip("run without pytest-xdist (-n 0): no groups to check")
    assert request.node.nodeid.endswith(f"@{GROUP}")


def _environment_reads() -> tuple:
    """`(names, unresolved)`: the environment variables the library, the benchmarks and the tests' helpers read by
    name (a string literal, or a module constant holding one), and the reads whose name is computed."""
    import glob
    import os
    import re

    from conftest import REPO

    read = re.compile(r"(?:environ\.get|environ\.setdefault|environ\.pop|getenv|environ\[)\(?\s*"
                      r"(f?\"[^\"]*\"|f?'[^']*'|[A-Za-z_][A-Za-z0-9_.]*)")
    names, unresolved = set(), set()
    files = [path for pattern in ("tf_transfer/**/*.py", "experiments/*.py", "benchmarks/*.py", "tests/*.py")
             for path in glob.glob(os.path.join(REPO, pattern), recursive=True) if path != os.path.abspath(__file__)]
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for argument in read.findall(text):
            argument = argument.strip()
            literal = re.fullmatch(r"[\"']([A-Z0-9_]+)[\"']", argument)
            constant = re.search(rf"^{re.escape(argument)}\s*=\s*[\"']([A-Z0-9_]+)[\"']", text, flags=re.M)
            if literal or constant:
                names.add((literal or constant).group(1))
            elif not re.fullmatch(r"[a-z_]+", argument):  # a loop's variable over a list this test sees
                unresolved.add(f"{os.path.relpath(path, REPO)}: {argument}")
    return names, unresolved


def test_the_suite_clears_or_sets_every_environment_variable_the_code_reads():
    """A machine's exported GLUE_DIR (the README's convention), TF_CONFIG, ... must not change what a test sees:
    `conftest.py` sets or removes each variable the code reads, but for the few it keeps on purpose."""
    import conftest

    kept = {"TF_CPP_MIN_LOG_LEVEL": "the suite sets it (quiet TensorFlow)", "CI": "a CI run fails where a server "
            "does not start", "PYTHONPATH": "passed on to processes the tests start", "CXX": "the compiler the fair "
            "table's C++ side builds with"}
    names, unresolved = _environment_reads()
    handled = set(conftest.OUTSIDE_ENVIRONMENT) | set(conftest.AT_IMPORT) | set(kept)
    assert {"GLUE_DIR", "TF_CONFIG", "TF_TRANSFER_WORKER_TIMEOUT"} <= names  # the scan sees the reads
    assert names <= handled, f"read but neither cleared nor set by tests/conftest.py: {sorted(names - handled)}"
    # bench records TF_NUM_{INTRAOP,INTEROP}_THREADS through an f-string: both are in conftest.AT_IMPORT.
    assert unresolved == {"tf_transfer/bench.py: f\"TF_NUM_{name.upper()}_THREADS\""}, unresolved
