"""Google TF1 BERT checkpoints: exact layout on save, identical outputs on load, and agreement with two independent
readings of the same variables (keras-hub's Hugging Face converter, and a NumPy transcription of Google's
`modeling.py`).

A round trip alone would pass even if `save_tf1_bert` and `load_tf1_bert` made the same layout mistake in opposite
directions, hence the two independent checks, which read the TF1 checkpoint without going through
`tf_transfer.tf1_checkpoint`.
"""

import json
import os
import shutil

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import save_file

from tf_transfer.models import tf1_checkpoint
from tf_transfer.core.errors import TransferError

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(
    "the a is was of to and in on cat dog man woman car house tree red blue big small good bad run ran eat play "
    "what who did can will not yes no cafe , . ?".split())
LAYERS, HEADS, HIDDEN, INTER, MAX_LEN, SEGMENTS = 2, 2, 16, 32, 32, 2


def _google_layout():
    """Google BERT's variable names and shapes for the tiny config, written out independently of the module."""
    layout = {
        "bert/embeddings/word_embeddings": [len(VOCAB), HIDDEN],
        "bert/embeddings/position_embeddings": [MAX_LEN, HIDDEN],
        "bert/embeddings/token_type_embeddings": [SEGMENTS, HIDDEN],
        "bert/embeddings/LayerNorm/gamma": [HIDDEN],
        "bert/embeddings/LayerNorm/beta": [HIDDEN],
        "bert/pooler/dense/kernel": [HIDDEN, HIDDEN],
        "bert/pooler/dense/bias": [HIDDEN],
    }
    for i in range(LAYERS):
        p = f"bert/encoder/layer_{i}"
        for part in ("query", "key", "value"):
            layout[f"{p}/attention/self/{part}/kernel"] = [HIDDEN, HIDDEN]
            layout[f"{p}/attention/self/{part}/bias"] = [HIDDEN]
        layout.update({
            f"{p}/attention/output/dense/kernel": [HIDDEN, HIDDEN], f"{p}/attention/output/dense/bias": [HIDDEN],
            f"{p}/attention/output/LayerNorm/gamma": [HIDDEN], f"{p}/attention/output/LayerNorm/beta": [HIDDEN],
            f"{p}/intermediate/dense/kernel": [HIDDEN, INTER], f"{p}/intermediate/dense/bias": [INTER],
            f"{p}/output/dense/kernel": [INTER, HIDDEN], f"{p}/output/dense/bias": [HIDDEN],
            f"{p}/output/LayerNorm/gamma": [HIDDEN], f"{p}/output/LayerNorm/beta": [HIDDEN],
        })
    return layout


def _random_backbone(seed=3):
    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(VOCAB), num_layers=LAYERS, num_heads=HEADS, hidden_dim=HIDDEN, intermediate_dim=INTER,
        max_sequence_length=MAX_LEN, num_segments=SEGMENTS, dropout=0.1)
    # BERT's own initialisation (stddev 0.02) keeps activations so small that GELU is nearly linear and softmax
    # nearly uniform; large random weights make a wrong reshape, transpose or activation show in the outputs.
    rng = np.random.default_rng(seed)
    for weight in backbone.weights:
        name = weight.path.split("/")[-1]
        if name == "gamma":
            value = 1.0 + 0.3 * rng.standard_normal(weight.shape)
        elif name in ("beta", "bias"):
            value = 0.2 * rng.standard_normal(weight.shape)
        else:
            value = 0.4 * rng.standard_normal(weight.shape)
        weight.assign(value.astype("float32"))
    return backbone


