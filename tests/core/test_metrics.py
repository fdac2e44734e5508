"""Metrics agree with scikit-learn and SciPy; early stopping stops when it should."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from sklearn import metrics as skm

from tf_transfer.core import metrics
from tf_transfer.training.engine import EarlyStopping

binary = st.lists(st.integers(0, 1), min_size=2, max_size=60)


@settings(max_examples=60, deadline=None)
@given(binary, st.randoms())
def test_classification_metrics_match_sklearn(labels, rnd):
    predictions = [rnd.randint(0, 1) for _ in labels]
    assert metrics.accuracy(labels, predictions) == pytest.approx(skm.accuracy_score(labels, predictions))
    assert metrics.f1(labels, predictions) == pytest.approx(skm.f1_score(labels, predictions, zero_division=0))
    assert metrics.mcc(labels, predictions) == pytest.approx(skm.matthews_corrcoef(labels, predictions))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5), st.floats(-3, 8)), min_size=3, max_size=60))
def test_correlations_match_scipy(pairs):
    labels, predictions = np.array(pairs).T
    if np.ptp(labels) == 0 or np.ptp(predictions) == 0:
        assert math.isnan(metrics.pearson(labels, predictions))
        return
    assert metrics.pearson(labels, predictions) == pytest.approx(stats.pearsonr(labels, predictions)[0], abs=1e-9)
    assert metrics.spearman(labels, predictions) == pytest.approx(stats.spearmanr(labels, predictions)[0], abs=1e-9)


def test_known_values():
    assert metrics.f1([1, 1, 0, 0], [1, 0, 1, 0]) == 0.5
    assert metrics.mcc([1, 0, 1, 0], [1, 0, 1, 0]) == 1.0
    assert metrics.mcc([1, 0, 1, 0], [0, 1, 0, 1]) == -1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # sklearn warns about the confusion matrix's shape on one label
        assert metrics.mcc([1, 1, 1], [1, 1, 1]) == metrics.mcc(np.zeros(3, int), np.zeros(3, int)) == 0.0
    assert metrics.compute(["accuracy"], [0, 1], [0, 0]) == {"accuracy": 0.5}


def test_early_stopping_waits_patience_epochs():
    stopper = EarlyStopping(patience=2)
    assert [stopper.update(v, e) for e, v in enumerate([0.5, 0.6, 0.55, 0.6, 0.59], start=1)] == [
        False, False, False, True, True]
    assert stopper.best == 0.6 and stopper.best_epoch == 2


def test_early_stopping_min_delta_and_nan():
    stopper = EarlyStopping(patience=1, min_delta=0.05)
    assert not stopper.update(0.5, 1)
    assert stopper.update(0.52, 2)  # not better by more than 0.05
    stopper = EarlyStopping(patience=3)
    assert not stopper.update(float("nan"), 1)
    assert not stopper.update(0.1, 2)
    assert stopper.best_epoch == 2
