"""Where a training step's time goes: a `tf.profiler` trace, summarised per op type.

The trace (an `.xplane.pb` under `logdir/plugins/profile/`) opens in TensorBoard's Profile tab when the
`tensorboard-plugin-profile` package is installed; `op_time_table` reads it directly, so the summary needs nothing
beyond TensorFlow.

Example:

>>> from tf_transfer.training import profiling
>>> with profiling.trace("/tmp/profile"):  # doctest: +SKIP
...     model.fit(dataset, epochs=1)
>>> profiling.op_time_table("/tmp/profile")[:3]  # doctest: +SKIP
[('forward', 'MatMul', 2.1, 0.21), ...]
"""

from __future__ import annotations

import collections
import contextlib
import glob
import os
import re


@contextlib.contextmanager
def trace(logdir: str):
    import tensorflow as tf

    tf.profiler.experimental.start(logdir)
    try:
        yield
    finally:
        tf.profiler.experimental.stop()


_OPTIMIZER_OPS = ("ResourceApplyAdam", "AssignSubVariableOp", "AssignAddVariableOp", "AssignVariableOp")


def _phase(op_path: str, op_type: str) -> str:
    if "gradient_tape" in op_path:
        return "backward"
    if op_type in _OPTIMIZER_OPS or "/adam" in op_path.lower():
        return "optimizer"
    return "forward/other"  # the forward pass, the loss, and gradient clipping


def _op_events(logdir: str):
    """`(op path, op type, seconds)` of every TensorFlow op event on the host's compute threads of the trace."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    paths = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))
    if not paths:
        return
    space = xplane_pb2.XSpace()
    with open(paths[-1], "rb") as handle:
        space.ParseFromString(handle.read())
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                # TensorFlow op events are named "<op path>:<op type>"; executor bookkeeping has "::".
                if ":" not in name or "::" in name:
                    continue
                path, op_type = name.rsplit(":", 1)
                yield path, op_type, event.duration_ps / 1e12


def op_time_table(logdir: str) -> list:
    """`(phase, op type, seconds, share)` rows, largest first, over the TensorFlow ops the trace recorded on the
    host's compute threads. Seconds are per-thread busy time, so they add up to more than wall time when ops
    run side by side."""
    seconds = collections.Counter()
    for path, op_type, spent in _op_events(logdir):
        seconds[(_phase(path, op_type), op_type)] += spent
    total = sum(seconds.values()) or 1.0
    return [(phase, op_type, s, s / total) for (phase, op_type), s in seconds.most_common()]


_PRODUCTS = ("MatMul", "Einsum", "BatchMatMul")
# Keras numbers a layer's name scope when it is called again (query_1, ...).
_PROJECTION = re.compile(r"/(query|key|value|attention_output)(_\d+)?/")


def category(path: str, op_type: str) -> str:
    """What part of a BERT training step a TensorFlow op belongs to, from its name scope (keras-hub's layer names)
    and type: products (the dense layers and the attention projections), attention (scores, softmax, mask and
    the product with the values), layer norm, GELU (the intermediate dense layer's activation and bias), dropout,
    embeddings, optimizer (the update, weight decay and gradient clipping), or other (residual sums, loss, casts)."""
    lowered, product = path.lower(), any(name in op_type for name in _PRODUCTS)
    if _phase(path, op_type) == "optimizer" or any(key in lowered for key in ("adam", "clip", "global_norm")):
        return "optimizer"
    if "dropout" in lowered or op_type.startswith("StatelessRandom"):
        return "dropout"
    if "layer_norm" in lowered or "layernorm" in lowered:
        return "layer norm"
    if "self_attention_layer" in lowered and not _PROJECTION.search(lowered + "/"):
        return "attention"
    if product:
        return "matmul"
    if "feedforward_intermediate_dense" in lowered:
        return "GELU"
    if "embedding" in lowered:
        return "embeddings"
    return "other"


def product_counts(logdir: str) -> dict:
    """`{"forward": n, "backward": m}`: how many products of the dense layers (`category` "matmul": the projections,
    not attention's own) the trace ran in the forward and in the backward pass. The backward pass runs one per
    forward product for the activations' gradient and one more for each kernel that trains, so a step whose kernels
    are all frozen (BitFit; LoRA's base weights) runs no more backward products than forward ones.

    >>> profiling.product_counts("/tmp/profile")  # doctest: +SKIP
    {'forward': 152, 'backward': 144}
    """
    return _count_products(_op_events(logdir))


def _count_products(events) -> dict:
    counts = {"forward": 0, "backward": 0}
    for path, op_type, _ in events:
        if category(path, op_type) == "matmul" and any(name in op_type for name in _PRODUCTS):
            counts["backward" if _phase(path, op_type) == "backward" else "forward"] += 1
    return counts


def category_table(logdir: str) -> list:
    """`(category, seconds, share)` rows, largest first (`category`), over the trace's op busy time."""
    seconds = collections.Counter()
    for path, op_type, spent in _op_events(logdir):
        seconds[category(path, op_type)] += spent
    total = sum(seconds.values()) or 1.0
    return [(name, s, s / total) for name, s in seconds.most_common()]
