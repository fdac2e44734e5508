"""Packed batches (`--padding=pack`): the examples of one batch laid end to end in rows of at most
`max_seq_length` tokens, so that a step computes (almost) only real tokens.

Which examples share a batch is decided as for `--padding=fixed` (consecutive slices of the seeded permutation of
the epoch), so a batch still holds `batch_size` examples and the optimizer sees the same number of examples per
update; only how the batch is laid out changes. Within a batch, rows are filled by first-fit decreasing (longest
example first, each into the first row with room for it, a new row when none has): with at most a batch of
examples to place, it is exact enough (within one row of the optimum on GLUE's lengths) and costs microseconds.
The row count varies from batch to batch; the row budget is chosen per batch (`layout`: the multiple of
`row_step` up to `max_seq_length` that computes the fewest tokens), and every row is as wide as the fullest one,
rounded up to a multiple of `row_step` (`ROW_STEP` unless a caller needs another: 1 at batch size 1), so the
compiled step meets few widths.

What the packed model (`tf_transfer.models.packed`) needs besides the tokens, all per row position:
`position_ids` (0 at each example's first token), `example_ids` (the example's place in the batch, -1 on padding:
tokens attend only to tokens with the same id) and `segment_ids` (each example's own); and per example
`cls_positions`, the flat index (row * width + offset) of its first token, where its [CLS] vector is read. The
model's outputs, labels and sample weights are per example, in the batch's order. `cls_positions` is named to come
first among the inputs in sorted order: Keras weights each step's loss in the epoch's mean by the leading dimension
of the first input it flattens (dictionaries flatten by sorted key), which must count examples, not rows.

Example:

>>> import numpy as np
>>> from tf_transfer.data import packing
>>> packing.first_fit_decreasing(np.array([5, 3, 4, 2]), budget=8)
[[0, 1], [2, 3]]
"""

from __future__ import annotations

import numpy as np

PACKED_INPUTS = ("position_ids", "example_ids", "cls_positions")

# Packed rows are rounded to multiples of 4 tokens, not of `--bucket_step` (16, which bucketed batches keep): the
# rounding is all the padding packing leaves. On the bench's MRPC batches (all-MiniLM, batch 32) 16 left a padding
# efficiency of 0.937, 8 0.945, 4 0.963 and 1 0.971; 4 trained 1.06-1.10x as fast as 16, and 1 only 0.96x as fast
# as 4 (widths of any length cost more per token than the 0.8% of tokens they save): benchmarks/README.md.
ROW_STEP = 4


def first_fit_decreasing(lengths: np.ndarray, budget: int) -> list:
    """Rows of positions into `lengths`, each row's lengths summing to at most `budget`: the longest first, each
    into the first row with room (ties in the given order, so the layout is deterministic)."""
    rows, room = [], []
    for position in np.argsort(-np.asarray(lengths), kind="stable"):
        length = int(lengths[position])
        row = next((r for r, free in enumerate(room) if free >= length), None)
        if row is None:
            rows.append([])
            room.append(budget)
            row = len(rows) - 1
        rows[row].append(int(position))
        room[row] -= length
    return rows


def row_width(rows: list, lengths: np.ndarray, budget: int, row_step: int) -> int:
    """The width of a batch's rows: its fullest row's tokens, rounded up to a multiple of `row_step`, at most
    `budget`."""
    fullest = max((int(lengths[row].sum()) for row in rows), default=1)
    return min(budget, -(-fullest // row_step) * row_step)


def layout(lengths: np.ndarray, budget: int, row_step: int) -> tuple:
    """`(rows, width)` of one batch with these example lengths: of the row budgets from its longest example (in
    multiples of `row_step`) up to `budget`, the one whose first-fit decreasing rows compute the fewest tokens
    (the narrower on a tie: attention costs the square of the width). A batch of short sentences thus packs into
    many narrow rows rather than a few rows of `budget` with a half-empty last one."""
    lengths = np.asarray(lengths)
    longest = int(lengths.max()) if len(lengths) else 1
    best = None
    for width in range(-(-longest // row_step) * row_step, budget + row_step, row_step):
        width = min(width, budget)
        rows = first_fit_decreasing(lengths, width)
        computed = len(rows) * row_width(rows, lengths, width, row_step)
        if best is None or computed < best[0]:
            best = (computed, rows, row_width(rows, lengths, width, row_step))
        if len(rows) <= 1 or width == budget:  # a wider budget cannot need fewer rows than one
            break
    return best[1], best[2]


def computed_tokens(lengths: np.ndarray, budget: int, row_step: int) -> int:
    """Tokens a packed batch with these example lengths computes: its rows times their width."""
    rows, width = layout(lengths, budget, row_step)
    return len(rows) * width


def place(lengths: np.ndarray, budget: int, row_step: int) -> tuple:
    """`(rows, width, row, offset)` of one batch with these example lengths: its row count and width (`layout`),
    and for each example its row and the position of its first token in that row.

    >>> rows, width, row, offset = place(np.array([5, 3, 4, 2]), budget=8, row_step=4)
    >>> rows, width, row.tolist(), offset.tolist()
    (2, 8, [0, 0, 1, 1], [0, 5, 0, 4])
    """
    rows, width = layout(lengths, budget, row_step)
    row_of, offset_of = np.zeros(len(lengths), np.int32), np.zeros(len(lengths), np.int32)
    for r, row in enumerate(rows):
        offset = 0
        for example in row:
            row_of[example], offset_of[example] = r, offset
            offset += int(lengths[example])
    return len(rows), width, row_of, offset_of


def features(token_ids: np.ndarray, segment_ids: np.ndarray, lengths: np.ndarray, input_names: tuple,
             row_step: int) -> dict:
    """The packed inputs of one batch, from its examples' padded arrays `[E, max_seq_length]` and `lengths`:
    `input_names` without `padding_mask`, plus `PACKED_INPUTS` (see the module's docstring)."""
    rows, width, row_of, offset_of = place(lengths, token_ids.shape[1], row_step)
    shape = (rows, width)
    packed = {"token_ids": np.zeros(shape, np.int32), "segment_ids": np.zeros(shape, np.int32),
              "position_ids": np.zeros(shape, np.int32), "example_ids": np.full(shape, -1, np.int32)}
    for example, n in enumerate(np.asarray(lengths, np.int64)):
        r, span = row_of[example], slice(offset_of[example], offset_of[example] + n)
        packed["token_ids"][r, span] = token_ids[example, :n]
        packed["segment_ids"][r, span] = segment_ids[example, :n]
        packed["position_ids"][r, span] = np.arange(n)
        packed["example_ids"][r, span] = example
    packed["cls_positions"] = (row_of * width + offset_of).astype(np.int32)
    names = [name for name in input_names if name != "padding_mask"] + list(PACKED_INPUTS)
    return {name: packed[name] for name in names}
