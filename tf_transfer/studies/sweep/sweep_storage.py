"""Where a sweep lives: its Optuna study, on SQLite in the sweep's folder or on a SQL server that several machines
share. The study alone is the sweep's queue (trials enqueued once and taken with Optuna's `ask`), the record of
every trial's run (`run_record` in the trial's user attributes, its epochs' scores as intermediate values) and the
ledger of its budget (what each trial spent and what a running one has reserved), so that every process on it, on
any machine, sees one sweep and writes the same report.

A process that dies leaves its trial RUNNING; its heartbeat (one row per trial that its process updates every
`heartbeat_s`) stops, and whichever process on the sweep looks next fails it and queues it again (`queue_retry`, as
Optuna's `RetryHeartbeatStaleTrialCallback` does, at most `MAX_RETRY` times, and once however many processes notice
it), to resume from its run folder's checkpoint where that folder is reachable (a shared `--runs_dir`) and to start
afresh elsewhere. A trial whose training child died (killed, out of memory) is queued again the same way at once.
Every call on the storage rides out an outage of up to `--storage_retry_s` (`sweep_retries`).

Example:

>>> from tf_transfer.studies.sweep import sweep_storage
>>> sweep_storage.default_name("mrpc", {"lr": 2e-5})
'mrpc-e6936c8d'
>>> sweep_storage.shown_url("postgresql://sweep:secret@db.example:5432/sweeps")
'postgresql://sweep:***@db.example:5432/sweeps'
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import time
import uuid
import warnings
from typing import Callable, Optional

from tf_transfer.core.errors import TransferError
from tf_transfer.studies.sweep.sweep_retries import RETRY_S

HEARTBEAT_S = 20  # a sweep process records its trial's heartbeat this often ...
GRACE_BEATS = 3  # ... and a trial whose heartbeat is this many beats old is taken for dead
MAX_RETRY = 2  # a trial whose process died is queued again at most this many times
LEGACY_NAME = "sweep"  # every sweep's study name before --sweep_name
WAIT_FOR_QUEUE_S = 120.0  # how long a process waits for the one that created the study to queue its trials


def url_of(sweep_dir: str, storage: Optional[str]) -> str:
    """The storage's SQLAlchemy URL: `storage`, else SQLite in the sweep's folder."""
    return storage or "sqlite:///" + os.path.abspath(os.path.join(sweep_dir, "sweep.db"))


def shown_url(url: str) -> str:
    """`url` with its password hidden, for messages."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def default_name(dataset: str, identity: dict) -> str:
    """`<data set>-<8 hex digits>`: the study name of a sweep of these settings (`identity`: what a sweep must
    agree on, the settings its runs share and its candidates' space), the same on every machine that gives them."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9._-]+', '_', dataset)}-{digest}"


def check_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", name or ""):
        raise TransferError(f"--sweep_name={name!r}: use letters, digits, '.', '_' and '-' (it names the sweep's "
                            "study on the storage and its folder under --runs_dir)")
    return name


def storage_of(url: str, heartbeat_s: Optional[int] = HEARTBEAT_S, retry_s: Optional[float] = None,
               log: Callable = print):
    """Optuna's RDB storage on `url`, with heartbeats and retries of dead trials where `heartbeat_s` is given.
    `TransferError` (one line) where the URL is no SQLAlchemy URL, its driver is not installed or its server cannot
    be reached. With `retry_s` (`--storage_retry_s`), a storage that rides out an outage of up to that long
    (`sweep_retries`), opening it too; without, the plain storage, which fails at once (the command's first check)."""
    from tf_transfer.studies.sweep import sweep_retries

    if retry_s is None:
        return _opened(url, heartbeat_s)
    sqlite_file = url[len("sqlite:///"):] if url.startswith("sqlite:///") else None
    outage = sweep_retries.Outage(shown_url(url), log, sqlite_file)
    rdb = sweep_retries.call(outage, retry_s, _opened, url, heartbeat_s, True)
    from optuna.storages._cached_storage import _CachedStorage

    return sweep_retries.retrying_storage(_CachedStorage(rdb), outage, retry_s, lambda *args: _claim(rdb, *args))


def _opened(url: str, heartbeat_s: Optional[int], retried: bool = False):
    """`RDBStorage(url)`; where it cannot be reached, one line, or (`retried`) the error for `sweep_retries.call`
    to try again."""
    import optuna
    import sqlalchemy.exc

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    kwargs = {}
    if url.startswith("postgresql"):  # a server that does not answer fails in seconds, not minutes
        kwargs["engine_kwargs"] = {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}
    if heartbeat_s:
        kwargs.update(heartbeat_interval=int(heartbeat_s), grace_period=GRACE_BEATS * int(heartbeat_s))
    try:
        for attempt in range(5):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    return optuna.storages.RDBStorage(url, **kwargs)
            except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError,
                    sqlalchemy.exc.OperationalError) as e:
                # Processes that start together on an empty database all create Optuna's tables: all but one fail
                # on a name the other just took (SQLite says so as an OperationalError), and find the tables there
                # when they try again.
                taken = not isinstance(e, sqlalchemy.exc.OperationalError) or "already exists" in str(e)
                if not taken or attempt == 4:
                    raise
                time.sleep(0.5 + attempt)
    except ImportError as e:
        raise TransferError(f"--storage={shown_url(url)}: its database driver is not installed ({e}); for "
                            "postgresql:// install the postgres extra: pip install -e '.[postgres]' (psycopg 3; "
                            "psycopg2 needs postgresql+psycopg2://)") from None
    except sqlalchemy.exc.NoSuchModuleError:
        raise TransferError(f"--storage={shown_url(url)}: SQLAlchemy knows no database or driver "
                            f"{url.split(':', 1)[0]!r}; e.g. postgresql://user:password@host:5432/database") from None
    except sqlalchemy.exc.ArgumentError as e:
        raise TransferError(f"--storage={shown_url(url)} is not an SQLAlchemy URL ({e}); e.g. "
                            "postgresql://user:password@host:5432/database") from None
    except sqlalchemy.exc.OperationalError as e:
        if retried:
            raise
        reason = str(e.orig if getattr(e, "orig", None) is not None else e).strip().splitlines()[0]
        raise TransferError(f"--storage={shown_url(url)}: cannot reach the database ({reason}); check that its "
                            "server runs and that host, port, database, user and password are right") from None


