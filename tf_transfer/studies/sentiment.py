"""Hart's disaster-tweet study: sparse baselines, BERT frozen / unfrozen / top-2, and the report with Welch's tests.

Hart, "Task-Specific Training: The Benefits of Fine-Tuning BERT", classifies the 7,613 tweets of Kaggle's "Natural
Language Processing with Disaster Tweets" (`train.csv`: `id,keyword,location,text,target`) with

  * sparse features + logistic regression (TF-IDF, token counts, hashed counts), 10-fold cross-validation;
  * BERT features -> one dense hidden layer -> logistic output, with BERT frozen (static features), fully
    unfrozen, or only its top two encoder blocks unfrozen; Adam at 5e-5; one held-out split, 10 seeds per model;

and compares the models with Welch's t-tests. Everything here takes plain arguments (no absl flags), so the entry
point `python -m tf_transfer.sentiment` and the tests call the same functions.

Files written to the output folder:
  * `sparse_baselines.json` / `.md`: `{"tfidf"|"count"|"hash": {accuracy_mean, accuracy_std, f1_mean, f1_std,
    fit_time_s_mean, folds: [{fold, accuracy, f1, fit_time_s}]}}` (`fit_time_s`: wall seconds to vectorise, fit
    and predict the fold).
  * `sparse_baselines.progress.json`: the finished folds and the settings and data they belong to (for resuming).
  * `bert_<model>_<pooling>.json`: one file per BERT model, its runs keyed by seed (a rerun adds missing seeds).
  * `bert_<model>_<pooling>.in_progress/`: while a seed trains, its finished epochs and last checkpoint.
  * `report.md`, `boxplot_accuracy.png`, `boxplot_f1.png`: means, spreads and the Welch tests of whatever is there.
  * `tensorboard/`: events and an HParams entry per sparse representation and per BERT seed.

Standard deviations are sample standard deviations (ddof=1, as in Welch's test); with a single value they are
undefined and written as null.

Example (the statistics run as written; the rest needs a data file):

>>> from tf_transfer import sentiment_study as study
>>> test = study.welch_test([0.80, 0.82, 0.81, 0.79], [0.78, 0.80, 0.76, 0.77])
>>> round(test.t, 3), round(test.df, 2), round(test.p, 4)
(2.569, 5.58, 0.0452)
>>> data = study.read_labelled_texts("train.csv")  # doctest: +SKIP
>>> study.run_sparse_baselines(data, "out/hart", folds=10, seed=0)["tfidf"]["f1_mean"]  # doctest: +SKIP
>>> settings = study.BertSettings(preset="all_minilm_l6_v2_en", mode="frozen")
>>> study.run_bert(data, "out/hart", settings)["f1_mean"]  # doctest: +SKIP
>>> study.write_report("out/hart")  # doctest: +SKIP
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import glob
import hashlib
import json
import math
import os
import shutil
import sys
import time
import warnings
from typing import Optional, Sequence

import numpy as np
from absl import logging

from tf_transfer.training import checkpoints
from tf_transfer.models import freezing
from tf_transfer.core import machine
from tf_transfer.training import record
from tf_transfer.core.config import PRECISIONS
from tf_transfer.core.errors import TransferError

APPROACHES = ("sparse", "bert", "report")
BERT_MODES = {"frozen": 0, "unfrozen": freezing.ALL, "top2": 2}
POOLINGS = ("cls", "last4_concat", "mean")
SPARSE_REPRESENTATIONS = ("tfidf", "count", "hash")
BINARY_LABELS = ("0", "1")

SPARSE_JSON = "sparse_baselines.json"
SPARSE_MARKDOWN = "sparse_baselines.md"
SPARSE_PROGRESS = "sparse_baselines.progress.json"  # finished folds and the settings they belong to
TENSORBOARD_DIR = "tensorboard"  # events per sparse representation and per BERT seed
REPORT = "report.md"
BOXPLOT = "boxplot_{metric}.png"

# Kaggle texts can be long after joining columns; the csv module's default 128 KiB field limit is not a bound on them.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))

# LogisticRegression starts at sklearn's default max_iter (100) and doubles only when a fit does not converge.
MAX_ITER_CAP = 12800
# The paper gives no epoch counts. Fine-tuning: 3, inside BERT's recommended 2-4. Frozen: only a small head trains,
# and at the paper's lr of 5e-5 three epochs leave it near chance (all-MiniLM-L6-v2 [CLS] features of 1,600 SST-2
# sentences: accuracy 0.53 after 3 epochs, 0.70 after 20, 0.73 after 50 and 100), so it gets more epochs.
FINE_TUNING_EPOCHS = 3
FROZEN_EPOCHS = 30
# Batch size for computing frozen features and scoring: inference only, so it changes speed, never results.
INFERENCE_BATCH_SIZE = 64


def check_choice(flag: str, value, choices) -> None:
    """Raises `TransferError` unless `value` is one of `choices` (absl enums would exit 1 with the usage text)."""
    if value not in choices:
        raise TransferError(f"unknown --{flag}={value!r}: choose one of {', '.join(choices)}")


# ---------------------------------------------------------------------------------------------------------------
# Data


@dataclasses.dataclass
class LabelledTexts:
    """Texts with class indices; `label_names[i]` is the value written in the file for class `i`."""

    texts: list
    labels: np.ndarray
    label_names: tuple
    source: str
    sha256: str
    text_columns: tuple = ("text",)
    label_column: str = "target"

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    @property
    def is_binary(self) -> bool:
        return self.num_classes == 2

    def class_counts(self) -> dict:
        counts = np.bincount(self.labels, minlength=self.num_classes)
        return {name: int(count) for name, count in zip(self.label_names, counts)}

    def take(self, indices) -> "LabelledTexts":
        return dataclasses.replace(self, texts=[self.texts[i] for i in indices], labels=self.labels[indices])

    def identity(self) -> dict:
        """What makes two readings of a file the same data: its bytes, the columns read, the labels declared."""
        return {"data_sha256": self.sha256, "text_columns": list(self.text_columns),
                "label_column": self.label_column, "labels": list(self.label_names)}


def delimiter_for(path: str, delimiter: Optional[str] = None) -> str:
    """`delimiter` if given (`tab` or a backslash-t mean a tab), else tab for .tsv/.tab files and comma otherwise."""
    if delimiter:
        named = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";"}
        value = named.get(delimiter.lower(), delimiter)
        if len(value) != 1:
            raise TransferError(f"--delimiter must be one character (or 'tab'), got {delimiter!r}")
        return value
    return "\t" if path.lower().endswith((".tsv", ".tab")) else ","


def parse_labels(labels) -> tuple:
    """`"neg,pos"` or a sequence -> the declared label values, in class-index order (default `0,1`)."""
    if labels is None or labels == "" or labels == []:
        return BINARY_LABELS
    values = [v.strip() for v in (labels.split(",") if isinstance(labels, str) else labels)]
    if len(values) < 2 or any(not v for v in values) or len(set(values)) != len(values):
        raise TransferError(f"--labels must list at least two distinct, non-empty values separated by commas, "
                            f"got {labels!r}")
    return tuple(values)


def _file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_labelled_texts(path: str, text_column: str = "text", label_column: str = "target",
                        extra_text_columns: Sequence[str] = (), labels=None,
                        delimiter: Optional[str] = None) -> LabelledTexts:
    """Reads a CSV/TSV with a header row, a text column and a label column (defaults fit Kaggle's `train.csv`).

    Fields are read with standard CSV quoting, so quoted commas, quotes and line breaks inside texts survive.
    `extra_text_columns` (e.g. `keyword`) are appended to the text, separated by a space; they may be empty (Kaggle
    leaves `keyword` and `location` blank for some tweets), the text column may not. `labels` declares the allowed
    label values in class order (default `0,1`); class 1 is the positive class of binary F1.

    Raises:
      TransferError: missing file, missing columns, a short row, an empty text, an undeclared label, no rows.
    """
    if not os.path.isfile(path):
        raise TransferError(f"data file {path} does not exist: pass --data=<CSV or TSV with a header row>")
    separator = delimiter_for(path, delimiter)
    label_names = parse_labels(labels)
    label_index = {name: i for i, name in enumerate(label_names)}
    wanted = [text_column, *extra_text_columns, label_column]
    texts, class_indices = [], []
    try:
        # utf-8-sig: files saved by spreadsheet programs often start with a byte-order mark that would glue
        # itself to the first column's name.
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows = csv.reader(f, delimiter=separator)
            header = next(rows, None)
            if header is None:
                raise TransferError(f"{path} is empty: expected a header row naming the columns")
            header = [name.strip() for name in header]
            missing = [name for name in dict.fromkeys(wanted) if name not in header]
            if missing:
                kind = "tab" if separator == "\t" else repr(separator)
                raise TransferError(
                    f"{path}: no column(s) {', '.join(repr(m) for m in missing)} in the header; found "
                    f"{', '.join(repr(h) for h in header)} ({kind}-separated; set --text_column, --label_column, "
                    "--text_columns or --delimiter)")
            positions = [header.index(name) for name in wanted]
            needed = max(positions) + 1
            for row_number, row in enumerate(rows, start=1):
                if not row:
                    continue  # a blank line, e.g. at the end of the file
                where = f"{path}: data row {row_number} (ending on line {rows.line_num})"
                if len(row) < needed:
                    raise TransferError(f"{where} has {len(row)} field(s), the header {len(header)}: is a "
                                        "text with the delimiter in it missing its quotes?")
                fields = [row[i].strip() for i in positions]
                if not fields[0]:
                    raise TransferError(f"{where}: empty text in column {text_column!r}")
                label = fields[-1]
                if label not in label_index:
                    hint = "" if labels else " (declare other label values with --labels)"
                    raise TransferError(f"{where}: label {label!r} in column {label_column!r} is not one of "
                                        f"{', '.join(label_names)}{hint}")
                texts.append(" ".join(field for field in fields[:-1] if field))
                class_indices.append(label_index[label])
    except UnicodeDecodeError as e:
        raise TransferError(f"{path}: not valid UTF-8 text ({e.reason} at byte {e.start})") from None
    except csv.Error as e:
        raise TransferError(f"{path}: unreadable {'TSV' if separator == chr(9) else 'CSV'} ({e})") from None
    if not texts:
        raise TransferError(f"{path} has a header but no data rows")
    return LabelledTexts(texts, np.asarray(class_indices, np.int64), label_names, path, _file_sha256(path),
                         (text_column, *extra_text_columns), label_column)


def check_rows_per_class(data: LabelledTexts, minimum: int, why: str) -> None:
    """Raises `TransferError` naming the first class with fewer than `minimum` rows."""
    for name, count in data.class_counts().items():
        if count < minimum:
            raise TransferError(f"{data.source} has {count} row(s) with label {name!r}, fewer than {minimum}: {why}")


# ---------------------------------------------------------------------------------------------------------------
# Metrics and statistics


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


def _mean_or_none(values) -> Optional[float]:
    return float(np.mean(values)) if len(values) else None


def sample_std(values) -> float:
    """Sample standard deviation (ddof=1); NaN (written as null) for fewer than two values."""
    values = np.asarray(values, np.float64)
    return float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")


def welch_df(a, b) -> float:
    """Welch-Satterthwaite degrees of freedom: (s1²/n1 + s2²/n2)² / ((s1²/n1)²/(n1-1) + (s2²/n2)²/(n2-1))."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if len(a) < 2 or len(b) < 2:
        return float("nan")
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    denominator = va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)
    return float((va + vb) ** 2 / denominator) if denominator > 0 else float("nan")


