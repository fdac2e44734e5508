"""`--distribution=multi_worker` for the other studies: two worker processes on loopback ports give the default
strategy's per-epoch losses, and only the chief writes `--output_dir` (the others' temporary folders are removed).

The pattern (free ports, `TF_CONFIG`, one reference run in this process meanwhile) is tests/training/
test_multi_worker.py's, whose GLUE test also covers resuming after a kill and an unreachable peer.
"""

import glob
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO, quora_rows

from test_multi_worker import _free_ports


def _start(module, flags, tmp_path, tag):
    """Two workers of `python -m module flags --output_dir=tmp_path/<tag>w<index>` (or with `module` None,
    `python -c flags[0] tmp_path/<tag>w<index>`); returns the processes."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in _free_ports(2)]}
    workers = []
    for index in range(2):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmp_path / "tmp"),
               "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})}
        log = open(tmp_path / f"{tag}{index}.log", "w")
        output_dir = tmp_path / f"{tag}w{index}"
        command = ([sys.executable, "-m", module, *flags, "--distribution=multi_worker", f"--output_dir={output_dir}"]
                   if module else [sys.executable, "-c", *flags, str(output_dir)])
        workers.append(subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT))
    return workers


def _wait(workers, tmp_path, tag, timeout=240):
    deadline = time.monotonic() + timeout
    codes = [w.wait(timeout=max(1.0, deadline - time.monotonic())) for w in workers]
    assert codes == [0, 0], [(tmp_path / f"{tag}{i}.log").read_text()[-3000:] for i in range(2)]


def _worker_dirs(tmp_path):
    return glob.glob(str(tmp_path / "tmp" / "tf_transfer-worker*"))


def _same_losses(reference: list, distributed: list) -> None:
    assert len(distributed) == len(reference) > 0
    for one, two in zip(reference, distributed):
        assert two["loss"] == pytest.approx(one["loss"], rel=1e-4)


# --- stack --------------------------------------------------------------------------------------------------------


STACK = dict(task="quora", head="linear", strategy="stack_and_finetune", phase1_epochs=1, max_epochs=2, max_gap=1.0,
             batch_size=8, head_units=8, max_seq_length=16, dropout=0.0, seed=0)


@pytest.mark.filterwarnings("ignore:Gradients do not exist for variables")
def test_stack_on_two_workers_matches_default_and_writes_only_on_the_chief(tmp_path, tiny_preset):
    from tf_transfer.studies import stack
    from tf_transfer.studies.stack_config import StackConfig

    data = tmp_path / "quora-dev.csv"
    data.write_text(quora_rows(24, empty_label=False), encoding="utf-8")
    flags = [f"--{key}={value}" for key, value in STACK.items()] + [f"--preset={tiny_preset}", f"--data={data}"]
    workers = _start("tf_transfer.stack", flags, tmp_path, "stack")
    reference = stack.run_stack(StackConfig(**STACK, preset=tiny_preset, data=str(data)), str(tmp_path / "default"))
    _wait(workers, tmp_path, "stack")

    summary = json.loads((tmp_path / "stackw0" / "summary.json").read_text())
    assert summary["completed"] is True and [e["phase"] for e in summary["epochs"]] == [1, 2]
    _same_losses(reference["epochs"], summary["epochs"])
    assert [e["val"] for e in summary["epochs"]] == [e["val"] for e in reference["epochs"]]
    assert not (tmp_path / "stackw1").exists()
    assert not [f for f in os.listdir(tmp_path / "stackw0") if f.startswith("checkpoint")]
    assert _worker_dirs(tmp_path) == []


@pytest.mark.filterwarnings("ignore:Gradients do not exist for variables")
def test_stack_on_two_workers_resumes_after_both_are_killed(tmp_path, tiny_preset):
    """Both workers killed once the chief has recorded phase 1's epoch, then rerun: phase 2 follows with the
    chief's checkpoint on every worker, to the default strategy's numbers."""
    from tf_transfer.studies import stack
    from tf_transfer.studies.stack_config import StackConfig

    data = tmp_path / "quora-dev.csv"
    data.write_text(quora_rows(24, empty_label=False), encoding="utf-8")
    flags = [f"--{key}={value}" for key, value in STACK.items()] + [f"--preset={tiny_preset}", f"--data={data}"]
    summary_path = tmp_path / "stackw0" / "summary.json"
    first = _start("tf_transfer.stack", flags, tmp_path, "stack")
    reference = stack.run_stack(StackConfig(**STACK, preset=tiny_preset, data=str(data)), str(tmp_path / "default"))
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert all(w.poll() is None for w in first), (tmp_path / "stack0.log").read_text()[-3000:]
        try:
            if len(json.loads(summary_path.read_text())["epochs"]) >= 1:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.02)
    for worker in first:
        worker.kill()
        worker.wait()
    killed = json.loads(summary_path.read_text())
    assert not killed["completed"] and len(killed["epochs"]) == 1
    left_by_kill = _worker_dirs(tmp_path)

    _wait(_start("tf_transfer.stack", flags, tmp_path, "stack"), tmp_path, "stack")
    summary = json.loads(summary_path.read_text())
    assert summary["completed"] is True and [r["after_epoch"] for r in summary["resumes"]] == [1]
    assert [e["phase"] for e in summary["epochs"]] == [1, 2]
    _same_losses(reference["epochs"], summary["epochs"])
    assert not (tmp_path / "stackw1").exists()
    assert _worker_dirs(tmp_path) == left_by_kill


@pytest.mark.parametrize("module, flags", [
    ("tf_transfer.stack", ["--task=quora", "--head=linear", "--data={data}"]),
    ("tf_transfer.multitask", ["--data_dir={data}"]),
])
def test_unreachable_peer_is_one_error_line_within_the_timeout(tmp_path, tiny_preset, module, flags):
    from tf_transfer.core import strategies

    data = tmp_path / "quora-dev.csv"
    data.write_text(quora_rows(24, empty_label=False), encoding="utf-8")
    own, absent = _free_ports(2)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", strategies.TIMEOUT_ENV: "2",
           "TF_CONFIG": json.dumps({"cluster": {"worker": [f"127.0.0.1:{own}", f"127.0.0.1:{absent}"]},
                                    "task": {"type": "worker", "index": 0}})}
    command = [sys.executable, "-m", module, *[f.format(data=data) for f in flags], f"--preset={tiny_preset}",
               "--distribution=multi_worker", f"--output_dir={tmp_path / 'out'}"]
    start = time.monotonic()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: --distribution=multi_worker: worker 0 could not reach "
                                f"127.0.0.1:{absent} within 2 s"), done.stderr[-3000:]
    assert [line for line in lines if line.startswith("error:")] == [lines[-1]]
    assert time.monotonic() - start < 30
    assert not (tmp_path / "out").exists()


# --- sentiment --approach=bert --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def still_preset(tmp_path_factory):
    """The tiny preset without dropout (the sentiment study has no dropout setting): nothing random after
    initialisation, so that two workers can give one device's numbers."""
    import keras_hub

    from conftest import make_tiny_backbone, make_tiny_tokenizer

    tiny = make_tiny_backbone()
    still = keras_hub.models.BertBackbone(**{**tiny.get_config(), "dropout": 0.0})
    still.set_weights(tiny.get_weights())
    folder = str(tmp_path_factory.mktemp("still_preset"))
    still.save_to_preset(folder)
    make_tiny_tokenizer().save_to_preset(folder)
    return folder


