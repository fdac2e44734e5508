"""Shared fixtures: a tiny random BERT saved as a Keras preset folder, and small GLUE files in the real layouts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# What TensorFlow reads once, at its import (below): tf_transfer's own default for oneDNN, TensorFlow's for its
# thread pools, whatever the machine exports. The other variables the code reads: `_no_outside_environment`.
AT_IMPORT = {"TF_ENABLE_ONEDNN_OPTS": "1", "TF_NUM_INTRAOP_THREADS": None, "TF_NUM_INTEROP_THREADS": None}
for _name, _value in AT_IMPORT.items():
    if _value is None:
        os.environ.pop(_name, None)
    else:
        os.environ[_name] = _value


def _two_logical_cpus():
    """Two logical CPU devices for the whole test run, so that MirroredStrategy tests run in this process (logical
    devices can only be set before TensorFlow initialises). Other tests place their work on the first, as before.

    Grappler's graph rewrites are off in the test processes (`disable_meta_optimizer`; also in the two-worker
    test's worker processes, tests/training/multi_worker_worker.py): each test's graphs run a few steps on a few
    dozen examples, and optimising them cost more than running them. Measured on 2026-11-26 (2-core AMD EPYC, AVX2)
    on the distributed tests' five one-device runs (tests/study_runs.py), one process each way on one core: 38.8 CPU
    seconds with the rewrites, 27.5 without (GLUE 8.8 -> 6.6, stack 5.3 -> 4.0, multitask 7.2 -> 4.1, AutoFreeze
    10.5 -> 7.6, sentiment 7.0 -> 5.2), the same losses to float32 rounding (most bit for bit). What the tests
    compare (a resumed run with an unbroken one, a strategy with one device) is computed the same way on both
    sides; the commands, studies and benchmarks keep TensorFlow's default. Tests that start a command in a process
    of its own (`run_module(..., process=True)`) run with the default too.

    TensorFlow's C++ start-up lines (written to file descriptor 2 before any log level applies; the quiet start of
    `tf_transfer.core.quiet` is off under pytest) are sent to /dev/null while it loads: each test process would
    print them, and pytest-xdist shows its workers' after the summary."""
    import tf_transfer  # noqa: F401  (its environment settings come before TensorFlow's import, as in a command)

    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        import tensorflow as tf

        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def pytest_configure(config):
    """Every process that runs tests sets up TensorFlow first (`_two_logical_cpus`); pytest-xdist's controller,
    which only hands tests to its workers, never imports it (about 8 CPU seconds that competed with the workers'
    start)."""
    if getattr(config, "workerinput", None) is None and config.getoption("numprocesses", None):
        return
    _two_logical_cpus()


TWO_CPUS = ["/cpu:0", "/cpu:1"]

# Every other environment variable tf_transfer or the tests' helpers read, but for the ones the suite sets itself
# (TF_CPP_MIN_LOG_LEVEL, AT_IMPORT above) and CI (`postgres_server`: a server that does not start fails there).
# `tests/test_suite_setup.py` checks that the list names every variable the code reads.
OUTSIDE_ENVIRONMENT = (
    "GLUE_DIR",  # glue's and the experiments' --data_dir default
    "TF_CONFIG",  # --distribution=multi_worker's cluster
    "TF_TRANSFER_WORKER_TIMEOUT",  # how long multi-worker training waits for its peers
    "TF_TRANSFER_QUIET",  # the quiet start's marker
    "TF_TRANSFER_HUB_UNREACHABLE",  # presets the process that started this one found unreachable on the hub
    "TF_TRANSFER_SWEEP_WORKER",  # a worker the sweep started: its number and deadline
    "SWEEP_FAKE_EPOCH_S",  # tests/sweep_fakes.py's epoch
    "SWEEP_FAKE_HOST",  # tests/sweep_fakes.py: the host its trials record, another machine's
    "SWEEP_FAKE_TRAINER_PID",  # tests/sweep_fakes.py: where its first trial's trainer writes its process id
)


@pytest.fixture(scope="session", autouse=True)
def _no_outside_environment():
    """The suite runs as in a clean shell whatever the machine exports (`GLUE_DIR` by the README's convention): the
    variables of `OUTSIDE_ENVIRONMENT` are removed for the whole session, before any other fixture, and put back at
    its end. A test that needs one sets it itself (`monkeypatch.setenv`, or the `env` of a process it starts)."""
    with pytest.MonkeyPatch.context() as patch:
        for name in OUTSIDE_ENVIRONMENT:
            patch.delenv(name, raising=False)
        yield


