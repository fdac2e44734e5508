"""Stack-and-finetune: CoNLL and pair readers, conlleval-exact entity F1, the phase switch, every head, the CLI."""

import json
import os

import numpy as np
import pytest

from conftest import REPO, SENTENCES, TWO_CPUS, VOCAB, copy_when_saved, quora_rows, run_module
from study_runs import GROUP, run_study
from tf_transfer.core import ner_metrics
from tf_transfer.data import stack_data
from tf_transfer.core.errors import TransferError
from tf_transfer.core.setting_groups import OptimizerSettings

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
cats NNS I-NP O
. . O O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

u.n. NNP B-NP I-ORG
the DT B-NP O
"""


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- readers -------------------------------------------------------------------------------------------------------


def test_conll_reader_skips_docstart_and_splits_sentences_on_blank_lines(tmp_path):
    sentences = stack_data.read_conll(write(tmp_path / "eng.train", CONLL))
    assert sentences.words == [["EU", "rejects", "German", "cats", "."], ["Peter", "Blackburn"], ["u.n.", "the"]]
    assert sentences.tags == [["B-ORG", "O", "B-MISC", "O", "O"], ["B-PER", "I-PER"], ["I-ORG", "O"]]
    assert stack_data.tag_vocabulary(sentences) == ("O", "B-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER")


def test_conll_labels_sit_on_each_words_first_piece_only(tmp_path):
    import keras_hub

    # "##s" lets "cats" split into cat + ##s; "u.n." splits at its punctuation into four pieces.
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=list(VOCAB) + ["##s"], lowercase=True)
    sentences = stack_data.read_conll(write(tmp_path / "eng.train", CONLL))
    names = stack_data.tag_vocabulary(sentences)
    encoded = stack_data.encode_sentences(sentences, tokenizer, max_seq_length=16, tag_names=names)
    ids = encoded.inputs[""].token_ids
    first = encoded.labels[0]
    # [CLS] eu rejects german cat ##s . [SEP]: the unknown words are one [UNK] piece each.
    assert list(ids[0, :8]) == [tokenizer.cls_token_id] + [tokenizer.token_to_id(t) for t in
                                                             ("[UNK]", "[UNK]", "[UNK]", "cat", "##s", ".")] + [
        tokenizer.sep_token_id]
    assert list(encoded.word_positions[0]) == [1, 2, 3, 4, 6]
    expected = [-1, names.index("B-ORG"), 0, names.index("B-MISC"), 0, -1, 0, -1]
    assert list(first[:8]) == expected and (first[8:] == -1).all()
    # u.n. -> [UNK] . [UNK] . : the tag on its first piece, "the" right after its four pieces.
    assert list(encoded.word_positions[2]) == [1, 5]
    assert encoded.labels[2, 1] == names.index("I-ORG") and (encoded.labels[2, 2:5] == -1).all()
    assert encoded.truncated_words == 0

    short = stack_data.encode_sentences(sentences, tokenizer, max_seq_length=5, tag_names=names)
    # Budget 5: [CLS] + 3 pieces + [SEP]. Cut off: "cats" and "." of sentence 1, and "the" after u.n.'s pieces.
    assert short.truncated_words == 3 and list(short.word_positions[0]) == [1, 2, 3]
    assert list(short.word_positions[2]) == [1]
    assert short.inputs[""].lengths[0] == 5 and short.inputs[""].token_ids[0, 4] == tokenizer.sep_token_id


@pytest.mark.parametrize("text, line, message", [
    ("EU B-ORG\nrejects\n", 2, "expected a token and an NER tag"),
    ("EU B-ORG\n\nrejects X-PER\n", 3, "is not O, B-<type> or I-<type>"),
])
def test_conll_errors_name_file_and_line(tmp_path, text, line, message):
    path = write(tmp_path / "bad.conll", text)
    with pytest.raises(TransferError, match=message) as error:
        stack_data.read_conll(path)
    assert f"{path}:{line}:" in str(error.value)


def test_quora_layouts_skip_and_count_empty_labels(tmp_path):
    cs224n = stack_data.read_pairs(write(tmp_path / "quora-dev.csv", quora_rows(6)))
    assert len(cs224n) == 6 and cs224n.skipped_rows == 1
    assert list(cs224n.labels) == [1, 0, 1, 0, 1, 0] and cs224n.text_a[0] == SENTENCES[0]
    qqp = stack_data.read_pairs(write(tmp_path / "dev.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                                                            '0\t1\t2\tsaid " yes ?\tthe cat\t1\n1\t3\t4\ta\tb\t0\n'))
    assert qqp.text_a == ['said " yes ?', "a"] and list(qqp.labels) == [1, 0]  # quoting off: the lone quote stays
    bad = write(tmp_path / "bad.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\t2\ta\tb\t2\n")
    with pytest.raises(TransferError, match=f"{bad}:2: label '2' is not one of 0, 1"):
        stack_data.read_pairs(bad)


def test_text_reader_finds_columns_and_keeps_the_training_classes(tmp_path):
    train = stack_data.read_texts(write(tmp_path / "train.csv", 'id,text,label\n1,"good, fun",pos\n2,bad,neg\n'))
    assert train.text_a == ["good, fun", "bad"] and train.label_names == ("neg", "pos")
    assert list(train.labels) == [1, 0]
    test = write(tmp_path / "test.csv", "text,label\nfine,neg\nodd,meh\n")
    with pytest.raises(TransferError, match=f"{test}:3: label 'meh' is not one of neg, pos"):
        stack_data.read_texts(test, label_names=train.label_names)


# --- entity F1 -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gold, predicted, expected", [
    # Exact match of two entities; accuracy counts O tokens too.
    ([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "I-PER", "O", "B-LOC"]], (1.0, 1.0, 1.0, 1.0)),
    # I- without a preceding B- starts an entity (conlleval), so I-PER I-PER equals B-PER I-PER as an entity.
    ([["I-PER", "I-PER", "O"]], [["B-PER", "I-PER", "O"]], (1.0, 1.0, 1.0, 2 / 3)),
    # Right span, wrong type: nothing is correct.
    ([["B-PER", "I-PER"]], [["B-ORG", "I-ORG"]], (0.0, 0.0, 0.0, 0.0)),
    # Right start, wrong end: nothing is correct.
    ([["B-LOC", "I-LOC", "O"]], [["B-LOC", "O", "O"]], (0.0, 0.0, 0.0, 2 / 3)),
    # I- of another type splits an entity: gold has PER(0-1), LOC(3), LOC(4); predicted PER(0-1), LOC(3-4).
    ([["I-PER", "I-PER", "O", "I-LOC", "B-LOC"]], [["B-PER", "I-PER", "O", "I-LOC", "I-LOC"]], (0.5, 1 / 3, 0.4, 0.6)),
    # A sentence break ends an entity: I-PER opening the second sentence is a new one.
    ([["B-PER"], ["I-PER"]], [["B-PER"], ["B-PER"]], (1.0, 1.0, 1.0, 0.5)),
    # Nothing predicted: precision is 0 (undefined), as conlleval prints it.
    ([["B-MISC", "O"]], [["O", "O"]], (0.0, 0.0, 0.0, 0.5)),
])
def test_entity_scores_match_conlleval_on_hand_made_sequences(gold, predicted, expected):
    scores = ner_metrics.compute(gold, predicted)
    assert (scores["precision"], scores["recall"], scores["f1"], scores["accuracy"]) == pytest.approx(expected)


def test_entities_follow_conllevals_start_and_end_rules():
    assert ner_metrics.entities(["I-PER", "I-PER", "O", "I-LOC", "B-LOC"]) == [
        ("PER", 0, 1), ("LOC", 3, 3), ("LOC", 4, 4)]
    assert ner_metrics.entities(["B-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 0), ("LOC", 1, 2)]
    assert ner_metrics.entities(["B-ORG-X", "I-ORG-X"]) == [("ORG-X", 0, 1)]  # hyphens inside the type


# --- config --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("changes, message", [
    ({"strategy": "stack"}, "--strategy=stack is not one of"),
    ({"head": "cnn", "task": "conll_ner"}, "head cnn does not fit --task=conll_ner"),
    ({"head": "bimpm", "task": "classification"}, "head bimpm does not fit"),
    ({"phase1_epochs": 2, "max_epochs": 2}, "leaves no epoch for phase 2"),
    ({"head": None, "ensemble": ("cnn",)}, "two or more different heads"),
    ({"train_sample_seed": 0}, "draws a sample of --max_train_examples"),
])
def test_config_rejects_impossible_settings(changes, message):
    from tf_transfer.studies.stack.stack_settings import StackSettings

    settings = {"task": "quora", "data": "x.tsv", "head": "linear", **changes}
    with pytest.raises(TransferError, match=message):
        StackSettings.from_dict(settings)


# --- model ---------------------------------------------------------------------------------------------------------


def batch(pair: bool, tagging: bool = False, size: int = 4, length: int = 9, seed: int = 0):
    rng = np.random.default_rng(seed)
    features = {}
    for suffix in ("_a", "_b") if pair else ("",):
        mask = np.ones((size, length), np.int32)
        mask[0, 5:] = 0  # one padded example, so that masking is exercised
        features[f"token_ids{suffix}"] = rng.integers(5, len(VOCAB), (size, length)).astype(np.int32) * mask
        features[f"segment_ids{suffix}"] = np.zeros((size, length), np.int32)
        features[f"padding_mask{suffix}"] = mask
    labels = rng.integers(0, 3, (size, length) if tagging else (size,)).astype(np.int32)
    if tagging:
        labels[0, 5:] = stack_data.IGNORED_LABEL
    return features, labels


def test_phase_switch_trains_exactly_the_head_then_everything_with_a_fresh_optimizer(one_block_preset):
    from tf_transfer.models import backbones
    from tf_transfer.models import stack_heads
    from tf_transfer.studies.stack import stack_task as stack_train

    backbone = backbones.load_preset(one_block_preset).backbone
    model = stack_heads.build_model(backbone, stack_heads.make_head("mlp", 3, units=8))
    head = model.get_layer("head")
    everything = {id(v) for v in model.trainable_variables}
    backbone_before = [v.numpy().copy() for v in backbone.weights]
    features, labels = batch(pair=False)
    loss = stack_train.make_loss(tagging=False)

    first = stack_train.set_phase(model, backbone, 1, OptimizerSettings(lr=1e-3), loss)
    model.run_eagerly = True  # what is checked is which variables move, not the traced step; eager is faster here
    assert {id(v) for v in model.trainable_variables} == {id(v) for v in head.weights}
    head_before = [v.numpy().copy() for v in head.weights]
    model.train_on_batch(features, labels)
    assert int(first.iterations) == 1
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(backbone_before, backbone.weights))
    assert not all(np.array_equal(a, v.numpy()) for a, v in zip(head_before, head.weights))

    second = stack_train.set_phase(model, backbone, 2, OptimizerSettings(lr=2e-5), loss)
    model.run_eagerly = True
    assert second is not first and model.optimizer is second and int(second.iterations) == 0
    assert {id(v) for v in model.trainable_variables} == everything
    assert second.weight_decay == pytest.approx(0.01) and float(second.learning_rate) == pytest.approx(2e-5)
    model.train_on_batch(features, labels)
    assert int(second.iterations) == 1 and int(first.iterations) == 1
    assert not all(np.array_equal(a, v.numpy()) for a, v in zip(backbone_before, backbone.weights))


def test_matching_layer_computes_bimpms_four_strategies():
    import keras

    from tf_transfer.models.stack_heads import MultiPerspectiveMatching

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 5, 6)).astype(np.float32), rng.normal(size=(2, 7, 6)).astype(np.float32)
    mask_a, mask_b = np.ones((2, 5), np.float32), np.ones((2, 7), np.float32)
    mask_a[1, 3:], mask_b[0, 4:] = 0, 0
    layer = MultiPerspectiveMatching(perspectives=3)
    matched = keras.ops.convert_to_numpy(layer((a, mask_a, b, mask_b)))
    weights = keras.ops.convert_to_numpy(layer.perspective_weights)

    def cosine(x, y, w):
        return (x * w) @ (y * w) / (np.linalg.norm(x * w) * np.linalg.norm(y * w))

    # A direct transcription of the docstring's definitions, one position and perspective at a time.
    expected = np.zeros_like(matched)
    for n in range(2):
        real_b = b[n, mask_b[n] == 1]
        units_b = real_b / np.linalg.norm(real_b, axis=1, keepdims=True)
        for i in np.flatnonzero(mask_a[n]):
            similarity = units_b @ (a[n, i] / np.linalg.norm(a[n, i]))
            attended = np.exp(similarity) @ real_b / np.exp(similarity).sum()
            targets = [real_b.mean(axis=0), None, attended, real_b[similarity.argmax()]]
            for s, target in enumerate(targets):
                for k in range(3):
                    w = weights[s, k]
                    expected[n, i, 3 * s + k] = (max(cosine(a[n, i], y, w) for y in real_b) if target is None
                                                 else cosine(a[n, i], target, w))
    np.testing.assert_allclose(matched, expected, atol=1e-4)
    assert (matched[1, 3:] == 0).all()  # padding of a matches nothing


HEAD_CASES = [(name, False) for name in ("linear", "mlp", "bilstm", "cnn", "highway_lstm", "transformer", "bimpm",
                                         "sim_transformer")] + [("bilstm", True)]


@pytest.mark.filterwarnings("ignore:Gradients do not exist for variables")  # heads that do not read the pooler
@pytest.mark.parametrize("name, tagging", HEAD_CASES, ids=[f"{n}{'-tagging' if t else ''}" for n, t in HEAD_CASES])
def test_every_head_trains_a_step_and_survives_save_and_load(one_block_preset, tmp_path, name, tagging):
    import keras

    from tf_transfer.models import backbones
    from tf_transfer.models import stack_heads
    from tf_transfer.studies.stack import stack_task as stack_train

    keras.utils.set_random_seed(0)
    head = stack_heads.make_head(name, 3, tagging=tagging, units=8, perspectives=4)
    pair = stack_heads.is_pair_head(head)
    model = stack_heads.build_model(backbones.load_preset(one_block_preset).backbone, head, pair=pair)
    features, labels = batch(pair, tagging)
    # Eager steps: tracing every head's graph would cost more than the step itself at this size.
    model.compile(optimizer="adam", loss=stack_train.make_loss(tagging), run_eagerly=True)
    head_before = [v.numpy().copy() for v in head.trainable_weights]
    loss = float(model.train_on_batch(features, labels))
    assert np.isfinite(loss)
    assert any(not np.array_equal(a, v.numpy()) for a, v in zip(head_before, head.trainable_weights))

    outputs = keras.ops.convert_to_numpy(model(features, training=False))
    assert outputs.shape == ((4, 9, 3) if tagging else (4, 3))
    path = str(tmp_path / f"{name}.keras")
    model.save(path)
    restored = keras.models.load_model(path, compile=False)
    assert type(restored.get_layer("head")) is type(head)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(restored(features, training=False)), outputs, atol=1e-6)


def test_cnn_head_is_the_papers_densenet_of_four_blocks_of_four_convolutions():
    """"Four independent blocks and each block has four CNNs": 4 dense blocks of 4 convolutions, each convolution
    reading the block's input and every earlier convolution of its block, 1x1 transitions between blocks, and the
    max-pooled last block concatenated with [CLS]. Padding changes nothing: a padded sequence scores as the same
    sequence without the padding."""
    import keras

    from tf_transfer.models import stack_heads

    keras.utils.set_random_seed(0)
    units, width, length = 8, 16, 7
    head = stack_heads.make_head("cnn", 3, units=units, dropout=0.0)
    head.build({"sequence": (None, None, width), "pooled": (None, width), "mask": (None, None)})
    assert (stack_heads.CNN_BLOCKS, stack_heads.CNN_LAYERS_PER_BLOCK) == (4, 4)
    convolutions = {w.path.split("/")[1]: w.shape for w in head.weights if w.path.endswith("kernel")}
    block_inputs = [width, units, units, units]  # BERT's width, then each transition's output
    for b, block_input in enumerate(block_inputs):
        for i in range(4):
            assert convolutions[f"block{b}_conv{i}"] == (stack_heads.CNN_KERNEL, block_input + i * units, units)
        if b < 3:
            assert convolutions[f"transition{b}"] == (1, block_input + 4 * units, units)
    assert convolutions["logits"] == (units + 4 * units + width, 3)  # last block's output + [CLS]
    assert len(convolutions) == 16 + 3 + 1

    rng = np.random.default_rng(1)
    sequence = rng.normal(size=(1, length, width)).astype(np.float32)
    pooled = rng.normal(size=(1, width)).astype(np.float32)
    padded = np.concatenate([sequence, rng.normal(size=(1, 4, width)).astype(np.float32)], axis=1)
    mask = np.concatenate([np.ones((1, length), np.int32), np.zeros((1, 4), np.int32)], axis=1)
    short = head({"sequence": sequence, "pooled": pooled, "mask": np.ones((1, length), np.int32)})
    long = head({"sequence": padded, "pooled": pooled, "mask": mask})
    np.testing.assert_allclose(np.asarray(long), np.asarray(short), rtol=1e-5, atol=1e-5)


def test_quora_mlp_flagfile_is_the_papers_finetune_only_baseline():
    """flags/stack_quora_mlp.flags: [CLS] and two fully connected layers (the mlp head), fine-tuned only."""
    from tf_transfer.studies.stack.stack_settings import StackSettings

    values = {}
    for path in ("flags/stack_common.flags", "flags/stack_quora_mlp.flags"):
        with open(os.path.join(REPO, path)) as f:
            values.update(line.strip()[2:].split("=", 1) for line in f
                          if line.startswith("--") and not line.startswith("--flagfile"))
    assert open(os.path.join(REPO, "flags/stack_quora_mlp.flags")).read().count("--flagfile=flags/stack_common.flags")
    assert (values["task"], values["head"], values["strategy"]) == ("quora", "mlp", "finetune_only")
    assert values["phase2_lr"] == "2e-5" and values["max_epochs"] == "6"
    config = StackSettings.from_dict(dict(task="quora", data="x.tsv", head=values["head"], strategy=values["strategy"]))
    assert config.heads == ("mlp",)
    # absl takes every line of the chain; the run stops at the first thing it needs, the data.
    done = run_module("tf_transfer.stack", "--flagfile=flags/stack_quora_mlp.flags", "--data=no/such/quora.csv",
                      "--output_dir=unused")
    assert done.returncode == 2 and "no/such/quora.csv" in done.stderr.strip().splitlines()[-1], done.stderr[-2000:]


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_every_heads_layers_compute_in_float32_under_mixed_precision(one_block_preset, policy):
    """The backbone computes in 16 bits; each head's own sublayers (dense, LSTM cells, convolutions, transformer
    blocks, matching) and its logits stay float32. Sublayers take the global policy unless given one."""
    import keras

    from tf_transfer.models import backbones
    from tf_transfer.models import stack_heads

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        backbone = backbones.load_preset(one_block_preset).backbone
        assert backbone.compute_dtype == policy.split("_")[1]
        for name, tagging in HEAD_CASES:
            head = stack_heads.make_head(name, 3, tagging=tagging, units=8, perspectives=4)
            pair = stack_heads.is_pair_head(head)
            model = stack_heads.build_model(backbone, head, pair=pair)
            # The logits' dtype as building the model traced the head's call on the backbone's 16-bit outputs: the
            # dtype an eager call returns too (a head casting its logits to 16 bits shows in both), without a
            # second pass through every head.
            assert keras.backend.standardize_dtype(model.outputs[0].dtype) == "float32", name
            inner = list(head._flatten_layers(include_self=False, recursive=True))
            assert len(inner) >= 3, name
            wrong = [layer.name for layer in inner if layer.dtype_policy.compute_dtype != "float32"]
            assert not wrong, f"{name}: {wrong} compute in {policy}"
            assert all(w.dtype == "float32" for w in head.weights), name
    finally:
        keras.mixed_precision.set_global_policy(previous)


# --- entry point ---------------------------------------------------------------------------------------------------
# The runs from here on use conftest's one-block preset: phase 1 trains the head on the frozen backbone and phase 2
# every block, so depth changes nothing they check (as in the distributed tests' setting, tests/study_runs.py), and
# one block halves each phase's trace and graph optimisation.


def test_quora_stack_and_finetune_end_to_end(tmp_path, one_block_preset):
    """The command, both phases, the record, a rerun and a refusal. The MLP head: every head's own step, save and
    load are test_every_head_trains_a_step_and_survives_save_and_load's. This command with BiMPM took 47.9 CPU
    seconds, with the MLP 16.8 (2026-11-26, one core of the AMD EPYC VM, TensorFlow's import included): BiMPM's
    graph is traced and optimised once per phase, and nothing here depends on the head."""
    data = write(tmp_path / "quora-dev.csv", quora_rows(40))
    output_dir = tmp_path / "run"
    done = run_module("tf_transfer.stack", "--task=quora", f"--data={data}", "--head=mlp",
                      "--strategy=stack_and_finetune", f"--preset={one_block_preset}", "--phase1_epochs=1",
                      "--max_epochs=2", "--batch_size=8", "--head_units=8", f"--output_dir={output_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    with open(output_dir / "summary.json") as f:
        summary = json.load(f)
    assert summary["completed"] is True and summary["head"] == "mlp" and summary["metric"] == "accuracy"
    assert [e["phase"] for e in summary["epochs"]] == [1, 2]
    assert set(summary["epochs"][0]["val"]) == {"accuracy", "f1"} and "gap" in summary["epochs"][0]
    phase1, phase2 = summary["phases"]
    assert (phase1["trainable_layers"], phase1["lr"], phase2["trainable_layers"], phase2["lr"]) == (
        "none", 1e-3, "all", 2e-5)
    assert phase1["trainable_params"] < phase2["trainable_params"] == summary["total_params"]
    assert summary["skipped_rows"] == {"train": 1} and summary["examples"] == {"train": 36, "validation": 4}
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(output_dir))
    assert summary["precision"] == "float32" and not [f for f in os.listdir(output_dir) if f.startswith("checkpoint")]

    again = run_module("tf_transfer.stack", *done.args[3:])
    assert again.returncode == 0 and "already holds a completed run" in again.stdout
    # The same summary unfinished: other settings (--precision too) are refused before any data is read.
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "summary.json").write_text(json.dumps({**summary, "completed": False}))
    other = [a.replace(str(output_dir), str(unfinished)) for a in done.args[3:]] + ["--precision=mixed_bfloat16"]
    refused = run_module("tf_transfer.stack", *other)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {unfinished} holds an unfinished run with other settings (precision): pass "
                      "--overwrite to replace it, or choose another --output_dir"]



def test_a_completed_stack_run_is_reported_done_only_for_its_own_settings(tmp_path, tiny_preset):
    from tf_transfer.studies.stack import stack_ensemble as stack_training

    config = _stack_config(str(tmp_path / "pairs.csv"), tiny_preset)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text(json.dumps({"completed": True, "config": config.to_dict()}))
    assert stack_training.completed_result(config, str(run_dir))["completed"] is True
    # Runs from before --distribution existed, and runs on another distribution, still count as the same run.
    before = {k: v for k, v in config.to_dict().items() if k != "distribution"}
    (run_dir / "summary.json").write_text(json.dumps({"completed": True, "config": before}))
    assert stack_training.completed_result(_stack_config(str(tmp_path / "pairs.csv"), tiny_preset,
                                                         distribution="mirrored"), str(run_dir))["completed"] is True
    with pytest.raises(TransferError, match=r"holds a completed run with other settings \(phase2_lr\)"):
        stack_training.completed_result(_stack_config(str(tmp_path / "pairs.csv"), tiny_preset, phase2_lr=1e-5),
                                        str(run_dir))


def _stack_config(data, preset, **changes):
    from tf_transfer.studies.stack.stack_settings import StackSettings

    settings = dict(task="quora", data=data, head="linear", strategy="stack_and_finetune", preset=preset,
                    phase1_epochs=2, max_epochs=3, max_gap=1.0, batch_size=8, head_units=8, seed=0)
    return StackSettings.from_dict({**settings, **changes})


def _same_numbers(a: dict, b: dict) -> None:
    """Two epoch records computed the same: everything but the clock. The loss is allowed float32 rounding (the
    resumed process traces its steps again); here it has come out bit-equal. Scores are compared exactly."""
    assert b["loss"] == pytest.approx(a["loss"], rel=1e-6)
    clock = ("epoch_time_s", "train_time_s", "cpu_utilization", "epoch_cpu_s", "train_cpu_s", "others_cpu_load",
             "speed_probe_cpu_ms", "peak_memory_mb")
    strip = lambda r: {k: v for k, v in r.items() if k not in ("loss", *clock)}  # noqa
    assert strip(b) == strip(a)


@pytest.mark.filterwarnings("ignore:Gradients do not exist for variables")
def test_interrupted_stack_run_resumes_in_its_phase_and_across_the_switch_to_the_same_numbers(
        tmp_path, one_block_preset, monkeypatch):
    """--method=lora: phase 1 (two epochs) trains the head alone, phase 2 LoRA's updates, the pooler and the head.
    Killed right after epoch 1 (inside phase 1), or right after epoch 2 (phase 1's last: the next start makes LoRA's
    weights where the unbroken run did, at the build, and phase 2's fresh optimizer), a run resumes to the unbroken
    run's numbers. What each kill leaves is the unbroken run's folder at that moment (conftest.copy_when_saved).
    Freezing by blocks shares all of it but LoRA's weights; the GLUE trainer's resume is tested with a real SIGKILL
    (test_resume.py) and shares this checkpoint code."""
    from tf_transfer.studies.stack import stack_ensemble as stack_training
    from tf_transfer.training import checkpoints, record
    from tf_transfer.training.run_folder import RunFolder

    data = write(tmp_path / "quora-dev.csv", quora_rows(40))
    config = _stack_config(data, one_block_preset, method="lora", lora_rank=2)
    unbroken, save_epoch = tmp_path / "straight", RunFolder.save_epoch
    for kill_after in (1, 2):
        copy_when_saved(monkeypatch, lambda folder, epoch, kill_after=kill_after: epoch == kill_after, unbroken,
                        tmp_path / f"killed_after_{kill_after}")
    straight = stack_training.run_stack(config, str(unbroken))
    monkeypatch.setattr(RunFolder, "save_epoch", save_epoch)
    assert [e["phase"] for e in straight["epochs"]] == [1, 1, 2]
    assert straight["method"] == "lora" and straight["lora"]["rank"] == 2
    assert {k: straight["config"][k] for k in ("method", "lora_rank")} == {"method": "lora", "lora_rank": 2}
    assert config.default_output_dir("runs") == "runs/stack/quora/lora_r2_linear_stack_and_finetune/seed0"
    phase1, phase2 = straight["phases"]
    assert (phase1["method"], phase2["method"], phase2["trainable_layers"]) == (None, "lora", "all")
    # Phase 2 adds the updates of query and value (2 x (16 + 16) x 2) and the pooler (16 x 16 + 16), not BERT's own.
    assert straight["lora"]["weights"] == 128
    assert phase2["trainable_params"] - phase1["trainable_params"] == 128 + 272

    for kill_after in (1, 2):
        output_dir = str(tmp_path / f"killed_after_{kill_after}")
        partial = record.read_summary(output_dir)
        assert partial["completed"] is False and len(partial["epochs"]) == kill_after
        assert os.path.exists(checkpoints.path(output_dir, kill_after))
        resumed = stack_training.run_stack(config, output_dir)
        assert resumed["completed"] is True and [r["after_epoch"] for r in resumed["resumes"]] == [kill_after]
        assert [p["first_epoch"] for p in resumed["phases"]] == [1, 3]
        assert [p["ended_by"] for p in resumed["phases"]] == ["phase1_epochs", "max_epochs"]
        assert resumed["lora"] == straight["lora"]
        for a, b in zip(straight["epochs"], resumed["epochs"], strict=True):
            _same_numbers(a, b)  # weights, optimizer state, dropout RNG and data order all continued
        times = [e["epoch_time_s"] for e in resumed["epochs"]]
        assert [e["train_time_s"] for e in resumed["epochs"]] == pytest.approx(list(np.cumsum(times)))
        assert not [f for f in os.listdir(output_dir) if f.startswith("checkpoint-")]
        assert resumed["precision"] == "float32" and resumed["config"]["precision"] == "float32"


def test_a_methods_choice_survives_phase_1_and_trains_there_with_method_in_phase1(one_block_preset):
    """Freezing the backbone for phase 1 resets every variable's flag below it in Keras: phase 2 puts back what the
    method chose (LoRA's A and B, not the kernels beside them); with method_in_phase1 phase 1 trains that too."""
    from tf_transfer.models import backbones, freezing, methods, stack_heads
    from tf_transfer.studies.stack import stack_task as stack_train

    backbone = backbones.load_preset(one_block_preset).backbone
    methods.apply(backbone, "lora", freezing.ALL, lora_rank=2)
    chosen = {v.path for v in backbone.trainable_variables}
    assert any("lora_a" in p for p in chosen) and not any(p.endswith("kernel") and "pooled" not in p for p in chosen)
    trains = freezing.trainability(backbone)
    model = stack_heads.build_model(backbone, stack_heads.make_head("linear", 3, units=8))
    head = {v.path for v in model.get_layer("head").trainable_variables}
    loss = stack_train.make_loss(tagging=False)

    def trained_after(phase, in_phase1=False):
        stack_train.set_phase(model, backbone, phase, OptimizerSettings(lr=1e-3), loss, method_trains=trains,
                              method_in_phase1=in_phase1)
        return {v.path for v in model.trainable_variables}

    assert trained_after(1) == head
    assert trained_after(2) == head | chosen
    assert trained_after(1, in_phase1=True) == head | chosen


@pytest.mark.xdist_group(GROUP)
def test_mirrored_stack_run_over_two_logical_cpus_is_the_one_device_run(tmp_path, one_device_runs):
    """Both phases over two replicas: the per-epoch losses within 1e-4 relative of the default strategy's run
    (tests/study_runs.py, shared with the two-worker test), the same validation scores."""
    from tf_transfer.core import strategies

    strategy = strategies.make_strategy("mirrored", TWO_CPUS)
    summary = json.loads(json.dumps(run_study("stack", one_device_runs.specs["stack"], str(tmp_path / "run"),
                                              strategy, "mirrored")))
    assert strategy.num_replicas_in_sync == 2
    assert summary["completed"] is True and summary["config"]["distribution"] == "mirrored"
    assert [e["phase"] for e in summary["epochs"]] == [1, 2]
    keys = {"epoch", "epoch_time_s", "train_time_s", "cpu_utilization", "epoch_cpu_s", "train_cpu_s", "others_cpu_load",
            "speed_probe_cpu_ms", "peak_memory_mb", "loss", "val", "test", "phase"}
    assert set(summary["epochs"][0]) == keys | {"train", "gap"} and set(summary["epochs"][1]) == keys
    default = one_device_runs.run("stack")
    assert [e["loss"] for e in summary["epochs"]] == pytest.approx([e["loss"] for e in default["epochs"]], rel=1e-4)
    assert [e["val"] for e in summary["epochs"]] == [e["val"] for e in default["epochs"]]
    assert default["epochs"][0]["loss"] != default["epochs"][1]["loss"]  # it trained


def _fake_gap(monkeypatch, from_epoch: int):
    """Scores the training sample at accuracy 1 and validation at 0.5 from epoch `from_epoch` of phase 1 on, so the
    gap rule fires there; before, both at 0.5."""
    from tf_transfer.data import stack_feed
    from tf_transfer.studies.stack import stack_inputs

    seen = {"split": None, "phase1_epoch": 0}
    probabilities, score = stack_feed.StackFeed.predict, stack_inputs.score

    def spy(self, model, name):
        seen["split"] = name
        seen["phase1_epoch"] += name == "train_sample"
        return probabilities(self, model, name)

    def fake_score(split, probs, label_names):
        scores = score(split, probs, label_names)
        fire = seen["phase1_epoch"] >= from_epoch
        if seen["split"] == "train_sample":
            scores["accuracy"] = 1.0 if fire else 0.5
        elif seen["split"] == "validation":
            scores["accuracy"] = 0.5
        return scores

    monkeypatch.setattr(stack_feed.StackFeed, "predict", spy)
    monkeypatch.setattr(stack_inputs, "score", fake_score)


def test_run_interrupted_after_its_early_stop_trains_no_further_epoch(tmp_path, one_block_preset, monkeypatch):
    """Killed after the epoch that stopped it early (saved, not yet finished): the resume only finishes it."""
    from tf_transfer.training import checkpoints
    from tf_transfer.studies.stack import stack_ensemble as stack_training
    from tf_transfer.studies.stack import stack_inputs

    score = stack_inputs.score
    monkeypatch.setattr(stack_inputs, "score", lambda *a: {**score(*a), "accuracy": 0.5})  # never improves
    original_prune = checkpoints.prune

    def die_after_epoch_2(folder, keep_epoch):
        original_prune(folder, keep_epoch)
        if keep_epoch == 2:
            raise KeyboardInterrupt
    monkeypatch.setattr(checkpoints, "prune", die_after_epoch_2)
    data = write(tmp_path / "quora-dev.csv", quora_rows(40))
    config = _stack_config(data, one_block_preset, strategy="stack_only", max_epochs=3, patience=1)
    with pytest.raises(KeyboardInterrupt):
        stack_training.run_stack(config, str(tmp_path / "run"))
    monkeypatch.setattr(checkpoints, "prune", original_prune)
    summary = stack_training.run_stack(config, str(tmp_path / "run"))
    assert summary["completed"] and summary["stopped_early"] and len(summary["epochs"]) == 2
    assert [p["ended_by"] for p in summary["phases"]] == ["patience"]


@pytest.mark.filterwarnings("ignore:Gradients do not exist for variables")
def test_resumed_ensemble_does_not_train_its_finished_members_again(tmp_path, one_block_preset, monkeypatch):
    from tf_transfer.studies.stack import stack_ensemble as stack_training
    from tf_transfer.studies.stack import stack_task as stack_train

    data = write(tmp_path / "quora-dev.csv", quora_rows(40))
    config = _stack_config(data, one_block_preset, head=None, ensemble=("linear", "mlp"), strategy="stack_only",
                           max_epochs=1)
    output_dir = tmp_path / "ensemble"
    straight = stack_training.run_stack(config, str(output_dir))
    assert straight["completed"] and sorted(os.listdir(output_dir)) == ["ensemble.json", "linear", "mlp"]

    trained = []
    original = stack_train.train_head
    monkeypatch.setattr(stack_train, "train_head", lambda c, head, *a, **k: trained.append(head) or original(
        c, head, *a, **k))
    # Killed after the first member finished (its summary and final probabilities kept), then after both had.
    for member in ("mlp", None):
        os.remove(output_dir / "ensemble.json")
        if member:
            os.remove(output_dir / member / "summary.json")
        again = stack_training.run_stack(config, str(output_dir))
        assert {k: again[k] for k in ("val", "test", "members")} == {k: straight[k] for k in ("val", "test", "members")}
    assert trained == ["mlp"]


class _ScoredSplit:
    """Four pairs' labels: all `stack_inputs.score` reads of a split."""

    tagging = False
    labels = np.array([0, 1, 0, 1])

    def __len__(self):
        return len(self.labels)


class _RecordedFeed:
    """Class probabilities as a feed predicts them, recorded per split and epoch (`epoch`, set by the test): the
    validation split scores accuracy 0.5 every epoch, the training sample 0.5 before epoch `fires_at` and 1.0 from
    it on (None: never)."""

    steps_per_epoch = 1

    def __init__(self, fires_at):
        self.fires_at, self.epoch, self.predictions = fires_at, None, {}

    def train_batches(self, epoch):
        raise AssertionError("the test trains through its own epoch function")

    def predict(self, model, name):
        all_right = name == "train_sample" and self.fires_at is not None and self.epoch >= self.fires_at
        predicted = _ScoredSplit.labels if all_right else np.array([0, 0, 1, 1])
        self.predictions[name, self.epoch] = np.eye(2)[predicted]
        return self.predictions[name, self.epoch]


@pytest.mark.parametrize("fires_at", [1, 2, None])
def test_gap_rule_ends_phase_one_and_undoes_its_epoch_but_never_the_first(fires_at):
    """`PhaseEpochs`, what the engine calls in each epoch of phase 1, on recorded scores (the rule reads only the
    training sample's and validation's accuracy): a gap of 0.5 > --max_gap ends the phase on that epoch and restores
    the head's weights from before it, except on the phase's first epoch, which is kept (no return to the untrained
    head); without a gap the phase runs its --phase1_epochs. The rule inside a real run, phase 2 starting after it:
    test_gap_rule_ends_phase_one_early_in_a_run."""
    import keras

    from tf_transfer.studies.stack import stack_task
    from tf_transfer.studies.stack.stack_settings import plan_phases

    config = _stack_config("pairs.csv", "preset", max_gap=0.02, phase1_epochs=3, max_epochs=4)
    phase1 = plan_phases(config)[0]
    head = keras.layers.Dense(2)
    head.build((None, 3))
    feed, summary = _RecordedFeed(fires_at), {"phase1_ended_by_gap": False}
    splits = {name: _ScoredSplit() for name in ("train", "validation", "train_sample")}
    epochs = stack_task.PhaseEpochs(config, None, head, feed, splits, ("0", "1"), summary)
    epochs.phase, epochs.phase_record = phase1, {"first_epoch": 1, "ended_by": None}
    trained = []  # the head's kernel after each epoch's training

    def fit_epoch(epoch, progress):
        head.kernel.assign(head.kernel + 1.0)
        trained.append(head.kernel.numpy().copy())
        return {"loss": 1.0}

    epochs.fit_epoch = fit_epoch
    records = []
    for epoch in range(1, phase1.last_epoch + 1):
        feed.epoch = epoch
        epochs.train_epoch(epoch, None)
        records.append({"epoch": epoch, "val": epochs.evaluate()[0]})
        if epochs.after_epoch(records[-1]):
            break

    last = fires_at or phase1.last_epoch
    assert [r["epoch"] for r in records] == list(range(1, last + 1)) and epochs.phase_record["last_epoch"] == last
    assert [r["gap"] for r in records] == [0.0] * (last - 1) + [0.5 if fires_at else 0.0]
    assert epochs.phase_record["ended_by"] == ("max_gap" if fires_at else "phase1_epochs")
    assert summary["phase1_ended_by_gap"] is (fires_at is not None)
    undone = fires_at is not None and fires_at > 1
    assert [r.get("rolled_back", False) for r in records] == [False] * (last - 1) + [undone]
    kept = last - 1 if undone else last  # the epoch whose head goes on, and whose scores are the final ones
    np.testing.assert_array_equal(head.kernel.numpy(), trained[kept - 1])
    assert epochs.kept["validation"] is feed.predictions["validation", kept]


@pytest.mark.filterwarnings("ignore:Gradients do not exist for variables")
def test_gap_rule_ends_phase_one_early_in_a_run(tmp_path, one_block_preset, monkeypatch):
    """The gap fires on epoch 2 of 3 of phase 1: the phase ends there, before its --phase1_epochs, that epoch undone
    (its weights are the rule's unit test's above), and phase 2 takes over at epoch 3."""
    from tf_transfer.studies.stack import stack_ensemble as stack_training

    _fake_gap(monkeypatch, 2)
    data = write(tmp_path / "quora-dev.csv", quora_rows(40))
    config = _stack_config(data, one_block_preset, max_gap=0.02, phase1_epochs=3, max_epochs=4)
    summary = stack_training.run_stack(config, str(tmp_path / "run"))
    phase1, phase2 = summary["phases"]
    assert phase1["ended_by"] == "max_gap" and summary["phase1_ended_by_gap"] is True
    assert (phase1["last_epoch"], phase2["first_epoch"], phase2["last_epoch"]) == (2, 3, 4)
    assert [e["phase"] for e in summary["epochs"]] == [1, 1, 2, 2]
    assert [e["gap"] for e in summary["epochs"][:2]] == pytest.approx([0.0, 0.5])
    assert [e.get("rolled_back", False) for e in summary["epochs"]] == [False, True, False, False]
    assert summary["best_epoch"] == 1  # validation is 0.5 throughout: the first epoch that counts


def test_bad_conll_line_is_one_error_line_and_exit_status_2(tmp_path):
    data = write(tmp_path / "eng.train", "EU B-ORG\n\nrejects\n")
    done = run_module("tf_transfer.stack", "--task=conll_ner", f"--data={data}", "--head=bilstm",
                      f"--output_dir={tmp_path / 'run'}")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {data}:3: expected a token and an NER tag separated by whitespace, found 'rejects'"]
    assert not (tmp_path / "run").exists()


def _write_summary(folder, summary):
    os.makedirs(folder)
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump(summary, f)


def test_report_table_gives_last_and_best_validation_scores_and_lists_missing_runs(tmp_path):
    from tf_transfer.reporting.stack_report import report_table

    epochs = [
        {"epoch": 1, "phase": 1, "train_time_s": 20.0, "val": {"accuracy": 0.61, "f1": 0.0}},
        {"epoch": 2, "phase": 2, "train_time_s": 100.0, "val": {"accuracy": 0.80, "f1": 0.75}},
        {"epoch": 3, "phase": 2, "train_time_s": 180.0, "val": {"accuracy": 0.79, "f1": 0.77}},
    ]
    _write_summary(tmp_path / "sf", {
        "head": "bimpm", "strategy": "stack_and_finetune", "metric": "accuracy", "epochs": epochs, "best_epoch": 2,
        "completed": True, "config": {"max_epochs": 3}, "examples": {"train": 400}, "precision": "mixed_bfloat16",
        "phases": [{"phase": 1, "first_epoch": 1, "last_epoch": 1, "ended_by": "max_gap"},
                   {"phase": 2, "first_epoch": 2, "last_epoch": 3, "ended_by": "max_epochs"}]})
    _write_summary(tmp_path / "ft", {
        "head": "linear", "strategy": "finetune_only", "metric": "accuracy", "epochs": epochs[1:2], "best_epoch": 1,
        "completed": False, "config": {"max_epochs": 3}, "examples": {"train": 400},
        "phases": [{"phase": 2, "first_epoch": 1, "last_epoch": 1, "ended_by": None}]})
    table = report_table([str(tmp_path / "sf"), str(tmp_path / "ft"), str(tmp_path / "absent")])
    header, _, stack_row, finetune_row, missing_row = table.splitlines()
    assert header.split(" | ")[4:6] == ["val accuracy (last)", "val f1 (last)"]
    assert stack_row.split(" | ")[1:] == ["bimpm", "stack_and_finetune", "1 (max_gap)", "0.7900", "0.7700", "2 (2)",
                                          "0.8000", "0.7500", "3/3", "180", "400", "mixed_bfloat16 |"]
    assert finetune_row.split(" | ")[3] == "none" and "1/3 (unfinished)" in finetune_row
    assert missing_row.startswith("| absent | missing |")