def _kaggle_csv(path, rows_per_class):
    sys.path.insert(0, os.path.join(REPO, "tests", "studies"))
    try:
        from test_sentiment import write_kaggle_csv
    finally:
        sys.path.pop(0)
    return write_kaggle_csv(path, rows_per_class=rows_per_class)


@pytest.mark.parametrize("mode", ["top2", "frozen"])
def test_sentiment_bert_on_two_workers_matches_default_and_writes_only_on_the_chief(tmp_path, still_preset, mode):
    from tf_transfer.data import labelled_texts
    from tf_transfer.studies import sentiment as study
    from tf_transfer.studies import sentiment_bert

    # 16 training texts in batches of 4: every replica's share is 2 (equal shares: Keras averages the replicas'
    # mean losses, which is the batch's mean only then).
    data = _kaggle_csv(tmp_path / "train.csv", rows_per_class=10)
    settings = study.BertSettings(preset=still_preset, mode=mode, runs=1, epochs=2, batch_size=4, max_seq_length=16)
    # The study's function, not `python -m tf_transfer.sentiment`: that command's report (write_report) after
    # training reads --output_dir, which a non-chief worker does not have.
    script = ("import dataclasses, sys\n"
              "from tf_transfer.data import labelled_texts\n"
              "from tf_transfer.studies import sentiment as study, sentiment_bert\n"
              f"settings = dataclasses.replace(study.{settings!r}, distribution='multi_worker')\n"
              f"sentiment_bert.run_bert(labelled_texts.read_labelled_texts({data!r}), sys.argv[1], settings)\n")
    workers = _start(None, [script], tmp_path, "hart")
    reference = sentiment_bert.run_bert(labelled_texts.read_labelled_texts(data), str(tmp_path / "default"),
                                        settings)
    _wait(workers, tmp_path, "hart")

    name = settings.file_name
    results = json.loads((tmp_path / "hartw0" / name).read_text())
    assert results["completed"] is True
    (run,), (one,) = results["runs"], reference["runs"]
    assert run["distribution"] == "multi_worker"
    _same_losses(one["epochs"], run["epochs"])
    assert (run["accuracy"], run["f1"]) == (one["accuracy"], one["f1"])
    assert not (tmp_path / "hartw1").exists()
    assert not os.path.exists(tmp_path / "hartw0" / settings.work_name)  # the seed's work folder is dropped
    assert _worker_dirs(tmp_path) == []


