"""`--distribution=multi_worker` for every study: two worker processes on loopback ports give the default strategy's
numbers for the GLUE trainer (with AutoFreeze: the same blocks frozen at the same steps, with one device's loss and
scores), stack, sentiment BERT (frozen) and multitask, only the chief writes the output folders (the others'
temporary folders are removed), and both workers killed mid-run resume where the chief's record stopped.

One pair of worker processes runs all four in turn (tests/training/multi_worker_worker.py, through the
functions the commands call), so that TensorFlow's import and the cluster's start-up are paid once. The first pair
is killed once the chief has recorded the stack run's first epoch (the GLUE trainer's AutoFreeze run finished before
it); the second pair finds that run completed (the chief decides and tells the other) and the stack run in its
phase 2, then runs the rest. The GLUE trainer runs here with AutoFreeze only: that run builds the plain trainer's
model, feed and optimizer (clipped after the workers' sum), trains it on tokens, then caches its frozen prefix and
trains the suffix over the cache, and scores both; the plain trainer under a strategy is the mirrored tests' (a
plain GLUE run here as well took 37 s of the first pair's time, 2026-11-26, both workers and the test process on one
core). The one-device runs they are compared with are
the mirrored tests' (tests/study_runs.py: the same settings, trained once per test process, which runs these tests
in one xdist group); run alone, this test trains them while the workers run. The commands' own multi-worker lines
(sentiment's report only on the chief, an unreachable peer) are checked in this process below.
"""

import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import REPO, quora_rows, run_module
from study_runs import GROUP, from_study_tests
from test_multi_worker import _free_ports

WORKER = os.path.join(REPO, "tests", "training", "multi_worker_worker.py")
# In the order the workers train them (the first pair is killed in the stack run).
STUDIES = ("autofreeze", "stack", "sentiment_frozen", "multitask")


def _start(tmp_path, cluster, tag):
    workers = []
    for index in range(2):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmp_path / "tmp"),
               "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})}
        env.pop("GLUE_DIR", None)
        log = open(tmp_path / f"{tag}{index}.log", "w")
        workers.append(subprocess.Popen([sys.executable, WORKER, str(tmp_path / "specs.json"),
                                         str(tmp_path / f"w{index}")], cwd=REPO, env=env, stdout=log,
                                        stderr=subprocess.STDOUT))
    return workers


def _epochs(path) -> int:
    try:
        return len(json.loads(path.read_text()).get("epochs", []))
    except (OSError, ValueError):
        return 0


def _kill_after_first_stack_epoch(workers, summary_path, timeout_s=240):
    """Kills both workers as soon as the chief has recorded the stack run's first epoch (or one has exited)."""
    deadline = time.monotonic() + timeout_s
    while (_epochs(summary_path) < 1 and time.monotonic() < deadline
           and all(w.poll() is None for w in workers)):
        time.sleep(0.02)
    for worker in workers:
        worker.kill()
        worker.wait()


def _worker_dirs(tmp_path):
    return set(glob.glob(str(tmp_path / "tmp" / "tf_transfer-worker*")))


def _same_losses(reference: list, distributed: list) -> None:
    assert len(distributed) == len(reference) > 0
    for one, two in zip(reference, distributed):
        assert two["loss"] == pytest.approx(one["loss"], rel=1e-4)


