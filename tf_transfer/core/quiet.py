"""A quiet start: TensorFlow's C++ start-up chatter filtered out of stderr, real errors kept.

Why a filter on file descriptor 2: TensorFlow's shared libraries log through Abseil before anything calls
`absl::InitializeLog()`, and Abseil writes those lines straight to fd 2 whatever `TF_CPP_MIN_LOG_LEVEL` says (the
level is read later); two copies of Abseil print each line twice. Python-level redirection never sees them.

Why a separate process and not a reader thread: a thread dies with the process, so whatever the process wrote just
before `os._exit`, an `abort()` after a C++ CHECK failure or a segfault (the most important lines: the F-level line,
faulthandler's traceback) would be lost in the pipe. The filter process outlives its writer, reads to the end of
the pipe and forwards everything it does not recognise as noise, in order. At a normal exit (also `sys.exit`) the
writer restores fd 2 and waits for the filter to finish, so nothing shows up after the shell's prompt.

The rule, applied once, when `tf_transfer` is first imported (`install`):
- the user set `TF_CPP_MIN_LOG_LEVEL` below 2 (asking for TensorFlow's INFO or WARNING lines): nothing is
  filtered, the user's level holds; at 2 or 3 (the usual way to quiet TensorFlow, which its own start-up lines
  ignore) the filter goes in and the user's level is kept;
- `--verbosity=N` or `-v=N` with N >= 1 on the command line (absl's flag; not looked for in flagfiles): nothing is
  filtered and TensorFlow's C++ logging is left at its own default, everything;
- otherwise, in a main process not run by pytest, before TensorFlow is imported: the filter goes over fd 2 and
  `TF_CPP_MIN_LOG_LEVEL=2` keeps TensorFlow's later INFO and WARNING lines out too. `TF_TRANSFER_QUIET=2` beside it
  says the level is ours, so a `tf_transfer` child process given another stderr (captured by its parent) filters
  its own start-up too.

What is dropped (`LineFilter`): Abseil's "All log messages before absl::InitializeLog()" line; INFO and WARNING
lines in Abseil's pre-initialisation format (`I0000 00:00:<seconds> <thread> <file>:<line>] ...`, never produced by
Python's absl logging, whose lines carry a real date) and the continuation line of the CPU-feature notice; the
"failed call to cuInit" ERROR line, only when the same output has said there is no CUDA driver or the error is "no
CUDA-capable device" (on a machine with a GPU and a broken driver it is a real error and passes); oneDNN's ERROR lines
that a type (float16, int64) falls back to Eigen on a CPU without AVX-512 (the expected path there). Everything else
passes unchanged, partial lines (prompts, `\\r` progress bars) at once.

This file runs as the filter process itself (`python -I -S quiet.py`): the standard library only.
"""

from __future__ import annotations

import os
import re
import sys

LEVEL = "2"
MARKER = "TF_TRANSFER_QUIET"
_WAIT_AT_EXIT = 5.0  # seconds; only reached when a child process still holds the pipe open

_ABSL_PREINIT = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# Abseil's format before InitializeLog: no calendar yet, so date and time are 0000 00:00 and then epoch seconds.
_CPP_LINE = re.compile(rb"^([IWEF])0000 00:00:\d+\.\d+ +\d+ [^\]\s]+:\d+\] ?(.*)$")
_CPU_FEATURE_TAIL = re.compile(rb"^To enable the following instructions: .*rebuild TensorFlow with the appropriate "
                               rb"compiler flags\.$")
_NO_DRIVER = b"Could not find cuda drivers on your machine"
_CUINIT = b"failed call to cuInit"
_NO_DEVICE = (b"CUDA_ERROR_NO_DEVICE", b"no CUDA-capable device")
# Logged as an error on every CPU without AVX-512 when a type oneDNN leaves to AVX-512 meets one of its kernels
# (float16: the frozen-prefix cache's outputs; int64: an op of a first run on a 6,000-row file, not on 64 rows):
# TensorFlow falls back to its Eigen kernel, which is what it should do; nothing is wrong.
_ONEDNN_FALLBACK = re.compile(rb"^oneDNN supports DT_[A-Z0-9]+ only on platforms with AVX-512\. Falling back to the "
                              rb"default Eigen-based")
# A partial line that could still become noise is held until its newline; anything else goes out at once.
_NOISE_STARTS = (_ABSL_PREINIT, b"I0000 00:00:", b"W0000 00:00:", b"E0000 00:00:", b"To enable the following")
_MAX_HELD = 1 << 16


class LineFilter:
    """Bytes in, bytes out: drops the noise lines described in the module docstring, keeps order."""

    def __init__(self):
        self._held = b""  # start of a line not yet decided
        self._mid_line = False  # the current line's start was already forwarded
        self._after_dropped = False  # the previous line was dropped (its continuation may follow)
        self._no_driver = False

    def feed(self, data: bytes) -> bytes:
        out = []
        data = self._held + data
        self._held = b""
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            line = data[start:end + 1]
            start = end + 1
            if self._mid_line:
                self._mid_line = False
                out.append(line)
            elif self._drop(line.rstrip(b"\r\n")):
                self._after_dropped = True
            else:
                self._after_dropped = False
                out.append(line)
        rest = data[start:]
        if rest:
            if self._mid_line or len(rest) > _MAX_HELD or not any(
                    p.startswith(rest) or rest.startswith(p) for p in _NOISE_STARTS):
                out.append(rest)
                self._mid_line = True
                self._after_dropped = False
            else:
                self._held = rest
        return b"".join(out)

    def flush(self) -> bytes:
        held, self._held = self._held, b""
        return held

    def _drop(self, line: bytes) -> bool:
        if line == _ABSL_PREINIT:
            return True
        if self._after_dropped and _CPU_FEATURE_TAIL.match(line):
            return True
        match = _CPP_LINE.match(line)
        if not match:
            return False
        severity, message = match.groups()
        if _NO_DRIVER in message:
            self._no_driver = True
        if severity in (b"I", b"W"):
            return True
        if severity == b"E" and _ONEDNN_FALLBACK.match(message):
            return True
        return (severity == b"E" and _CUINIT in message
                and (self._no_driver or any(text in message for text in _NO_DEVICE)))


