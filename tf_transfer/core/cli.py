"""What every entry point shares: flag parsing and the one-line error with exit status 2.

absl exits with status 1 and the whole usage text on a bad flag; the project promises one line and status 2.

Example:

>>> from tf_transfer.core import cli
>>> cli.run(main)  # in an entry module's `if __name__ == "__main__":`  # doctest: +SKIP
"""

from __future__ import annotations

import sys

from absl import app, flags

from tf_transfer.core import disk
from tf_transfer.core import flags as shared_flags
from tf_transfer.core.errors import TransferError


def fail(message: str, status: int = 2) -> None:
    """Prints `error: message` as one line on stderr and exits with `status` (2: bad input)."""
    print(f"error: {' '.join(str(message).split())}", file=sys.stderr, flush=True)
    sys.exit(status)


def log_like_a_command() -> None:
    """In a child process a command started (`tf_transfer.core.isolated`: a grid's run, a sweep's trial): absl's
    log lines at INFO, as the command's own process prints them. The child never parses a command line, so absl's
    flags are marked parsed: otherwise its first log line is preceded by absl's "WARNING: Logging before flag
    parsing goes to stderr." (once per run of a grid, per trial of a sweep)."""
    from absl import logging

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    logging.use_absl_handler()
    logging.set_verbosity(logging.INFO)


# The command line last parsed (a command asks whether it named a --flagfile: absl keeps no record of one).
ARGV: list = []


# absl's help flags print the usage and exit with status 1; asked for, help is a success (status 0).
HELP_FLAGS = ("help", "helpshort", "helpfull", "helpxml", "?")


def parse_flags(argv):
    """Parses `argv` into the flags; a bad flag is one `error:` line and exit status 2; `--help` exits 0."""
    ARGV[:] = list(argv)
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        fail(f"{e} (see --help)")
    except SystemExit as e:
        asked = any(arg.lstrip("-").split("=")[0] in HELP_FLAGS for arg in argv[1:] if arg.startswith("-"))
        raise SystemExit(0 if asked and e.code == 1 else e.code) from None


def flagfile_given() -> bool:
    """Whether the command line last parsed named a `--flagfile`."""
    return any(arg.lstrip("-").split("=")[0] == "flagfile" for arg in ARGV[1:])


def call(main, argv):
    """`main(argv)` with `TransferError` turned into one line and exit status 2, and Ctrl-C into one line and the
    shell's status for it (130)."""
    try:
        return main(argv)
    except TransferError as e:
        fail(str(e))
    except OSError as e:
        if not disk.is_no_space(e):
            raise
        # A write no writer named (a library's own files): the same line, with the file the system names.
        fail(str(disk.DiskFull(e.filename or "the disk", "the run's files")))
    except KeyboardInterrupt:
        fail("interrupted: every finished epoch and run is kept; rerun the same command to go on from there",
             status=130)


def run(main, common_flags: dict = None) -> None:
    """`absl.app.run(main)` with bad flags and `TransferError` turned into one line and exit status 2.

    `common_flags` (from `tf_transfer.core.flags.common`) puts the command's defaults on the shared flags before
    the command line is parsed.
    """
    if common_flags:
        shared_flags.apply(common_flags)
    # TensorFlow's C++ logging level is settled by `import tf_transfer` (core/quiet.py): a level set here would
    # come after the user's choice was read and would hide the detail --verbosity=1 asks for.
    app.run(lambda argv: call(main, argv), flags_parser=parse_flags)
