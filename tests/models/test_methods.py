"""LoRA (the paper's factorization) and BitFit: what trains, what the model computes, what a saved model holds."""

import numpy as np
import pytest

from conftest import make_tiny_backbone
from tf_transfer.core.errors import TransferError
from tf_transfer.models import freezing, heads, methods
from tf_transfer.models.methods import lora

INPUTS = {"token_ids": np.array([[2, 5, 6, 3, 0]]), "segment_ids": np.zeros((1, 5), "int32"),
          "padding_mask": np.array([[1, 1, 1, 1, 0]])}


def _sequence(backbone):
    return backbone(INPUTS)["sequence_output"].numpy()


def _table(backbone):
    model = heads.build_classifier(backbone, 2)
    return {part: trainable for part, trainable, _ in freezing.parameter_table(model, backbone)}, model


def test_lora_trains_the_papers_rank_r_update_of_each_target_and_starts_as_the_pretrained_model():
    backbone = make_tiny_backbone()  # 3 blocks, 16 wide, 2 heads of 8
    before = _sequence(backbone)
    methods.apply(backbone, "lora", freezing.ALL, lora_rank=2, lora_targets=("query", "value", "attention_output"))
    assert np.abs(_sequence(backbone) - before).max() == 0  # B starts at zero
    table, model = _table(backbone)
    # A (16 x 2) and B (2 x 16) per target, the (16, 2, 8) query kernel seen as 16 x 16: not keras-hub's per-head
    # A (16, 2, 2) and B (2, 8).
    per_block = 3 * (16 * 2 + 2 * 16)
    assert [table[f"block_{i}"] for i in range(3)] == [per_block] * 3
    assert table["embeddings"] == 0 and table["pooler"] == 16 * 16 + 16 and table["head"] == 16 * 2 + 2
    adapters = [v for v in model.trainable_variables if "lora" in v.path]
    assert len(adapters) == 18 and all(v.dtype == "float32" for v in adapters)
    assert lora.lora_weight_count(16, 3, 2, ("query", "value", "attention_output")) == 3 * per_block


def test_lora_on_the_last_k_blocks_leaves_the_others_without_adapters_and_frozen():
    backbone = make_tiny_backbone()
    methods.apply(backbone, "lora", 1, lora_rank=4)
    table, model = _table(backbone)
    assert (table["block_0"], table["block_1"], table["block_2"]) == (0, 0, 2 * (16 * 4 + 4 * 16))
    carriers = lora.lora_layers(backbone)
    assert len(carriers) == 2 and all("transformer_layer_2" in layer.path for layer in carriers)


def test_lora_draws_a_as_loralib_and_peft_by_default_and_the_gaussian_only_when_asked():
    import keras

    keras.utils.set_random_seed(0)
    for rank in (2, 8):  # Kaiming-uniform (a = sqrt(5)): within 1 / sqrt(d_in) whatever the rank
        layer = keras.layers.Dense(64)
        layer.build((None, 384))
        lora.enable_lora(layer, rank, alpha=8.0)
        a = layer.lora_a.numpy()
        assert np.abs(a).max() <= 1 / np.sqrt(384) and abs(a.std() - 1 / np.sqrt(3 * 384)) < 0.004
        assert not layer.lora_b.numpy().any()
    layer = keras.layers.Dense(64)
    layer.build((None, 384))
    lora.enable_lora(layer, 4, alpha=8.0, init="gaussian")  # N(0, 1/r): 8.5x larger at r = 4
    assert abs(layer.lora_a.numpy().std() - 1 / 4) < 0.02
    layer = keras.layers.Dense(4)
    layer.build((None, 8))
    with pytest.raises(TransferError, match="--lora_init='xavier' is not a LoRA initialisation"):
        lora.enable_lora(layer, 2, alpha=8.0, init="xavier")


def test_a_saved_lora_layer_is_a_plain_layer_holding_the_merged_kernel(tmp_path):
    backbone = make_tiny_backbone()
    methods.apply(backbone, "lora", freezing.ALL, lora_rank=2, lora_alpha=4.0,
                  lora_targets=("query", "intermediate"))
    rng = np.random.default_rng(0)
    for layer in lora.lora_layers(backbone):
        layer.lora_b.assign(rng.normal(size=layer.lora_b.shape).astype("float32"))
    trained = _sequence(backbone)
    assert np.abs(trained - _sequence(make_tiny_backbone())).max() > 1e-3  # the update changes the output
    plain = make_tiny_backbone()
    path = str(tmp_path / "lora.weights.h5")
    backbone.save_weights(path)
    plain.load_weights(path)
    np.testing.assert_allclose(_sequence(plain), trained, atol=1e-5)
    # Export folds the update into the kernels first: the same outputs, B zero, the same saved kernels.
    methods.get("lora").merge_for_export(backbone)
    np.testing.assert_allclose(_sequence(backbone), trained, atol=1e-5)
    assert all(not layer.lora_b.numpy().any() for layer in lora.lora_layers(backbone))


def test_bitfit_trains_every_bias_and_layer_norm_beta_in_scope_and_gamma_only_when_asked():
    backbone = make_tiny_backbone()
    methods.apply(backbone, "bitfit", 2)
    table, model = _table(backbone)
    # Per block: q, k, v and attention-output biases (4 x 16), the feed-forward's (32 + 16), two LayerNorm betas.
    assert (table["block_0"], table["block_1"], table["block_2"]) == (0, 112 + 32, 112 + 32)
    assert table["embeddings"] == 0 and table["pooler"] == 16  # the pooler's bias, not its kernel
    names = {v.path.split("/")[-1] for v in model.trainable_variables if "head" not in v.path}
    assert names == {"bias", "beta"}
    with_gamma = make_tiny_backbone()
    methods.apply(with_gamma, "bitfit", freezing.ALL, bitfit_layer_norm=True)
    table, _ = _table(with_gamma)
    assert table["block_0"] == 112 + 64 and table["embeddings"] == 32  # the embeddings' LayerNorm too


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(method="lora", lora_rank=17), "--lora_rank=17 does not fit"),
    (dict(method="lora", trainable_layers=0), "trains nothing of the blocks"),
    (dict(method="lora", lora_targets=("queries",)), "--lora_targets must name some of query, key"),
    (dict(method="prompt"), "--method='prompt' is not a training method"),
])
def test_impossible_method_settings_are_one_clear_error(kwargs, fragment):
    backbone = make_tiny_backbone()
    with pytest.raises(TransferError, match=fragment):
        methods.apply(backbone, **kwargs)


def test_a_block_without_the_target_layer_is_refused_naming_the_family():
    backbone = make_tiny_backbone()
    for block in backbone.transformer_layers:
        object.__setattr__(block, "_feedforward_intermediate_dense", None)
    with pytest.raises(TransferError, match="cannot target 'intermediate' in BertBackbone"):
        methods.apply(backbone, "lora", lora_targets=("intermediate",))
