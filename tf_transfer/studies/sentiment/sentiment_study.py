"""The sentiment study's row of the table of studies (`tf_transfer.studies.study_registry`): a grid's run is one step of
`python -m tf_transfer.sentiment` (the sparse baselines, or one BERT model's seeds), every step writing into the one
folder (--runs_dir) whose report.md the grid rewrites; its result is the step's completed results file, its data
the labelled texts (--data).

Example:

>>> from tf_transfer.studies.sentiment.sentiment_study import STUDY
>>> STUDY.run_dir("runs", None, {"approach": "sparse", "part": "sparse"})
'runs'
"""

from __future__ import annotations

import os

from tf_transfer.core.errors import TransferError
from tf_transfer.studies.sentiment.sentiment_settings import SentimentBertSettings
from tf_transfer.studies.study import Study

# The command's flags the study's flagfiles set besides the BERT settings.
COMMAND_FLAGS = {"approach": str, "folds": int, "text_column": str, "label_column": str, "labels": str}


def bert_settings(run: dict) -> SentimentBertSettings:
    return SentimentBertSettings.from_dict({k: v for k, v in run.items() if k not in COMMAND_FLAGS
                                            and k not in ("part", "data")})


def run_dir(runs_dir: str, grid, run: dict) -> str:
    return runs_dir  # every step writes its own files into the one folder its report reads


def result(run: dict, folder: str):
    """The step's completed results file in `folder`, or None (sparse_baselines.json is written once every fold is
    done; a BERT model's file says whether all its seeds are)."""
    from tf_transfer.studies.sentiment import sentiment_results

    sparse = run["approach"] == "sparse"
    path = os.path.join(folder, sentiment_results.SPARSE_JSON if sparse else bert_settings(run).file_name)
    results = sentiment_results.read_json(path) if os.path.exists(path) else None
    return results if results and (sparse or results.get("completed")) else None


def labelled_texts(run: dict):
    """The step's labelled texts, read as `python -m tf_transfer.sentiment` reads them."""
    from tf_transfer.data.labelled_texts import read_labelled_texts

    return read_labelled_texts(run["data"], run["text_column"], run["label_column"], [], run["labels"], None)


def train(run: dict, folder: str) -> None:
    """The step as `python -m tf_transfer.sentiment` runs it (its report.md is the grid's to rewrite:
    experiments/hart_sentiment.py)."""
    from tf_transfer.studies.sentiment.sentiment_bert import run_bert
    from tf_transfer.studies.sentiment.sentiment_sparse import run_sparse_baselines

    if run["approach"] == "sparse":
        run_sparse_baselines(labelled_texts(run), folder, run["folds"], run["seed"])
    else:
        run_bert(labelled_texts(run), folder, bert_settings(run))


def data_settings(data_dir, data) -> dict:
    if not data:
        raise TransferError("--data is required: a CSV or TSV file with text and target columns, e.g. one made by "
                            "python reports/sentiment_trial/make_kaggle_csv.py")
    return {"data": data}


STUDY = Study(name="sentiment", settings_class=SentimentBertSettings, train=train, run_dir=run_dir, result=result,
              data_settings=data_settings, command_flags=COMMAND_FLAGS)
