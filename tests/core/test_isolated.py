import os

import pytest

from tf_transfer.core import isolated
from tf_transfer.core.errors import TransferError


def _fail(message):
    raise TransferError(message)


def test_call_runs_in_another_process_and_returns_its_result():
    assert isolated.call(os.getpid) != os.getpid()
    assert isolated.call(divmod, 7, 2) == (3, 1)


def test_an_error_in_the_child_is_raised_here_with_its_type_and_message():
    with pytest.raises(TransferError, match="no RTE/ folder"):
        isolated.call(_fail, "no RTE/ folder")


def test_ctrl_c_stops_the_child_at_once_instead_of_waiting_for_it():
    """A grid's Ctrl-C reaches the parent while its child trains: the child is stopped, not waited for (a run in it
    resumes from its last finished epoch)."""
    import signal
    import subprocess
    import sys
    import time

    # A test process may ignore SIGINT (pytest-xdist's workers do), and an ignored signal stays ignored across exec:
    # the script takes Python's own handler back, as a terminal's command has it.
    script = ("import signal, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "from tf_transfer.core import isolated\nprint('started', flush=True)\n"
              "try:\n    isolated.call(time.sleep, 120)\nexcept KeyboardInterrupt:\n    print('interrupted', flush=True)\n")
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "started"
    time.sleep(3.0)  # the child is up and sleeping, and the parent waits for it, even on a loaded machine
    process.send_signal(signal.SIGINT)
    start = time.monotonic()
    out, _ = process.communicate(timeout=30)
    assert "interrupted" in out and time.monotonic() - start < 10  # not the child's 120 s
