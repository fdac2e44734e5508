"""benchmarks/gpu.sh on a machine without a GPU: its rows cover what the kit promises, bad arguments are one line and
status 2, no GPU stops it with status 3 before anything is installed, and --cpu_smoke writes the benchmark's JSON
lines (no test needs a GPU)."""

import json
import os
import subprocess

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


def test_cpu_smoke_appends_one_bench_json_line_per_row(glue_dir, tiny_preset, tmp_path):
    out = tmp_path / "smoke.jsonl"
    out.write_text("")
    done = kit("--cpu_smoke", "--rows=bs32_all_fp32", f"--preset={tiny_preset}", f"--data_dir={glue_dir}",
               "--max_train_examples=32", f"--out={out}", env={"NVIDIA_SMI": "false"}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = out.read_text().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert BENCH_KEYS <= set(result)
    assert result["row"] == "bs32_all_fp32" and result["kit"] == "cpu_smoke" and result["device"] == "cpu"
    assert result["settings"]["batch_size"] == 32 and result["settings"]["precision"] == "float32"
    assert result["train_examples_per_s"] > 0
