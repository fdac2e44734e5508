"""Study grids: listing, sharding, resumable and parallel-safe running, failures recorded, reports with gaps."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tf_transfer.training import record
from experiments import load_study
from tf_transfer.studies import grid as studies
from tf_transfer.core.errors import TransferError

from conftest import REPO, run_module


def test_transfer_learning_grid_is_the_papers():
    study = load_study("transfer_learning")
    runs = study.runs("paper")
    assert len(runs) == 8 * 5 * 2 * 2
    assert {r["task"] for r in runs} == {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"}
    assert all(r["batch_size"] == 1 and r["max_epochs"] == 30 and r["patience"] == 2 for r in runs)
    assert {r["lr"] for r in runs} == {1e-3, 2e-5} and {r["trainable_layers"] for r in runs} == {1, 2, 3, 4, "all"}
    assert not any(r.get("cache_frozen") for r in runs)  # the paper's flagfiles keep the computation faithful
    cpu = study.runs("cpu")
    assert all(r["cache_frozen"] == (r["trainable_layers"] != "all") for r in cpu)
    assert [r for r in cpu if r["batch_size"] == 1] and all(r["max_epochs"] == 10 for r in cpu)


def test_layer_freezing_grid_sweeps_half_to_all_frozen():
    study = load_study("layer_freezing")
    runs = study.runs("paper")  # BERT-base: L = 12
    sweep = [r for r in runs if r["part"] == "sweep" and r["task"] == "rte" and r["seed"] == 0]
    assert [r["trainable_layers"] for r in sweep] == [6, 5, 4, 3, 2, 1, 0, "all"]
    search = [r for r in runs if r["part"] == "line_search" and r["task"] == "rte"]
    assert [r["lr"] for r in search] == [1e-5, 2e-5, 3e-5, 4e-5, 5e-5]
    assert all(r["batch_size"] == 16 and r["max_epochs"] == 3 for r in runs)


def test_cpu_sweep_takes_the_line_search_winner_once_it_has_finished(tmp_path):
    """The cpu variant caches frozen prefixes; the full model of the line search has none to cache."""
    from tf_transfer.studies.glue_config import RunConfig

    study = load_study("layer_freezing")
    runs = [dict(r, cache_dir="cache") if r["cache_frozen"] else r
            for r in study.runs("cpu", tasks=["rte"])]
    runs_dir = str(tmp_path / "runs")
    sweep = [r for r in runs if r["part"] == "sweep"]
    assert sweep and all(studies.resolve(study, r, runs_dir) is None for r in sweep)
    for settings in (r for r in runs if r["part"] == "line_search"):
        config = RunConfig(**{k: v for k, v in settings.items() if k != "part"})
        folder = studies.run_dir(runs_dir, study, settings)
        os.makedirs(folder)
        _fake_summary(config, folder, score=0.7 if settings["lr"] == 3e-5 else 0.6)
    resolved = [studies.resolve(study, r, runs_dir) for r in sweep]
    assert {r["lr"] for r in resolved} == {3e-5}
    assert {r["trainable_layers"] for r in resolved} == {3, 2, 1, 0, "all"}
    assert all(r["cache_frozen"] == (r["trainable_layers"] != "all") for r in resolved)


def test_shards_partition_the_grid():
    runs = load_study("transfer_learning").runs("paper")
    shards = [studies.shard(runs, f"{i}/3") for i in (1, 2, 3)]
    assert sum(len(s) for s in shards) == len(runs)
    keys = [json.dumps(r, sort_keys=True, default=str) for s in shards for r in s]
    assert len(set(keys)) == len(runs)
    assert studies.shard(runs, "2/3") == shards[1]
    with pytest.raises(TransferError):
        studies.shard(runs, "4/3")


def test_dry_run_lists_every_run_without_data(tmp_path):
    done = run_module("tf_transfer.experiments", "run", "layer_freezing", "--dry_run", "--shard=1/2",
                      f"--runs_dir={tmp_path}")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "180 runs (360 in the whole grid)"  # 8 tasks x (5 line-search rates + 8 x 5 seeds)
    assert len(lines) == 181 and "task=" in lines[0] and "trainable_layers=" in lines[0]
    assert not os.listdir(tmp_path)
    bad = run_module("tf_transfer.experiments", "run", "no_such_study")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("error: unknown study")


def test_grid_refuses_a_missing_data_folder_and_exits_1_when_runs_fail(tmp_path):
    runs_dir = tmp_path / "runs"
    missing = run_module("tf_transfer.experiments", "run", "layer_freezing", "--variant=cpu", "--tasks=rte",
                         f"--data_dir={tmp_path / 'nope'}", f"--runs_dir={runs_dir}")
    assert missing.returncode == 2, missing.stderr[-2000:]
    assert missing.stderr.strip().splitlines()[-1] == (
        f"error: data folder {tmp_path / 'nope'} does not exist: point --data_dir (or $GLUE_DIR) at a GLUE folder")
    assert not runs_dir.exists()  # refused before any run was tried
    (tmp_path / "glue").mkdir()  # exists, but holds no RTE/ folder: every run that starts fails
    failing = run_module("tf_transfer.experiments", "run", "layer_freezing", "--variant=cpu", "--tasks=rte",
                         f"--data_dir={tmp_path / 'glue'}", f"--runs_dir={runs_dir}")
    assert failing.returncode == 1, failing.stderr[-2000:]
    assert "5 failed" in failing.stdout  # the line search's 5 runs; the sweep waits for it
    assert failing.stderr.strip().splitlines()[-1].startswith("error: 5 runs failed")
    errors = list(runs_dir.glob("layer_freezing/rte/*/seed*/error.json"))
    assert len(errors) == 5 and "has no RTE/ folder" in errors[0].read_text()
    # A report needs completed runs: none (or no runs folder at all) is refused, and nothing is written.
    out = tmp_path / "report"
    for folder, message in ((runs_dir, "error: no completed run of layer_freezing (--variant=cpu) under"),
                            (tmp_path / "typo", "error: runs folder")):
        refused = run_module("tf_transfer.experiments", "report", "layer_freezing", "--variant=cpu",
                             f"--runs_dir={folder}", f"--out={out}")
        assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].startswith(message)
    assert not out.exists()


def _fake_study(tmp_path):
    from tf_transfer.studies.grid import Study, Variant

    flagfile = tmp_path / "fake.flags"
    flagfile.write_text("--preset=all_minilm_l6_v2_en\n--batch_size=8\n--max_epochs=2\n")
    return Study(name="fake", paper="a test", flagfile=str(flagfile),
                 axes={"task": ["rte", "mrpc"], "trainable_layers": [1, "all"], "lr": [1e-3], "seed": [0]},
                 variants={"paper": Variant()}, report=lambda *a: None)


def _fake_summary(config, folder, score=0.5, slow_second_epoch=False):
    epochs = [{"epoch": e, "epoch_time_s": 1.0, "train_time_s": float(e), "loss": 0.1,
               "cpu_utilization": 0.9 if slow_second_epoch and e == 2 else 1.9,
               "epoch_cpu_s": 1.0, "train_cpu_s": float(e),
               "val": {config.metric_name: score}, "test": {config.metric_name: score}} for e in (1, 2)]
    record.write_json_atomic(os.path.join(folder, "summary.json"), {
        "completed": True, "epochs": epochs, "best_epoch": 2, "metric": config.metric_name, "seed": config.seed,
        "num_layers": 6, "cache_time_s": 0.0, "config": config.to_dict()})


def test_runner_skips_completed_and_records_failures(tmp_path):
    study = _fake_study(tmp_path)
    runs = study.runs()
    calls = []

    def run_one(config, folder):
        calls.append((config.task, config.trainable_layers))
        if config.task == "mrpc" and config.trainable_layers == 1:
            raise RuntimeError("boom")
        _fake_summary(config, folder)

    counts = studies.run_study(study, runs, str(tmp_path / "runs"), run_one, log=lambda line: None)
    assert counts == {"completed": 0, "ran": 3, "failed": 1, "locked": 0, "waiting": 0}
    collected = studies.collect(study, runs, str(tmp_path / "runs"))
    failed = [c for c in collected if c["error"]]
    assert len(failed) == 1 and "boom" in failed[0]["error"]
    calls.clear()
    counts = studies.run_study(study, runs, str(tmp_path / "runs"), run_one, log=lambda line: None)
    assert counts["completed"] == 3 and calls == [("mrpc", 1)]  # only the failed run is tried again


def test_lock_of_a_dead_process_is_taken_over(tmp_path):
    import socket

    folder = tmp_path / "run"
    os.makedirs(folder)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (folder / "lock.json").write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout)}))
    assert studies.acquire_lock(str(folder))
    assert not studies.acquire_lock(str(folder))  # held, by a live process (this one)
    with open(folder / "lock.json") as f:
        assert json.load(f)["pid"] == os.getpid()
    studies.release_lock(str(folder))
    assert not (folder / "lock.json").exists()
    (folder / "lock.json").write_text(json.dumps({"host": "another-machine", "pid": 1}))
    assert not studies.acquire_lock(str(folder))  # a lock held elsewhere is respected


PARALLEL = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {repo!r})
    from tf_transfer.studies import grid as studies
    from tf_transfer.training import record
    from tf_transfer.studies.grid import Study, Variant
    study = Study(name="fake", paper="", flagfile={flagfile!r},
                  axes={{"task": ["rte", "mrpc", "stsb", "cola"], "trainable_layers": [1, 2, 3], "lr": [1e-3],
                         "seed": [0]}}, variants={{"paper": Variant()}}, report=None)
    def run_one(config, folder):
        with open({log!r}, "a") as f:
            f.write(folder + "\\n")
        time.sleep(0.2)
        record.write_json_atomic(os.path.join(folder, "summary.json"), {{"completed": True}})
    studies.run_study(study, study.runs(), {runs!r}, run_one, log=lambda line: None)
""")


