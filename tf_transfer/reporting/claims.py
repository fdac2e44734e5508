"""A paper's claims checked against our runs: the one model every report's claims table is built from.

A `Claim` is one row: what is claimed, the paper's figure, ours, the verdict and its basis, with the per-task
verdicts behind it (`stats.Verdict`s, each with its interval). Each kind of verdict has one
function that decides it on `tf_transfer/core/stats.py`'s rule and returns a `Finding` (the verdict, the per-task
verdicts Holm-corrected across the tasks, the interval of the mean where the claim is about the mean over tasks):

- `as_good_as`: a score as good as the reference's within a margin;
- `at_least` / `at_most`: a share saved, or a change of score, past a margin;
- `ahead`: an ordering (ours above the reference: a difference above 0);
- `in_band`: "about x", inside [low, high]; `alike`: within ±margin either way;
- `not_run`: a claim none of whose comparisons has run yet reads "not run yet" in every report.

Each takes one interval (decided alone) or a family `{task: interval}` (None where the task is not testable at this
budget), decided on every task (`stats.overall`) or, with `on_mean=True`, on the mean over the testable tasks.

A claim declares where its margin comes from, and its verdict reads in that source's words (`VERDICTS`):

- `PAPER`, a paper's claim at conditions the report shows match the paper's: *reproduced* / *contradicted*;
- `PAPER_AT_PROTOCOL`, a paper's claim tested at a smaller model or budget, named in the basis cell: *reproduced* /
  *not reproduced at this protocol* (a shortfall there does not contradict the paper at its own conditions);
- `TARGET`, this project's own margin: *target met* / *target missed*;
- and, for every source, *inconclusive*, *not testable at this budget*, *not run yet*.

>>> from tf_transfer.core import stats
>>> from tf_transfer.reporting import claims
>>> score = {"rte": stats.paired_difference([0.84, 0.80, 0.86], [0.85, 0.82, 0.86]), "mrpc": None}
>>> found = claims.as_good_as(score, 0.05)
>>> found.verdict, found.cells(scale=100)
('reproduced', 'rte reproduced: -1.0 [-3.5, +1.5]; mrpc not testable at this budget')
>>> rows = [claims.Claim("scores as fine-tuning does", "-1 point", "-1.0 points", found.verdict,
...                      found.cells(scale=100), found.results, source=claims.PAPER_AT_PROTOCOL, protocol="MiniLM"),
...         claims.not_run("saves 30% of the time", "30%", "no completed runs", source=claims.TARGET)]
>>> print(claims.table(rows))  # doctest: +NORMALIZE_WHITESPACE
| claim | paper | ours | verdict | basis |
|---|---|---|---|---|
| scores as fine-tuning does | -1 point | -1.0 points | reproduced | the paper's claim at a smaller protocol (MiniLM);
  rte reproduced: -1.0 [-3.5, +1.5]; mrpc not testable at this budget |
| saves 30% of the time | 30% | not run yet | not run yet | this project's target; no completed runs |
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Optional

from tf_transfer.core import stats
from tf_transfer.reporting.tables import markdown_table

HEADER = ("claim", "paper", "ours", "verdict", "basis")
# Decided before the runs: a task counts for a score claim only where full fine-tuning beats the constant prediction
# by this many points on validation (`stats.learned`).
LEARNED_POINTS = 10.0

# Where a claim's margin comes from. The rule that decides is the same for all three (`stats.verdict`); the words it
# is read in are not: a paper's claim tested on a 6-block model at a CPU budget and found short says nothing about the
# paper's own conditions, and a miss of this project's own bar says nothing about any paper.
PAPER = "paper"  # a paper's claim, at conditions the report shows match the paper's
PAPER_AT_PROTOCOL = "paper at this protocol"  # a paper's claim, tested at a smaller model or budget than the paper's
TARGET = "target"  # this project's own margin
SOURCES = (PAPER, PAPER_AT_PROTOCOL, TARGET)
CONTRADICTED = "contradicted"
NOT_REPRODUCED_AT_PROTOCOL = "not reproduced at this protocol"
# What the rule's two decided outcomes (`stats.REPRODUCED`, `stats.NOT_REPRODUCED`) read as, per source; the
# undecided ones (inconclusive, not testable, not run yet) read the same for every source.
WORDS = {PAPER: (stats.REPRODUCED, CONTRADICTED),
         PAPER_AT_PROTOCOL: (stats.REPRODUCED, NOT_REPRODUCED_AT_PROTOCOL),
         TARGET: (stats.TARGET_MET, stats.TARGET_MISSED)}
UNDECIDED = (stats.INCONCLUSIVE, stats.NOT_TESTABLE, stats.NOT_RUN)
VERDICTS = (stats.REPRODUCED, CONTRADICTED, NOT_REPRODUCED_AT_PROTOCOL, stats.TARGET_MET, stats.TARGET_MISSED,
            *UNDECIDED)
# How a claims table's basis cell opens, naming the margin's source (`Claim.basis_cell`; `source_of` reads it back).
SOURCE_OPENINGS = {PAPER: "the paper's claim at the paper's conditions",
                   PAPER_AT_PROTOCOL: "the paper's claim at a smaller protocol",
                   TARGET: "this project's target"}


def vocabulary(source: str) -> tuple:
    """The verdict words a claim whose margin comes from `source` may read.

    >>> vocabulary(TARGET)
    ('target met', 'target missed', 'inconclusive', 'not testable at this budget', 'not run yet')
    """
    if source not in WORDS:
        raise ValueError(f"a claim's margin source must be one of {SOURCES}, got {source!r}")
    return (*WORDS[source], *UNDECIDED)


def word(outcome: str, source: str) -> str:
    """The rule's `outcome` (a `stats` verdict) in `source`'s words; a word already `source`'s stays as it is, and a
    word of another source's vocabulary is an error (a claim worded for a paper cannot read "target met").

    >>> word("not reproduced", PAPER_AT_PROTOCOL), word("reproduced", TARGET), word("inconclusive", PAPER)
    ('not reproduced at this protocol', 'target met', 'inconclusive')
    """
    words = vocabulary(source)
    if outcome in words:
        return outcome
    if outcome in (stats.REPRODUCED, stats.NOT_REPRODUCED):
        return WORDS[source][outcome == stats.NOT_REPRODUCED]
    raise ValueError(f"verdict {outcome!r} is not a word for a claim whose margin is {SOURCE_OPENINGS.get(source)!r}"
                     f"; it must be one of {words}")


_REPRODUCED = re.compile(r"(?<!not )\breproduced\b")
_NOT_REPRODUCED = re.compile(r"\bnot reproduced\b(?! at this protocol)")


def reword(text: str, source: str) -> str:
    """`text` (a cell: per-task verdicts, a rule) with the rule's outcomes in `source`'s words.

    >>> reword("sst2 not reproduced: -2.3 [-3.3, -1.3]; reproduced where above -1", TARGET)
    'sst2 target missed: -2.3 [-3.3, -1.3]; target met where above -1'
    """
    met, missed = WORDS[source]
    return _REPRODUCED.sub(met, _NOT_REPRODUCED.sub("\0", text)).replace("\0", missed)


def source_of(basis_cell: str) -> Optional[str]:
    """The margin source a claims table's basis cell names (`Claim.basis_cell`), None where it names none.

    >>> source_of("this project's target; reproduced where above 0")
    'target'
    """
    return next((source for source, opening in SOURCE_OPENINGS.items() if basis_cell.startswith(opening)), None)


@dataclasses.dataclass(frozen=True)
class Claim:
    """One row of a claims table: `claim` (what is claimed), `paper` (the paper's figure), `ours`, `verdict`, `basis`
    (what the verdict rests on), and `results`, the per-task `stats.Verdict`s behind it (with their intervals; empty
    where the verdict rests on one interval or none).

    Every claim declares its margin's `source` (`PAPER`, `PAPER_AT_PROTOCOL` with the `protocol` it was tested at,
    or `TARGET`): `verdict` is the rule's outcome (`stats.VERDICTS`) and is read in that source's words (`word`), as
    are the verdicts inside `ours`; a verdict worded for another source is an error.

    >>> found = Claim("saves time", "30%", "+40% [+35%, +45%]", "not reproduced", "the mean over tasks",
    ...               source=PAPER_AT_PROTOCOL, protocol="MiniLM, CPU")
    >>> found.row()[3:]
    ['not reproduced at this protocol', "the paper's claim at a smaller protocol (MiniLM, CPU); the mean over tasks"]
    """

    claim: str
    paper: str
    ours: str
    verdict: str
    basis: str
    results: dict = dataclasses.field(default_factory=dict, compare=False)
    source: str = dataclasses.field(default="", kw_only=True)
    protocol: str = dataclasses.field(default="", kw_only=True)

    def __post_init__(self):
        if self.verdict not in (*stats.VERDICTS, *VERDICTS):
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.source == PAPER_AT_PROTOCOL and not self.protocol:
            raise ValueError(f"claim {self.claim!r}: a paper's claim tested at a smaller protocol names it "
                             "(protocol=...)")
        object.__setattr__(self, "verdict", word(self.verdict, self.source))
        object.__setattr__(self, "ours", reword(self.ours, self.source))

    def basis_cell(self) -> str:
        """The basis as the table shows it: the margin's source first, then what the verdict rests on."""
        opening = SOURCE_OPENINGS[self.source]
        if self.source == PAPER_AT_PROTOCOL:
            opening += f" ({self.protocol})"
        return f"{opening}; {reword(self.basis, self.source)}"

    def row(self) -> list:
        return [self.claim, self.paper, self.ours, self.verdict, self.basis_cell()]


