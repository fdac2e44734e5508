"""`--distribution` names to `tf.distribute` strategies, and what multi-worker training needs around them.

`multi_worker` reads the cluster from `TF_CONFIG` (one process per worker; docs/distributed.md). Before TensorFlow
joins the cluster, every worker checks that every peer's port answers (`wait_for_peers`): a peer that is not there
is one `error:` line after `TF_TRANSFER_WORKER_TIMEOUT` seconds (default 120), never a hang (TensorFlow's own
cluster start-up waits without a limit on the first worker, holding the interpreter). The same timeout bounds every
collective operation, and TensorFlow's coordination service stops a worker whose peer died
(`tf_transfer.training.distributed.lost_workers`).

Only the chief (`is_chief`) writes to `--output_dir`; the others work in a temporary folder (`worker_dir`) and get
what only the chief has (the run's summary, a checkpoint's weights) through the cluster
(`tf_transfer.training.distributed`), so that the workers need no shared file system.

Example:

>>> from tf_transfer.core import strategies
>>> strategy = strategies.make_strategy("default")  # doctest: +SKIP
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import socket
import tempfile
import time
from typing import Optional, Sequence


from tf_transfer.core.errors import TransferError

_MIRRORED_KEY_BASES = itertools.count(0, 100_000)
TIMEOUT_ENV = "TF_TRANSFER_WORKER_TIMEOUT"
DEFAULT_TIMEOUT_S = 120.0
# Cluster jobs whose tasks train (a "ps" or "evaluator" task does not take part in the collectives).
TRAINING_JOBS = ("chief", "worker")


def worker_timeout() -> float:
    """Seconds to wait for a peer (at start-up and in any one collective operation): `$TF_TRANSFER_WORKER_TIMEOUT`
    or 120."""
    value = os.environ.get(TIMEOUT_ENV)
    if not value:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise TransferError(f"{TIMEOUT_ENV}={value!r} is not a positive number of seconds")
    return seconds


def make_strategy(distribution: str, devices: Optional[Sequence[str]] = None):
    """Returns the strategy for `distribution` (default, mirrored, multi_worker, tpu).

    `devices` narrows `mirrored` to given devices (e.g. two logical CPUs in tests); by default it uses every GPU,
    or the CPU when there is none. `multi_worker` reads the cluster from `TF_CONFIG` (see `multi_worker_strategy`).
    """
    if distribution == "multi_worker":
        return multi_worker_strategy()
    import tensorflow as tf

    if distribution == "default":
        return tf.distribute.get_strategy()
    if distribution == "mirrored":
        # Every MirroredStrategy starts its collective keys at the same number: a second one in the same process (a
        # grid's next run) would reuse the first one's keys and abort on a shape mismatch. TensorFlow's own tests
        # move the start for each strategy with this class attribute.
        tf.distribute.MirroredStrategy._collective_key_base = next(_MIRRORED_KEY_BASES)
        return tf.distribute.MirroredStrategy(devices=devices)
    if distribution == "tpu":
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except Exception as e:  # ValueError / NotFoundError when no TPU is attached
            raise TransferError(f"--distribution=tpu: no TPU found ({type(e).__name__}); use default or mirrored") from None
        return tf.distribute.TPUStrategy(resolver)
    raise TransferError(f"unknown --distribution {distribution!r}: use default, mirrored, multi_worker or tpu")


def chief_by_tf_config() -> bool:
    """Whether this process is the one that writes results, read from `$TF_CONFIG` without TensorFlow: the `chief`
    task, or worker 0 of a cluster without one; any process outside a cluster."""
    if not os.environ.get("TF_CONFIG"):
        return True
    cluster, task_type, task_index = read_tf_config()
    return task_type == "chief" or ("chief" not in cluster and task_index == 0)


def results_folder(output_dir: str, distribution: str) -> str:
    """Where a command says its results are: `output_dir`, or on a worker that is not the chief (which wrote to a
    temporary folder it removed) the chief's `--output_dir`."""
    if distribution == "multi_worker" and not chief_by_tf_config():
        return f"the chief worker's --output_dir (this worker wrote nothing to {output_dir})"
    return output_dir


