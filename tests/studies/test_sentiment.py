"""Hart's sentiment study: reading Kaggle-style files, sparse baselines, BERT modes, Welch tests, report, errors."""

import csv
import glob
import json
import logging
import math
import os
import shutil

import numpy as np
import pytest
from scipy import stats

from conftest import copy_when_saved, run_module
from study_runs import GROUP
from tf_transfer.core.errors import TransferError
from tf_transfer.data import labelled_texts as texts
from tf_transfer.models import sentence_features
from tf_transfer.reporting import sentiment_report as hart_report
from tf_transfer.core import stats as hart_stats
from tf_transfer.studies.sentiment import sentiment_results as study
from tf_transfer.studies.sentiment import sentiment_settings
from tf_transfer.studies.sentiment import sentiment_bert as bert
from tf_transfer.studies.sentiment import sentiment_sparse as sparse

KAGGLE_HEADER = ["id", "keyword", "location", "text", "target"]
# Words the tiny preset's vocabulary knows, so that the BERT tests tokenize to real ids rather than [UNK].
DISASTER_WORDS = ["fire in the house", "the plane ran to the sea", "bad red sky", "the car is big, bad"]
CALM_WORDS = ["the cat is happy", "a good dog runs", "we play with the blue car", "she eats, he walks"]


def write_kaggle_csv(path, rows_per_class=10, delimiter=","):
    """Kaggle's train.csv layout; every third text has a quoted comma and a line break inside it.

    Each class uses its own words, except every seventh row, which borrows the other class's (label noise), so
    that scores vary between folds.
    """
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter=delimiter)
        writer.writerow(KAGGLE_HEADER)
        for i in range(2 * rows_per_class):
            target = i % 2
            words = (DISASTER_WORDS if target != (i % 7 == 0) else CALM_WORDS)[i % 4]
            text = f"{words}, said he\nwhat now ?" if i % 3 == 0 else f"{words} {i}"
            keyword = "fire" if target and i % 4 == 1 else ""
            writer.writerow([i, keyword, "" if i % 5 else "Paris, France", text, target])
    return str(path)


def write_raw(path, text):
    with open(path, "w", newline="", encoding="utf-8") as f:
        f.write(text)
    return str(path)


# ----------------------------------------------------------------------------------------------------------------
# Reading


def test_reads_kaggle_csv_with_quoted_commas_and_line_breaks(tmp_path):
    path = write_raw(tmp_path / "train.csv",
                     "id,keyword,location,text,target\n"
                     '1,,,"Forest fire near La Ronge, Sask.\nCanada",1\n'
                     '4,ablaze,"Birmingham, UK","He said ""run"", so we ran",1\n'
                     "7,,,What a lovely day,0\n"
                     "\n")
    data = texts.read_labelled_texts(path)
    assert data.texts == ["Forest fire near La Ronge, Sask.\nCanada", 'He said "run", so we ran',
                          "What a lovely day"]
    assert data.labels.tolist() == [1, 1, 0]
    assert data.label_names == ("0", "1") and data.is_binary
    with_keyword = texts.read_labelled_texts(path, extra_text_columns=["keyword"])
    assert with_keyword.texts[1] == 'He said "run", so we ran ablaze'
    assert with_keyword.texts[0] == data.texts[0]  # an empty keyword adds nothing


def test_reads_tsv_by_extension_and_by_delimiter(tmp_path):
    tsv = write_kaggle_csv(tmp_path / "train.tsv", rows_per_class=3, delimiter="\t")
    csv_data = texts.read_labelled_texts(write_kaggle_csv(tmp_path / "train.csv", rows_per_class=3))
    tsv_data = texts.read_labelled_texts(tsv)
    assert tsv_data.texts == csv_data.texts and tsv_data.labels.tolist() == csv_data.labels.tolist()
    renamed = write_kaggle_csv(tmp_path / "train.txt", rows_per_class=3, delimiter="\t")
    assert texts.read_labelled_texts(renamed, delimiter="tab").texts == csv_data.texts


def test_declared_labels_give_class_indices_in_their_order(tmp_path):
    path = write_raw(tmp_path / "three.csv", "text,sentiment\nawful,neg\nfine,neu\ngreat,pos\nmeh,neu\n")
    data = texts.read_labelled_texts(path, label_column="sentiment", labels="neg,neu,pos")
    assert data.labels.tolist() == [0, 1, 2, 1] and data.num_classes == 3
    assert "macro" in study.f1_description(data)


