"""What to train, compared on score, training time, trainable parameters and peak memory: full fine-tuning, freezing
all but the last 2 blocks (with the frozen-prefix cache and without), LoRA as in its paper (ranks 4, 8 and 16 on
query and value of every block; rank 8 on the last 2 blocks over the cache) and BitFit, on MRPC, STS-B, RTE, CoLA and
a sample of SST-2, 3 seeds, all-MiniLM-L6-v2.

Each method trains at its own learning rate, searched per task: three rates at seed 0 (`search_*` parts), the one
with the best validation score (at its best epoch, never GLUE dev) is then run at seeds 1 and 2, and its seed-0 run
is the search's own. Methods of one family share their family's search: freezing without the cache takes the cached
freezing's rate (the same weights train), LoRA at ranks 4 and 16 and on the last 2 blocks take rank 8's (updates are
scaled by alpha/r, which in the LoRA paper's words "helps to reduce the need to retune hyperparameters when we vary
r"). The report opens with the LoRA, BitFit and Ladder Side-Tuning claims checked against these runs
(`tf_transfer/reporting/methods_report.py`).

    python -m tf_transfer.experiments run methods --variant=cpu --dry_run
    python -m tf_transfer.experiments run methods --variant=cpu --data_dir=$GLUE_DIR
    python -m tf_transfer.experiments report methods --variant=cpu --runs_dir=runs --out=reports/methods
"""

from __future__ import annotations

from tf_transfer.models import methods
from tf_transfer.studies import grid as studies
from tf_transfer.studies.glue.glue_settings import GlueSettings
from tf_transfer.studies.glue.pinned_shards import pinned_commands
from tf_transfer.studies.grid import Grid, Variant
from tf_transfer.training import run_record
from tf_transfer.reporting import methods_report
from tf_transfer.reporting.method_comparison import Design
from tf_transfer.reporting.rate_search import best_validation, pick_rate

TASKS = ["mrpc", "stsb", "rte", "cola", "sst2"]
SEEDS = [0, 1, 2]
PENDING_LR = "<searched>"

# The compared settings, in the report's order. `family` names the search whose rate a method takes. LoRA's A was
# drawn from N(0, 1/r) when these runs were made (2026-11-25); the default is now the paper's Kaiming-uniform.
METHODS = {
    "full fine-tuning": {"family": "full", "method": "freeze", "trainable_layers": "all"},
    "last 2, cached": {"family": "freeze", "method": "freeze", "trainable_layers": 2, "cache_frozen": True},
    "last 2, not cached": {"family": "freeze", "method": "freeze", "trainable_layers": 2, "cache_frozen": False},
    "LoRA r4": {"family": "lora", "method": "lora", "lora_rank": 4, "trainable_layers": "all",
                "lora_init": "gaussian"},
    "LoRA r8": {"family": "lora", "method": "lora", "lora_rank": 8, "trainable_layers": "all",
                "lora_init": "gaussian"},
    "LoRA r16": {"family": "lora", "method": "lora", "lora_rank": 16, "trainable_layers": "all",
                 "lora_init": "gaussian"},
    "LoRA r8, last 2, cached": {"family": "lora", "method": "lora", "lora_rank": 8, "trainable_layers": 2,
                                "cache_frozen": True, "lora_init": "gaussian"},
    "BitFit": {"family": "bitfit", "method": "bitfit", "trainable_layers": "all"},
}
# Each family's searched rates (LoRA's and BitFit's sit 10-100x above full fine-tuning's, as in their papers) and the
# method whose runs search them.
SEARCH = {
    "full": ([2e-5, 5e-5, 1e-4], "full fine-tuning"),
    "freeze": ([1e-4, 3e-4, 1e-3], "last 2, cached"),
    "lora": ([3e-4, 1e-3, 3e-3], "LoRA r8"),
    "bitfit": ([1e-3, 3e-3, 1e-2], "BitFit"),
}


def _axes(settings: dict) -> dict:
    return {key: [value] for key, value in settings.items() if key != "family"}


def method_of(settings: dict) -> str:
    """The name in `METHODS` of a run's settings."""
    for name, method in METHODS.items():
        if all(settings.get(k, GlueSettings.ADDED_SETTINGS.get(k)) == v for k, v in method.items()
               if k not in ("family", "cache_frozen")) and \
                settings.get("cache_frozen", False) == method.get("cache_frozen", False):
            return name
    raise KeyError(f"no method of the study has settings {settings}")


