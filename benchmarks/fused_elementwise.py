"""Two fusions of our step's element-wise work, timed alone against what the model runs now (issue 43).

    taskset -c 0 python benchmarks/fused_elementwise.py

On the AVX-512 machine layer norm, GELU and the optimizer are 22.6% of our all-layers step's op time against 8.1% of
PyTorch's (benchmarks/README.md), because TensorFlow runs each as several kernels where PyTorch runs one. TensorFlow
on the CPU offers no fused layer norm with a gradient (oneDNN's `_MklLayerNorm` has none registered) and no fused
GELU backward, so this times the two ways to fewer kernels that it does allow, forward and backward on the shapes of
one all-layers MiniLM step (batch 32, 64 tokens):

- layer norm through `FusedBatchNormV3` on the rows reshaped as channels (tf.keras 2's trick), then the scale and
  offset, against `keras.layers.LayerNormalization` (Keras 3: `tf.nn.moments`' three kernels, then seven element-wise ones);
- the exact (erf) GELU with a hand-written gradient that reuses the forward's normal CDF, against
  `keras.activations.gelu(approximate=False)` differentiated by TensorFlow.

Both compute the same function with a different float32 rounding (the largest differences are printed), so either
would be a flag, not a default. One thread; the median of 5 rounds of 50 calls, in CPU milliseconds. Prints one
JSON line.
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np

import tf_transfer  # noqa: F401  (sets TF_ENABLE_ONEDNN_OPTS=1 before TensorFlow loads, as every run does)

EPSILON = 1e-12  # BERT's layer-norm epsilon (keras-hub's BertBackbone)
SHAPES = {"layer norm": (32, 64, 384), "GELU": (32, 64, 1536)}  # the hidden and the intermediate activations
_SQRT_HALF = np.float32(np.sqrt(0.5))
_INV_SQRT_2PI = np.float32(1.0 / np.sqrt(2.0 * np.pi))


def layer_norm_by_fused_batch_norm(x, gamma, beta, epsilon: float = EPSILON):
    """Layer norm over the last axis as one `FusedBatchNormV3` over the rows (NCHW: each row a channel)."""
    import tensorflow as tf

    shape = tf.shape(x)
    rows = tf.reduce_prod(shape[:-1])
    normalized, _, _ = tf.compat.v1.nn.fused_batch_norm(
        tf.reshape(x, [1, rows, shape[-1], 1]), tf.ones([rows]), tf.zeros([rows]), epsilon=epsilon,
        data_format="NCHW")
    return tf.reshape(normalized, shape) * gamma + beta


def gelu_with_its_gradient(x):
    """The exact GELU, x * Phi(x), whose gradient Phi(x) + x * phi(x) reuses the forward's Phi."""
    import tensorflow as tf

    @tf.custom_gradient
    def gelu(x):
        cdf = 0.5 * (1.0 + tf.math.erf(x * _SQRT_HALF))

        def grad(upstream):
            return upstream * (cdf + x * _INV_SQRT_2PI * tf.exp(-0.5 * tf.square(x)))

        return x * cdf, grad

    return gelu(x)


def pairs(seed: int = 0) -> dict:
    """`{part: (shape, what the model runs now, the fusion, the trainable variables)}`."""
    import keras

    norm = keras.layers.LayerNormalization(epsilon=EPSILON)
    norm.build(SHAPES["layer norm"])
    rng = np.random.default_rng(seed)  # gamma and beta off their initial 1 and 0, as a trained model's are
    norm.gamma.assign(rng.normal(1.0, 0.1, size=norm.gamma.shape).astype("float32"))
    norm.beta.assign(rng.normal(0.0, 0.1, size=norm.beta.shape).astype("float32"))
    return {"layer norm": (SHAPES["layer norm"], norm,
                           lambda x: layer_norm_by_fused_batch_norm(x, norm.gamma, norm.beta), [norm.gamma, norm.beta]),
            "GELU": (SHAPES["GELU"], lambda x: keras.activations.gelu(x, approximate=False), gelu_with_its_gradient,
                     [])}


def forward_backward(function, x, upstream, variables):
    """A compiled function returning the output and the gradients (input first) for a fixed upstream gradient."""
    import tensorflow as tf

    @tf.function
    def run():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = function(x)
        return [y, *tape.gradient(y, [x, *variables], output_gradients=upstream)]

    return run


def largest_difference(a: list, b: list) -> float:
    """The largest absolute difference over the output and every gradient."""
    return max(float(np.max(np.abs(u.numpy() - v.numpy()))) for u, v in zip(a, b))


def cpu_ms(run, rounds: int = 5, calls: int = 50) -> float:
    for _ in range(3):
        run()
    times = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            run()
        times.append(1000.0 * (time.process_time() - start) / calls)
    return statistics.median(times)


def main() -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rng = np.random.default_rng(0)
    found = {}
    for part, (shape, now, fused, variables) in pairs().items():
        x = tf.constant(rng.normal(size=shape).astype("float32"))
        upstream = tf.constant(rng.normal(size=shape).astype("float32"))
        a, b = forward_backward(now, x, upstream, variables), forward_backward(fused, x, upstream, variables)
        ms_now, ms_fused = cpu_ms(a), cpu_ms(b)
        found[part] = {"now_cpu_ms": round(ms_now, 2), "fused_cpu_ms": round(ms_fused, 2),
                       "fused_over_now": round(ms_fused / ms_now, 3),
                       "largest_difference": largest_difference(a(), b())}
    print(json.dumps({"shapes": SHAPES, "threads": 1, **found}))


if __name__ == "__main__":
    main()
