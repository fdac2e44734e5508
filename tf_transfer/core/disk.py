"""A full disk as one line, and digests of what the project writes and later reads back.

A full disk (or a full quota) is the user's to fix, not a bug: every place that writes a run's records (summary,
checkpoints, TensorBoard events, the frozen-prefix cache, a grid's records) writes inside `writing(path, what)`,
which turns `OSError` ENOSPC/EDQUOT into `DiskFull`, a `TransferError` the commands print as one `error:` line
(exit status 2). Every such write is a temporary file renamed into place, so what was finished before stays whole.

Example:

>>> from tf_transfer.core import disk
>>> with disk.writing("runs/rte/summary.json", "the run's summary"):  # doctest: +SKIP
...     write_it()
"""

from __future__ import annotations

import contextlib
import errno
import hashlib

from tf_transfer.core.errors import TransferError

# ENOSPC: the file system is full; EDQUOT: the user's quota is.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(TransferError):
    """No space left while writing `what` to `path`: what was finished before is kept, and a rerun goes on."""

    def __init__(self, path: str, what: str):
        super().__init__(f"no space left on {path} while writing {what}: the last finished epoch is kept; free space "
                         "and rerun")
        self.path, self.what = path, what

    def __reduce__(self):  # raised in a grid's child process and re-raised in the grid's
        return type(self), (self.path, self.what)


def is_no_space(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in NO_SPACE


@contextlib.contextmanager
def writing(path: str, what: str):
    """Runs the block; an `OSError` for a full disk or quota in it becomes `DiskFull(path, what)`."""
    try:
        yield
    except OSError as e:
        if is_no_space(e):
            raise DiskFull(path, what) from None
        raise


def file_sha256(path: str, chunk_bytes: int = 1 << 22) -> str:
    """The SHA-256 of a file's bytes, read in chunks (a cache's array can be gigabytes). About 0.13 s for 77 MB
    here: a frozen-prefix cache of RTE's train split is checked once per process in a fraction of an epoch."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk_bytes), b""):
            digest.update(block)
    return digest.hexdigest()