def _claim(rdb, study_id: int, key: str, token: str) -> bool:
    """Records `key` on the storage in one insert that its unique (study, key) constraint allows once: True in the
    one process whose `token` it holds (a try whose commit went through though its answer was lost included)."""
    import sqlalchemy.exc
    from optuna.storages._rdb import models

    session = rdb.scoped_session()
    try:
        session.add(models.StudySystemAttributeModel(study_id=study_id, key=key, value_json=json.dumps(token)))
        session.commit()
        return True
    except sqlalchemy.exc.IntegrityError:
        session.rollback()
        held = session.query(models.StudySystemAttributeModel).filter_by(study_id=study_id, key=key).one()
        return json.loads(held.value_json) == token
    except Exception:
        session.rollback()
        raise
    finally:
        session.close()


def claim(study, key: str) -> bool:
    """True for the one process, of all on the sweep, that claims `key` first (`_claim`, in the storage); on a
    storage that is no database (a test's in memory), the study's system attributes, unguarded."""
    import optuna

    token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
    if hasattr(study._storage, "claim"):
        return study._storage.claim(study._study_id, key, token)
    rdb = getattr(study._storage, "_backend", study._storage)  # Optuna's cache over it
    if isinstance(rdb, optuna.storages.RDBStorage):
        return _claim(rdb, study._study_id, key, token)
    if key in study.system_attrs:
        return False
    study.set_system_attr(key, token)
    return True


PROCESS_ATTRS = ("host", "pid")  # of the process that ran a trial: a retry's are its own (`take`)


