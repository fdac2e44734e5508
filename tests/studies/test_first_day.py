"""A stranger's first day with their own data (issue 42): Hugging Face's flag names, first-run defaults for a
user's file, and the refusals that save a day. Most checks need no model: flags parsed, settings built, files read."""

import dataclasses

import pytest
from absl import flags

from tf_transfer import glue
from tf_transfer.core import cli
from tf_transfer.core import flags as flags_lib
from tf_transfer.studies.glue_settings import GlueSettings

from conftest import run_module, write_csv


def _first_run(*args):
    """`(settings, first line)` that `python -m tf_transfer.glue args` builds (its flags parsed as the command does)."""
    flags.FLAGS.unparse_flags()
    flags_lib.apply(glue.COMMAND_FLAGS)
    try:
        cli.parse_flags(["glue", *args])
        return glue.first_run_settings()
    finally:
        flags.FLAGS.unparse_flags()


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


def test_a_users_file_gets_first_run_defaults_and_says_so(tweets, tmp_path):
    settings, line = _first_run(f"--train_file={tweets}", "--text_column_names=text", "--label_column_name=target")
    assert (settings.preset, settings.batch_size, settings.max_epochs, settings.patience, settings.trainable_layers,
            settings.cache_frozen) == ("all_minilm_l6_v2_en", 32, 5, 2, 2, True)
    assert line == ("first run on tweets: chose --preset=all_minilm_l6_v2_en, --batch_size=32, --max_epochs=5, "
                    "--trainable_layers=2, --cache_frozen=true (early stopping after 2 epochs without improvement) "
                    "(--trainable_layers=all fine-tunes everything); give any of these flags (or a --flagfile) to "
                    "change them")
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
    # GLUE tasks keep their defaults.
    assert _first_run("--task=rte") == (GlueSettings(task="rte"), None)