# ----------------------------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("content, kwargs, fragments", [
    ("id,text,label\n1,hi,1\n", {}, ["no column(s) 'target'", "found 'id', 'text', 'label'"]),
    ("id,keyword,text,target\n1,,hi,1\n", {"extra_text_columns": ["location"]}, ["'location'"]),
    ("text,target\nfine,0\n\"  \",1\nok,0\n", {}, ["data row 2", "empty text in column 'text'"]),
    ("text,target\nfine,0\n\"a\nb\",1\nbad,2\n", {}, ["data row 3 (ending on line 5)", "label '2'", "0, 1",
                                                       "--labels"]),
    ("text,target\nfine,neg\n", {"labels": "neg,pos,neu"}, []),
    ("text,target\nfine,maybe\n", {"labels": "neg,pos"}, ["label 'maybe'", "neg, pos"]),
    ("text,target\n", {}, ["no data rows"]),
    ("", {}, ["empty"]),
    ("id,text,target\n1,hi\n", {}, ["data row 1", "2 field(s)"]),
])
def test_bad_files_raise_one_clear_error(tmp_path, content, kwargs, fragments):
    path = write_raw(tmp_path / "bad.csv", content)
    if not fragments:  # the control case: the same layout with a declared label reads fine
        assert texts.read_labelled_texts(path, **kwargs).labels.tolist() == [0]
        return
    with pytest.raises(TransferError) as error:
        texts.read_labelled_texts(path, **kwargs)
    for fragment in fragments:
        assert fragment in str(error.value)


def test_missing_file(tmp_path):
    with pytest.raises(TransferError, match="does not exist"):
        texts.read_labelled_texts(str(tmp_path / "nowhere.csv"))


def test_fewer_rows_per_class_than_folds(tmp_path):
    data = texts.read_labelled_texts(write_kaggle_csv(tmp_path / "small.csv", rows_per_class=4))
    with pytest.raises(TransferError, match=r"4 row\(s\) with label '0', fewer than 10: --folds=10"):
        sparse.run_sparse_baselines(data, str(tmp_path / "out"), folds=10)
    assert not os.path.exists(tmp_path / "out" / study.SPARSE_JSON)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"mode": "half"}, "unknown --bert_mode='half': choose one of frozen, unfrozen, top2"),
    ({"pooling": "max"}, "unknown --pooling='max': choose one of cls, last4_concat, mean"),
    ({"trainable_layers": "some"}, "--trainable_layers must be"),
    ({"test_fraction": 1.0}, "--test_fraction must be between 0 and 1"),
    ({"runs": 0}, "--runs must be at least 1"),
    ({"hidden_units": -1}, "--hidden_units must be 0 (the paper's logistic layer) or more, got -1"),
])
def test_bad_bert_settings(kwargs, fragment):
    with pytest.raises(TransferError) as error:
        sentiment_settings.SentimentBertSettings(**kwargs)
    assert fragment in str(error.value)


def test_held_out_split_needs_every_label_twice(tmp_path):
    data = texts.read_labelled_texts(write_raw(tmp_path / "one.csv", "text,target\na,0\nb,0\nc,0\nd,1\n"))
    with pytest.raises(TransferError, match=r"1 row\(s\) with label '1', fewer than 2: a held-out split"):
        study.held_out_split(data, 0.2, seed=0)


@pytest.mark.parametrize("flagfile", ["hart_sparse", "hart_bert_frozen", "hart_bert_unfrozen", "hart_bert_top2"])
def test_paper_flagfiles_parse_and_validate(tmp_path, flagfile):
    # Without --data every setting is parsed and checked, and the run stops at the first thing it needs.
    done = run_module("tf_transfer.sentiment", f"--flagfile=flags/{flagfile}.flags", f"--output_dir={tmp_path}")
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith("error: --data is required")


def test_unknown_approach():
    with pytest.raises(TransferError, match="unknown --approach='svm': choose one of sparse, bert, report"):
        sentiment_settings.check_choice("approach", "svm", sentiment_settings.APPROACHES)


def test_entry_point_missing_column_exits_2_with_one_error_line(tmp_path):
    path = write_raw(tmp_path / "train.csv", "id,tweet,target\n1,hello,1\n")
    done = run_module("tf_transfer.sentiment", f"--data={path}", f"--output_dir={tmp_path / 'out'}")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr[-2000:]
    assert "no column(s) 'text'" in errors[0] and "found 'id', 'tweet', 'target'" in errors[0]


def test_entry_point_rejects_unknown_mode_with_exit_2(tmp_path):
    done = run_module("tf_transfer.sentiment", "--approach=bert", "--bert_mode=partial", "--data=x.csv",
                      f"--output_dir={tmp_path}")
    assert done.returncode == 2 and "unknown --bert_mode='partial'" in done.stderr


# ----------------------------------------------------------------------------------------------------------------
# Statistics


def test_welch_df_and_t_against_hand_computation_and_scipy():
    a, b = [0.80, 0.82, 0.81, 0.79, 0.84], [0.78, 0.80, 0.76, 0.77]
    # By hand: means 0.812 and 0.7775; sample variances 0.00037 and 0.000291666...
    va, vb = 0.00037 / 5, 0.00029166666666666664 / 4
    hand_df = (va + vb) ** 2 / (va**2 / 4 + vb**2 / 3)
    hand_t = (0.812 - 0.7775) / math.sqrt(va + vb)
    assert hart_stats.welch_df(a, b) == pytest.approx(hand_df, rel=1e-12)
    test = hart_stats.welch_test(a, b)
    assert test.t == pytest.approx(hand_t, rel=1e-9)
    assert test.t == pytest.approx(stats.ttest_ind(a, b, equal_var=False).statistic, rel=1e-12)
    # scipy's p uses the same df: the two-sided tail of Student's t at that df.
    assert test.p == pytest.approx(2 * stats.t.sf(abs(hand_t), hand_df), rel=1e-9)
    assert math.isnan(hart_stats.welch_test([0.5], b).t) and math.isnan(hart_stats.welch_df([0.5], b))


