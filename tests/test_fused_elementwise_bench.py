"""benchmarks/fused_elementwise.py: the two fusions it times compute what the model computes (output and every
gradient, up to float32 rounding), so its timings compare like with like."""

import importlib.util
import os

import numpy as np
import pytest

from conftest import REPO


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("fused_elementwise",
                                                  os.path.join(REPO, "benchmarks", "fused_elementwise.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("part", ["layer norm", "GELU"])
def test_each_fusion_matches_the_models_own_output_and_gradients(bench, part):
    import tensorflow as tf

    shape, now, fused, variables = bench.pairs()[part]
    small = (2, 5, shape[-1])  # the model's width, few rows: the rounding is per row
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=small).astype("float32"))
    upstream = tf.constant(rng.normal(size=small).astype("float32"))
    a = bench.forward_backward(now, x, upstream, variables)()
    b = bench.forward_backward(fused, x, upstream, variables)()
    assert len(a) == len(b) == 2 + len(variables)
    for u, v in zip(a, b):
        np.testing.assert_allclose(v.numpy(), u.numpy(), rtol=1e-4, atol=1e-5)
    assert bench.largest_difference(a, b) < 1e-4
    assert float(np.max(np.abs(a[1].numpy()))) > 0.1  # a gradient that is not vanishing: the comparison means something