@dataclasses.dataclass
class WelchTest:
    t: float
    df: float
    p: float


def welch_test(a, b) -> WelchTest:
    """Welch's unequal-variance t-test of mean(a) vs mean(b): scipy's t and two-sided p, and the df behind them.

    NaN where undefined (fewer than two values in a group, or no variance in either).
    """
    from scipy import stats

    if len(a) < 2 or len(b) < 2:
        return WelchTest(float("nan"), float("nan"), float("nan"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # zero variance in both groups: NaN is the answer
        result = stats.ttest_ind(np.asarray(a, np.float64), np.asarray(b, np.float64), equal_var=False)
    return WelchTest(float(result.statistic), welch_df(a, b), float(result.pvalue))


def summarise(values_by_metric: dict) -> dict:
    """`{"accuracy": [...], "f1": [...]}` -> `{accuracy_mean, accuracy_std, f1_mean, f1_std}`."""
    summary = {}
    for metric, values in values_by_metric.items():
        summary[f"{metric}_mean"] = float(np.mean(values)) if len(values) else float("nan")
        summary[f"{metric}_std"] = sample_std(values)
    return summary


# ---------------------------------------------------------------------------------------------------------------
# Sparse baselines


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

    Writes `sparse_baselines.json` (schema in the module docstring) and `sparse_baselines.md` to `output_dir`;
    returns the JSON's content. Each finished fold is kept in `sparse_baselines.progress.json` (with the settings
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
    progress = None if overwrite or not os.path.exists(progress_path) else _read_json(progress_path)
    if progress is not None:
        _refuse_other_settings(progress_path, progress["settings"], wanted, "sparse baselines")
        if progress.get("completed") and os.path.exists(os.path.join(output_dir, SPARSE_JSON)):
            print(f"{os.path.join(output_dir, SPARSE_JSON)} is already complete ({folds} folds, seed {seed}); "
                  "nothing to compute (pass --overwrite to start afresh)", flush=True)
            return _read_json(os.path.join(output_dir, SPARSE_JSON))
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
            **summarise({metric: [s[metric] for s in fold_scores] for metric in ("accuracy", "f1")}),
            # Folds finished before timing was recorded have none; the mean is then over the timed ones.
            "fit_time_s_mean": _mean_or_none([s["fit_time_s"] for s in fold_scores if "fit_time_s" in s]),
            "folds": fold_scores,
        }
        write_sparse_events(output_dir, representation, results[representation], seed)
        logging.info("sparse %s: accuracy %.4f, F1 %.4f over %d folds", representation,
                     results[representation]["accuracy_mean"], results[representation]["f1_mean"], folds)
    record.write_json_atomic(os.path.join(output_dir, SPARSE_JSON), results)
    _write_text_atomic(os.path.join(output_dir, SPARSE_MARKDOWN),
                       _sparse_markdown(results, progress["max_iter"], data, folds, seed))
    progress["completed"] = True
    record.write_json_atomic(progress_path, progress)
    return _read_json(os.path.join(output_dir, SPARSE_JSON))


def _fresh_event_dir(output_dir: str, *parts: str) -> str:
    """An empty TensorBoard folder: a run written again (resumed, or redone) must not leave a second copy."""
    logdir = os.path.join(output_dir, TENSORBOARD_DIR, *parts)
    shutil.rmtree(logdir, ignore_errors=True)
    return logdir


def write_sparse_events(output_dir: str, representation: str, result: dict, seed: int) -> None:
    """TensorBoard: per fold `fold/accuracy`, `fold/f1`, `fold/fit_time_s` (step = fold), the means as `accuracy`
    and `f1` (step = folds), and an HParams entry, so that the HParams table lists the baselines beside BERT."""
    folds = len(result["folds"])
    logdir = _fresh_event_dir(output_dir, f"sparse_{representation}")
    recorder = record.TensorBoardRecorder(logdir, {"model": f"sparse {representation}", "seed": seed, "folds": folds},
                                          f"sparse_{representation}")
    for fold in result["folds"]:
        recorder.scalars(fold["fold"], {f"fold/{key}": fold.get(key) for key in ("accuracy", "f1", "fit_time_s")})
    recorder.scalars(folds, {"accuracy": result["accuracy_mean"], "f1": result["f1_mean"]})
    recorder.close()


def write_bert_events(output_dir: str, settings: "BertSettings", run: dict) -> None:
    """TensorBoard for one seed: per epoch `loss`, `epoch_time_s`, `train_time_s` (step = epoch), the held-out
    `accuracy` and `f1` at the last epoch, and an HParams entry with the model's settings and the seed."""
    logdir = _fresh_event_dir(output_dir, settings.stem, f"seed{run['seed']}")
    hparams = {**settings.comparable(), "model": f"BERT {settings.model_name} ({settings.pooling})",
               "seed": run["seed"]}
    recorder = record.TensorBoardRecorder(logdir, hparams, f"{settings.stem}/seed{run['seed']}")
    for epoch in run["epochs"]:
        recorder.scalars(epoch["epoch"], {key: epoch.get(key) for key in ("loss", "epoch_time_s", "train_time_s")})
    recorder.scalars(run["epochs"][-1]["epoch"], {"accuracy": run["accuracy"], "f1": run["f1"]})
    recorder.close()


def _refuse_other_settings(path: str, held: dict, wanted: dict, what: str) -> None:
    """Raises `TransferError` naming every setting in which `held` (a file's) differs from `wanted`."""
    differing = [f"{key} {held.get(key)!r} vs {value!r}" for key, value in wanted.items() if held.get(key) != value]
    if differing:
        raise TransferError(f"{path} holds {what} with other settings ({'; '.join(differing)}): use another "
                            "--output_dir, or pass --overwrite to replace them")


def _sparse_markdown(results: dict, max_iters: dict, data: LabelledTexts, folds: int, seed: int) -> str:
    lines = [
        "# Sparse baselines: bag of words + logistic regression",
        "",
        f"Data: `{data.source}`, {len(data)} rows, labels {_counts_text(data)}. Stratified {folds}-fold "
        f"cross-validation, shuffled with seed {seed}. scikit-learn defaults for the vectorizers and "
        "LogisticRegression; max_iter is raised (doubled) only for a fold whose fit did not converge.",
        f"F1 is the {f1_description(data)}. ± is the sample standard deviation over folds.",
        "",
        "| representation | accuracy | F1 | fit time per fold (s) | max_iter used (over the folds) |",
        "|---|---|---|---|---|",
    ]
    for name, result in results.items():
        iters = sorted({str(m) for m in max_iters[name]}, key=lambda s: (len(s), s))
        lines.append(f"| {name} | {_mean_std(result, 'accuracy')} | {_mean_std(result, 'f1')} | "
                     f"{_seconds(result.get('fit_time_s_mean'))} | {', '.join(iters)} |")
    lines += ["", "Per fold:", "",
              "| fold | " + " | ".join(f"{n} accuracy | {n} F1" for n in results) + " |",
              "|---|" + "---|---|" * len(results)]
    for i in range(folds):
        cells = [f"{r['folds'][i]['accuracy']:.4f} | {r['folds'][i]['f1']:.4f}" for r in results.values()]
        lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _seconds(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _counts_text(data: LabelledTexts) -> str:
    return ", ".join(f"{name!r}: {count}" for name, count in data.class_counts().items())


def _mean_std(result: dict, metric: str) -> str:
    mean, std = result.get(f"{metric}_mean"), result.get(f"{metric}_std")
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "n/a"
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return f"{mean:.4f}"
    return f"{mean:.4f} ± {std:.4f}"


def _write_text_atomic(path: str, text: str) -> None:
    tmp_path = f"{path}.tmp-{os.getpid()}"
    with open(tmp_path, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp_path, path)


# ---------------------------------------------------------------------------------------------------------------
# BERT


@dataclasses.dataclass(frozen=True)
class BertSettings:
    """One BERT model of the study and how it is trained; the paper's values where it gives them.

    `mode` is frozen (static features, backbone in inference mode), unfrozen (everything trains) or top2 (the last
    two encoder blocks train); `trainable_layers` (0..L or "all"), when given, overrides it. `seed` seeds the
    held-out split; run r (from 0) uses seed `seed + r` for the head's initialisation, dropout and data order.
    `epochs` defaults to `FINE_TUNING_EPOCHS` when encoder blocks train and `FROZEN_EPOCHS` when only the head does.
    `precision` is a Keras dtype policy (`config.PRECISIONS`) for the backbone; the head, its outputs and the loss
    are float32 under any of them.
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
    hidden_units: int = 64
    max_seq_length: int = 128
    precision: str = "float32"

    def __post_init__(self):
        check_choice("bert_mode", self.mode, tuple(BERT_MODES))
        check_choice("pooling", self.pooling, POOLINGS)
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
            (self.hidden_units >= 1, f"--hidden_units must be at least 1, got {self.hidden_units}"),
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
        """The folder holding the seed in training (its finished epochs and last checkpoint)."""
        return f"{self.stem}.in_progress"

    def comparable(self) -> dict:
        """The settings that runs must share to be merged into one file (everything but the number of runs)."""
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


def hidden_states(backbone, token_inputs: dict, training=None) -> list:
    """[embeddings output, block 0 output, ..., block L-1 output] of a keras-hub BertBackbone.

    Re-applies the backbone's own sub-layers in the order of `BertBackbone.__init__`, so the weights are the same
    variables and `freezing.set_trainable_layers(backbone, ...)` governs what trains. The backbone's functional
    outputs only expose the last block, and BERT's feature-based recipe needs the last four.
    """
    layer = backbone.get_layer
    tokens = layer("token_embedding")(token_inputs["token_ids"])
    positions = layer("position_embedding")(tokens)
    segments = layer("segment_embedding")(token_inputs["segment_ids"])
    x = layer("embeddings_add")((tokens, positions, segments))
    x = layer("embeddings_layer_norm")(x)
    x = layer("embeddings_dropout")(x, training=training)
    states = [x]
    for block in backbone.transformer_layers:
        x = block(x, padding_mask=token_inputs["padding_mask"], training=training)
        states.append(x)
    return states


@functools.lru_cache(maxsize=None)
def _masked_mean_layer():
    """The pooling layer class, defined on first use so that reading data never imports TensorFlow."""
    import keras

    @keras.saving.register_keras_serializable(package="tf_transfer")
    class MaskedMeanPooling(keras.layers.Layer):
        """Mean of the token vectors where `padding_mask` is 1 ([CLS] and [SEP] included, as sentence-BERT)."""

        def call(self, sequence, padding_mask):
            mask = keras.ops.expand_dims(keras.ops.cast(padding_mask, sequence.dtype), -1)
            total = keras.ops.sum(sequence * mask, axis=1)
            return total / keras.ops.maximum(keras.ops.sum(mask, axis=1), 1.0)

    return MaskedMeanPooling


def build_feature_model(backbone, pooling: str):
    """Token inputs -> one feature vector per text.

    cls: the last block's [CLS] vector (BERT's pooler is not used: it was trained for next-sentence prediction, and
    sentence-transformers models such as all-MiniLM-L6-v2 are not trained through it); mean: mean over real
    tokens; last4_concat: the [CLS] vectors of the last four hidden states concatenated (BERT paper, section 5.3),
    the embeddings output counting as a hidden state as in Hugging Face's `hidden_states`.
    """
    import keras

    from tf_transfer.models import heads

    check_choice("pooling", pooling, POOLINGS)
    token_inputs = heads.backbone_inputs()
    states = hidden_states(backbone, token_inputs)
    if pooling == "cls":
        features = states[-1][:, 0, :]
    elif pooling == "mean":
        # Summed in float32: under mixed precision a bfloat16 sum over 128 tokens would lose digits.
        features = _masked_mean_layer()(dtype="float32", name="mean_pooling")(states[-1],
                                                                              token_inputs["padding_mask"])
    else:
        if len(states) < 4:
            raise TransferError(f"--pooling=last4_concat needs at least 3 encoder blocks (4 hidden states); the "
                                f"backbone has {len(states) - 1}")
        features = keras.layers.Concatenate(axis=-1, name="last4_concat")([s[:, 0, :] for s in states[-4:]])
    return keras.Model(token_inputs, features, name=f"features_{pooling}")


def head_outputs(features, num_classes: int, hidden_units: int):
    """One dense hidden layer (ReLU) and a logistic output (sigmoid for two classes, softmax for more).

    Both layers are float32 under any precision policy (given explicitly: layers take the global policy
    otherwise), so the head computes, and returns probabilities, in float32 and the loss is taken in float32.
    """
    import keras

    hidden = keras.layers.Dense(hidden_units, activation="relu", dtype="float32", name="hidden")(features)
    if num_classes == 2:
        return keras.layers.Dense(1, activation="sigmoid", dtype="float32", name="logistic")(hidden)
    return keras.layers.Dense(num_classes, activation="softmax", dtype="float32", name="softmax")(hidden)


def _compile(model, num_classes: int, lr: float) -> None:
    import keras

    loss = (keras.losses.BinaryCrossentropy() if num_classes == 2
            else keras.losses.SparseCategoricalCrossentropy())
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=lr), loss=loss)


def _predicted_classes(probabilities: np.ndarray, num_classes: int) -> np.ndarray:
    if num_classes == 2:
        return (probabilities[:, 0] >= 0.5).astype(np.int64)
    return probabilities.argmax(axis=-1).astype(np.int64)


def _predict_in_order(model, encoded) -> np.ndarray:
    """Predicts `encoded` in length-sorted batches (little padding) and returns rows in the original order."""
    from tf_transfer.data import inputs

    plan = inputs.plan_eval_batches(encoded.lengths, INFERENCE_BATCH_SIZE, "bucket")
    outputs = model.predict(inputs.to_dataset(encoded, plan, "bucket", 16, with_labels=False), verbose=0)
    ordered = np.empty_like(outputs)
    ordered[np.concatenate(plan)] = outputs
    return ordered


def _encode(data: LabelledTexts, tokenizer, max_seq_length: int):
    from tf_transfer.data import inputs
    from tf_transfer.data import tasks

    return inputs.encode(tasks.Examples(list(data.texts), None, data.labels), tokenizer, max_seq_length)


def _load_results(path: str, settings: BertSettings, data: LabelledTexts, overwrite: bool) -> Optional[dict]:
    if overwrite or not os.path.exists(path):
        return None
    with open(path) as f:
        existing = json.load(f)
    wanted = {**settings.comparable(), **data.identity()}
    held = {**existing.get("settings", {}), **{key: existing.get(key) for key in data.identity()}}
    _refuse_other_settings(path, {"precision": "float32", **held}, wanted, "runs")  # older files: float32
    return existing


def run_bert(data: LabelledTexts, output_dir: str, settings: BertSettings, overwrite: bool = False) -> dict:
    """Trains `settings.runs` seeds of one BERT model on one held-out split; returns the model's results file.

    Frozen (k=0): the features are computed once, in inference mode, and each seed trains only the dense head.
    Otherwise each seed starts from the preset's weights again and trains backbone blocks and head end to end.

    Resuming: runs already in `output_dir/bert_<model>_<pooling>.json` with the same settings and data are kept and
    not repeated (the file is rewritten after every run); the seed in training keeps its finished epochs in
    `bert_<model>_<pooling>.in_progress/` (`summary.json` and the last epoch's checkpoint: weights, optimizer
    state, dropout RNG; epoch e of a seed always has the same batches), so a killed run loses at most the epoch in
    progress. With every seed done it says so and trains nothing; `overwrite` starts afresh.
    """
    path = os.path.join(output_dir, settings.file_name)
    work_dir = os.path.join(output_dir, settings.work_name)
    existing = _load_results(path, settings, data, overwrite)
    if overwrite:
        _remove_work(work_dir)
        shutil.rmtree(os.path.join(output_dir, TENSORBOARD_DIR, settings.stem), ignore_errors=True)
    train_data, test_data = held_out_split(data, settings.test_fraction, settings.seed)
    done = {run["seed"]: run for run in (existing or {}).get("runs", [])}
    seeds = [settings.seed + r for r in range(settings.runs)]
    todo = [seed for seed in seeds if seed not in done]
    if not todo:
        _remove_work(work_dir)  # left by a kill between the results file and the clean-up
        print(f"{path} already holds all {settings.runs} run(s) (seeds {seeds[0]}-{seeds[-1]}); nothing to train "
              "(pass --overwrite to start afresh)", flush=True)
        return existing

    # TensorFlow is imported only after the data has been read and checked, so bad input fails fast.
    import keras

    from tf_transfer.models import backbones

    # The policy is global in Keras and read when layers are built: set it (float32 included) before loading.
    keras.mixed_precision.set_global_policy(settings.precision)
    loaded = backbones.load_preset(settings.preset)
    backbone = loaded.backbone
    freezing.check_trainable_layers(settings.k, backbone.num_layers)
    logging.info("preset %s: weights from %s", settings.preset, loaded.source)
    encoded_train = _encode(train_data, loaded.tokenizer, settings.max_seq_length)
    encoded_test = _encode(test_data, loaded.tokenizer, settings.max_seq_length)

    results = existing or {}
    continuing = bool(results)
    results.update({
        "model": settings.model_name,
        "pooling": settings.pooling,
        "settings": settings.comparable(),
        "precision": settings.precision,
        "data": os.path.abspath(data.source),
        **data.identity(),
        "preset_source": loaded.source,
        "num_layers": int(backbone.num_layers),
        "f1_definition": f1_description(data),
        "examples": {"train": len(train_data), "test": len(test_data)},
        # Texts that fill the token budget were probably cut; many of them mean --max_seq_length is too small.
        "texts_at_max_seq_length": int(np.sum(np.concatenate([encoded_train.lengths, encoded_test.lengths])
                                              >= settings.max_seq_length)),
        "completed": False,
    })
    os.makedirs(output_dir, exist_ok=True)
    trainer = (_FrozenTrainer if settings.k == 0 else _FineTuner)(backbone, settings, data.num_classes,
                                                                   encoded_train, encoded_test)
    described = trainer.describe()
    if continuing:
        # The first attempt's feature time stays the model's; what a later attempt spent again is listed here.
        results.setdefault("resumes", []).append({
            "seeds_done": sorted(done), **described, "machine": machine.describe(), "code": record.code_version(),
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    else:
        results.update({**described, "machine": machine.describe(), "code": record.code_version()})
    results.setdefault("runs", [])
    record.write_json_atomic(path, results)  # the settings are on disk before any training: a rerun checks them
    for seed in todo:
        work = _SeedWork(work_dir, seed, settings.comparable())
        run = trainer.run(seed, work)
        write_bert_events(output_dir, settings, run)
        done[seed] = run
        results["runs"] = [done[s] for s in sorted(done)]
        results.update(summarise({m: [r[m] for r in results["runs"]] for m in ("accuracy", "f1")}))
        results["completed"] = all(s in done for s in seeds)
        record.write_json_atomic(path, results)  # the run is kept first, then its work is dropped
        work.finish()
        logging.info("%s seed %d: accuracy %.4f, F1 %.4f, %.1f s", settings.file_name, seed, run["accuracy"],
                     run["f1"], run["train_time_s"])
    _remove_work(work_dir)
    return _read_json(path)


def _remove_work(work_dir: str) -> None:
    """Deletes the in-progress folder's files (only the kinds this module writes there) and the folder."""
    if os.path.isdir(work_dir):
        checkpoints.clear(work_dir)
        if not os.listdir(work_dir):
            os.rmdir(work_dir)


class _SeedWork:
    """The seed in training: its finished epochs in `work_dir/summary.json`, the last one's checkpoint beside it.

    A summary of another seed or other settings (left by a run that was replaced) is discarded.
    """

    def __init__(self, work_dir: str, seed: int, settings: dict):
        os.makedirs(work_dir, exist_ok=True)
        existing = record.read_summary(work_dir)
        resuming = bool(existing and existing.get("seed") == seed and existing.get("settings") == settings
                        and existing.get("epochs"))
        if not resuming:
            checkpoints.clear(work_dir)
        fresh = {"seed": seed, "settings": settings, "epochs": [], "early_stopping": None, "compile_time_s": None,
                 "completed": False, "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        self.work_dir, self.resuming = work_dir, resuming
        self.summary, self.path = record.start_summary(work_dir, fresh, existing, resuming)

    def start(self, loop, model, compile_time_s: Optional[float]) -> None:
        """Restores the last finished epoch into `model` (built, its optimizer too) and `loop`, when resuming."""
        if not self.resuming:
            self.summary["compile_time_s"] = compile_time_s
        else:
            last_epoch = self.summary["epochs"][-1]["epoch"]
            checkpoints.restore(self.work_dir, last_epoch, model)
            loop.resume_from(self.summary["epochs"], self.summary["early_stopping"])
            # Compiling again after a resume is not training time.
            self.summary["resumes"].append({"after_epoch": last_epoch, "compile_time_s": compile_time_s,
                                            "machine": machine.describe(), "code": record.code_version(),
                                            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
            logging.info("seed %d: resuming after epoch %d", self.summary["seed"], last_epoch)
        record.write_json_atomic(self.path, self.summary)

    def epoch_done(self, loop, model, epoch_record: dict) -> None:
        """Checkpoint first, then the summary that refers to it, then drop the older checkpoint."""
        self.summary["epochs"] = loop.epochs
        self.summary["early_stopping"] = loop.stopper.state()
        checkpoints.save(self.work_dir, epoch_record["epoch"], model)
        record.write_json_atomic(self.path, self.summary)
        checkpoints.prune(self.work_dir, epoch_record["epoch"])

    def finish(self) -> None:
        _remove_work(self.work_dir)


def _train_epochs(model, settings: BertSettings, make_dataset, work: _SeedWork, compile_time_s: Optional[float]):
    """Trains `settings.epochs` epochs (those not finished in an earlier attempt); returns every epoch's record.

    Every epoch is one `fit` call on `make_dataset(epoch)`, timed by `train.EpochLoop` (wall and CPU seconds, the
    running sums continuing over resumes); there is no validation split, so nothing stops early.
    """
    from tf_transfer.training import train

    loop = train.EpochLoop(model, "accuracy", settings.epochs, patience=settings.epochs + 1)
    work.start(loop, model, compile_time_s)
    loop.run(make_dataset, lambda: ({}, {}), lambda epoch_record: work.epoch_done(loop, model, epoch_record))
    return [{key: value for key, value in e.items() if key not in ("val", "test")} for e in loop.epochs]


def _reseed(model, seed: int) -> None:
    """Sets every dropout seed generator of `model` from `seed` alone.

    Their states advance with every step and live in the backbone, which all seeds of a process share: without
    this, a seed's dropout masks depended on the seeds trained before it in the same process, so a run resumed in
    a new process could not repeat the numbers of an uninterrupted one.
    """
    generators = [v for v in model.variables if "seed_generator" in v.path]
    for index, variable in enumerate(generators):
        start = np.random.default_rng([seed, index]).integers(0, 2**31 - 1)
        variable.assign(np.asarray([start, 0], dtype=variable.dtype))


def _run_record(seed: int, scores: dict, epochs: list, work: _SeedWork, **extra) -> dict:
    run = {"seed": seed, **scores, "train_time_s": epochs[-1]["train_time_s"],
           "train_cpu_s": epochs[-1]["train_cpu_s"], "final_loss": epochs[-1]["loss"], **extra, "epochs": epochs}
    if work.summary.get("resumes"):
        run["resumes"] = work.summary["resumes"]
    return run


class _FrozenTrainer:
    """Static features: the backbone runs once over every text in inference mode; seeds train only the head."""

    def __init__(self, backbone, settings: BertSettings, num_classes: int, encoded_train, encoded_test):
        self.settings, self.num_classes = settings, num_classes
        feature_model = build_feature_model(backbone, settings.pooling)
        start = time.perf_counter()
        # Kept in float32 whatever the backbone computed in: the head is float32.
        self.train_features = _predict_in_order(feature_model, encoded_train).astype(np.float32)
        self.test_features = _predict_in_order(feature_model, encoded_test).astype(np.float32)
        self.feature_time_s = time.perf_counter() - start
        self.train_labels, self.test_labels = encoded_train.labels, encoded_test.labels

    def describe(self) -> dict:
        return {"feature_time_s": self.feature_time_s, "num_features": int(self.train_features.shape[1])}

    def run(self, seed: int, work: _SeedWork) -> dict:
        import keras

        keras.utils.set_random_seed(seed)
        features = keras.Input(shape=(self.train_features.shape[1],), name="features")
        model = keras.Model(features, head_outputs(features, self.num_classes, self.settings.hidden_units))
        _compile(model, self.num_classes, self.settings.lr)
        model.optimizer.build(model.trainable_variables)  # its slots exist before a checkpoint is restored
        # BinaryCrossentropy wants float targets; SparseCategoricalCrossentropy wants class indices.
        targets = self.train_labels.astype(np.float32 if self.num_classes == 2 else np.int64)

        def epoch_batches(epoch):
            # Shuffled afresh each epoch, as fit(shuffle=True) would, but from (seed, epoch) alone: resumable.
            order = np.random.default_rng([seed, epoch]).permutation(len(targets))
            return _array_dataset((self.train_features[order], targets[order]), self.settings.batch_size)

        epochs = _train_epochs(model, self.settings, epoch_batches, work, compile_time_s=None)  # no warm-up
        probabilities = model.predict(_array_dataset((self.test_features,), INFERENCE_BATCH_SIZE), verbose=0)
        scores = score(self.test_labels, _predicted_classes(probabilities, self.num_classes), self.num_classes)
        return _run_record(seed, scores, epochs, work)


class _FineTuner:
    """Backbone blocks and head trained end to end; every seed starts again from the preset's weights."""

    def __init__(self, backbone, settings: BertSettings, num_classes: int, encoded_train, encoded_test):
        self.backbone, self.settings, self.num_classes = backbone, settings, num_classes
        self.encoded_train, self.encoded_test = encoded_train, encoded_test
        self.pretrained = [np.array(w) for w in backbone.get_weights()]
        self.table = None

    def describe(self) -> dict:
        return {}

    def _build(self):
        import keras

        feature_model = build_feature_model(self.backbone, self.settings.pooling)
        outputs = head_outputs(feature_model.output, self.num_classes, self.settings.hidden_units)
        model = keras.Model(feature_model.inputs, outputs, name=f"bert_{self.settings.model_name}")
        freezing.set_trainable_layers(self.backbone, self.settings.k)  # before compile: Keras reads it there
        _compile(model, self.num_classes, self.settings.lr)
        return model

    def run(self, seed: int, work: _SeedWork) -> dict:
        import keras

        from tf_transfer.data import inputs
        from tf_transfer.training import train

        keras.utils.set_random_seed(seed)
        self.backbone.set_weights(self.pretrained)
        model = self._build()
        _reseed(model, seed)
        table = freezing.parameter_table(model, self.backbone)
        if self.table is None:
            print(f"trainable parameters per block (bert {self.settings.model_name}):")
            print(freezing.format_table(table), flush=True)
            self.table = table
        first_plan = inputs.plan_train_batches(self.encoded_train.lengths, self.settings.batch_size, seed, 1,
                                               "bucket", self.encoded_train.max_seq_length, 16)
        warmup = inputs.distinct_shapes(self.encoded_train, first_plan, "bucket", 16)
        compile_time_s = train.compile_steps(model, inputs.to_dataset(self.encoded_train, warmup, "bucket", 16))
        epochs = _train_epochs(
            model, self.settings,
            lambda epoch: inputs.train_dataset(self.encoded_train, self.settings.batch_size, seed, epoch),
            work, compile_time_s)
        probabilities = _predict_in_order(model, self.encoded_test)
        scores = score(self.encoded_test.labels, _predicted_classes(probabilities, self.num_classes),
                       self.num_classes)
        return _run_record(seed, scores, epochs, work, compile_time_s=work.summary["compile_time_s"],
                           trainable_params=int(table[-1][1]), total_params=int(table[-1][2]))


def _array_dataset(arrays: tuple, batch_size: int):
    """In-memory arrays as consecutive batches of `batch_size` (the last may be smaller), the way Keras batches
    arrays given to fit/predict, but without tf.data autotuning (see `inputs.prefetched`)."""
    import tensorflow as tf

    from tf_transfer.data import inputs

    dataset = tf.data.Dataset.from_tensor_slices(arrays if len(arrays) > 1 else arrays[0]).batch(batch_size)
    return inputs.prefetched(dataset, math.ceil(len(arrays[0]) / batch_size))


# ---------------------------------------------------------------------------------------------------------------
# Report


def _read_json(path: str):
    with open(path) as f:
        return json.load(f)


def load_results(output_dir: str):
    """`(sparse results or None, {model label: BERT results})` from the files in `output_dir`."""
    sparse_path = os.path.join(output_dir, SPARSE_JSON)
    sparse = _read_json(sparse_path) if os.path.exists(sparse_path) else None
    bert = {}
    for path in sorted(glob.glob(os.path.join(output_dir, "bert_*.json"))):
        results = _read_json(path)
        if results.get("runs"):
            bert[f"BERT {results['model']} ({results['pooling']})"] = results
    return sparse, bert


def _values(result: dict, metric: str, key: str) -> list:
    return [entry[metric] for entry in result[key]]


def comparisons(sparse: Optional[dict], bert: dict) -> list:
    """Welch tests: every pair of BERT models, and the best sparse baseline (by mean F1) vs each BERT model."""
    groups = {name: {m: _values(r, m, "runs") for m in ("accuracy", "f1")} for name, r in bert.items()}
    pairs = [(a, b) for i, a in enumerate(groups) for b in list(groups)[i + 1:]]
    if sparse:
        best = max(sparse, key=lambda name: -math.inf if sparse[name]["f1_mean"] is None else sparse[name]["f1_mean"])
        best_name = f"sparse {best} (best by F1)"
        groups[best_name] = {m: _values(sparse[best], m, "folds") for m in ("accuracy", "f1")}
        pairs += [(best_name, name) for name in bert]
    rows = []
    for a, b in pairs:
        for metric in ("accuracy", "f1"):
            test = welch_test(groups[a][metric], groups[b][metric])
            rows.append({"a": a, "b": b, "metric": metric, "mean_a": float(np.mean(groups[a][metric])),
                         "mean_b": float(np.mean(groups[b][metric])), "n_a": len(groups[a][metric]),
                         "n_b": len(groups[b][metric]), "t": test.t, "df": test.df, "p": test.p})
    return rows


def _boxplot(path: str, metric: str, sparse: Optional[dict], bert: dict) -> None:
    # A bare Figure renders with Agg without touching pyplot's global backend (headless, and safe in tests).
    from matplotlib.figure import Figure

    panels = []
    if bert:
        panels.append(("BERT models: seeds on one held-out split", {n: _values(r, metric, "runs")
                                                                     for n, r in bert.items()}))
    if sparse:
        panels.append(("Sparse baselines: cross-validation folds", {n: _values(r, metric, "folds")
                                                                     for n, r in sparse.items()}))
    figure = Figure(figsize=(5 * len(panels) + 1, 4.5), layout="constrained")
    # One y scale for both panels, so that a BERT box and a sparse box can be compared by eye.
    axes = figure.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    for ax, (title, groups) in zip(axes, panels):
        ax.boxplot(list(groups.values()), showmeans=True)
        ax.set_xticks(range(1, len(groups) + 1), [f"{name}\n(n={len(v)})" for name, v in groups.items()],
                      fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("F1" if metric == "f1" else "accuracy")
        ax.grid(axis="y", alpha=0.3)
    figure.suptitle(f"{'F1' if metric == 'f1' else 'Accuracy'} (box: quartiles, line: median, triangle: mean)")
    figure.savefig(path, dpi=120)


def _number(value, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if 0 < abs(value) < 10 ** -digits:  # a tiny p-value would otherwise print as 0.0000
        return f"{value:.1e}"
    return f"{value:.{digits}f}"


def write_report(output_dir: str) -> str:
    """Writes `report.md` and the box plots from whatever results `output_dir` holds; returns the report's path."""
    sparse, bert = load_results(output_dir)
    if not sparse and not bert:
        raise TransferError(f"no results in {output_dir}: run --approach=sparse or --approach=bert with this "
                            "--output_dir first")
    lines = ["# Sparse baselines vs BERT (Hart's disaster-tweet study)", ""]
    if bert:
        any_bert = next(iter(bert.values()))
        lines.append(f"Data: `{any_bert['data']}`. F1 is the {any_bert['f1_definition']}.")
    else:
        lines.append(f"F1 as defined in {SPARSE_MARKDOWN} (two labels: the positive class; more: macro F1).")
    lines += ["± is the sample standard deviation (ddof=1).", ""]
    if sparse:
        folds = len(next(iter(sparse.values()))["folds"])
        lines += [f"## Sparse baselines (logistic regression, {folds}-fold cross-validation)", "",
                  "| representation | accuracy | F1 | fit time per fold (s) |", "|---|---|---|---|"]
        lines += [f"| {name} | {_mean_std(r, 'accuracy')} | {_mean_std(r, 'f1')} | "
                  f"{_seconds(r.get('fit_time_s_mean'))} |" for name, r in sparse.items()]
        lines.append("")
    if bert:
        lines += ["## BERT models (one held-out split, one run per seed)", "",
                  "| model | preset | runs | train / test | accuracy | F1 | train time per run (s) |",
                  "|---|---|---|---|---|---|---|"]
        for name, r in bert.items():
            times = [run["train_time_s"] for run in r["runs"]]
            lines.append(f"| {name} | {r['settings']['preset']} | {len(r['runs'])} | {r['examples']['train']} / "
                         f"{r['examples']['test']} | {_mean_std(r, 'accuracy')} | {_mean_std(r, 'f1')} | "
                         f"{np.mean(times):.1f} |")
        lines += ["", "Settings per model: " + "; ".join(
            f"{name}: epochs {r['settings']['epochs']}, batch {r['settings']['batch_size']}, lr "
            f"{r['settings']['lr']}, hidden {r['settings']['hidden_units']}, split seed {r['settings']['split_seed']}"
            + (f", features computed once in {r['feature_time_s']:.1f} s" if "feature_time_s" in r else "")
            for name, r in bert.items()), ""]
    lines += ["## Box plots", ""]
    for metric in ("accuracy", "f1"):
        file_name = BOXPLOT.format(metric=metric)
        _boxplot(os.path.join(output_dir, file_name), metric, sparse, bert)
        lines.append(f"![{metric}]({file_name})")
    lines.append("")
    rows = comparisons(sparse, bert)
    if rows:
        lines += ["## Welch's t-tests", "",
                  "Two-sided, unequal variances (`scipy.stats.ttest_ind(equal_var=False)`); df by Welch–"
                  "Satterthwaite. n/a: fewer than two values in a group, or no spread in either.", "",
                  "| A | B | metric | mean A (n) | mean B (n) | t | df | p |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['a']} | {r['b']} | {r['metric']} | {r['mean_a']:.4f} ({r['n_a']}) | {r['mean_b']:.4f} "
                  f"({r['n_b']}) | {_number(r['t'], 2)} | {_number(r['df'], 1)} | {_number(r['p'], 4)} |"
                  for r in rows]
        if sparse and bert:
            lines += ["", "Sparse vs BERT compares cross-validation folds (spread over data) with seeds on one "
                      "split (spread over initialisations), as the paper does; read those p-values with that in "
                      "mind."]
    else:
        lines.append("No Welch tests: they need two BERT models, or a BERT model and the sparse baselines.")
    path = os.path.join(output_dir, REPORT)
    _write_text_atomic(path, "\n".join(lines) + "\n")
    return path
