"""The stack-and-finetune study's row of the table of studies (`tf_transfer.studies.study_registry`): a grid's run is
one `python -m tf_transfer.stack` run (`StackSettings`; the flagfiles' `--strategy` is `stack_strategy`), its result a
completed `summary.json`, its data the training file (--data).

Example:

>>> import types
>>> from tf_transfer.studies.stack.stack_study import STUDY
>>> grid = types.SimpleNamespace(name="mine")
>>> STUDY.run_dir("runs", grid, {"task": "quora", "head": "bimpm", "strategy": "finetune_only", "seed": 1,
...                              "part": "main"})
'runs/mine/main/bimpm_finetune_only/seed1'
"""

from __future__ import annotations

import os

from tf_transfer.core.errors import TransferError
from tf_transfer.studies.stack.stack_settings import StackSettings
from tf_transfer.studies.study import Study


def run_dir(runs_dir: str, grid, run: dict) -> str:
    """`<runs_dir>/<grid>/<part>/<heads>_<strategy>/seed<seed>`, as the stack command's default folder; a grid
    whose part varies other settings places its runs itself (`Grid.layout`, as experiments/stack_quora.py)."""
    heads = "+".join(run.get("ensemble") or ()) or run["head"]
    return os.path.join(runs_dir, grid.name, run["part"], f"{heads}_{run['strategy']}", f"seed{run['seed']}")


def train(run: dict, folder: str) -> None:
    from tf_transfer.studies.stack.stack_ensemble import run_stack

    run_stack(StackSettings.from_dict({k: v for k, v in run.items() if k != "part"}), folder)


def data_settings(data_dir, data) -> dict:
    if not data:
        raise TransferError("--data is required: the training file of the grid's --task (as python -m "
                            "tf_transfer.stack --data)")
    return {"data": data}


STUDY = Study(name="stack", settings_class=StackSettings, train=train, run_dir=run_dir, data_settings=data_settings)
