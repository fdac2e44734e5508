"""The claims table of the transfer-learning report: each headline claim of Wang's paper, its number, ours and a
verdict with its basis: the 95% interval of each difference, paired by seed (a seed fixes the validation split), the
paper's averages tested on the mean over tasks, per-task cells Holm-corrected, and score claims only on the tasks
where full fine-tuning beats the constant prediction by 10 points (`tf_transfer.core.stats`).

>>> from tf_transfer.reporting.transfer_learning_claims import claims_section  # doctest: +SKIP
"""

from __future__ import annotations

from tf_transfer.reporting.transfer_learning_paper import (BUDGET_FRACTIONS, LARGE, PAPER_SMALL_DEDUCTION,
                                                           PAPER_SMALL_TIME_SAVED, RATES, UNCACHED_TASKS, paper_metric,
                                                           paper_score)
from tf_transfer.core import stats
from tf_transfer.reporting import claims
from tf_transfer.reporting import tables as reports

def completed_runs(by_cell, task, k, lr, part="main") -> list:
    return [r["summary"] for r in by_cell.get((task, k, lr, part), []) if r["summary"]]


OTHER_MACHINE = "n/a: other machine"
# Every claim here is the paper's, tested at a smaller protocol than its own: a shortfall says nothing about BERT-base.
CLAIMS_PROTOCOL = ("6-block all-MiniLM-L6-v2 on one CPU core, batch 32, at most 10 epochs, 2 seeds; the paper: "
                   "12-block BERT-base on a GPU")
# `Claim` and `not_run` here make a paper's claims tested at CLAIMS_PROTOCOL (`claims.at_protocol`).
Claim, not_run = claims.at_protocol(CLAIMS_PROTOCOL)


def saved_cell(mean_time, base_time, setting_censored: bool, base_censored: bool, runs=()) -> str:
    """Time saved against fine-tuning, with the direction a censored side bounds it in; `OTHER_MACHINE` where
    `runs` (the summaries of both sides) ran on more than one kind of machine."""
    if not mean_time or not base_time:
        return "n/a"
    if not reports.one_machine(runs):
        return OTHER_MACHINE
    text = f"{100 * (1 - mean_time / base_time):.0f}%"
    if setting_censored and base_censored:
        return text + " (both sides censored: no bound)"
    return ("≥ " if base_censored else "≤ " if setting_censored else "") + text


def _better_rate(by_cell, task, k):
    """The rate with the better mean test score (the paper's metric), as the paper compares the two approaches
    "only ... under the better of the two learning rates"; None without completed runs."""
    means = [(reports.mean_std([paper_score(s) for s in completed_runs(by_cell, task, k, lr)])[0], lr) for lr in RATES]
    means = [(m, lr) for m, lr in means if m is not None]
    return max(means, key=lambda pair: pair[0])[1] if means else None


def mean_or_none(values):
    return reports.mean_std(values)[0]


def _reached(summary, budget, clock, test_metric):
    """Test score (`test_metric`) of the epoch a user would keep within `budget` seconds: the best validation
    score so far on the metric the run stopped on; None when its first epoch took longer."""
    within = [e for e in summary["epochs"] if (reports.elapsed(summary, e, clock) or float("inf")) <= budget]
    if not within:
        return None
    best = max(within, key=lambda e: e["val"].get(summary["metric"])
               if e["val"].get(summary["metric"]) is not None else float("-inf"))
    return reports.test_score(best, test_metric)


def _over(differences: dict) -> str:
    """`mean of cola, stsb` / `stsb alone`, naming the tasks left out as not testable."""
    tested = [t for t, i in differences.items() if i is not None]
    left = [t for t, i in differences.items() if i is None]
    return ((f"mean of {', '.join(tested)}" if len(tested) > 1 else f"{tested[0]} alone")
            + (f"; {', '.join(left)} not testable" if left else ""))


def _testable_tasks(small, by_cell, baselines) -> dict:
    """Per task: whether full fine-tuning (its better rate) beats the constant prediction by 10 points on dev (by
    the paper's metric); None where no baseline is known (then the task counts, said in the basis)."""
    found = {}
    for task in small:
        full = completed_runs(by_cell, task, "all", _better_rate(by_cell, task, "all"))
        found[task] = claims.testable_from_runs(full, (baselines or {}).get(task), paper_score)
    return found