def _batch():
    rng = np.random.default_rng(7)
    lengths = [12, 7, 3]  # the first row fills the batch, the others are padded
    token_ids = np.zeros((3, 12), "int32")
    segment_ids = np.zeros((3, 12), "int32")
    padding_mask = np.zeros((3, 12), "int32")
    for row, length in enumerate(lengths):
        token_ids[row, :length] = rng.integers(5, len(VOCAB), size=length)
        token_ids[row, 0] = VOCAB.index("[CLS]")
        segment_ids[row, length // 2:length] = 1
        padding_mask[row, :length] = 1
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


def _outputs(backbone, batch):
    out = backbone(batch, training=False)
    return np.asarray(out["sequence_output"]), np.asarray(out["pooled_output"])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The random backbone, its outputs on `_batch()`, and its TF1 checkpoint files."""
    folder = str(tmp_path_factory.mktemp("tf1_bert"))
    backbone = _random_backbone()
    files = tf1_checkpoint.save_tf1_bert(backbone, os.path.join(folder, "bert_model.ckpt"), vocab=VOCAB)
    return {"folder": folder, "files": files, "outputs": _outputs(backbone, _batch())}


def _copy_files(saved, tmp_path):
    """A private copy of the checkpoint folder, for tests that damage or extend it."""
    folder = str(tmp_path / "copy")
    shutil.copytree(saved["folder"], folder)
    return os.path.join(folder, "bert_model.ckpt"), os.path.join(folder, "bert_config.json"), \
        os.path.join(folder, "vocab.txt")


def _write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


def test_saved_checkpoint_has_googles_exact_names_and_shapes(saved):
    files = saved["files"]
    found = dict(tf.train.list_variables(files["checkpoint"]))
    assert found == _google_layout()
    # A name-based TF1 checkpoint: no object-graph entries, attribute suffixes, optimizer slots or step counter.
    for name in found:
        assert ".ATTRIBUTES" not in name and "OBJECT_GRAPH" not in name, name
        assert "adam" not in name.lower() and "global_step" not in name, name
    assert sorted(os.listdir(saved["folder"])) == [
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index", "vocab.txt"]
    with open(files["config"], encoding="utf-8") as f:
        config = json.load(f)
    assert config == {
        "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "hidden_size": HIDDEN, "initializer_range": 0.02, "intermediate_size": INTER,
        "max_position_embeddings": MAX_LEN, "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
        "type_vocab_size": SEGMENTS, "vocab_size": len(VOCAB)}
    with open(files["vocab"], encoding="utf-8") as f:
        assert f.read().splitlines() == VOCAB


def test_loading_gives_the_same_outputs_and_a_google_tokenizer(saved):
    files = saved["files"]
    loaded = tf1_checkpoint.load_tf1_bert(files["checkpoint"], files["config"], files["vocab"])
    sequence, pooled = _outputs(loaded.backbone, _batch())
    np.testing.assert_allclose(sequence, saved["outputs"][0], atol=1e-5, rtol=0)
    np.testing.assert_allclose(pooled, saved["outputs"][1], atol=1e-5, rtol=0)
    assert loaded.backbone.dropout == 0.1 and loaded.backbone.num_segments == SEGMENTS
    assert "TF1 checkpoint" in loaded.source and "skipped" not in loaded.source
    assert loaded.tokenizer.get_vocabulary() == VOCAB
    # Google's do_lower_case lowercases and strips accents.
    ids = np.asarray(loaded.tokenizer("The Café")).tolist()
    assert ids == [VOCAB.index("the"), VOCAB.index("cafe")]


def test_a_hugging_face_folder_of_the_tf1_variables_loads_to_the_same_outputs(saved, tmp_path):
    # Converted from the TF1 checkpoint the way Hugging Face's load_tf_weights_in_bert does (rename, transpose
    # kernels to torch's [out, in]), then read by keras-hub's own converter: an independent check of the layout.
    reader = tf.train.load_checkpoint(saved["files"]["checkpoint"])
    tensors = {}
    for name in reader.get_variable_to_shape_map():
        value = reader.get_tensor(name)
        hf = name[len("bert/"):].replace("layer_", "layer.").replace("/", ".")
        if hf.endswith(".kernel"):
            hf, value = hf[: -len(".kernel")] + ".weight", value.T
        elif hf.endswith(".gamma"):
            hf = hf[: -len(".gamma")] + ".weight"
        elif hf.endswith(".beta"):
            hf = hf[: -len(".beta")] + ".bias"
        elif hf.endswith("_embeddings"):
            hf += ".weight"
        tensors[hf] = np.ascontiguousarray(value)
    assert "encoder.layer.0.attention.self.query.weight" in tensors and "pooler.dense.weight" in tensors
    folder = str(tmp_path / "hf")
    os.makedirs(folder)
    save_file(tensors, os.path.join(folder, "model.safetensors"))
    _write_json(os.path.join(folder, "config.json"), {
        "model_type": "bert", "architectures": ["BertModel"], "vocab_size": len(VOCAB), "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "intermediate_size": INTER,
        "max_position_embeddings": MAX_LEN, "type_vocab_size": SEGMENTS, "hidden_act": "gelu",
        "layer_norm_eps": 1e-12})
    _write_json(os.path.join(folder, "tokenizer_config.json"), {"do_lower_case": True})
    shutil.copy(saved["files"]["vocab"], os.path.join(folder, "vocab.txt"))

    backbone = keras_hub.models.BertBackbone.from_preset(folder)
    sequence, pooled = _outputs(backbone, _batch())
    np.testing.assert_allclose(sequence, saved["outputs"][0], atol=1e-5, rtol=0)
    np.testing.assert_allclose(pooled, saved["outputs"][1], atol=1e-5, rtol=0)


def _google_bert_forward(checkpoint, batch, gelu):
    """Google's modeling.py BertModel in NumPy (float64), reading the TF1 variables by name."""
    reader = tf.train.load_checkpoint(checkpoint)
    w = {name: reader.get_tensor(name).astype(np.float64) for name in reader.get_variable_to_shape_map()}

    def layer_norm(x, prefix):  # tf.contrib.layers.layer_norm: epsilon 1e-12
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * w[f"{prefix}/gamma"] + w[f"{prefix}/beta"]

    def dense(x, prefix):
        return x @ w[f"{prefix}/kernel"] + w[f"{prefix}/bias"]

    batch_size, length = batch["token_ids"].shape
    head_dim = HIDDEN // HEADS
    x = (w["bert/embeddings/word_embeddings"][batch["token_ids"]]
         + w["bert/embeddings/token_type_embeddings"][batch["segment_ids"]]
         + w["bert/embeddings/position_embeddings"][:length])
    x = layer_norm(x, "bert/embeddings/LayerNorm")
    adder = (1.0 - batch["padding_mask"][:, None, None, :]) * -10000.0  # padded keys only, as Google does

    def heads(t):  # [batch, length, hidden] -> [batch, heads, length, head_dim]
        return t.reshape(batch_size, length, HEADS, head_dim).transpose(0, 2, 1, 3)

    for i in range(LAYERS):
        p = f"bert/encoder/layer_{i}"
        q, k, v = (heads(dense(x, f"{p}/attention/self/{part}")) for part in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head_dim) + adder
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch_size, length, HIDDEN)
        x = layer_norm(dense(context, f"{p}/attention/output/dense") + x, f"{p}/attention/output/LayerNorm")
        ffn = dense(gelu(dense(x, f"{p}/intermediate/dense")), f"{p}/output/dense")
        x = layer_norm(ffn + x, f"{p}/output/LayerNorm")
    return x, np.tanh(dense(x[:, 0], "bert/pooler/dense"))


