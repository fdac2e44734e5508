"""What to train, at a budget where the methods learn: full fine-tuning, the last 2 blocks over the frozen-prefix
cache, LoRA r8 (all blocks, and the last 2 over the cache) and BitFit on the whole training sets of MRPC, RTE, STS-B
and CoLA and 5,000 sentences of SST-2, all-MiniLM-L6-v2, up to 10 epochs (patience 3), warm-up then linear decay.

Each method searches its own rate per task at seed 0: four rates spanning 30x (`RATES`), and one more beyond the end
(`BEYOND`) when the best of the four sits at an end; the best on validation (at its best epoch; never GLUE dev) is
then run at 5 fresh seeds (1-5), which the report compares, paired across methods (a seed fixes the validation split
and the training order, so runs of one seed see the same data). The search runs are not in the comparison: their
rate was chosen on them.

    python -m tf_transfer.experiments run methods_full --variant=cpu --dry_run
    taskset -c 1 python -m tf_transfer.experiments run methods_full --variant=cpu --tasks=sst2 \\
        --runs_dir=reports/runs --cache_dir=runs/cache --data_dir=$GLUE_DIR
    python -m tf_transfer.experiments report methods_full --variant=cpu --runs_dir=reports/runs \\
        --out=reports/methods_full
"""

from __future__ import annotations

from tf_transfer.reporting import methods_report
from tf_transfer.reporting.method_comparison import Design
from tf_transfer.reporting.rate_search import best_validation, pick_rate
from tf_transfer.studies import grid as studies
from tf_transfer.studies.glue.compared_methods import method_named
from tf_transfer.studies.glue.pinned_shards import pinned_commands
from tf_transfer.studies.grid import Grid, Variant
from tf_transfer.training import run_record

# Cheapest first (tokens per epoch: SST-2's and CoLA's sentences are short), so that whole tasks land early.
TASKS = ["sst2", "cola", "stsb", "mrpc", "rte"]
SEARCH_SEED = 0
SEEDS = [1, 2, 3, 4, 5]
SEARCHED, BEYOND_PENDING = "<searched>", "<beyond the end>"

# The compared methods, in the report's order.
METHODS = {
    "full fine-tuning": {"method": "freeze", "trainable_layers": "all"},
    "last 2, cached": {"method": "freeze", "trainable_layers": 2, "cache_frozen": True},
    "LoRA r8": {"method": "lora", "lora_rank": 8, "trainable_layers": "all"},
    "LoRA r8, last 2, cached": {"method": "lora", "lora_rank": 8, "trainable_layers": 2, "cache_frozen": True},
    "BitFit": {"method": "bitfit", "trainable_layers": "all"},
}
# Four rates per method, 30x apart end to end (LoRA's and BitFit's sit 10-100x above fine-tuning's, as in their
# papers), and the rate beyond each end that is tried when the best of the four sits there.
RATES = {
    "full fine-tuning": [1e-5, 3e-5, 1e-4, 3e-4],
    "last 2, cached": [3e-5, 1e-4, 3e-4, 1e-3],
    "LoRA r8": [1e-4, 3e-4, 1e-3, 3e-3],
    "LoRA r8, last 2, cached": [1e-4, 3e-4, 1e-3, 3e-3],
    "BitFit": [3e-4, 1e-3, 3e-3, 1e-2],
}
BEYOND = {"full fine-tuning": (3e-6, 1e-3), "last 2, cached": (1e-5, 3e-3), "LoRA r8": (3e-5, 1e-2),
          "LoRA r8, last 2, cached": (3e-5, 1e-2), "BitFit": (1e-4, 3e-2)}


def method_of(settings: dict) -> str:
    """The name in `METHODS` of a run's settings."""
    return method_named(METHODS, settings)


def _probe(settings: dict, lr: float, part: str) -> dict:
    return {**settings, "lr": lr, "seed": SEARCH_SEED, "part": part}


