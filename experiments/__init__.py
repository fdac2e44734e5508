"""The study grids, one module each defining `GRID` (a `tf_transfer.studies.grid.Grid`): its runs as data and
its report. `STUDIES` names them; adding a study is adding a module here, its flagfile in `flags/` and a line below.

>>> from experiments import load_study
>>> load_study("transfer_learning").name
'transfer_learning'
"""

from experiments import (adaptive_freezing, hart_sentiment, layer_freezing, li_multitask, methods, methods_full,
                         methods_paired, own_data_freezing, stack_conll, stack_quora, transfer_learning)
from tf_transfer.core.errors import TransferError

STUDIES = {"transfer_learning": transfer_learning.GRID, "layer_freezing": layer_freezing.GRID,
           "stack_quora": stack_quora.GRID, "multitask": li_multitask.GRID, "sentiment": hart_sentiment.GRID,
           "freezing": own_data_freezing.GRID, "methods": methods.GRID,
           "methods_full": methods_full.GRID, "adaptive_freezing": adaptive_freezing.GRID,
           "methods_paired": methods_paired.GRID, "stack_conll": stack_conll.GRID}


def load_study(name: str):
    if name not in STUDIES:
        raise TransferError(f"unknown study {name!r}: choose one of {', '.join(sorted(STUDIES))}")
    return STUDIES[name]
