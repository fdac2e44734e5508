"""The freezing rule trains exactly the intended variables, and training leaves frozen ones bit-identical."""

import keras
import numpy as np
import pytest

from tf_transfer.models import freezing
from tf_transfer.models import heads
from tf_transfer.training import optimizers
from tf_transfer.core.errors import TransferError
from tf_transfer.core.setting_groups import OptimizerSettings

from conftest import NUM_LAYERS, make_tiny_backbone

EMBEDDINGS = {"token_embedding", "position_embedding", "segment_embedding", "embeddings_layer_norm"}


def _expected_layers(k):
    blocks = range(NUM_LAYERS) if k == "all" else range(NUM_LAYERS - k, NUM_LAYERS)
    names = {f"transformer_layer_{i}" for i in blocks} | {"pooled_dense"}
    return names | EMBEDDINGS if k == "all" else names


def _owner(path):
    # Variable paths look like "transformer_layer_1/self_attention_layer/query/kernel" or "head/logits/kernel".
    return path.split("/")[0]


def _batch(n=4, length=10, vocab=40):
    rng = np.random.default_rng(0)
    features = {
        "token_ids": rng.integers(5, vocab, size=(n, length)).astype("int32"),
        "segment_ids": np.zeros((n, length), "int32"),
        "padding_mask": np.ones((n, length), "int32"),
    }
    return features, rng.integers(0, 2, size=(n,)).astype("int32")


@pytest.mark.parametrize("k", [0, 1, NUM_LAYERS, "all"])
def test_exactly_the_right_variables_train_and_frozen_ones_stay_bit_identical(k):
    backbone = make_tiny_backbone()
    model = heads.build_classifier(backbone, num_outputs=2)
    freezing.set_trainable_layers(backbone, k)
    # Eager steps, except k=1 (a frozen prefix under a trained block, as the studies train): which variables move
    # is decided by the same Keras code either way (the step differentiates and updates model.trainable_variables),
    # and the traced step's trace and graph optimisation took most of each case's time. k=1 keeps the traced step
    # that runs use under test.
    model.compile(optimizer=optimizers.build_optimizer(OptimizerSettings(lr=1e-2)),
                  loss=keras.losses.SparseCategoricalCrossentropy(True), run_eagerly=k != 1)

    expected = _expected_layers(k) | {"head"}
    trainable_owners = {_owner(v.path) for v in model.trainable_variables}
    assert trainable_owners == expected
    for variable in model.non_trainable_variables:
        if "seed_generator" in variable.path:
            continue  # dropout RNG state, never trained
        assert _owner(variable.path) not in expected, variable.path

    before = {v.path: np.array(v.numpy()) for v in model.weights}
    model.train_on_batch(*_batch())
    for variable in model.weights:
        changed = not np.array_equal(before[variable.path], variable.numpy())
        if _owner(variable.path) in expected:
            assert changed, f"{variable.path} should have trained"
        else:
            assert not changed, f"{variable.path} is frozen but changed"


def test_parameter_table_counts_per_block():
    backbone = make_tiny_backbone()
    model = heads.build_classifier(backbone, num_outputs=3)
    freezing.set_trainable_layers(backbone, 1)
    table = {part: (trainable, total) for part, trainable, total in freezing.parameter_table(model, backbone)}
    block = backbone.get_layer("transformer_layer_0").count_params()
    assert table["block_0"] == (0, block)
    assert table[f"block_{NUM_LAYERS - 1}"] == (block, block)
    assert table["head"] == (16 * 3 + 3, 16 * 3 + 3)
    assert table["pooler"] == (16 * 16 + 16, 16 * 16 + 16)
    assert table["total"][1] == model.count_params()
    assert table["total"][0] == sum(int(np.prod(v.shape)) for v in model.trainable_variables)


def test_too_many_trainable_layers_is_an_error():
    backbone = make_tiny_backbone()
    with pytest.raises(TransferError, match=f"exceeds the backbone's {NUM_LAYERS} encoder blocks"):
        freezing.set_trainable_layers(backbone, NUM_LAYERS + 1)
    with pytest.raises(TransferError):
        freezing.parse_trainable_layers("-1")
    assert freezing.parse_trainable_layers("ALL") == "all" and freezing.parse_trainable_layers("2") == 2


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_head_computes_in_float32_under_mixed_precision(policy):
    """Under mixed precision the backbone computes in 16 bits; logits and regression scores stay float32."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        head = heads.pooled_head(1)
        pooled = np.linspace(-3, 3, 16, dtype="float32").reshape(2, 8)
        score = head(keras.ops.convert_to_tensor(pooled, dtype=policy.split("_")[1]))
        assert head.dense.compute_dtype == "float32" and keras.backend.standardize_dtype(score.dtype) == "float32"
        weights = head.dense.get_weights()
        expected = pooled.astype(policy.split("_")[1]).astype("float32") @ weights[0] + weights[1]
        np.testing.assert_allclose(keras.ops.convert_to_numpy(score), expected, rtol=1e-6, atol=1e-6)
    finally:
        keras.mixed_precision.set_global_policy(previous)
