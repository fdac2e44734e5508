"""Training-throughput measurement of a GLUE run's steps, behind `python -m tf_transfer.bench`.

Times `steps` training steps after `warmup_steps` (which include compilation), on the run's own feed (bucketed or
fixed token batches, or the frozen-prefix cache), and counts the floating-point work actually executed.

Example:

>>> from tf_transfer.studies.glue import glue_benchmark
>>> result = glue_benchmark.measure(settings, steps=16, warmup_steps=3)  # doctest: +SKIP
>>> result["train_examples_per_s"]  # doctest: +SKIP
"""

from __future__ import annotations

import resource
import sys
import time
from typing import Callable, Optional

import numpy as np

from tf_transfer.data import inputs
from tf_transfer.core import machine, memory
from tf_transfer.models import methods
from tf_transfer.training import record
from tf_transfer.studies.glue.glue_settings import GlueSettings
from tf_transfer.studies.glue.glue_task import load_data, task_for


def block_flops(batch: int, length: int, hidden: int, intermediate: int) -> float:
    """Forward FLOPs of one encoder block on a `[batch, length]` input: projections, feed-forward, attention."""
    dense = 2 * batch * length * (4 * hidden * hidden + 2 * hidden * intermediate)
    attention = 2 * 2 * batch * length * length * hidden  # QK^T and attention x V
    return float(dense + attention)


def step_flops(batch: int, length: int, num_layers: int, trainable_layers, hidden: int, intermediate: int,
               cached: bool, method: str = None) -> float:
    """Executed FLOPs of one training step: forward through the blocks that run, backward through the trained ones:
    2x forward where the blocks' weights train (gradients of activations and of weights), 1x under LoRA and BitFit
    (gradients of activations only: LoRA's rank-r products and the bias sums are not counted). Frozen blocks below
    every trained one need no backward pass; with the cache they do not run. (`method`: the run's, default the
    freezing rule's; its `backward_passes`.)"""
    trained = num_layers if trainable_layers == "all" else int(trainable_layers)
    frozen = num_layers - trained
    one = block_flops(batch, length, hidden, intermediate)
    backward = methods.get(method or methods.DEFAULT).backward_passes
    return one * ((1 + backward) * trained + (0 if cached else frozen))


def matmul_peak(rows: int, hidden: int, intermediate: int, dtype: str = "float32", seconds: float = 3.0) -> float:
    """GFLOP/s of TensorFlow's matrix product on this machine at the feed-forward's shape
    (`[rows, hidden] x [hidden, intermediate]`), the best of five timings of a loop lasting about `seconds`: the
    ceiling the model's executed GFLOP/s is compared with."""
    import tensorflow as tf

    a = tf.random.normal([rows, hidden], dtype=dtype)
    b = tf.random.normal([hidden, intermediate], dtype=dtype)

    @tf.function
    def products(count):
        total = tf.zeros([], dtype)
        for _ in tf.range(count):
            total += tf.reduce_sum(tf.matmul(a, b)[:1, :1])  # consumed, so each product runs
        return total

    products(tf.constant(2)).numpy()
    start = time.perf_counter()
    products(tf.constant(10)).numpy()
    count = max(10, int(10 * seconds / 5 / max(time.perf_counter() - start, 1e-6)))
    best = 0.0
    for _ in range(5):
        start = time.perf_counter()
        products(tf.constant(count)).numpy()
        best = max(best, 2.0 * rows * hidden * intermediate * count / (time.perf_counter() - start) / 1e9)
    return best


def _plan_steps(feed, steps: int) -> list:
    plan, epoch = [], 1
    while len(plan) < steps:
        plan += feed.plan(epoch)
        epoch += 1
    return plan[:steps]


