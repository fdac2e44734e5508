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


def _log_a_line(text):
    from absl import logging

    from tf_transfer.core import cli

    cli.log_like_a_command()
    logging.info(text)


def test_a_child_logs_at_info_without_absls_warning_about_unparsed_flags(capfd):
    """A grid's run or a sweep's trial in its child: its first log line is its own, not absl's "WARNING: Logging
    before flag parsing goes to stderr." (printed before every trial of a sweep, 2026-11-30)."""
    isolated.call(_log_a_line, "epoch 1: 2.0 s")
    err = capfd.readouterr().err
    assert "] epoch 1: 2.0 s" in err and "flag parsing" not in err, err


_SLEEPER = '''
import os, time

def wait_here(ready_file):
    with open(ready_file, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)
'''

# A grid's parent as a command: each run in isolated.call, Ctrl-C turned into one line and status 130 by cli.call.
_GRID_PARENT = '''
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # pytest-xdist's workers ignore SIGINT, and exec keeps that
from tf_transfer.core import cli, isolated
import sleeper

def main(argv):
    print("started", flush=True)
    return isolated.call(sleeper.wait_here, sys.argv[1])

cli.call(main, [])
'''


def _interrupted_grid(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "sleeper.py").write_text(_SLEEPER)
    ready = tmp_path / "child.pid"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen([sys.executable, "-c", _GRID_PARENT, str(ready)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        assert process.stdout.readline().strip() == "started"
        # Signalled once the child runs the function (not after a fixed wait, which a loaded machine can outlast).
        deadline = time.monotonic() + 120
        while not (ready.exists() and ready.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        start = time.monotonic()
        out, err = process.communicate(timeout=60)
        return process.returncode, err, time.monotonic() - start, ready
    finally:
        process.kill()


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.split()[:2] == ["State:", "Z"] for line in f)  # a zombie has stopped
    except FileNotFoundError:
        return True


def test_ctrl_c_stops_a_grid_whose_run_is_training_at_once(tmp_path):
    """Ctrl-C while a run trains in its child: the child is stopped, not waited for (the run resumes from its last
    finished epoch), and the command ends with one line and status 130."""
    status, err, seconds, ready = _interrupted_grid(tmp_path)
    assert status == 130, err
    assert err.strip().splitlines()[-1].startswith("error: interrupted: every finished epoch and run is kept")
    assert seconds < 20, seconds  # not the child's 120 s
    assert _gone(int(ready.read_text()))