def claims_section(tasks, by_cell, clock, collected, baselines=None) -> list:
    """The paper's headline claims beside ours, with a verdict and its basis, generated from the runs.

    `baselines`: per task the constant prediction's dev score by the paper's metric (`reports.dev_baselines`), which
    decides where a score claim is testable."""
    small = [t for t in tasks if t not in LARGE]
    large = [t for t in tasks if t in LARGE]
    cola_standing = any(r["stand_in"] and r["settings"]["task"] == "cola" for r in collected)
    cola_note = ("; CoLA: accuracy at the epoch MCC chose (stand-ins stopped on MCC, rerun pending)"
                 if cola_standing and "cola" in small else "")
    differs = ("setting differs: MiniLM-L6, last k of 6 blocks (the paper: of 12); batch 32, ≤ 10 epochs (the "
               "paper: 1, ≤ 30); tasks " + ", ".join(tasks))
    learned = _testable_tasks(small, by_cell, baselines)
    scored = [t for t in small if learned[t] is not False]
    gains = "; ".join(
        f"{t} {100 * (mean_or_none([paper_score(s) for s in completed_runs(by_cell, t, 'all', _better_rate(by_cell, t, 'all'))]) - baselines[t]['score']):+.1f}"
        for t in small if (baselines or {}).get(t) and completed_runs(by_cell, t, "all", _better_rate(by_cell, t, "all")))
    testable_note = ("score claims testable on " + (", ".join(scored) or "no task")
                     + (f" (full fine-tuning over the constant prediction on dev, points: {gains})" if gains else ""))
    rows = [_time_saved_claim(k, small, by_cell, clock, differs) for k in (1, 2, 3, 4)]
    rows += [_close_score_claim(k, small, by_cell, learned, testable_note + cola_note + "; " + differs)
             for k in (1, 2, 3, 4)]
    rows.append(_budget_claim([t for t in small if learned[t] is not False], by_cell, clock,
                              testable_note + "; " + differs + cola_note))
    rows.append(_large_claim(large))
    rows += _rate_claims([t for t in small + large if learned.get(t) is not False], by_cell,
                         testable_note + "; " + differs + cola_note)
    return ["## The paper's claims, checked", "",
            "Generated from the runs below (rerunning the report keeps it current). "
            + claims.testable_sentence(
                "Here the seeds pair: a seed fixes the validation split, so each difference is paired by seed (2 "
                "seeds: 1 degree of freedom per task). Where the paper gives an average over tasks, the verdict is on "
                "the mean over the tasks (their intervals combined, Welch-Satterthwaite); the per-task cells are "
                "Holm-corrected. The constant prediction is scored on GLUE dev (its validation score is not in the "
                "runs), against full fine-tuning's dev score. Scores are the paper's metrics (CoLA: accuracy)."), "",
            claims.table(rows), ""]


def _time_saved_claim(k: int, small: list, by_cell, clock, differs: str) -> claims.Claim:
    """Small training sets: the last k trained saves time to the stopping point against fine-tuning (the paper:
    30–50%), judged on freezing + cache until freezing alone has run on every task of its arm."""
    claim = f"small training sets: last {k} trained saves time to the stopping point vs fine-tuning"
    paper = f"{PAPER_SMALL_TIME_SAVED[k]:.0f}% (abstract: 30–50%)"
    cached, alone, per_task, censored = _time_saved_by_task(k, small, by_cell, clock)
    if not cached:
        return not_run(claim, paper, "no completed runs of these settings")
    # The paper had no cache: the verdict moves to freezing alone once it has run on every task of its arm.
    waiting = [t for t in UNCACHED_TASKS if t in small and t not in alone]
    on_alone = bool(alone) and not waiting
    mean_cached, mean_alone = stats.mean_of(cached.values()), stats.mean_of(alone.values())
    found = claims.at_least(mean_alone if on_alone else mean_cached, 0.30)
    ours = (f"{mean_cached.text(0, 100, '%')} with the frozen-prefix cache; freezing alone: "
            + (f"{mean_alone.text(0, 100, '%')} ({', '.join(alone)}"
               + (f"; {', '.join(waiting)} not yet run)" if waiting else ")") if alone else "not yet run"))
    return Claim(claim, paper, ours, found.verdict,
                 f"{found.cell(0, 100, '%')} on "
                 f"{'freezing alone' if on_alone else 'freezing + cache'}, the mean over its tasks of the time "
                 "saved as a share of fine-tuning's mean time, paired by seed (the seed fixes the split), 95% t "
                 "interval; reproduced if all of it is at least 30%"
                 + (f"; on freezing alone once it has run on {', '.join(waiting)} too" if alone and waiting
                    else "")
                 + "; better rate per task by mean test score, as the paper; 2 seeds per side; per task: "
                 + "; ".join(per_task)
                 + (f"; censored runs (their times are lower bounds) in {', '.join(censored)}" if censored else "")
                 + "; " + differs + ("; the cache (the paper had none) runs the frozen blocks once"
                                     if not on_alone else ""))


