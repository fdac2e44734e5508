"""The examples every text reader returns: one or two texts per example, a label each, and where they came from.

Readers build them with `Examples.from_records`; `split` holds out a seeded share of them. Plain Python/NumPy only.

Example:

>>> from tf_transfer.data.examples import Examples, train_validation_split
>>> data = Examples.from_records([(("a cat", "a dog"), 1), (("a sea", "the sky"), 0)], "int64", source="pairs.tsv")
>>> len(data), data.text_b, data.take([1]).labels.tolist()
(2, ['a dog', 'the sky'], [0])
>>> [len(part) for part in train_validation_split(data, 0.5, seed=0)]
[1, 1]
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

from tf_transfer.core.errors import TransferError
from tf_transfer.core.disk import file_sha256


@dataclasses.dataclass
class Examples:
    """Texts and labels of one split.

    Attributes:
      text_a: the first (or only) text of each example.
      text_b: the second text of each pair; None for single texts.
      labels: int64 class indices, or float32 numbers for regression.
      source: the file (or dataset) read.
      skipped_rows: rows of the file left out (malformed with --skip_bad_rows, or a data set's known quirk).
      label_names: `label_names[i]` is class i as written in the file, where the reader knows them.
      stripped_labels: `(line, label as written)` of each label read without the spaces around it (a user's file).
    """

    text_a: list
    text_b: Optional[list]
    labels: np.ndarray
    source: str = ""
    skipped_rows: int = 0
    label_names: Optional[tuple] = None
    stripped_labels: tuple = ()

    @classmethod
    def from_records(cls, records: Sequence[tuple], dtype, **fields) -> "Examples":
        """From `(texts, label)` records, `texts` a 1-tuple or a pair; `fields` as the attributes above."""
        pair = bool(records) and len(records[0][0]) == 2
        return cls([texts[0] for texts, _ in records], [texts[1] for texts, _ in records] if pair else None,
                   np.asarray([label for _, label in records], dtype=dtype), **fields)

    def __len__(self) -> int:
        return len(self.text_a)

    def take(self, indices: Sequence[int]) -> "Examples":
        """The examples at `indices`, in that order (subclasses keep their other fields)."""
        indices = list(indices)
        return dataclasses.replace(self, text_a=[self.text_a[i] for i in indices],
                                   text_b=None if self.text_b is None else [self.text_b[i] for i in indices],
                                   labels=self.labels[indices])


def data_files(paths: dict) -> dict:
    """`{flag: {"path", "sha256"}}` of the data files a run reads (`paths`: `{flag: path or None}`, the files that
    exist), as a run's summary records them (`dataset.files`): which data the run was made from, by content."""
    import os

    return {flag: {"path": os.path.abspath(path), "sha256": file_sha256(path)} for flag, path in paths.items()
            if path and os.path.isfile(path)}


def train_validation_split(examples, fraction: float, seed: int):
    """`(train, validation)`: a seeded random `fraction` of `examples` held out, both parts in file order.

    `examples` is anything with `len`, `take` and `source` (`Examples`, CoNLL `Sentences`); the paper holds out 10%
    of GLUE train.
    """
    if not 0.0 < fraction < 1.0:
        raise TransferError(f"--validation_fraction must be between 0 and 1 (exclusive), got {fraction}")
    n = len(examples)
    n_validation = int(round(n * fraction))
    if n_validation < 1 or n_validation >= n:
        raise TransferError(f"{n} examples in {examples.source} cannot be split with --validation_fraction={fraction}")
    order = np.random.default_rng(seed).permutation(n)
    return examples.take(np.sort(order[n_validation:])), examples.take(np.sort(order[:n_validation]))