def test_two_runner_processes_never_run_the_same_run(tmp_path):
    flagfile = tmp_path / "fake.flags"
    flagfile.write_text("--preset=all_minilm_l6_v2_en\n--batch_size=8\n")
    log = tmp_path / "ran.log"
    script = PARALLEL.format(repo=REPO, flagfile=str(flagfile), log=str(log), runs=str(tmp_path / "runs"))
    processes = [subprocess.Popen([sys.executable, "-c", script]) for _ in range(2)]
    assert all(p.wait(timeout=120) == 0 for p in processes)
    ran = log.read_text().splitlines()
    assert len(ran) == 12 and len(set(ran)) == 12


def test_report_shows_missing_runs(tmp_path):
    study = load_study("transfer_learning")
    runs = [r for r in study.runs("cpu") if r["task"] == "rte" and r["part"] == "main"]
    runs_dir = str(tmp_path / "runs")
    slow_runs = 0
    for settings in runs:
        if settings["seed"] == 0 and settings["trainable_layers"] in (2, "all"):
            from tf_transfer.studies.glue_config import RunConfig

            config = RunConfig(**{k: v for k, v in settings.items() if k != "part"})
            folder = studies.run_dir(runs_dir, study, settings)
            os.makedirs(folder, exist_ok=True)
            fine_tuned = settings["trainable_layers"] == "all"
            slow_runs += fine_tuned
            _fake_summary(config, folder, score=0.6 if fine_tuned else 0.55, slow_second_epoch=fine_tuned)
    collected = studies.collect(study, runs, runs_dir)
    out = tmp_path / "report"
    study.report(collected, str(out), study, "cpu")
    text = (out / "README.md").read_text()
    assert "4 of 20 runs completed" in text
    assert "missing" in text and "(1/2)" in text
    assert "## Runs not completed" in text and "not run" in text
    assert "-0.050" in text  # last 2 @ lr vs fine-tune @ 2e-5: 0.55 - 0.60
    assert (out / "curves_rte.png").stat().st_size > 0
    assert (out / "epochs.csv").read_text().count("\n") == 1 + 4 * 2
    assert "## Epoch times to read with care" in text and f"{slow_runs} of 8 epochs ran below 75%" in text
    assert "How this differs from the paper" in text


