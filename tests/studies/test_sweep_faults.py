"""Faults a sweep meets, on a study in SQLite with made-up runs (tests/sweep_fakes.py): a storage that does not
answer (tried again for `--storage_retry_s`, then one error line), a heartbeat thread that meets an outage, a full
disk under the storage, a trial's run or the report (one line), and a trial put back in the queue (its copy queued
before it is failed). The same on a real PostgreSQL server stopped and started, and two processes racing to queue a
dead trial again: tests/studies/test_sweep_machines.py."""

import errno
import re
import sqlite3

import pytest
import sqlalchemy.exc

import sweep_fakes
from conftest import parsed
from tf_transfer.core import cli
from tf_transfer.core.errors import TransferError
from tf_transfer.studies.sweep import sweep_search as sweep, sweep_retries, sweep_storage


def _refused(statement: str = "SELECT 1"):
    return sqlalchemy.exc.OperationalError(statement, {}, Exception("connection refused\nmore detail"))


def _study(tmp_path, lines: list, retry_s: float = 60.0):
    study, where = sweep.open_study(str(tmp_path), {"max_epochs": 3}, sweep_fakes.candidates, 600.0,
                                    constant={"score": None}, log=lines.append, retry_s=retry_s)
    return study, where


def _failing(monkeypatch, storage, name: str, times: int) -> dict:
    """`storage.<name>` failing `times` times as a database that does not answer, then itself again."""
    real, left = getattr(storage, name), {"n": times}

    def flaky(*args, **kwargs):
        if left["n"] > 0:
            left["n"] -= 1
            raise _refused()
        return real(*args, **kwargs)

    monkeypatch.setattr(storage, name, flaky)
    return left


def test_a_storage_that_blinks_is_waited_for_and_one_gone_too_long_is_one_error_line(tmp_path, monkeypatch, capsys):
    """Three failed reads are tried again (one line when the wait starts, one when it ends) and give the study's
    trials; a storage gone for longer than the bound is `StorageUnreachable`, which the command prints as one error
    line with exit status 2, naming the rerun."""
    lines = []
    study, _ = _study(tmp_path, lines, retry_s=0.5)
    monkeypatch.setattr(sweep_retries, "backoff_s", lambda attempt: 0.01)
    left = _failing(monkeypatch, study._storage.inner, "get_all_trials", 3)
    assert sorted(t.params.get("candidate") or t.system_attrs["fixed_params"]["candidate"]
                  for t in study.get_trials()) == sorted(sweep_fakes.CURVES) and left["n"] == 0
    assert [line.split(" (")[0] for line in lines] == [
        f"[sweep] the storage {study._storage.outage.shown} does not answer",
        f"[sweep] the storage {study._storage.outage.shown} answers again after 0 s: going on"], lines
    left["n"] = 10 ** 6
    with pytest.raises(SystemExit) as ended:
        cli.call(lambda argv: study.get_trials(), [])
    errors = capsys.readouterr().err.splitlines()
    assert ended.value.code == 2 and len(errors) == 1 and re.fullmatch(
        r"error: the storage sqlite:///\S+/sweep.db did not answer for [01] s \(connection refused; "
        r"--storage_retry_s=0.5\): the sweep stopped; rerun the same command once its server answers: it goes on "
        r"where it stopped", errors[0]), errors


def test_a_write_whose_answer_was_lost_is_not_taken_for_another_processs(tmp_path, monkeypatch):
    """A trial's end committed though the connection broke before its answer: tried again, the storage says the
    trial is finished; it holds what was asked, so the write stands (no `UpdateFinishedTrialError`)."""
    import optuna

    study, _ = _study(tmp_path, [])
    monkeypatch.setattr(sweep_retries, "backoff_s", lambda attempt: 0.01)
    trial, _, _ = sweep_storage.take(study, sorted(sweep_fakes.CURVES))
    inner, real = study._storage.inner, study._storage.inner.set_trial_state_values

    def committed_then_lost(*args, **kwargs):
        real(*args, **kwargs)
        monkeypatch.setattr(inner, "set_trial_state_values", real)
        raise _refused("COMMIT")

    monkeypatch.setattr(inner, "set_trial_state_values", committed_then_lost)
    study.tell(trial, 0.8)
    assert study.trials[trial.number].state == optuna.trial.TrialState.COMPLETE
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):  # another's end is still refused
        study._storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)


