"""One frozen-prefix cache for the splits a seed draws from one file: every seed holds out another validation share of
the same training file, so a cache per split would be built again at every seed. `pool` gathers the distinct
examples of such splits in an order of their own, `cache.build` caches them once, and `select` reads each split's
rows from that cache without a copy.

Example:

>>> import numpy as np
>>> from tf_transfer.data import cache_pool, inputs
>>> def split(ids):
...     rows = np.array([[2, i, 3] for i in ids], np.int32)
...     return inputs.Encoded(rows, np.zeros_like(rows), np.full(len(ids), 3), np.zeros(len(ids), int))
>>> pooled, rows = cache_pool.pool({"train": split([9, 7, 9]), "validation": split([8])})
>>> pooled.token_ids[:, 1].tolist(), rows["train"].tolist(), rows["validation"].tolist()
([7, 8, 9], [2, 0, 2], [1])
"""

from __future__ import annotations

import numpy as np

from tf_transfer.data import cache, inputs


def pool(splits: dict) -> tuple:
    """`(pooled, {name: rows})`: the distinct examples of `splits` (`inputs.Encoded` of one sequence length), ordered
    by their token ids, and which of them each split's examples are. Splits a seed draws from one file (training
    and the validation share held out of it) pool to the same examples whatever the seed, so one cache built over
    the pool (`cache.build`) serves every seed's splits (`select`): built once, and computed the same way for all
    (a cache's outputs depend in their last bits on which examples were batched together)."""
    names = list(splits)
    token_ids = np.concatenate([splits[name].token_ids for name in names])
    segment_ids = np.concatenate([splits[name].segment_ids for name in names])
    both = np.ascontiguousarray(np.concatenate([token_ids, segment_ids], axis=1))
    as_bytes = both.view(np.dtype((np.void, both.dtype.itemsize * both.shape[1]))).ravel()
    _, first, inverse = np.unique(as_bytes, return_index=True, return_inverse=True)
    one = splits[names[0]]
    pooled = inputs.Encoded(token_ids[first], segment_ids[first],
                            np.concatenate([splits[name].lengths for name in names])[first],
                            np.zeros(len(first), one.labels.dtype), one.regression, one.input_names)
    bounds = np.cumsum([0] + [len(splits[name]) for name in names])
    return pooled, {name: inverse.ravel()[bounds[i]:bounds[i + 1]] for i, name in enumerate(names)}


def select(pooled: cache.CachedSplit, rows: np.ndarray, split, share: float) -> cache.CachedSplit:
    """The split `split` (its labels: an `inputs.Encoded`) as the examples `rows` of a `pool`'s cache, its arrays
    not copied; charged `share` of what the pool's cache cost to build (`build_s`, `build_cpu_s`)."""
    return cache.CachedSplit(pooled.hidden, pooled.offsets, pooled.lengths[rows], split.labels, split.regression,
                             None if pooled.build_s is None else pooled.build_s * share,
                             None if pooled.build_cpu_s is None else pooled.build_cpu_s * share,
                             rows=rows if pooled.rows is None else pooled.rows[rows])
