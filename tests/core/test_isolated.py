import os

import pytest

from tf_transfer.core import isolated
from tf_transfer.core.errors import TransferError


def _fail(message):
    raise TransferError(message)


def test_call_runs_in_another_process_and_returns_its_result():
    assert isolated.call(os.getpid) != os.getpid()
    assert isolated.call(divmod, 7, 2) == (3, 1)


def test_an_error_in_the_child_is_raised_here_with_its_type_and_message():
    with pytest.raises(TransferError, match="no RTE/ folder"):
        isolated.call(_fail, "no RTE/ folder")

