"""What a run ran on, and how much CPU it used: so that times from different machines are never mixed unknowingly.

Runs of one study may be spread over sessions and machines (a grid is resumed where it stopped). A time is only
comparable with times taken on the same kind of processor with the same number of cores, so every summary records
`machine()`, and every epoch its CPU seconds beside its wall time.

Example:

>>> from tf_transfer.core import machine
>>> sorted(machine.describe())
['cores', 'cpu', 'isa']
>>> machine.cpu_seconds() > 0
True
>>> busy = machine.busy_cpu_seconds()  # the whole machine's, on Linux; None elsewhere
>>> busy is None or busy >= machine.cpu_seconds()
True
>>> machine.speed_probe(budget_s=0.2) > 0  # CPU milliseconds of one fixed piece of a transformer's work
True
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import time
from typing import Optional

import numpy as np

# Instruction-set features that change TensorFlow's CPU speed by integer factors (oneDNN picks kernels by them):
# AMX and AVX-512 BF16 make mixed_bfloat16 several times faster than float32; without them it is emulated.
_FEATURES = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def pid_alive(pid: int) -> bool:
    """Whether process `pid` of this machine is running (one of another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cpu_seconds() -> float:
    """CPU time of this process so far (all threads, user and system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def busy_cpu_seconds() -> Optional[float]:
    """CPU seconds every process on the machine has run since boot (all CPUs: user, nice, system, interrupts;
    not idle, I/O wait or time the hypervisor stole), from /proc/stat; None where it cannot be read.

    A run pinned to one core can still slow when another core is busy (shared caches, memory bandwidth: on this
    project's 2-core VM by about 2% of its CPU seconds a step, benchmarks/README.md), so an epoch records how busy
    the rest of the machine was: the difference of this over the epoch, less the run's own `cpu_seconds()`."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 8:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def others_cpu_load(busy_before: Optional[float], busy_after: Optional[float], own_cpu_s: float,
                    wall_s: float) -> Optional[float]:
    """CPU seconds the machine's other processes ran per wall second between two `busy_cpu_seconds()` readings, the
    process's own `own_cpu_s` taken out: 0 on an otherwise idle machine, about 1 with one other core kept busy.

    >>> others_cpu_load(100.0, 103.5, 1.5, 2.0), others_cpu_load(None, 3.0, 1.0, 2.0)
    (1.0, None)
    """
    if busy_before is None or busy_after is None or wall_s <= 0:
        return None
    # The machine's busy time comes in ticks (10 ms): a small negative remainder is rounding.
    return max(0.0, (busy_after - busy_before - own_cpu_s) / wall_s)


_PROBE_INPUTS = None


def _probe_inputs():
    """The probe's fixed operands (numpy's own seeded generator: TensorFlow's and Keras' random state untouched)."""
    global _PROBE_INPUTS
    if _PROBE_INPUTS is None:
        import tensorflow as tf  # here, not at the top: this module is read by processes that never train
        rng = np.random.default_rng(0)
        _PROBE_INPUTS = tuple(tf.constant(rng.standard_normal(shape).astype("float32") * scale)
                              for shape, scale in (((256, 384), 1.0), ((384, 1536), 0.05), ((1536, 384), 0.05)))
    return _PROBE_INPUTS


def _probe_once() -> None:
    import tensorflow as tf
    with tf.device("/CPU:0"):  # the host's speed, also where a GPU trains (and none of its memory)
        x, w_in, w_out = _probe_inputs()
        y = tf.linalg.matmul(tf.nn.gelu(tf.linalg.matmul(x, w_in), approximate=False), w_out) + x
        mean, variance = tf.nn.moments(y, axes=[-1], keepdims=True)
        ((y - mean) * tf.math.rsqrt(variance + 1e-12)).numpy()


def speed_probe(budget_s: float, max_calls: int = 30) -> float:
    """How fast the machine runs right now: the median CPU milliseconds of one fixed piece of a transformer's work
    (a 384-wide feed-forward block with GELU and layer norm over 256 tokens, about 0.6 GFLOP, in TensorFlow eager),
    over as many calls as fit in `budget_s` (at least one, at most `max_calls`; one untimed call first).

    An epoch records it after training (`speed_probe_cpu_ms`), so times taken hours apart on a VM whose speed drifts
    (on this project's 2-core VMs by up to 1.6x within an afternoon) can be set against the machine's speed at the
    time. One call varies by about 13% from second to second there, with no memory from one second to the next, so
    the median over many calls is what tracks the drift. The operands are fixed and the calls touch no random state
    and no variable: a run computes the same numbers with or without it."""
    _probe_once()  # the first call in a process also creates the operands and oneDNN's kernels
    deadline, timed = time.perf_counter() + budget_s, []
    while not timed or (len(timed) < max_calls and time.perf_counter() < deadline):
        start = time.process_time()
        _probe_once()
        timed.append(time.process_time() - start)
    return 1000.0 * statistics.median(timed)


def describe() -> dict:
    """`{"cpu": model name, "cores": cores this process may run on, "isa": [features present]}`."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name":
                    name = value.strip()
                elif key == "flags":
                    flags = set(value.split())
                    break
    except OSError:  # not Linux: the model name from platform, no feature list
        pass
    try:
        cores = len(os.sched_getaffinity(0))  # taskset/cgroup pinning counts, not the machine's total
    except AttributeError:
        cores = os.cpu_count() or 0
    return {"cpu": name, "cores": cores, "isa": [f for f in _FEATURES if f in flags]}