def test_report_clocks_charge_the_cache_build_to_every_run_that_used_it():
    from tf_transfer.reporting import tables as reports

    epochs = [{"epoch": 1, "epoch_time_s": 10.0, "train_time_s": 10.0, "epoch_cpu_s": 6.0, "train_cpu_s": 6.0},
              {"epoch": 2, "epoch_time_s": 10.0, "train_time_s": 20.0, "epoch_cpu_s": 6.0, "train_cpu_s": 12.0}]
    # This run reused caches another run built (cache_time_s 0): it is still charged what they cost.
    reused = {"epochs": epochs, "cache_time_s": 0.0, "cache_build_s": 5.0, "cache_build_cpu_s": 4.0}
    assert reports.time_to_stop(reused) == 25.0
    assert reports.time_to_stop(reused, "cpu") == 16.0
    assert reports.elapsed(reused, epochs[0], "cpu") == 10.0
    # Summaries from before build costs were recorded fall back to what the run itself spent.
    assert reports.time_to_stop({"epochs": epochs, "cache_time_s": 3.0}) == 23.0
    assert reports.elapsed({"epochs": epochs}, {"train_time_s": 1.0}, "cpu") is None
    with pytest.raises(ValueError):
        reports.elapsed(reused, epochs[0], "gpu")


def test_report_lists_machines_and_warns_when_they_differ():
    from tf_transfer.reporting import tables as reports

    amx = {"cpu": "Xeon", "cores": 1, "isa": ["avx2", "amx_bf16"]}
    avx2 = {"cpu": "EPYC", "cores": 2, "isa": ["avx2"]}
    one = [{"summary": {"machine": amx, "resumes": []}}, {"summary": None}]
    assert "More than one kind" not in "\n".join(reports.machines_section(one))
    assert "Xeon; 1 core(s); avx2, amx_bf16: 1" in "\n".join(reports.machines_section(one))
    resumed_elsewhere = [{"summary": {"machine": amx, "resumes": [{"machine": avx2}]}}]
    assert "More than one kind" in "\n".join(reports.machines_section(resumed_elsewhere))
