"""benchmarks/gpu.sh on a machine without a GPU: its rows cover what the kit promises, bad arguments are one line and
status 2, no GPU stops it with status 3 before anything is installed, and --cpu_smoke writes the benchmark's JSON
lines (no test needs a GPU)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

KIT = os.path.join(REPO, "benchmarks", "gpu.sh")
BENCH_KEYS = {"train_examples_per_s", "train_examples_per_s_repeats", "tokens_per_s", "padding_efficiency",
              "gflop_per_s", "step_time_s", "peak_rss_mb", "cpu_utilization", "warmup_s", "machine", "settings"}


def kit(*args, env=None, timeout=60):
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    return subprocess.run(["bash", KIT, *args], cwd=REPO, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


def test_rows_cover_batch_sizes_layers_precisions_xla_steps_per_execution_and_mirrored():
    done = kit("--list")
    assert done.returncode == 0, done.stderr
    rows = dict(line.split("\t") for line in done.stdout.splitlines())
    combos = set()
    for name, flags in rows.items():
        words = dict(w.split("=", 1) if "=" in w else (w, True) for w in flags.split())
        combos.add((words["--batch_size"], words["--trainable_layers"], words.get("--cache_frozen", False),
                    words["--precision"], words["--jit_compile"], words["--steps_per_execution"],
                    words.get("--distribution", "default")))
    for batch, spes in (("32", ("1",)), ("1", ("1", "32"))):
        for layers, cache in (("all", False), ("2", True)):
            for precision in ("float32", "mixed_float16"):
                for jit in ("false", "true"):
                    for spe in spes:
                        assert (batch, layers, cache, precision, jit, spe, "default") in combos
    assert any(c[-1] == "mirrored" for c in combos)
    assert len(rows) == 25


@pytest.mark.parametrize("args, fragment", [
    (["--bogus"], "unknown option --bogus"),
    (["--rows=bs32_all_fp32,nope", "--data_dir", REPO], "unknown row 'nope'"),
    (["--max_train_examples=many"], "--max_train_examples must be a positive integer"),
    (["--out"], "--out needs a value"),
    (["--data_dir=/no/such/glue"], "--data_dir /no/such/glue does not exist"),
])
def test_bad_arguments_are_one_line_and_status_2(args, fragment):
    done = kit(*args)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and fragment in done.stderr


def test_without_a_gpu_it_says_so_and_stops_before_installing(tmp_path):
    # NVIDIA_SMI=false: the command that lists GPUs lists none (as on a machine without the driver).
    done = kit("--data_dir", str(tmp_path), "--out", str(tmp_path / "gpu.jsonl"), env={"NVIDIA_SMI": "false",
                                                                                         "PYTHON": "false"})
    assert done.returncode == 3, done.stderr
    assert "no NVIDIA GPU found" in done.stderr and "--cpu_smoke" in done.stderr
    assert not (tmp_path / "gpu.jsonl").exists()


STAND_IN = """#!/usr/bin/env bash
# python for gpu.sh: the benchmark's flags are recorded and the prepared output printed; anything else is python.
if [ "$1" = -m ] && [ "$2" = tf_transfer.bench ]; then
  printf '%s\\n' "${@:3}" > "$BENCH_FLAGS"
  cat "$BENCH_OUTPUT"
  exit 0
fi
exec "$REAL_PYTHON" "$@"
"""


def test_cpu_smoke_runs_the_rows_flags_through_the_benchmark_and_appends_its_json_line(glue_dir, tiny_preset,
                                                                                        tmp_path, monkeypatch):
    """--cpu_smoke on one row, with `PYTHON` a stand-in that records the benchmark's flags and prints a prepared
    output; the flags it recorded run through the benchmark in this process (`python -m tf_transfer.bench`'s own
    main: a process of its own would start TensorFlow again, seconds of the suite's budget for tests that start
    processes), and the kit, given that real output, appends it as the row's line. Given no JSON line, the kit
    stops with status 2 and appends nothing."""
    from conftest import run_module

    python = tmp_path / "python"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    flags_file, output = tmp_path / "flags.txt", tmp_path / "bench.out"
    output.write_text("no JSON here\n")
    out = tmp_path / "smoke.jsonl"
    out.write_text("")
    env = {"NVIDIA_SMI": "false", "PYTHON": str(python), "REAL_PYTHON": sys.executable,
           "BENCH_FLAGS": str(flags_file), "BENCH_OUTPUT": str(output)}
    args = ("--cpu_smoke", "--rows=bs32_all_fp32", f"--preset={tiny_preset}", f"--data_dir={glue_dir}",
            "--max_train_examples=32", f"--out={out}")

    done = kit(*args, env=env)
    assert done.returncode == 2 and "row bs32_all_fp32 did not end with the benchmark's JSON line" in done.stderr
    assert out.read_text() == ""
    flags = flags_file.read_text().split()
    assert {f"--preset={tiny_preset}", f"--data_dir={glue_dir}", "--max_train_examples=32", "--batch_size=32",
            "--trainable_layers=all", "--precision=float32", "--steps=2", "--warmup_steps=1",
            "--repeats=1"} <= set(flags)

    bench = run_module("tf_transfer.bench", *flags)
    assert bench.returncode == 0, bench.stderr[-3000:]
    output.write_text(bench.stdout)
    done = kit(*args, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = out.read_text().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert BENCH_KEYS <= set(result)
    assert result["row"] == "bs32_all_fp32" and result["kit"] == "cpu_smoke" and result["device"] == "cpu"
    assert result["settings"]["batch_size"] == 32 and result["settings"]["precision"] == "float32"
    assert result["train_examples_per_s"] > 0
    assert {k: v for k, v in result.items() if k not in ("row", "kit", "device")} == \
        json.loads(bench.stdout.strip().splitlines()[-1])
