"""A run under MirroredStrategy over two logical CPU devices trains and matches the default strategy's shapes."""

import json
import subprocess
import sys
import textwrap

from conftest import REPO

SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
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
        config = RunConfig(task="mrpc", preset=preset, trainable_layers=1, lr=1e-3, batch_size=4, max_epochs=1,
                           data_dir=glue_dir, max_seq_length=32, distribution=name)
        summary = runner.run_glue(config, f"{out}/{name}", strategy=strategy)
        result[name] = {"replicas": strategy.num_replicas_in_sync, "completed": summary["completed"],
                        "loss": summary["epochs"][0]["loss"], "val": summary["epochs"][0]["val"],
                        "trainable_params": summary["trainable_params"]}
    print("RESULT " + json.dumps(result))
""")


def test_mirrored_two_logical_cpus(glue_dir, tiny_preset, tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, glue_dir, tiny_preset, str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    assert result["default"]["replicas"] == 1 and result["mirrored"]["replicas"] == 2
    for name in ("default", "mirrored"):
        assert result[name]["completed"] is True
        assert result[name]["loss"] > 0
        assert set(result[name]["val"]) == {"f1", "accuracy"}
    assert result["mirrored"]["trainable_params"] == result["default"]["trainable_params"]
