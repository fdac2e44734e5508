"""benchmarks/fair.py without TensorFlow or PyTorch: the interleaving protocol never lets two timed spans overlap,
the peer's span timer times the steps it says, the ratios are medians of per-round ratios, the cache build is
charged as stated, and bad arguments are one `error:` line with status 2."""

import importlib.util
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "benchmarks", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fair = load("fair")

# A stand-in benchmark: before each of 2 spans it says ready and waits, then "works" 0.2 s, logging both ends.
FAKE = """
import json, sys, time
log = open(sys.argv[2], "a")
for i in range(2):
    print(f"ready {i}", flush=True)
    sys.stdin.readline()
    log.write(f"{sys.argv[1]} start {time.time()}\\n"); log.flush()
    time.sleep(0.2)
    log.write(f"{sys.argv[1]} end {time.time()}\\n"); log.flush()
print(json.dumps({"name": sys.argv[1]}))
"""


def test_sides_take_turns_and_spans_never_overlap(tmp_path, monkeypatch):
    script, log = tmp_path / "fake.py", tmp_path / "log"
    script.write_text(FAKE)
    commands = [(name, [sys.executable, str(script), name, str(log)]) for name in ("ours", "peer:eager")]
    monkeypatch.setattr(fair, "side_commands", lambda args, setting, modes: commands)
    args = type("Args", (), {"rounds": 2, "threads": 1})
    results = fair.run_setting(args, "all", ["eager"])
    assert results == {"ours": {"name": "ours"}, "peer:eager": {"name": "peer:eager"}}
    events = [line.split() for line in log.read_text().splitlines()]
    assert [(who, what) for who, what, _ in events] == [
        ("ours", "start"), ("ours", "end"), ("peer:eager", "start"), ("peer:eager", "end")] * 2
    times = [float(t) for _, _, t in events]
    assert times == sorted(times)


def test_ratio_is_the_median_of_per_round_ratios_and_the_cache_is_charged_per_epoch():
    line = fair.row("x", [10.0, 30.0, 20.0], [10.0, 10.0, 40.0], "eager")
    assert "**1.00x**" in line  # per-round ratios 1, 3, 0.5 (the ratio of the medians would be 2)
    # 3 epochs of 512 at 51.2 examples/s is 30 s; with a 10 s build, 1536 / 40 s.
    assert fair.amortised([51.2], 10.0) == [pytest.approx(1536 / 40)]


def test_batch_one_is_a_share_of_each_sides_batch_32_and_its_flags_come_last(tmp_path):
    lines = fair.batch_one_share({"ours": {"train_examples_per_s": 20.0}, "peer:eager": {"train_examples_per_s": 21.0}},
                                 {"ours": {"train_examples_per_s": 9.0}, "peer:eager": {"train_examples_per_s": 12.0}})
    assert lines == ["- batch size 1 against batch 32, ours: 9.0 / 20.0 examples/s = 45%",
                     "- batch size 1 against batch 32, peer:eager: 12.0 / 21.0 examples/s = 57%"]
    (tmp_path / "MRPC").mkdir()
    (tmp_path / "MRPC" / "train.tsv").write_text("")
    args = fair.parse_args([f"--data_dir={tmp_path}"])
    for _, command in fair.side_commands(args, "all_bs1", ["eager"]):
        batch = [word for word in command if word.startswith("--batch_size=")]
        assert batch[-1] == "--batch_size=1"  # after the common --batch_size=32: the last one wins


def test_peer_modes_follow_the_cpu():
    assert fair.peer_modes("eager,bf16", {"flags": []}) == ["eager", "bf16"]
    assert "bf16" not in fair.peer_modes("auto", {"flags": ["avx2"]})
    assert "bf16" in fair.peer_modes("auto", {"flags": ["avx2", "avx512f", "amx_bf16"]})
    with pytest.raises(SystemExit, match="unknown --peer_modes"):
        fair.peer_modes("fast", {"flags": []})