@pytest.mark.xdist_group(GROUP)
@pytest.mark.filterwarnings("ignore:Gradients do not exist for variables")
def test_every_study_on_two_workers_matches_default_writes_only_on_the_chief_and_resumes_after_a_kill(
        tmp_path, one_device_runs):
    (tmp_path / "specs.json").write_text(json.dumps({study: one_device_runs.specs[study] for study in STUDIES}))
    (tmp_path / "tmp").mkdir()
    cluster = {"worker": [f"127.0.0.1:{port}" for port in _free_ports(2)]}
    out = tmp_path / "w0"

    first = _start(tmp_path, cluster, "first")
    watcher = threading.Thread(target=_kill_after_first_stack_epoch, args=(first, out / "stack" / "summary.json"))
    watcher.start()
    # The mirrored tests have trained these in this test process already; alone, this test trains them meanwhile.
    reference = {study: one_device_runs.run(study) for study in STUDIES}
    watcher.join()
    assert all(w.returncode == -signal.SIGKILL for w in first), (tmp_path / "first0.log").read_text()[-3000:]
    autofreeze_done = json.loads((out / "autofreeze" / "summary.json").read_text())
    stack_killed = json.loads((out / "stack" / "summary.json").read_text())
    assert autofreeze_done["completed"] is True
    assert not stack_killed["completed"] and len(stack_killed["epochs"]) == 1
    left_by_kill = _worker_dirs(tmp_path)

    second = _start(tmp_path, cluster, "second")
    codes = [w.wait(timeout=240) for w in second]
    assert codes == [0, 0], [(tmp_path / f"second{i}.log").read_text()[-3000:] for i in range(2)]

    # The GLUE trainer with AutoFreeze: completed before the kill, so the second pair trains nothing and leaves the
    # record as it was. Every worker's gradient sums are all-reduced, so both freeze what one device freezes, when it
    # does, from the same statistics, and record its epoch loss (the suffix trained after the freeze included).
    summary = json.loads((out / "autofreeze" / "summary.json").read_text())
    assert summary == autofreeze_done and "resumes" not in summary
    from_study_tests("test_adaptive", "same_freezing")(reference["autofreeze"], summary)
    assert summary["epochs"][0]["test"] == pytest.approx(reference["autofreeze"]["epochs"][0]["test"], rel=1e-4)
    assert summary["best_epoch"] == reference["autofreeze"]["best_epoch"]
    written = os.listdir(out / "autofreeze")
    assert any(f.startswith("events.out.tfevents") for f in written)
    assert not [f for f in written if f.startswith("checkpoint")]

    # Stack: resumed in phase 2 from the chief's checkpoint on both workers.
    summary = json.loads((out / "stack" / "summary.json").read_text())
    assert summary["completed"] is True and [r["after_epoch"] for r in summary["resumes"]] == [1]
    assert summary["epochs"][0] == stack_killed["epochs"][0]  # kept as it was
    assert [e["phase"] for e in summary["epochs"]] == [1, 2]
    _same_losses(reference["stack"]["epochs"], summary["epochs"])
    assert [e["val"] for e in summary["epochs"]] == [e["val"] for e in reference["stack"]["epochs"]]
    assert not [f for f in os.listdir(out / "stack") if f.startswith("checkpoint")]

    # Sentiment BERT, frozen: the features of every text, then the head on each worker's shares of those arrays (top2's
    # token feed and warm-up are GLUE's; it is tested mirrored).
    results = json.loads((out / "sentiment_frozen" / "bert_frozen_cls.json").read_text())
    assert results["completed"] is True
    (run,), (one,) = results["runs"], reference["sentiment_frozen"]["runs"]
    assert run["distribution"] == "multi_worker"
    _same_losses(one["epochs"], run["epochs"])
    assert (run["accuracy"], run["f1"]) == (one["accuracy"], one["f1"])
    assert not [f for f in os.listdir(out / "sentiment_frozen") if f.endswith(".in_progress")]  # seed folders dropped

    # Multitask: every worker reads the whole step, each replica trains its slice of every task's batch.
    summary = json.loads((out / "multitask" / "summary.json").read_text())
    assert summary["completed"] is True
    _same_losses(reference["multitask"]["epochs"], summary["epochs"])
    for a, b in zip(reference["multitask"]["epochs"], summary["epochs"]):
        assert b["task_loss"] == pytest.approx(a["task_loss"], rel=1e-4)
        assert b["test"] == pytest.approx(a["test"], abs=1e-3)  # Pearson on 12 dev pairs moves most
    assert "best.weights.h5" in os.listdir(out / "multitask")

    # Only the chief wrote; the other worker's temporary folders are removed (a killed worker's cannot be).
    assert not (tmp_path / "w1").exists()
    assert _worker_dirs(tmp_path) == left_by_kill


@pytest.mark.parametrize("module, flags", [
    ("tf_transfer.glue", ["--task=mrpc", "--data_dir={glue}"]),
    ("tf_transfer.stack", ["--task=quora", "--head=linear", "--data={quora}"]),
    ("tf_transfer.multitask", ["--data_dir={quora}"]),
    ("tf_transfer.sentiment", ["--approach=bert", "--data={kaggle}"]),
])
def test_unreachable_peer_is_one_error_line_within_the_timeout(tmp_path, tiny_preset, glue_dir, module, flags):
    """In this process, every command: the peers are waited for before TensorFlow joins a cluster, so nothing is
    left behind (a process of its own would add only TensorFlow's import, about 8 CPU seconds). A timeout of 0.2 s:
    the wait is all this test's time, and an absent peer on loopback is refused at once, so a shorter wait shows
    the same line (the loop polls every 0.1 s, so it still knocks more than once)."""
    from tf_transfer.core import strategies

    data = {"quora": tmp_path / "quora-dev.csv", "glue": glue_dir,
            "kaggle": from_study_tests("test_sentiment", "write_kaggle_csv")(tmp_path / "train.csv", rows_per_class=10)}
    data["quora"].write_text(quora_rows(24, empty_label=False), encoding="utf-8")
    own, absent = _free_ports(2)
    env = {strategies.TIMEOUT_ENV: "0.2",
           "TF_CONFIG": json.dumps({"cluster": {"worker": [f"127.0.0.1:{own}", f"127.0.0.1:{absent}"]},
                                    "task": {"type": "worker", "index": 0}})}
    start = time.monotonic()
    done = run_module(module, *[f.format(**data) for f in flags], f"--preset={tiny_preset}",
                      "--distribution=multi_worker", f"--output_dir={tmp_path / 'out'}", env=env)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: --distribution=multi_worker: worker 0 could not reach "
                                f"127.0.0.1:{absent} within 0.2 s"), done.stderr[-3000:]
    assert [line for line in lines if line.startswith("error:")] == [lines[-1]]
    assert time.monotonic() - start < 30
    assert not (tmp_path / "out").exists()


def test_sentiment_report_is_left_to_the_chief(tmp_path, monkeypatch):
    """The command on a worker other than the chief writes no report (its --output_dir does not exist) and says
    where it is."""
    from tf_transfer.core import strategies
    from tf_transfer.studies.sentiment import sentiment_bert

    calls = []
    monkeypatch.setattr(strategies, "chief_by_tf_config", lambda: False)
    monkeypatch.setattr(sentiment_bert, "run_bert", lambda *args, **kwargs: calls.append(args) or
                        {"model": "top2", "pooling": "cls", "runs": [], "accuracy_mean": 0.5, "f1_mean": 0.5})
    data = from_study_tests("test_sentiment", "write_kaggle_csv")(tmp_path / "train.csv", rows_per_class=10)
    done = run_module("tf_transfer.sentiment", "--approach=bert", f"--data={data}", "--distribution=multi_worker",
                      f"--output_dir={tmp_path / 'out'}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(calls) == 1
    assert "report: written by the chief worker" in done.stdout
    assert not (tmp_path / "out").exists()
