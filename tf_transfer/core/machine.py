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
"""

from __future__ import annotations

import os
import platform
import resource
from typing import Optional

# Instruction-set features that change TensorFlow's CPU speed by integer factors (oneDNN picks kernels by them):
# AMX and AVX-512 BF16 make mixed_bfloat16 several times faster than float32; without them it is emulated.
_FEATURES = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


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