# ----------------------------------------------------------------------------------------------------------------
# Sparse baselines, BERT and the report, sharing one output folder as a real study does


@pytest.fixture(scope="module")
def study_run(tmp_path_factory, tiny_preset):
    """The sparse baselines, BERT frozen (two seeds) and top2 (one), two epochs each, and the report, in one folder;
    `progress` holds each BERT mode's reports of a finished step, as `(epoch, steps done, steps, examples)`;
    `killed` the folder as a process killed right after frozen seed 1's first epoch was saved leaves it (for
    test_frozen_bert_interrupted_mid_seed_resumes_to_the_study_runs_numbers)."""
    from tf_transfer.training import engine

    root = tmp_path_factory.mktemp("hart")
    data = texts.read_labelled_texts(write_kaggle_csv(root / "train.csv", rows_per_class=12))
    output_dir = str(root / "out")
    baselines = sparse.run_sparse_baselines(data, output_dir, folds=5, seed=0)
    hart_report.write_sparse_markdown(output_dir, data, folds=5, seed=0)
    progress = {"frozen": [], "top2": []}

    class Recording(engine.Progress):
        mode = None

        def step(self, done, **values):
            progress[Recording.mode].append((self.epoch, done, self.steps, self.examples))
            super().step(done, **values)

    results = {}
    killed = str(root / "killed")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "Progress", Recording)
        copy_when_saved(patch, _seed_1_epoch_1, output_dir, killed)
        for mode, runs in (("frozen", 2), ("top2", 1)):
            Recording.mode = mode
            results[mode] = bert.run_bert(data, output_dir, sentiment_settings.SentimentBertSettings(
                preset=tiny_preset, mode=mode, runs=runs, epochs=2, batch_size=8))
    report = hart_report.write_report(output_dir)
    return {"data": data, "dir": output_dir, "sparse": baselines, **results, "report": report,
            "preset": tiny_preset, "progress": progress, "killed": killed}


def _seed_1_epoch_1(folder, epoch) -> bool:
    return folder.summary["seed"] == 1 and epoch == 1


# The tests that read `study_run` share one test process: the study is run once in the suite, not in each.
STUDY_RUN_GROUP = pytest.mark.xdist_group("sentiment_study_run")


@STUDY_RUN_GROUP
def test_sparse_baselines_json_schema_and_values(study_run):
    with open(os.path.join(study_run["dir"], study.SPARSE_JSON)) as f:
        results = json.load(f)
    assert results == study_run["sparse"]
    assert set(results) == {"tfidf", "count", "hash"}
    for result in results.values():
        assert set(result) == {"accuracy_mean", "accuracy_std", "f1_mean", "f1_std", "fit_time_s_mean", "folds"}
        assert [fold["fold"] for fold in result["folds"]] == [1, 2, 3, 4, 5]
        assert all(set(fold) == {"fold", "accuracy", "f1", "fit_time_s"} for fold in result["folds"])
        fit_times = [fold["fit_time_s"] for fold in result["folds"]]
        assert all(t > 0 for t in fit_times) and result["fit_time_s_mean"] == pytest.approx(np.mean(fit_times))
        for metric in ("accuracy", "f1"):
            values = [fold[metric] for fold in result["folds"]]
            assert all(0.0 <= v <= 1.0 for v in values)
            assert result[f"{metric}_mean"] == pytest.approx(np.mean(values))
            assert result[f"{metric}_std"] == pytest.approx(np.std(values, ddof=1))
    # Apart from the noisy rows the classes use disjoint words, so a bag of words beats chance by far.
    assert results["tfidf"]["accuracy_mean"] >= 0.7 and results["tfidf"]["accuracy_std"] > 0
    markdown = open(os.path.join(study_run["dir"], study.SPARSE_MARKDOWN)).read()
    assert "| tfidf |" in markdown and "| 5 |" in markdown and "F1 of the positive class (label '1')" in markdown


def _events(logdir: str):
    import tensorflow as tf
    from tensorboard.backend.event_processing import event_accumulator

    (event_file,) = glob.glob(os.path.join(logdir, "events.out.tfevents.*"))  # one file: never a second copy
    accumulator = event_accumulator.EventAccumulator(event_file, size_guidance={"tensors": 0})
    accumulator.Reload()
    tags = set(accumulator.Tags()["tensors"])
    # (steps, values) of one tag
    return tags, lambda tag: ([e.step for e in accumulator.Tensors(tag)],
                              pytest.approx([float(tf.make_ndarray(e.tensor_proto)) for e in accumulator.Tensors(tag)]))


