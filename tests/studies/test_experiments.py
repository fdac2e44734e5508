"""Study grids: listing, sharding, resumable and parallel-safe running, failures recorded, reports with gaps."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tf_transfer.training import record
from experiments import load_grid
from tf_transfer.studies import grid as studies
from tf_transfer.core import settings as settings_lib
from tf_transfer.core import stats
from tf_transfer.reporting import claims as claims_model
from tf_transfer.core.errors import TransferError
from tf_transfer.studies.glue.glue_settings import GlueSettings

from conftest import REPO, run_module


def test_transfer_learning_grid_is_the_papers():
    study = load_grid("transfer_learning")
    runs = study.runs("paper")
    assert len(runs) == 8 * 5 * 2 * 2
    assert {r["task"] for r in runs} == {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"}
    assert all(r["batch_size"] == 1 and r["max_epochs"] == 30 and r["patience"] == 2 for r in runs)
    assert {r["lr"] for r in runs} == {1e-3, 2e-5} and {r["trainable_layers"] for r in runs} == {1, 2, 3, 4, "all"}
    assert not any(r.get("cache_frozen") for r in runs)  # the paper's flagfiles keep the computation faithful
    cpu = study.runs("cpu")
    assert all(r["cache_frozen"] == (r["trainable_layers"] != "all") for r in cpu if r["part"] != "uncached")
    assert all(r["cache_frozen"] is False for r in cpu if r["part"] == "uncached")  # freezing alone
    assert [r for r in cpu if r["batch_size"] == 1] and all(r["max_epochs"] == 10 for r in cpu)


def test_layer_freezing_grid_sweeps_half_to_all_frozen():
    study = load_grid("layer_freezing")
    runs = study.runs("paper")  # BERT-base and RoBERTa-base, as the paper: L = 12 each
    assert [r["preset"] for r in runs if r["part"] == "line_search" and r["task"] == "rte"] == (
        ["bert_base_en_uncased"] * 5 + ["roberta_base_en"] * 5)
    for preset in ("bert_base_en_uncased", "roberta_base_en"):
        sweep = [r for r in runs if r["part"] == "sweep" and r["task"] == "rte" and r["seed"] == 0
                 and r["preset"] == preset]
        assert [r["trainable_layers"] for r in sweep] == [6, 5, 4, 3, 2, 1, 0, "all"]
        search = [r for r in runs if r["part"] == "line_search" and r["task"] == "rte" and r["preset"] == preset]
        assert [r["lr"] for r in search] == [1e-5, 2e-5, 3e-5, 4e-5, 5e-5]
    assert all(r["batch_size"] == 16 and r["max_epochs"] == 3 for r in runs)
    # Pointed at another backbone, the sweep follows that backbone's depth (DistilBERT: L = 6).
    other = study.runs("cpu", tasks=["rte"], presets=["distil_bert_base_en_uncased"])
    assert {r["preset"] for r in other} == {"distil_bert_base_en_uncased"}
    assert [r["trainable_layers"] for r in other if r["part"] == "sweep" and r["seed"] == 0] == [3, 2, 1, 0, "all"]


def test_cpu_sweep_takes_the_line_search_winner_once_it_has_finished(tmp_path):
    """The cpu variant caches frozen prefixes; the full model of the line search has none to cache."""

    study = load_grid("layer_freezing")
    runs = [dict(r, cache_dir="cache") if r["cache_frozen"] else r
            for r in study.runs("cpu", tasks=["rte"])]
    runs_dir = str(tmp_path / "runs")
    sweep = [r for r in runs if r["part"] == "sweep"]
    assert sweep and all(studies.resolve(study, r, runs_dir) is None for r in sweep)
    for settings in (r for r in runs if r["part"] == "line_search"):
        config = GlueSettings(**{k: v for k, v in settings.items() if k != "part"})
        folder = studies.run_dir(runs_dir, study, settings)
        os.makedirs(folder)
        _fake_summary(config, folder, score=0.7 if settings["lr"] == 3e-5 else 0.6)
    resolved = [studies.resolve(study, r, runs_dir) for r in sweep]
    assert {r["lr"] for r in resolved} == {3e-5}
    assert {r["trainable_layers"] for r in resolved} == {3, 2, 1, 0, "all"}
    assert all(r["cache_frozen"] == (r["trainable_layers"] != "all") for r in resolved)


def test_one_command_finishes_a_grid_whose_runs_wait_for_its_own_line_search(tmp_path):
    """Runs listed before the runs they wait for (as a shard can meet them) run in a second pass of the same command,
    and the counts say what this command ran."""
    study = load_grid("layer_freezing")
    runs = [dict(r, cache_dir="cache") if r["cache_frozen"] else r for r in study.runs("cpu", tasks=["rte"])]
    search = [r for r in runs if r["part"] == "line_search"]
    trained = []

    def run_one(settings, folder):
        trained.append(settings["part"])
        config = GlueSettings(**{k: v for k, v in settings.items() if k != "part"})
        _fake_summary(config, folder, score=0.7 if settings["lr"] == 3e-5 else 0.6)

    logged = []
    counts = studies.run_until_settled(study, runs[len(search):] + search, str(tmp_path), run_one, logged.append)
    assert counts == {"completed": 0, "ran": len(runs), "failed": 0, "locked": 0, "waiting": 0, "not needed": 0}
    assert trained == ["line_search"] * len(search) + ["sweep"] * (len(runs) - len(search))
    assert any("another pass" in line for line in logged)
    assert studies.run_until_settled(study, runs, str(tmp_path), run_one, logged.append)["completed"] == len(runs)


def test_a_grid_run_that_finds_the_hub_unreachable_marks_it_for_the_runs_after_it(monkeypatch, tmp_path):
    """Each run of a grid trains in a process of its own, whose environment goes with it: offline, every run knocked
    on the hub again and said so (8 lines for a freezing grid of 8 runs). The grid's process now marks the preset a
    run found unreachable, so the runs after it load the installed package at once and say so at --verbosity=1."""
    from tf_transfer.core import isolated
    from tf_transfer.models import backbones
    from tf_transfer.studies import grid_session

    def in_a_process_of_its_own(function, *args):  # what the call sets in its environment is gone when it returns
        before = dict(os.environ)
        try:
            return function(*args)
        finally:
            os.environ.clear()
            os.environ.update(before)

    def from_preset(location, *args):
        asked.append(location)
        if location == "all_minilm_l6_v2_en":
            raise ConnectionError("Failed to resolve 'www.kaggle.com'")
        return object(), "tokenizer"

    asked, said = [], []
    monkeypatch.delenv(backbones.HUB_UNREACHABLE_ENV, raising=False)
    monkeypatch.setattr(isolated, "call", in_a_process_of_its_own)
    monkeypatch.setattr(backbones, "_from_preset", from_preset)
    monkeypatch.setattr(backbones, "offline_folder", lambda preset: str(tmp_path))
    monkeypatch.setattr(backbones.logging, "info", lambda text, *args: said.append(text % args))
    monkeypatch.setattr(grid_session, "_train_run", lambda study, settings, folder:
                        backbones.load_preset(settings["preset"]))
    for _ in range(3):
        grid_session._run_one(grid_session.GridOptions(), None, {"preset": "all_minilm_l6_v2_en"}, str(tmp_path))
    assert asked == ["all_minilm_l6_v2_en"] + [str(tmp_path)] * 3  # the hub asked by the first run alone
    assert len(said) == 1 and "the model hub is unreachable" in said[0]
    assert os.environ[backbones.HUB_UNREACHABLE_ENV] == "all_minilm_l6_v2_en"


def _reviews(folder) -> list:
    """The flags of a user's file of 20 labelled reviews written in `folder`."""
    data = folder / "reviews.csv"
    data.write_text("text,label\n" + "".join(f"review {i},{i % 2}\n" for i in range(20)))
    return [f"--train_file={data}", "--text_columns=text", "--label_column=label"]