@pytest.fixture(autouse=True)
def _hub_unreachable_per_test(monkeypatch):
    """A test that loads the offline preset by its hub name marks it unreachable for the processes it starts
    (`backbones.HUB_UNREACHABLE_ENV`); the next test starts as a fresh process would."""
    monkeypatch.delenv("TF_TRANSFER_HUB_UNREACHABLE", raising=False)


def pytest_collection_finish(session):
    """Moves every object alive once the tests are collected (TensorFlow's, Keras's and keras-hub's modules, some
    400,000 of them, alive until the process ends) out of the garbage collector's reach: each full collection
    walked them all, and `keras.backend.clear_session()` (after every in-process command, every stack run and grid
    run) makes one, 0.15 s after the imports alone and 0.4 s and more later in a test process. Nothing frozen
    is freed before the process ends, which is when these objects go anyway."""
    import gc

    gc.collect()
    gc.freeze()

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORDS = (
    "the a an is was are of to and in on at for with by from this that it he she they we you i not no yes "
    "cat dog man woman car house tree plane sky sea red blue green big small good bad happy sad run runs "
    "ran walk eat eats play plays what who where when why how did does do can will would should could "
    "friends buy analysis next one more question answer sentence pair true false quote said \" ' , . ? !"
).split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(WORDS))
NUM_LAYERS = 3


def make_tiny_backbone(num_layers: int = NUM_LAYERS, seed: int = 1):
    import keras
    import keras_hub

    keras.utils.set_random_seed(seed)
    return keras_hub.models.BertBackbone(
        vocabulary_size=len(VOCAB), num_layers=num_layers, num_heads=2, hidden_dim=16, intermediate_dim=32,
        max_sequence_length=64, num_segments=2, dropout=0.1,
    )


def make_tiny_tokenizer():
    import keras_hub

    return keras_hub.models.BertTokenizer(vocabulary=list(VOCAB), lowercase=True)


@pytest.fixture(scope="session")
def tiny_preset(tmp_path_factory):
    """A local Keras-format preset folder (config, weights, tokenizer) of a 3-block, 16-wide random BERT."""
    folder = str(tmp_path_factory.mktemp("tiny_preset"))
    make_tiny_backbone().save_to_preset(folder)
    make_tiny_tokenizer().save_to_preset(folder)
    return folder


@pytest.fixture(scope="session")
def one_block_preset(tmp_path_factory):
    """The tiny preset with one block (same width, tokenizer and dropout), for runs whose checks hold at any depth:
    its training step traces and is optimised in about half the 3-block preset's time."""
    folder = str(tmp_path_factory.mktemp("one_block_preset"))
    make_tiny_backbone(num_layers=1).save_to_preset(folder)
    make_tiny_tokenizer().save_to_preset(folder)
    return folder


@pytest.fixture(scope="session")
def two_block_preset(tmp_path_factory):
    """The tiny preset with two blocks, for adaptive freezing's runs: the fewest blocks with one to freeze below the
    top block, which is kept training."""
    folder = str(tmp_path_factory.mktemp("two_block_preset"))
    make_tiny_backbone(num_layers=2).save_to_preset(folder)
    make_tiny_tokenizer().save_to_preset(folder)
    return folder


SENTENCES = [
    "the cat is happy", "a dog runs in the house", "he said \" yes", "she eats a big red tree",
    "what did the man buy ?", "they play with the small blue car", "we walk to the sea", "the plane is in the sky",
    "i will not run", "who ran from the green house ?", "this is a good question", "that answer was bad",
]


def _pairs(n, offset=0):
    return [(SENTENCES[(i + offset) % len(SENTENCES)], SENTENCES[(i * 5 + 3 + offset) % len(SENTENCES)])
            for i in range(n)]


def _write(path, lines, header=None, bom=False, final_newline=True):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = "\n".join(([header] if header else []) + lines) + ("\n" if final_newline else "")
    with open(path, "w", encoding="utf-8-sig" if bom else "utf-8", newline="") as f:
        f.write(text)