@pytest.mark.parametrize("args, fragment", [
    (["--data_dir=/nowhere"], "has no MRPC/train.tsv"),
    (["--settings=all,everything"], "unknown --settings everything"),
    (["--rounds=0"], "must be at least 1"),
])
def test_bad_arguments_are_one_line_and_status_2(glue_dir, args, fragment):
    given = args if args[0].startswith("--data_dir") else [f"--data_dir={glue_dir}", *args]
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "fair.py"), *given],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and fragment in done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("error:")] == [done.stderr.strip()]


def test_the_peers_span_timer_times_the_steps_after_the_warm_up():
    timer = load("hf_baseline").WindowTimer(warmup=2, steps=3, windows=2, wait=False)
    for done in range(0, 9):  # the callback's calls: train begin (0 steps done), then after every step
        timer.at_step(done)
        time.sleep(0.001)
    assert [(first, steps) for first, steps, _, _ in timer.windows] == [(2, 3), (5, 3)]
    assert all(seconds > 0 and cpu >= 0 for _, _, seconds, cpu in timer.windows)


def test_both_profiles_split_a_step_into_the_same_parts():
    from tf_transfer.training.profiling import category

    block = "functional_1/bert_backbone/transformer_layer_0"
    assert category(f"{block}/self_attention_layer/query/einsum/Einsum", "_MklEinsum") == "matmul"
    assert category(f"gradient_tape/{block}/self_attention_layer/einsum_1/Einsum", "Einsum") == "attention"
    assert category(f"{block}/self_attention_layer/softmax/Softmax", "Softmax") == "attention"
    assert category(f"{block}/self_attention_layer/dropout/Mul", "Mul") == "dropout"
    assert category(f"{block}/feedforward_layer_norm/Mul", "Mul") == "layer norm"
    assert category(f"{block}/feedforward_intermediate_dense/Erf", "Erf") == "GELU"
    assert category(f"{block}/feedforward_output_dense/MatMul", "_MklMatMul") == "matmul"
    assert category("adam_w/ResourceApplyAdam", "ResourceApplyAdam") == "optimizer"
    part_of = load("torch_profile").part_of
    assert part_of(["aten::addmm", "aten::linear"]) == "matmul"
    assert part_of(["aten::mm", "autograd::engine::evaluate_function: MmBackward0"]) == "matmul"
    assert part_of(["aten::mul", "aten::gelu_backward", "GeluBackward0"]) == "GELU"
    assert part_of(["aten::mul", "aten::native_dropout"]) == "dropout"
    assert part_of(["aten::_foreach_mul_", "Optimizer.step#AdamW.step"]) == "optimizer"
    assert part_of(["aten::_scaled_dot_product_flash_attention_for_cpu"]) == "attention"
    assert part_of(["aten::native_layer_norm"]) == "layer norm"
    assert part_of(["aten::add"]) == "other"


def test_the_dense_layers_products_are_counted_per_pass_without_attentions_own():
    """A frozen kernel's layer runs one backward product (the activations' gradient), a trained one two; attention's
    products and element-wise ops are not counted."""
    from tf_transfer.training.profiling import _count_products

    block = "StatefulPartitionedCall/model/transformer_layer_0"
    events = [(f"{block}/self_attention_layer/query/einsum/Einsum", "_MklEinsum", 0.1),
              (f"gradient_tape/{block}/self_attention_layer/query/einsum/Einsum", "_MklEinsum", 0.1),
              (f"{block}/feedforward_output_dense/Tensordot/MatMul", "_MklMatMul", 0.1),
              (f"gradient_tape/{block}/feedforward_output_dense/Tensordot/MatMul/MatMul", "_MklMatMul", 0.1),
              (f"gradient_tape/{block}/feedforward_output_dense/Tensordot/MatMul/MatMul_1", "_MklMatMul", 0.1),
              (f"{block}/self_attention_layer/MatMul", "_MklBatchMatMulV2", 0.1),
              (f"gradient_tape/{block}/self_attention_layer/MatMul/MatMul", "_MklBatchMatMulV2", 0.1),
              (f"{block}/feedforward_intermediate_dense/Gelu/mul", "Mul", 0.1)]
    assert _count_products(events) == {"forward": 2, "backward": 3}


def test_the_ab_runner_refuses_a_missing_glue_folder():
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "ab.py"), "--data_dir=/nowhere"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("error: --data_dir=/nowhere has no MRPC/train.tsv")
