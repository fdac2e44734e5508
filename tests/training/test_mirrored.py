"""MirroredStrategy over two logical CPU devices gives the default strategy's numbers: each replica trains on its
share of every batch (bucketed on its own), and gradients are clipped after the replicas' sum, so with dropout 0
the per-epoch losses and scores agree within 1e-4 (float32 summation order is all that differs). The default
strategy's run is tests/study_runs.py's, shared with the two-worker test. Its batches of 5, 5 and 2 give shares of
3 and 2, then 1 and 1: the replicas' losses must make the batch's weighted mean (two replicas averaging their own
shares were 1.2e-3 off the first epoch's loss, against the 1e-4 allowed); the stack and sentiment losses over
uneven shares are tests/training/test_uneven_shares.py's."""

import json

import pytest

from conftest import TWO_CPUS
from study_runs import GROUP, run_study


@pytest.mark.xdist_group(GROUP)
def test_mirrored_two_logical_cpus_matches_default(one_device_runs, tmp_path):
    from tf_transfer.core import strategies

    strategy = strategies.make_strategy("mirrored", TWO_CPUS)
    assert strategy.num_replicas_in_sync == 2
    mirrored = json.loads(json.dumps(run_study("glue", one_device_runs.specs["glue"], str(tmp_path / "mirrored"),
                                               strategy, "mirrored")))
    default = one_device_runs.run("glue")
    assert default["completed"] is True and mirrored["completed"] is True
    assert mirrored["config"]["distribution"] == "mirrored"
    assert mirrored["trainable_params"] == default["trainable_params"]
    assert len(mirrored["epochs"]) == len(default["epochs"]) == 2
    for one, two in zip(default["epochs"], mirrored["epochs"]):
        assert set(two["val"]) == {"f1", "accuracy"}
        assert two["loss"] == pytest.approx(one["loss"], rel=1e-4)
        assert two["val"] == pytest.approx(one["val"], rel=1e-4)
        assert two["test"] == pytest.approx(one["test"], rel=1e-4)
    assert default["epochs"][0]["loss"] != default["epochs"][1]["loss"]  # it trained


@pytest.mark.xdist_group(GROUP)
def test_mirrored_lora_run_creates_its_adapters_once_and_matches_default(one_device_runs, tmp_path):
    """LoRA's A and B are created inside the strategy's scope (mirrored variables, one copy per replica kept
    equal); the last block carries them over the cache, as a user's `--method=lora --trainable_layers=1
    --cache_frozen --padding=pack` would: the cache is built on packed rows, and each replica trains on its share
    of a batch's rows, so its examples are counted across the replicas (the bucketed cache under a strategy is the
    two-worker test's AutoFreeze run)."""
    from tf_transfer.core import strategies

    spec = {**one_device_runs.specs["glue"], "method": "lora", "lora_rank": 2, "cache_frozen": True,
            "padding": "pack"}
    default = run_study("glue", spec, str(tmp_path / "default"))
    mirrored = run_study("glue", spec, str(tmp_path / "mirrored"), strategies.make_strategy("mirrored", TWO_CPUS),
                         "mirrored")
    assert mirrored["lora"] == default["lora"] == {"rank": 2, "alpha": 8.0, "init": "kaiming_uniform",
                                                  "targets": ["query", "value"], "layers": 2,
                                                  "weights": 2 * 2 * (16 + 16)}
    assert mirrored["config"]["padding"] == default["config"]["padding"] == "pack"
    assert mirrored["trainable_params"] == default["trainable_params"]
    for one, two in zip(default["epochs"], mirrored["epochs"]):
        assert two["loss"] == pytest.approx(one["loss"], rel=1e-4)
        assert two["val"] == pytest.approx(one["val"], rel=1e-4)
    assert default["epochs"][0]["loss"] != default["epochs"][1]["loss"]  # it trained
