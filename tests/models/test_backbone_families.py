"""Every encoder family loads, packs, freezes, caches and trains: BERT, RoBERTa, DistilBERT, ELECTRA, DeBERTa-v3.

Each family is a tiny random preset folder saved with `save_to_preset` (2 blocks, 16 wide; BERT's is conftest's
3-block one): RoBERTa's byte-level BPE vocabulary and merges are built here from the test words, DeBERTa-v3's
SentencePiece model is trained here in-process, the WordPiece families use conftest's vocabulary.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from conftest import SENTENCES, VOCAB, WORDS
from tf_transfer.core.errors import TransferError

FAMILY_KEYS = ["bert", "roberta", "distil_bert", "electra", "deberta_v3"]
LAYERS = 2
MAX_LEN = 32


def roberta_tokenizer():
    """A byte-level BPE tokenizer: every printable ASCII character ("Ġ" for a leading space) is in the vocabulary,
    and merges spell out each test word with and without its leading space, so nothing is out of vocabulary."""
    import keras_hub

    merges = {}
    for word in sorted(set(WORDS)):
        for form in (word, "Ġ" + word):
            piece = form[0]
            for char in form[1:]:
                merges.setdefault(f"{piece} {char}", None)
                piece += char
    tokens = ["<s>", "<pad>", "</s>", "<mask>"] + [chr(c) for c in range(33, 127)] + ["Ġ"]
    tokens += [merge.replace(" ", "") for merge in merges]
    vocabulary = {token: i for i, token in enumerate(dict.fromkeys(tokens))}
    return keras_hub.models.RobertaTokenizer(vocabulary=vocabulary, merges=list(merges))


def deberta_tokenizer():
    """A word-level SentencePiece model trained here on the test sentences, with DeBERTa-v3's special pieces."""
    import keras_hub
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES + [" ".join(WORDS)]), model_writer=model,
        vocab_size=len(set(WORDS)) + 5, hard_vocab_limit=False, model_type="WORD", pad_id=0, bos_id=1, eos_id=2,
        unk_id=3, pad_piece="[PAD]", bos_piece="[CLS]", eos_piece="[SEP]", unk_piece="[UNK]",
        user_defined_symbols="[MASK]", minloglevel=2)
    return keras_hub.models.DebertaV3Tokenizer(proto=model.getvalue())


def tiny_family(key: str):
    """`(backbone, tokenizer)` of a tiny random model of family `key` (not BERT: conftest builds that one)."""
    import keras
    import keras_hub

    size = dict(num_layers=LAYERS, num_heads=2, hidden_dim=16, intermediate_dim=32, max_sequence_length=64)
    keras.utils.set_random_seed(1)
    if key == "roberta":
        tokenizer = roberta_tokenizer()
        return keras_hub.models.RobertaBackbone(vocabulary_size=tokenizer.vocabulary_size(), **size), tokenizer
    if key == "deberta_v3":
        tokenizer = deberta_tokenizer()
        return (keras_hub.models.DebertaV3Backbone(vocabulary_size=tokenizer.vocabulary_size(), bucket_size=16,
                                                   **size), tokenizer)
    if key == "distil_bert":
        return (keras_hub.models.DistilBertBackbone(vocabulary_size=len(VOCAB), **size),
                keras_hub.models.DistilBertTokenizer(vocabulary=list(VOCAB), lowercase=True))
    # ELECTRA with embeddings narrower than the blocks, so that its projection is part of the embeddings.
    return (keras_hub.models.ElectraBackbone(vocab_size=len(VOCAB), embedding_dim=8, **size),
            keras_hub.models.ElectraTokenizer(vocabulary=list(VOCAB), lowercase=True))


@pytest.fixture(scope="module")
def presets(tmp_path_factory, tiny_preset):
    """`{family key: preset folder}`, each saved with keras-hub's `save_to_preset`."""
    folders = {"bert": tiny_preset}
    for key in FAMILY_KEYS[1:]:
        folder = str(tmp_path_factory.mktemp(f"tiny_{key}"))
        backbone, tokenizer = tiny_family(key)
        backbone.save_to_preset(folder)
        tokenizer.save_to_preset(folder)
        folders[key] = folder
    return folders


