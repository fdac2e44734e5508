"""MirroredStrategy over two logical CPU devices gives the default strategy's numbers: each replica trains on its
share of every batch (bucketed on its own), and gradients are clipped after the replicas' sum, so with dropout 0
the per-epoch losses and scores agree within 1e-4 (float32 summation order is all that differs)."""

import pytest

from conftest import TWO_CPUS

def test_mirrored_two_logical_cpus_matches_default(glue_dir, tiny_preset, tmp_path):
    from tf_transfer.core import strategies
    from tf_transfer.studies import glue as runner
    from tf_transfer.studies.glue_config import RunConfig

    result = {}
    for name, devices in (("default", None), ("mirrored", TWO_CPUS)):
        strategy = strategies.make_strategy(name, devices)
        # A clipping norm below the gradients' (about 0.4 at first): clipping each replica's own gradient would
        # show. Bucketed padding: each replica's share is padded to its own bucket.
        config = RunConfig(task="mrpc", preset=tiny_preset, trainable_layers=1, lr=1e-2, clip_norm=0.05,
                           batch_size=4, max_epochs=2, patience=0, data_dir=glue_dir, max_seq_length=32, dropout=0.0,
                           distribution=name)
        summary = runner.run_glue(config, str(tmp_path / name), strategy=strategy)
        result[name] = {"replicas": strategy.num_replicas_in_sync, "completed": summary["completed"],
                        "epochs": [{k: e[k] for k in ("loss", "val", "test")} for e in summary["epochs"]],
                        "trainable_params": summary["trainable_params"]}
    default, mirrored = result["default"], result["mirrored"]
    assert default["replicas"] == 1 and mirrored["replicas"] == 2
    assert default["completed"] is True and mirrored["completed"] is True
    assert mirrored["trainable_params"] == default["trainable_params"]
    assert len(mirrored["epochs"]) == len(default["epochs"]) == 2
    for one, two in zip(default["epochs"], mirrored["epochs"]):
        assert set(two["val"]) == {"f1", "accuracy"}
        assert two["loss"] == pytest.approx(one["loss"], rel=1e-4)
        assert two["val"] == pytest.approx(one["val"], rel=1e-4)
        assert two["test"] == pytest.approx(one["test"], rel=1e-4)
    assert default["epochs"][0]["loss"] != default["epochs"][1]["loss"]  # it trained
