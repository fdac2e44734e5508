"""Hart's disaster-tweet study: what it compares, the files it writes, how rows are split and scored.

Hart, "Task-Specific Training: The Benefits of Fine-Tuning BERT", classifies the 7,613 tweets of Kaggle's "Natural
Language Processing with Disaster Tweets" (`train.csv`: `id,keyword,location,text,target`) with

  * sparse features + logistic regression (TF-IDF, token counts, hashed counts), 10-fold cross-validation
    (`sentiment_sparse`);
  * BERT features -> "a single dense layer with a logistic activation function" (logistic regression on the
    features, as the sparse models'; `hidden_units` > 0 puts a ReLU layer before it), with BERT frozen (static
    features), fully unfrozen, or only its top two encoder blocks unfrozen (the paper's method says "the first two
    encoders", its results "Last Two Layers"; `top2` follows the results); Adam at 5e-5; one held-out split, 10
    seeds per model (`sentiment_bert`);

and compares the models with Welch's t-tests (`tf_transfer.reporting.sentiment_report`). Everything takes plain
arguments (no absl flags), so the entry point `python -m tf_transfer.sentiment` and the tests call the same
functions.

Files written to the output folder:
  * `sparse_baselines.json` / `.md`: `{"tfidf"|"count"|"hash": {accuracy_mean, accuracy_std, f1_mean, f1_std,
    fit_time_s_mean, folds: [{fold, accuracy, f1, fit_time_s}]}}` (`fit_time_s`: wall seconds to vectorise, fit
    and predict the fold).
  * `sparse_baselines.progress.json`: the finished folds and the settings and data they belong to (for resuming).
  * `bert_<model>_<pooling>.json`: one file per BERT model, its runs keyed by seed (a rerun adds missing seeds).
  * `bert_<model>_<pooling>.in_progress/`: while a seed trains, its run folder (`summary.json`, last checkpoint).
  * `report.md`, `boxplot_accuracy.png`, `boxplot_f1.png`: means, spreads and the Welch tests of whatever is there.
  * `tensorboard/`: events and an HParams entry per sparse representation and per BERT seed.

Means and standard deviations follow `tf_transfer.core.stats` (sample std; a single value's is undefined and
written as null).

The BERT models' settings are `tf_transfer.studies.sentiment.sentiment_settings.SentimentBertSettings`.

Example:

>>> import numpy as np
>>> from tf_transfer.studies.sentiment.sentiment_results import score
>>> score(np.array([0, 1, 1, 0]), np.array([0, 1, 0, 0]), num_classes=2)
{'accuracy': 0.75, 'f1': 0.6666666666666666}
"""

from __future__ import annotations

import os
import shutil
import numpy as np

from tf_transfer.core.errors import TransferError
from tf_transfer.data.labelled_texts import LabelledTexts, check_rows_per_class
from tf_transfer.training import record

SPARSE_REPRESENTATIONS = ("tfidf", "count", "hash")

SPARSE_JSON = "sparse_baselines.json"
SPARSE_MARKDOWN = "sparse_baselines.md"
SPARSE_PROGRESS = "sparse_baselines.progress.json"  # finished folds and the settings they belong to
TENSORBOARD_DIR = "tensorboard"  # events per sparse representation and per BERT seed
REPORT = "report.md"
BOXPLOT = "boxplot_{metric}.png"


def f1_description(data: LabelledTexts) -> str:
    if data.is_binary:
        return f"F1 of the positive class (label {data.label_names[1]!r})"
    return "macro F1 (unweighted mean of the per-class F1 scores)"


def score(data_labels: np.ndarray, predictions: np.ndarray, num_classes: int) -> dict:
    """Accuracy and F1: binary F1 of class 1 for two classes, macro F1 for more."""
    from sklearn import metrics as skm

    from tf_transfer.core import metrics

    if num_classes == 2:
        f1 = metrics.f1(data_labels, predictions)
    else:
        f1 = float(skm.f1_score(data_labels, predictions, average="macro", labels=list(range(num_classes)),
                                zero_division=0.0))
    return {"accuracy": metrics.accuracy(data_labels, predictions), "f1": f1}


def read_json(path: str):
    return record.read_json(path)  # an unreadable file is one line naming it (a grid sets it aside)


def refuse_other_settings(path: str, held: dict, wanted: dict, what: str) -> None:
    """Raises `TransferError` naming every setting in which `held` (a file's) differs from `wanted`."""
    differing = [f"{key} {held.get(key)!r} vs {value!r}" for key, value in wanted.items() if held.get(key) != value]
    if differing:
        raise TransferError(f"{path} holds {what} with other settings ({'; '.join(differing)}): use another "
                            "--output_dir, or pass --overwrite to replace them")


def fresh_event_dir(output_dir: str, *parts: str) -> str:
    """An empty TensorBoard folder: a run written again (resumed, or redone) must not leave a second copy."""
    logdir = os.path.join(output_dir, TENSORBOARD_DIR, *parts)
    shutil.rmtree(logdir, ignore_errors=True)
    return logdir


def held_out_split(data: LabelledTexts, test_fraction: float, seed: int):
    """One seeded, stratified train/test split (the paper holds out one fixed split; its size is our choice)."""
    from sklearn.model_selection import train_test_split

    check_rows_per_class(data, 2, "a held-out split needs every label in both the training and the test part")
    indices = np.arange(len(data))
    try:
        train_index, test_index = train_test_split(indices, test_size=test_fraction, random_state=seed,
                                                   stratify=data.labels)
    except ValueError as e:
        raise TransferError(f"cannot split {len(data)} rows with --test_fraction={test_fraction} so that every "
                            f"label is in both parts ({e}); change --test_fraction or use a larger file") from None
    return data.take(np.sort(train_index)), data.take(np.sort(test_index))
