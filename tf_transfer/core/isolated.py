"""Calls a function in a fresh Python process and returns its result or raises its exception here.

A grid trains many models one after another. In one process, TensorFlow and Keras keep part of every finished run's
traced training step alive, and with it that run's weights and optimizer slots (tf-keras#286): on all-MiniLM-L6-v2
about 350 MB per fully fine-tuned run here, after `keras.backend.clear_session()` and `gc.collect()`. Over a grid
that adds up to gigabytes, and into every later run's `peak_memory_mb`. A run in its own process starts from a clean
process and gives all of its memory back when it ends, at the price of importing TensorFlow again (a few seconds).

The child is started with "spawn" (never "fork": TensorFlow's thread pools do not survive a fork) and is killed
when this process dies, so a killed grid leaves no run training on behind its back.

Example:

>>> import os
>>> from tf_transfer.core import isolated
>>> isolated.call(os.getpid) != os.getpid()
True
"""

from __future__ import annotations

import multiprocessing
import signal
from concurrent import futures
from typing import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Asks Linux to kill this process when its parent dies (`prctl(PR_SET_PDEATHSIG)`)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the child outlives a killed parent, as any worker would
        pass


def call(function: Callable, *args, **kwargs):
    """`function(*args, **kwargs)` in a new process. `function` and its arguments must be picklable (a module-level
    function and plain values); an exception raised there is raised here, a child that died (killed, out of
    memory) raises `concurrent.futures.process.BrokenProcessPool`."""
    context = multiprocessing.get_context("spawn")
    pool = futures.ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=die_with_parent)
    try:
        future = pool.submit(function, *args, **kwargs)
        return future.result()
    except KeyboardInterrupt:
        # Ctrl-C: stop the child now (a run resumes from its last finished epoch) instead of waiting, as leaving the
        # pool would, for it to finish on its own.
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)
