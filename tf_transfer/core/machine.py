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
"""

from __future__ import annotations

import os
import platform
import resource

# Instruction-set features that change TensorFlow's CPU speed by integer factors (oneDNN picks kernels by them):
# AMX and AVX-512 BF16 make mixed_bfloat16 several times faster than float32; without them it is emulated.
_FEATURES = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_seconds() -> float:
    """CPU time of this process so far (all threads, user and system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


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