def test_keras_hub_computes_what_googles_modeling_py_computes_with_its_tanh_gelu(saved):
    from scipy.special import erf

    checkpoint = saved["files"]["checkpoint"]
    sequence, pooled = saved["outputs"]
    ref_sequence, ref_pooled = _google_bert_forward(checkpoint, _batch(), tf1_checkpoint.google_gelu)
    # float32 Keras against a float64 reference: agreement to float32 rounding.
    np.testing.assert_allclose(sequence, ref_sequence, atol=1e-5, rtol=0)
    np.testing.assert_allclose(pooled, ref_pooled, atol=1e-5, rtol=0)

    # The tolerance can tell the two GELUs apart: with the exact erf form the reference moves well beyond it, so
    # the agreement above is evidence that keras-hub uses the tanh form, not luck.
    def exact_gelu(x):
        return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))

    exact_sequence, _ = _google_bert_forward(checkpoint, _batch(), exact_gelu)
    assert np.abs(exact_sequence - ref_sequence).max() > 1e-4


def test_variables_outside_the_encoder_are_skipped_and_reported(saved, tmp_path):
    # A fine-tuned or pre-training checkpoint also holds heads, optimizer slots and a step counter. Written with
    # raw SaveV2 (not the module's writer) so the reader is tested on a file it did not produce.
    reader = tf.train.load_checkpoint(saved["files"]["checkpoint"])
    tensors = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    tensors.update({
        "cls/predictions/output_bias": np.zeros([len(VOCAB)], "float32"),
        "cls/seq_relationship/output_weights": np.zeros([2, HIDDEN], "float32"),
        "bert/pooler/dense/kernel/adam_m": np.zeros([HIDDEN, HIDDEN], "float32"),
        "bert/pooler/dense/kernel/adam_v": np.zeros([HIDDEN, HIDDEN], "float32"),
        "global_step": np.array(5, "int64"),
    })
    prefix = str(tmp_path / "model.ckpt-5")
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tensors[n] for n in names])
    # The folder (no `checkpoint` state file, one *.index) resolves to the prefix.
    loaded = tf1_checkpoint.load_tf1_bert(str(tmp_path), saved["files"]["config"], saved["files"]["vocab"])
    assert "cls/ (2)" in loaded.source and "global_step (1)" in loaded.source
    assert "optimizer slots (2)" in loaded.source
    np.testing.assert_allclose(_outputs(loaded.backbone, _batch())[1], saved["outputs"][1], atol=1e-5, rtol=0)


