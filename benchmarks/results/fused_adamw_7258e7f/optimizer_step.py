"""Times one optimizer step over parameters shaped like all-MiniLM-L6-v2's (22.7M floats), outside any model.

Run from the repository root, once as committed and once with `git apply` of fused_adamw.patch in this folder:

    python benchmarks/results/fused_adamw_7258e7f/optimizer_step.py

Prints milliseconds per step for `tf_transfer.train.FusedAdamW` (as checked out) and for Keras' own AdamW, both
with BERT's settings (weight decay 0.01 except biases, global-norm clipping at 1.0) inside a tf.function.
"""

import time

import keras
import numpy as np
import tensorflow as tf

from tf_transfer.training import train

# Word and position embeddings, 6 blocks of 4 attention projections and 2 feed-forward kernels, 60 vectors.
SHAPES = [(30522, 384), (512, 384)] + [(384, 384)] * 24 + [(384, 1536), (1536, 384)] * 6 + [(384,)] * 60


def ms_per_step(optimizer, steps: int = 20) -> float:
    rng = np.random.default_rng(0)
    variables = [keras.Variable(rng.normal(size=s).astype("float32") * 0.02, name="kernel" if len(s) == 2 else "bias")
                 for s in SHAPES]
    grads = [tf.constant(rng.normal(size=s).astype("float32") * 1e-3) for s in SHAPES]
    optimizer.exclude_from_weight_decay(var_names=["bias"])
    optimizer.build(variables)
    step = tf.function(lambda: optimizer.apply(grads, variables))
    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1000


if __name__ == "__main__":
    for name, cls in (("tf_transfer FusedAdamW", train.FusedAdamW), ("keras AdamW", keras.optimizers.AdamW)):
        print(f"{name}: {ms_per_step(cls(learning_rate=1e-3, weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0)):.1f} ms")
