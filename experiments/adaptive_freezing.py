"""Adaptive freezing measured: AutoFreeze (`--method=autofreeze`) and FreezeOut (`--method=freezeout`) against full
fine-tuning and the best static k (the last k blocks over the frozen-prefix cache), on STS-B and MRPC (whole
training sets) and 10,000 sentences of SST-2, all-MiniLM-L6-v2, batch 32, up to 4 epochs (patience 2), 6% warm-up
then linear decay (flags/adaptive_freezing.flags).

The protocol, per task:

1. **Full fine-tuning's rate** is searched at seed 0 over `RATES` (3e-5, 1e-4, 3e-4: 10x end to end, around the
   methods_full study's best SST-2 rate): the best on validation (at its best epoch; the split held out of GLUE
   train, never GLUE dev). Every other run takes that rate: AutoFreeze keeps full fine-tuning's hyper-parameters,
   as its paper does (it is a change to how fine-tuning is run, not a new recipe), FreezeOut anneals each layer from
   it (its own 1/t_i scaling on top), and the static k trains at it.
2. **The best static k** comes from a seed-0 freezing grid at that rate: the last k = 1..L-1 blocks trained over the
   cache of the frozen rest. It is the cheapest k (CPU seconds to its best epoch, the cache's build charged) whose
   validation score is within 0.5 points of full fine-tuning's seed-0 score (the search's run at the chosen rate),
   else the best-scoring k (`choose_k`). That is what a user with a sweep would pick, so it is the bar adaptive
   freezing must beat to save the user the sweep.
3. **Seeds 1-5 of all four** then run, a seed at a time across the four methods, so that whole pairs land early.
   A seed fixes the validation split and the training order, so the four runs of a seed pair; the report compares
   them paired (`tf_transfer/reporting/adaptive_freezing_report.py`). The seed-0 runs chose the rate and the k,
   and are not compared.

Tasks run cheapest first (`TASKS`), by the training tokens of an epoch padded to the 16-token buckets the batches
are drawn from, counted with the model's WordPiece vocabulary on 2026-11-25: STS-B 188k in 162 batches, MRPC 200k in
104, SST-2's sample 215k in 313 (its short sentences pad most, and it takes the most optimizer steps). MRPC is
stopped and scored on accuracy (flags/adaptive_freezing_mrpc.flags says why).

**Budget.** BERT's fine-tuning budget (4 epochs, linear decay, patience 2), not methods_full's 10 epochs: at 10
epochs the study would take about 50 core-hours on this project's 2-core AMD EPYC VMs. Measured there before this
study (one core, methods_full): a full fine-tuning epoch of 5,000 SST-2 sentences 145-160 CPU s, the last 2 blocks
over the cache 41-52 s. Planned with full fine-tuning at about 250-350 s per epoch on each task here (U = one full
fine-tuning run of 4 epochs, about 0.4 h with scoring): per task 3 U (search), about 3 U (the static grid: k/6 of
an epoch per k, plus its caches), 5 U (full fine-tuning), 3-4 U each for AutoFreeze and FreezeOut (about 0.6 and 0.8
U a run), up to 3 U for the static k: about 20 U, 8 h per task, **about 24 core-hours in all** (84 runs), i.e. 4
sessions of one core, 2 of both (`--shard`). Measured by the study's first runs (2026-11-25, core 1 of that VM):
STS-B full fine-tuning 244-261 CPU s per epoch, a whole 4-epoch run 20 min on the core alone (U = 0.35 h). The
report estimates what is left from the runs so far.

    python -m tf_transfer.experiments run adaptive_freezing --variant=cpu --dry_run
    for t in stsb mrpc sst2; do
      taskset -c 1 python -m tf_transfer.experiments run adaptive_freezing --variant=cpu --tasks=$t \\
          --runs_dir=reports/runs --cache_dir=runs/cache --data_dir=$GLUE_DIR
    done
    python -m tf_transfer.experiments report adaptive_freezing --variant=cpu --runs_dir=reports/runs \\
        --data_dir=$GLUE_DIR --out=reports/adaptive_freezing
"""

from __future__ import annotations

from tf_transfer.reporting import adaptive_freezing_report
from tf_transfer.reporting.adaptive_freezing_protocol import (AUTOFREEZE, FREEZEOUT, FULL, GRID_PART, SEARCH_PART,
                                                              SEARCH_SEED, STATIC, choose_k, seed_part, time_to_best)
from tf_transfer.reporting.rate_search import best_validation, pick_rate
from tf_transfer.studies import grid as studies
from tf_transfer.studies.grid import Grid, Variant
from tf_transfer.training import run_record

TASKS = ["stsb", "mrpc", "sst2"]
SEEDS = [1, 2, 3, 4, 5]
RATES = [3e-5, 1e-4, 3e-4]
SEARCHED, BEST_K, WITH_K = "<searched>", "<best static k>", "<cached with k>"

# The compared methods, in the report's order.
METHODS = {
    FULL: {"method": "freeze", "trainable_layers": "all"},
    AUTOFREEZE: {"method": "autofreeze", "trainable_layers": "all"},
    FREEZEOUT: {"method": "freezeout", "trainable_layers": "all"},
    STATIC: {"method": "freeze", "trainable_layers": BEST_K, "cache_frozen": WITH_K},
}


def _search_probe(settings: dict, lr: float) -> dict:
    """The seed-0 full fine-tuning run at `lr` of the task of `settings`."""
    return {**settings, **METHODS[FULL], "cache_frozen": False, "lr": lr, "seed": SEARCH_SEED, "part": SEARCH_PART}