def test_the_heartbeat_thread_rides_out_an_outage_and_keeps_what_else_it_meets(tmp_path, monkeypatch):
    """Beats that fail as a database that does not answer are tried again quietly (the thread does not die); any
    other error stops the thread and is raised where the trial's block ends, not printed as a thread's traceback."""
    import threading
    import time

    died = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    study, _ = _study(tmp_path, [])
    trial, _, _ = sweep_storage.take(study, sorted(sweep_fakes.CURVES))
    beats = []
    left = _failing(monkeypatch, study._storage.inner, "record_heartbeat", 3)
    real = study._storage.inner.record_heartbeat
    monkeypatch.setattr(study._storage.inner, "record_heartbeat", lambda trial_id: beats.append(real(trial_id)))
    with sweep_retries.Heartbeat(study._storage, trial._trial_id, 0.02):
        deadline = time.time() + 30
        while not beats and time.time() < deadline:
            time.sleep(0.05)
    assert beats and left["n"] == 0 and not died

    def broken(trial_id):
        raise ValueError("a bug")

    monkeypatch.setattr(study._storage.inner, "record_heartbeat", broken)
    with pytest.raises(ValueError, match="a bug"):
        with sweep_retries.Heartbeat(study._storage, trial._trial_id, 0.02):
            time.sleep(0.2)
    assert not died


def test_a_full_disk_under_the_storage_is_one_line_at_once(tmp_path, monkeypatch):
    """SQLite's "database or disk is full" is no outage to wait for: one line naming the file, at once."""
    lines = []
    study, _ = _study(tmp_path, lines)

    def full(*args, **kwargs):
        raise sqlalchemy.exc.OperationalError("INSERT", {}, sqlite3.OperationalError("database or disk is full"))

    monkeypatch.setattr(study._storage.inner, "set_study_user_attr", full)
    with pytest.raises(TransferError) as refused:
        study.set_user_attr("budget_s", 1.0)
    assert str(refused.value) == (f"no space left on {tmp_path / 'sweep.db'} while writing the sweep's trials to its "
                                  "storage: what it recorded before is kept; free space and rerun") and not lines


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_in_a_trials_run_stops_the_sweep_with_one_line(tmp_path, code):
    """Every next trial would meet the full disk too: the sweep stops, the trial left to resume (not failed)."""
    study, where = _study(tmp_path, [])

    def train(where, trial_id, settings, folder, keep_s):
        raise OSError(code, "No space left on device", f"{folder}/checkpoint-epoch1.npz")

    with pytest.raises(TransferError) as refused:
        sweep.run_sweep(study, where, str(tmp_path), train, log=lambda line: None)
    running = [t for t in study.trials if t.state.name == "RUNNING"]
    assert len(running) == 1 and str(refused.value) == (
        f"no space left on {tmp_path}/a/seed0/checkpoint-epoch1.npz while writing a trial's run: its last finished "
        "epoch is kept; free space and rerun")


def test_a_full_disk_under_the_report_is_one_line(tmp_path):
    from tf_transfer import sweep as sweep_command
    from tf_transfer.studies.sweep import sweep_session

    study, _ = _study(tmp_path, [])

    def full(study, sweep_dir, out):
        raise OSError(errno.ENOSPC, "No space left on device", f"{out}/README.md")

    options = parsed(sweep_command.COMMAND_FLAGS, ("--budget=1m", f"--out={tmp_path}/report"),
                     sweep_command.options_of_flags)
    with pytest.raises(TransferError) as refused:
        sweep_session._finish(options, study, str(tmp_path), "done", 1, 0.0, write_report=full)
    assert str(refused.value) == (f"no space left on {tmp_path}/report/README.md while writing the sweep's report: "
                                  "its trials are kept in its storage; free space and rerun")


def test_the_retry_bound_is_checked(monkeypatch):
    from tf_transfer import sweep as sweep_command

    with pytest.raises(TransferError, match=r"--storage_retry_s=-1: give whole seconds, 0 or more"):
        parsed(sweep_command.COMMAND_FLAGS, ("--budget=1m", "--storage_retry_s=-1"),
               sweep_command.options_of_flags)


