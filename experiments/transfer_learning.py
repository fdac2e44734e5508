"""Wang, "A New Computationally Efficient Method to Tune BERT Networks – Transfer Learning".

Eight GLUE tasks × {last 1, 2, 3, 4 blocks trainable; everything trainable} × lr {1e-3, 2e-5} × 2 seeds, batch
size 1, up to 30 epochs, patience 2 (the fixed settings are `flags/wang_common.flags`). CoLA is scored and stopped
on accuracy, the paper's metric (`flags/wang_cola.flags`); its runs made before that stopped on Matthews
correlation and stand in until rerun. The cpu variant adds an uncached transfer arm (RTE, MRPC): freezing alone,
without the frozen-prefix cache, to tell the two savings apart.

    python -m tf_transfer.experiments run transfer_learning --dry_run
    python -m tf_transfer.experiments run transfer_learning --variant=cpu
    python -m tf_transfer.experiments report transfer_learning --variant=cpu --out=reports/transfer_learning
"""

from __future__ import annotations

from tf_transfer.reporting.transfer_learning_paper import RATES, SEEDS, SETTINGS, TASKS, UNCACHED_TASKS
from tf_transfer.reporting import transfer_learning_report
from tf_transfer.studies.glue.pinned_shards import pinned_commands
from tf_transfer.studies.grid import Grid, Variant

CPU_DIFFERENCES = (
    "Backbone all-MiniLM-L6-v2 (6 blocks, 384 wide) instead of BERT-base (12 blocks, 768 wide): the only "
    "pretrained BERT available offline here. 'last k blocks' therefore trains k of 6 blocks, not k of 12.",
    "Batch size 32 instead of 1 and at most 10 epochs instead of 30, for CPU time (except the [batch1] cell: "
    "RTE, last 2 blocks, both rates, at batch size 1).",
    "Transfer runs use the frozen-prefix cache (--cache_frozen): the frozen blocks run once, in inference mode, "
    "so dropout is off inside them (the paper kept it on). Cache build time is added to every time shown.",
    "Only RTE, MRPC, STS-B and CoLA (QQP, MNLI and QNLI's training data are not on this machine; SST-2 is too "
    "large for the CPU budget).",
    "Length-bucketed padding (batches padded to their bucket, not to 128): same model outputs, other batch "
    "composition.",
    "Mixed precision (--precision=mixed_bfloat16: bfloat16 matrix products, float32 weights and optimizer): on "
    "an Intel machine's AMX units about 1.5x the float32 training rate on one core (benchmarks/README.md; the "
    "runs' machines are listed below, and on an AMD EPYC without AMX the gain was not measured). The "
    "paper trained in float32.",
    "Each run is pinned to one core and two shards run side by side; times are the process's CPU seconds: "
    "what the run computed, longer in wall time wherever another process shared its core (the paper: wall time on a "
    "GPU).",
)


def earlier_protocol(settings: dict):
    """CoLA runs stopped on Matthews correlation before the grid scored CoLA on accuracy (Wang's metric): the
    completed run of the same settings under the earlier protocol stands in until this one has run."""
    if settings["task"] == "cola" and settings.get("metric") == "accuracy":
        return ({**settings, "metric": None},
                "stopped early and scored on Matthews correlation, before CoLA was stopped on accuracy")
    return None


GRID = Grid(
    name="transfer_learning",
    paper='Wang, "A New Computationally Efficient Method to Tune BERT Networks – Transfer Learning"',
    flagfile="flags/wang_common.flags",
    axes={"task": TASKS, "trainable_layers": SETTINGS, "lr": RATES, "seed": SEEDS},
    task_flagfiles={"cola": "flags/wang_cola.flags"},
    stand_in=earlier_protocol,
    variants={
        "paper": Variant(),
        "cpu": Variant(
            settings={"preset": "all_minilm_l6_v2_en", "batch_size": 32, "max_epochs": 10, "cache_frozen": "auto",
                      "precision": "mixed_bfloat16"},
            axes={"task": ["rte", "mrpc", "stsb", "cola"], "trainable_layers": SETTINGS, "lr": RATES,
                  "seed": SEEDS},
            parts={"main": {},
                   "batch1": {"task": ["rte"], "trainable_layers": [2], "seed": [0], "batch_size": [1]},
                   # Freezing alone: the transfer settings without the frozen-prefix cache, to tell its saving apart.
                   "uncached": {"task": UNCACHED_TASKS, "trainable_layers": [1, 2, 3, 4], "cache_frozen": [False]}},
            differences=CPU_DIFFERENCES,
            clock="cpu",
            commands=pinned_commands("transfer_learning"),
        ),
    },
    report=transfer_learning_report.write_report,
)
