"""One sweep over many processes (standing in for machines) on a real PostgreSQL server started on loopback
(tests/postgres.py): one queue, one record, one report; a trial whose process dies is retried once and completes; a
resumed trial is pruned at the rung an unbroken one is; a storage that cannot be used is one error line, one that
restarts is waited for.

The runs are made up (tests/sweep_fakes.py), so that the faults are cheap to inject, except in the command's own
tests: two processes on one sweep, and a trainer child killed (tests/sweep_children.py).
"""

import os
import signal
import subprocess
import sys
import time

import pytest

import sweep_fakes
from conftest import REPO, run_module
from tf_transfer.core import stats
from tf_transfer.core.errors import TransferError
from tf_transfer.studies.sweep import sweep_search as sweep, sweep_storage

pytestmark = pytest.mark.xdist_group("postgres")  # one server for all of them, in one test process


# The made-up epoch of a sweep in this test's process alone: its trials run one after another, in an order that
# does not depend on how long an epoch takes (sweep_fakes.EPOCH_S, a quarter second, lets two processes overlap).
FAST_EPOCH_S = 0.02


def _process(url: str, name: str, runs_dir, budget_s: float = 600.0, env=None) -> subprocess.Popen:
    """A made-up sweep's process (`sweep_fakes.main`) started apart."""
    return _started("tests/sweep_fakes.py", url, name, str(runs_dir), str(budget_s), env=env)


def _started(script: str, *args: str, env=None) -> subprocess.Popen:
    path = os.pathsep.join([REPO, os.path.join(REPO, "tests"), os.environ.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, os.path.join(REPO, script), *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {}), "PYTHONPATH": path})


def _runs(study) -> dict:
    """`{(candidate, seed): [state of each trial that ran it]}`: trials that trained (not the copies skipped), the
    reference's as `(candidate, "reference")`."""
    found = {}
    for trial in study.get_trials(deepcopy=False):
        if "candidate" in trial.params and not trial.user_attrs.get("deferred"):
            seed = "reference" if trial.user_attrs.get("reference") else trial.params["seed"]
            found.setdefault((trial.params["candidate"], seed), []).append(trial.state.name)
    return found


def _reviews(tmp_path) -> str:
    """A user's file of 40 reviews rated "bad" or "good", for the sweep command."""
    from conftest import SENTENCES, write_csv

    return write_csv(tmp_path / "reviews.csv", ["review", "stars"],
                     [(f"{SENTENCES[i % len(SENTENCES)]} {SENTENCES[(5 * i) % len(SENTENCES)]}", ("bad", "good")[i % 2])
                      for i in range(40)])


