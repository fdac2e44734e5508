"""The stack_conll study's report (experiments/stack_conll.py): the paper's NER claims against our runs on the real
CoNLL-2003, each a `Claim` whose verdict rests on the 95% interval of the seed-paired difference; then every arm's
scores over seeds, each seed's, the data and the commands.

A run's score is its test score (eng.testb) at its best epoch on validation (eng.testa): the epoch early stopping
keeps. Entity F1 and token accuracy are conlleval's (`tf_transfer/core/ner_metrics.py`).

Example:

>>> Design(ARMS, [0, 1, 2], arm_of).write_report(collected, "reports/stack_conll", GRID, "cpu")  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional

from tf_transfer.core import stats
from tf_transfer.reporting import claims
from tf_transfer.reporting import tables
from tf_transfer.reporting.claims import Claim

PAPER_ACCURACY_GAIN = "+0.99 points"  # "improvement towards overall accuracy of 0.99% for the accuracy"
PAPER_F1_GAIN = "+0.068 F1"  # "and 0.068 on the F1 score", as printed (its scale is not stated)
REFERENCE = "stack_and_finetune"


@dataclasses.dataclass
class Design:
    """What the report needs of the grid (experiments/stack_conll.py), so that the report imports no grid:
    `arms` `{name: (head, strategy)}`, the compared `seeds`, `arm_of(settings) -> name`, and the `protocol` the
    paper's claims are tested at (model, sample, machine)."""

    arms: dict
    seeds: list
    arm_of: Callable
    protocol: str = "all-MiniLM-L6-v2 (uncased), one CPU core per run"

    def write_report(self, collected: list, out: str, study, variant: str) -> str:
        return write_report(collected, out, study, variant, self)


def run_facts(summary: dict) -> dict:
    """A completed run's scores at its best validation epoch (the last where none is recorded)."""
    best = tables.best_epoch(summary) or summary["epochs"][-1]
    test, val = best.get("test") or {}, best.get("val") or {}
    return {"seed": tables.run_seed(summary), "f1": test.get("f1"), "accuracy": test.get("accuracy"),
            "val_f1": val.get("f1"), "best_epoch": best["epoch"], "best_phase": best.get("phase"),
            "cpu_s": tables.time_to_stop(summary, "cpu"), "epochs": len(summary["epochs"])}


def by_arm(collected: list, design: Design) -> dict:
    """`{arm: [summary of each completed run]}`, every arm listed."""
    found = {arm: [] for arm in design.arms}
    for run in collected:
        if run["summary"]:
            found[design.arm_of(run["settings"])].append(run["summary"])
    return found


def _score(name: str) -> Callable:
    return lambda summary: run_facts(summary)[name]


def paired(arms: dict, ours: str, reference: str, metric: str) -> Optional[stats.Interval]:
    """`ours` minus `reference` on `metric` (test, at the best validation epoch), paired by seed; None without a
    seed both have."""
    if not arms[ours] or not arms[reference]:
        return None
    interval = tables.seed_difference(arms[ours], arms[reference], _score(metric))
    return interval if interval.n else None


def _claim(text: str, paper: str, interval: Optional[stats.Interval], what: str, protocol: str) -> Claim:
    # The paper fine-tunes cased BERT-base on all of eng.train on a GPU: every claim here is its claim at a smaller
    # protocol (`Design.protocol`).
    if interval is None:
        return claims.not_run(text, paper, f"no seed with both runs completed ({what})",
                              source=claims.PAPER_AT_PROTOCOL, protocol=protocol)
    found = claims.ahead(interval)
    ours = interval.text(2, 100) + (" points" if interval.defined else "")
    return Claim(text, paper, ours, found.verdict,
                 f"{found.cell(2, 100)}; {what}, paired by seed ({interval.n} seed(s))",
                 source=claims.PAPER_AT_PROTOCOL, protocol=protocol)


def claim_rows(arms: dict, protocol: str = Design.protocol) -> list:
    """The paper's claims (and the reference point's comparison) as `Claim`s, differences in points of eng.testb,
    each tested at `protocol`."""
    return [
        _claim("stack-and-finetune above finetune-only, entity F1 (BiLSTM head)", PAPER_F1_GAIN,
               paired(arms, "stack_and_finetune", "finetune_only", "f1"), "entity F1", protocol),
        _claim("stack-and-finetune above finetune-only, token accuracy (BiLSTM head)", PAPER_ACCURACY_GAIN,
               paired(arms, "stack_and_finetune", "finetune_only", "accuracy"), "token accuracy", protocol),
        _claim("finetune-only above stack-only, entity F1 (BiLSTM head; Peters et al.'s finding, which the paper "
               "starts from)", "fine-tuning better (cited, no figure)",
               paired(arms, "finetune_only", "stack_only", "f1"), "entity F1", protocol),
        _claim("stack-and-finetune (BiLSTM) above plain token classification (linear layer per token, all trained)",
               f"{PAPER_F1_GAIN}, {PAPER_ACCURACY_GAIN} if its baseline row is BERT alone (the text does not say)",
               paired(arms, "stack_and_finetune", "token_classification", "f1"), "entity F1", protocol),
    ]


def _cell(values: list, expected: int, digits: int = 2, scale: float = 100.0) -> str:
    return tables.cell(values, expected, digits, scale)