@pytest.fixture(scope="module")
def loaded(presets):
    from tf_transfer.models import backbones

    return {key: backbones.load_preset(folder) for key, folder in presets.items()}


@pytest.fixture(scope="module")
def rte_pairs():
    from tf_transfer.data.examples import Examples

    pairs = [(SENTENCES[i], SENTENCES[(i * 5 + 3) % len(SENTENCES)]) for i in range(6)]
    return Examples([a for a, _ in pairs], [b for _, b in pairs], np.arange(6) % 2)


@pytest.mark.parametrize("key", FAMILY_KEYS)
def test_load_preset_reads_the_family_and_packs_its_way(key, presets, loaded, rte_pairs):
    from tf_transfer.data import inputs

    preset = loaded[key]
    family = preset.family
    assert family.key == key and preset.source == f"local folder {os.path.abspath(presets[key])}"
    assert len(preset.backbone.transformer_layers) == (3 if key == "bert" else LAYERS)
    encoded = inputs.encode(rte_pairs, preset.tokenizer, MAX_LEN)
    tokenizer = preset.tokenizer
    start, end = tokenizer.start_token_id, tokenizer.end_token_id
    row, length = encoded.token_ids[0], encoded.lengths[0]
    ends = np.flatnonzero(row[:length] == end)
    assert row[0] == start and row[length - 1] == end and (row[length:] == tokenizer.pad_token_id).all()
    # One end token between the texts ([CLS] a [SEP] b [SEP]), RoBERTa two (<s> a </s></s> b </s>).
    separator = 2 if key == "roberta" else 1
    assert len(ends) == separator + 1 and list(ends[:-1]) == list(range(ends[0], ends[0] + separator))
    # The model receives exactly the inputs its backbone takes.
    features = next(inputs.batches(encoded, [np.arange(len(encoded))], "bucket", 16, with_labels=False))
    assert tuple(features) == family.inputs and set(features) == set(preset.backbone.input)
    assert ("segment_ids" in features) == (key in ("bert", "electra"))


def test_what_is_not_a_freezable_encoder_is_refused_in_one_line(tmp_path, presets):
    import keras_hub

    from tf_transfer.models import backbones

    keras_hub.models.GPT2Backbone(vocabulary_size=16, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
                                  max_sequence_length=8).save_to_preset(str(tmp_path))
    with pytest.raises(TransferError) as refused:
        backbones.load_preset(str(tmp_path))
    message = str(refused.value)
    assert "\n" not in message and "GPT2Backbone, not an encoder" in message and "RoBERTa (RobertaBackbone)" in message
    # The BERT-only studies name the families they support before reading any weights.
    with pytest.raises(TransferError, match=r"is a RoBERTa encoder; stack-and-finetune supports BERT presets only"):
        backbones.load_preset(presets["roberta"], supported=("bert",), purpose="stack-and-finetune")


@pytest.mark.parametrize("key", FAMILY_KEYS)
def test_freezing_rule_parameter_table_and_learning_rate_groups(key, loaded):
    from tf_transfer.models import freezing, heads
    from tf_transfer.training import optimizers

    backbone = loaded[key].backbone
    depth = len(backbone.transformer_layers)
    model = heads.build_classifier(backbone, num_outputs=2)
    freezing.set_trainable_layers(backbone, 1)
    rows = {part: (trainable, total) for part, trainable, total in freezing.parameter_table(model, backbone)}
    last = f"block_{depth - 1}"
    trained = {last, "head"} | ({"pooler"} if key in ("bert", "electra") else set())
    for part, (trainable, total) in rows.items():
        if part in trained:
            assert trainable == total > 0, part
        elif part != "total":
            assert trainable == 0, part
    # The pooler is the backbone's pooled_dense (BERT, ELECTRA); the others' head has keras-hub's dense layer.
    assert rows["pooler"][1] == (16 * 16 + 16 if key in ("bert", "electra") else 0)
    assert rows["head"][1] == 16 * 2 + 2 + (0 if key in ("bert", "electra") else 16 * 16 + 16)
    assert rows["total"][0] == sum(rows[part][0] for part in trained)
    namespace = types.SimpleNamespace(backbone=backbone, task_heads={"glue": model.get_layer("head")},
                                      trainable_variables=model.trainable_variables)
    groups = optimizers.parameter_groups(namespace, 1e-3, 0.5)
    assert [g.name for g in groups] == [last] + (["pooler"] if "pooler" in trained else []) + ["head_glue"]
    freezing.set_trainable_layers(backbone, "all")
    assert freezing.parameter_table(model, backbone)[0][1] == freezing.parameter_table(model, backbone)[0][2] > 0


