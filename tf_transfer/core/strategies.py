"""`--distribution` names to `tf.distribute` strategies, and what multi-worker training needs around them.

`multi_worker` reads the cluster from `TF_CONFIG` (one process per worker; docs/distributed.md). Before TensorFlow
joins the cluster, every worker checks that every peer's port answers (`wait_for_peers`): a peer that is not there
is one `error:` line after `TF_TRANSFER_WORKER_TIMEOUT` seconds (default 120), never a hang (TensorFlow's own
cluster start-up waits without a limit on the first worker, holding the interpreter). The same timeout bounds every
collective operation, and TensorFlow's coordination service stops a worker whose peer died (`lost_workers`).

Only the chief (`is_chief`) writes to `--output_dir`; the others work in a temporary folder (`worker_dir`) and get
what only the chief has (the run's summary, a checkpoint's weights) through the cluster (`from_chief`,
`sync_variables`), so that the workers need no shared file system.

Example:

>>> from tf_transfer.core import strategies
>>> strategy = strategies.make_strategy("default")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import tempfile
import time
from typing import Callable, Optional, Sequence

import numpy as np

from tf_transfer.core.errors import TransferError

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
    host, port = _split_address(own)
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        try:
            listener.bind((host, port))
        except socket.gaierror:
            raise TransferError(f"TF_CONFIG: this task's address {own} does not resolve") from None
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise TransferError(f"TF_CONFIG: port {port} of this task ({task_type} {task_index}, {own}) is in "
                                    "use by another process: free it or choose other ports") from None
            listener.close()  # the name is not an address of this machine as written: any interface will do
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("", port))
        listener.listen(len(peers) + 8)
        listener.setblocking(False)
        deadline = time.monotonic() + timeout_s
        pending, heard = list(peers), 0
        # Done when this worker reached every other one and every other one reached it: a worker that closed its
        # listener early could otherwise leave a slower peer knocking on a port nobody holds until TensorFlow
        # binds it (after importing, seconds later).
        while pending or heard < len(peers):
            for address in list(pending):
                try:
                    with socket.create_connection(_split_address(address), timeout=1.0):
                        pending.remove(address)
                except OSError:
                    pass
            while True:
                try:
                    connection, _ = listener.accept()
                except OSError:  # nobody else waiting
                    break
                connection.close()
                heard += 1
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
                    f"{heard} of {len(peers)} reached its own {own} within {timeout_s:g} s: is port {port} open to "
                    "them?")
            time.sleep(0.1)
    finally:
        listener.close()


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


def _from_replica_zero(strategy, value: Optional[np.ndarray], shape, dtype) -> np.ndarray:
    """Every worker gets `value` as held by the chief's first replica (a sum where all others give zeros)."""
    import tensorflow as tf

    zeros = np.zeros(shape, dtype)
    local = zeros if value is None else np.asarray(value, dtype).reshape(shape)

    def contribute():
        first = tf.equal(tf.distribute.get_replica_context().replica_id_in_sync_group, 0)
        return tf.where(first, tf.constant(local), tf.constant(zeros))

    total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(contribute), axis=None)
    return np.asarray(total.numpy(), dtype).reshape(shape)


def broadcast_json(strategy, value):
    """The chief's JSON-able `value` on every worker (the others' argument is ignored)."""
    data = np.frombuffer(json.dumps(value).encode(), np.uint8).astype(np.int32) if is_chief(strategy) else None
    size = int(_from_replica_zero(strategy, None if data is None else [len(data)], (1,), np.int64)[0])
    received = _from_replica_zero(strategy, data, (size,), np.int32)
    return json.loads(received.astype(np.uint8).tobytes().decode())


def from_chief(strategy, produce: Callable):
    """`produce()` run on the chief only, its JSON-able result returned on every worker; a `TransferError` it
    raises is raised on every worker, so that all stop together. Without a multi-worker cluster: `produce()`."""
    if not is_multi_worker(strategy):
        return produce()
    payload = None
    if is_chief(strategy):
        try:
            payload = {"value": produce()}
        except TransferError as e:
            payload = {"error": str(e)}
    payload = broadcast_json(strategy, payload)
    if "error" in payload:
        raise TransferError(payload["error"])
    return payload["value"]


# Values per collective operation when syncing variables (64 MB of float32): bounds the memory it takes.
SYNC_CHUNK = 1 << 24


def sync_variables(strategy, variables) -> None:
    """Assigns the chief's values of `variables` (Keras or TF variables, in the same order on every worker) to
    every worker's: after the chief alone restored a checkpoint. A few collective operations per kind of value
    (float32, float16, integers...; `SYNC_CHUNK` values each), not one per variable. Without a multi-worker
    cluster: nothing."""
    if not is_multi_worker(strategy):
        return
    import tensorflow as tf

    variables = list(variables)
    chief = is_chief(strategy)
    groups = {}  # carrier dtype -> indices of the variables that travel in it
    for i, variable in enumerate(variables):
        dtype = tf.as_dtype(variable.dtype)
        if dtype in (tf.float16, tf.float32, tf.float64):
            carrier = dtype.as_numpy_dtype
        elif dtype.is_floating:  # bfloat16: exactly representable in float32
            carrier = np.float32
        else:  # integers, bool, uint32 seed states: exactly representable in int64
            carrier = np.int64
        groups.setdefault(np.dtype(carrier), []).append(i)
    for carrier, members in groups.items():
        sizes = [int(np.prod(variables[i].shape)) for i in members]
        flat = (np.concatenate([np.asarray(variables[i].numpy()).astype(carrier).ravel() for i in members])
                if chief else None)
        total = sum(sizes)
        received = np.concatenate([
            _from_replica_zero(strategy, None if flat is None else flat[start:start + SYNC_CHUNK],
                               (min(SYNC_CHUNK, total - start),), carrier)
            for start in range(0, total, SYNC_CHUNK)] or [np.zeros(0, carrier)])
        for i, part in zip(members, np.split(received, np.cumsum(sizes)[:-1])):
            variables[i].assign(tf.cast(part.reshape(tuple(variables[i].shape)), variables[i].dtype))


