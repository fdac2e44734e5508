"""The project's one error type for bad input.

Entry points turn it into a single line on stderr and exit status 2; everything else is a bug and keeps its
traceback.
"""


class TransferError(Exception):
    """Bad input the user can fix: the message says what is wrong and what to do."""
