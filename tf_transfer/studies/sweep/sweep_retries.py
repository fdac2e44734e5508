"""A sweep's storage that rides out an outage: every call to the Optuna storage (planning, asking, telling,
reporting an epoch, a trial's heartbeat) that fails because the database cannot be reached is tried again, with
backoff, for at most `retry_s` seconds (`--storage_retry_s`). The process prints one line when it starts waiting
and one when the storage answers again; past the bound, `StorageUnreachable` (one `error:` line, exit 2) and a rerun
goes on where it stopped (its trial, left running, is queued again: `sweep_storage.recover`). A full disk under
the storage (SQLite's "database or disk is full") or under the sweep's own files is `no_space` at once: waiting does
not free space.

Example (the waits between tries of a call):

>>> from tf_transfer.studies.sweep import sweep_retries
>>> sweep_retries.backoff_s(0), sweep_retries.backoff_s(3), sweep_retries.backoff_s(9)
(0.5, 4.0, 10.0)
"""

from __future__ import annotations

import errno
import threading
import time
from typing import Callable, Optional

from tf_transfer.core.errors import TransferError

RETRY_S = 180  # how long a call waits for a storage that does not answer before the sweep stops (--storage_retry_s)
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class StorageUnreachable(TransferError):
    """The storage did not answer for the whole of `--storage_retry_s`: the sweep stops, a rerun goes on."""


def backoff_s(attempt: int) -> float:
    """Seconds before try `attempt + 1`: doubling from half a second, at most 10 (a server restarting answers
    within seconds, and a sweep waiting minutes should notice soon after it does)."""
    return min(0.5 * 2 ** attempt, 10.0)


def no_space(path: str, what: str, kept: str) -> TransferError:
    """The one line of a full disk (or quota), as every command words it: where, while writing what, what is kept,
    and what to do."""
    return TransferError(f"no space left on {path} while writing {what}: {kept}; free space and rerun")


def is_no_space(error: BaseException) -> bool:
    """Whether `error` (or what caused it) says a disk is full: `OSError` ENOSPC or EDQUOT, SQLite's "database or
    disk is full", PostgreSQL's DiskFull (SQLSTATE 53100), or a run's own one line of it."""
    for seen in _chain(error):
        if isinstance(seen, OSError) and seen.errno in NO_SPACE:
            return True
        text = str(seen)
        if "database or disk is full" in text or "No space left on device" in text or \
                getattr(seen, "sqlstate", None) == "53100" or text.startswith("no space left on "):
            return True
    return False


