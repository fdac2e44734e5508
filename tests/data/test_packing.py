"""Packed batches: first-fit decreasing rows, and the per-token and per-example arrays the packed model reads."""

import numpy as np

from tf_transfer.data import inputs, packing


def test_first_fit_decreasing_fills_rows_within_the_budget_longest_first():
    lengths = np.array([5, 3, 4, 2, 8, 1])
    rows = packing.first_fit_decreasing(lengths, budget=8)
    assert rows == [[4], [0, 1], [2, 3, 5]]
    assert sorted(sum(rows, [])) == list(range(len(lengths)))
    assert all(lengths[row].sum() <= 8 for row in rows)


def test_packed_features_keep_each_examples_tokens_positions_segments_and_first_token():
    lengths = np.array([3, 6, 2, 4], np.int32)
    token_ids = np.zeros((4, 8), np.int32)
    segment_ids = np.zeros((4, 8), np.int32)
    for i, n in enumerate(lengths):
        token_ids[i, :n] = 100 * (i + 1) + np.arange(n)
        segment_ids[i, n // 2:n] = 1
    features = packing.features(token_ids, segment_ids, lengths, ("token_ids", "segment_ids", "padding_mask"),
                                row_step=4)
    assert list(features) == ["token_ids", "segment_ids", "position_ids", "example_ids", "cls_positions"]
    # Rows of at most 8 tokens: [6, 2] and [4, 3]; width 8 (the fullest row, a multiple of 4).
    assert features["token_ids"].shape == (2, 8)
    flat = {name: features[name].reshape(-1) for name in ("token_ids", "segment_ids", "position_ids", "example_ids")}
    for i, n in enumerate(lengths):
        start = features["cls_positions"][i]
        span = slice(start, start + n)
        assert (flat["token_ids"][span] == token_ids[i, :n]).all()
        assert (flat["segment_ids"][span] == segment_ids[i, :n]).all()
        assert (flat["position_ids"][span] == np.arange(n)).all()
        assert (flat["example_ids"][span] == i).all()
    assert (flat["example_ids"] >= 0).sum() == lengths.sum()  # the rest is padding, -1


def test_pack_batches_are_the_fixed_batches_with_examples_labels_and_weights_in_order():
    lengths = np.array([3, 7, 2, 5, 4, 6, 1], np.int32)
    plan = inputs.plan_train_batches(lengths, 3, seed=1, epoch=2, padding="pack", max_seq_length=8, bucket_step=4)
    fixed = inputs.plan_train_batches(lengths, 3, seed=1, epoch=2, padding="fixed", max_seq_length=8, bucket_step=4)
    assert [list(b) for b in plan] == [list(b) for b in fixed]  # examples per update: --batch_size, as seeded
    token_ids = np.where(np.arange(8)[None, :] < lengths[:, None], 7, 0).astype(np.int32)
    encoded = inputs.Encoded(token_ids, np.zeros_like(token_ids), lengths, np.arange(7) % 2)
    import keras

    shared = False
    for indices, (features, labels, weights) in zip(plan, inputs.batches(encoded, plan, "pack", 4)):
        assert (labels == encoded.labels[indices]).all() and len(weights) == len(indices)
        assert len(features["cls_positions"]) == len(indices)
        # Keras weights a step's loss in the epoch's mean by the first flattened input's length: examples, not rows.
        assert len(keras.tree.flatten(features)[0]) == len(indices)
        shared |= len(features["token_ids"]) < len(indices)
        assert (features["example_ids"] >= 0).sum() == lengths[indices].sum()
        assert features["token_ids"].shape[0] * features["token_ids"].shape[1] == packing.computed_tokens(
            lengths[indices], 8, 4)
    assert shared  # some batch has fewer rows than examples: the count above is not the rows'