@pytest.mark.parametrize("key", FAMILY_KEYS)
def test_cached_suffix_gives_the_full_models_logits(key, loaded, rte_pairs):
    from tf_transfer.data import inputs
    from tf_transfer.models import cached_prefix
    from tf_transfer.models import heads

    backbone, tokenizer = loaded[key].backbone, loaded[key].tokenizer
    encoded = inputs.encode(rte_pairs, tokenizer, MAX_LEN)
    features = next(inputs.batches(encoded, [np.arange(len(encoded))], "bucket", 16, with_labels=False))
    head = heads.pooled_head(2, backbone=backbone)
    full = heads.build_classifier(backbone, 2, head=head)
    expected = np.asarray(full(features, training=False))
    # Packed (--cache_frozen --padding=pack): the prefix and the suffix on rows shared by examples of mixed lengths.
    mixed = random_encoded(loaded[key].family, max_len=MAX_LEN)
    everything = [np.arange(len(mixed))]
    expected_mixed = np.asarray(full(next(inputs.batches(mixed, everything, "fixed", 16, with_labels=False)),
                                     training=False))
    packed = next(inputs.batches(mixed, everything, "pack", 16, with_labels=False))
    assert len(packed["token_ids"]) < len(mixed)
    starts = packed.pop("cls_positions")
    # k = 1 as asked; k = L also starts the suffix at the embeddings (ELECTRA's after its projection).
    for trainable in (1, len(backbone.transformer_layers)):
        hidden = cached_prefix.prefix_model(backbone, trainable)(features, training=False)
        suffix = cached_prefix.suffix_classifier(backbone, trainable, head, hidden_dtype="float32")
        got = suffix({"hidden": np.asarray(hidden), "padding_mask": features["padding_mask"]}, training=False)
        np.testing.assert_allclose(np.asarray(got), expected, rtol=0, atol=1e-5)
        rows = cached_prefix.prefix_model(backbone, trainable, packed=True)(packed, training=False)
        suffix = cached_prefix.suffix_classifier(backbone, trainable, head, hidden_dtype="float32", packed=True)
        got = suffix({"hidden": np.asarray(rows), "example_ids": packed["example_ids"], "cls_positions": starts},
                     training=False)
        np.testing.assert_allclose(np.asarray(got), expected_mixed, rtol=0, atol=1e-5)


