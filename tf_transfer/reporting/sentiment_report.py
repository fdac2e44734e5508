"""Hart's study in Markdown and box plots: the sparse baselines' table and `report.md` over every result present.

`report.md` holds the sparse baselines (folds) and the BERT models (seeds) as mean ± sample std (`stats`), box
plots of accuracy and F1, Welch's t-tests (with the 95% interval of each difference) between every pair of BERT
models and between the best sparse baseline (by mean F1) and each BERT model, and Hart's claims checked against
the margins `CLAIM_MARGINS` with `stats`' verdicts (`claims_of`).

Example:

>>> from tf_transfer.reporting import sentiment_report as report
>>> report.number(3.2e-7), report.number(float("nan"))
('3.2e-07', 'n/a')
>>> report.write_report("out/hart")  # doctest: +SKIP
'out/hart/report.md'
"""

from __future__ import annotations

import glob
import math
import os
from typing import Optional

from tf_transfer.core.errors import TransferError
from tf_transfer.data.labelled_texts import LabelledTexts
from tf_transfer.core import stats
from tf_transfer.reporting import claims
from tf_transfer.studies.sentiment.sentiment_results import (BOXPLOT, REPORT, SPARSE_JSON, SPARSE_MARKDOWN,
                                                             SPARSE_PROGRESS, f1_description, read_json)


def write_text_atomic(path: str, text: str) -> None:
    tmp_path = f"{path}.tmp-{os.getpid()}"
    with open(tmp_path, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp_path, path)


def write_sparse_markdown(output_dir: str, data: LabelledTexts, folds: int, seed: int) -> str:
    """Writes `sparse_baselines.md` from the sparse results in `output_dir` and the `max_iter` each fold used (kept
    in the progress file); returns its path."""
    results = read_json(os.path.join(output_dir, SPARSE_JSON))
    max_iters = read_json(os.path.join(output_dir, SPARSE_PROGRESS))["max_iter"]
    path = os.path.join(output_dir, SPARSE_MARKDOWN)
    write_text_atomic(path, sparse_markdown(results, max_iters, data, folds, seed))
    return path


def sparse_markdown(results: dict, max_iters: dict, data: LabelledTexts, folds: int, seed: int) -> str:
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


def load_results(output_dir: str):
    """`(sparse results or None, {model label: BERT results})` from the files in `output_dir`."""
    sparse_path = os.path.join(output_dir, SPARSE_JSON)
    sparse = read_json(sparse_path) if os.path.exists(sparse_path) else None
    bert = {}
    for path in sorted(glob.glob(os.path.join(output_dir, "bert_*.json"))):
        results = read_json(path)
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
            test = stats.welch_test(groups[a][metric], groups[b][metric])
            rows.append({"a": a, "b": b, "metric": metric, "mean_a": stats.mean(groups[a][metric]),
                         "mean_b": stats.mean(groups[b][metric]), "n_a": len(groups[a][metric]),
                         "n_b": len(groups[b][metric]), "t": test.t, "df": test.df, "p": test.p,
                         "interval": stats.welch_difference(groups[a][metric], groups[b][metric])})
    return rows


# Hart's claims as margins on differences (points of accuracy or F1), stated before reading our numbers: "no
# significant gain" read as a gain under 2 points (about twice the paper's own +0.9); "beats by about 3 points" as a
# gain of at least 1 (a third of it); "almost 10 points" of F1 as at least 5 (half of it); "score alike" as within 3
# points either way (about the folds' spread).
CLAIM_MARGINS = {"no gain": 0.02, "about 3": 0.01, "almost 10": 0.05, "alike": 0.03}
# Every claim is the paper's, tested at a smaller protocol than its own.
CLAIMS_PROTOCOL = ("6-block all-MiniLM-L6-v2 for 12-block BERT-base, 800 SST-2 training sentences for about 6,090 "
                   "tweets")
# `Claim` and `not_run` here make a paper's claims tested at CLAIMS_PROTOCOL (`claims.at_protocol`).
Claim, _ = claims.at_protocol(CLAIMS_PROTOCOL)


def _welch(a: dict, b: dict, metric: str, key_a: str = "runs", key_b: str = "runs") -> stats.Interval:
    return stats.welch_difference(_values(a, metric, key_a), _values(b, metric, key_b))


