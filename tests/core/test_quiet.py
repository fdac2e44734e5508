"""The quiet start (tf_transfer/core/quiet.py): TensorFlow's C++ start-up noise off stderr, real errors kept.

Subprocesses without TF_CPP_MIN_LOG_LEVEL (conftest sets it for everything else), so the filter goes in as it does
for a user; the filter's rules themselves are checked in-process on bytes.
"""

import os
import subprocess
import sys

import pytest

from conftest import REPO
from tf_transfer.core import quiet

NOISE = ("I0000 ", "W0000 ", "WARNING: All log messages before absl::InitializeLog()",
         "To enable the following instructions:")
CUINIT = (b"E0000 00:00:1795454780.463915   20683 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
          b"Failed call to cuInit: UNKNOWN ERROR (303)\n")
START = (
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    b"I0000 00:00:1795454776.977952   20683 port.cc:153] oneDNN custom operations are on.\n"
    b"I0000 00:00:1795454776.978272   20683 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will "
    b"not be used.\n"
    b"I0000 00:00:1795454777.015893   20683 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use "
    b"available CPU instructions in performance-critical operations.\n"
    b"To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the appropriate "
    b"compiler flags.\n"
    b"W0000 00:00:1795454777.1   20683 x.cc:1] a warning\n"
)
REAL = (
    b"I1123 17:29:10.998299 140559983270784 glue.py:98] absl Python logging keeps its line\n"
    b"E0000 00:00:1795454780.5   20683 foo.cc:12] a real C++ error\n"
    b"Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nRuntimeError: boom\n"
    b"error: one line of ours\n"
)


def _feed(*chunks):
    line_filter = quiet.LineFilter()
    return b"".join(line_filter.feed(chunk) for chunk in chunks) + line_filter.flush()


def test_filter_drops_the_start_up_noise_and_keeps_the_rest():
    assert _feed(START + START + CUINIT + REAL) == REAL


def test_filter_works_across_chunk_boundaries():
    data = START + CUINIT + REAL
    assert _feed(*[data[i:i + 7] for i in range(0, len(data), 7)]) == REAL


@pytest.mark.parametrize("dtype", [b"DT_HALF", b"DT_INT64"])
def test_onednn_s_fallback_on_a_cpu_without_avx512_is_not_shown_as_an_error(dtype):
    """Every cached run on an AVX2 machine printed the float16 line (seen on a user's first run, 2026-11-25); a first
    run on a 6,000-row file the int64 one (2026-12-01)."""
    fallback = (b"E0000 00:00:1795637560.640121   17347 util.cc:131] oneDNN supports " + dtype + b" only on platforms "
                b"with AVX-512. Falling back to the default Eigen-based implementation if present.\n")
    assert _feed(fallback + REAL) == REAL
    other = fallback.replace(b"oneDNN supports", b"oneDNN kernel failed for")
    assert _feed(other) == other  # another oneDNN error is shown


def test_cuinit_failure_with_a_driver_is_a_real_error():
    assert _feed(CUINIT) == CUINIT
    no_device = CUINIT.replace(b"UNKNOWN ERROR (303)", b"CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected")
    assert _feed(no_device) == b""


def test_continuation_line_dropped_only_after_a_dropped_line():
    tail = START.splitlines(keepends=True)[4]
    assert _feed(b"something\n" + tail) == b"something\n" + tail


def test_partial_line_goes_out_at_once():
    line_filter = quiet.LineFilter()
    assert line_filter.feed(b"epoch 1 [====>   ]\r") == b"epoch 1 [====>   ]\r"
    assert line_filter.feed(b"epoch 1 [========]\n") == b"epoch 1 [========]\n"
    assert line_filter.feed(b"I0000 00:00:") == b""  # could still be noise: held until its newline
    assert line_filter.feed(b"1.5 1 a.cc:1] x\nok\n") == b"ok\n"


