"""The study grids, one module each defining `STUDY` (a `tf_transfer.studies.grid.Study`): its runs as data and
its report. `STUDIES` names them; adding a study is adding a module here, its flagfile in `flags/` and a line below.

>>> from experiments import load_study
>>> load_study("transfer_learning").name
'transfer_learning'
"""

from experiments import layer_freezing, transfer_learning
from tf_transfer.core.errors import TransferError

STUDIES = {"transfer_learning": transfer_learning.STUDY, "layer_freezing": layer_freezing.STUDY}


def load_study(name: str):
    if name not in STUDIES:
        raise TransferError(f"unknown study {name!r}: choose one of {', '.join(sorted(STUDIES))}")
    return STUDIES[name]
