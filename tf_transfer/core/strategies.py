"""`--distribution` names to `tf.distribute` strategies.

Example:

>>> from tf_transfer import strategies
>>> strategy = strategies.make_strategy("default")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Optional, Sequence

from tf_transfer.core.errors import TransferError


def make_strategy(distribution: str, devices: Optional[Sequence[str]] = None):
    """Returns the strategy for `distribution` (default, mirrored, multi_worker, tpu).

    `devices` narrows `mirrored` to given devices (e.g. two logical CPUs in tests); by default it uses every GPU,
    or the CPU when there is none. `multi_worker` reads the cluster from `TF_CONFIG`.
    """
    import tensorflow as tf

    if distribution == "default":
        return tf.distribute.get_strategy()
    if distribution == "mirrored":
        return tf.distribute.MirroredStrategy(devices=devices)
    if distribution == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if distribution == "tpu":
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except Exception as e:  # ValueError / NotFoundError when no TPU is attached
            raise TransferError(f"--distribution=tpu: no TPU found ({type(e).__name__}); use default or mirrored") from None
        return tf.distribute.TPUStrategy(resolver)
    raise TransferError(f"unknown --distribution {distribution!r}: use default, mirrored, multi_worker or tpu")