def test_two_processes_with_their_own_runs_dirs_run_one_sweep_and_report_alike(postgres_url, tmp_path):
    """Which trial successive halving prunes at epoch 1 depends on which process reports there first (a trial is
    ranked among those that reported before it), so this checks what holds in any order: each candidate trains once
    at seed 0; c, the best at epoch 1, is never pruned; a trial pruned is pruned at epoch 1, below another's score
    there; a and b cannot both be (c starts after one of them has reported); the seed round runs the best completed
    candidate at seed 1; and both processes report the same recommendation of it."""
    first, second = (_process(postgres_url, "fake", tmp_path / f"machine{i}") for i in (1, 2))
    outputs = [p.communicate(timeout=120) for p in (first, second)]
    for process, (out, err) in zip((first, second), outputs):
        assert process.returncode == 0, err[-3000:]
    study = sweep.load((postgres_url, "fake"))
    ran = _runs(study)
    at_epoch_1 = {t.params["candidate"]: t.intermediate_values.get(1) for t in study.trials
                  if "candidate" in t.params and t.params["seed"] == 0}
    seen = [(t.number, t.state.name, t.params, t.intermediate_values) for t in study.trials]
    # In the usual order (a reports at epoch 1 before b) b is pruned: {a0, c0, a1 complete, b0 pruned}.
    pruned = {name for (name, seed), states in ran.items() if seed == 0 and states == ["PRUNED"]}
    assert set(ran) - {(name, 0) for name in sweep_fakes.CURVES} in ({("a", 1)}, {("c", 1)}), seen
    assert all(ran[(name, 0)] in (["COMPLETE"], ["PRUNED"]) for name in sweep_fakes.CURVES), seen
    assert ran[("c", 0)] == ["COMPLETE"] and len(pruned) <= 1, seen
    for name in pruned:  # pruned at the first rung, by a candidate that scored higher there
        trial = next(t for t in study.trials if t.params.get("candidate") == name and t.params["seed"] == 0)
        assert sorted(trial.intermediate_values) == [1], seen
        assert at_epoch_1[name] < max(v for other, v in at_epoch_1.items() if other != name), seen
    best = "a" if "a" not in pruned else "c"  # the seed round: the best candidate that ran to its stopping rule
    assert ran[(best, 1)] == ["COMPLETE"], seen
    assert len({t.user_attrs["pid"] for t in study.trials if "candidate" in t.params}) == 2  # both took trials
    lines = [out.strip().splitlines()[-1] for out, _ in outputs]
    score = stats.mean([sweep_fakes.CURVES[best][-1] + 0.01 * seed for seed in (0, 1)])  # as the fake's seeds score
    assert lines[0] == lines[1] and lines[0].startswith(
        f"Recommended: {best}: validation accuracy {score:.3f} over seeds 0, 1"), (lines, seen)
    reports = [tmp_path / f"machine{i}" / "sweep" / "fake" for i in (1, 2)]
    assert (reports[0] / "candidates.csv").read_text() == (reports[1] / "candidates.csv").read_text()
    # Each machine's report reads the runs from the storage: a run trained on the other machine is in both.
    table = [[line for line in (r / "README.md").read_text().splitlines() if line.startswith("| ")] for r in reports]
    assert table[0] == table[1] and any(line.startswith("| c |") and "| 0.830 |" in line for line in table[0])


def test_two_processes_spend_the_budget_once(postgres_url, tmp_path):
    """Runs of 3 epochs of 1 s and a budget of 6 s: the first two start at once on the two processes, each reserves
    what it will still spend after every epoch (its next epoch and its tail: the writes and the record after its
    last epoch, one epoch's worth until a trial has measured it), so one of them stops (cut by the budget) where both
    would not fit, and no trial starts that the rest cannot pay for. Without the shared ledger each process would
    spend all of the budget left; without the tail reserved, about 2 s per trial on a loaded core went unreserved
    (12.87 s spent of 12 at load average 10, with epochs of 2 s). Epochs of 1 s against 2 s halve every length the
    ledger weighs but the tail, which stays what the processes' writes take: the same runs stop, with less room for
    an unreserved tail within the 5% (spent 5.46-5.64 s of 6 here, against 10.47-10.50 s of 12)."""
    slow = {"SWEEP_FAKE_EPOCH_S": "1.0"}
    processes = [_process(postgres_url, "budget", tmp_path / f"machine{i}", 6.0, env=slow) for i in (1, 2)]
    outputs = [p.communicate(timeout=120) for p in processes]
    assert all(p.returncode == 0 for p in processes), [err[-2000:] for _, err in outputs]
    study = sweep.load((postgres_url, "budget"))
    # The budget stopped work: a trial cut by it (its process then ends "done" when nothing is left in the queue),
    # or the next trial refused as too dear for what is left.
    assert (any(t.user_attrs.get("cut") == "budget" for t in study.trials)
            or any("ended: budget" in out or "too little for the next trial" in out for out, _ in outputs)), [
        (t.number, t.state.name, t.params, t.user_attrs.get("cut")) for t in study.trials] + [
        out[-600:] for out, _ in outputs]
    assert 4.0 <= sweep_storage.spent_s(study) <= 6.0 * 1.05, [
        (t.number, t.state.name, t.params, t.user_attrs.get("train_s"), t.user_attrs.get("tail_s"),
         t.user_attrs.get("cut"), t.user_attrs.get("epochs"), t.user_attrs.get("pid")) for t in study.trials] + [
        out for out, _ in outputs]
    assert all(len(states) == 1 for states in _runs(study).values()), _runs(study)