def transient(error: BaseException) -> Optional[str]:
    """The first line of why the database could not be used, where `error` says it could not be reached (the
    connection refused, lost or timed out: `OperationalError`, `InterfaceError`, a connection invalidated, which
    Optuna raises as `StorageInternalError` from them); None for anything else (a bug, a conflict, a full disk)."""
    import sqlalchemy.exc

    if is_no_space(error):
        return None
    for seen in _chain(error):
        if isinstance(seen, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)) or (
                isinstance(seen, sqlalchemy.exc.DBAPIError) and seen.connection_invalidated):
            cause = seen.orig if getattr(seen, "orig", None) is not None else seen
            return (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    return None


def _chain(error: Optional[BaseException]):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


class Outage:
    """What this process says of the storage's outages: one line when a call first finds the storage gone, one
    when a call next gets through (however many threads wait meanwhile)."""

    def __init__(self, shown: str, log: Callable, disk: Optional[str] = None):
        self.shown, self.log, self.since, self._lock = shown, log, None, threading.Lock()
        self.disk = disk or f"the server of {shown}"  # where a full disk stops it: SQLite's file, else the server

    def waiting(self, reason: str, retry_s: float) -> None:
        with self._lock:
            if self.since is None:
                self.since = time.time()
                self.log(f"[sweep] the storage {self.shown} does not answer ({reason}): trying again for up to "
                         f"{retry_s:.0f} s (--storage_retry_s)")

    def answered(self) -> None:
        if self.since is None:  # the usual case, without taking the lock
            return
        with self._lock:
            if self.since is not None:
                self.log(f"[sweep] the storage {self.shown} answers again after {time.time() - self.since:.0f} s: "
                         "going on")
                self.since = None


def call(outage: Outage, retry_s: float, function: Callable, *args, **kwargs):
    """`function(*args, **kwargs)`, tried again while the storage cannot be reached, for at most `retry_s`."""
    started, attempt = time.time(), 0
    while True:
        try:
            result = function(*args, **kwargs)
        except Exception as e:
            if is_no_space(e):
                raise no_space(outage.disk, "the sweep's trials to its storage", "what it recorded before is kept") \
                    from None
            reason = transient(e)
            if reason is None:
                raise
            waited = time.time() - started
            if waited >= retry_s:
                raise StorageUnreachable(
                    f"the storage {outage.shown} did not answer for {waited:.0f} s ({reason}; --storage_retry_s="
                    f"{retry_s:g}): the sweep stopped; rerun the same command once its server answers: it goes on "
                    "where it stopped") from None
            outage.waiting(reason, retry_s)
            time.sleep(min(backoff_s(attempt), max(retry_s - waited, 0.0)))
            attempt += 1
            continue
        outage.answered()
        return result


def _set_trial_state_values(self, trial_id: int, state, values=None) -> bool:
    """`set_trial_state_values` tried again as every call is, where a try whose commit went through though its
    answer was lost finished the trial: the storage then refuses the next try as if another process had finished
    it, and the trial holds what was asked."""
    import optuna

    failed = []

    def once():
        try:
            return self.inner.set_trial_state_values(trial_id, state, values)
        except optuna.exceptions.UpdateFinishedTrialError:
            trial = self.inner.get_trial(trial_id) if failed else None
            if trial is not None and trial.state == state and (values is None or trial.values == list(values)):
                return True
            raise
        except Exception as e:
            failed.append(transient(e))
            raise

    return call(self.outage, self.retry_s, once)


def retrying_storage(inner, outage: Outage, retry_s: float, claim: Callable):
    """`inner` (an Optuna storage with heartbeats) whose every call rides out an outage (`call`), plus
    `claim(study_id, key, token)` (`claim`, `sweep_storage._claim`'s insert, retried alike). It is a storage of
    Optuna's (`BaseStorage`, `BaseHeartbeat`), so studies, heartbeats and `fail_stale_trials` use it as `inner`."""
    return _retrying_class()(inner, outage, retry_s, claim)


def _retrying_class():
    from optuna.storages import BaseStorage
    from optuna.storages._heartbeat import BaseHeartbeat

    global _RETRYING
    if _RETRYING is None:
        names = {n for base in (BaseStorage, BaseHeartbeat) for n, v in vars(base).items()
                 if callable(v) and not n.startswith("__") and n != "get_failed_trial_callback"}

        def init(self, inner, outage, retry_s, claim):
            self.inner, self.outage, self.retry_s, self._claim = inner, outage, retry_s, claim

        def retried(name):
            def method(self, *args, **kwargs):
                return call(self.outage, self.retry_s, getattr(self.inner, name), *args, **kwargs)
            method.__name__ = name
            return method

        methods = {name: retried(name) for name in names}
        methods["set_trial_state_values"] = _set_trial_state_values
        methods.update(__init__=init, claim=lambda self, *args: call(self.outage, self.retry_s, self._claim, *args),
                       __getattr__=lambda self, name: getattr(self.__dict__["inner"], name))
        _RETRYING = type("RetryingStorage", (BaseStorage, BaseHeartbeat), methods)
    return _RETRYING


_RETRYING = None


class Heartbeat:
    """A trial's heartbeat, recorded every `interval` s on a thread of its own while the trial runs. It never
    stops on an outage (a trial that goes on once the storage is back must not be taken for dead): it tries again
    quietly, and the process's own calls say so and give up (`call`). Anything else it meets is kept (`error`) for
    the process to raise, not printed as a thread's traceback."""

    def __init__(self, storage, trial_id: int, interval: float):
        self.storage, self.trial_id, self.interval = storage, trial_id, interval
        self.error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{trial_id}", daemon=True)

    def _beat(self) -> None:
        inner = getattr(self.storage, "inner", self.storage)  # its own tries, not `call`'s blocking ones
        while not self._stop.is_set():
            try:
                inner.record_heartbeat(self.trial_id)
                delay = self.interval
            except Exception as e:
                if transient(e) is None:
                    self.error = e
                    return
                delay = min(self.interval, 5.0)
            self._stop.wait(delay)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=15)  # a connection attempt in flight times out within 10 s
        if self.error is not None and exc[0] is None:
            raise self.error
