"""How much of BERT to train, on your own data: the last k encoder blocks for every k from 0 (head and pooler only)
to L (every block, embeddings frozen), and full fine-tuning, at each learning rate and seed given (without
`--lrs`, each setting at the rate a first run takes for it: `glue_settings.FIRST_RUN_LR`).

The data set is the `experiments` command's: a file (`--train_file` with `--text_columns` and `--label_column`,
optionally `--validation_file`, `--test_file`, `--regression`), or a GLUE task or `tfds:<name>` (`--task`).
Frozen prefixes are cached (`--cache_frozen`, computed once per split and reused across the grid's rates and seeds);
pass `--cache_frozen=false` for freezing alone. The report compares every setting with full fine-tuning: score,
time to the best epoch (cache build charged), time saved, peak memory, and a figure of score against time.

    python -m tf_transfer.experiments run freezing --train_file=reviews.csv --text_columns=review \\
        --label_column=stars --lrs=1e-4 --seeds=0,1,2 --runs_dir=runs
    python -m tf_transfer.experiments report freezing --train_file=reviews.csv --text_columns=review \\
        --label_column=stars --lrs=1e-4 --seeds=0,1,2 --runs_dir=runs --out=reports/freezing_reviews
"""

from __future__ import annotations

from tf_transfer.reporting import own_data_freezing_report
from tf_transfer.studies.grid import FIRST_RUN_RATE, Grid, Variant


def every_depth(depth: int) -> list:
    """k = 0..L and full fine-tuning ("all": the embeddings train too)."""
    return [*range(depth + 1), "all"]


GRID = Grid(
    name="freezing",
    paper="none: a sweep of the freezing rule on the user's own data set",
    flagfile="flags/freezing.flags",
    axes={"trainable_layers": every_depth, "lr": [FIRST_RUN_RATE], "seed": [0, 1, 2]},
    variants={"paper": Variant(settings={"cache_frozen": "auto"}),
              "cpu": Variant(settings={"cache_frozen": "auto"})},
    report=own_data_freezing_report.write_report,
    shown=("task", "trainable_layers", "lr", "seed", "cache_frozen", "max_epochs", "preset", "train_file"),
)