def read_tf_config() -> tuple:
    """`(cluster, task_type, task_index)` from `$TF_CONFIG`; `cluster` maps each job to its `host:port` list."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise TransferError("--distribution=multi_worker needs TF_CONFIG, e.g. {\"cluster\": {\"worker\": "
                            "[\"host0:port\", \"host1:port\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}} "
                            "(docs/distributed.md)")
    try:
        config = json.loads(raw)
        cluster, task = config["cluster"], config["task"]
        task_type, task_index = task["type"], int(task["index"])
        _ = cluster[task_type][task_index]  # the task must be in the cluster
        for job in TRAINING_JOBS:
            for address in cluster.get(job, []):
                _split_address(address)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
        raise TransferError(f"TF_CONFIG is not a cluster with this task in it, every address host:port "
                            f"({type(e).__name__}: {e}): {raw}") from None
    if task_type not in TRAINING_JOBS:
        raise TransferError(f"TF_CONFIG task type {task_type!r} does not train: use worker (or chief)")
    return cluster, task_type, task_index


def _split_address(address: str) -> tuple:
    """`"host:port"` (or `"[v6]:port"`) -> `(host, port)`; ValueError otherwise."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{address!r} is not host:port")
    return host.strip("[]"), int(port)


def wait_for_peers(cluster: dict, task_type: str, task_index: int, timeout_s: float) -> None:
    """Listens on this task's own port and waits until every other training task's port has accepted a connection
    from it and every other task has connected to it.

    Each worker runs this before TensorFlow joins the cluster, so a worker that is late is waited for (up to
    `timeout_s`), and one that never comes is a `TransferError` naming it. The own port is held by a plain socket
    until then (TensorFlow's server binds it afterwards), so workers started together or apart find each other.
    """
    own = cluster[task_type][task_index]
    peers = [address for job in TRAINING_JOBS for i, address in enumerate(cluster.get(job, []))
             if (job, i) != (task_type, task_index)]
    listener = _listen(own, task_type, task_index, backlog=len(peers) + 8)
    try:
        deadline = time.monotonic() + timeout_s
        pending, heard = list(peers), 0
        # Done when this worker reached every other one and every other one reached it: a worker that closed its
        # listener early could otherwise leave a slower peer knocking on a port nobody holds until TensorFlow
        # binds it (after importing, seconds later).
        while pending or heard < len(peers):
            pending = [address for address in pending if not _reachable(address)]
            heard += _accept_all(listener)
            if not pending and heard >= len(peers):
                break
            if time.monotonic() >= deadline:
                if pending:
                    raise TransferError(
                        f"--distribution=multi_worker: {task_type} {task_index} could not reach "
                        f"{', '.join(pending)} within {timeout_s:g} s: start every worker of TF_CONFIG with the same "
                        f"command (or raise {TIMEOUT_ENV})")
                raise TransferError(
                    f"--distribution=multi_worker: {task_type} {task_index} reached the other workers, but only "
                    f"{heard} of {len(peers)} reached its own {own} within {timeout_s:g} s: is port "
                    f"{_split_address(own)[1]} open to them?")
            time.sleep(0.1)
    finally:
        listener.close()


def _listen(own: str, task_type: str, task_index: int, backlog: int):
    """A non-blocking socket listening on this task's port (on its address, or any interface when the address is
    not one of this machine's as written)."""
    host, port = _split_address(own)
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except socket.gaierror:
        listener.close()
        raise TransferError(f"TF_CONFIG: this task's address {own} does not resolve") from None
    except OSError as e:
        listener.close()
        if e.errno == errno.EADDRINUSE:
            raise TransferError(f"TF_CONFIG: port {port} of this task ({task_type} {task_index}, {own}) is in "
                                "use by another process: free it or choose other ports") from None
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("", port))
    listener.listen(backlog)
    listener.setblocking(False)
    return listener


def _reachable(address: str) -> bool:
    try:
        with socket.create_connection(_split_address(address), timeout=1.0):
            return True
    except OSError:
        return False