def keras_distributed(model, strategy) -> None:
    """Makes Keras 3's `fit` work on datasets distributed by `inputs.distribute` (faults of its TensorFlow trainer,
    3.15).

    1. `fit` builds the model on its first batch after `strategy.reduce("MEAN", batch)`: across replicas that adds
       up the replicas' batches element by element, which fails when their shares differ in shape (a share padded
       to another bucket, or one example fewer: "Inputs to operation AddN ... must have the same size and
       shape"), and which `MultiWorkerMirroredStrategy` cannot do at all for a dict of features ("Attempt to
       convert a value ({'token_ids': PerReplica...})": KNOWN_TRAPS.md, trap 14). Building needs only shapes:
       this builds from this process's first replica's share, and not at all once everything is built.
    2. Under a multi-worker strategy each step's logs are reduced across workers with
       `strategy.reduce("MEAN", value, axis=0)`, which fails on the scalar loss ("Invalid reduction dimension 0
       for input with 0 dimensions"): the step's scalars are given that axis (the epoch's loss is read from the
       synchronized metric, not from these logs).

    Idempotent; nothing happens for a strategy with one replica on one worker.
    """
    if not is_distributed(strategy) or getattr(model, "_tf_transfer_distributed", False):
        return
    import tensorflow as tf

    def built() -> bool:
        return (all(layer.built for layer in model._flatten_layers())
                and (model._compile_metrics is None or model._compile_metrics.built)
                and (model._compile_loss is None or model._compile_loss.built)
                and (model.optimizer is None or model.optimizer.built))

    def maybe_symbolic_build(iterator=None, data_batch=None):
        if built():
            return
        if iterator is not None:
            for _, _, it in iterator:
                data_batch = next(it)
                break
        data_batch = tf.nest.map_structure(
            lambda v: strategy.experimental_local_results(v)[0] if isinstance(v, tf.distribute.DistributedValues)
            else v, data_batch)
        with strategy.scope():
            model._symbolic_build(data_batch=data_batch)

    model._maybe_symbolic_build = maybe_symbolic_build
    if is_multi_worker(strategy):
        train_step = model.train_step

        def train_step_with_axis(data):
            return tf.nest.map_structure(lambda v: tf.reshape(v, [1]) if v.shape.rank == 0 else v,
                                         train_step(data))

        model.train_step = train_step_with_axis
    model._tf_transfer_distributed = True


def clip_after_summing(optimizer) -> None:
    """Makes a Keras optimizer clip the gradient one device would have had: the replicas' sum.

    Keras 3 clips each replica's own gradient (`_clip_gradients`) and only then sums them over the replicas
    (`_all_reduce_sum_gradients`): with `global_clipnorm` a distributed run then clips by other norms than one
    device. Here the sum comes first and is clipped (still one all-reduce per step), so a step under any strategy is
    the single-device step. Idempotent; outside a multi-replica step Keras' own methods run unchanged.
    """
    if getattr(optimizer, "_tf_transfer_clip_after_summing", False):
        return
    import tensorflow as tf

    clip, reduce_sum = optimizer._clip_gradients, optimizer._all_reduce_sum_gradients

    def replicated():
        context = tf.distribute.get_replica_context()
        return context if context is not None and context.num_replicas_in_sync > 1 else None

    def clip_gradients(grads):
        context = replicated()
        if context is None:
            return clip(grads)
        present = [g for g in grads if g is not None]
        summed = iter(context.all_reduce(tf.distribute.ReduceOp.SUM, present) if present else [])
        return clip([None if g is None else next(summed) for g in grads])

    def all_reduce_sum_gradients(grads_and_vars):
        if replicated() is None:
            return reduce_sum(grads_and_vars)
        return list(grads_and_vars)  # summed in clip_gradients already

    optimizer._clip_gradients = clip_gradients
    optimizer._all_reduce_sum_gradients = all_reduce_sum_gradients
    optimizer._tf_transfer_clip_after_summing = True


@contextlib.contextmanager
def lost_workers(strategy):
    """Turns the errors TensorFlow raises when a peer is gone (its process killed, its machine unreachable, a
    collective operation past the timeout) into one `TransferError` line; resuming is rerunning every worker."""
    if not is_multi_worker(strategy):
        yield
        return
    import tensorflow as tf

    try:
        yield
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.AbortedError,
            tf.errors.CancelledError) as e:
        first = next((line for line in str(e.message if hasattr(e, "message") else e).splitlines() if line.strip()),
                     "")
        raise TransferError(f"--distribution=multi_worker: {worker_name(strategy)} lost another worker "
                            f"({type(e).__name__}: {first[:200]}); rerun every worker's command to resume after the "
                            "last finished epoch") from None