def _variance_ratio(a: list, b: list, confidence: float = 0.95) -> stats.Interval:
    """var(a) / var(b) with its F interval (normal values); NaN bounds below two values a side."""
    from scipy import stats as scipy_stats

    if len(a) < 2 or len(b) < 2 or stats.sample_std(b) == 0:
        return stats.Interval(float("nan"), float("nan"), float("nan"), min(len(a), len(b)), "F ratio", confidence)
    ratio = stats.sample_std(a) ** 2 / stats.sample_std(b) ** 2
    tail = (1 - confidence) / 2
    return stats.Interval(ratio, ratio / scipy_stats.f.ppf(1 - tail, len(a) - 1, len(b) - 1),
                          ratio / scipy_stats.f.ppf(tail, len(a) - 1, len(b) - 1), min(len(a), len(b)), "F ratio",
                          confidence)


def claims_of(sparse: Optional[dict], bert: dict) -> list:
    """Hart's claims as `claims.Claim`s, each verdict from a 95% interval against `CLAIM_MARGINS` (`claims`' verdict
    kinds; Holm across the models a claim names). BERT's seeds share one
    split, so they do not pair: Welch between BERT models and between BERT's seeds and the sparse folds; the sparse
    representations share their folds, so they pair by fold. [] unless frozen, top2, unfrozen and the three sparse
    representations are all present."""
    models = {r["model"]: r for r in bert.values()}
    if not sparse or not {"frozen", "top2", "unfrozen"} <= set(models) or not {"tfidf", "count", "hash"} <= set(sparse):
        return []
    frozen, top2, unfrozen = models["frozen"], models["top2"], models["unfrozen"]
    m = CLAIM_MARGINS
    rows = []
    for name, model, paper in (("unfrozen", unfrozen, "0.833 vs 0.824; t = −0.91, df = 13, p = 0.38"),
                               ("top2", top2, "0.831 vs 0.824; t = −1.5, df = 16, p = 0.14")):
        found = claims.at_most(_welch(model, frozen, "accuracy"), m["no gain"])
        rows.append(Claim(f"{'Fine-tuning BERT' if name == 'unfrozen' else 'Unfreezing only two blocks'} gives no "
                          f"significant gain over frozen BERT ({name} vs frozen, accuracy)", paper,
                          f"{model['accuracy_mean']:.4f} vs {frozen['accuracy_mean']:.4f}",
                          found.verdict, found.cell(1, 100) + f" points; no gain: under +{100 * m['no gain']:.0f} "
                          f"points with all of the Welch interval ({len(model['runs'])} vs {len(frozen['runs'])} "
                          "seeds)"))
    found = claims.at_most(_variance_ratio(_values(top2, "accuracy", "runs"), _values(unfrozen, "accuracy", "runs")),
                           1.0)
    rows.append(Claim("Tuning only two blocks regularises: less spread over seeds than fully unfrozen (Figure 2)",
                      "box plots only", f"std top2 {top2['accuracy_std']:.3f}, unfrozen {unfrozen['accuracy_std']:.3f}",
                      found.verdict, found.cell(2).replace("+", "") + ": variance ratio top2 / unfrozen with its 95% "
                      "F interval; less spread: all of it below 1"))
    found = claims.ahead({"top2": _welch(top2, frozen, "accuracy"), "unfrozen": _welch(unfrozen, frozen, "accuracy")})
    rows.append(Claim("Fine-tuning raises the accuracy reached (Figure 2)", "box plots only",
                      f"max of the seeds: frozen {max(_values(frozen, 'accuracy', 'runs')):.3f}, top2 "
                      f"{max(_values(top2, 'accuracy', 'runs')):.3f}, unfrozen "
                      f"{max(_values(unfrozen, 'accuracy', 'runs')):.3f}", found.verdict,
                      "on the means (a maximum of seeds has no interval): minus frozen, points, Welch, Holm over the "
                      "two: " + found.cells(scale=100), found.results))
    return rows + _sparse_claims(sparse, models)


