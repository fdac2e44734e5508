"""`tf_transfer.compare`'s refusals: bad settings and data fail before anything trains. What it trains and returns,
and that a second call trains nothing, tests/test_python_docs.py checks on docs/python.md's comparison."""

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
