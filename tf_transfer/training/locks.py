"""One process per folder: a run folder while a command or a grid trains it, a sweep's folder while it queues.

The lock is `fcntl.flock` on `folder/lock.json`, which names its holder (host, pid, since). The kernel releases it
when the holding process ends, however it ends (`kill -9` included), so a dead process's lock is free at once and
taking it over is atomic: of several processes trying at the same moment exactly one gets it. On NFS, Linux turns
`flock` into a lock of the NFS lock manager, which holds across machines (a crashed machine's lock is released
when the server's lease on it expires, about 90 s under NFSv4); a mount with `nolock` or `local_lock=all` keeps
locks on each machine, so machines sharing such a folder must split the work by `--shard` instead
(docs/experiments.md).

Files written by an earlier version of this module (created exclusively, no `flock` key) are still respected while
their process lives: one on this host whose pid is alive, or one from another host. An empty or unreadable
`lock.json` with no process holding it (killed between create and write) is dead once it is `GRACE_S` old (a live
earlier-version process may be between the two; this version writes a new lock beside it and links it into place,
so its own are never empty).

Example:

>>> import tempfile
>>> from tf_transfer.training import locks
>>> with locks.run_folder(tempfile.mkdtemp()):  # refused in one line while another process holds it
...     pass
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import tempfile
import time
from typing import Optional

from tf_transfer.core.errors import TransferError
from tf_transfer.core.machine import pid_alive

LOCK = "lock.json"
GRACE_S = 2.0  # how long an empty lock file may be a live process between creating and writing it

_held: dict = {}  # folder (absolute) -> the open descriptor that holds its flock


def acquire(folder: str) -> bool:
    """Takes `folder`'s lock for this process (creating the folder); False when another process holds it, or this
    one does already. Waits only for an empty lock file younger than `GRACE_S`."""
    os.makedirs(folder, exist_ok=True)
    key, path = os.path.abspath(folder), os.path.join(folder, LOCK)
    if key in _held:
        return False
    while True:
        handle = _create(path)
        if handle is not None:
            _held[key] = handle
            return True
        try:
            handle = os.open(path, os.O_RDWR)
        except FileNotFoundError:  # released in between
            continue
        if not _lock(handle, path):
            os.close(handle)
            return False
        if not _same_file(handle, path):  # its holder removed it on release: lock the file now there
            os.close(handle)
            continue
        if _earlier_holder_alive(handle):
            os.close(handle)
            return False
        _write_holder(handle)
        _held[key] = handle
        return True


def release(folder: str) -> None:
    """Lets go of `folder`'s lock if this process holds it (removing `lock.json`); otherwise does nothing."""
    handle = _held.pop(os.path.abspath(folder), None)
    if handle is None:
        return
    try:
        if _same_file(handle, os.path.join(folder, LOCK)):
            os.remove(os.path.join(folder, LOCK))  # before letting go: a waiter then sees the file is gone
    except OSError:
        pass
    finally:
        os.close(handle)


def holder(folder: str) -> dict:
    """What `folder/lock.json` says of its holder (`host`, `pid`, `since`), {} when it says nothing readable. (Not
    for a folder this process holds: on NFS, closing any descriptor of the file lets go of the lock.)"""
    try:
        with open(os.path.join(folder, LOCK)) as f:
            held = json.load(f)
    except (OSError, ValueError):
        return {}
    return held if isinstance(held, dict) else {}


def describe(held: dict) -> str:
    if not held.get("pid"):
        return "another process"
    since = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(held["since"])) if held.get("since") else ""
    return f"process {held['pid']} on {held.get('host', 'an unknown host')}{since}"


