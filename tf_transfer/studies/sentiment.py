"""Hart's disaster-tweet study: what it compares, the files it writes, and how a BERT model of it is set up.

Hart, "Task-Specific Training: The Benefits of Fine-Tuning BERT", classifies the 7,613 tweets of Kaggle's "Natural
Language Processing with Disaster Tweets" (`train.csv`: `id,keyword,location,text,target`) with

  * sparse features + logistic regression (TF-IDF, token counts, hashed counts), 10-fold cross-validation
    (`sentiment_sparse`);
  * BERT features -> "a single dense layer with a logistic activation function" (logistic regression on the
    features, as the sparse models'; `hidden_units` > 0 puts a ReLU layer before it), with BERT frozen (static
    features), fully unfrozen, or only its top two encoder blocks unfrozen (the paper's method says "the first two
    encoders", its results "Last Two Layers"; `top2` follows the results); Adam at 5e-5; one held-out split, 10
    seeds per model (`sentiment_bert`);

and compares the models with Welch's t-tests (`tf_transfer.reporting.sentiment`). Everything takes plain
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

Means and standard deviations follow `tf_transfer.reporting.stats` (sample std; a single value's is undefined and
written as null).

Example:

>>> from tf_transfer.studies.sentiment import BertSettings
>>> settings = BertSettings(preset="all_minilm_l6_v2_en", mode="top2")
>>> settings.file_name, settings.epochs
('bert_top2_cls.json', 3)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
from typing import Optional

import numpy as np

from tf_transfer.core.choices import DISTRIBUTIONS, PRECISIONS
from tf_transfer.core.errors import TransferError
from tf_transfer.data.labelled_texts import LabelledTexts, check_rows_per_class
from tf_transfer.models import freezing
from tf_transfer.models.sentence_features import POOLINGS

APPROACHES = ("sparse", "bert", "report")
BERT_MODES = {"frozen": 0, "unfrozen": freezing.ALL, "top2": 2}
SPARSE_REPRESENTATIONS = ("tfidf", "count", "hash")

SPARSE_JSON = "sparse_baselines.json"
SPARSE_MARKDOWN = "sparse_baselines.md"
SPARSE_PROGRESS = "sparse_baselines.progress.json"  # finished folds and the settings they belong to
TENSORBOARD_DIR = "tensorboard"  # events per sparse representation and per BERT seed
REPORT = "report.md"
BOXPLOT = "boxplot_{metric}.png"

# The paper gives no epoch counts. Fine-tuning: 3, inside BERT's recommended 2-4. Frozen: only the head trains, and
# at the paper's lr of 5e-5 it needs thousands of Adam steps. The paper's head (one logistic layer) on frozen
# all-MiniLM-L6-v2 [CLS] features of 800 SST-2 sentences (25 steps per epoch), mean of 3 seeds: accuracy 0.58 after
# 30 epochs (750 steps), 0.63 after 100, 0.67 after 300, 0.675 after 1,000. 100 epochs of Kaggle's 6,090 training
# tweets are 19,100 steps, past that plateau (a 64-unit ReLU head learns faster: on 1,600 SST-2 sentences 0.70
# after 20 epochs, 0.73 after 50 and 100).
FINE_TUNING_EPOCHS = 3
FROZEN_EPOCHS = 100


def check_choice(flag: str, value, choices) -> None:
    """Raises `TransferError` unless `value` is one of `choices` (absl enums would exit 1 with the usage text)."""
    if value not in choices:
        raise TransferError(f"unknown --{flag}={value!r}: choose one of {', '.join(choices)}")


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
    with open(path) as f:
        return json.load(f)


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


@dataclasses.dataclass(frozen=True)
class BertSettings:
    """One BERT model of the study and how it is trained; the paper's values where it gives them.

    `mode` is frozen (static features, backbone in inference mode), unfrozen (everything trains) or top2 (the last
    two encoder blocks train); `trainable_layers` (0..L or "all"), when given, overrides it. `hidden_units` 0 is
    the paper's head (one logistic layer on the features); more puts a ReLU layer of that many units before it.
    `seed` seeds the held-out split; run r (from 0) uses seed `seed + r` for the head's initialisation, dropout and
    data order.
    `epochs` defaults to `FINE_TUNING_EPOCHS` when encoder blocks train and `FROZEN_EPOCHS` when only the head does.
    `precision` is a Keras dtype policy (`PRECISIONS`) for the backbone; the head, its outputs and the loss are
    float32 under any of them. `distribution` (`DISTRIBUTIONS`) only decides where the steps run, so it is not one
    of the settings runs must share.
    """

    preset: str = "bert_base_en_uncased"
    mode: str = "frozen"
    trainable_layers: Optional[object] = None
    pooling: str = "cls"
    runs: int = 10
    seed: int = 0
    test_fraction: float = 0.2
    epochs: Optional[int] = None
    batch_size: int = 32
    lr: float = 5e-5
    hidden_units: int = 0
    max_seq_length: int = 128
    precision: str = "float32"
    distribution: str = "default"

    def __post_init__(self):
        check_choice("bert_mode", self.mode, tuple(BERT_MODES))
        check_choice("pooling", self.pooling, POOLINGS)
        check_choice("distribution", self.distribution, DISTRIBUTIONS)
        if self.trainable_layers is not None and self.trainable_layers != "":
            object.__setattr__(self, "trainable_layers", freezing.parse_trainable_layers(self.trainable_layers))
        else:
            object.__setattr__(self, "trainable_layers", None)
        if self.epochs is None:
            object.__setattr__(self, "epochs", FROZEN_EPOCHS if self.k == 0 else FINE_TUNING_EPOCHS)
        checks = [
            (self.runs >= 1, f"--runs must be at least 1, got {self.runs}"),
            (0.0 < self.test_fraction < 1.0, f"--test_fraction must be between 0 and 1, got {self.test_fraction}"),
            (self.epochs >= 1, f"--epochs must be at least 1, got {self.epochs}"),
            (self.batch_size >= 1, f"--batch_size must be at least 1, got {self.batch_size}"),
            (self.lr > 0 and math.isfinite(self.lr), f"--lr must be a positive number, got {self.lr}"),
            (self.hidden_units >= 0, f"--hidden_units must be 0 (the paper's logistic layer) or more, got "
                                     f"{self.hidden_units}"),
            (self.max_seq_length >= 4, f"--max_seq_length must be at least 4, got {self.max_seq_length}"),
            (self.precision in PRECISIONS, f"--precision must be one of {', '.join(PRECISIONS)}, got "
                                           f"{self.precision!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise TransferError(message)

    @property
    def k(self):
        """Encoder blocks trained, counted from the top: 0 (frozen), an integer, or "all"."""
        return BERT_MODES[self.mode] if self.trainable_layers is None else self.trainable_layers

    @property
    def model_name(self) -> str:
        k = self.k
        return "frozen" if k == 0 else "unfrozen" if k == freezing.ALL else f"top{k}"

    @property
    def stem(self) -> str:
        """The model's name in file names: its results, its work folder, its TensorBoard folder."""
        return f"bert_{self.model_name}_{self.pooling}"

    @property
    def file_name(self) -> str:
        return f"{self.stem}.json"

    @property
    def work_name(self) -> str:
        """The run folder of the seed in training (its finished epochs and last checkpoint)."""
        return f"{self.stem}.in_progress"

    def comparable(self) -> dict:
        """The settings that runs must share to be merged into one file (all but the number of runs and where the
        steps run)."""
        return {"preset": self.preset, "model": self.model_name, "trainable_layers": self.k,
                "pooling": self.pooling, "split_seed": self.seed, "test_fraction": self.test_fraction,
                "epochs": self.epochs, "batch_size": self.batch_size, "lr": self.lr,
                "hidden_units": self.hidden_units, "max_seq_length": self.max_seq_length,
                "precision": self.precision}


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
