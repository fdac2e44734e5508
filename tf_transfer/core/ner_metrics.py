"""Entity-level precision, recall and F1 as CoNLL's `conlleval` script computes them, and token accuracy.

This is a transcription of conlleval's counting loop, so that scores compare with published CoNLL-2003 numbers.
An entity (chunk) starts and ends by conlleval's rules: `B-` starts one, `I-` after `O` or after another type also
starts one (an `I-` without a preceding `B-` is an entity, not an error), and a change of type ends one. A
predicted entity is correct when a gold entity has the same type, first token and last token. A sentence break
closes every open entity, as the blank lines of conlleval's input do.

Example:

>>> from tf_transfer.core import ner_metrics
>>> gold = [["B-PER", "I-PER", "O", "B-LOC"]]
>>> predicted = [["B-PER", "I-PER", "O", "B-ORG"]]
>>> scores = ner_metrics.compute(gold, predicted)
>>> round(scores["f1"], 4), scores["accuracy"]
(0.5, 0.75)
"""

from __future__ import annotations

from typing import Sequence

OUTSIDE = "O"


def split_tag(tag: str) -> tuple:
    """`"B-PER"` -> `("B", "PER")`; `"O"` -> `("O", "")`. Types may contain hyphens (only the first one splits)."""
    if tag == OUTSIDE:
        return OUTSIDE, ""
    prefix, sep, kind = tag.partition("-")
    return (prefix, kind) if sep else (tag, "")


def _ends_chunk(prev_prefix: str, prefix: str, prev_kind: str, kind: str) -> bool:
    """conlleval's endOfChunk: did an entity end between the previous token and this one?"""
    if prev_prefix in ("B", "I") and prefix in ("B", "O"):
        return True
    if prev_prefix == "E" and prefix in ("E", "I", "O"):
        return True
    if prev_prefix not in ("O", ".") and prev_kind != kind:
        return True
    return prev_prefix in ("[", "]")


def _starts_chunk(prev_prefix: str, prefix: str, prev_kind: str, kind: str) -> bool:
    """conlleval's startOfChunk: does an entity start at this token? (`I-` after `O` does.)"""
    if prefix == "B" and prev_prefix in ("B", "I", "O"):
        return True
    if prefix == "I" and prev_prefix in ("O", "E"):
        return True
    if prefix == "E" and prev_prefix in ("E", "O"):
        return True
    if prefix not in ("O", ".") and prev_kind != kind:
        return True
    return prefix in ("[", "]")


class _Counts:
    """conlleval's running counts over a stream of (gold, predicted) tags, sentence breaks included."""

    def __init__(self):
        self.correct_chunks = self.gold_chunks = self.predicted_chunks = 0
        self.correct_tags = self.tokens = 0
        self.in_correct = False
        self.last_gold = self.last_predicted = (OUTSIDE, "")

    def add(self, gold_tag: str, predicted_tag: str, boundary: bool = False) -> None:
        gold, predicted = split_tag(gold_tag), split_tag(predicted_tag)
        gold_ends = _ends_chunk(self.last_gold[0], gold[0], self.last_gold[1], gold[1])
        predicted_ends = _ends_chunk(self.last_predicted[0], predicted[0], self.last_predicted[1], predicted[1])
        if self.in_correct:
            if gold_ends and predicted_ends and self.last_gold[1] == self.last_predicted[1]:
                self.in_correct = False
                self.correct_chunks += 1
            elif gold_ends != predicted_ends or gold[1] != predicted[1]:
                self.in_correct = False
        gold_starts = _starts_chunk(self.last_gold[0], gold[0], self.last_gold[1], gold[1])
        predicted_starts = _starts_chunk(self.last_predicted[0], predicted[0], self.last_predicted[1], predicted[1])
        if gold_starts and predicted_starts and gold[1] == predicted[1]:
            self.in_correct = True
        self.gold_chunks += gold_starts
        self.predicted_chunks += predicted_starts
        if not boundary:
            self.correct_tags += gold == predicted
            self.tokens += 1
        self.last_gold, self.last_predicted = gold, predicted

    def finish(self) -> None:
        if self.in_correct:
            self.correct_chunks += 1
            self.in_correct = False


def _ratio(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else 0.0


def compute(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict:
    """Scores tag sequences (one list of tags per sentence) like conlleval, as fractions in [0, 1].

    Returns `precision`, `recall`, `f1` (entity level, micro-averaged over types; 0 where undefined, as conlleval
    prints) and `accuracy` (share of tokens whose whole tag is right, `O` included, as conlleval's "accuracy").
    """
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted ones")
    counts = _Counts()
    for gold_tags, predicted_tags in zip(gold, predicted):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(f"a sentence of {len(gold_tags)} gold tags has {len(predicted_tags)} predicted tags")
        for gold_tag, predicted_tag in zip(gold_tags, predicted_tags):
            counts.add(gold_tag, predicted_tag)
        # conlleval reads a blank line as an "O O" token that is not counted: it closes open entities.
        counts.add(OUTSIDE, OUTSIDE, boundary=True)
    counts.finish()
    precision = _ratio(counts.correct_chunks, counts.predicted_chunks)
    recall = _ratio(counts.correct_chunks, counts.gold_chunks)
    return {
        "f1": _ratio(2 * precision * recall, precision + recall),
        "precision": precision,
        "recall": recall,
        "accuracy": _ratio(counts.correct_tags, counts.tokens),
    }


def entities(tags: Sequence[str]) -> list:
    """The entities of one sentence as `(type, first index, last index)`, by conlleval's start and end rules."""
    found, start = [], None
    last = (OUTSIDE, "")
    for i, tag in enumerate(list(tags) + [OUTSIDE]):
        current = split_tag(tag)
        if start is not None and _ends_chunk(last[0], current[0], last[1], current[1]):
            found.append((last[1], start, i - 1))
            start = None
        if _starts_chunk(last[0], current[0], last[1], current[1]):
            start = i
        last = current
    return found
