"""The two processes of tests/training/test_locks.py's takeover race: a module that imports nothing of the test
setup (TensorFlow), so that a spawned process starts in a fraction of a second."""

import json
import os
import socket
import time

from tf_transfer.training import locks

DEAD_PID = 2 ** 22 + 1  # above Linux's largest pid: never a live process
ROUNDS = 40


def stale(folder: str, round_: int) -> None:
    """A lock its process left behind: this version's (its flock went with the process), an earlier version's (a
    dead pid on this host), or an empty file (killed between create and write) older than the grace."""
    path = os.path.join(folder, locks.LOCK)
    kind = round_ % 3
    with open(path, "w") as f:
        if kind < 2:
            f.write(json.dumps({"host": socket.gethostname(), "pid": DEAD_PID, **({"flock": True} if kind else {})}))
    if kind == 2:
        os.utime(path, (time.time() - 60, time.time() - 60))


def hammer(folder: str, me: int, barrier, won) -> None:
    """Process `me` of two: each round both try to take the same stale lock at once; a winner holds it until both
    have tried."""
    for round_ in range(ROUNDS):
        if me == 0:
            stale(folder, round_)
        barrier.wait()
        won[2 * round_ + me] = locks.acquire(folder)
        barrier.wait()
        if won[2 * round_ + me]:
            locks.release(folder)
        barrier.wait()