@pytest.mark.parametrize("environ, argv, expected", [
    ({}, [], True),
    ({"TF_CPP_MIN_LOG_LEVEL": "2"}, [], True),  # the usual way to quiet TensorFlow: its start-up lines need us
    ({"TF_CPP_MIN_LOG_LEVEL": "3"}, [], True),
    ({"TF_CPP_MIN_LOG_LEVEL": "1"}, [], False),  # warnings asked for: nothing filtered
    ({"TF_CPP_MIN_LOG_LEVEL": "2", quiet.MARKER: "2"}, [], True),  # the level a quiet parent set
    ({"TF_CPP_MIN_LOG_LEVEL": "0", quiet.MARKER: "2"}, [], False),
    ({}, ["--task=rte", "--verbosity=1"], False),
    ({}, ["--verbosity", "2"], False),
    ({}, ["-v=1"], False),
    ({}, ["--verbosity=0"], True),
    ({}, ["--verbosity=1", "--verbosity=-1"], True),
    ({}, ["--", "--verbosity=1"], True),
])
def test_when_the_filter_is_wanted(environ, argv, expected):
    assert quiet.wanted(environ, argv) is expected


def _run(*args, env=None, script=None):
    full_env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", quiet.MARKER, "GLUE_DIR")}
    command = [sys.executable, "-c", script, *args] if script else [sys.executable, "-m", *args]
    return subprocess.run(command, cwd=REPO, env={**full_env, **(env or {})}, capture_output=True, text=True,
                          timeout=300)


def _noise(stderr):
    return [line for line in stderr.splitlines() if line.startswith(NOISE) or "failed call to cuInit" in line]


def test_bad_input_prints_exactly_one_error_line():
    done = _run("tf_transfer.glue", "--task=nope")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown task 'nope'"), done.stderr


# docs/python.md's imports, in its order: tf_transfer first, then Keras and keras-hub (which import TensorFlow).
PAGE_IMPORTS = ("import tf_transfer\nimport keras, keras_hub\nimport tensorflow as tf\n"
                "print(tf.config.list_physical_devices('CPU'))")


def test_importing_tf_transfer_first_keeps_tensorflow_quiet():
    done = _run(script=PAGE_IMPORTS)
    assert done.returncode == 0, done.stderr
    assert "CPU" in done.stdout
    assert _noise(done.stderr) == [], done.stderr
    with open(os.path.join(REPO, "docs", "python.md"), encoding="utf-8") as f:
        first_block = f.read().split("```python\n", 1)[1]
    assert first_block.startswith("import tf_transfer"), first_block[:200]  # the page imports it first


def test_a_level_set_by_the_user_is_respected():
    """A level that asks for TensorFlow's info lines is left as it is and nothing is filtered: what TensorFlow then
    prints is its own (checked without importing it, about 8 CPU seconds a process)."""
    script = ("import os, sys, tf_transfer\n"
              "print(os.environ['TF_CPP_MIN_LOG_LEVEL'], sys.modules['tf_transfer.core.quiet']._installed is None)")
    done = _run(script=script, env={"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert (done.returncode, done.stdout.split()) == (0, ["0", "True"]), done.stderr


def test_verbosity_turns_the_filter_off():
    script = "import os, tf_transfer; print(os.environ.get('TF_CPP_MIN_LOG_LEVEL'))"
    assert _run("--verbosity=1", script=script).stdout.strip() == "None"
    assert _run(script=script).stdout.strip() == quiet.LEVEL


def test_real_errors_pass_through_in_order():
    script = (
        "import os, sys, tf_transfer\n"
        "os.write(2, b'E0000 00:00:1.5 7 foo.cc:12] a real C++ error\\n')\n"
        "print('error: ours', file=sys.stderr)\n"
        "raise RuntimeError('boom')\n"
    )
    done = _run(script=script)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[:3] == ["E0000 00:00:1.5 7 foo.cc:12] a real C++ error", "error: ours",
                         "Traceback (most recent call last):"], done.stderr
    assert lines[-1] == "RuntimeError: boom"


@pytest.mark.parametrize("ending", ["sys.exit(2)", "os._exit(2)", "os.abort()"])
def test_last_line_before_exit_is_not_lost(ending):
    done = _run(script=f"import os, sys, tf_transfer\nprint('error: last words', file=sys.stderr)\n{ending}\n")
    assert done.returncode in (2, -6)
    assert done.stderr == "error: last words\n"


def test_a_child_with_its_own_stderr_filters_too():
    child = "import sys, tf_transfer; print(sys.modules['tf_transfer.core.quiet']._installed is not None)"
    script = ("import subprocess, sys, tf_transfer\n"
              f"print(subprocess.run([sys.executable, '-c', {child!r}], capture_output=True, text=True).stdout)\n")
    assert _run(script=script).stdout.strip() == "True"