def test_missing_files_say_what_to_pass(saved, tmp_path):
    files = saved["files"]
    with pytest.raises(TransferError, match=r"bert_model\.ckpt\.index not found\): pass --init_checkpoint=") as error:
        tf1_checkpoint.load_tf1_bert(str(tmp_path / "bert_model.ckpt"), files["config"], files["vocab"])
    assert "\n" not in str(error.value)  # entry points print it as a single `error:` line
    with pytest.raises(TransferError, match=r"--bert_config_file .*missing\.json does not exist: pass "
                                            r"--bert_config_file=.*bert_config\.json"):
        tf1_checkpoint.load_tf1_bert(files["checkpoint"], str(tmp_path / "missing.json"), files["vocab"])
    with pytest.raises(TransferError, match="no --vocab_file given"):
        tf1_checkpoint.load_tf1_bert(files["checkpoint"], files["config"], "")
    # Naming one of the checkpoint's files instead of the prefix is understood.
    loaded = tf1_checkpoint.load_tf1_bert(files["checkpoint"] + ".index", files["config"], files["vocab"])
    assert loaded.backbone.num_layers == LAYERS


def test_a_config_that_does_not_fit_the_checkpoint_names_variable_file_and_shapes(saved, tmp_path):
    checkpoint, config_file, vocab_file = _copy_files(saved, tmp_path)
    with open(config_file, encoding="utf-8") as f:
        config = json.load(f)

    _write_json(config_file, {**config, "intermediate_size": 2 * INTER})
    with pytest.raises(TransferError) as error:
        tf1_checkpoint.load_tf1_bert(checkpoint, config_file, vocab_file)
    message = str(error.value)
    assert "bert/encoder/layer_0/intermediate/dense/kernel" in message and checkpoint in message
    assert f"[{HIDDEN}, {INTER}]" in message and f"[{HIDDEN}, {2 * INTER}]" in message and config_file in message
    assert "more problems" in message and "\n" not in message  # every layer's FFN is wrong, all are counted

    # Fewer layers than the checkpoint holds: layer 1's variables would be dropped, so it is refused.
    _write_json(config_file, {**config, "num_hidden_layers": 1})
    with pytest.raises(TransferError, match=r"bert/encoder/layer_1/.* has no place in the backbone"):
        tf1_checkpoint.load_tf1_bert(checkpoint, config_file, vocab_file)

    _write_json(config_file, {**config, "hidden_act": "relu"})
    with pytest.raises(TransferError, match="hidden_act is 'relu'"):
        tf1_checkpoint.load_tf1_bert(checkpoint, config_file, vocab_file)

    _write_json(config_file, {k: v for k, v in config.items() if k != "type_vocab_size"})
    with pytest.raises(TransferError, match="lacks type_vocab_size"):
        tf1_checkpoint.load_tf1_bert(checkpoint, config_file, vocab_file)

    # A vocabulary longer than the embedding table would produce out-of-range ids.
    _write_json(config_file, config)
    with open(vocab_file, "a", encoding="utf-8") as f:
        f.write("extra\n")
    with pytest.raises(TransferError, match=f"has {len(VOCAB) + 1} tokens but .* vocab_size {len(VOCAB)}"):
        tf1_checkpoint.load_tf1_bert(checkpoint, config_file, vocab_file)


def test_a_missing_variable_is_named(saved, tmp_path):
    reader = tf.train.load_checkpoint(saved["files"]["checkpoint"])
    names = sorted(n for n in reader.get_variable_to_shape_map() if n != "bert/encoder/layer_1/output/dense/bias")
    prefix = str(tmp_path / "bert_model.ckpt")
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[reader.get_tensor(n) for n in names])
    with pytest.raises(TransferError, match=r"variable bert/encoder/layer_1/output/dense/bias \(expected shape "
                                            rf"\[{HIDDEN}\]\) is missing from checkpoint .*bert_model\.ckpt"):
        tf1_checkpoint.load_tf1_bert(prefix, saved["files"]["config"], saved["files"]["vocab"])
