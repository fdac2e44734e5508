"""`--distribution=multi_worker`'s pieces: `TF_CONFIG` checks, the pre-flight that waits for the peers, and the
replicas' shares of a batch. A peer that never comes, as one `error:` line from each command, and two workers
training every study to the default strategy's numbers, writing only on the chief and resuming after a kill:
test_multi_worker_studies.py.

The processes find each other through `TF_CONFIG` on free loopback ports (bound to port 0 to find them).
"""

import json
import os
import socket
import threading
import time

import numpy as np
import pytest

from tf_transfer.core import strategies
from tf_transfer.core.errors import TransferError
from tf_transfer.data import inputs


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_tf_config_is_checked(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(TransferError, match="needs TF_CONFIG"):
        strategies.make_strategy("multi_worker")
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 3}}')
    with pytest.raises(TransferError, match="not a cluster with this task"):
        strategies.make_strategy("multi_worker")
    monkeypatch.setenv(strategies.TIMEOUT_ENV, "soon")
    with pytest.raises(TransferError, match="not a positive number"):
        strategies.worker_timeout()


def test_pre_flight_finds_peers_started_apart_and_names_the_missing_and_a_taken_port():
    ports = _free_ports(3)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports[:2]]}
    errors = []

    def worker(index, delay):
        time.sleep(delay)
        try:
            strategies.wait_for_peers(cluster, "worker", index, timeout_s=10)
        except TransferError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=worker, args=(0, 0.0)), threading.Thread(target=worker, args=(1, 0.5))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with pytest.raises(TransferError, match=rf"worker 0 could not reach 127.0.0.1:{ports[2]} within 0.3 s"):
        strategies.wait_for_peers({"worker": [f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[2]}"]}, "worker", 0, 0.3)
    taken = socket.socket()
    taken.bind(("127.0.0.1", ports[0]))
    taken.listen(1)
    try:
        with pytest.raises(TransferError, match=rf"port {ports[0]} of this task .* is in use"):
            strategies.wait_for_peers(cluster, "worker", 0, 0.3)
    finally:
        taken.close()


@pytest.mark.parametrize("workers, local", [(1, 2), (2, 1), (2, 2), (3, 1)])
def test_replica_shares_are_the_batch_in_keras_order(workers, local):
    """Every replica's share of a batch, put in the order Keras concatenates replicas' outputs (local replica
    first, then worker), is the batch itself: training sees the single-device batch, predictions come back in
    order. Shares differ in size by at most one example (empty when the batch has fewer examples than replicas)."""
    replicas = workers * local
    for size in (1, 4, 7, 8):
        batch = np.arange(100, 100 + size)
        shares = {}
        for worker in range(workers):
            for j, share in enumerate(inputs.local_shares(replicas, workers, worker)):
                shares[(j, worker)] = inputs.replica_share(batch, share, replicas)
        in_keras_order = [shares[(j, w)] for j in range(local) for w in range(workers)]
        assert np.concatenate(in_keras_order).tolist() == batch.tolist()
        sizes = [len(s) for s in in_keras_order]
        assert max(sizes) - min(sizes) <= 1
    assert inputs.padded_length(np.asarray([], np.int32), "bucket", 32, 16) == 16


def test_a_worker_other_than_the_chief_points_to_the_chiefs_folder(monkeypatch):
    cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}}))
    assert strategies.results_folder("out", "multi_worker").startswith("the chief worker's --output_dir")
    assert strategies.results_folder("out", "default") == "out"
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    assert strategies.results_folder("out", "multi_worker") == "out"