def queue_retry(study, failed) -> bool:
    """Queues a failed trial (`failed`, frozen) again once, as Optuna's `RetryHeartbeatStaleTrialCallback` does (the
    same candidate, seed, marks and retry history, at most `MAX_RETRY` times), whichever process and however many
    notice it: only the one that claims `retried:<number>` in the storage queues it. The copy keeps nothing of the
    dead process (`PROCESS_ATTRS`), so that no process takes the copy, between being asked for it and marking it
    its own, for a trial of that dead process. True where this call queued it."""
    import optuna

    system_attrs = {"failed_trial": failed.number, "retry_history": [], **failed.system_attrs}
    system_attrs["retry_history"] = [*system_attrs["retry_history"], failed.number]
    if len(system_attrs["retry_history"]) > MAX_RETRY or not claim(study, f"retried:{failed.number}"):
        return False
    study.add_trial(optuna.create_trial(
        state=optuna.trial.TrialState.WAITING, params=failed.params, distributions=failed.distributions,
        user_attrs={k: v for k, v in failed.user_attrs.items() if k not in PROCESS_ATTRS},
        system_attrs=system_attrs))
    return True


def _ask(study):
    """`study.ask()` without Optuna's warning that heartbeats are meant for `optimize` (this loop records them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return study.ask()


def load(url: str, name: str, retry_s: float = RETRY_S, pruner=None, heartbeat_s: Optional[int] = None):
    """The sweep's study, as another process (a trial's child, a report) reads it, riding out outages of up to
    `retry_s`. A storage that holds only a study of the name every sweep had before `--sweep_name` (`LEGACY_NAME`)
    gives that one."""
    import optuna

    storage = storage_of(url, heartbeat_s, retry_s)
    names = [s.study_name for s in optuna.study.get_all_study_summaries(storage, include_best_trial=False)]
    if name not in names and names == [LEGACY_NAME]:
        name = LEGACY_NAME
    return optuna.load_study(study_name=name, storage=storage, pruner=pruner)


def create_or_join(url: str, name: str, direction: str, pruner, heartbeat_s: int, queue: Callable,
                   identity: dict, log: Callable = print, retry_s: float = RETRY_S):
    """The study `name` on `url`: created by the first process, which then calls `queue(study)` to enqueue its
    trials and records `identity` last (the sign that the queue is whole); every later process joins it (waiting,
    at most `WAIT_FOR_QUEUE_S`, for that sign) and is refused where the sweep there has other settings. Creating a
    study is one insert that a unique name allows once, so of processes starting together exactly one queues.
    Every call on the storage rides out an outage of up to `retry_s` (`sweep_retries`)."""
    import optuna

    storage = storage_of(url, heartbeat_s, retry_s, log)
    try:
        study = optuna.create_study(study_name=name, storage=storage, direction=direction, pruner=pruner)
        queue(study)
        study.set_user_attr("identity", identity)
        return study
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=name, storage=storage, pruner=pruner)
    waited = time.time()
    while "identity" not in study.user_attrs and name != LEGACY_NAME:
        if time.time() - waited > WAIT_FOR_QUEUE_S:  # its creator died before it queued: queue here (take skips
            log(f"[sweep] the process that created {name} queued nothing in {WAIT_FOR_QUEUE_S:.0f} s: "
                "queueing here")  # any trial two processes both queued)
            queue(study)
            study.set_user_attr("identity", identity)
            break
        time.sleep(0.5)
    _check_same(study, name, url, identity)
    return study


def _check_same(study, name: str, url: str, identity: dict) -> None:
    stored, mine = study.user_attrs.get("identity"), json.loads(json.dumps(identity))
    if stored is None:  # a sweep from before --sweep_name: its settings alone were recorded
        stored, mine = {"base": study.user_attrs.get("base")}, {"base": mine.get("base")}
    if stored != mine:
        flat = [{**{k: v for k, v in d.items() if k != "base"}, **(d.get("base") or {})} for d in (stored, mine)]
        differ = sorted(k for k in set(flat[0]) | set(flat[1]) if flat[0].get(k) != flat[1].get(k))
        raise TransferError(f"the sweep {name} on {shown_url(url)} has other settings ({', '.join(differ)} differ): "
                            "give the same settings to join it, or another --sweep_name to start a new sweep")


# --- the queue --------------------------------------------------------------------------------------------------------

LIVE = ("WAITING", "RUNNING", "COMPLETE", "PRUNED")


def key_of(trial) -> tuple:
    """`(candidate, seed, reference?)` of a trial, taken or only queued."""
    fixed = trial.system_attrs.get("fixed_params") or {}
    params = {**fixed, **trial.params}
    return params.get("candidate"), params.get("seed"), bool(trial.user_attrs.get("reference"))


def take(study, candidates: list):
    """Asks Optuna for the next queued trial: `(trial, candidate, seed)`, or None where there was none (another
    process took the last one meanwhile: the empty trial Optuna made instead is failed) or it is one that two
    processes both queued and another copy already runs or ran (the copy numbered lower is the one that runs; this
    one is failed, unnamed). A retried trial starts with nothing spent or reserved."""
    import optuna
    from optuna.storages._heartbeat import is_heartbeat_enabled

    trial = _ask(study)
    if is_heartbeat_enabled(study._storage):
        # Its first beat at once: Optuna never finds a running trial stale that has none, so a process killed
        # before its heartbeat thread wrote would leave the others waiting for it for ever (`recover`).
        study._storage.record_heartbeat(trial._trial_id)
    frozen = study._storage.get_trial(trial._trial_id)
    key = key_of(frozen)
    # A trial being moved (`deferred`) or failed for its copy (`retry`) is still running while its copy waits.
    dying = set(frozen.system_attrs.get("retry_history") or [])
    copies = [t for t in study.get_trials(deepcopy=False) if t.number < frozen.number and t.state.name in LIVE
              and key_of(t) == key and not t.user_attrs.get("deferred")
              and not (t.state.name == "RUNNING" and t.number in dying)]
    if not frozen.user_attrs.get("queued") or copies:
        trial.set_user_attr("skipped", "a copy of an earlier trial" if copies else "nothing queued")
        trial.set_user_attr("train_s", 0.0)  # a copy of a retried trial carries what its dead trial spent
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return None
    name = trial.suggest_categorical("candidate", candidates)
    seed = trial.suggest_int("seed", 0, 1000)
    for attr, value in (("host", socket.gethostname()), ("pid", os.getpid()), ("train_s", 0.0), ("reserved_s", 0.0),
                        ("started_at", time.time())):
        trial.set_user_attr(attr, value)
    return trial, name, seed


def other_hosts(study) -> set:
    """The hosts other than this one that have run a trial of `study` (`take` records each trial's)."""
    return {t.user_attrs["host"] for t in study.get_trials(deepcopy=False) if "host" in t.user_attrs} - {
        socket.gethostname()}


def retried_from(trial) -> Optional[int]:
    """The number of the trial this one runs again (its process died), or None."""
    history = trial.system_attrs.get("retry_history") or []
    return history[-1] if history else trial.user_attrs.get("retry_of")


def retry(study, trial, why: str, log: Callable = print) -> None:
    """Fails a trial whose process died and queues it again (`MAX_RETRY` times at most) as a dead machine's trial
    is: the same candidate, seed and marks, to resume from its run folder. Where another process failed it first
    (its heartbeat stopped), the trial is queued again once all the same (`queue_retry`). The copy is queued before
    the trial is failed: a process that read the sweep in between, finding neither waiting nor running, would end
    it one run short."""
    import optuna

    frozen = study._storage.get_trial(trial._trial_id)
    if frozen.state.name not in ("RUNNING", "FAIL"):  # it ended on its own meanwhile: nothing to run again
        return
    again = queue_retry(study, frozen)
    with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
        study._storage.set_trial_state_values(trial._trial_id, state=optuna.trial.TrialState.FAIL)
    already = not again and len(frozen.system_attrs.get("retry_history") or []) < MAX_RETRY
    log(f"[sweep] trial {trial.number} ({frozen.params.get('candidate')} seed {frozen.params.get('seed')}): {why}; "
        + ("queued again: it resumes from its last finished epoch where its run folder is reachable" if again else
           "already queued again" if already else f"not queued again (retried {MAX_RETRY} times already)"))


def recover(study, log: Callable = print) -> None:
    """Fails and queues again every running trial whose process is dead: one on this host whose pid is gone (at
    once), any whose heartbeat stopped (`GRACE_BEATS` beats late, whoever's it is: Optuna's `fail_stale_trials`,
    but `retry`'s order, the copy queued first)."""
    import optuna
    from optuna.storages._heartbeat import is_heartbeat_enabled

    from tf_transfer.training import locks

    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        attrs = trial.user_attrs
        if attrs.get("host") == socket.gethostname() and "pid" in attrs and (
                not locks.pid_alive(attrs["pid"]) or _zombie(attrs["pid"])):
            retry(study, trial, f"its process {attrs['pid']} on this host is gone", log)
    if is_heartbeat_enabled(study._storage):
        for trial_id in study._storage._get_stale_trial_ids(study._study_id):
            retry(study, study._storage.get_trial(trial_id), f"its heartbeat stopped ({GRACE_BEATS} beats missed)", log)


def _zombie(pid: int) -> bool:
    """Whether `pid` is a dead process its parent has not reaped yet: a sweep's worker killed while the process that
    started it still trains (it reaps its workers at the end), which `kill(pid, 0)` takes for alive."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):  # gone meanwhile, or no /proc (not Linux): as `pid_alive` says
        return False


@contextlib.contextmanager
def heartbeat(study, trial):
    """Records `trial`'s heartbeat every `heartbeat_s` while the block runs, so that other processes can tell this
    one is alive: on a thread of its own that rides out an outage of any length (`sweep_retries.Heartbeat`; Optuna's
    own thread, as `optimize` uses, dies with a traceback at the first failed write)."""
    from optuna.storages._heartbeat import is_heartbeat_enabled

    from tf_transfer.studies.sweep import sweep_retries

    if not is_heartbeat_enabled(study._storage):
        yield
        return
    with sweep_retries.Heartbeat(study._storage, trial._trial_id, study._storage.get_heartbeat_interval()):
        yield


def defer_waiting(study, until: str) -> None:
    """Moves the trials waiting before the first one marked `until` ("seed_round": the seed round just queued;
    "reference": the reference queued again after a kill) behind the queue: each is taken, failed as deferred and
    queued again, so that it still runs, or a rerun with a larger budget reaches it. Each move queues the copy
    before it fails the trial, as `retry` does; `take` passes over a running trial marked `deferred`."""
    import optuna

    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        if trial.user_attrs.get(until):
            break
        taken = _ask(study)
        frozen = study.get_trials(deepcopy=False)[taken.number]
        params = {**(frozen.system_attrs.get("fixed_params") or {}), **frozen.params}
        if taken.number != trial.number or frozen.user_attrs.get(until):  # another process took one
            taken.set_user_attr("deferred", True)  # moved, not failed: no run counts it, nor any report
            study.enqueue_trial(params, user_attrs={k: v for k, v in frozen.user_attrs.items()
                                                    if k not in PROCESS_ATTRS + ("deferred",)})
            study.tell(taken, state=optuna.trial.TrialState.FAIL)
            break
        taken.set_user_attr("deferred", True)
        kept = {key: frozen.user_attrs[key] for key in ("seed_round", "early", "unpruned", "sets_rung")
                if frozen.user_attrs.get(key)}
        study.enqueue_trial(params, user_attrs={"queued": True, "retry_of": taken.number, **kept})
        study.tell(taken, state=optuna.trial.TrialState.FAIL)


def defer_first(study, expected: int, marks: dict) -> None:
    """Moves the first waiting trial (number `expected`, as its caller saw it) behind the queue, marked `marks`
    (`sweep_search.run_sweep`: one that does not fit the budget left, so that a later one that fits runs first);
    taken, failed as deferred and queued again, as `defer_waiting` does. Another process's trial taken meanwhile is
    queued again unmarked; none left waiting, nothing is moved."""
    import optuna

    taken = _ask(study)
    frozen = study.get_trials(deepcopy=False)[taken.number]
    fixed = frozen.system_attrs.get("fixed_params")
    taken.set_user_attr("deferred", True)  # moved, not failed: no run counts it, nor any report
    if fixed:  # queued again before it is failed (`defer_waiting`)
        kept = {k: v for k, v in frozen.user_attrs.items() if k not in PROCESS_ATTRS + ("deferred",)}
        study.enqueue_trial({**fixed, **frozen.params},
                            user_attrs={**kept, **(marks if taken.number == expected else {})})
    study.tell(taken, state=optuna.trial.TrialState.FAIL)


# --- the budget's ledger ----------------------------------------------------------------------------------------------

def spent_s(study) -> float:
    """Training wall time the sweep has used: each trial's `train_s` (updated after every epoch); a queued retry
    carries its dead trial's until it starts, and counts only once it does."""
    return sum(t.user_attrs.get("train_s") or 0.0 for t in study.get_trials(deepcopy=False)
               if t.state.name != "WAITING")


def committed_s(study, but: Optional[int] = None) -> float:
    """What the sweep has spent or promised: `spent_s`, with each running trial counted at what it has reserved
    where that is more (its estimate before its first epoch, the end of its next epoch after); `but`: a trial
    number left out. (The reference's run counts once: the other workers train meanwhile, `sweep_rung`.)"""
    total = 0.0
    for t in study.get_trials(deepcopy=False):
        if t.state.name == "WAITING" or t.number == but:
            continue
        used = t.user_attrs.get("train_s") or 0.0
        total += max(used, t.user_attrs.get("reserved_s") or 0.0) if t.state.name == "RUNNING" else used
    return total


def tail_s(study, unmeasured_s: float) -> float:
    """Seconds a trial spends after its last epoch's reservation (its run's final writes, its training process's
    exit, its record read back): the longest any trial of the sweep took (`tail_s`, measured when it is told),
    else `unmeasured_s` until one has measured it."""
    tails = [t.user_attrs["tail_s"] for t in study.get_trials(deepcopy=False)
             if t.user_attrs.get("tail_s") is not None]
    return max(tails) if tails else float(unmeasured_s)


def reserve(study, trial, seconds: float, budget_s: float) -> bool:
    """Reserves `seconds` of the budget for `trial` (running), then reads the ledger again: True where everything
    spent and reserved, this too, fits in `budget_s`. Every process writes its reservation before it reads, so of
    trials reserving at once the last to write sees all the others: together they never overrun the budget (where
    they would not all fit, some give way)."""
    trial.set_user_attr("reserved_s", float(seconds))
    return committed_s(study) <= budget_s


# --- what the report reads ---------------------------------------------------------------------------------------------

EPOCH_KEYS = ("epoch", "epoch_time_s", "train_time_s", "train_cpu_s", "val", "test", "sweep")
RUN_KEYS = ("seed", "metric", "completed", "best_epoch", "num_layers", "method", "lr", "trainable_layers",
            "trainable_params", "cache_build_s", "cache_build_cpu_s", "peak_memory_mb", "machine")


def run_record(summary: Optional[dict]) -> Optional[dict]:
    """What the sweep's report and rule read of a run's `summary.json`, kept in its trial so that any machine's
    report reads the storage, not its own run folders."""
    if not summary:
        return None
    record = {key: summary[key] for key in RUN_KEYS if key in summary}
    record["config"] = {"max_epochs": (summary.get("config") or {}).get("max_epochs", len(summary.get("epochs", [])))}
    record["epochs"] = [{key: e[key] for key in EPOCH_KEYS if key in e} for e in summary.get("epochs", [])]
    return record


def give_way(study, trial) -> None:
    """Puts back a trial taken when the budget it needed was reserved meanwhile: failed as deferred and queued again
    (the same candidate, seed and marks), for whenever the budget allows it."""
    import optuna

    frozen = study.get_trials(deepcopy=False)[trial.number]
    params = {**(frozen.system_attrs.get("fixed_params") or {}), **frozen.params}
    trial.set_user_attr("deferred", True)
    trial.set_user_attr("reserved_s", 0.0)
    kept = {key: frozen.user_attrs[key] for key in ("reference", "seed_round", "early", "unpruned", "sets_rung")
            if frozen.user_attrs.get(key)}
    study.enqueue_trial(params, user_attrs={"queued": True, "retry_of": trial.number, **kept})  # before it is failed
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
