"""The study grids, one module each defining `GRID` (a `tf_transfer.studies.grid.Grid`): its runs as data and
its report. `GRIDS` names them (the table of studies, what each kind of run is, is
`tf_transfer.studies.study_registry.STUDIES`); adding a grid is adding a module here, its flagfile in `flags/` and a
line below.

>>> from experiments import load_grid
>>> load_grid("transfer_learning").name
'transfer_learning'
"""

from experiments import (adaptive_freezing, hart_sentiment, layer_freezing, li_multitask, methods, methods_full,
                         methods_paired, own_data_freezing, stack_conll, stack_quora, transfer_learning)
from tf_transfer.core.errors import TransferError

GRIDS = {"transfer_learning": transfer_learning.GRID, "layer_freezing": layer_freezing.GRID,
         "stack_quora": stack_quora.GRID, "multitask": li_multitask.GRID, "sentiment": hart_sentiment.GRID,
         "freezing": own_data_freezing.GRID, "methods": methods.GRID,
         "methods_full": methods_full.GRID, "adaptive_freezing": adaptive_freezing.GRID,
         "methods_paired": methods_paired.GRID, "stack_conll": stack_conll.GRID}


def load_grid(name: str):
    """The grid named `name` (what `python -m tf_transfer.experiments run NAME` runs)."""
    if name not in GRIDS:
        raise TransferError(f"unknown grid {name!r}: choose one of {', '.join(sorted(GRIDS))}")
    return GRIDS[name]