def _accept_all(listener) -> int:
    """Accepts (and closes) every connection waiting on `listener`; returns how many."""
    accepted = 0
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:  # nobody else waiting
            return accepted
        connection.close()
        accepted += 1


def multi_worker_strategy(timeout_s: Optional[float] = None):
    """`MultiWorkerMirroredStrategy` over the `TF_CONFIG` cluster, after `wait_for_peers`; every collective
    operation times out after `timeout_s` (default `worker_timeout()`). The peers are waited for before
    TensorFlow is imported, so a missing one costs only the timeout."""
    timeout_s = timeout_s or worker_timeout()
    cluster, task_type, task_index = read_tf_config()
    several = sum(len(cluster.get(job, [])) for job in TRAINING_JOBS) > 1
    if several:
        wait_for_peers(cluster, task_type, task_index, timeout_s)
    import tensorflow as tf

    if several:
        _bound_cluster_start(cluster, timeout_s)
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout_s)
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError) as e:
        raise TransferError(f"--distribution=multi_worker: {task_type} {task_index} could not join the cluster "
                            f"{cluster} ({type(e).__name__}): start every worker with the same command") from None


def _bound_cluster_start(cluster: dict, timeout_s: float) -> None:
    """Configures TensorFlow's coordination service as `MultiWorkerMirroredStrategy` would, plus a limit on how long
    a worker waits to register with the first one (without it that wait has none). A no-op where the private API
    differs."""
    try:
        from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
        from tensorflow.python.distribute import multi_worker_util
        from tensorflow.python.eager import context
        from tensorflow.python.training import server_lib

        if context.context().coordination_service is not None:
            return
        spec = server_lib.ClusterSpec(cluster)
        jobs = [coordination_config_pb2.CoordinatedJob(name=job, num_tasks=spec.num_tasks(job))
                for job in TRAINING_JOBS if job in spec.jobs]
        context.context().configure_coordination_service(
            service_type="standalone", service_leader=multi_worker_util.coordination_leader(spec),
            cluster_register_timeout_in_ms=int(timeout_s * 1000), coordinated_jobs=jobs)
    except (ImportError, AttributeError, TypeError):
        pass


def is_multi_worker(strategy) -> bool:
    """True for a `MultiWorkerMirroredStrategy` whose cluster has more than one training task."""
    if strategy is None:
        return False
    import tensorflow as tf

    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return False
    jobs = strategy.cluster_resolver.cluster_spec().as_dict()
    return sum(len(jobs.get(job, [])) for job in TRAINING_JOBS) > 1


def is_distributed(strategy) -> bool:
    """True when batches must be split over replicas: more than one replica, or more than one worker."""
    return strategy is not None and (strategy.num_replicas_in_sync > 1 or is_multi_worker(strategy))


def local_replicas(strategy) -> int:
    """The replicas whose step runs in this process: all of them but under a multi-worker strategy, where each
    worker runs its own devices' (`num_replicas_in_sync` counts every worker's)."""
    if strategy is None or not is_distributed(strategy):
        return 1
    return len(strategy.extended.worker_devices)


def is_chief(strategy) -> bool:
    """True where `--output_dir` is written: every process but a multi-worker cluster's non-chief workers."""
    return not is_multi_worker(strategy) or bool(strategy.extended.should_checkpoint)


def worker_name(strategy) -> str:
    resolver = strategy.cluster_resolver
    return f"{resolver.task_type} {resolver.task_id}"


def worker_dir(strategy, output_dir: str) -> str:
    """Where this process writes: `output_dir` on the chief, a new temporary folder on the other workers (the
    caller removes it, `remove_worker_dir`)."""
    if is_chief(strategy):
        return output_dir
    resolver = strategy.cluster_resolver
    return tempfile.mkdtemp(prefix=f"tf_transfer-{resolver.task_type}{resolver.task_id}-")


def remove_worker_dir(strategy, path: str, output_dir: str) -> None:
    import shutil

    if not is_chief(strategy) and os.path.abspath(path) != os.path.abspath(output_dir):
        shutil.rmtree(path, ignore_errors=True)