def _time_saved_by_task(k: int, small: list, by_cell, clock) -> tuple:
    """`(cached, alone, per-task texts, censored tasks)`: per task, the time the last k saves as a share of
    fine-tuning's mean time, paired by seed, with the frozen-prefix cache and (where it ran) without it."""
    per_task, cached, alone, censored = [], {}, {}, []
    for task in small:
        lr_k, lr_f = _better_rate(by_cell, task, k), _better_rate(by_cell, task, "all")
        setting, full = completed_runs(by_cell, task, k, lr_k), completed_runs(by_cell, task, "all", lr_f)
        if not setting or not full:
            continue
        base = mean_or_none([reports.time_to_stop(s, clock) for s in full])
        if not base or mean_or_none([reports.time_to_stop(s, clock) for s in setting]) is None:
            continue
        if not reports.one_machine(setting, full):
            per_task.append(f"{task} left out (its runs ran on different machines)")
            continue

        def saved(s, base=base):  # minus the share of fine-tuning's mean time: setting minus full = the saving
            t = reports.time_to_stop(s, clock)
            return None if t is None else -t / base

        cached[task] = reports.seed_difference(setting, full, saved)
        set_cut, full_cut = any(map(reports.censored, setting)), any(map(reports.censored, full))
        text = (f"{task} " + ("" if set_cut == full_cut else "≥ " if full_cut else "≤ ")
                + cached[task].text(0, 100, "%") + (" (both sides censored: no bound)" if set_cut and full_cut
                                                    else ""))
        censored += [task] if any(map(reports.censored, setting + full)) else []
        uncached = completed_runs(by_cell, task, k, lr_k, "uncached")
        if uncached and not reports.one_machine(uncached, full):
            text += ", alone left out (other machine than fine-tuning's runs)"
        elif uncached:
            alone[task] = reports.seed_difference(uncached, full, saved)
            text += f", alone {alone[task].text(0, 100, '%')}"
        per_task.append(text)
    return cached, alone, per_task, censored


def _close_score_claim(k: int, small: list, by_cell, learned: dict, note: str) -> claims.Claim:
    """Small training sets: the last k trained scores within the paper's deduction (+ 2 points) of fine-tuning."""
    differences = {}
    for task in small:
        lr_k, lr_f = _better_rate(by_cell, task, k), _better_rate(by_cell, task, "all")
        setting, full = completed_runs(by_cell, task, k, lr_k), completed_runs(by_cell, task, "all", lr_f)
        if not setting or not full:
            continue
        interval = reports.seed_difference(setting, full, paper_score)
        if not (interval.estimate == interval.estimate):  # NaN: no scores
            continue
        differences[task] = interval if learned[task] is not False else None
    claim = f"small training sets: last {k} trained scores close to fine-tuning"
    paper = f"-{PAPER_SMALL_DEDUCTION[k]:.2f} points (\"% less\", read as points)"
    if not differences:
        return not_run(claim, paper, "no completed runs of these settings")
    margin = (PAPER_SMALL_DEDUCTION[k] + 2) / 100
    found = claims.as_good_as(differences, margin, on_mean=True)
    ours = (f"{found.mean.text(2, 100)} points ({_over(differences)})" if found.mean else "no testable task")
    return Claim(claim, paper, ours, found.verdict,
                 found.cell(1, 100) + f": as good as fine-tuning within {100 * margin:.2f} points (the paper's "
                 "deduction + 2) on the mean over the testable tasks, paired by seed, 95% t interval; better rate per "
                 "task by mean test score; 2 seeds per side; per task, points (Holm over the testable tasks): "
                 + found.cells(scale=100) + "; " + note, found.results)


def _large_claim(large: list) -> claims.Claim:
    """Large training sets: the last 4 beats fine-tuning within the same time (not summarised here)."""
    claim = "large training sets: last 4 beats fine-tuning within the same time"
    paper = "MNLI +0.66/+0.39/+0.19 at 50k/100k/150k s; QQP +0.29/+0.2/+0.04"
    if large:
        return Claim(claim, paper, "see the tables below", stats.INCONCLUSIVE,
                     "large tasks present but not summarised here: read their budget tables")
    return not_run(claim, paper, "no large task here: QQP, MNLI and QNLI's training data are not on this "
                   "machine, SST-2 is too large for the CPU budget")