@STUDY_RUN_GROUP
def test_tensorboard_events_for_every_baseline_and_seed(study_run):
    board = os.path.join(study_run["dir"], study.TENSORBOARD_DIR)
    assert sorted(os.listdir(board)) == ["bert_frozen_cls", "bert_top2_cls", "sparse_count", "sparse_hash",
                                         "sparse_tfidf"]
    tags, values = _events(os.path.join(board, "sparse_tfidf"))
    assert "_hparams_/session_start_info" in tags
    folds = study_run["sparse"]["tfidf"]["folds"]
    steps = [f["fold"] for f in folds]
    assert values("fold/accuracy") == (steps, [f["accuracy"] for f in folds])
    assert values("fold/fit_time_s") == (steps, [f["fit_time_s"] for f in folds])
    assert values("f1") == ([5], [study_run["sparse"]["tfidf"]["f1_mean"]])
    assert sorted(os.listdir(os.path.join(board, "bert_frozen_cls"))) == ["seed0", "seed1"]
    for run in study_run["frozen"]["runs"]:
        tags, values = _events(os.path.join(board, "bert_frozen_cls", f"seed{run['seed']}"))
        assert "_hparams_/session_start_info" in tags
        assert values("train_time_s") == ([1, 2], [e["train_time_s"] for e in run["epochs"]])
        assert values("accuracy") == ([2], [run["accuracy"]])


def test_fit_until_converged_raises_max_iter_only_when_needed():
    texts = [f"word{i} common" for i in range(30)]
    labels = np.arange(30) % 2
    pipeline = sparse.sparse_pipeline("count", seed=0)
    pipeline.set_params(classifier__max_iter=1)
    max_iter, converged = sparse.fit_until_converged(pipeline, texts, labels)
    assert converged and max_iter > 1
    assert pipeline.get_params()["classifier__max_iter"] == max_iter


@STUDY_RUN_GROUP
def test_bert_frozen_and_top2_results_files(study_run):
    frozen, top2 = study_run["frozen"], study_run["top2"]
    assert os.path.exists(os.path.join(study_run["dir"], "bert_frozen_cls.json"))
    assert os.path.exists(os.path.join(study_run["dir"], "bert_top2_cls.json"))
    assert [run["seed"] for run in frozen["runs"]] == [0, 1]
    assert [run["seed"] for run in top2["runs"]] == [0]
    assert frozen["examples"] == {"train": 19, "test": 5}  # a stratified 20% of 24 rows, rounded up
    for result in (frozen, top2):
        for run in result["runs"]:
            assert 0.0 <= run["accuracy"] <= 1.0 and 0.0 <= run["f1"] <= 1.0 and run["train_time_s"] > 0
        assert result["accuracy_mean"] == pytest.approx(np.mean([r["accuracy"] for r in result["runs"]]))
    assert frozen["settings"]["trainable_layers"] == 0 and frozen["feature_time_s"] > 0
    assert top2["settings"]["trainable_layers"] == 2 and top2["settings"]["epochs"] == 2
    # top2 trains 2 of the 3 blocks and the head; the embeddings and block 0 stay frozen.
    run = top2["runs"][0]
    assert 0 < run["trainable_params"] < run["total_params"]
    # Freezing by blocks is recorded as the method, and not among the settings: results files from before --method
    # hold the same settings, so their reruns still match.
    for result in (frozen, top2):
        assert result["method"] == "freeze" and "method" not in result["settings"]


@STUDY_RUN_GROUP
def test_bert_reruns_add_missing_seeds_and_refuse_other_settings(study_run, tmp_path):
    output_dir = str(tmp_path / "copy")
    shutil.copytree(study_run["dir"], output_dir)  # the other tests read the shared folder as the fixture left it
    settings = sentiment_settings.SentimentBertSettings(preset=study_run["preset"], mode="frozen", runs=3, epochs=2, batch_size=8)
    merged = bert.run_bert(study_run["data"], output_dir, settings)
    assert [run["seed"] for run in merged["runs"]] == [0, 1, 2]
    assert merged["runs"][:2] == study_run["frozen"]["runs"]  # kept, not retrained
    other = sentiment_settings.SentimentBertSettings(preset=study_run["preset"], mode="frozen", runs=3, epochs=5, batch_size=8)
    with pytest.raises(TransferError, match="epochs 2 vs 5"):
        bert.run_bert(study_run["data"], output_dir, other)
    with_keyword = texts.read_labelled_texts(study_run["data"].source, extra_text_columns=["keyword"])
    with pytest.raises(TransferError, match=r"text_columns \['text'\] vs \['text', 'keyword'\]"):
        bert.run_bert(with_keyword, output_dir, settings)


def test_rebuilt_hidden_states_share_the_backbones_weights(tiny_preset):
    import keras

    from tf_transfer.models import backbones
    from tf_transfer.models import freezing
    from tf_transfer.models import heads

    backbone = backbones.load_preset(tiny_preset).backbone
    token_inputs = heads.backbone_inputs()
    states = sentence_features.hidden_states(backbone, token_inputs)
    model = keras.Model(token_inputs, states)
    batch = {"token_ids": np.array([[2, 7, 9, 3, 0], [2, 11, 3, 0, 0]], np.int32),
             "segment_ids": np.zeros((2, 5), np.int32),
             "padding_mask": np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], np.int32)}
    rebuilt = model(batch, training=False)
    assert len(rebuilt) == backbone.num_layers + 1
    expected = backbone(batch, training=False)["sequence_output"]
    np.testing.assert_allclose(np.asarray(rebuilt[-1]), np.asarray(expected), atol=1e-5)
    freezing.set_trainable_layers(backbone, 2)
    trainable = {id(v) for v in model.trainable_variables}
    assert trainable == {id(v) for block in backbone.transformer_layers[1:] for v in block.trainable_variables}


