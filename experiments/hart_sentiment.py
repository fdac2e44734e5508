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

import os

from tf_transfer.core import settings as settings_lib
from tf_transfer.core.errors import TransferError
from tf_transfer.studies.grid import Grid, Variant
from tf_transfer.studies.sentiment_settings import SentimentBertSettings

# The command's flags the study's flagfiles set besides the BERT settings.
COMMAND_FLAGS = {"approach": str, "folds": int, "text_column": str, "label_column": str, "labels": str}
FLAGFILE = "flags/hart_bert_common.flags"
STEPS = ("sparse", "frozen", "top2", "unfrozen")
FLAGFILES = {"sparse": "flags/hart_sparse.flags", "frozen": "flags/hart_bert_frozen.flags",
             "top2": "flags/hart_bert_top2.flags", "unfrozen": "flags/hart_bert_unfrozen.flags"}


def step_settings(step: str) -> dict:
    common = settings_lib.read_flagfile(FLAGFILE, SentimentBertSettings, COMMAND_FLAGS)
    own = settings_lib.read_flagfile(FLAGFILES[step], SentimentBertSettings, COMMAND_FLAGS)
    return {k: [v] for k, v in own.items() if k not in common or common[k] != v}


def bert_settings(run: dict) -> SentimentBertSettings:
    return SentimentBertSettings.from_dict({k: v for k, v in run.items() if k not in COMMAND_FLAGS
                                            and k not in ("part", "data")})


def layout(runs_dir: str, grid: Grid, run: dict) -> str:
    return runs_dir  # every step writes its own files into the one folder its report reads


def result(run: dict, folder: str):
    """The step's completed results file in `folder`, or None (sparse_baselines.json is written once every fold is
    done; a BERT model's file says whether all its seeds are)."""
    from tf_transfer.studies import sentiment_results

    sparse = run["approach"] == "sparse"
    path = os.path.join(folder, sentiment_results.SPARSE_JSON if sparse else bert_settings(run).file_name)
    results = sentiment_results.read_json(path) if os.path.exists(path) else None
    return results if results and (sparse or results.get("completed")) else None


def train(run: dict, folder: str) -> None:
    """The step as `python -m tf_transfer.sentiment` runs it, then report.md rewritten from all the folder holds."""
    from tf_transfer.data.labelled_texts import read_labelled_texts
    from tf_transfer.reporting.sentiment_report import write_report, write_sparse_markdown
    from tf_transfer.studies.sentiment_bert import run_bert
    from tf_transfer.studies.sentiment_sparse import run_sparse_baselines

    data = read_labelled_texts(run["data"], run["text_column"], run["label_column"], [], run["labels"], None)
    if run["approach"] == "sparse":
        run_sparse_baselines(data, folder, run["folds"], run["seed"])
        write_sparse_markdown(folder, data, run["folds"], run["seed"])
    else:
        run_bert(data, folder, bert_settings(run))
    write_report(folder)


def data_settings(data_dir, data) -> dict:
    if not data:
        raise TransferError("--data is required: a CSV or TSV file with text and target columns, e.g. one made by "
                            "python reports/sentiment_trial/make_kaggle_csv.py")
    return {"data": data}


def write_report(collected: list, out: str, grid: Grid, variant: str) -> str:
    """report.md and the box plots, written into the folder that holds the results (as `--approach=report`)."""
    from tf_transfer.reporting.sentiment_report import write_report as write_sentiment_report

    return write_sentiment_report(collected[0]["folder"])


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
    settings_class=SentimentBertSettings,
    command_flags=COMMAND_FLAGS,
    layout=layout,
    train=train,
    result=result,
    data_settings=data_settings,
    shown=("approach", "bert_mode", "runs", "epochs", "seed", "preset", "precision"),
)
