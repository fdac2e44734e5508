"""`tf_transfer.compare`: one row per setting with seed-paired intervals against full fine-tuning, resumed when
called again with the same folder; bad settings and data refused before anything trains."""

import os

import pytest

import tf_transfer
from conftest import SENTENCES
from tf_transfer.core.errors import TransferError


def _reviews():
    import pandas as pd

    return pd.DataFrame({"text": SENTENCES * 3, "label": [i % 2 for i in range(len(SENTENCES) * 3)]})


def _compare(folder, preset, log, settings=(0,), **given):
    return tf_transfer.compare(_reviews(), list(settings), seeds=[0, 1], folder=str(folder), preset=preset,
                               max_epochs=1, batch_size=8, max_seq_length=16, lr=1e-3, validation_fraction=0.25,
                               log=log, **given)


def test_a_row_per_setting_with_paired_intervals_and_a_rerun_trains_nothing(one_block_preset, tmp_path):
    lines = []
    table = _compare(tmp_path / "runs", one_block_preset, lines.append, figure=str(tmp_path / "score_vs_time.png"))
    assert list(table.index) == ["full fine-tuning", "last 0"]
    assert table["runs"].tolist() == [2, 2] and table.attrs["ran"] == 4
    assert (table.attrs["metric"], table.attrs["score_on"]) == ("accuracy", "validation")
    last = table.loc["last 0"]
    for measure in ("score", "time_s", "peak_memory_mb"):
        assert last[f"{measure}_diff_low"] <= last[f"{measure}_diff"] <= last[f"{measure}_diff_high"], measure
        assert table.loc["full fine-tuning"][[f"{measure}_diff", f"{measure}_diff_low"]].isna().all()
    assert last["trainable_params"] < table.loc["full fine-tuning"]["trainable_params"]
    assert os.path.getsize(tmp_path / "score_vs_time.png") > 0

    summaries = {path: os.path.getmtime(path) for path in _summaries(tmp_path / "runs")}
    again = _compare(tmp_path / "runs", one_block_preset, lines.append)
    assert (again.attrs["ran"], again.attrs["completed"]) == (0, 4)
    assert len(summaries) == 4 and {path: os.path.getmtime(path) for path in summaries} == summaries
    assert again[["score", "time_s", "score_diff"]].equals(table[["score", "time_s", "score_diff"]])


def _summaries(folder) -> list:
    return [os.path.join(root, "summary.json") for root, _, files in os.walk(folder) if "summary.json" in files]


@pytest.mark.parametrize("settings, given, message", [
    ([{"method": "prompt"}], {}, "--method must be one of freeze, lora, bitfit"),
    ([{"method": "lora", "depth": 2}], {}, "--method=lora has no setting 'depth'"),
    ([2, {"trainable_layers": 2}], {}, "two settings are both 'last 2'"),
    ([0], {"label_column": "stars"}, "stars"),
])
def test_bad_settings_and_data_are_refused_before_training(one_block_preset, tmp_path, settings, given, message):
    with pytest.raises(TransferError, match=message):
        _compare(tmp_path, one_block_preset, print, settings, **given)
    assert not _summaries(tmp_path)