def _head_layers(model, backbone):
    """The layers of `model` that are neither the backbone's nor the feature model's (inputs, slicing, pooling)."""
    inside = {id(layer) for layer in backbone._flatten_layers(include_self=True, recursive=True)}
    return [layer for layer in model._flatten_layers(include_self=False, recursive=True)
            if id(layer) not in inside and layer.trainable_weights]


@pytest.mark.parametrize("num_classes, hidden_units, expected", [
    (2, 0, [("logistic", 1, "sigmoid")]),
    (3, 0, [("softmax", 3, "softmax")]),
    (2, 64, [("hidden", 64, "relu"), ("logistic", 1, "sigmoid")]),
])
def test_paper_head_is_one_logistic_layer_on_the_pooled_features(tiny_preset, num_classes, hidden_units, expected):
    """--hidden_units=0 is Hart's "single dense layer with a logistic activation function" on the pooled features:
    the fine-tuned model's only trainable layer outside BERT is Dense(1, sigmoid) (a softmax layer for 3+ classes)
    reading the [CLS] vector; 64 puts the ReLU layer of the earlier results before it."""
    import keras
    import tensorflow as tf

    from tf_transfer.models import backbones

    backbone = backbones.load_preset(tiny_preset).backbone
    settings = sentiment_settings.SentimentBertSettings(preset=tiny_preset, mode="top2", hidden_units=hidden_units)
    model = bert.FineTuning(backbone, settings, num_classes, None, None, tf.distribute.get_strategy()).model(0)
    layers = _head_layers(model, backbone)
    assert [(layer.name, layer.units, layer.activation.__name__) for layer in layers] == expected
    assert all(isinstance(layer, keras.layers.Dense) and layer.dtype_policy.name == "float32" for layer in layers)
    width = backbone.hidden_dim
    assert layers[0].kernel.shape == (width, hidden_units or (1 if num_classes == 2 else num_classes))
    # It reads the pooled features: with the head's weights set by hand, the output is sigmoid(w . [CLS] + b).
    if hidden_units == 0 and num_classes == 2:
        rng = np.random.default_rng(0)
        kernel, bias = rng.normal(size=(width, 1)).astype(np.float32), np.array([0.3], np.float32)
        layers[0].set_weights([kernel, bias])
        batch = {"token_ids": np.array([[2, 7, 9, 3, 0]], np.int32), "segment_ids": np.zeros((1, 5), np.int32),
                 "padding_mask": np.array([[1, 1, 1, 1, 0]], np.int32)}
        cls = np.asarray(backbone(batch, training=False)["sequence_output"])[:, 0, :]
        expected_p = 1.0 / (1.0 + np.exp(-(cls @ kernel + bias)))
        np.testing.assert_allclose(np.asarray(model(batch, training=False)), expected_p, rtol=1e-5, atol=1e-6)


def test_paper_flagfile_head_runs_end_to_end(tiny_preset, tmp_path):
    """A tiny top2 run through the flagfile chain (hart_bert_top2 -> hart_bert_common: the paper's head) completes,
    and its results file records hidden_units 0."""
    path = write_kaggle_csv(tmp_path / "train.csv", rows_per_class=6)
    done = run_module("tf_transfer.sentiment", "--flagfile=flags/hart_bert_top2.flags", f"--preset={tiny_preset}",
                      "--runs=1", "--epochs=1", "--batch_size=4", "--max_seq_length=16", f"--data={path}",
                      f"--output_dir={tmp_path / 'out'}")
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp_path / "out" / "bert_top2_cls.json") as f:
        results = json.load(f)
    assert results["completed"] is True and results["settings"]["hidden_units"] == 0
    assert results["settings"]["lr"] == 5e-5 and results["settings"]["trainable_layers"] == 2
    (run,) = results["runs"]
    assert 0.0 <= run["accuracy"] <= 1.0 and run["epochs"][0]["loss"] > 0


def test_last4_concat_and_mean_feature_widths(tiny_preset):
    from tf_transfer.models import backbones

    backbone = backbones.load_preset(tiny_preset).backbone
    widths = {pooling: sentence_features.build_feature_model(backbone, pooling).output.shape[-1]
              for pooling in sentence_features.POOLINGS}
    assert widths == {"cls": 16, "mean": 16, "last4_concat": 64}