def family_of(settings: dict) -> str:
    return METHODS[method_of(settings)]["family"]


def search_runs(settings: dict) -> list:
    """The settings of the search runs whose best rate `settings` (a run of the study) takes."""
    rates, searcher = SEARCH[family_of(settings)]
    # The searcher's own method settings (LoRA's rank) and cache, not the run's: the family shares its rate.
    probe = {k: v for k, v in settings.items() if k not in (*methods.registry.owners(), "cache_frozen")}
    probe.update({k: v for k, v in METHODS[searcher].items() if k != "family"})
    probe.setdefault("cache_frozen", False)
    if not probe["cache_frozen"]:
        probe.pop("cache_dir", None)
    return [{**probe, "lr": lr, "seed": 0, "part": f"search_{family_of(settings)}"} for lr in rates]


def searched_lr(settings: dict, runs_dir: str, study: Grid):
    """The rate of the family's search with the best validation score on this task; None while a search run is
    unfinished. Chosen on the validation split held out of GLUE train, never on GLUE dev (the test set)."""
    scores = {}
    for probe in search_runs(settings):
        summary = run_record.read_summary(studies.run_dir(runs_dir, study, probe))
        if not summary or not summary.get("completed"):
            return None
        scores[probe["lr"]] = best_validation(summary)
    return pick_rate(scores)


CPU_DIFFERENCES = (
    "At most 1,000 training examples per task (a seeded sample of the 90% of GLUE train not held out for "
    "validation) and at most 4 epochs instead of 10, for CPU time: a small-data comparison (BitFit's claim is about "
    "small to medium data; LoRA's RoBERTa results used the whole training sets and 25-80 epochs).",
    "A constant rate, the project's default, for every method; the LoRA paper warmed up and decayed the rate "
    "linearly.",
    "Three rates per family, searched per task at seed 0 (the papers searched wider grids); LoRA r4, r16 and r8 on "
    "the last 2 blocks took r8's rate, and the compared runs include the searches' own seed-0 runs.",
    "LoRA's A was drawn from N(0, 1/r) (Hugging Face PEFT's 'gaussian' option), not the paper's code's "
    "Kaiming-uniform (std 0.03 at d_in = 384): 8.5x / 4.2x / 2.1x larger at r = 4 / 8 / 16, so a rate searched at "
    "r = 8 is not rate-neutral for the other ranks (the methods_full study draws A as the paper does).",
    "The LoRA paper's GLUE results (Table 2) start MRPC, RTE and STS-B from a model already adapted to MNLI; here "
    "every task starts from the pretrained encoder.",
    "Each run is pinned to one core and two shards run side by side; times are the process's CPU seconds: what the "
    "run computed (its wall time was longer wherever another process shared its core).",
)

GRID = Grid(
    name="methods",
    paper="LoRA (Hu et al., arXiv 2106.09685), BitFit (Ben Zaken et al., arXiv 2106.10199) and Ladder Side-Tuning "
          "(Sung et al., arXiv 2206.06522), beside freezing (this project's frozen-prefix cache)",
    flagfile="flags/methods.flags",
    axes={"task": TASKS, "seed": SEEDS, "lr": [PENDING_LR]},
    parts={**{f"search_{family}": {**_axes(METHODS[searcher]), "lr": rates, "seed": [0]}
              for family, (rates, searcher) in SEARCH.items()},
           **{name: _axes(method) for name, method in METHODS.items()}},
    dependent={"lr": searched_lr},
    task_flagfiles={"sst2": "flags/methods_sst2.flags"},
    variants={
        "paper": Variant(),
        "cpu": Variant(settings={"max_train_examples": 1000, "max_epochs": 4},
                       task_settings={"sst2": {"max_train_examples": 1000}},
                       differences=CPU_DIFFERENCES, clock="cpu", commands=pinned_commands("methods")),
    },
    report=methods_report.report_of(Design(
        METHODS, TASKS, method_of, pick_rate, compared_seeds_searched=True,
        gate_decided="after this study's runs (no verdict changed by it)",
        search_labels={f"search_{family}": searcher for family, (_, searcher) in SEARCH.items()})),
    shown=("task", "method", "lora_rank", "trainable_layers", "lr", "seed", "cache_frozen"),
)
