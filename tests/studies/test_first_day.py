"""A stranger's first day with their own data (issue 42): Hugging Face's flag names, first-run defaults for a
user's file, and the refusals that save a day. Most checks need no model: flags parsed, settings built, files read."""

import dataclasses

import pytest
from absl import flags

from tf_transfer import glue
from tf_transfer.core import flags as flags_lib

from conftest import run_module, write_csv


def _settings(*args):
    """The settings `python -m tf_transfer.glue args` builds (its flags parsed as the command parses them)."""
    flags.FLAGS.unparse_flags()
    flags_lib.apply(glue.COMMAND_FLAGS)
    try:
        flags.FLAGS(["glue", *args])
        return glue.settings_from_flags()
    finally:
        flags.FLAGS.unparse_flags()


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