def check_writable(folder: str, flag: str = "--output_dir") -> None:
    """Creates `folder` if needed and writes a file there: `TransferError` saying what is wrong (a file in its
    place, a read-only or missing parent) before anything slow has run."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise TransferError(f"{flag}={folder} is a file, not a folder: choose another {flag}")
    try:
        os.makedirs(folder, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".write-check-", dir=folder)  # not .tmp-*: a holder prunes those
        os.close(handle)
        os.remove(probe)
    except OSError as e:
        raise TransferError(f"{flag}={folder} cannot be written ({e.strerror or e}): choose a folder you can write "
                            f"to, or make this one writable") from None


@contextlib.contextmanager
def run_folder(folder: str, distribution: str = "default", flag: str = "--output_dir"):
    """While a command trains in `folder`: the folder checked writable and locked for this process, or
    `TransferError` naming the process that holds it. A created folder left empty is removed afterwards (a command
    refused later, e.g. for its data, leaves nothing behind). Under `--distribution=multi_worker` only the chief
    writes there; the other workers check and lock nothing."""
    from tf_transfer.core import strategies

    if distribution == "multi_worker" and not strategies.chief_by_tf_config():
        yield
        return
    existed = os.path.isdir(folder)
    check_writable(folder, flag)
    try:
        if not acquire(folder):
            raise TransferError(f"{flag}={folder} is in use by {describe(holder(folder))} (its {LOCK}): wait for "
                                "it to finish or stop it; two commands on one folder would overwrite each other's files")
        yield
    finally:
        release(folder)
        if not existed:
            with contextlib.suppress(OSError):
                os.rmdir(folder)  # only if empty


def _create(path: str) -> Optional[int]:
    """A new lock file at `path`, already naming this process and locked (written beside it, locked, then linked
    into place, so that no one ever finds it empty), or None when `path` exists."""
    handle, draft = tempfile.mkstemp(prefix=".lock-draft-", dir=os.path.dirname(path) or ".")
    try:
        os.fchmod(handle, 0o644)
        _lock(handle, path)
        _write_holder(handle)
        os.link(draft, path)
    except FileExistsError:
        os.close(handle)
        return None
    except OSError as e:
        os.close(handle)
        if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP):
            raise
        return _create_without_links(path)
    except BaseException:
        os.close(handle)
        raise
    finally:
        os.remove(draft)
    return handle


def _create_without_links(path: str) -> Optional[int]:
    """`_create` on a file system without hard links: created, then locked (empty for that moment, which a
    contender that finds it so waits out)."""
    try:
        handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return None
    if not _lock(handle, path):
        os.close(handle)
        return None
    _write_holder(handle)
    return handle


def _lock(handle: int, path: str) -> bool:
    """`flock` without waiting: False when another process holds it; `TransferError` when the file system offers
    no locks (NFS without a lock manager)."""
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as e:
        raise TransferError(f"cannot lock {path} ({e.strerror or e}): its file system offers no locks (NFS mounted "
                            "without a lock manager?); use a local --output_dir/--runs_dir, or split a shared grid "
                            "with --shard") from None
    return True


def _same_file(handle: int, path: str) -> bool:
    try:
        return os.path.samestat(os.fstat(handle), os.stat(path))
    except FileNotFoundError:
        return False


def _read(handle: int) -> Optional[dict]:
    """The holder the open lock file names, None when it is empty or not JSON."""
    try:
        data = os.pread(handle, 4096, 0)
        held = json.loads(data.decode()) if data.strip() else None
    except (OSError, ValueError):
        return None
    return held if isinstance(held, dict) else None


def _earlier_holder_alive(handle: int) -> bool:
    """With the flock taken: whether the file is still held the way an earlier version of this module held it (no
    flock), or is an empty file young enough to be a live process between creating and writing it (then waited
    out, up to `GRACE_S`)."""
    while True:
        held = _read(handle)
        if held is None:
            age = time.time() - os.fstat(handle).st_mtime
            if age >= GRACE_S:
                return False  # empty or unreadable, and old: its writer died
            time.sleep(min(0.05, GRACE_S - age))
            continue
        if held.get("flock"):
            return False  # a holder of this version: the kernel let go of its lock, so it is gone
        if held.get("host") != socket.gethostname():
            return True  # an earlier version's lock on another machine: its process cannot be checked from here
        return isinstance(held.get("pid"), int) and pid_alive(held["pid"])


def _write_holder(handle: int) -> None:
    """Names this process in the lock file, never leaving it empty (written over, then cut to length)."""
    mine = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": time.time(), "flock": True})
    os.pwrite(handle, mine.encode(), 0)
    os.ftruncate(handle, len(mine.encode()))