# --- multitask ----------------------------------------------------------------------------------------------------


MULTITASK = dict(schedule="summed", pair_head="concat", max_epochs=2, batch_size=5, lr=1e-3, clip_norm=0.5,
                 max_seq_length=16,
                 max_train_examples=7, dropout=0.0, head_dropout=0.0, seed=0)


def test_multitask_on_two_workers_matches_default_and_writes_only_on_the_chief(tmp_path, tiny_preset):
    """Every worker reads the whole step and each replica (numbered across the workers) trains on its slice of
    every task's batch (batches of 5 and 2: uneven slices), as under MirroredStrategy."""
    from tf_transfer.studies import multitask
    from tf_transfer.studies.multitask_settings import MultitaskSettings

    sys.path.insert(0, os.path.join(REPO, "tests", "studies"))
    try:
        from test_multitask import write_cs224n
    finally:
        sys.path.pop(0)
    data_dir = write_cs224n(str(tmp_path / "cs224n"))
    flags = [f"--{key}={value}" for key, value in MULTITASK.items()] + [f"--preset={tiny_preset}",
                                                                        f"--data_dir={data_dir}"]
    workers = _start("tf_transfer.multitask", flags, tmp_path, "multi")
    reference = multitask.run_multitask(MultitaskSettings(**MULTITASK, preset=tiny_preset, data_dir=data_dir),
                                        str(tmp_path / "default"))
    _wait(workers, tmp_path, "multi")

    summary = json.loads((tmp_path / "multiw0" / "summary.json").read_text())
    assert summary["completed"] is True
    _same_losses(reference["epochs"], summary["epochs"])
    for one, two in zip(reference["epochs"], summary["epochs"]):
        assert two["task_loss"] == pytest.approx(one["task_loss"], rel=1e-4)
        assert two["test"] == pytest.approx(one["test"], abs=1e-3)  # Pearson on 12 dev pairs moves most
    assert not (tmp_path / "multiw1").exists()
    assert "best.weights.h5" in os.listdir(tmp_path / "multiw0")
    assert _worker_dirs(tmp_path) == []