@pytest.mark.parametrize("grid, flags, said", [
    ("freezing", ["--presets=all_minilm_l6_v3_en"],
     "preset 'all_minilm_l6_v3_en' is not a keras-hub preset name (did you mean all_minilm_l6_v2_en"),
    ("layer_freezing", ["--variant=cpu", "--tasks=rte", "--presets=bert_bsae_en_uncased"],
     "preset 'bert_bsae_en_uncased' is not a keras-hub preset name (did you mean bert_base_en_uncased"),
    ("freezing", ["--presets=all_minilm_l12_v2_en"],
     "could not load preset 'all_minilm_l12_v2_en' (ConnectionError: no network here)"),
])
def test_a_grid_refuses_a_preset_it_cannot_find_before_any_run(tmp_path, monkeypatch, grid, flags, said):
    """A misspelled name is one line, not a failed run each (a paper grid's) nor "unknown depth ... add it to
    studies.PRESET_DEPTHS" (the freezing grid's, whose blocks are the preset's): a depth the grid's table does not
    hold is read from the config the hub gives, here unreachable."""
    from keras_hub.src.utils import preset_utils

    def unreachable(preset, path):
        raise ConnectionError("no network here")

    monkeypatch.setattr(preset_utils, "get_file", unreachable)
    runs_dir = tmp_path / "runs"
    own = _reviews(tmp_path) if grid == "freezing" else [f"--data_dir={tmp_path}"]
    done = run_module("tf_transfer.experiments", "run", grid, *flags, *own, f"--runs_dir={runs_dir}")
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and said in errors[0], done.stderr[-2000:]
    assert not runs_dir.exists() or not list(runs_dir.rglob("*.json"))