def _scores(settings: dict, runs_dir: str, study: Grid, rates) -> dict:
    """`{rate: best validation score}` of the method's seed-0 runs at `rates`; None while one is unfinished."""
    scores = {}
    for lr in rates:
        summary = run_record.read_summary(studies.run_dir(runs_dir, study, _probe(settings, lr, "search")))
        if not summary or not summary.get("completed"):
            return None
        scores[lr] = best_validation(summary)
    return scores


def rate_beyond(settings: dict, runs_dir: str, study: Grid):
    """The rate past the end of the search where its best rate sits at that end; `grid.NOT_NEEDED` where it sits
    inside; None while the search is unfinished."""
    name = method_of(settings)
    scores = _scores(settings, runs_dir, study, RATES[name])
    if scores is None:
        return None
    best, rates = pick_rate(scores), RATES[name]
    below, above = BEYOND[name]
    return below if best == rates[0] else above if best == rates[-1] else studies.NOT_NEEDED


def searched_lr(settings: dict, runs_dir: str, study: Grid):
    """The best rate of the method's search on this task (the rate beyond the end included where it ran), chosen on
    the validation split held out of GLUE train, never on GLUE dev; None while a search run is unfinished."""
    beyond = rate_beyond(settings, runs_dir, study)
    if beyond is None:
        return None
    rates = RATES[method_of(settings)] + ([] if beyond == studies.NOT_NEEDED else [beyond])
    scores = _scores(settings, runs_dir, study, rates)
    return None if scores is None else pick_rate(scores)


def resolve_lr(settings: dict, runs_dir: str, study: Grid):
    return (rate_beyond if settings["lr"] == BEYOND_PENDING else searched_lr)(settings, runs_dir, study)


def _axes(name: str) -> dict:
    return {key: [value] for key, value in METHODS[name].items()}


DIFFERENCES = (
    "Not a paper's protocol: one small encoder (all-MiniLM-L6-v2) and one shared recipe (batch 32, AdamW with "
    "weight decay 0.01, 6% warm-up then linear decay to 0 over 10 epochs, early stopping with patience 3 on a 10% "
    "validation split of GLUE train; SST-2: 5,000 training sentences and 1.5% held out).",
    "The LoRA paper's GLUE results (Table 2) fine-tune RoBERTa and DeBERTa for 25-80 epochs at batch 16, and start "
    "MRPC, RTE and STS-B from a model already adapted to MNLI; BitFit's tune BERT-base and -large with their own "
    "rate grids. Neither compares against freezing over a cache.",
    "Each run is pinned to one core; times are the process's CPU seconds: what the run computed (its wall time was "
    "longer wherever another process shared its core).",
)

GRID = Grid(
    name="methods_full",
    paper="LoRA (Hu et al., arXiv 2106.09685) and BitFit (Ben Zaken et al., arXiv 2106.10199), beside freezing "
          "(this project's frozen-prefix cache)",
    flagfile="flags/methods_full.flags",
    axes={"task": TASKS, "seed": SEEDS, "lr": [SEARCHED]},
    parts={**{f"search: {name}": {**_axes(name), "lr": RATES[name], "seed": [SEARCH_SEED]} for name in METHODS},
           **{f"beyond: {name}": {**_axes(name), "lr": [BEYOND_PENDING], "seed": [SEARCH_SEED]} for name in METHODS},
           **{name: _axes(name) for name in METHODS}},
    dependent={"lr": resolve_lr},
    task_flagfiles={"sst2": "flags/methods_full_sst2.flags"},
    variants={"cpu": Variant(differences=DIFFERENCES, clock="cpu", commands=pinned_commands("methods_full"))},
    report=methods_report.report_of(Design(
        METHODS, TASKS, method_of, pick_rate,
        stopped="after 9 SST-2 rate-search runs and before any compared run, its design was replaced by the "
                "methods_paired study's (seeds from a precision calculation, pairs kept on one kind of machine, the "
                "adaptive-freezing study's 4-epoch protocol: see reports/methods_paired/). Its runs stay here as "
                "they are; nothing below is a verdict.")),
    shown=("task", "method", "lora_rank", "trainable_layers", "lr", "seed", "cache_frozen"),
)