def _sparse_claims(sparse: dict, models: dict) -> list:
    """`claims_of`'s claims that set BERT against the sparse baselines, and the sparse baselines against each other."""
    frozen, tfidf, m, rows = models["frozen"], sparse["tfidf"], CLAIM_MARGINS, []
    found = claims.at_least(_welch(frozen, tfidf, "accuracy", "runs", "folds"), m["about 3"])
    rows.append(Claim("Frozen BERT beats the sparse baselines by about 3 accuracy points", "0.824 vs 0.793–0.796",
                      f"{frozen['accuracy_mean']:.4f} vs TF-IDF {tfidf['accuracy_mean']:.4f}", found.verdict,
                      found.cell(1, 100) + f" points; beats by about 3: at least +{100 * m['about 3']:.0f} with all "
                      "of the Welch interval (seeds vs folds)"))
    rows.append(_beats_tfidf("Fine-tuned BERT beats the sparse baselines by about 3 accuracy points",
                             "unfrozen 0.833, top2 0.831 vs 0.793–0.796", models, tfidf, ("top2", "unfrozen"),
                             "accuracy", m["about 3"], "TF-IDF", "two"))
    rows.append(_beats_tfidf("BERT's F1 is far above the sparse baselines' (\"almost 10 points\")",
                             "0.850–0.872 vs 0.735–0.746", models, tfidf, ("frozen", "top2", "unfrozen"), "f1",
                             m["almost 10"], "TF-IDF's F1", "three"))
    found = claims.alike({f"{a} − {b}": stats.paired_difference(_values(sparse[a], "accuracy", "folds"),
                                                                _values(sparse[b], "accuracy", "folds"))
                          for a, b in (("tfidf", "count"), ("tfidf", "hash"), ("count", "hash"))}, m["alike"])
    rows.append(Claim("The three sparse representations score alike (counts marginally best)",
                      "TF-IDF 0.795, counts 0.796, hashed 0.793",
                      ", ".join(f"{k} {sparse[k]['accuracy_mean']:.4f}" for k in ("tfidf", "count", "hash")),
                      found.verdict,
                      f"alike: within ±{100 * m['alike']:.0f} points with all of the interval, paired by fold (the "
                      "representations share their folds), Holm over the three pairs: " + found.cells(1, 100),
                      found.results))
    return rows


def _beats_tfidf(claim: str, paper: str, models: dict, tfidf: dict, names: tuple, metric: str, margin: float,
                 subtracted: str, family: str) -> claims.Claim:
    """BERT models `names` score at least `margin` above TF-IDF on `metric` (Welch, seeds vs folds; Holm over them)."""
    found = claims.at_least({k: _welch(models[k], tfidf, metric, "runs", "folds") for k in names}, margin)
    return Claim(claim, paper, ", ".join(f"{k} {models[k][f'{metric}_mean']:.4f}" for k in found.results)
                 + f" vs TF-IDF {tfidf[f'{metric}_mean']:.4f}", found.verdict,
                 f"minus {subtracted}, points, at least +{100 * margin:.0f} with all of the Welch interval, Holm over "
                 f"the {family}: " + found.cells(scale=100), found.results)


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


def number(value, digits: int = 4) -> str:
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
                         f"{stats.mean(times):.1f} |")
        lines += ["", "Settings per model: " + "; ".join(
            f"{name}: epochs {r['settings']['epochs']}, batch {r['settings']['batch_size']}, lr "
            f"{r['settings']['lr']}, {_head(r['settings']['hidden_units'])}, split seed {r['settings']['split_seed']}"
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
                  "| A | B | metric | mean A (n) | mean B (n) | A − B [95% interval] | t | df | p |",
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['a']} | {r['b']} | {r['metric']} | {r['mean_a']:.4f} ({r['n_a']}) | {r['mean_b']:.4f} "
                  f"({r['n_b']}) | {r['interval'].text(4)} | {number(r['t'], 2)} | {number(r['df'], 1)} | "
                  f"{number(r['p'], 4)} |" for r in rows]
        if sparse and bert:
            lines += ["", "Sparse vs BERT compares cross-validation folds (spread over data) with seeds on one "
                      "split (spread over initialisations), as the paper does; read those p-values with that in "
                      "mind."]
    else:
        lines.append("No Welch tests: they need two BERT models, or a BERT model and the sparse baselines.")
    lines += _claims_section(sparse, bert)
    path = os.path.join(output_dir, REPORT)
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path


def _claims_section(sparse: Optional[dict], bert: dict) -> list:
    checked = claims_of(sparse, bert)
    if not checked:
        return []
    return ["", "## Hart's claims, checked", "",
            "Each verdict rests on the 95% interval of the difference against the claim's margin "
            "(`tf_transfer/core/stats.py`): reproduced where all of the interval is on the claim's side, not "
            "reproduced where all of it is on the other, inconclusive otherwise; Holm across the models a claim "
            "names. Margins (`CLAIM_MARGINS`, in points): \"no significant gain\" a gain under 2; \"about 3 "
            "points\" at least 1; \"almost 10 points\" at least 5; \"alike\" within 3 either way. BERT's "
            "seeds share one split (no pairing: Welch); the sparse representations share their folds (paired "
            "by fold).", "", claims.table(checked)]


def _head(hidden_units: int) -> str:
    return "the paper's logistic head" if hidden_units == 0 else f"hidden layer of {hidden_units} units"