def test_the_freezing_grid_reads_a_hub_presets_depth_from_its_config(tmp_path, monkeypatch, tiny_preset):
    """A keras-hub name the grid's table does not hold: its blocks are read from the `config.json` the hub gives
    (here the tiny preset's, 3 blocks), not refused as an "unknown depth"."""
    from keras_hub.src.utils import preset_utils

    monkeypatch.setattr(preset_utils, "get_file", lambda preset, path: os.path.join(tiny_preset, path))
    done = run_module("tf_transfer.experiments", "run", "freezing", "--presets=all_minilm_l12_v2_en", "--dry_run",
                      *_reviews(tmp_path), f"--runs_dir={tmp_path / 'runs'}")
    assert done.returncode == 0, done.stderr[-2000:]
    depths = {line.split("trainable_layers=")[1].split()[0] for line in done.stdout.splitlines()
              if "trainable_layers=" in line}
    assert depths == {"0", "1", "2", "3", "all"}, done.stdout[-2000:]  # the head alone, each k, everything


def test_shards_partition_the_grid():
    runs = load_grid("transfer_learning").runs("paper")
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
    # 2 backbones x 8 tasks x (5 line-search rates + 8 x 5 seeds)
    assert lines[-1] == "360 runs (720 in the whole grid)"
    assert len(lines) == 361 and "task=" in lines[0] and "trainable_layers=" in lines[0] and "preset=" in lines[0]
    assert not os.listdir(tmp_path)
    bad = run_module("tf_transfer.experiments", "run", "no_such_study")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("error: unknown grid")


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
                         "--noisolate_runs",  # each fails reading its data: no TensorFlow per run needed
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


def test_an_unwritable_runs_folder_is_refused_before_any_run(tmp_path, glue_dir):
    taken = tmp_path / "taken"
    taken.write_text("a file")
    for target, why in ((taken, "is a file, not a folder: choose another"), (taken / "runs", "cannot be written (")):
        refused = run_module("tf_transfer.experiments", "run", "freezing", "--task=sst2", "--lrs=1e-3", "--seeds=0",
                             f"--data_dir={glue_dir}", f"--runs_dir={target}")
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert refused.stderr.strip().splitlines()[-1].startswith(f"error: --runs_dir={target} {why}")


def _fake_study(tmp_path):
    from tf_transfer.studies.grid import Grid, Variant

    flagfile = tmp_path / "fake.flags"
    flagfile.write_text("--preset=all_minilm_l6_v2_en\n--batch_size=8\n--max_epochs=2\n")
    return Grid(name="fake", paper="a test", flagfile=str(flagfile),
                 axes={"task": ["rte", "mrpc"], "trainable_layers": [1, "all"], "lr": [1e-3], "seed": [0]},
                 variants={"paper": Variant()}, report=lambda *a: None)


def _fake_summary(config, folder, score=0.5, slow_second_epoch=False, test=None, seconds=1.0, stopped_early=None,
                  machine=None):
    """A completed run's summary: two epochs of `seconds` each scoring `score` (every metric of the task; `test`
    overrides the test scores), stopped early unless `stopped_early=False`; `machine` as `describe_machine` gives
    it, if given."""
    metrics = config.task_spec.metrics
    epochs = [{"epoch": e, "epoch_time_s": seconds, "train_time_s": seconds * e, "loss": 0.1,
               "cpu_utilization": 0.9 if slow_second_epoch and e == 2 else 1.9,
               "epoch_cpu_s": seconds, "train_cpu_s": seconds * e,
               "val": {m: score for m in metrics}, "test": {m: score if test is None else test for m in metrics}}
              for e in (1, 2)]
    record.write_json_atomic(os.path.join(folder, "summary.json"), {
        "task": config.task, "completed": True, "epochs": epochs, "best_epoch": 2, "metric": config.metric_name,
        "seed": config.seed, "num_layers": 6, "cache_time_s": 0.0, "config": config.to_dict(),
        "stopped_early": stopped_early if stopped_early is not None else config.patience > 0,
        "early_stopping": {"patience": config.patience, "wait": 0}, **({"machine": machine} if machine else {})})


def test_runner_skips_completed_and_records_failures(tmp_path):
    study = _fake_study(tmp_path)
    runs = study.runs()
    calls = []

    def run_one(settings, folder):
        config = GlueSettings.from_dict({k: v for k, v in settings.items() if k != "part"})
        calls.append((config.task, config.trainable_layers))
        if config.task == "mrpc" and config.trainable_layers == 1:
            raise RuntimeError("boom")
        _fake_summary(config, folder)

    counts = studies.run_study(study, runs, str(tmp_path / "runs"), run_one, log=lambda line: None)
    assert counts == {"completed": 0, "ran": 3, "failed": 1, "locked": 0, "waiting": 0, "not needed": 0}
    collected = studies.collect(study, runs, str(tmp_path / "runs"))
    failed = [c for c in collected if c["error"]]
    assert len(failed) == 1 and "boom" in failed[0]["error"]
    calls.clear()
    counts = studies.run_study(study, runs, str(tmp_path / "runs"), run_one, log=lambda line: None)
    assert counts["completed"] == 3 and calls == [("mrpc", 1)]  # only the failed run is tried again