def test_the_sweep_command_from_two_processes_on_postgres_trains_each_run_once_and_reports_alike(
        postgres_url, tmp_path, one_block_preset, monkeypatch):
    """The real command, one process started apart and one in this test's process, each with its own --runs_dir,
    each with a made-up measurement of the machine (`sweep_fakes.measured`; the command's test in test_sweep.py
    measures). One seed: both candidates at seed 0 are the runs the two processes share out (full fine-tuning, queued
    first, measures the first rung in its own run, so there is no reference run; the
    seed round after them is one more run, and two processes' seed round and recommendation are
    `test_two_processes_with_their_own_runs_dirs_run_one_sweep_and_report_alike`'s). One epoch each: what is
    shared out is whole runs, however long."""
    from tf_transfer.studies.sweep import sweep_plan

    monkeypatch.setattr(sweep_plan, "measure", sweep_fakes.measured)
    common = ["sweep", f"--train_file={_reviews(tmp_path)}", "--text_columns=review", "--label_column=stars",
              f"--presets={one_block_preset}", "--methods=freeze,bitfit", "--lrs=1e-2", "--max_epochs=1",
              "--max_seq_length=16", "--sweep_top=1", "--sweep_seeds=1", "--noisolate_runs", "--budget=10m",
              f"--storage={postgres_url}", "--sweep_name=shared", "--sweep_heartbeat=2", "--workers=1"]
    other = _started("tests/sweep_fakes.py", "command", *common, f"--runs_dir={tmp_path / 'other'}")
    here = run_module("tf_transfer.experiments", *common, f"--runs_dir={tmp_path / 'here'}")
    out, err = other.communicate(timeout=600)
    assert here.returncode == 0 and other.returncode == 0, (here.stderr[-2000:], err[-2000:])
    assert here.stdout.strip().splitlines()[-1] == out.strip().splitlines()[-1]
    study = sweep.load((postgres_url, "shared"))
    ran = _runs(study)
    assert all(len(states) == 1 for states in ran.values())
    assert set(ran) == {("freeze_kall_lr0.01", 0), ("bitfit_kall_lr0.01", 0)} and study.user_attrs["first_rung"] == 1
    trained = [str(p.parent.relative_to(tmp_path / root / "sweep" / "shared")) for root in ("here", "other")
               for p in (tmp_path / root).rglob("summary.json")]
    assert len(trained) == len(set(trained)) == len(ran)  # every run trained once, on one machine or the other
    tables = [[line for line in (tmp_path / root / "sweep" / "shared" / "README.md").read_text().splitlines()
               if line.startswith("| ")] for root in ("here", "other")]
    assert tables[0] == tables[1]


