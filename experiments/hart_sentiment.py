"""Hart, "Task-Specific Training: The Benefits of Fine-Tuning BERT": sparse baselines (10-fold cross-validation)
against BERT frozen, top-2 and unfrozen (10 seeds each) on one labelled text file; every step writes into one
folder, whose report.md compares them with Welch's t-tests.

The cpu variant is what `reports/sentiment/hart/` was made with: all-MiniLM-L6-v2, mixed_bfloat16, the paper's
logistic head, 300 frozen epochs, on 1,000 SST-2 sentences in Kaggle's train.csv layout
(`python reports/sentiment_trial/make_kaggle_csv.py --sst2=../shared/data/glue/SST-2/train.tsv --rows_per_class=500
--output=train.csv`; the real disaster-tweet file is not on this machine).

    python -m tf_transfer.experiments run sentiment --variant=cpu --runs_dir=/tmp/hart --data=train.csv --dry_run
    python -m tf_transfer.experiments report sentiment --variant=cpu --runs_dir=reports/sentiment/hart
"""

from __future__ import annotations

from tf_transfer.core import settings as settings_lib
from tf_transfer.studies.sentiment import sentiment_study
from tf_transfer.studies.grid import Grid, Variant
from tf_transfer.studies.sentiment.sentiment_settings import SentimentBertSettings
from tf_transfer.studies.sentiment.sentiment_study import COMMAND_FLAGS

FLAGFILE = "flags/hart_bert_common.flags"
STEPS = ("sparse", "frozen", "top2", "unfrozen")
FLAGFILES = {"sparse": "flags/hart_sparse.flags", "frozen": "flags/hart_bert_frozen.flags",
             "top2": "flags/hart_bert_top2.flags", "unfrozen": "flags/hart_bert_unfrozen.flags"}


def step_settings(step: str) -> dict:
    common = settings_lib.read_flagfile(FLAGFILE, SentimentBertSettings, COMMAND_FLAGS)
    own = settings_lib.read_flagfile(FLAGFILES[step], SentimentBertSettings, COMMAND_FLAGS)
    return {k: [v] for k, v in own.items() if k not in common or common[k] != v}


def after_run(run: dict, folder: str) -> None:
    """report.md rewritten from all the folder holds once a step has run (as `python -m tf_transfer.sentiment` does
    after each approach), and the sparse step's sparse_baselines.md."""
    from tf_transfer.reporting import sentiment_report

    if run["approach"] == "sparse":
        sentiment_report.write_sparse_markdown(folder, sentiment_study.labelled_texts(run), run["folds"], run["seed"])
    sentiment_report.write_report(folder)


def write_report(collected: list, out: str, grid: Grid, variant: str) -> str:
    """report.md and the box plots, written into the folder that holds the results (as `--approach=report`)."""
    from tf_transfer.reporting import sentiment_report

    return sentiment_report.write_report(collected[0]["folder"])


CPU_PARTS = {step: step_settings(step) for step in STEPS}
CPU_PARTS["frozen"] = {**CPU_PARTS["frozen"], "epochs": [300]}  # sized for 800 training sentences (docs/sentiment.md)

GRID = Grid(
    name="sentiment",
    paper='Hart, "Task-Specific Training: The Benefits of Fine-Tuning BERT"',
    flagfile=FLAGFILE,
    axes={},
    parts={step: step_settings(step) for step in STEPS},
    variants={
        "paper": Variant(),
        "cpu": Variant(settings={"preset": "all_minilm_l6_v2_en", "precision": "mixed_bfloat16", "hidden_units": 0},
                       parts=CPU_PARTS),
    },
    report=write_report,
    study="sentiment",
    after_run=after_run,
    shown=("approach", "bert_mode", "runs", "epochs", "seed", "preset", "precision"),
)
