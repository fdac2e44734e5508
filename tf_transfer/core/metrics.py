"""GLUE's metrics and those of a user's own data set (macro F1, mean squared error), thin over scikit-learn and SciPy.
Every metric is higher-is-better but `mse` (`LOWER_IS_BETTER`), which `is_better` takes into account.

Example:

>>> from tf_transfer.core import metrics
>>> metrics.compute(["accuracy", "f1"], labels=[0, 1, 1], predictions=[0, 1, 0])
{'accuracy': 0.6666666666666666, 'f1': 0.6666666666666666}
"""

from __future__ import annotations

import math
import warnings
from typing import Optional

import numpy as np

# SciPy and scikit-learn are imported where a metric is computed, not here: a sweep's processes that only plan,
# queue and report read this module's names and would pay about 2 s of start-up each for them.


def accuracy(labels, predictions) -> float:
    from sklearn import metrics as skm

    return float(skm.accuracy_score(labels, predictions))


def f1(labels, predictions) -> float:
    """F1 of the positive class (label 1), as GLUE reports it for MRPC and QQP."""
    from sklearn import metrics as skm

    return float(skm.f1_score(labels, predictions, pos_label=1, average="binary", zero_division=0.0))


def mcc(labels, predictions) -> float:
    """Matthews correlation (CoLA); 0 when one side is constant."""
    if len(set(map(int, labels)) | set(map(int, predictions))) < 2:
        return 0.0  # one label on both sides: sklearn's answer too, without its confusion-matrix shape warning
    from sklearn import metrics as skm

    return float(skm.matthews_corrcoef(labels, predictions))


def _correlation(function, labels, predictions) -> float:
    labels, predictions = np.asarray(labels, np.float64), np.asarray(predictions, np.float64)
    if np.ptp(labels) == 0 or np.ptp(predictions) == 0:
        return float("nan")  # undefined, and reported as such rather than as a number
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(function(labels, predictions)[0])


def pearson(labels, predictions) -> float:
    from scipy import stats

    return _correlation(stats.pearsonr, labels, predictions)


def spearman(labels, predictions) -> float:
    from scipy import stats

    return _correlation(stats.spearmanr, labels, predictions)


def macro_f1(labels, predictions) -> float:
    """The unweighted mean of the per-class F1 scores (multi-class data sets)."""
    from sklearn import metrics as skm

    return float(skm.f1_score(labels, predictions, average="macro", zero_division=0.0))


def mse(labels, predictions) -> float:
    from sklearn import metrics as skm

    return float(skm.mean_squared_error(labels, predictions))


METRICS = {"accuracy": accuracy, "f1": f1, "mcc": mcc, "pearson": pearson, "spearman": spearman,
           "macro_f1": macro_f1, "mse": mse}
LOWER_IS_BETTER = ("mse",)


def compute(names, labels, predictions) -> dict:
    """Returns `{name: value}` for each metric name; NaN where a metric is undefined."""
    return {name: METRICS[name](labels, predictions) for name in names}


def best_constant(metric: str, labels, classes: Optional[int]) -> tuple:
    """`(score, prediction)` of the best constant prediction of `labels` by `metric`: the class index (of `classes`)
    that scores best when predicted for every example, or for a numeric target (`classes` None) the labels' mean,
    whose correlation with anything is undefined (0 used) and whose `mse` is their variance."""
    labels = np.asarray(labels)
    if classes is None:
        mean = float(labels.mean())
        return (mse(labels, np.full(len(labels), mean)) if metric == "mse" else 0.0), mean
    scored = [(compute([metric], labels, np.full(len(labels), c))[metric], c) for c in range(classes)]
    return max(scored, key=lambda pair: (not math.isnan(pair[0]), pair[0]))


def is_better(value, best, min_delta: float = 0.0, lower: bool = False) -> bool:
    """True when `value` improves on `best` by more than `min_delta`: is higher (`lower`: lower, for
    `LOWER_IS_BETTER` metrics).

    An undefined value (NaN) never improves; anything finite improves on no value yet.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    if best is None:
        return True
    return value < best - min_delta if lower else value > best + min_delta
