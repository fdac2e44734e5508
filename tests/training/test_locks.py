"""One process per folder (`training.locks`): a dead holder's lock is taken over by exactly one process, an empty
lock is dead after its grace, a live holder is named, and a command refuses a folder it cannot write or that another
command holds, before TensorFlow is loaded."""

import json
import multiprocessing
import os
import socket
import subprocess
import sys
import time

import pytest

from tf_transfer.core.errors import TransferError
from tf_transfer.training import locks

import lock_hammer
from conftest import REPO, run_module

def test_two_processes_taking_over_a_stale_lock_never_both_get_it(tmp_path):
    context = multiprocessing.get_context("spawn")  # never fork a process that runs TensorFlow's threads
    barrier, won = context.Barrier(2), context.Array("b", 2 * lock_hammer.ROUNDS)
    processes = [context.Process(target=lock_hammer.hammer, args=(str(tmp_path), me, barrier, won))
                 for me in (0, 1)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
    assert [process.exitcode for process in processes] == [0, 0]
    winners = [won[2 * r] + won[2 * r + 1] for r in range(lock_hammer.ROUNDS)]
    assert winners == [1] * lock_hammer.ROUNDS  # exactly one process took each stale lock over


def test_an_empty_lock_is_dead_after_its_grace(tmp_path, monkeypatch):
    monkeypatch.setattr(locks, "GRACE_S", 0.3)
    (tmp_path / locks.LOCK).write_text("")  # just created: perhaps a live process about to write its name
    start = time.time()
    assert locks.acquire(str(tmp_path))
    assert 0.2 < time.time() - start < 2
    assert json.loads((tmp_path / locks.LOCK).read_text())["pid"] == os.getpid()
    assert not locks.acquire(str(tmp_path))  # held (by this process)
    locks.release(str(tmp_path))
    assert not (tmp_path / locks.LOCK).exists()
    # An earlier version's lock of a live process on this host (the one that ran this test) is respected.
    (tmp_path / locks.LOCK).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getppid()}))
    assert not locks.acquire(str(tmp_path))


HOLD = "import sys, time; from tf_transfer.training import locks; locks.acquire(sys.argv[1]); print(1, flush=True); " \
       "time.sleep(120)"


def test_a_second_command_on_a_held_folder_names_the_holder(tmp_path, glue_dir, tiny_preset):
    """Two commands on one --output_dir: the second is one line naming the first's pid and host (exit 2), so a fresh
    start never clears the other's files; once the holder is killed, its lock is free at once."""
    folder = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "1"
        refused = run_module("tf_transfer.glue", "--task=sst2", f"--preset={tiny_preset}", f"--data_dir={glue_dir}",
                             f"--output_dir={folder}")
        assert refused.returncode == 2, refused.stderr[-2000:]
        line = refused.stderr.strip().splitlines()[-1]
        assert line.startswith(f"error: --output_dir={folder} is in use by process {holder.pid} on "
                               f"{socket.gethostname()} since ")
        assert line.endswith("(its lock.json): wait for it to finish or stop it; two commands on one folder would "
                             "overwrite each other's files")
    finally:
        holder.kill()
        holder.wait()
    assert locks.acquire(str(folder))  # kill -9 released it: no stale lock to wait out
    locks.release(str(folder))


def test_an_unwritable_output_folder_is_refused_before_tensorflow(tmp_path, glue_dir, tiny_preset):
    """A file where the folder should be, or a folder below a file: one line, exit 2, from a process that cannot
    import TensorFlow or Keras (so nothing was loaded first). `experiments run`: tests/studies/test_experiments.py."""
    taken = tmp_path / "taken"
    taken.write_text("a file")
    for name in ("tensorflow", "keras"):  # a process that imports either fails with a traceback (exit 1)
        os.makedirs(tmp_path / "no_tf" / name)
        (tmp_path / "no_tf" / name / "__init__.py").write_text(f"raise ImportError('{name} imported')\n")
    for target, why in ((taken, "is a file, not a folder: choose another"), (taken / "run", "cannot be written (")):
        in_new_process = target == taken  # one new process shows the order; this one is quicker for the other
        refused = run_module("tf_transfer.glue", "--task=sst2", f"--preset={tiny_preset}", f"--data_dir={glue_dir}",
                             f"--output_dir={target}", process=in_new_process,
                             env={"PYTHONPATH": str(tmp_path / "no_tf")} if in_new_process else None)
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert refused.stderr.strip().splitlines()[-1].startswith(f"error: --output_dir={target} {why}")


@pytest.mark.parametrize("command", [
    ["tf_transfer.stack", "--task=quora", "--head=linear", "--data=quora.csv"],
    ["tf_transfer.multitask", "--data_dir=cs224n"],
    ["tf_transfer.sentiment", "--approach=sparse", "--data=texts.csv"],
], ids=["stack", "multitask", "sentiment"])
def test_every_training_command_refuses_an_unwritable_output_folder_first(tmp_path, command):
    """Before its data is read (the data named here does not exist) or TensorFlow is imported."""
    taken = tmp_path / "taken"
    taken.write_text("a file")
    refused = run_module(*command, f"--output_dir={taken}")
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stderr.strip().splitlines()[-1] == (
        f"error: --output_dir={taken} is a file, not a folder: choose another --output_dir")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_refused(tmp_path):
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(TransferError, match=r"cannot be written \(Permission denied\)"):
            locks.check_writable(str(tmp_path / "run"))
        with pytest.raises(TransferError, match=r"cannot be written \(Permission denied\)"):
            locks.check_writable(str(tmp_path))
    finally:
        tmp_path.chmod(0o755)


def test_a_folder_made_for_a_refused_command_is_removed(tmp_path):
    with pytest.raises(TransferError, match="bad data"):
        with locks.run_folder(str(tmp_path / "new")):
            assert (tmp_path / "new" / locks.LOCK).exists()
            raise TransferError("bad data")
    assert not (tmp_path / "new").exists()


def test_file_systems_without_links_or_locks(tmp_path, monkeypatch):
    """Without hard links the lock file is created in place; without locks (NFS with no lock manager) the command
    says so in one line instead of training unprotected."""
    import errno

    def no_links(*args):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(locks.os, "link", no_links)
    assert locks.acquire(str(tmp_path / "a")) and not locks.acquire(str(tmp_path / "a"))
    locks.release(str(tmp_path / "a"))
    assert os.listdir(tmp_path / "a") == []

    def no_locks(*args):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(locks.fcntl, "flock", no_locks)
    with pytest.raises(TransferError, match=r"^cannot lock .*/b/.* \(No locks available\): its file system offers "
                                            r"no locks \(NFS mounted without a lock manager\?\)"):
        with locks.run_folder(str(tmp_path / "b")):
            pass
    assert not (tmp_path / "b").exists()
