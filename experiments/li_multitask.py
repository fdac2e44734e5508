"""Li, "Finetune minBERT for Multi-Tasks Learning" (Stanford CS224N): one BERT for SST sentiment, Quora paraphrase
and STS similarity, one row per compared setting (a flagfile `flags/li_*.flags` each: heads first then
fine-tuning, pooling, layer-wise learning-rate decay, the summed schedule, the concatenated pair head).

The cpu variant is what `reports/multitask/` was made with (all-MiniLM-L6-v2, 1,000 training examples per task,
4 epochs, 64 tokens, mixed_bfloat16). `li_heads_then_finetune` starts from `li_heads_first`'s best epoch, so it
waits for that row.

    python -m tf_transfer.experiments run multitask --variant=cpu --runs_dir=reports/multitask/runs \\
        --data_dir=../shared/data/cs224n_minbert --dry_run
    python -m tf_transfer.experiments report multitask --variant=cpu --runs_dir=reports/multitask/runs --out=/tmp/mt
"""

from __future__ import annotations

import os

from tf_transfer.core import settings as settings_lib
from tf_transfer.studies.grid import Grid, Variant, run_dir
from tf_transfer.studies.multitask.multitask_settings import MultitaskSettings
from tf_transfer.studies.multitask.multitask_study import STUDY
from tf_transfer.training import run_record

FLAGFILE = "flags/li_common.flags"
ROWS = ("li_heads_first", "li_heads_then_finetune", "li_finetune", "li_pooling_mean", "li_pooling_mixed", "li_llrd",
        "li_llrd_mixed", "li_summed", "li_concat")
# The row whose best epoch `li_heads_then_finetune` starts from (--init_from).
HEADS_FIRST = "<li_heads_first>"


def row_settings(row: str) -> dict:
    """What a row's flagfile sets beyond the common flagfile (its own --output_dir aside: the grid places runs)."""
    common = settings_lib.read_flagfile(FLAGFILE, MultitaskSettings, STUDY.command_flags)
    own = settings_lib.read_flagfile(f"flags/{row}.flags", MultitaskSettings, STUDY.command_flags)
    values = {k: v for k, v in own.items() if k != "output_dir" and (k not in common or common[k] != v)}
    if "init_from" in values:
        values["init_from"] = HEADS_FIRST
    return values


def heads_first_run(settings: dict, runs_dir: str, grid: Grid):
    """The folder of the completed `li_heads_first` run, or None while it is not."""
    folder = run_dir(runs_dir, grid, {**settings, "part": "li_heads_first"})
    summary = run_record.read_summary(folder)
    return folder if summary and summary.get("completed") else None


def write_report(collected: list, out: str, grid: Grid, variant: str) -> str:
    """The claims table and the rows' best-on-dev scores (`python -m tf_transfer.multitask --report`): into the
    generated blocks of `<out>/README.md` where it has them (the rest of it is written by hand), else into
    `<out>/claims.md` and `<out>/table.md`. With --data_dir the constant prediction the claims are gated on is
    computed from the data and written beside the runs (`multitask_claims.constant_for`)."""
    from tf_transfer.reporting import multitask_claims
    from tf_transfer.reporting import multitask_report

    done = [c for c in collected if c["summary"]]
    runs_dir = os.path.dirname(os.path.normpath(done[0]["folder"]))
    data_dir = next((c["settings"]["data_dir"] for c in collected if c["settings"].get("data_dir")), None)
    command = (f"python -m tf_transfer.experiments report {grid.name} --variant={variant} --runs_dir={runs_dir} "
               f"--data_dir={data_dir} --out={out}")
    constant = multitask_claims.constant_for(done, runs_dir, data_dir, command)
    return multitask_claims.write_blocks(out, {
        "claims table": multitask_claims.claims_lines(
            {row: [c["summary"] for c in done if c["settings"]["part"] == row] for row in ROWS}, constant),
        "rows' table": [multitask_report.report_table([c["folder"] for c in done])]})


GRID = Grid(
    name="multitask",
    paper='Li, "Finetune minBERT for Multi-Tasks Learning" (Stanford CS224N)',
    flagfile=FLAGFILE,
    axes={},
    parts={row: {k: [v] for k, v in row_settings(row).items()} for row in ROWS},
    dependent={"init_from": heads_first_run},
    variants={
        "paper": Variant(),
        "cpu": Variant(settings={"preset": "all_minilm_l6_v2_en", "precision": "mixed_bfloat16",
                                 "max_train_examples": 1000, "max_epochs": 4, "max_seq_length": 64}),
    },
    report=write_report,
    study="multitask",
    shown=("trainable_layers", "lr", "pair_head", "schedule", "llrd", "pooling_sst", "max_epochs", "seed", "preset"),
)