@STUDY_RUN_GROUP
def test_report_has_tables_box_plots_and_welch_tests(study_run):
    report = open(study_run["report"]).read()
    for metric in ("accuracy", "f1"):
        png = os.path.join(study_run["dir"], f"boxplot_{metric}.png")
        with open(png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
        assert f"](boxplot_{metric}.png)" in report
    assert "| tfidf |" in report and "| BERT frozen (cls) |" in report and "| BERT top2 (cls) |" in report
    best = max(study_run["sparse"], key=lambda name: study_run["sparse"][name]["f1_mean"])
    assert f"| sparse {best} (best by F1) | BERT frozen (cls) | accuracy |" in report
    assert "| BERT frozen (cls) | BERT top2 (cls) | f1 |" in report
    # The Welch row between the sparse baseline and frozen BERT carries scipy's t.
    sparse_acc = [fold["accuracy"] for fold in study_run["sparse"][best]["folds"]]
    frozen_acc = [run["accuracy"] for run in study_run["frozen"]["runs"]]
    t = stats.ttest_ind(sparse_acc, frozen_acc, equal_var=False).statistic
    row = next(line for line in report.splitlines()
               if line.startswith(f"| sparse {best} (best by F1) | BERT frozen (cls) | accuracy |"))
    cell = row.split("|")[7].strip()
    assert cell == ("n/a" if not np.isfinite(t) else f"{t:.2f}")
    # Beside it, the difference with its Welch interval (`core.stats`).
    assert row.split("|")[6].strip() == hart_stats.welch_difference(sparse_acc, frozen_acc).text(4)


@STUDY_RUN_GROUP
def test_report_from_sparse_results_alone(study_run, tmp_path):
    shutil.copy(os.path.join(study_run["dir"], study.SPARSE_JSON), tmp_path)
    report = open(hart_report.write_report(str(tmp_path))).read()
    assert "| tfidf |" in report and "## BERT models" not in report
    assert "No Welch tests" in report and os.path.exists(tmp_path / "boxplot_f1.png")


def test_report_without_results_is_an_error(tmp_path):
    with pytest.raises(TransferError, match="no results in"):
        hart_report.write_report(str(tmp_path))


# ----------------------------------------------------------------------------------------------------------------
# Resuming and precision. A real SIGKILL of a training subprocess is tested in tests/test_resume.py (the GLUE entry
# point, whose checkpoints this study reuses); here the kill is the unbroken run's folder copied right after a unit
# of work was saved (conftest.copy_when_saved), which is the moment a kill loses the least, in-process and cheaply.


# Fine-tuning's resume is tested with LoRA on the last two blocks: the same `FineTuning` path as plain top2 (its
# optimizer state, dropout RNG and data order), plus the adapters; on the two-block preset, since what a resume must
# keep does not depend on depth (the embeddings stay frozen below both blocks). LoRA adds weights to the backbone:
# seed 1 of the unbroken run starts from a fresh backbone, as the resumed process's first seed does. Plain top2's
# results file (no method recorded) is checked on the shared study run (test_bert_frozen_and_top2_results_files).
def test_bert_interrupted_mid_seed_resumes_to_the_same_numbers(two_block_preset, tmp_path, monkeypatch, capsys):
    data = texts.read_labelled_texts(write_kaggle_csv(tmp_path / "train.csv", rows_per_class=12))
    method = {"method": "lora", "lora_rank": 2}
    settings = sentiment_settings.SentimentBertSettings(preset=two_block_preset, mode="top2", runs=2, epochs=2,
                                                        batch_size=8, **method)
    output_dir = str(tmp_path / "resumed")
    copy_when_saved(monkeypatch, _seed_1_epoch_1, tmp_path / "straight", output_dir)
    straight = bert.run_bert(data, str(tmp_path / "straight"), settings)
    resumed = _resumes_mid_seed(data, settings, straight, output_dir, monkeypatch, capsys)
    # The method is in the results file (its settings among those a rerun must match) and the model's name.
    assert resumed["method"] == "lora" and resumed["model"] == "lora_r2_top2"
    assert settings.file_name == "bert_lora_r2_top2_cls.json" and {k: resumed["settings"][k] for k in method} == method
    # Only the rank-2 updates of query and value train in the last two blocks: 2 x 2 x (16 + 16) x 2.
    assert [run["lora"]["weights"] for run in resumed["runs"]] == [256, 256]


@STUDY_RUN_GROUP
def test_frozen_bert_interrupted_mid_seed_resumes_to_the_study_runs_numbers(study_run, tmp_path, monkeypatch, capsys):
    """Frozen features: the shared study run is the unbroken run (two seeds of two epochs), and the folder it left
    right after seed 1's first epoch the killed one (copied here: the other tests read the shared folder)."""
    settings = sentiment_settings.SentimentBertSettings(preset=study_run["preset"], mode="frozen", runs=2, epochs=2,
                                                        batch_size=8)
    output_dir = str(tmp_path / "resumed")
    shutil.copytree(study_run["killed"], output_dir)
    resumed = _resumes_mid_seed(study_run["data"], settings, study_run["frozen"], output_dir, monkeypatch, capsys)
    assert resumed["method"] == "freeze" and "method" not in resumed["settings"]  # as in files from before --method


def _resumes_mid_seed(data, settings, straight: dict, output_dir: str, monkeypatch, capsys) -> dict:
    """Checks what a process killed right after seed 1's first epoch was saved leaves in `output_dir`, resumes it
    and checks the result against the unbroken run's `straight` (and a rerun after it); returns the result."""
    work_dir = os.path.join(output_dir, settings.work_name)
    with open(os.path.join(output_dir, settings.file_name)) as f:
        partial = json.load(f)
    assert [run["seed"] for run in partial["runs"]] == [0] and partial["completed"] is False
    with open(os.path.join(work_dir, "summary.json")) as f:
        in_progress = json.load(f)
    assert in_progress["seed"] == 1 and [e["epoch"] for e in in_progress["epochs"]] == [1]
    assert sorted(os.listdir(work_dir)) == ["checkpoint-epoch1.npz", "summary.json"]

    trained = []
    shared = bert.FrozenFeatures if settings.mode == "frozen" else bert.FineTuning
    build_seed = shared.build
    monkeypatch.setattr(shared, "build", lambda self, seed: trained.append(seed) or build_seed(self, seed))
    resumed = bert.run_bert(data, output_dir, settings)
    assert trained == [1]  # seed 0 was finished and is not trained again
    assert resumed["completed"] is True and resumed["runs"][0] == partial["runs"][0]
    # Weights, optimizer state, dropout RNG and data order continue: the same scores; losses equal up to float
    # rounding (the same kernels on the same batches, so in practice bit for bit).
    for a, b in zip(straight["runs"], resumed["runs"], strict=True):
        assert (b["accuracy"], b["f1"]) == (a["accuracy"], a["f1"])
        assert [e["loss"] for e in b["epochs"]] == pytest.approx([e["loss"] for e in a["epochs"]], rel=1e-6)
    run = resumed["runs"][1]
    assert [r["after_epoch"] for r in run["resumes"]] == [1]
    assert run["epochs"][0]["epoch_time_s"] == in_progress["epochs"][0]["epoch_time_s"]  # kept, not re-measured
    times = [e["epoch_time_s"] for e in run["epochs"]]
    assert [e["train_time_s"] for e in run["epochs"]] == pytest.approx(
        [sum(times[:i + 1]) for i in range(settings.epochs)])
    assert run["train_time_s"] == pytest.approx(sum(times))
    assert not os.path.exists(work_dir)  # nothing left to resume

    capsys.readouterr()
    again = bert.run_bert(data, output_dir, settings)
    assert "already holds all 2 run(s) (seeds 0-1); nothing to train" in capsys.readouterr().out
    assert again == resumed and trained == [1]
    return resumed


@STUDY_RUN_GROUP
def test_progress_counts_the_real_steps_of_every_epoch(study_run):
    # 19 training rows in batches of 8: 3 steps per epoch, each reported once against that total (frozen: per seed).
    each_run = [(epoch, done, 3, 19) for epoch in (1, 2) for done in (1, 2, 3)]
    assert study_run["progress"] == {"frozen": each_run * 2, "top2": each_run}


def without_times(results: dict) -> dict:
    return {name: {**{k: v for k, v in r.items() if k != "fit_time_s_mean"},
                   "folds": [{k: v for k, v in fold.items() if k != "fit_time_s"} for fold in r["folds"]]}
            for name, r in results.items()}


def test_sparse_interrupted_resumes_at_the_next_fold(tmp_path, monkeypatch, capsys):
    data = texts.read_labelled_texts(write_kaggle_csv(tmp_path / "train.csv", rows_per_class=9))
    # Hashed counts fit 2**20 columns (seconds per fold on a busy CPU); two representations show the same resume.
    monkeypatch.setattr(sparse, "SPARSE_REPRESENTATIONS", ("tfidf", "count"))
    straight = sparse.run_sparse_baselines(data, str(tmp_path / "straight"), folds=3, seed=0)
    fit = sparse.fit_until_converged
    calls = []

    def dies_on_the_fifth_fit(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:  # tfidf's 3 folds and count's first are saved
            raise KeyboardInterrupt
        return fit(*args, **kwargs)

    output_dir = str(tmp_path / "resumed")
    monkeypatch.setattr(sparse, "fit_until_converged", dies_on_the_fifth_fit)
    with pytest.raises(KeyboardInterrupt):
        sparse.run_sparse_baselines(data, output_dir, folds=3, seed=0)
    assert not os.path.exists(os.path.join(output_dir, study.SPARSE_JSON))
    calls.clear()
    monkeypatch.setattr(sparse, "fit_until_converged", lambda *a, **k: calls.append(1) or fit(*a, **k))
    resumed = sparse.run_sparse_baselines(data, output_dir, folds=3, seed=0)
    assert without_times(resumed) == without_times(straight)
    assert len(calls) == 2  # count's folds 2 and 3
    # The folds finished before the interruption keep the times they took then.
    assert all(fold["fit_time_s"] > 0 for result in resumed.values() for fold in result["folds"])
    capsys.readouterr()
    assert sparse.run_sparse_baselines(data, output_dir, folds=3, seed=0) == resumed
    assert "is already complete" in capsys.readouterr().out and len(calls) == 2
    with pytest.raises(TransferError, match="sparse baselines with other settings .*folds 3 vs 4"):
        sparse.run_sparse_baselines(data, output_dir, folds=4, seed=0)
    assert len(sparse.run_sparse_baselines(data, output_dir, folds=4, seed=0, overwrite=True)["count"]["folds"]) == 4
    assert len(calls) == 2 + 8


def test_precision_is_recorded_and_checked_and_the_head_stays_float32(tiny_preset, tmp_path):
    import keras

    data = texts.read_labelled_texts(write_kaggle_csv(tmp_path / "train.csv", rows_per_class=12))
    output_dir = str(tmp_path / "out")
    try:
        settings = sentiment_settings.SentimentBertSettings(preset=tiny_preset, mode="frozen", runs=1, epochs=1, batch_size=8,
                                      precision="mixed_bfloat16")
        results = bert.run_bert(data, output_dir, settings)
        assert results["precision"] == "mixed_bfloat16" and results["settings"]["precision"] == "mixed_bfloat16"
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
        features = keras.Input((8,))
        outputs = sentence_features.head_outputs(features, 2, 4)
        head = keras.Model(features, outputs)
        assert outputs.dtype == "float32"
        assert {layer.compute_dtype for layer in head.layers[1:]} == {"float32"}
    finally:
        keras.mixed_precision.set_global_policy("float32")
    with pytest.raises(TransferError, match="precision 'mixed_bfloat16' vs 'float32'"):
        bert.run_bert(data, output_dir, sentiment_settings.SentimentBertSettings(preset=tiny_preset, mode="frozen", runs=2, epochs=1,
                                                           batch_size=8))
    with pytest.raises(TransferError, match="--precision must be one of float32, mixed_bfloat16, mixed_float16"):
        sentiment_settings.SentimentBertSettings(precision="float16")


def test_entry_point_rerun_says_complete_and_refuses_other_settings(tmp_path):
    path = write_kaggle_csv(tmp_path / "train.csv", rows_per_class=4)
    output_dir = str(tmp_path / "out")
    first = run_module("tf_transfer.sentiment", f"--data={path}", "--folds=2", f"--output_dir={output_dir}")
    assert first.returncode == 0, first.stderr[-2000:]
    again = run_module("tf_transfer.sentiment", f"--data={path}", "--folds=2", f"--output_dir={output_dir}")
    assert again.returncode == 0 and "is already complete (2 folds, seed 0); nothing to compute" in again.stdout
    other = run_module("tf_transfer.sentiment", f"--data={path}", "--folds=3", f"--output_dir={output_dir}")
    errors = [line for line in other.stderr.splitlines() if line.startswith("error:")]
    assert other.returncode == 2 and len(errors) == 1 and "Traceback" not in other.stderr, other.stderr[-2000:]
    assert "sparse baselines with other settings (folds 2 vs 3)" in errors[0] and "--overwrite" in errors[0]


@pytest.mark.xdist_group(GROUP)
@pytest.mark.parametrize("setting", ["sentiment", "sentiment_frozen"])
def test_bert_mirrored_over_two_logical_cpus_is_the_one_device_run(one_device_runs, tmp_path, caplog, setting):
    """Through the command: `--distribution=mirrored` mirrors over both logical CPU devices (conftest), as over
    GPUs, and trains what one device trains (tests/study_runs.py's default-strategy runs, top2 and frozen; the
    two-worker test shares the frozen one): per-epoch losses within 1e-4 relative, the same test accuracy and F1."""
    caplog.set_level(logging.INFO, logger="tensorflow")
    spec = one_device_runs.specs[setting]
    settings = spec["settings"]
    output_dir = tmp_path / "out"
    done = run_module("tf_transfer.sentiment", "--approach=bert", "--distribution=mirrored",
                      f"--bert_mode={settings['mode']}", f"--preset={settings['preset']}", f"--runs={settings['runs']}",
                      f"--epochs={settings['epochs']}", f"--batch_size={settings['batch_size']}",
                      f"--max_seq_length={settings['max_seq_length']}", f"--data={spec['data']}",
                      f"--output_dir={output_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    used = [r.getMessage() for r in caplog.records if "Using MirroredStrategy with devices" in r.getMessage()]
    assert used and "device:CPU:1" in used[-1]
    with open(output_dir / f"bert_{settings['mode']}_cls.json") as f:
        results = json.load(f)
    assert results["completed"] is True and "distribution" not in results["settings"]
    (run,) = results["runs"]
    assert run["distribution"] == "mirrored" and [e["epoch"] for e in run["epochs"]] == [1, 2]
    (one,) = one_device_runs.run(setting)["runs"]
    if setting == "sentiment":  # top2 on two blocks: both train, the embeddings below them stay frozen
        assert run["trainable_params"] == one["trainable_params"] < one["total_params"]
    assert [e["loss"] for e in run["epochs"]] == pytest.approx([e["loss"] for e in one["epochs"]], rel=1e-4)
    assert (run["accuracy"], run["f1"]) == (one["accuracy"], one["f1"])
    assert one["epochs"][0]["loss"] != one["epochs"][1]["loss"]  # it trained