def test_a_truncated_summary_is_named_and_its_run_trained_afresh(tmp_path):
    """A truncated summary.json (a disk that filled up under an older writer, a copy cut short) stops nothing: `run`
    names it, sets it aside and trains that run afresh; `report` names it and lists it as not completed."""
    study, runs_dir = _fake_study(tmp_path), str(tmp_path / "runs")
    runs, trained, lines = study.runs(), [], []

    def run_one(settings, folder):
        trained.append(folder)
        _fake_summary(GlueSettings.from_dict({k: v for k, v in settings.items() if k != "part"}), folder)

    studies.run_study(study, runs, runs_dir, run_one, log=lambda line: None)
    bad_folder = studies.run_dir(runs_dir, study, runs[1])
    bad = os.path.join(bad_folder, "summary.json")
    with open(bad) as f:
        text = f.read()
    with open(bad, "w") as f:
        f.write(text[:len(text) // 2])
    collected = studies.collect(study, runs, runs_dir, log=lines.append)
    assert [c["summary"] is not None for c in collected] == [True, False, True, True]
    assert collected[1]["error"].startswith("unreadable summary.json (JSONDecodeError: ")
    assert len(lines) == 1 and lines[0].startswith(f"{bad} is unreadable (JSONDecodeError: ")
    trained.clear()
    counts = studies.run_study(study, runs, runs_dir, run_one, log=lines.append)
    assert (counts["completed"], counts["ran"], counts["failed"], trained) == (3, 1, 0, [bad_folder])
    assert lines[-2].startswith(f"[2/4] {bad} is unreadable (JSONDecodeError: ")
    assert lines[-2].endswith("set aside as summary.json.corrupt, training the run afresh")
    assert os.path.exists(bad + ".corrupt") and record.read_summary(bad_folder)["completed"]


def test_a_run_whose_checkpoint_is_unreadable_is_trained_afresh_once(tmp_path):
    """An unfinished run whose last checkpoint is cut short is found before it is handed to training; one found by
    training itself (a later epoch's, an ensemble member's) is raised from the run's process. Either way the file
    and the summary that refers to it are set aside and the run trained afresh, once; the grid goes on."""
    study, runs_dir, lines = _fake_study(tmp_path), str(tmp_path / "runs"), []
    runs = [settings for settings in study.runs() if settings["trainable_layers"] == 1]  # rte, mrpc
    for settings in runs:
        folder = studies.run_dir(runs_dir, study, settings)
        os.makedirs(folder)
        open(os.path.join(folder, "checkpoint-epoch1.npz"), "w").close()  # a disk that filled up, a copy cut short
        record.write_json_atomic(os.path.join(folder, "summary.json"), {"completed": False, "epochs": [{"epoch": 1}]})
    attempts = []

    def run_one(settings, folder):
        attempts.append(folder)
        assert not os.path.exists(os.path.join(folder, "checkpoint-epoch1.npz"))  # set aside before training
        if settings["task"] == "mrpc":  # unreadable, found in training
            raise record.UnreadableRecord(os.path.join(folder, "member", "summary.json"), "JSONDecodeError")
        _fake_summary(GlueSettings.from_dict({k: v for k, v in settings.items() if k != "part"}), folder)

    os.makedirs(os.path.join(studies.run_dir(runs_dir, study, runs[1]), "member"))
    open(os.path.join(studies.run_dir(runs_dir, study, runs[1]), "member", "summary.json"), "w").close()
    counts = studies.run_study(study, runs, runs_dir, run_one, log=lines.append)
    rte, mrpc = (studies.run_dir(runs_dir, study, settings) for settings in runs)
    assert (counts["ran"], counts["failed"]) == (1, 1) and attempts == [rte, mrpc, mrpc]
    assert lines[0] == (f"[1/2] {rte}/checkpoint-epoch1.npz is unreadable (BadZipFile: File is not a zip file): its "
                        "record is lost; set aside as checkpoint-epoch1.npz.corrupt, training the run afresh")
    assert sorted(os.listdir(rte)) == ["checkpoint-epoch1.npz.corrupt", "summary.json", "summary.json.corrupt"]
    assert f"[2/2] {mrpc}/member/summary.json is unreadable (JSONDecodeError): set aside" in lines[4]
    assert os.path.exists(os.path.join(mrpc, "member", "summary.json.corrupt"))
    with open(os.path.join(mrpc, "error.json")) as f:  # unreadable again: failed, with the file named
        assert json.load(f)["error"].startswith(f"UnreadableRecord: {mrpc}/member/summary.json is unreadable")


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
    from tf_transfer.studies.grid import Grid, Variant
    study = Grid(name="fake", paper="", flagfile={flagfile!r},
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
    study = load_grid("transfer_learning")
    runs = [r for r in study.runs("cpu") if r["task"] == "rte" and r["part"] == "main"]
    runs_dir = str(tmp_path / "runs")
    slow_runs = 0
    for settings in runs:
        if settings["seed"] == 0 and settings["trainable_layers"] in (2, "all"):
            config = GlueSettings(**{k: v for k, v in settings.items() if k != "part"})
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


# --- Wang's protocol: CoLA on accuracy, censored runs, the uncached arm, the claims table ----------------------

def _write_runs(study, runs, runs_dir, score_of, **fake):
    """Fake completed summaries for `runs` (settings of `study`), scoring `score_of(settings)`."""

    for settings in runs:
        config = GlueSettings(**{k: v for k, v in settings.items() if k != "part"})
        folder = studies.run_dir(runs_dir, study, settings)
        os.makedirs(folder, exist_ok=True)
        _fake_summary(config, folder, score=score_of(settings), **fake)


def test_wang_grid_scores_and_stops_cola_on_accuracy():

    study = load_grid("transfer_learning")
    for variant in ("paper", "cpu"):
        runs = study.runs(variant)
        cola = [r for r in runs if r["task"] == "cola"]
        assert cola and all(r["metric"] == "accuracy" for r in cola)
        assert all(r.get("metric") is None for r in runs if r["task"] != "cola")  # the task's own metric
        config = GlueSettings(**{k: v for k, v in cola[0].items() if k != "part"})
        assert config.metric_name == "accuracy"
    assert GlueSettings(task="cola").metric_name == "mcc"  # the trainer's CoLA default, which other studies use
    assert settings_lib.read_flagfile("flags/wang_cola.flags", GlueSettings) == {"task": "cola", "metric": "accuracy"}


def test_cola_runs_stopped_on_mcc_stand_in_until_rerun(tmp_path):
    study = load_grid("transfer_learning")
    runs = [r for r in study.runs("cpu") if r["task"] == "cola" and r["seed"] == 0 and r["trainable_layers"] in
            (2, "all")]
    runs_dir = str(tmp_path / "runs")
    older = [study.stand_in(r)[0] for r in runs]
    assert all(o["metric"] is None for o in older)
    _write_runs(study, older, runs_dir, lambda s: 0.3)  # the earlier protocol's runs, stopped on MCC
    collected = studies.collect(study, runs, runs_dir)
    assert all(c["summary"]["metric"] == "mcc" and c["stand_in"] for c in collected)
    assert "Matthews" in collected[0]["stand_in"]["reason"]
    out = tmp_path / "report"
    study.report(collected, str(out), study, "cpu")
    text = (out / "README.md").read_text()
    assert "stand-ins, not runs of the current protocol" in text and "## Still to run" in text
    assert "0 of 4 runs completed, and 4 more are stood in for" in text
    assert "--tasks=cola" in text
    # Once the run itself has completed, it is reported, not its stand-in.
    _write_runs(study, runs[:1], runs_dir, lambda s: 0.7)
    first = studies.collect(study, runs, runs_dir)[0]
    assert first["stand_in"] is None and first["summary"]["metric"] == "accuracy"


def test_uncached_arm_is_listed_by_dry_run(tmp_path):
    done = run_module("tf_transfer.experiments", "run", "transfer_learning", "--variant=cpu", "--dry_run",
                      f"--runs_dir={tmp_path}")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    uncached = [line for line in lines if "part=uncached" in line]
    assert len(uncached) == 2 * 4 * 2 * 2  # RTE, MRPC x last 1-4 x both rates x 2 seeds
    assert all("cache_frozen=False" in line for line in uncached)
    assert {line.split()[1] for line in uncached} == {"task=rte", "task=mrpc"}
    assert lines[-1] == "114 runs (114 in the whole grid)"  # 82 + 32
    cached = {line.split(" -> ")[1] for line in lines if "part=main" in line}
    assert not cached & {line.split(" -> ")[1] for line in uncached}  # folders of their own
    assert not os.listdir(tmp_path)


def test_censored_runs_are_the_ones_the_epoch_cap_stopped():
    from tf_transfer.reporting import tables as reports

    def summary(stopped_early, wait, patience=2, completed=True):
        return {"completed": completed, "stopped_early": stopped_early,
                "early_stopping": {"patience": patience, "wait": wait}}

    assert not reports.censored(summary(True, 2))  # patience stopped it
    assert reports.censored(summary(False, 0))  # at the cap, still improving
    assert reports.censored(summary(False, 1))  # at the cap, one epoch into its patience
    assert not reports.censored(summary(False, 2))  # patience ran out at the cap itself
    assert not reports.censored(summary(False, 0, patience=0))  # no early stopping: fixed epochs by design
    assert not reports.censored(summary(False, 0, completed=False))
    assert reports.censored_mark([summary(False, 0), summary(True, 2)]) == " †1/2"
    assert reports.censored_mark([summary(True, 2)]) == ""


def test_transfer_report_marks_censored_runs_and_puts_claims_on_top(tmp_path):
    study = load_grid("transfer_learning")
    runs = [r for r in study.runs("cpu") if r["task"] in ("rte", "mrpc") and r["part"] in ("main", "uncached")]
    runs_dir = str(tmp_path / "runs")
    main = [r for r in runs if r["part"] == "main"]
    full = [r for r in main if r["trainable_layers"] == "all"]
    _write_runs(study, full, runs_dir, lambda s: 0.70, seconds=10.0, stopped_early=False)  # all hit the cap
    _write_runs(study, [r for r in main if r["trainable_layers"] != "all"], runs_dir,
                lambda s: 0.60 + 0.01 * s["trainable_layers"] + 0.002 * s["seed"], seconds=4.0)
    collected = studies.collect(study, runs, runs_dir)
    out = tmp_path / "report"
    study.report(collected, str(out), study, "cpu")
    lines = (out / "README.md").read_text().splitlines()
    header = [i for i, line in enumerate(lines) if line.startswith("| claim |")]
    assert header and header[0] < 60
    claims = lines[header[0] + 2:lines.index("", header[0])]
    verdicts = {line.split(" | ")[3] for line in claims}
    assert verdicts <= set(claims_model.VERDICTS)
    assert any("freezing alone: not yet run" in line for line in claims)
    assert all("[" in line.split(" | ")[4] for line in claims if line.split(" | ")[3] != stats.NOT_RUN)  # intervals
    text = "\n".join(lines)
    assert "fine-tune (all) @ 2e-05 †2/2" in text and "≥ 60%" in text  # the reference is a lower bound
    assert "mrpc ≥ +60% [" in text  # the same bound on the claim's interval
    assert "## Freezing alone vs freezing plus the cache" in text and "not yet run" in text
    assert "32 runs of part `uncached` (mrpc, rte): not run yet" in text
    rows = (out / "stopping_points.csv").read_text().splitlines()
    assert rows[0].endswith(",censored,stopping_metric")
    assert sum(line.split(",")[2] == "all" and ",True," in line for line in rows) == len(full)


def test_transfer_report_compares_times_only_within_one_machine(tmp_path):
    """The uncached arm ran on another machine than fine-tuning's runs: its time saved is not computed (times of
    two machines are not comparable), the cached arm's still is."""
    study = load_grid("transfer_learning")
    runs = [r for r in study.runs("cpu") if r["task"] == "rte" and r["part"] in ("main", "uncached")]
    runs_dir = str(tmp_path / "runs")
    intel = {"cpu": "Intel", "cores": 1, "isa": ["amx_bf16"]}
    amd = {"cpu": "AMD EPYC", "cores": 1, "isa": ["avx512f"]}
    main = [r for r in runs if r["part"] == "main"]
    _write_runs(study, [r for r in main if r["trainable_layers"] == "all"], runs_dir, lambda s: 0.6, seconds=10.0,
                machine=intel)
    _write_runs(study, [r for r in main if r["trainable_layers"] != "all"], runs_dir, lambda s: 0.6, seconds=4.0,
                machine=intel)
    _write_runs(study, [r for r in runs if r["part"] == "uncached"], runs_dir, lambda s: 0.6, seconds=6.0,
                machine=amd)
    collected = studies.collect(study, runs, runs_dir)
    out = tmp_path / "report"
    study.report(collected, str(out), study, "cpu")
    text = (out / "README.md").read_text()
    section = text[text.index("## Freezing alone vs freezing plus the cache"):]
    row = next(line for line in section.splitlines() if line.startswith("| rte | last 1 @ 0.001 |"))
    cells = row.rstrip(" |").split(" | ")
    assert cells[2] == "60%" and cells[5] == "n/a: other machine"
    assert cells[4] == "4.0" and cells[7] == "n/a: other machine"  # seconds per epoch, also within one machine
    reference = next(line for line in section.splitlines() if line.startswith("| rte | fine-tune (all) @ 2e-05"))
    assert reference.split(" | ")[4] == "10.0"
    per_task = text[text.index("## rte"):text.index("## Freezing alone")]
    uncached = next(line for line in per_task.splitlines() if line.startswith("| last 1 @ 0.001 [uncached] |"))
    assert "n/a: other machine" in uncached
    assert "alone left out (other machine than fine-tuning's runs)" in text
    assert "**More than one kind of machine**" in text


# --- Lee, Tang & Lin's protocol: the full training set, majority baselines, the relative 90% point -----------

def test_validation_fraction_zero_needs_early_stopping_off():

    with pytest.raises(TransferError, match="--patience=0"):
        GlueSettings(task="rte", validation_fraction=0.0)
    config = GlueSettings(task="rte", validation_fraction=0.0, patience=0)
    assert config.validation_fraction == 0 and config.patience == 0
    with pytest.raises(TransferError, match="--validation_fraction"):
        GlueSettings(task="rte", validation_fraction=1.0)
    study = load_grid("layer_freezing")
    for settings in study.runs("cpu"):
        expected = (0.1, 4) if settings["part"] == "line_search" else (0.0, 0)
        assert (settings["validation_fraction"], settings["patience"]) == expected


def test_full_training_set_trains_every_epoch_and_scores_no_validation(tmp_path, glue_dir, one_block_preset):
    """On the one-block preset (the cached arm caches the frozen embeddings): what is checked, the examples, epochs
    and scores of a run on all of train, does not depend on depth."""
    from tf_transfer.studies.glue import glue_task as runner

    for trainable, cache in (("all", False), (1, True)):
        config = GlueSettings(task="rte", preset=one_block_preset, trainable_layers=trainable, lr=1e-3, batch_size=8,
                           max_epochs=3, patience=0, validation_fraction=0.0, data_dir=glue_dir,
                           max_seq_length=32, cache_frozen=cache, cache_dir=str(tmp_path / "cache") if cache else None)
        summary = runner.run_glue(config, str(tmp_path / f"run_{trainable}"))
        assert summary["completed"] and not summary["stopped_early"]
        assert summary["examples"]["train"] == 40 and summary["examples"]["validation"] == 0  # all of train
        assert [e["epoch"] for e in summary["epochs"]] == [1, 2, 3]  # every epoch, nothing stops it
        assert all(e["val"] == {} and set(e["test"]) == {"accuracy"} for e in summary["epochs"])
        assert summary["best_epoch"] is None  # no epoch is chosen: the result is the last epoch's


def test_majority_baseline_and_relative_ninety_percent_point():
    from tf_transfer.reporting.layer_freezing_report import smallest_reaching
    from tf_transfer.reporting import tables as reports

    rte = reports.constant_baseline("rte", [0, 0, 0, 1])
    assert rte["score"] == 0.75 and rte["majority"] == "entailment" and rte["share"] == 0.75
    assert reports.constant_baseline("mrpc", [1, 1, 1, 0])["score"] == pytest.approx(6 / 7)  # all-positive F1
    assert reports.constant_baseline("cola", [1, 1, 0])["score"] == 0.0  # MCC of a constant prediction
    stsb = reports.constant_baseline("stsb", [0.5, 2.0, 4.5])
    assert stsb["score"] == 0.0 and "undefined" in stsb["note"]
    # A full model barely above the majority class (0.75): 90% of its score is reached at once, but only k = 3
    # keeps 90% of its gain over the majority class.
    means = {0: 0.73, 1: 0.74, 2: 0.76, 3: 0.796}
    assert smallest_reaching(means, 0.80) == 0
    assert smallest_reaching(means, 0.80, baseline=0.75) == 3
    assert reports.above_baseline(0.79, 0.75, 0.80) == pytest.approx(0.8)
    assert reports.above_baseline(0.79, 0.80, 0.80) is None  # a full model not above the baseline
    assert smallest_reaching({1: 0.5}, 0.8, baseline=0.0) is None


@pytest.mark.filterwarnings("error::UserWarning")  # matplotlib's: a legend with no labelled line
def test_layer_freezing_report_of_two_backbones_is_one_report_each(tmp_path, glue_dir):
    study = load_grid("layer_freezing")
    presets = ["all_minilm_l6_v2_en", "distil_bert_base_en_uncased"]
    runs = [dict(r, data_dir=glue_dir) for r in study.runs("cpu", tasks=["rte"], presets=presets)]
    runs_dir = str(tmp_path / "runs")
    _write_runs(study, [r for r in runs if r["part"] == "line_search"], runs_dir, lambda s: 0.6)
    sweep = [studies.resolve(study, r, runs_dir) for r in runs if r["part"] == "sweep"]
    _write_runs(study, [s for s in sweep if s["preset"] == presets[0]], runs_dir, lambda s: 0.6)
    out = tmp_path / "report"
    study.report(studies.collect(study, runs, runs_dir), str(out), study, "cpu")
    index = (out / "README.md").read_text()
    assert all(f"- [{p}]({p}/README.md)" in index for p in presets)
    # Each backbone's report holds its own runs only: the first's are all done, the second's sweep is not.
    assert "20 of 20 runs completed" in (out / presets[0] / "README.md").read_text()
    assert "5 of 20 runs completed" in (out / presets[1] / "README.md").read_text()


def test_layer_freezing_report_shows_the_majority_class_and_claims(tmp_path, glue_dir):
    study = load_grid("layer_freezing")
    runs = [dict(r, data_dir=glue_dir) for r in study.runs("cpu", tasks=["rte"])]
    runs_dir = str(tmp_path / "runs")
    _write_runs(study, [r for r in runs if r["part"] == "line_search"], runs_dir,
                lambda s: 0.7 if s["lr"] == 3e-5 else 0.6)
    # The hand-made dev set has 6 examples of each label: the majority class scores 0.5. Above it, the full model
    # (mean 0.62) gains 0.12; k = 2 reaches 90% of the full score (0.56 / 0.62) but keeps only 50% of its gain over
    # the majority class, k = 3 keeps 92% of it.
    over_majority = {0: -0.05, 1: 0.0, 2: 0.05, 3: 0.10, "all": 0.11}
    sweep = [studies.resolve(study, r, runs_dir) for r in runs if r["part"] == "sweep"]
    _write_runs(study, sweep, runs_dir, lambda s: 0.0, test=None)
    for settings in sweep:  # the test scores of the sweep's own runs (the whole training set), seeds 0.01 apart
        config = GlueSettings(**{k: v for k, v in settings.items() if k != "part"})
        _fake_summary(config, studies.run_dir(runs_dir, study, settings), score=0.0,
                      test=0.5 + over_majority[settings["trainable_layers"]] + 0.01 * config.seed)
    collected = studies.collect(study, runs, runs_dir)
    assert not any(c["stand_in"] for c in collected) and all(c["summary"] for c in collected)
    out = tmp_path / "report"
    study.report(collected, str(out), study, "cpu")
    text = (out / "README.md").read_text()
    lines = text.splitlines()
    header = [i for i, line in enumerate(lines) if line.startswith("| claim |")]
    assert header and header[0] < 60
    rte_claim = lines[header[0] + 2]
    assert rte_claim.startswith("| rte: a fourth") and " | inconclusive | " in rte_claim
    assert "BERT and RoBERTa" in rte_claim  # the row says how the setting differs
    assert text.count("| majority class (constant prediction) |") == 2  # the line search's and the sweep's table
    assert "| majority class (constant prediction) | – | – | 0.500 |" in text
    assert "| 4 | 2 | 3e-05 | 0.560 ± 0.010 | -0.060 | 90% | 50% |" in text
    assert ("reaching 90% of the full model's score: 2 (score / full, the paper's definition); relative to the "
            "majority class: 3.") in text
    assert (out / "majority.csv").read_text().splitlines()[1].startswith("rte,accuracy,0.5,12,")
    # Without the GLUE data, the baseline of the previous report is reused, and the report says so.
    study.report([dict(c, settings=dict(c["settings"], data_dir=None)) for c in collected], str(out), study, "cpu")
    assert "| majority class (constant prediction) | – | – | 0.500 |" in (out / "README.md").read_text()


# --- the stack, multitask and sentiment grids --------------------------------------------------------------------


@pytest.mark.parametrize("study, flags, count, first_folder", [
    ("stack_quora", [], 18, "linear_stack_and_finetune"),
    ("multitask", [], 9, "li_heads_first"),
    ("sentiment", [], 4, ""),
])
def test_grids_of_the_other_studies_are_listed_where_their_reports_read_them(tmp_path, study, flags, count,
                                                                            first_folder):
    done = run_module("tf_transfer.experiments", "run", study, "--variant=cpu", f"--runs_dir={tmp_path}",
                      "--dry_run", *flags)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == f"{count} runs ({count} in the whole grid)"
    assert lines[0].endswith(f"-> {os.path.join(str(tmp_path), first_folder) if first_folder else str(tmp_path)}")
    assert all("preset=all_minilm_l6_v2_en" in line for line in lines[:-1])


def test_stack_grid_places_the_papers_comparison_by_model_and_seed():
    grid = load_grid("stack_quora")
    folders = [studies.run_dir("r", grid, run) for run in grid.runs("cpu") if run["part"].startswith("paper")]
    assert folders[:3] == [f"r/paper/sim_transformer_stack_and_finetune/seed{s}" for s in (0, 1, 2)]
    assert "r/paper/mlp_finetune_only/seed2" in folders and len(folders) == 9
    # The grid's settings are the stack command's: the baseline is fine-tune-only, as its flagfile says.
    mlp = next(run for run in grid.runs("cpu") if run["head"] == "mlp")
    from tf_transfer.studies.stack.stack_settings import StackSettings

    settings = StackSettings.from_dict({**{k: v for k, v in mlp.items() if k != "part"}, "data": "x.csv"})
    assert (settings.stack_strategy, settings.max_train_examples, settings.precision) == (
        "finetune_only", 4000, "mixed_bfloat16")


def test_multitask_row_that_starts_from_another_waits_for_it(tmp_path):
    grid = load_grid("multitask")
    runs = {run["part"]: run for run in grid.runs("cpu")}
    then = runs["li_heads_then_finetune"]
    assert then["init_from"] == "<li_heads_first>"
    assert studies.resolve(grid, then, str(tmp_path)) is None  # li_heads_first has not run
    record.write_json_atomic(str(tmp_path / "li_heads_first" / "summary.json"), {"completed": True})
    assert studies.resolve(grid, then, str(tmp_path))["init_from"] == str(tmp_path / "li_heads_first")
    assert runs["li_heads_first"]["trainable_layers"] == "0" and runs["li_heads_first"]["lr"] == 1e-3


def test_sentiment_grid_runs_its_sparse_step_and_writes_the_report(tmp_path):
    """The grid's sparse step trains as `sentiment --flagfile=flags/hart_sparse.flags` does, is found completed
    afterwards, and leaves the report the sentiment command writes."""
    from test_sentiment import write_kaggle_csv

    data = write_kaggle_csv(tmp_path / "train.csv", rows_per_class=12)
    grid = load_grid("sentiment")
    sparse = [run for run in grid.runs("paper") if run["part"] == "sparse"]
    assert len(sparse) == 1 and sparse[0]["folds"] == 10  # the flagfile's
    sparse = [{**sparse[0], "data": str(data), "folds": 3}]  # the check below needs folds, not ten of them
    out = str(tmp_path / "hart")
    assert studies.run_study(grid, sparse, out, log=lambda line: None)["ran"] == 1
    for name in ("sparse_baselines.json", "sparse_baselines.md", "report.md"):
        assert os.path.exists(os.path.join(out, name)), name
    with open(os.path.join(out, "sparse_baselines.json")) as f:
        assert [fold["fold"] for fold in json.load(f)["tfidf"]["folds"]] == [1, 2, 3]
    assert studies.run_study(grid, sparse, out, log=lambda line: None)["completed"] == 1