def test_a_real_trainer_child_killed_mid_trial_is_retried_once_and_its_run_resumes(postgres_url, tmp_path,
                                                                                    one_block_preset, monkeypatch):
    """kill -9 of a trial's trainer child (a child process training the one-block BERT with the command's own trial
    function: tests/sweep_children.py) right after its first epoch's checkpoint: the trial is failed and queued
    again once, and its run resumes from that epoch (not trained twice) and completes. The machine's measurement is
    made up (`sweep_fakes.measured`). BitFit is the killed one, not full fine-tuning (the reference, whose paused
    run full fine-tuning's seed 0 resumes); the cheaper of the two, it is the first to reach the rung and goes on."""
    import json

    import sweep_children
    from tf_transfer.studies.sweep import sweep_plan, sweep_session

    monkeypatch.setattr(sweep_session, "_train_trial", sweep_children.train_trial)
    monkeypatch.setattr(sweep_plan, "measure", sweep_fakes.measured)
    sweep_dir = tmp_path / "runs" / "sweep" / "child"
    sweep_dir.mkdir(parents=True)
    (sweep_dir / "kill_after_epoch").write_text("bitfit_kall_lr0.01")
    done = run_module("tf_transfer.sweep", f"--train_file={_reviews(tmp_path)}", "--text_columns=review",
                      "--label_column=stars", f"--presets={one_block_preset}", "--methods=freeze,bitfit", "--lrs=1e-2",
                      "--max_epochs=2", "--max_seq_length=16", "--sweep_seeds=1", "--budget=10m", "--noisolate_runs",
                      "--workers=1", f"--storage={postgres_url}", "--sweep_name=child", f"--runs_dir={tmp_path / 'runs'}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (sweep_dir / "kill_after_epoch").exists() and "its training process died" in done.stdout
    study = sweep.load((postgres_url, "child"))
    assert _runs(study)[("bitfit_kall_lr0.01", 0)] == ["FAIL", "COMPLETE"], (_runs(study), done.stdout[-3000:])
    died, again = [t for t in study.trials if t.params.get("candidate") == "bitfit_kall_lr0.01"
                   and not t.user_attrs.get("reference") and not t.user_attrs.get("deferred")]
    assert sweep_storage.retried_from(again) == died.number
    summary = json.loads((sweep_dir / "bitfit_kall_lr0.01" / "seed0" / "summary.json").read_text())
    assert [e["epoch"] for e in summary["epochs"]] == [1, 2] and summary["completed"]
    assert [r["after_epoch"] for r in summary["resumes"]] == [1]  # epoch 1 not trained twice
    assert summary["config"]["padding"] == "pack"  # a new sweep's runs pack their batches


# Rivals' validation scores at the rungs (epochs 1 and 3 of successive halving from epoch 1), and two curves of the
# trial that is killed (and of the same unbroken): one passes epoch 1 and is pruned at 3, one is pruned at 1 though
# its epoch 2 would pass there (what a resumed run that reports epoch 1 without asking the pruner would let through).
RIVALS = {1: [0.60, 0.55], 3: [0.78, 0.75]}
CURVES = {3: [0.65, 0.70, 0.74, 0.80, 0.81], 1: [0.58, 0.70, 0.74, 0.80, 0.81]}


def _study_with_rivals(storage, name: str):
    import optuna

    study = optuna.create_study(study_name=name, storage=storage, direction="maximize",
                                pruner=sweep.pruner_of_sweeps(1))
    for values in zip(*RIVALS.values()):
        rival = study.ask()
        for epoch, value in zip(RIVALS, values):
            rival.report(value, epoch)
            rival.should_prune()
        study.tell(rival, max(values))
    return study


def _pruned_at(trial, curve, epochs) -> int:
    for epoch in epochs:
        if sweep.report_epoch(trial, max(curve[:epoch]), epoch, len(curve)):
            return epoch
    return 0


@pytest.mark.parametrize("expected", sorted(CURVES))
def test_a_resumed_trial_is_pruned_at_the_rung_an_unbroken_one_is(postgres_url, expected):
    """Killed after each epoch before it is pruned, after the pruner answered for that epoch or before: the run
    resumed by the trial's retry re-reports its finished epochs and is pruned where the unbroken run was."""
    from tf_transfer.studies.sweep import sweep_trial

    curve, storage = CURVES[expected], sweep_storage.storage_of(postgres_url, 1)
    assert _pruned_at(_study_with_rivals(storage, "unbroken").ask(), curve, range(1, len(curve) + 1)) == expected
    kills = [(k, asked) for k in range(1, expected + 1) for asked in (True, False) if k < expected or not asked]
    for killed_after, asked in kills:
        study = _study_with_rivals(storage, f"killed{killed_after}{asked}")
        trial = study.ask()
        assert _pruned_at(trial, curve, range(1, killed_after)) == 0
        trial.report(max(curve[:killed_after]), killed_after)  # its last epoch, killed before or after asking
        if asked:
            trial.should_prune()
        sweep_storage.retry(study, trial, "killed", log=lambda line: None)
        resumed = study.ask()
        epochs = [{"epoch": e, "val": {"f1": curve[e - 1]}} for e in range(1, killed_after + 1)]
        best = []
        at = sweep_trial.resume_reports(resumed, epochs, "f1", lambda v: best.append(max(best + [v])) or best[-1],
                                        len(curve))
        assert (at or _pruned_at(resumed, curve, range(killed_after + 1, len(curve) + 1))) == expected, (
            killed_after, asked)


@pytest.mark.parametrize("storage, fragment", [
    ("postgresql://nobody@127.0.0.1:9/sweeps", "cannot reach the database"),
    ("postgresql+nodriver://nobody@127.0.0.1:9/sweeps", "SQLAlchemy knows no database or driver"),
    ("postgresql://nobody:secret@127.0.0.1:9/sweeps", "its database driver is not installed"),
])
def test_a_storage_that_cannot_be_used_is_one_error_line(tmp_path, monkeypatch, storage, fragment):
    if "secret" in storage:  # psycopg, the driver postgresql:// takes, as if not installed
        monkeypatch.setitem(sys.modules, "psycopg", None)
    done = run_module("tf_transfer.experiments", "sweep", "--task=rte", "--budget=1m", f"--storage={storage}",
                      f"--runs_dir={tmp_path}")
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and fragment in errors[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "secret" not in done.stderr and not os.listdir(tmp_path)


def test_processes_starting_together_on_a_new_sqlite_file_wait_for_its_tables(tmp_path, monkeypatch):
    """SQLite reports a table another process created a moment before as an OperationalError ("table studies already
    exists"; 3 of 15 processes started three at a time on empty files, 2026-11-27): that one tries again; any other
    OperationalError is the one error line at once."""
    import optuna
    import sqlalchemy.exc

    calls = []

    def storage(url, **kwargs):
        calls.append(url)
        if len(calls) == 1 or "locked" in url:
            reason = "database is locked" if "locked" in url else "table studies already exists"
            raise sqlalchemy.exc.OperationalError("CREATE TABLE studies", {}, Exception(reason))
        return "the storage"

    monkeypatch.setattr(optuna.storages, "RDBStorage", storage)
    monkeypatch.setattr(sweep_storage.time, "sleep", lambda s: None)
    assert sweep_storage.storage_of(f"sqlite:///{tmp_path}/sweep.db", None) == "the storage" and len(calls) == 2
    with pytest.raises(TransferError, match=r"cannot reach the database \(database is locked\)"):
        sweep_storage.storage_of(f"sqlite:///{tmp_path}/locked.db", None)
    assert len(calls) == 3


def test_the_dashboard_serves_the_sweeps_trials_scores_and_pruning(postgres_url, tmp_path, monkeypatch):
    """`optuna-dashboard <storage URL>`, the sweep's live view (docs/distributed.md): its server, on the sweep's
    study, lists the study and gives each trial's state, candidate and validation score per epoch (the sweep's
    epochs are `FAST_EPOCH_S`: one process, whose trials' order does not depend on their length)."""
    import json
    import threading
    import urllib.request
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    import optuna_dashboard

    monkeypatch.setattr(sweep_fakes, "EPOCH_S", FAST_EPOCH_S)
    sweep_fakes.main(postgres_url, "watched", str(tmp_path), 600.0)

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):
            pass

    server = make_server("127.0.0.1", 0, optuna_dashboard.wsgi(postgres_url), handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        site = f"http://127.0.0.1:{server.server_port}"
        with urllib.request.urlopen(f"{site}/dashboard", timeout=60) as page:
            assert page.status == 200 and b"<html" in page.read().lower()
        with urllib.request.urlopen(f"{site}/api/studies", timeout=60) as answer:
            listed = {s["study_name"]: s for s in json.load(answer)["study_summaries"]}
        with urllib.request.urlopen(f"{site}/api/studies/{listed['watched']['study_id']}", timeout=60) as answer:
            trials = json.load(answer)["trials"]
    finally:
        server.shutdown()
        server.server_close()
    shown = {tuple(p["param_external_value"] for p in t["params"]) + (t["state"],):
             [v["value"] for v in t["intermediate_values"]] for t in trials if t["params"]}
    # b was pruned at epoch 1 (0.60 against a's 0.70); a ran its 3 epochs, each its best score so far.
    assert shown[("b", "0", "Pruned")] == [0.6] and shown[("a", "0", "Complete")] == [0.7, 0.8, 0.85]


def test_a_sweep_process_killed_with_its_trainer_has_its_trial_queued_again_once(postgres_url, tmp_path,
                                                                                monkeypatch):
    """kill -9 of a sweep process (on another machine, as far as the others can tell) and its trainer child
    mid-trial, while another process works on the sweep; then the killed one is run again at once (in this test's
    process, whose epochs take `FAST_EPOCH_S`). The trial's heartbeat stops, and both live processes find it stale
    after 3 missed beats and race to fail it and queue it again: exactly one copy is queued (a claim in the
    storage), it runs, and the report counts each candidate and seed once."""
    pid_file = tmp_path / "trainer.pid"
    killed = _process(postgres_url, "killed", tmp_path / "a",
                      env={"SWEEP_FAKE_TRAINER_PID": str(pid_file), "SWEEP_FAKE_HOST": "elsewhere"})
    other = _process(postgres_url, "killed", tmp_path / "b")
    deadline = time.time() + 120
    while not pid_file.exists() and time.time() < deadline and killed.poll() is None:
        time.sleep(0.1)
    assert pid_file.exists(), killed.communicate(timeout=5)
    for pid in (killed.pid, int(pid_file.read_text())):
        os.kill(pid, signal.SIGKILL)
    killed.communicate(timeout=30)
    monkeypatch.setattr(sweep_fakes, "EPOCH_S", FAST_EPOCH_S)
    sweep_fakes.main(postgres_url, "killed", str(tmp_path / "a"), 600.0)
    out, err = other.communicate(timeout=120)
    assert other.returncode == 0, err[-3000:]
    study = sweep.load((postgres_url, "killed"))
    seen = [(t.number, t.state.name, t.params, t.user_attrs.get("pid"), t.system_attrs.get("retry_history"))
            for t in study.trials]
    dead = [t for t in study.trials if t.user_attrs.get("pid") == killed.pid]
    assert len(dead) == 1 and dead[0].state.name == "FAIL" and dead[0].user_attrs["host"] == "elsewhere", seen
    retried = [t for t in study.trials if sweep_storage.retried_from(t) == dead[0].number]
    assert len(retried) == 1 and retried[0].state.name in ("COMPLETE", "PRUNED"), seen
    ran = _runs(study)
    key = (dead[0].params["candidate"], dead[0].params["seed"])
    assert ran[key][:-1] == ["FAIL"] and all(len(states) == 1 for k, states in ran.items() if k != key), seen
    assert all(states[-1] in ("COMPLETE", "PRUNED") for states in ran.values()), seen
    for root in ("a", "b"):  # each candidate is one row of the report, its seeds counted once
        rows = (tmp_path / root / "sweep" / "killed" / "candidates.csv").read_text().splitlines()[1:]
        assert sorted(row.split(",")[0] for row in rows) == sorted(sweep_fakes.CURVES), rows
    assert out.strip().splitlines()[-1].startswith("Recommended: ")


def test_the_sweep_rides_out_a_server_restart_and_its_heartbeat_goes_on(postgres_server, postgres_url, tmp_path,
                                                                          monkeypatch):
    """The PostgreSQL server stopped (`pg_ctl -m fast stop`: connections cut) and started again a second later,
    while a trial runs: a write to the study waits for it (one line when it starts waiting, one when it goes on)
    and the heartbeat thread neither dies nor lets the trial be taken for dead once the server is back."""
    import threading

    lines, died = [], []
    monkeypatch.setattr(threading, "excepthook", died.append)
    study, _ = sweep.open_study(str(tmp_path), {}, sweep_fakes.candidates, 60.0, storage=postgres_url, name="blink",
                                heartbeat_s=1, constant={"score": None}, log=lines.append, retry_s=60)
    trial, _, _ = sweep_storage.take(study, sorted(sweep_fakes.CURVES))
    with sweep_storage.heartbeat(study, trial):
        postgres_server.pause()
        restart = threading.Timer(1.0, postgres_server.resume)
        restart.start()
        try:
            trial.set_user_attr("train_s", 1.5)  # waits for the server
        finally:
            restart.join()
        time.sleep(sweep_storage.GRACE_BEATS + 0.5)  # a heartbeat that stopped would be stale by now
        sweep_storage.recover(study, lines.append)
    assert study.trials[trial.number].state.name == "RUNNING" and study.trials[trial.number].user_attrs[
        "train_s"] == 1.5, lines
    assert [line.split(" (")[0].split(" after ")[0] for line in lines] == [
        f"[sweep] the storage {postgres_url} does not answer", f"[sweep] the storage {postgres_url} answers again"]
    assert not died