def arm_rows(arms: dict, design: Design) -> list:
    expected = len(design.seeds)
    rows = []
    for arm, (head, strategy) in design.arms.items():
        facts = [run_facts(s) for s in arms[arm]]
        pick = lambda name: [f[name] for f in facts]  # noqa: E731
        phases = sorted({f"{f['best_epoch']} (phase {f['best_phase']})" for f in facts})
        rows.append([arm, head, strategy, f"{len(facts)}/{expected}", _cell(pick("f1"), expected),
                     _cell(pick("accuracy"), expected), _cell(pick("val_f1"), expected), ", ".join(phases) or "-",
                     tables.cell(pick("cpu_s"), expected, 0)])
    return rows


def still_improving(arms: dict) -> str:
    """A sentence naming, per arm, the runs whose best validation epoch was their last: their scores are those of
    a model still improving when the epoch budget ended, not of a converged one ("" where none was).

    >>> still_improving({"a": [{"best_epoch": 6, "epochs": [{"epoch": e} for e in range(1, 7)]}], "b": []})
    ' Best at the last epoch run (still improving when the budget ended): a 1/1.'
    """
    counts = {arm: (sum(1 for s in runs if s.get("best_epoch") == len(s["epochs"])), len(runs))
              for arm, runs in arms.items() if runs}
    found = [f"{arm} {last}/{done}" for arm, (last, done) in counts.items() if last]
    return (" Best at the last epoch run (still improving when the budget ended): " + ", ".join(found) + "."
            if found else "")


ARM_HEADER = ["arm", "head", "strategy", "seeds", "test entity F1", "test token accuracy", "validation entity F1",
              "best epoch", "CPU s to stop"]


def seed_rows(arms: dict, design: Design) -> list:
    rows = []
    for seed in design.seeds:
        row = [str(seed)]
        for arm in design.arms:
            facts = [run_facts(s) for s in arms[arm] if tables.run_seed(s) == seed]
            row.append(f"{100 * facts[0]['f1']:.2f}" if facts else "not run yet")
        rows.append(row)
    return rows


def data_lines(arms: dict) -> list:
    summaries = [s for runs in arms.values() for s in runs]
    if not summaries:
        return []
    first = summaries[0]
    examples, truncated = first.get("examples") or {}, first.get("truncated_words") or {}
    config = first.get("config") or {}
    sample = config.get("train_sample_seed")
    lines = ["## Data", "",
             f"- training: {examples.get('train', 0):,} sentences of eng.train"
             + (f" (a random sample drawn with seed {sample}, the same for every run)" if sample is not None else ""),
             f"- validation (best epoch, gap rule): eng.testa, {examples.get('validation', 0):,} sentences",
             f"- test: eng.testb, {examples.get('test', 0):,} sentences",
             "- words cut off at 128 word pieces (predicted O, still scored): "
             + ", ".join(f"{split} {count}" for split, count in truncated.items()),
             "- tags: " + " ".join(first.get("labels") or []), ""]
    return lines


def commands_lines(study, variant: str, out: str) -> list:
    chosen = study.variant(variant)
    commands = list(chosen.commands) or [
        f"python -m tf_transfer.experiments run {study.name} --variant={variant} --runs_dir=reports/stack_conll/runs "
        "--data_dir=../shared/data/conll2003"]
    commands.append(f"python -m tf_transfer.experiments report {study.name} --variant={variant} "
                    f"--runs_dir=reports/stack_conll/runs --out={out}")
    return ["## Commands", "", "From the repository root (one process per core; a killed run resumes after its last "
                               "finished epoch when the same command is run again):", "", "```sh", *commands, "```",
            ""]


def write_report(collected: list, out: str, study, variant: str, design: Design) -> str:
    """`<out>/README.md` from the completed runs in `collected`; returns its path."""
    arms = by_arm(collected, design)
    chosen = study.variant(variant)
    lines = [f"# Stack-and-finetune on CoNLL-2003 NER ({variant} variant)", "",
             f"{study.paper}: its BiLSTM head on BERT under the paper's three strategies, and plain token "
             f"classification as a reference point, with {len(design.seeds)} seeds paired by seed; entity F1 and "
             "token accuracy on eng.testb by conlleval's counting, at each run's best epoch on eng.testa. "
             f"{tables.completed_count(collected)}.", "",
             "## The paper's claims against these runs", "",
             claims.table(claim_rows(arms, design.protocol)), "",
             "Each verdict rests on the 95% interval of the seed-paired difference (t over the seeds), in points of "
             "eng.testb: reproduced where all of it is above 0, not reproduced at this protocol where all of it is "
             "below, inconclusive otherwise (`tf_transfer/core/stats.py`). Predicting O everywhere scores entity F1 0, so "
             "every claim is testable. The paper's text gives its NER result only as these two differences; its "
             "table's rows are not in the text this project holds.", "",
             "## Every arm over seeds", "",
             tables.markdown_table(ARM_HEADER, arm_rows(arms, design)), "",
             "Mean ± SD over seeds, scores in points. CPU s to stop: the training process's CPU seconds over all "
             "of a run's epochs (no scoring, no compilation), each run pinned to one core."
             + still_improving(arms), "",
             "## Entity F1 per seed (eng.testb)", "",
             tables.markdown_table(["seed", *design.arms], seed_rows(arms, design)), ""]
    if chosen.differences:
        lines += ["## Differences from the paper", "", *[f"- {d}" for d in chosen.differences], ""]
    lines += data_lines(arms)
    machines = tables.machines_section(collected)
    lines += ["## Machines", "", *machines] if machines else []
    lines += commands_lines(study, variant, out)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "README.md")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path