def random_encoded(family, max_len: int, n: int = 12):
    """`n` examples of random tokens (a second segment in their second half), lengths mixed from 1 to `max_len`."""
    from tf_transfer.data import inputs

    rng = np.random.default_rng(0)
    lengths = np.concatenate([[max_len, 1, 2], rng.integers(2, max_len + 1, n - 3)]).astype(np.int32)
    token_ids = rng.integers(5, 30, (n, max_len)).astype(np.int32)
    segment_ids = np.zeros((n, max_len), np.int32)
    for i, length in enumerate(lengths):
        token_ids[i, length:] = 0
        segment_ids[i, length // 2:length] = 1
    return inputs.Encoded(token_ids, segment_ids, lengths, np.arange(n) % 2, input_names=family.inputs)


@pytest.mark.parametrize("key", FAMILY_KEYS)
def test_packed_model_gives_the_padded_models_logits_and_gradients(key, loaded):
    """Dropout off (`training=False`), lengths from 1 to the position table's 64. Measured on 2026-11-27 (2-core
    AVX-512 Xeon, oneDNN): logits bit-identical in every family, gradients within 1e-5 of each variable's largest
    (summation order over tokens); all-MiniLM-L6 on 32 MRPC pairs (27-79 tokens): logits within 4e-8, gradients
    within 4e-6. Tested at 5e-5, plus 1e-6 of the model's largest gradient for the key biases, whose true gradient
    is 0 (softmax ignores them) and whose rounding is all there is."""
    import keras
    import tensorflow as tf

    from tf_transfer.data import inputs
    from tf_transfer.models import heads, packed

    backbone = loaded[key].backbone
    encoded = random_encoded(loaded[key].family, max_len=64)
    plan = [np.arange(len(encoded))]
    head = heads.pooled_head(2, backbone=backbone)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    results = []
    for model, padding in ((heads.build_classifier(backbone, 2, head=head), "fixed"),
                           (packed.build_classifier(backbone, head), "pack")):
        features = next(inputs.batches(encoded, plan, padding, 16, with_labels=False))
        with tf.GradientTape() as tape:
            logits = model(features, training=False)
            value = loss(encoded.labels, logits)
        gradients = tape.gradient(value, model.trainable_variables)
        results.append((np.asarray(logits), [np.asarray(tf.convert_to_tensor(g)) for g in gradients]))
        if padding == "pack":  # several examples share a row: the packing is exercised
            assert features["token_ids"].shape[0] < len(encoded)
    (padded_logits, padded_gradients), (packed_logits, packed_gradients) = results
    np.testing.assert_allclose(packed_logits, padded_logits, rtol=1e-5, atol=1e-7)
    largest = max(np.abs(g).max() for g in padded_gradients)
    assert len(packed_gradients) == len(padded_gradients) > 30
    for got, expected in zip(packed_gradients, padded_gradients):
        np.testing.assert_allclose(got, expected, rtol=0, atol=5e-5 * np.abs(expected).max() + 1e-6 * largest)


# BERT's runs, cached and not, are tests/studies/test_glue.py's and tests/training/test_performance.py's. Each other
# family trains one way: over the cache where its suffix differs most from BERT's (ELECTRA's projection, DeBERTa's
# relative attention; DeBERTa's over a packed cache, --padding=pack), on tokens for the other two; that every family's
# cached suffix, padded or packed, gives its full model's logits is `test_cached_suffix_gives_the_full_models_logits`.
RUN_WAYS = [("roberta", False, "bucket"), ("distil_bert", False, "bucket"), ("electra", True, "bucket"),
            ("deberta_v3", True, "pack")]


@pytest.mark.parametrize("key, cache_frozen, padding", RUN_WAYS)
def test_glue_run_completes_with_or_without_the_cache(key, cache_frozen, padding, presets, glue_dir, tmp_path):
    from tf_transfer.data import cache
    from tf_transfer.studies.glue import glue_task as runner
    from tf_transfer.studies.glue.glue_settings import GlueSettings

    assert {key for key, _, _ in RUN_WAYS} == set(FAMILY_KEYS[1:])
    config = GlueSettings(task="rte", preset=presets[key], trainable_layers=1, lr=1e-3, batch_size=8, max_epochs=1,
                          max_train_examples=8, max_seq_length=MAX_LEN, data_dir=glue_dir, cache_frozen=cache_frozen,
                          eval_batch_size=16, validation_fraction=0, patience=0, padding=padding)
    folder = tmp_path / "run"
    summary = runner.run_glue(config, str(folder))
    with open(folder / "summary.json") as f:
        assert json.load(f)["completed"] is True
    assert summary["completed"] and summary["cache_frozen"] is cache_frozen and len(summary["epochs"]) == 1
    assert 0.0 <= summary["epochs"][0]["test"]["accuracy"] <= 1.0
    table = {row["part"]: row for row in summary["parameter_table"]}
    assert table["embeddings"]["trainable"] == 0 and table["block_0"]["trainable"] == 0
    assert (summary["cache_time_s"] > 0) is cache_frozen and summary["config"]["padding"] == padding
    cache.clear_memory()


def test_roberta_run_exports_to_keras_hubs_own_classifier(loaded, rte_pairs, tmp_path):
    """The head's dense layers land in keras-hub's RobertaTextClassifier, which gives the same logits from text;
    ELECTRA, for which keras-hub has no classifier, is refused."""
    from tf_transfer.data import inputs, tasks
    from tf_transfer.models import export, heads

    backbone, tokenizer = loaded["roberta"].backbone, loaded["roberta"].tokenizer
    model = heads.build_classifier(backbone, 2)
    task = tasks.get_task("rte")
    export.export_classifier(backbone, tokenizer, model.get_layer("head"), task, MAX_LEN, str(tmp_path))
    classifier, meta = export.load(str(tmp_path))
    outputs, _ = export.predict(classifier, meta, list(rte_pairs.text_a), list(rte_pairs.text_b))
    encoded = inputs.encode(rte_pairs, tokenizer, MAX_LEN)
    features = next(inputs.batches(encoded, [np.arange(len(encoded))], "fixed", 16, with_labels=False))
    # The tiny random model's logits differ by about 1e-5 between pairs: a tolerance that size would not see a
    # pair scored wrongly.
    np.testing.assert_allclose(outputs, np.asarray(model(features, training=False)), rtol=0, atol=1e-7)
    # Its packed model (predict --padding=pack), through the classifier's own pooled_dense and logits: the same.
    packed = next(inputs.batches(encoded, [np.arange(len(encoded))], "pack", 16, with_labels=False))
    np.testing.assert_allclose(np.asarray(export.packed_classifier(classifier)(packed, training=False)), outputs,
                               rtol=0, atol=1e-7)
    with pytest.raises(TransferError, match="no ELECTRA text classifier"):
        export.check_exportable(loaded["electra"].backbone)


@pytest.mark.parametrize("key", ["roberta", "distil_bert", "deberta_v3"])
def test_python_cache_splits_keras_hubs_own_classifier_of_the_family(key):
    """`tf_transfer.CachedClassifier` on keras-hub's `*TextClassifier` of each family whose head reads the first
    token (BERT's, over the pooler, is tests/models/test_cached_classifier.py's): the same logits as the classifier
    on the same texts, and a step trains the top block and the classifier's head layers only.

    The cache stores the frozen prefix's output in float16, so the logits agree to its rounding: measured on
    2026-11-27 within 7.4e-4 of the largest logit (DistilBERT; RoBERTa 4.9e-4, DeBERTa-v3 4.0e-4), tested at 2e-3,
    about twice float16's machine epsilon. The logits kernel is drawn at unit scale so that the logits are of order 1
    (keras-hub draws it at 0.02: near-zero logits would pass any such tolerance)."""
    import keras
    import keras_hub

    import tf_transfer
    from tf_transfer.models import families

    backbone, tokenizer = tiny_family(key)
    family = families.of(backbone)
    preprocessor = getattr(keras_hub.models, f"{family.classifier}Preprocessor")(tokenizer, sequence_length=MAX_LEN)
    classifier = getattr(keras_hub.models, family.classifier)(backbone, num_classes=2, preprocessor=preprocessor)
    classifier.output_dense.kernel.assign(keras.random.normal(classifier.output_dense.kernel.shape, seed=0))
    expected = np.asarray(classifier(preprocessor(SENTENCES), training=False))

    cached = tf_transfer.CachedClassifier(classifier, trainable_layers=1, batch_size=len(SENTENCES))
    got = cached.predict(SENTENCES)
    assert np.abs(expected).max() > 0.1
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-3 * np.abs(expected).max())

    head = [layer for layer in classifier.layers if layer.weights and layer is not backbone]
    assert [layer.name for layer in head] == ["pooled_dense", "logits"]
    trained = {id(v) for layer in [backbone.transformer_layers[-1], *head] for v in layer.weights}
    before = [v.numpy().copy() for v in classifier.weights]
    cached.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(True))
    cached.fit(SENTENCES, np.arange(len(SENTENCES)) % 2, epochs=1, verbose=0)  # one batch: one step
    changed = {id(v) for v, old in zip(classifier.weights, before) if (v.numpy() != old).any()}
    assert changed <= trained
    # Every kernel of the top block and the head moved (a key bias may not: softmax ignores it).
    assert all(id(v) in changed for layer in [backbone.transformer_layers[-1], *head] for v in layer.weights
               if len(v.shape) == 2 or layer in head)