def write_csv(path, header, rows) -> str:
    """A CSV file as a user's own data set would be: a header, then the rows, in standard quoting."""
    import csv

    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def write_glue(root: str, n_train: int = 40, n_dev: int = 12) -> str:
    """Writes every GLUE task's train and dev files in the original TSV layouts under `root`."""
    for split, n in (("train", n_train), ("dev", n_dev)):
        offset = 0 if split == "train" else 1
        pairs = _pairs(n, offset)
        # CoLA: no header, 4 columns; dev has no final newline (as the real file).
        _write(f"{root}/CoLA/{split}.tsv", [f"gj04\t{i % 2}\t{'' if i % 2 else '*'}\t{a}" for i, (a, _) in
                                           enumerate(pairs)], final_newline=split == "train")
        _write(f"{root}/SST-2/{split}.tsv", [f"{a} \t{i % 2}" for i, (a, _) in enumerate(pairs)], "sentence\tlabel")
        # MRPC: header starts with a UTF-8 byte-order mark.
        _write(f"{root}/MRPC/{split}.tsv", [f"{i % 2}\t{1000 + i}\t{2000 + i}\t{a}\t{b}" for i, (a, b) in
                                           enumerate(pairs)], "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", bom=True)
        _write(f"{root}/STS-B/{split}.tsv",
               [f"{i}\tmain-captions\tMSRvid\t2012test\t{i:04d}\tnone\tnone\t{a}\t{b}\t{(i * 0.37) % 5:.3f}"
                for i, (a, b) in enumerate(pairs)],
               "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore")
        # QQP: a question with an unbalanced quote character (quoting must be disabled).
        _write(f"{root}/QQP/{split}.tsv", [f"{i}\t{10 + i}\t{20 + i}\t{a}\t{b}\t{i % 2}" for i, (a, b) in
                                          enumerate(pairs)], "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate")
        nli = ("entailment", "neutral", "contradiction")
        mnli_header = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
                       "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label")
        mnli_rows = [f"{i}\t{i}\t{i}e\tfiction\t( {a} )\t( {b} )\t(ROOT {a})\t(ROOT {b})\t{a}\t{b}\t{nli[i % 3]}\t"
                     f"{nli[i % 3]}" for i, (a, b) in enumerate(pairs)]
        if split == "train":
            _write(f"{root}/MNLI/train.tsv", mnli_rows, mnli_header)
        else:
            _write(f"{root}/MNLI/dev_matched.tsv", mnli_rows, mnli_header)
            _write(f"{root}/MNLI/dev_mismatched.tsv", mnli_rows[: n // 2], mnli_header)
        two = ("entailment", "not_entailment")
        _write(f"{root}/QNLI/{split}.tsv", [f"{i}\t{a}\t{b}\t{two[i % 2]}" for i, (a, b) in enumerate(pairs)],
               "index\tquestion\tsentence\tlabel")
        _write(f"{root}/RTE/{split}.tsv", [f"{i}\t{a}\t{b}\t{two[i % 2]}" for i, (a, b) in enumerate(pairs)],
               "index\tsentence1\tsentence2\tlabel")
        _write(f"{root}/WNLI/{split}.tsv", [f"{i}\t{a}\t{b}\t{i % 2}" for i, (a, b) in enumerate(pairs)],
               "index\tsentence1\tsentence2\tlabel")
    return root


@pytest.fixture(scope="session")
def glue_dir(tmp_path_factory):
    return write_glue(str(tmp_path_factory.mktemp("glue")))


@pytest.fixture(scope="session")
def one_device_runs(tmp_path_factory, glue_dir):
    """Each study's small setting and its default-strategy run, trained once per test process
    (tests/study_runs.py); tests that use it carry `pytest.mark.xdist_group(study_runs.GROUP)`."""
    from study_runs import OneDeviceRuns

    return OneDeviceRuns(tmp_path_factory.mktemp("one_device_runs"), glue_dir)


def parsed(command_flags: dict, args: tuple, read):
    """`read()` with a command's flags (`command_flags`: its `COMMAND_FLAGS`) parsed from `args` as its command line
    would be, then unparsed again: what the command builds from them, without running it."""
    from absl import flags

    from tf_transfer.core import cli
    from tf_transfer.core import flags as flags_lib

    flags.FLAGS.unparse_flags()
    flags_lib.apply(command_flags)
    try:
        cli.parse_flags(["command", *args])
        return read()
    finally:
        flags.FLAGS.unparse_flags()


def run_module(module: str, *args, env=None, timeout=600, process=False):
    """Runs the command `python -m module args...` from the repository root; returns a CompletedProcess.

    By default in this test process (flags parsed by absl, exit status and output caught, see `_run_in_process`):
    starting Python with TensorFlow and keras-hub costs seconds a test. `process=True` starts a real interpreter,
    for what only a process shows (a kill, the interpreter's own exit, environment read at import).
    """
    if not process:
        return _run_in_process(module, args, env or {})
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    full_env.pop("GLUE_DIR", None) if env is None or "GLUE_DIR" not in env else None
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=full_env, capture_output=True,
                          text=True, timeout=timeout)


def _run_in_process(module: str, args: tuple, env: dict):
    """What `python -m module args` does, in this process: the command's shared-flag defaults, absl's parsing,
    `main`, one `error:` line and exit status 2 for bad input, a traceback and status 1 for anything else. Global
    state a command leaves (flag values, the Keras session and dtype policy, in-memory caches, the working folder,
    the environment, the CPUs it may run on) is put back afterwards."""
    import contextlib
    import importlib
    import io
    import logging
    import traceback

    import keras
    from absl import flags
    from absl import logging as absl_logging

    from tf_transfer.core import cli
    from tf_transfer.core import flags as shared_flags
    from tf_transfer.data import cache

    command = importlib.import_module(module)
    stdout, stderr = io.StringIO(), io.StringIO()
    saved_env, saved_cores = dict(os.environ), os.sched_getaffinity(0)  # a sweep's first worker pins itself
    os.environ.pop("GLUE_DIR", None)
    os.environ.update(env)
    cwd = os.getcwd()
    # absl's log handler keeps the stderr it was made with: point it at the capture.
    handlers = [absl_logging.get_absl_handler().python_handler]
    absl_logger = logging.getLogger("absl")
    streams, level = [h.stream for h in handlers], absl_logger.level
    flags.FLAGS.unparse_flags()
    shared_flags.apply(getattr(command, "COMMAND_FLAGS", {}))
    try:
        os.chdir(REPO)
        for handler in handlers:
            handler.stream = stderr
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                cli.call(command.main, cli.parse_flags([module, *args]))
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except Exception:  # noqa: BLE001  (what an interpreter would print before exiting with status 1)
                traceback.print_exc()
                code = 1
    finally:
        for handler, stream in zip(handlers, streams):
            handler.stream = stream
        os.chdir(cwd)
        os.sched_setaffinity(0, saved_cores)
        os.environ.clear()
        os.environ.update(saved_env)
        flags.FLAGS.unparse_flags()
        absl_logger.setLevel(level)  # after unparsing: --verbosity's reset sets it too
        # No full garbage collection here (Keras' default): it walked everything the earlier tests left alive,
        # about 0.5 s a command and 90 of the suite's CPU seconds (py-spy, 2026-11-26); Python's own collections
        # free a command's garbage later.
        keras.backend.clear_session(free_memory=False)
        keras.mixed_precision.set_global_policy("float32")
        cache.clear_memory()
    return subprocess.CompletedProcess([sys.executable, "-m", module, *args], code, stdout.getvalue(),
                                       stderr.getvalue())


def copy_when_saved(monkeypatch, when, output_dir, killed) -> None:
    """Makes a run in `output_dir` copy that folder to `killed` right after it saved an epoch for which
    `when(run_folder, epoch)` holds: the folder a run killed there (kill -9) leaves, but for its lock files (a dead
    process's lock is taken over: tests/training/test_locks.py). A test of resuming then needs no run of its own
    that is killed: the unbroken run leaves it, so what that run trained before the kill is not trained twice."""
    import shutil

    from tf_transfer.training.run_folder import RunFolder

    save_epoch = RunFolder.save_epoch

    def save_then_copy(self, epoch, model, optimizer=None):
        save_epoch(self, epoch, model, optimizer)
        if when(self, epoch) and not os.path.exists(killed):
            shutil.copytree(output_dir, killed, ignore=shutil.ignore_patterns("lock.json", ".lock-draft-*"))

    monkeypatch.setattr(RunFolder, "save_epoch", save_then_copy)


def quora_rows(n: int, empty_label: bool = True) -> str:
    """CS224N Quora layout: unnamed index column, float labels, and (`empty_label`) one row with an empty label,
    which the readers skip."""
    rows = ["\tid\tsentence1\tsentence2\tis_duplicate"]
    for i in range(n):
        a = SENTENCES[i % len(SENTENCES)]
        b = a if i % 2 == 0 else SENTENCES[(i * 5 + 3) % len(SENTENCES)]
        rows.append(f"{1000 + i}\tq{i}\t{a}\t{b}\t{float(i % 2 == 0)}")
    if empty_label:
        rows.insert(3, "7\tq-empty\tthe cat\tthe dog\t")
    return "\n".join(rows) + "\n"


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server on loopback for the whole session (tests/postgres.py). In CI it must start: `.ci/run`
    installs Debian's server where it is absent, and the `test` extra psycopg."""
    import postgres

    server = postgres.start()
    if server is None:
        message = "no PostgreSQL server binaries (apt-get install postgresql) or no psycopg (the test extra)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server, request) -> str:
    """A new database of its own for one test on the session's server; its SQLAlchemy URL."""
    import hashlib
    import re

    digest = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:8]
    return postgres_server.database(re.sub(r"[^a-z0-9_]+", "_", request.node.name.lower())[:40] + "_" + digest)