@dataclasses.dataclass(frozen=True)
class Finding:
    """What a verdict kind decided: the `verdict`, the per-task `results` (`stats.Verdict`s, Holm over the family),
    the `mean` interval the verdict rests on (a claim on the mean over tasks, or on one interval) and the tasks still
    `pending` (not run yet: they keep a claim on every task from being reproduced).

    >>> found = at_least(stats.paired_difference([0.4, 0.5, 0.45], [0.0, 0.0, 0.0]), 0.3)
    >>> found.verdict, found.cell(0, 100, "%")
    ('reproduced', 'reproduced: +45% [+33%, +57%]')
    """

    verdict: str
    results: dict = dataclasses.field(default_factory=dict)
    mean: Optional[stats.Interval] = None
    pending: tuple = ()

    def cell(self, digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
        """The verdict with the interval it rests on (`stats.verdict_cell`)."""
        return stats.verdict_cell(self.verdict, self.mean, digits, scale, unit)

    def cells(self, digits: int = 1, scale: float = 1.0, unit: str = "", order=None, separator: str = " ") -> str:
        """Each task's verdict cell, `mrpc inconclusive: -1.0 [-3.5, +1.5]; rte not run yet`, in `order` (tasks
        not in the family left out) or the family's own."""
        labels = list(self.results) if order is None else [label for label in order if label in self.results]
        return "; ".join([f"{label}{separator}{self.results[label].cell(digits, scale, unit)}" for label in labels]
                         + [f"{label}{separator}{stats.NOT_RUN}" for label in self.pending])


def _decide(intervals, margin: float, direction: str, on_mean: bool, pending) -> Finding:
    if isinstance(intervals, stats.Interval):
        return Finding(stats.verdict(intervals, margin, direction), mean=intervals)
    results = stats.verdicts(intervals, margin, direction)
    if on_mean:
        tested = [i for i in intervals.values() if i is not None]
        mean = stats.mean_of(tested) if tested else None
        return Finding(stats.verdict(mean, margin, direction) if mean else stats.NOT_TESTABLE, results, mean)
    verdict = stats.overall([*results.values(), *[stats.INCONCLUSIVE] * len(pending)])
    if verdict == stats.NOT_TESTABLE and pending:
        verdict = stats.INCONCLUSIVE  # a task still to run may be testable
    return Finding(verdict, results, pending=tuple(pending))


def as_good_as(intervals, margin: float, on_mean: bool = False, pending=()) -> Finding:
    """A score as good as the reference's within `margin`: reproduced where the difference's interval lies above
    -margin. `intervals`: one interval, or `{task: interval or None}` (None: not testable) decided on every task, or
    on their mean with `on_mean`; `pending`: tasks not run yet, which leave the claim inconclusive unless another
    task refutes it.

    >>> as_good_as(stats.paired_difference([0.80, 0.81, 0.79], [0.90, 0.92, 0.91]), 0.01).verdict
    'not reproduced'
    """
    return _decide(intervals, margin, "as good as", on_mean, pending)


def at_least(intervals, margin: float, on_mean: bool = False, pending=()) -> Finding:
    """A share (of time, of memory) or a difference at least `margin`: reproduced where the interval lies above it.
    Arguments as `as_good_as`'s.

    >>> at_least({"mrpc": stats.paired_difference([0.4, 0.5], [0.0, 0.0])}, 0.3).verdict
    'inconclusive'
    """
    return _decide(intervals, margin, "at least", on_mean, pending)


def at_most(intervals, margin: float, on_mean: bool = False, pending=()) -> Finding:
    """A share or a difference at most `margin`: reproduced where the interval lies below it. Arguments as
    `as_good_as`'s.

    >>> at_most(stats.paired_difference([-0.4, -0.5, -0.45], [0.0, 0.0, 0.0]), 0.0).verdict
    'reproduced'
    """
    return _decide(intervals, margin, "at most", on_mean, pending)


def ahead(intervals, pending=()) -> Finding:
    """An ordering: ours above the reference (the difference's interval above 0), on one interval or every task.

    >>> ahead(stats.paired_difference([0.2, 0.3, 0.25], [0.0, 0.0, 0.0])).verdict
    'reproduced'
    """
    return at_least(intervals, 0.0, pending=pending)


def in_band(interval: Optional[stats.Interval], low: float, high: float) -> Finding:
    """"About x": reproduced where the interval lies inside [low, high], not reproduced where it lies wholly outside,
    inconclusive otherwise and where there is no interval.

    >>> in_band(stats.paired_difference([0.25, 0.27, 0.26], [0.0, 0.0, 0.0]), 0.16, 0.36).verdict
    'reproduced'
    """
    if interval is None or not interval.defined:
        return Finding(stats.INCONCLUSIVE, mean=interval)
    if low <= interval.low and interval.high <= high:
        return Finding(stats.REPRODUCED, mean=interval)
    outside = interval.high < low or interval.low > high
    return Finding(stats.NOT_REPRODUCED if outside else stats.INCONCLUSIVE, mean=interval)


def alike(intervals: dict, margin: float) -> Finding:
    """Alike: each difference within ±`margin` (both one-sided verdicts, each Holm-corrected over the family),
    reproduced where every one is.

    >>> close = stats.paired_difference([0.70, 0.71, 0.69], [0.70, 0.70, 0.70])
    >>> alike({"a − b": close}, 0.03).cells(scale=100)
    'a − b reproduced: +0.0 [-2.5, +2.5]'
    """
    low = stats.verdicts(intervals, margin, "as good as")
    high = stats.verdicts(intervals, margin, "at most")
    results = {label: stats.Verdict(stats.overall([low[label], high[label]]), intervals[label]) for label in intervals}
    return Finding(stats.overall(results), results)


def not_run(claim: str, paper: str, basis: str, *, source: str, protocol: str = "") -> Claim:
    """A claim none of whose comparisons has run yet: no interval, so no verdict, not even "inconclusive".

    >>> not_run("saves time", "30%", "no completed runs", source=TARGET).verdict
    'not run yet'
    """
    return Claim(claim, paper, stats.NOT_RUN, stats.NOT_RUN, basis, source=source, protocol=protocol)


def at_protocol(protocol: str) -> tuple:
    """`(claim, not_run)`: `Claim` and `not_run` for a report's papers' claims, all tested at `protocol` (smaller
    than the papers'); a row whose margin is this project's own passes `source=TARGET` instead.

    >>> claim, _ = at_protocol("MiniLM on a CPU")
    >>> claim("scores as full does", "-0.1", "-2.0 [-3.0, -1.0]", "not reproduced", "above -1").verdict
    'not reproduced at this protocol'
    """
    return (functools.partial(Claim, source=PAPER_AT_PROTOCOL, protocol=protocol),
            functools.partial(not_run, source=PAPER_AT_PROTOCOL, protocol=protocol))


def testable(gains: dict, task: str, points: float = LEARNED_POINTS) -> bool:
    """Whether a score claim is tested on `task`: full fine-tuning's validation gain over the constant prediction
    (`gains`, points per task) is at least `points`.

    >>> testable({"stsb": 61.1, "mrpc": 1.8}, "mrpc"), testable({}, "rte")
    (False, False)
    """
    return gains.get(task, float("-inf")) >= points


def testable_on_interval(gain: Optional[stats.Interval], points: float = LEARNED_POINTS) -> bool:
    """`testable` for a study that fixed a stricter gate before its runs: all of the gain's 95% interval (points)
    at least `points`.

    >>> testable_on_interval(stats.paired_difference([12.0, 14.0, 13.0], [0.0, 0.0, 0.0]))
    True
    """
    return gain is not None and gain.defined and gain.low >= points


def testable_from_runs(reference, baseline: Optional[dict], value) -> Optional[bool]:
    """`testable` from the runs: the reference runs' mean `value` beats the constant prediction's `baseline` score
    by at least 10 points (`stats.learned`); None where the baseline is unknown.

    >>> testable_from_runs([{"score": 0.9}], {"score": 0.5}, lambda s: s["score"])
    True
    """
    if not baseline:
        return None
    return stats.learned([value(s) for s in reference], baseline["score"])


def testable_sentence(metric_note: str, decided: str = "before the runs") -> str:
    """What a claims table says about its verdicts, the same in every report; `decided`: when the 10-point gate was
    set (a study whose gate came after its runs says so).

    >>> testable_sentence("").startswith("Each verdict rests on the 95% interval")
    True
    """
    return ("Each verdict rests on the 95% interval of the difference, not its point estimate (`tf_transfer/core/"
            "stats.py`): decided where the whole interval is on one side of the claim's margin, inconclusive "
            "otherwise. The words say where the margin comes from (the basis cell opens with it): a paper's claim "
            "tested at a smaller model or budget than the paper's reads reproduced or not reproduced at this "
            "protocol (named in the cell), one at the paper's conditions reproduced or contradicted, this project's "
            "own target met or missed. A claim tested on several tasks is "
            f"Holm-corrected across them, and each verdict cell states its interval. Decided {decided}: a task "
            "counts for a score claim only where full fine-tuning beats the constant prediction by at least 10 "
            "points; elsewhere the claim there is not testable at this budget. " + metric_note)


def table(claims: list, header=HEADER, fields=HEADER) -> str:
    """A Markdown table of `Claim`s: `fields` of each (a study may show fewer, under its own `header`).

    >>> print(table([not_run("saves time", "30%", "none yet", source=TARGET)], ("claim", "verdict"),
    ...             ("claim", "verdict")))
    | claim | verdict |
    |---|---|
    | saves time | not run yet |
    """
    return markdown_table(list(header), [[str(claim.basis_cell() if field == "basis" else getattr(claim, field))
                                          .replace("|", "/") for field in fields] for claim in claims])
