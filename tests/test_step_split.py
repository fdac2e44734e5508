"""benchmarks/step_split.py without TensorFlow or PyTorch: both sides' profiles become one table of shares in the
same order, each side's traced step is per step, our GFLOP per CPU second is set against the peak, and a bad
argument is one `error:` line with status 2."""

import importlib.util
import os
import subprocess
import sys

from conftest import REPO

spec = importlib.util.spec_from_file_location("step_split", os.path.join(REPO, "benchmarks", "step_split.py"))
step_split = importlib.util.module_from_spec(spec)
spec.loader.exec_module(step_split)


def profile(shares: dict, traced_s: float, cpu_s: float, busy_s: float) -> dict:
    return {"profile_categories": [{"category": k, "share": v} for k, v in shares.items()],
            "profile_traced_s": traced_s, "profile_traced_cpu_s": cpu_s, "profile_op_busy_s": busy_s}


def test_the_table_puts_both_sides_parts_side_by_side_per_step():
    ours = {**profile({"other": 0.1, "matmul": 0.7, "layer norm": 0.2}, 8.0, 8.0, 7.2),
            "gflop_per_s": 30.0, "cpu_utilization": 0.5, "step_time_s": 1.9}
    peer = profile({"matmul": 0.8, "GELU": 0.2}, 4.0, 4.0, 3.8)
    peak = {"float32": {"square_2048": {"gflop_per_cpu_s": 80.0}, "feedforward_bs32": {"gflop_per_cpu_s": 70.0}}}
    lines = step_split.split_table(ours, peer, peak, steps=4)
    assert lines[2:6] == ["| matmul | 70.0% | 80.0% |", "| GELU | 0.0% | 20.0% |", "| layer norm | 20.0% | 0.0% |",
                          "| other | 10.0% | 0.0% |"]
    # 8 s over 4 steps, ops busy 7.2 / 4 = 1.8 s: 0.2 s (10%) of each step is the framework's own
    assert "a traced step 2.000 s wall" in lines[6] and "0.200 s, 10.0% of the step" in lines[6]
    assert "60.0 GFLOP per CPU second executed = 75% of" in lines[-1]  # 30 GFLOP/s at half a CPU


def test_a_bad_argument_is_one_error_line():
    done = subprocess.run([sys.executable, "benchmarks/step_split.py", "--data_dir=/nowhere"], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("error: --data_dir=/nowhere: no MRPC/train.tsv")
    assert done.stderr.count("\n") == 1


def test_over_the_cache_the_table_says_what_the_step_math_allows():
    """Last 2 of 6 blocks: the peer's step runs 4 frozen blocks forward and 2 forward and backward (3 forwards'
    worth each), 10 block-forwards against our 6; the train split's build adds 4 / 3 epochs to ours."""
    ours = {**profile({"matmul": 1.0}, 4.0, 4.0, 3.6), "gflop_per_s": 30.0, "cpu_utilization": 1.0,
            "step_time_s": 0.9, "num_layers": 6, "cache_time_s": 18.0, "cache_cost_by_split": {"train": {"s": 6.5}}}
    peer = profile({"matmul": 1.0}, 4.0, 4.0, 3.8)
    peak = {"float32": {"square_2048": {"gflop_per_cpu_s": 80.0}, "feedforward_bs32": {"gflop_per_cpu_s": 70.0}}}
    line = step_split.split_table(ours, peer, peak, steps=4, trained="2")[-1]
    assert line.startswith("the step math, last 2 of 6 blocks: the peer's step executes 1.67x ours' FLOPs, 1.36x ")
    assert "(our builds in this run: the train split's 6.5 s, every split's 18.0 s)" in line
    assert step_split.split_table(ours, peer, peak, steps=4)[-1].startswith("ours, timed")  # all layers: no line


def test_an_unknown_setting_is_refused(tmp_path):
    (tmp_path / "MRPC").mkdir()
    (tmp_path / "MRPC" / "train.tsv").write_text("")
    done = subprocess.run([sys.executable, "benchmarks/step_split.py", f"--data_dir={tmp_path}", "--setting=last3"],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr == "error: --setting=last3: choose all, last2, lora8 or bitfit\n"


def test_the_table_counts_our_products_per_step_forward_and_backward():
    """BitFit over 4 steps: 38 products forward a step, 39 backward (the activations' gradients and the head's
    kernel): no frozen kernel's gradient."""
    ours = {**profile({"matmul": 1.0}, 4.0, 4.0, 3.6), "gflop_per_s": 30.0, "cpu_utilization": 1.0,
            "step_time_s": 0.9, "profile_products": {"forward": 152, "backward": 156}}
    peak = {"float32": {"square_2048": {"gflop_per_cpu_s": 80.0}, "feedforward_bs32": {"gflop_per_cpu_s": 70.0}}}
    lines = step_split.split_table(ours, profile({"matmul": 1.0}, 4.0, 4.0, 3.8), peak, steps=4)
    assert lines[-2].startswith("ours: the dense layers' products per step: 38 forward, 39 backward (1.03 per ")
    assert step_split.SETTINGS["bitfit"] == "all" and "--method=bitfit" in step_split.fair.SETTINGS["bitfit"][1]