def measure(config: GlueSettings, steps: int, warmup_steps: int, repeats: int = 1,
            profile_dir: Optional[str] = None, before_repeat: Optional[Callable[[int], None]] = None) -> dict:
    """Builds the run's model and feed as a GLUE run does (`GlueTask.build`), then times `steps` training steps,
    `repeats` times.

    The figures are the median repeat's; every repeat's rate and CPU utilization is reported too, so a repeat that
    shared the machine with something else shows itself. `before_repeat(i)` runs before repeat i (untimed).
    """
    prepared = task_for(config)  # an adaptive method's: its gradient sums or annealed rates in the step
    prepared.build()
    model, feed, backbone = prepared.model, prepared.feed, prepared.backbone
    hidden, intermediate = int(backbone.hidden_dim), int(backbone.intermediate_dim)
    plan = _plan_steps(feed, warmup_steps + steps)
    # Warm-up compiles every batch shape the timed steps will see (XLA compiles one program per shape).
    warm, timed = feed.warmup_plan() + plan[:warmup_steps], plan[warmup_steps:]
    train_fit = lambda p: model.fit(feed.dataset(p), epochs=1, verbose=0, shuffle=False)  # noqa: E731
    start = time.perf_counter()
    # Before the first step, as run_glue's warm-up (engine.warm_up): slots created inside the first trace make
    # TensorFlow trace the step twice (about half of the warm-up of a small model).
    with prepared.strategy.scope():
        model.optimizer.build(model.trainable_variables)
    if warm:
        train_fit(warm)
    warmup_s = time.perf_counter() - start
    meter = memory.PeakMemory()
    # What the process holds before the timed steps (TensorFlow, data, weights, a cache): the part of the peak that
    # training itself does not add.
    resident_before_mb = memory.resident_mb()
    meter.start()  # the training steps' peak, as a run's summary records it (not the process's since its start)
    runs = _timed_repeats(train_fit, timed, repeats, before_repeat)
    peak_memory_mb = meter.peak_mb()
    elapsed, cpu_utilization = sorted(runs)[len(runs) // 2]
    profile = _profile(train_fit, timed, profile_dir) if profile_dir else None
    examples, real_tokens, padded_tokens, flops = _work_done(feed, timed, backbone, config)
    return {
        "train_examples_per_s": examples / elapsed,
        "train_examples_per_s_repeats": [examples / seconds for seconds, _ in runs],
        "cpu_utilization": cpu_utilization,
        "cpu_utilization_repeats": [utilization for _, utilization in runs],
        "tokens_per_s": real_tokens / elapsed,
        "padding_efficiency": real_tokens / padded_tokens,
        "gflop_per_s": flops / elapsed / 1e9,
        "step_time_s": elapsed / len(timed),
        "timed_steps": len(timed),
        "timed_examples": examples,
        "warmup_s": warmup_s,
        "cache_time_s": prepared.cache_time_s,
        "cache_cost_by_split": prepared.cache_split_cost,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_memory_mb": peak_memory_mb,
        "peak_memory_source": meter.source,
        "resident_before_steps_mb": resident_before_mb,
        "machine": machine.describe(),
        "code": record.code_version(),
        "num_layers": int(backbone.num_layers), "split_examples": {k: len(v) for k, v in prepared.encoded.items()},
        "hidden_dim": hidden,
        "intermediate_dim": intermediate,
        "preset_source": prepared.loaded.source,
        **(profile or {}),
    }


def _timed_repeats(train_fit, timed: list, repeats: int, before_repeat=None) -> list:
    """`[(seconds, CPU utilization)]` of `repeats` fit calls over the `timed` batches."""
    runs = []
    for repeat in range(repeats):
        if before_repeat is not None:
            before_repeat(repeat)
        start, cpu_start = time.perf_counter(), machine.cpu_seconds()
        train_fit(timed)
        elapsed = time.perf_counter() - start
        runs.append((elapsed, (machine.cpu_seconds() - cpu_start) / elapsed))
    return runs


def wait_for_go(repeat: int) -> None:
    """Prints `ready <repeat>` and blocks until a line arrives on stdin (`tf_transfer.bench --wait_between_repeats`):
    the protocol of benchmarks/fair.py, which runs one program's timed repeat at a time."""
    print(f"ready {repeat}", flush=True)
    if not sys.stdin.readline():
        raise SystemExit("stdin closed while waiting to start a timed repeat")


def _profile(train_fit, timed: list, profile_dir: str) -> dict:
    """One more fit call traced apart (tracing slows the steps, so it never counts in the timed figures): the 25 op
    types that took the most time (`profile`), op busy time per part of the step (`profile_categories`:
    `profiling.category`), the dense layers' products run forward and backward (`profile_products`:
    `profiling.product_counts`), and the traced call's wall seconds beside the ops' summed busy seconds (with one
    thread on an idle machine, their difference is the framework's own time: the executor, Python, the input
    pipeline; on a shared core, preemption inflates both, and the process's CPU seconds are beside them)."""
    from tf_transfer.training import profiling

    start, cpu_start = time.perf_counter(), machine.cpu_seconds()
    with profiling.trace(profile_dir):
        train_fit(timed)
    traced_s, traced_cpu_s = time.perf_counter() - start, machine.cpu_seconds() - cpu_start
    categories = profiling.category_table(profile_dir)
    return {"profile": [{"phase": phase, "op": op, "seconds": round(s, 4), "share": round(share, 4)}
                        for phase, op, s, share in profiling.op_time_table(profile_dir)[:25]],
            "profile_categories": [{"category": name, "seconds": round(s, 4), "share": round(share, 4)}
                                   for name, s, share in categories],
            "profile_products": profiling.product_counts(profile_dir),
            "profile_traced_s": traced_s, "profile_traced_cpu_s": traced_cpu_s,
            "profile_op_busy_s": sum(s for _, s, _ in categories)}


def _work_done(feed, timed: list, backbone, config: GlueSettings) -> tuple:
    """Examples, real tokens, padded tokens and executed FLOPs of the `timed` batches."""
    lengths = feed.train.lengths
    examples = sum(len(b) for b in timed)
    real_tokens = sum(int(lengths[b].sum()) for b in timed)
    # Under XLA a partial batch is filled to full size (feeds' fill_to): the work done is the filled batch's. Packed
    # batches compute their rows (`computed_shape`), not their examples.
    shapes = [feed.computed_shape(b) for b in timed]
    padded = [(max(rows, feed.fill_to or 0), length) for rows, length in shapes]
    padded_tokens = sum(n * length for n, length in padded)
    flops = sum(step_flops(n, length, backbone.num_layers, config.trainable_layers, int(backbone.hidden_dim),
                           int(backbone.intermediate_dim), config.cache_frozen, config.method) for n, length in padded)
    return examples, real_tokens, padded_tokens, flops


def measure_naive(config: GlueSettings, steps: int, warmup_steps: int) -> dict:
    """keras-hub's own `BertTextClassifier.fit` at fixed length `max_seq_length`, XLA on, same freezing."""
    import keras
    import keras_hub

    from tf_transfer.models import loader
    from tf_transfer.models import freezing

    task, train_examples, _, _, _ = load_data(config)
    keras.mixed_precision.set_global_policy(config.precision)
    loaded = loader.load_model(config.model, supported=("bert",),
                               purpose="the keras-hub BertTextClassifier comparison")
    encoded = inputs.encode(train_examples, loaded.tokenizer, config.max_seq_length)
    classifier = keras_hub.models.BertTextClassifier(backbone=loaded.backbone,
                                                     num_classes=task.num_labels, preprocessor=None)
    freezing.set_trainable_layers(loaded.backbone, config.trainable_layers)
    classifier.compile(optimizer=keras.optimizers.AdamW(config.lr), jit_compile=True,
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    needed = (warmup_steps + steps) * config.batch_size
    repeat = int(np.ceil(needed / len(encoded)))
    index = np.tile(np.arange(len(encoded)), repeat)[:needed]
    mask = (encoded.token_ids != loaded.tokenizer.pad_token_id).astype("int32")
    features = {"token_ids": encoded.token_ids[index], "segment_ids": encoded.segment_ids[index],
                "padding_mask": mask[index]}
    labels = encoded.labels[index].astype("int32")
    split = warmup_steps * config.batch_size

    def batches(part):
        # Arrays handed to fit go through Keras' adapter, whose autotuned prefetch delays the end of every fit
        # call (inputs.prefetched): the same pipeline settings as ours keep the comparison about the model.
        import tensorflow as tf

        dataset = tf.data.Dataset.from_tensor_slices(({k: v[part] for k, v in features.items()}, labels[part]))
        return inputs.prefetched(dataset.batch(config.batch_size), -(-len(labels[part]) // config.batch_size))

    classifier.fit(batches(slice(None, split)), epochs=1, verbose=0, shuffle=False)
    start = time.perf_counter()
    classifier.fit(batches(slice(split, None)), epochs=1, verbose=0, shuffle=False)
    elapsed = time.perf_counter() - start
    return {"naive_train_examples_per_s": (needed - split) / elapsed}
