"""MirroredStrategy over two logical CPU devices gives the default strategy's numbers: each replica trains on its
share of every batch (bucketed on its own), and gradients are clipped after the replicas' sum, so with dropout 0
the per-epoch losses and scores agree within 1e-4 (float32 summation order is all that differs)."""

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO

SCRIPT = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from tf_transfer.studies import glue as runner
    from tf_transfer.core import strategies
    from tf_transfer.studies.glue_config import RunConfig

    glue_dir, preset, out = sys.argv[1:4]
    result = {}
    for name, devices in (("default", None), ("mirrored", ["/cpu:0", "/cpu:1"])):
        strategy = strategies.make_strategy(name, devices)
        # A clipping norm below the gradients' (about 0.4 at first): clipping each replica's own gradient would
        # show. Bucketed padding: each replica's share is padded to its own bucket.
        config = RunConfig(task="mrpc", preset=preset, trainable_layers=1, lr=1e-2, clip_norm=0.05, batch_size=4,
                           max_epochs=2, patience=0, data_dir=glue_dir, max_seq_length=32, dropout=0.0,
                           distribution=name)
        summary = runner.run_glue(config, f"{out}/{name}", strategy=strategy)
        result[name] = {"replicas": strategy.num_replicas_in_sync, "completed": summary["completed"],
                        "epochs": [{k: e[k] for k in ("loss", "val", "test")} for e in summary["epochs"]],
                        "trainable_params": summary["trainable_params"]}
    print("RESULT " + json.dumps(result))
""")


def test_mirrored_two_logical_cpus_matches_default(glue_dir, tiny_preset, tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, glue_dir, tiny_preset, str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
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