def wanted(environ=os.environ, argv=None) -> bool:
    """Whether the filter should go in: the user set no C++ level and asked for no more detail (`--verbosity`)."""
    level = environ.get("TF_CPP_MIN_LOG_LEVEL")
    if level is not None and environ.get(MARKER) != level and not _quiet_level(level):
        return False
    return _verbosity(sys.argv[1:] if argv is None else argv) < 1


def _quiet_level(level: str) -> bool:
    """A user's `TF_CPP_MIN_LOG_LEVEL` that asks for no INFO or WARNING lines (2: errors only; 3: fatal only)."""
    return level.strip() in ("2", "3")


def _verbosity(args) -> int:
    value = -1  # absl's default; the last occurrence wins, as in absl
    args = list(args)
    for i, arg in enumerate(args):
        if arg == "--":
            break
        name, eq, text = arg.lstrip("-").partition("=")
        if not arg.startswith("-") or name not in ("verbosity", "v"):
            continue
        if not eq:
            text = args[i + 1] if i + 1 < len(args) else ""
        try:
            value = int(text)
        except ValueError:
            pass
    return value


_installed = None


def install() -> bool:
    """Puts the filter over fd 2 when `wanted` and it can still help; True when it is in place.

    Not in pytest (its fd capturing swaps fd 2 under us), not in a multiprocessing child (its fd 2 is the parent's,
    already filtered), not once TensorFlow is imported (too late), not off POSIX. Never raises: without the filter
    the run is only noisier.
    """
    global _installed
    if _installed is not None or not wanted() or "tensorflow" in sys.modules or "pytest" in sys.modules:
        return False
    if "multiprocessing" in sys.modules and sys.modules["multiprocessing"].parent_process() is not None:
        return False
    # The level even when the filter cannot start: TensorFlow's later INFO and WARNING lines at least stay out (a
    # user's quieter level stays).
    level = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    level = level if level is not None and _quiet_level(level) else LEVEL
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = level
    os.environ[MARKER] = level
    if os.name != "posix" or not sys.executable:
        return False
    try:
        _installed = _start()
    except (OSError, ValueError):
        return False
    return True


def _start():
    import atexit
    import subprocess

    saved = os.dup(2)  # the real stderr, for the filter to write to and to restore at exit
    read_end, write_end = os.pipe()
    try:
        # A new session: Ctrl-C in the terminal must not kill the filter before it forwards the traceback.
        process = subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__)], stdin=read_end,
                                   stdout=saved, stderr=saved, start_new_session=True)
    except BaseException:
        for fd in (saved, read_end, write_end):
            os.close(fd)
        raise
    os.close(read_end)
    sys.stderr.flush()
    os.dup2(write_end, 2)
    pipe = os.fstat(write_end)
    os.close(write_end)
    atexit.register(_stop, process, saved, (pipe.st_dev, pipe.st_ino), os.getpid())
    return process


def _stop(process, saved, pipe, pid):
    """At exit: hands fd 2 back to the real stderr and lets the filter drain, so late lines keep their place."""
    if os.getpid() != pid:  # a forked child exiting through atexit: the filter is its parent's
        return
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    try:
        now = os.fstat(2)
        if (now.st_dev, now.st_ino) == pipe:  # fd 2 still ours; someone else's replacement is left alone
            os.dup2(saved, 2)
    except OSError:
        pass
    _stop_resource_tracker()
    try:
        process.wait(timeout=_WAIT_AT_EXIT)
    except Exception:  # a child still holds the pipe: the filter finishes on its own when it lets go
        pass


def _stop_resource_tracker() -> None:
    """multiprocessing's resource tracker (started by a "spawn" pool, e.g. a grid's runs in their own processes)
    holds a copy of fd 2, the filter's pipe, until this process has exited: the filter would wait for its end of file
    the whole `_WAIT_AT_EXIT` (5 s at every such command's exit). Stopped first, it lets go; it has nothing left to
    clean once the pools are shut down."""
    tracker = getattr(sys.modules.get("multiprocessing.resource_tracker"), "_resource_tracker", None)
    try:
        if tracker is not None and getattr(tracker, "_fd", None) is not None:
            tracker._stop()  # private, Python 3.8+ (3.11 here); without it the exit is only 5 s slower
    except Exception:
        pass


def _serve() -> None:
    """The filter process: fd 0 (the pipe) through `LineFilter` to fd 1 (the real stderr) until end of file."""
    line_filter = LineFilter()
    broken = False
    while True:
        try:
            data = os.read(0, 65536)
        except InterruptedError:
            continue
        out = line_filter.feed(data) if data else line_filter.flush()
        while out and not broken:
            try:
                out = out[os.write(1, out):]
            except InterruptedError:
                continue
            except OSError:  # the real stderr is gone (a closed pipe); keep draining so the writer never blocks
                broken = True
        if not data:
            return


if __name__ == "__main__":
    _serve()