def test_a_misspelled_preset_name_is_one_line_with_the_names_it_is_close_to(monkeypatch):
    """keras-hub's error for a name it does not know is seven lines, whose first (all we said of it) named neither the
    name nor the names it is close to: now it names them, before the hub is asked, beside the offline options."""
    from tf_transfer.models import backbones

    monkeypatch.setattr(backbones, "_from_preset", lambda *args: pytest.fail("the hub asked for a misspelled name"))
    with pytest.raises(TransferError) as raised:
        backbones.load_preset("bert_base_uncased")
    said = str(raised.value)
    assert said.startswith("preset 'bert_base_uncased' is not a keras-hub preset name (did you mean "
                           "bert_base_en_uncased, ")
    assert "\n" not in said and "kaggle://" in said and "offline options" in said
    with pytest.raises(TransferError, match=r"^preset 'no_such_model_at_all' is not a keras-hub preset name: give"):
        backbones.load_preset("no_such_model_at_all")


def test_an_unreachable_hub_is_one_short_line(monkeypatch, tmp_path):
    """Offline, every command said the hub's whole ConnectionError (about 400 characters) on each start, and then
    a second line naming the same package folder (the model loader's): now one line, the run's model loaded as
    every study loads it."""
    from tf_transfer.core.setting_groups import ModelSettings
    from tf_transfer.models import backbones, loader

    hub_error = ConnectionError("Failed to resolve 'www.kaggle.com' " + "(name resolution) " * 20)
    backbone = types.SimpleNamespace(num_layers=6)

    def from_preset(location, *args):
        if location == "all_minilm_l6_v2_en":
            raise hub_error
        return backbone, "tokenizer"

    said = []
    monkeypatch.delenv(backbones.HUB_UNREACHABLE_ENV, raising=False)
    monkeypatch.setattr(backbones, "_from_preset", from_preset)
    monkeypatch.setattr(backbones, "offline_folder", lambda preset: str(tmp_path))
    monkeypatch.setattr(backbones, "preset_depth", lambda preset: None)
    for module in (backbones, loader):
        monkeypatch.setattr(module.logging, "info", lambda text, *args: said.append(text % args))
        monkeypatch.setattr(module.logging, "debug", lambda text, *args: said.append("debug: " + text % args))
    loaded = loader.load_model(ModelSettings(preset="all_minilm_l6_v2_en", trainable_layers=2))
    assert loaded.backbone is backbone and "the hub was unreachable" in loaded.source  # the record still says so
    assert said[0] == (f"preset all_minilm_l6_v2_en: the model hub is unreachable; loading the same weights from "
                       f"{tmp_path}")
    assert said[1].startswith("debug: ") and "name resolution" in said[1]  # the detail kept for --verbosity=1
    assert len(said) == 2
    # The processes this one starts (a sweep's trials) load the package's weights at once, saying so at
    # --verbosity=1 only: a sweep's terminal had its parent's line again from every trial.
    script = f"import os; print(os.environ.get({backbones.HUB_UNREACHABLE_ENV!r}))"
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert child.stdout.strip() == "all_minilm_l6_v2_en"
    said.clear()

    def offline_only(location, *args):
        assert location != "all_minilm_l6_v2_en", "the hub asked again"
        return backbone, "tokenizer"

    monkeypatch.setattr(backbones, "_from_preset", offline_only)
    again = loader.load_model(ModelSettings(preset="all_minilm_l6_v2_en", trainable_layers=2))
    assert again.backbone is backbone and again.source == loaded.source
    assert said and all(line.startswith("debug: ") for line in said), said
    # Where the hub answers, the loader's line is the one that says where the weights came from.
    monkeypatch.delenv(backbones.HUB_UNREACHABLE_ENV)
    said.clear()
    monkeypatch.setattr(backbones, "_from_preset", lambda location, *args: (backbone, "tokenizer"))
    loader.load_model(ModelSettings(preset="all_minilm_l6_v2_en", trainable_layers=2))
    assert said == ["preset all_minilm_l6_v2_en: weights from hub preset all_minilm_l6_v2_en"]