def _budget_claim(small, by_cell, clock, note) -> claims.Claim:
    """Small training sets: within fine-tuning's time (25/50/100% of it), fine-tuning scores above every transfer
    setting (Wang, Figures 5-6). One family: every (task, budget, setting), fine-tuning minus the setting, paired by
    seed, Holm-corrected; `small`: the testable tasks."""
    comparisons, decided = {}, {}
    for task in small:
        lr_f = _better_rate(by_cell, task, "all")
        full = completed_runs(by_cell, task, "all", lr_f)
        base = mean_or_none([reports.time_to_stop(s, clock) for s in full])
        if not full or not base:
            continue
        metric = paper_metric(task)
        for fraction in BUDGET_FRACTIONS:
            def reached(s, budget=base * fraction):
                return _reached(s, budget, clock, metric)

            for k in (1, 2, 3, 4):
                setting = completed_runs(by_cell, task, k, _better_rate(by_cell, task, k))
                key = (task, int(fraction * 100), k)
                ours, theirs = reports.by_seed(full, reached), reports.by_seed(setting, reached)
                if not ours and not theirs:
                    continue
                if not theirs or not ours:  # one side has no epoch within the budget: the other is ahead
                    decided[key] = stats.REPRODUCED if ours else stats.NOT_REPRODUCED
                    continue
                comparisons[key] = reports.seed_difference(full, setting, reached)
    claim = "small training sets: within the same time, fine-tuning scores above every transfer setting"
    paper = "always (Figures 5–6)"
    if not comparisons and not decided:
        basis = "no completed runs of these settings; " + note
        return not_run(claim, paper, basis) if small else Claim(claim, paper, "no testable task",
                                                                       stats.NOT_TESTABLE, basis)
    found = claims.ahead(comparisons).results
    kinds = {key: v.kind for key, v in found.items()} | decided
    counts = {kind: sum(1 for v in kinds.values() if v == kind) for kind in stats.VERDICTS}
    ahead = sum(1 for key, i in comparisons.items() if i.estimate > 0) + sum(
        1 for v in decided.values() if v == stats.REPRODUCED)
    examples = [f"{task} last {k} at {budget}%: {found[(task, budget, k)].cell(scale=100)}"
                for task, budget, k in sorted(comparisons, key=lambda key: found[key].interval.estimate)[:2]]
    kind = stats.overall(kinds)
    return Claim(claim, paper, f"fine-tuning ahead (by the mean) in {ahead} of {len(kinds)} comparisons", kind,
                 "reproduced if fine-tuning's score minus the setting's is above 0 in every (task, budget, setting), "
            "each a 95% interval paired by seed, Holm-corrected over the "
            f"{len(comparisons)} with scores on both sides: " + ", ".join(f"{counts[v]} {v}" for v in stats.VERDICTS
                                                                         if counts[v])
            + (f" ({len(decided)} decided without a test: one side had no epoch within the budget)" if decided
               else "")
            + "; budgets 25/50/100% of fine-tuning's mean time to its stopping point, the epoch with the best "
            "validation score so far, better rate per task by mean test score; the two lowest differences, "
            "points: " + "; ".join(examples) + "; " + note, found)


def _rate_claims(tasks, by_cell, note) -> list:
    """Section 4: fine-tuning at 1e-3 scores 64% lower than at 2e-5; transfer learning at 2e-5 about 34% lower
    than at 1e-3 (relative changes of the mean score, averaged over tasks; `tasks`: the testable ones)."""
    rows = []
    for claim, paper, ks, high, low in (
            ("fine-tuning at 1e-3 scores lower than at 2e-5", "-64% (average score)", ["all"], 2e-5, 1e-3),
            ("transfer learning at 2e-5 scores lower than at 1e-3", "about -34% (average score)", [1, 2, 3, 4],
             1e-3, 2e-5)):
        changes = {}
        for task in tasks:
            better = [s for k in ks for s in completed_runs(by_cell, task, k, high)]
            other = [s for k in ks for s in completed_runs(by_cell, task, k, low)]
            base = mean_or_none([paper_score(s) for s in better])
            if mean_or_none([paper_score(s) for s in other]) is None or not base:
                continue

            def relative(s, base=base):
                score = paper_score(s)
                return None if score is None else score / base

            changes[task] = reports.seed_difference(other, better, relative,
                                                    key=lambda s: (s.get("trainable_layers", (s.get("config") or {}).get(
                                                        "trainable_layers")), reports.run_seed(s)))
        if not changes:
            basis = "no completed runs at both rates; " + note
            rows.append(not_run(claim, paper, basis) if tasks else Claim(claim, paper, "no testable task",
                                                                                stats.NOT_TESTABLE, basis))
            continue
        found = claims.at_most(changes, 0.0, on_mean=True)
        rows.append(Claim(claim, paper, f"{found.mean.text(0, 100, '%')} ({_over(changes)})", found.verdict,
                          found.cell(0, 100, "%") + ": reproduced if the mean over tasks of the relative change of "
                          "the score is below 0 with all of its 95% interval (the size is the paper's, not tested); "
                          "relative to the mean score at the better rate, paired by "
                          f"{'setting (last 1–4 pooled) and seed' if len(ks) > 1 else 'seed'}; per task (Holm): "
                          + found.cells(scale=100, unit="%") + "; " + note, found.results))
    return rows
