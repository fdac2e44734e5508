"""Peak memory of a run's training, epoch by epoch: the process's resident set on a CPU, the allocator's peak on a GPU.

On Linux the kernel keeps the process's peak resident set (`VmHWM` in `/proc/self/status`), and writing `5` to
`/proc/self/clear_refs` resets it to the current resident set, so a peak per epoch costs two small file operations
(where the reset is not allowed, the peak is the process's since it started, as `ru_maxrss`). On a GPU the peak is
TensorFlow's allocator's (`tf.config.experimental.get_memory_info`, reset by `reset_memory_stats`); that call raises
on a CPU, which has no allocator statistics.

Example:

>>> from tf_transfer.core import memory
>>> meter = memory.PeakMemory(devices=[])
>>> meter.start()
>>> meter.peak_mb() > 0
True
"""

from __future__ import annotations

import resource
from typing import Optional

_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


def _status_mb(key: str) -> Optional[float]:
    """A `/proc/self/status` figure (`VmHWM`, `VmRSS`) in MB, or None where the system has none."""
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return None


def resident_peak_mb() -> Optional[float]:
    """The process's peak resident set in MB (since the last reset), or None where the system does not say."""
    peak = _status_mb("VmHWM")
    if peak is not None:
        return peak
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux; never reset
    return usage / 1024 if usage else None


def resident_mb() -> Optional[float]:
    """The process's resident set now, in MB (None where the system does not say)."""
    return _status_mb("VmRSS")


def reset_resident_peak() -> bool:
    """Resets the peak resident set to the current one; False where that is not allowed."""
    try:
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def gpu_devices() -> list:
    import tensorflow as tf

    return [f"GPU:{index}" for index, _ in enumerate(tf.config.list_logical_devices("GPU"))]


class PeakMemory:
    """Measures one stretch of training (an epoch): `start()`, then `peak_mb()`; `source` says what was measured
    ("resident set", "resident set since start" where it cannot be reset, or "GPU allocator")."""

    def __init__(self, devices: Optional[list] = None):
        self.devices = gpu_devices() if devices is None else devices
        self.source = "GPU allocator" if self.devices else "resident set"

    def start(self) -> None:
        if self.devices:
            import tensorflow as tf

            for device in self.devices:
                tf.config.experimental.reset_memory_stats(device)
        elif not reset_resident_peak():
            self.source = "resident set since start"

    def peak_mb(self) -> Optional[float]:
        if self.devices:
            import tensorflow as tf

            return max(tf.config.experimental.get_memory_info(d)["peak"] for d in self.devices) / 2**20
        return resident_peak_mb()
