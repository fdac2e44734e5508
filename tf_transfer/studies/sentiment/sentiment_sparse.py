"""Hart's sparse baselines: TF-IDF, token counts and hashed counts, each into logistic regression, with stratified
k-fold cross-validation that resumes at the next unfinished fold.

Example:

>>> from tf_transfer.studies.sentiment import sentiment_sparse
>>> sentiment_sparse.sparse_pipeline("tfidf", seed=0).steps[1][0]
'classifier'
>>> results = sentiment_sparse.run_sparse_baselines(data, "out/hart", folds=10, seed=0)  # doctest: +SKIP
>>> results["tfidf"]["f1_mean"]  # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
import warnings

import numpy as np
from absl import logging

from tf_transfer.core.errors import TransferError
from tf_transfer.data.labelled_texts import LabelledTexts, check_rows_per_class
from tf_transfer.core import stats
from tf_transfer.studies.sentiment.sentiment_results import (SPARSE_JSON, SPARSE_PROGRESS, SPARSE_REPRESENTATIONS,
                                                   fresh_event_dir, read_json, refuse_other_settings, score)
from tf_transfer.studies.sentiment.sentiment_settings import check_choice
from tf_transfer.training import record

# LogisticRegression starts at sklearn's default max_iter (100) and doubles only when a fit does not converge.
MAX_ITER_CAP = 12800


def sparse_pipeline(representation: str, seed: int):
    """Vectorizer -> LogisticRegression, all with scikit-learn's defaults (as the paper; it names no settings).

    The defaults matter for reading the numbers: `HashingVectorizer` hashes into 2**20 columns with alternating
    signs and L2-normalises each row; `CountVectorizer` keeps raw counts; all three lowercase and keep tokens of two
    or more word characters.
    """
    from sklearn.feature_extraction.text import CountVectorizer, HashingVectorizer, TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    vectorizers = {"tfidf": TfidfVectorizer, "count": CountVectorizer, "hash": HashingVectorizer}
    check_choice("representation", representation, SPARSE_REPRESENTATIONS)
    # random_state only matters to solvers that shuffle; it keeps a change of solver reproducible.
    return Pipeline([("vectorizer", vectorizers[representation]()),
                     ("classifier", LogisticRegression(random_state=seed))])


def fit_until_converged(pipeline, texts, labels, cap: int = MAX_ITER_CAP):
    """Fits `pipeline`; on a ConvergenceWarning doubles LogisticRegression's max_iter and refits, up to `cap`.

    Returns `(max_iter used, converged)`. Other warnings are passed on.
    """
    from sklearn.exceptions import ConvergenceWarning

    max_iter = pipeline.get_params()["classifier__max_iter"]
    while True:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pipeline.fit(texts, labels)
        for w in caught:
            if not issubclass(w.category, ConvergenceWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if not any(issubclass(w.category, ConvergenceWarning) for w in caught):
            return max_iter, True
        if max_iter >= cap:
            logging.warning("LogisticRegression did not converge even with max_iter=%d", max_iter)
            return max_iter, False
        max_iter *= 2
        pipeline.set_params(classifier__max_iter=max_iter)


def run_sparse_baselines(data: LabelledTexts, output_dir: str, folds: int = 10, seed: int = 0,
                         overwrite: bool = False) -> dict:
    """Stratified, shuffled `folds`-fold cross-validation of each sparse representation + logistic regression.

    Writes `sparse_baselines.json` (schema in `sentiment_results`) to `output_dir` and returns its content (the
    report's `write_sparse_markdown` writes `sparse_baselines.md` from it). Each finished fold is kept in `sparse_baselines.progress.json` (with the settings
    and data it belongs to), so a rerun after a kill continues at the next fold; a rerun of a finished study says
    so and returns its results; other settings or data in the folder are refused unless `overwrite`.
    """
    from sklearn.model_selection import StratifiedKFold

    if folds < 2:
        raise TransferError(f"--folds must be at least 2, got {folds}")
    check_rows_per_class(data, folds, f"--folds={folds} stratified folds need at least one row of every label in "
                                      "each fold; lower --folds or use a larger file")
    progress_path = os.path.join(output_dir, SPARSE_PROGRESS)
    wanted = {"folds": folds, "seed": seed, **data.identity()}
    progress = None if overwrite or not os.path.exists(progress_path) else read_json(progress_path)
    if progress is not None:
        refuse_other_settings(progress_path, progress["settings"], wanted, "sparse baselines")
        if progress.get("completed") and os.path.exists(os.path.join(output_dir, SPARSE_JSON)):
            print(f"{os.path.join(output_dir, SPARSE_JSON)} is already complete ({folds} folds, seed {seed}); "
                  "nothing to compute (pass --overwrite to start afresh)", flush=True)
            return read_json(os.path.join(output_dir, SPARSE_JSON))
        logging.info("resuming the sparse baselines in %s", output_dir)
    else:
        progress = {"settings": wanted, "folds": {}, "max_iter": {}, "completed": False}
    os.makedirs(output_dir, exist_ok=True)
    texts = np.asarray(data.texts, dtype=object)
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    results = {}
    for representation in SPARSE_REPRESENTATIONS:
        fold_scores = progress["folds"].setdefault(representation, [])
        used = progress["max_iter"].setdefault(representation, [])
        for fold, (train_index, test_index) in enumerate(splitter.split(texts, data.labels), start=1):
            if fold <= len(fold_scores):
                continue  # finished in an earlier attempt (the folds are the same: seeded)
            start = time.perf_counter()
            pipeline = sparse_pipeline(representation, seed)
            max_iter, converged = fit_until_converged(pipeline, texts[train_index], data.labels[train_index])
            used.append(max_iter if converged else f"{max_iter} (not converged)")
            predictions = pipeline.predict(texts[test_index])
            fold_scores.append({"fold": fold, **score(data.labels[test_index], predictions, data.num_classes),
                                # vectorising, fitting and predicting: the cost a BERT run's train time compares to
                                "fit_time_s": time.perf_counter() - start})
            record.write_json_atomic(progress_path, progress)
        results[representation] = {
            **stats.summarise({metric: [s[metric] for s in fold_scores] for metric in ("accuracy", "f1")}),
            # Folds finished before timing was recorded have none; the mean is then over the timed ones.
            "fit_time_s_mean": stats.mean([s["fit_time_s"] for s in fold_scores if "fit_time_s" in s]),
            "folds": fold_scores,
        }
        write_sparse_events(output_dir, representation, results[representation], seed)
        logging.info("sparse %s: accuracy %.4f, F1 %.4f over %d folds", representation,
                     results[representation]["accuracy_mean"], results[representation]["f1_mean"], folds)
    record.write_json_atomic(os.path.join(output_dir, SPARSE_JSON), results)
    progress["completed"] = True
    record.write_json_atomic(progress_path, progress)
    return read_json(os.path.join(output_dir, SPARSE_JSON))


def write_sparse_events(output_dir: str, representation: str, result: dict, seed: int) -> None:
    """TensorBoard: per fold `fold/accuracy`, `fold/f1`, `fold/fit_time_s` (step = fold), the means as `accuracy`
    and `f1` (step = folds), and an HParams entry, so that the HParams table lists the baselines beside BERT."""
    folds = len(result["folds"])
    logdir = fresh_event_dir(output_dir, f"sparse_{representation}")
    recorder = record.TensorBoardRecorder(logdir, {"model": f"sparse {representation}", "seed": seed, "folds": folds},
                                          f"sparse_{representation}")
    for fold in result["folds"]:
        recorder.scalars(fold["fold"], {f"fold/{key}": fold.get(key) for key in ("accuracy", "f1", "fit_time_s")})
    recorder.scalars(folds, {"accuracy": result["accuracy_mean"], "f1": result["f1_mean"]})
    recorder.close()
