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
