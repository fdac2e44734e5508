"""TensorFlow's float32 matrix-product peak on this machine: the ceiling a training step's GFLOP/s is compared with.

    TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 taskset -c 0 python benchmarks/matmul_peak.py

Times a large square product (2048 x 2048 x 2048) and one of the feed-forward's shape at batch 32 x 64 tokens
(2048 x 384 by 384 x 1536), the best of five rounds of five products each, per wall second and per CPU second of
the process (on a core shared with other work the CPU-second figure is the steadier one). Prints one JSON line.
"""

from __future__ import annotations

import json
import time

import tf_transfer  # noqa: F401  (sets TF_ENABLE_ONEDNN_OPTS=1 before TensorFlow loads, as every run does)

SHAPES = {"square_2048": (2048, 2048, 2048), "feedforward_bs32": (32 * 64, 384, 1536)}


def peak(m: int, k: int, n: int, rounds: int = 5, products: int = 5) -> dict:
    import tensorflow as tf

    a, b = tf.random.normal([m, k]), tf.random.normal([k, n])
    tf.matmul(a, b).numpy()
    best_wall = best_cpu = 0.0
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(products):
            tf.matmul(a, b).numpy()
        flops = 2.0 * m * k * n * products
        best_wall = max(best_wall, flops / (time.perf_counter() - wall) / 1e9)
        best_cpu = max(best_cpu, flops / (time.process_time() - cpu) / 1e9)
    return {"gflop_per_s": round(best_wall, 1), "gflop_per_cpu_s": round(best_cpu, 1)}


def main() -> None:
    import tensorflow as tf

    print(json.dumps({"float32": {name: peak(*shape) for name, shape in SHAPES.items()},
                      "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads()}))


if __name__ == "__main__":
    main()
