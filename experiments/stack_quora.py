"""Stack-and-finetune on Quora question pairs ("To Tune or Not To Tune? How About the Best of Both Worlds?",
arXiv 1907.05338): three heads under its three strategies, and the paper's own comparison (Sim-Transformer and BiMPM
trained with stack-and-finetune against fine-tune-only BERT with [CLS] and two fully connected layers), 3 seeds.

The fixed settings are `flags/stack_common.flags`; the cpu variant is what `reports/stack_quora/` was made with
(all-MiniLM-L6-v2, 4,000 training pairs of the CS224N Quora sample, mixed_bfloat16).

    python -m tf_transfer.experiments run stack_quora --variant=cpu --runs_dir=reports/stack_quora/runs \\
        --data=../shared/data/cs224n_minbert/quora-dev.csv --dry_run
    python -m tf_transfer.experiments report stack_quora --variant=cpu --runs_dir=reports/stack_quora/runs \\
        --out=/tmp/stack_quora
"""

from __future__ import annotations

import os

from tf_transfer.core.errors import TransferError
from tf_transfer.studies.grid import Grid, Variant

STRATEGIES = ["stack_and_finetune", "finetune_only", "stack_only"]
SEEDS = [0, 1, 2]
# The paper's comparison: its two matching heads with stack-and-finetune, and its fine-tune-only baseline.
PAPER_MODELS = {"paper_sim_transformer": ("sim_transformer", "stack_and_finetune"),
                "paper_bimpm": ("bimpm", "stack_and_finetune"),
                "paper_mlp": ("mlp", "finetune_only")}
PARTS = {"grid": {"head": ["linear", "bimpm", "bilstm"], "strategy": STRATEGIES, "seed": [0]},
         **{part: {"head": [head], "strategy": [strategy], "seed": SEEDS}
            for part, (head, strategy) in PAPER_MODELS.items()}}


def layout(runs_dir: str, grid: Grid, run: dict) -> str:
    """`<runs_dir>/<head>_<strategy>` for the heads-by-strategies grid; the paper's comparison under
    `<runs_dir>/paper/<head>_<strategy>/seed<seed>`."""
    name = f"{run['head']}_{run['strategy']}"
    if run["part"] == "grid":
        return os.path.join(runs_dir, name)
    return os.path.join(runs_dir, "paper", name, f"seed{run['seed']}")


def data_settings(data_dir, data) -> dict:
    """--data, or quora-dev.csv in --data_dir."""
    if data:
        return {"data": data}
    if data_dir:
        return {"data": os.path.join(data_dir, "quora-dev.csv")}
    raise TransferError("--data is required: the Quora pairs file, e.g. ../shared/data/cs224n_minbert/quora-dev.csv "
                        "(or --data_dir, the folder holding quora-dev.csv)")


def write_report(collected: list, out: str, grid: Grid, variant: str) -> str:
    """The comparison table of the completed runs (`python -m tf_transfer.stack --report`) in `<out>/table.md`."""
    from tf_transfer.reporting import stack_report

    folders = [c["folder"] for c in collected if c["summary"]]
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "table.md")
    with open(path, "w") as f:
        f.write(stack_report.report_table(folders) + "\n")
    return path


GRID = Grid(
    name="stack_quora",
    paper='"To Tune or Not To Tune? How About the Best of Both Worlds?" (arXiv 1907.05338), Quora',
    flagfile="flags/stack_common.flags",
    axes={},
    parts=PARTS,
    variants={
        "paper": Variant(settings={"task": "quora"}),
        "cpu": Variant(settings={"task": "quora", "preset": "all_minilm_l6_v2_en", "precision": "mixed_bfloat16",
                                 "max_train_examples": 4000}),
    },
    report=write_report,
    study="stack",
    layout=layout,
    data_settings=data_settings,
    shown=("task", "head", "strategy", "seed", "preset", "max_train_examples"),
)