def _grid_probe(settings: dict, lr: float, k: int) -> dict:
    """The seed-0 run of the last `k` blocks over the cache, at `lr`, of the task of `settings`."""
    return {**settings, "method": "freeze", "trainable_layers": k, "cache_frozen": True, "lr": lr,
            "seed": SEARCH_SEED, "part": GRID_PART}


def _completed(runs_dir: str, study: Grid, settings: dict):
    summary = run_record.read_summary(studies.run_dir(runs_dir, study, settings))
    return summary if summary and summary.get("completed") else None


def searched_lr(settings: dict, runs_dir: str, study: Grid):
    """Full fine-tuning's rate of `RATES` with the best validation score at seed 0 (never GLUE dev); None while a
    search run is unfinished."""
    scores = {}
    for lr in RATES:
        summary = _completed(runs_dir, study, _search_probe(settings, lr))
        if summary is None:
            return None
        scores[lr] = best_validation(summary)
    return pick_rate(scores)


def static_grid(settings: dict, runs_dir: str, study: Grid):
    """`(full fine-tuning's seed-0 validation score, {k: (validation score, seconds to best)})` at the searched
    rate of `settings` (resolved); None while a run of them is unfinished."""
    full = _completed(runs_dir, study, _search_probe(settings, settings["lr"]))
    if full is None:
        return None
    found = {}
    for k in range(1, studies.preset_depth(settings["preset"])):
        summary = _completed(runs_dir, study, _grid_probe(settings, settings["lr"], k))
        if summary is None:
            return None
        found[k] = (best_validation(summary), time_to_best(summary))
    return best_validation(full), found


def best_static_k(settings: dict, runs_dir: str, study: Grid):
    """The static k the seeds train (`choose_k` over the seed-0 grid); None while the grid is unfinished."""
    grid = static_grid(settings, runs_dir, study)
    return None if grid is None else choose_k(grid[1], grid[0])


def cached_with_k(settings: dict, runs_dir: str, study: Grid) -> bool:
    """The static k's runs cache their frozen prefix (a placeholder until then: nothing to cache at 'all')."""
    return True


def _axes(name: str) -> dict:
    return {key: [value] for key, value in METHODS[name].items()}


DIFFERENCES = (
    "Not the papers' protocols: one small encoder (all-MiniLM-L6-v2, 6 blocks) on one CPU core per run, BERT's "
    "fine-tuning budget (up to 4 epochs, 6% warm-up then linear decay, AdamW with weight decay 0.01, batch 32), "
    "early stopping with patience 2 on a 10% validation split of GLUE train (SST-2: a 10,000-sentence sample, 1.5% "
    "held out).",
    "AutoFreeze (arXiv 2102.01386) fine-tuned BERT-base on a GPU; its rule here is the authors' (gradient-norm "
    "change against the median of the training blocks' every tenth of the steps), with full fine-tuning's searched "
    "rate and schedule; the frozen prefix's outputs are kept in memory, not on disk.",
    "FreezeOut (arXiv 1706.04983) trained ResNets and DenseNets with SGD and momentum; here its cubic schedule "
    "(t0 0.8) and 1/t_i rate scaling act on the embeddings and the blocks of a transformer under AdamW, the top "
    "block annealing with the head (--min_trainable_layers=1).",
    "MRPC is stopped and scored on accuracy, not F1: a constant 'paraphrase' scores F1 0.81, which would leave "
    "no room to test whether full fine-tuning learned (10 points above the constant).",
    "Times are the process's CPU seconds, each run pinned to one core: what the run computed, not its wall time "
    "where another process shared the core; the caches' builds and the new step's compilation at each freeze are inside AutoFreeze's and FreezeOut's "
    "epochs, so their times include them. The study's first runs (2026-11-25 from 21:59 UTC) shared their core "
    "with the methods_full study's: the CPU clock keeps each run's own seconds, but shared caches and memory "
    "bandwidth slow both a little, and each run's `cpu_utilization` per epoch says how much of the wall time it "
    "had.",
)

RUN_COMMAND = ("for t in " + " ".join(TASKS) + "; do taskset -c 1 python -m tf_transfer.experiments run "
               "adaptive_freezing --variant=cpu --tasks=$t --runs_dir=reports/runs --cache_dir=runs/cache "
               "--data_dir=$GLUE_DIR; done")


def every_k_below_all(depth: int) -> list:
    """The static grid's k: 1..L-1 blocks trained over the cache of the rest."""
    return list(range(1, depth))


GRID = Grid(
    name="adaptive_freezing",
    paper="AutoFreeze (Liu et al., arXiv 2102.01386) and FreezeOut (Brock et al., arXiv 1706.04983)",
    flagfile="flags/adaptive_freezing.flags",
    axes={"task": TASKS, "seed": SEEDS, "lr": [SEARCHED]},
    parts={SEARCH_PART: {**_axes(FULL), "lr": RATES, "seed": [SEARCH_SEED]},
           GRID_PART: {"method": ["freeze"], "cache_frozen": [True], "seed": [SEARCH_SEED],
                       "trainable_layers": every_k_below_all},
           **{seed_part(seed, name): {**_axes(name), "seed": [seed]} for seed in SEEDS for name in METHODS}},
    dependent={"lr": searched_lr, "trainable_layers": best_static_k, "cache_frozen": cached_with_k},
    task_flagfiles={"sst2": "flags/adaptive_freezing_sst2.flags", "mrpc": "flags/adaptive_freezing_mrpc.flags"},
    variants={"cpu": Variant(differences=DIFFERENCES, clock="cpu", commands=(RUN_COMMAND,))},
    report=adaptive_freezing_report.write_report,
    shown=("task", "method", "trainable_layers", "lr", "seed", "cache_frozen"),
)
