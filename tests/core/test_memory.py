"""Peak memory per epoch: the resident set's peak is reset at the start and catches what the stretch allocated; on
a GPU the allocator's peak is read and reset instead (faked here: no machine of the project has a GPU)."""

import numpy as np

from tf_transfer.core import memory


def test_resident_peak_is_reset_and_catches_a_temporary_allocation():
    meter = memory.PeakMemory(devices=[])
    meter.start()
    baseline = meter.peak_mb()
    block = np.ones(300 * 2**20 // 8)  # 300 MB, touched so that it is resident
    del block
    after = meter.peak_mb()
    assert after - baseline > 250
    meter.start()  # freed since: a new stretch starts from the current resident set, not the old peak
    assert meter.source == "resident set" and meter.peak_mb() < after - 250


def test_gpu_peak_comes_from_the_allocator(monkeypatch):
    import tensorflow as tf

    calls = []
    monkeypatch.setattr(tf.config.experimental, "reset_memory_stats", lambda device: calls.append(device))
    monkeypatch.setattr(tf.config.experimental, "get_memory_info",
                        lambda device: {"current": 0, "peak": {"GPU:0": 2**30, "GPU:1": 3 * 2**30}[device]})
    meter = memory.PeakMemory(devices=["GPU:0", "GPU:1"])
    meter.start()
    assert calls == ["GPU:0", "GPU:1"] and meter.peak_mb() == 3072 and meter.source == "GPU allocator"