def test_a_trial_whose_process_is_a_zombie_is_queued_again_at_once(tmp_path):
    """A sweep's worker killed while the process that started it trains on stays a zombie until that process reaps
    it (`kill(pid, 0)` succeeds): its trial is queued again at once, not after its heartbeat goes stale."""
    import subprocess
    import sys
    import time

    study, _ = _study(tmp_path, [])
    trial, name, seed = sweep_storage.take(study, sorted(sweep_fakes.CURVES))
    worker = subprocess.Popen([sys.executable, "-S", "-c", "pass"])
    deadline = time.time() + 60
    while not sweep_storage._zombie(worker.pid) and time.time() < deadline:  # ended, not reaped
        time.sleep(0.05)
    try:
        trial.set_user_attr("pid", worker.pid)
        lines = []
        sweep_storage.recover(study, lines.append)
    finally:
        worker.wait()
    again = [t for t in study.trials if sweep_storage.retried_from(t) == trial.number]
    assert study.trials[trial.number].state.name == "FAIL" and len(again) == 1, lines
    assert again[0].state.name == "WAITING" and "pid" not in again[0].user_attrs and len(lines) == 1
    # Found dead again by another way (its child's death, its heartbeat): the claim in the storage keeps it queued once.
    sweep_storage.retry(study, study.trials[trial.number], "its training process died", lines.append)
    assert sum(sweep_storage.retried_from(t) == trial.number for t in study.trials) == 1
    assert lines[-1].endswith("its training process died; already queued again"), lines


def test_every_trial_put_back_has_its_copy_queued_before_it_is_failed(tmp_path, monkeypatch):
    """Each way a taken trial goes back to the queue (its process gone, its heartbeat stopped, giving way to the
    budget, moved behind the queue) queues its copy before it fails the trial: a process that read the sweep in
    between, nothing waiting or running, would end the sweep one run short and report without it."""
    study, _ = _study(tmp_path, [])
    storage, lines, failed = study._storage, [], []
    real = storage.set_trial_state_values

    def set_state(trial_id, state, values=None):
        if state.name == "FAIL":
            key = sweep_storage.key_of(storage.get_trial(trial_id))
            failed.append(sum(sweep_storage.key_of(t) == key for t in study.get_trials(deepcopy=False)
                              if t.state.name == "WAITING"))
        return real(trial_id, state, values)

    monkeypatch.setattr(storage, "set_trial_state_values", set_state)
    queued = len(study.get_trials(deepcopy=False))
    trial, _, _ = sweep_storage.take(study, sorted(sweep_fakes.CURVES))
    trial.set_user_attr("pid", 2 ** 22 + 1)  # above Linux's largest pid: gone
    sweep_storage.recover(study, lines.append)
    trial, _, _ = sweep_storage.take(study, sorted(sweep_fakes.CURVES))
    monkeypatch.setattr(storage, "_get_stale_trial_ids", lambda study_id: [trial._trial_id])
    sweep_storage.recover(study, lines.append)
    trial, _, _ = sweep_storage.take(study, sorted(sweep_fakes.CURVES))
    sweep_storage.give_way(study, trial)
    waiting = [t for t in study.get_trials(deepcopy=False) if t.state.name == "WAITING"]
    sweep_storage.defer_first(study, waiting[0].number, {})
    sweep_storage.defer_waiting(study, "seed_round")
    assert failed == [1] * (4 + len(waiting)), (failed, lines)  # defer_waiting moves each waiting trial
    assert [line.split("): ")[1] for line in lines] == [
        f"its process {2 ** 22 + 1} on this host is gone; queued again: it resumes from its last finished epoch "
        "where its run folder is reachable",
        f"its heartbeat stopped ({sweep_storage.GRACE_BEATS} beats missed); queued again: it resumes from its last "
        "finished epoch where its run folder is reachable"]
    now = study.get_trials(deepcopy=False)
    assert sorted(sweep_storage.key_of(t) for t in now if t.state.name == "WAITING") == sorted(
        sweep_storage.key_of(t) for t in now[:queued])  # each put back once, none lost


def test_a_trial_is_taken_with_its_first_heartbeat(tmp_path):
    """A process of another machine killed right after it took a trial, before its heartbeat thread wrote: Optuna
    never finds a trial stale that has no heartbeat at all, so the others waited for it for ever (a CI run hung so,
    2026-11-29). `take` records the first beat: once it is older than the grace period the trial is queued again."""
    study, _ = _study(tmp_path, [])
    trial, _, _ = sweep_storage.take(study, sorted(sweep_fakes.CURVES))
    trial.set_user_attr("host", "elsewhere")  # killed on another machine: only its heartbeat can tell
    cached = getattr(study._storage, "inner", study._storage)  # the retrying wrapper's Optuna storage
    getattr(cached, "_backend", cached).grace_period = -1  # every beat already late: no wait in the test
    lines = []
    sweep_storage.recover(study, lines.append)
    again = [t for t in study.trials if sweep_storage.retried_from(t) == trial.number]
    assert study.trials[trial.number].state.name == "FAIL" and len(again) == 1, lines
    assert "its heartbeat stopped" in lines[0]
