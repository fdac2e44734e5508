"""The sweep's recommendation: one rule over finished runs, the sweep's or any study's (`recommend`), and the
constant prediction every candidate must beat (`constant_prediction`). `tf_transfer.studies.sweep.sweep_search`
re-exports both.

Example:

>>> from tf_transfer.studies.sweep import sweep_rule
>>> runs = [sweep_rule.Run(name, seed, 3, 9, None, score, cost) for name, scores, cost in
...         [("full", [0.84, 0.86, 0.87], 600.0), ("lora", [0.835, 0.857, 0.866], 300.0)]
...         for seed, score in enumerate(scores)]
>>> decided = sweep_rule.recommend(runs, constant={0: 0.78, 1: 0.80, 2: 0.81})
>>> decided["best"], decided["candidate"]
('full', 'lora')
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

MARGIN = 0.01  # one point of a score in [0, 1]: "as good as the best" within it; "learned" beyond the constant by it
MIN_SEEDS = 2


@dataclasses.dataclass(frozen=True)
class Run:
    """One run as the recommendation reads it.

    `epochs`: epochs trained; `max_epochs`: the cap of its stopping rule; `cut`: None when it ended by its stopping
    rule (patience, or the cap), else what cut it short ("budget", "pruned", "reference", "unfinished");
    `score`: the validation score of its best epoch; `cost_s`: seconds to the end of its last epoch (its stopping
    rule's), building the frozen-prefix cache included."""

    candidate: str
    seed: int
    epochs: int
    max_epochs: int
    cut: Optional[str]
    score: Optional[float]
    cost_s: Optional[float]


def run_of(candidate: str, summary: dict, cut: Optional[str] = None) -> Run:
    """A run's row from its `summary.json`: its score at the best epoch on its own metric, its cost in CPU seconds
    (training's over all its epochs plus the cache build; wall seconds where no CPU clock was recorded), and `cut`
    (given, or read from the sweep's mark on its last epoch, or "unfinished")."""
    epochs = summary.get("epochs") or []
    marked = next((e["sweep"] for e in reversed(epochs) if e.get("sweep")), None)
    cut = cut or marked or (None if summary.get("completed") else "unfinished")
    best = summary.get("best_epoch")
    score = epochs[best - 1]["val"].get(summary["metric"]) if best and len(epochs) >= best else None
    last = epochs[-1] if epochs else {}
    if last.get("train_cpu_s") is not None:
        cost = last["train_cpu_s"] + (summary.get("cache_build_cpu_s") or summary.get("cache_build_s") or 0.0)
    elif last:
        cost = last["train_time_s"] + (summary.get("cache_build_s") or 0.0)
    else:
        cost = None
    max_epochs = (summary.get("config") or {}).get("max_epochs", len(epochs))
    return Run(candidate, int(summary.get("seed", 0)), len(epochs), int(max_epochs), cut, score, cost)


def recommend(runs: Sequence[Run], constant: dict, lower_is_better: bool = False, margin: float = MARGIN,
              min_seeds: int = MIN_SEEDS) -> dict:
    """What to train, from finished runs: the cheapest eligible candidate that is as good as the best.

    - Eligible: a candidate with at least `min_seeds` seeds whose runs ended by their stopping rule under the largest
      epoch cap among `runs` (never a run cut by the budget, pruned, or stopped early for any reason but patience).
    - It must beat the constant prediction: `constant` is `{seed: the constant prediction's validation score}` (the
      seed fixes the split), and the seed-paired 95% interval of score minus constant must lie above 0.
    - The best is the one with the best mean score; every other is judged by the 95% interval of its difference to
      the best (paired over the seeds both ran, since a seed fixes the split and the sample; Welch's otherwise): it
      is as good as the best where the interval's low bound lies above -`margin` (`stats.verdict`).
    - Of those, the least cost (mean seconds to the stopping rule, cache build included) wins.

    Returns `{"outcome", "candidate", "best", "margin", "cap", "candidates"}`: outcome "recommended", "nothing beat
    the constant prediction" or "no eligible candidate" (candidate None then); `candidates[name]` holds `seeds`,
    `mean`, `cost_s`, `why_not` (None when eligible), `vs_constant` and `vs_best` (`stats.Interval`s or None),
    `as_good`.
    """
    sign = -1.0 if lower_is_better else 1.0
    cap = max((r.max_epochs for r in runs), default=0)
    found = _tabulate(runs, cap, min_seeds)
    eligible = [name for name, c in found.items() if c["why_not"] is None]
    result = {"outcome": "no eligible candidate", "candidate": None, "best": None, "margin": margin, "cap": cap,
              "candidates": found}
    if not eligible:
        return result
    contenders = _above_constant(found, eligible, constant, sign)
    if not contenders:
        result["outcome"] = "nothing beat the constant prediction"
        return result
    best = max(contenders, key=lambda name: (sign * found[name]["mean"], -(found[name]["cost_s"] or math.inf)))
    _judge_against(best, found, contenders, sign, margin)
    chosen = min((name for name in contenders if found[name]["as_good"]),
                 key=lambda name: (found[name]["cost_s"] if found[name]["cost_s"] is not None else math.inf,
                                   -sign * found[name]["mean"]))
    result.update(outcome="recommended", candidate=chosen, best=best)
    return result


def _tabulate(runs: Sequence[Run], cap: int, min_seeds: int) -> dict:
    """Per candidate: its seeds that ran to their stopping rule under `cap`, their scores and mean cost, and why it is
    not eligible (None when it is)."""
    from tf_transfer.core import stats

    by_name: dict = {}
    for run in runs:
        by_name.setdefault(run.candidate, {})[run.seed] = run  # the latest row of a seed counts
    found = {}
    for name, seeds in sorted(by_name.items()):
        ended = {seed: r for seed, r in seeds.items() if r.cut is None and r.score is not None and r.max_epochs == cap}
        cuts = sorted({r.cut for r in seeds.values() if r.cut})
        why_not = None
        if len(ended) < min_seeds:
            why_not = (f"{len(ended)} of its seeds ran to their stopping rule (needs {min_seeds})"
                       + (f"; {', '.join(cuts)}" if cuts else "")
                       + (f"; capped below {cap} epochs" if any(r.max_epochs < cap for r in seeds.values()) else ""))
        scores = {seed: r.score for seed, r in sorted(ended.items())}
        costs = [r.cost_s for r in ended.values() if r.cost_s is not None]
        found[name] = {"seeds": sorted(scores), "scores": scores,
                       "mean": stats.mean(list(scores.values())) if scores else None,
                       "cost_s": stats.mean(costs) if costs else None, "why_not": why_not,
                       "vs_constant": None, "vs_best": None, "as_good": False}
    return found


def _above_constant(found: dict, eligible: list, constant: dict, sign: float) -> list:
    """The eligible candidates whose seed-paired 95% interval against the constant prediction lies above 0 (a
    candidate whose seeds' constants are not all known is kept: nothing says it did not learn)."""
    from tf_transfer.core import stats

    contenders = []
    for name in eligible:
        c = found[name]
        known = [seed for seed in c["seeds"] if constant.get(seed) is not None]
        if len(known) == len(c["seeds"]):
            c["vs_constant"] = stats.paired_difference([sign * c["scores"][s] for s in known],
                                                       [sign * constant[s] for s in known])
            if not (c["vs_constant"].defined and c["vs_constant"].low > 0):
                c["why_not"] = "not above the constant prediction"
                continue
        contenders.append(name)
    return contenders


def _judge_against(best: str, found: dict, contenders: list, sign: float, margin: float) -> None:
    """Sets each contender's interval of its difference to `best` (paired over the seeds both ran, Welch's
    otherwise) and whether it is as good (low bound above -`margin`)."""
    from tf_transfer.core import stats

    for name in contenders:
        c, b = found[name], found[best]
        common = [seed for seed in c["seeds"] if seed in b["scores"]]
        paired = len(common) >= 2
        mine = [sign * c["scores"][s] for s in (common if paired else c["seeds"])]
        theirs = [sign * b["scores"][s] for s in (common if paired else b["seeds"])]
        c["vs_best"] = stats.difference(mine, theirs, paired)
        c["as_good"] = name == best or stats.verdict(c["vs_best"], margin, "as good as") == stats.REPRODUCED


def constant_prediction(settings: dict) -> dict:
    """The validation score of a model that learned nothing, on the split these settings' runs hold out (the seed
    fixes it): always the training split's majority class (regression: always its mean, whose correlation is
    undefined and counted 0). `{"score", "predicts", "examples"}`; score None where it cannot be computed."""
    import numpy as np

    from tf_transfer.core import metrics
    from tf_transfer.studies.glue.glue_settings import GlueSettings
    from tf_transfer.studies.glue.glue_task import load_data

    glue_settings = GlueSettings.from_dict(settings)
    task, train, validation, _, _ = load_data(glue_settings)
    metric, labels = glue_settings.metric_name, np.asarray(validation.labels)
    if not len(labels):
        return {"score": None, "predicts": None, "examples": 0}
    train_labels = np.asarray(train.labels)
    if task.labels is None or train_labels.dtype.kind == "f":
        guess = float(train_labels.mean())
        score = 0.0 if metric in ("spearman", "pearson") else metrics.compute([metric], labels,
                                                                               np.full(len(labels), guess))[metric]
        return {"score": float(score), "predicts": f"{guess:.3g}", "examples": len(labels)}
    values, counts = np.unique(train_labels, return_counts=True)
    majority = values[int(np.argmax(counts))]
    score = metrics.compute([metric], labels, np.full_like(labels, majority))[metric]
    name = task.labels[int(majority)] if task.labels else str(majority)
    return {"score": float(score), "predicts": str(name), "examples": len(labels)}

