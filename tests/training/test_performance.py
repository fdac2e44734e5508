"""Bucketing and the frozen-prefix cache change what is computed by no more than float rounding."""

import dataclasses

import numpy as np
import pytest

from tf_transfer.data import cache
from tf_transfer.data import cache_pool
from tf_transfer.models import cached_prefix
from tf_transfer.models import freezing
from tf_transfer.models import heads
from tf_transfer.data import inputs
from tf_transfer.studies.glue import glue_task as runner
from tf_transfer.data import tasks
from tf_transfer.data.examples import Examples
from tf_transfer.studies.glue.glue_settings import GlueSettings

from conftest import NUM_LAYERS, make_tiny_backbone, make_tiny_tokenizer

MAX_LEN = 64


@pytest.fixture(scope="module")
def encoded_rte(glue_dir):
    examples = tasks.read_glue_split(tasks.get_task("rte"), glue_dir, "train")
    return inputs.encode(examples, make_tiny_tokenizer(), MAX_LEN)


def test_packing_is_cls_a_sep_b_sep_with_segments(encoded_rte):
    tokenizer = make_tiny_tokenizer()
    row_ids, row_segments, length = encoded_rte.token_ids[0], encoded_rte.segment_ids[0], encoded_rte.lengths[0]
    a = list(tokenizer("the cat is happy"))
    assert row_ids[0] == tokenizer.cls_token_id
    assert list(row_ids[1:1 + len(a)]) == a and row_ids[1 + len(a)] == tokenizer.sep_token_id
    assert row_ids[length - 1] == tokenizer.sep_token_id and (row_ids[length:] == tokenizer.pad_token_id).all()
    assert (row_segments[:len(a) + 2] == 0).all() and (row_segments[len(a) + 2:length] == 1).all()


def test_truncation_to_max_seq_length():
    examples = Examples(["the cat " * 40], ["a dog " * 40], np.array([0]))
    encoded = inputs.encode(examples, make_tiny_tokenizer(), 16)
    assert encoded.lengths[0] == 16 and encoded.token_ids.shape == (1, 16)
    # Round robin keeps both segments: 7 tokens each plus [CLS] and two [SEP].
    assert (encoded.segment_ids[0] == 1).sum() == 7


def test_a_large_split_is_tokenized_and_packed_traced_into_the_same_arrays(monkeypatch):
    """keras-hub's tokenizer and packer ran eagerly, about 1 ms a pair (SST-2's 67,349 sentences: 37 s, 2 traced): a
    split of `TRACE_FROM_EXAMPLES` or more runs them traced, once per tokenizer, into the same arrays (pairs cut
    round robin, single texts, an empty split); a smaller split stays eager until a trace exists."""
    tokenizer = make_tiny_tokenizer()
    words = "the cat is happy and the dog runs in the big green house".split()
    pairs = Examples([" ".join(words[:n]) for n in range(1, 14)], [" ".join(words[n:] * 3) for n in range(1, 14)],
                     np.zeros(13, np.int64))
    singles = Examples(pairs.text_b, None, pairs.labels)
    monkeypatch.setattr(inputs, "_traced", {})
    monkeypatch.setattr(inputs, "TRACE_FROM_EXAMPLES", 10 ** 9)
    eager = [inputs.encode(examples, tokenizer, 16) for examples in (pairs, singles)]
    assert inputs._traced == {}
    monkeypatch.setattr(inputs, "TRACE_FROM_EXAMPLES", 13)
    for examples, expected in zip((pairs, singles), eager):
        encoded = inputs.encode(examples, tokenizer, 16, chunk_size=5)
        for name in ("token_ids", "segment_ids", "lengths"):
            np.testing.assert_array_equal(getattr(encoded, name), getattr(expected, name))
    traced = dict(inputs._traced)
    assert sorted(segments for _, _, segments in traced) == [1, 2]
    assert len(inputs.encode(Examples([], [], np.zeros(0, np.int64)), tokenizer, 16)) == 0  # traced: no chunk
    key = next(key for key in traced if key[2] == 2)
    calls, (same_tokenizer, function) = [], traced[key]
    inputs._traced[key] = (same_tokenizer, lambda *texts: calls.append(len(texts)) or function(*texts))
    small = inputs.encode(Examples(pairs.text_a[:2], pairs.text_b[:2], pairs.labels[:2]), tokenizer, 16)
    np.testing.assert_array_equal(small.token_ids, eager[0].token_ids[:2])
    assert calls == [2]  # the smaller split ran through the trace made for the larger, not eagerly


def test_plans_are_seeded_complete_and_bounded(encoded_rte):
    plan = inputs.plan_train_batches(encoded_rte.lengths, 4, seed=1, epoch=2, padding="bucket",
                                     max_seq_length=MAX_LEN, bucket_step=16)
    again = inputs.plan_train_batches(encoded_rte.lengths, 4, seed=1, epoch=2, padding="bucket",
                                      max_seq_length=MAX_LEN, bucket_step=16)
    other_epoch = inputs.plan_train_batches(encoded_rte.lengths, 4, seed=1, epoch=3, padding="bucket",
                                            max_seq_length=MAX_LEN, bucket_step=16)
    assert all((a == b).all() for a, b in zip(plan, again)) and len(plan) == len(again)
    assert any(len(a) != len(b) or (a != b).any() for a, b in zip(plan, other_epoch))
    assert sorted(np.concatenate(plan).tolist()) == list(range(len(encoded_rte)))
    lengths = {inputs.padded_length(encoded_rte.lengths[b], "bucket", MAX_LEN, 16) for b in plan}
    assert lengths <= {16, 32, 48, 64}
    for batch in plan:  # every example fits its batch's padded length
        assert encoded_rte.lengths[batch].max() <= inputs.padded_length(encoded_rte.lengths[batch], "bucket",
                                                                        MAX_LEN, 16)


@pytest.mark.parametrize("batch_size", [3, 4, 7])
def test_bucket_plans_have_one_partial_batch_of_a_fixed_size(encoded_rte, batch_size):
    n = len(encoded_rte)
    for epoch in (1, 2, 3):
        plan = inputs.plan_train_batches(encoded_rte.lengths, batch_size, seed=0, epoch=epoch, padding="bucket",
                                         max_seq_length=MAX_LEN, bucket_step=16)
        assert len(plan) == -(-n // batch_size)  # as many steps as fixed padding takes
        assert sorted(len(b) for b in plan if len(b) != batch_size) == ([n % batch_size] if n % batch_size else [])


def test_every_xla_shape_is_compiled_in_warm_up(encoded_rte):
    buckets = inputs.one_per_bucket(encoded_rte.lengths, "bucket", MAX_LEN, 16)
    warm = {inputs.padded_length(encoded_rte.lengths[b], "bucket", MAX_LEN, 16) for b in buckets}
    for epoch in (1, 2, 3, 4):
        plan = inputs.plan_train_batches(encoded_rte.lengths, 5, seed=3, epoch=epoch, padding="bucket",
                                         max_seq_length=MAX_LEN, bucket_step=16)
        filled = [inputs.fill_batch(b, 5)[0] for b in plan]
        assert {len(b) for b in filled} == {5}
        assert {inputs.padded_length(encoded_rte.lengths[b], "bucket", MAX_LEN, 16) for b in filled} <= warm


def test_filled_partial_batch_gives_the_same_loss_and_gradients(encoded_rte):
    import keras
    import tensorflow as tf

    model = heads.build_classifier(make_tiny_backbone(), 2)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight")
    indices = np.arange(3)

    def loss_and_grads(batch_indices, fill_to):
        features, labels, weights = next(inputs.batches(encoded_rte, [batch_indices], "bucket", 16,
                                                        fill_to=fill_to))
        with tf.GradientTape() as tape:
            # Inference mode: dropout would draw different masks for different batch sizes.
            loss = loss_fn(labels, model(features, training=False), sample_weight=weights)
        return float(loss), tape.gradient(loss, model.trainable_variables), len(labels)

    loss, grads, size = loss_and_grads(indices, None)
    filled_loss, filled_grads, filled_size = loss_and_grads(indices, 8)
    assert (size, filled_size) == (3, 8)
    np.testing.assert_allclose(filled_loss, loss, rtol=1e-5)
    for g, f in zip(grads, filled_grads):
        np.testing.assert_allclose(tf.convert_to_tensor(f), tf.convert_to_tensor(g), rtol=1e-4, atol=1e-6)


def test_bucket_padding_gives_the_same_logits_as_fixed(encoded_rte):
    backbone = make_tiny_backbone()
    model = heads.build_classifier(backbone, 2)
    indices = np.arange(8)
    bucket = next(inputs.batches(encoded_rte, [indices], "bucket", 16, with_labels=False))
    fixed = next(inputs.batches(encoded_rte, [indices], "fixed", 16, with_labels=False))
    assert bucket["token_ids"].shape[1] < fixed["token_ids"].shape[1] == MAX_LEN
    np.testing.assert_allclose(model(bucket, training=False), model(fixed, training=False), rtol=1e-5, atol=1e-5)


def test_scoring_traces_the_predict_step_once_for_batches_of_every_length():
    """`inputs.predict` over bucketed batches of three lengths: one trace (Keras' `predict` alone traced three
    times here), and each example's outputs are the model's on that example's batch."""
    words = "the cat is happy and the dog runs in the big green house".split()
    examples = Examples([" ".join(words[:n]) for n in (1, 2, 5, 6, 9, 10, 12, 13)], None, np.zeros(8, np.int64))
    encoded = inputs.encode(examples, make_tiny_tokenizer(), MAX_LEN)
    model = heads.build_classifier(make_tiny_backbone(), 2)
    plan = inputs.plan_eval_batches(encoded.lengths, 3, "bucket")
    batches = list(inputs.batches(encoded, plan, "bucket", 4, with_labels=False))
    assert len({batch["token_ids"].shape[1] for batch in batches}) == 3
    traces = []
    predict_step = model.predict_step
    model.predict_step = lambda data: traces.append(1) or predict_step(data)
    outputs = inputs.predict(model, inputs.to_dataset(encoded, plan, "bucket", 4, with_labels=False))
    assert len(traces) == 1
    expected = np.concatenate([model(batch, training=False) for batch in batches])
    np.testing.assert_allclose(outputs, expected, rtol=1e-5, atol=1e-6)


def test_scoring_a_ragged_dataset_is_left_to_keras():
    """Only dense specs are relaxed up front: a ragged one is traced once, by Keras, not first as a dense
    `TensorSpec` that no batch matches (two traces before this was checked), with the model's outputs."""
    import keras
    import tensorflow as tf

    class RowSums(keras.Model):
        def call(self, x):
            return tf.expand_dims(tf.cast(tf.reduce_sum(x, axis=1), "float32"), -1)

    dataset = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1, 2], [3], [4, 5, 6], [7]])).batch(2)
    model, traces = RowSums(), []
    predict_step = model.predict_step
    model.predict_step = lambda data: traces.append(1) or predict_step(data)
    np.testing.assert_array_equal(inputs.predict(model, dataset).ravel(), [3, 3, 15, 7])
    assert len(traces) == 1


@pytest.mark.parametrize("k", [0, 1, NUM_LAYERS])
def test_cached_path_equals_uncached_inference(encoded_rte, k, tmp_path):
    cache.clear_memory()
    backbone = make_tiny_backbone()
    head = heads.pooled_head(2)
    full = heads.build_classifier(backbone, 2, head=head)
    freezing.set_trainable_layers(backbone, k)
    prefix = cached_prefix.prefix_model(backbone, k)
    depth = NUM_LAYERS - k
    key = cache.Prefix("tiny", "rte", depth, cls_only=k == 0).key("train", encoded_rte)
    cached, seconds, reused = cache.build(prefix, encoded_rte, key, cls_only=k == 0, cache_dir=str(tmp_path))
    assert seconds > 0 and not reused
    assert cached.hidden.dtype == np.float16
    assert cached.hidden.shape[0] == (len(encoded_rte) if k == 0 else encoded_rte.lengths.sum())
    suffix = cached_prefix.suffix_classifier(backbone, k, head)
    assert {id(v) for v in suffix.trainable_variables} <= {id(v) for v in full.variables}

    plan = inputs.plan_eval_batches(encoded_rte.lengths, 16, "bucket")
    expected = np.concatenate([full(f, training=False) for f in
                               inputs.batches(encoded_rte, plan, "bucket", 16, with_labels=False)])
    got = np.concatenate([suffix(f, training=False) for f in
                          cache.batches(cached, plan, 16, MAX_LEN, with_labels=False)])
    # The cache stores float16: agreement is to float16 rounding of the hidden states.
    np.testing.assert_allclose(got, expected, rtol=2e-2, atol=2e-3)

    again, seconds, reused = cache.build(prefix, encoded_rte, key, cls_only=k == 0, cache_dir=str(tmp_path))
    assert reused and seconds == 0.0 and again is cached
    cache.clear_memory()
    from_disk, seconds, reused = cache.build(prefix, encoded_rte, key, cls_only=k == 0, cache_dir=str(tmp_path))
    assert reused and isinstance(from_disk.hidden, np.memmap)
    np.testing.assert_array_equal(np.asarray(from_disk.hidden), cached.hidden)
    # What building it cost travels with the cache, so a run that reuses it can still be charged for it.
    assert from_disk.build_s == pytest.approx(cached.build_s) and from_disk.build_cpu_s == cached.build_cpu_s > 0


@pytest.mark.parametrize("padding", ["bucket", "pack"])
def test_splits_a_seed_draws_from_one_file_share_one_cache_computed_alike_for_every_seed(encoded_rte, padding):
    """`cache_pool.pool` and `cache_pool.select`: the training and validation splits of two seeds (other validation
    shares of the same file, a text repeated in it) pool to the same examples; each seed's splits read the one cache
    built over them, every example's rows the ones its own text was given (so a rerun of one seed alone, its cache
    built afresh, trains on the same bits), and a model fed the selected splits scores what it scores on the pool's
    rows. The splits are charged the build by their real tokens."""
    from tf_transfer.data.examples import train_validation_split

    cache.clear_memory()
    repeated = dataclasses.replace(encoded_rte, token_ids=np.concatenate([encoded_rte.token_ids,
                                                                          encoded_rte.token_ids[:3]]),
                                   segment_ids=np.concatenate([encoded_rte.segment_ids, encoded_rte.segment_ids[:3]]),
                                   lengths=np.concatenate([encoded_rte.lengths, encoded_rte.lengths[:3]]),
                                   labels=np.concatenate([encoded_rte.labels, encoded_rte.labels[:3]]))
    take = lambda encoded, rows: dataclasses.replace(
        encoded, token_ids=encoded.token_ids[rows], segment_ids=encoded.segment_ids[rows],
        lengths=encoded.lengths[rows], labels=encoded.labels[rows])
    seeds = {}
    for seed in (0, 1):
        train, validation = train_validation_split(_Rows(len(repeated)), 0.25, seed)
        seeds[seed] = {"train": take(repeated, train.rows), "validation": take(repeated, validation.rows)}
    pools = {seed: cache_pool.pool(splits) for seed, splits in seeds.items()}
    (zero, zero_rows), (one, one_rows) = pools[0], pools[1]
    distinct = {(tuple(t), tuple(g)) for t, g in zip(repeated.token_ids, repeated.segment_ids)}
    assert len(zero) == len(distinct) < len(repeated)  # a repeated text once
    for field in ("token_ids", "segment_ids", "lengths"):
        np.testing.assert_array_equal(getattr(zero, field), getattr(one, field))
    for seed, (pooled, rows) in pools.items():
        for name, split in seeds[seed].items():
            np.testing.assert_array_equal(pooled.token_ids[rows[name]], split.token_ids)

    backbone = make_tiny_backbone()
    prefix = cached_prefix.prefix_model(backbone, 1, packed=padding == "pack")
    key = cache.Prefix("tiny", "rte", NUM_LAYERS - 1, packed=padding == "pack").key("train+validation", zero)
    assert key == cache.Prefix("tiny", "rte", NUM_LAYERS - 1, packed=padding == "pack").key("train+validation", one)
    whole, _, reused = cache.build(prefix, zero, key, packed=padding == "pack")
    assert not reused
    for seed, (pooled, rows) in pools.items():
        tokens = {name: split.lengths.sum() for name, split in seeds[seed].items()}
        for name, split in seeds[seed].items():
            share = tokens[name] / sum(tokens.values())
            selected = cache_pool.select(whole, rows[name], split, share)
            assert selected.build_s == pytest.approx(whole.build_s * share)
            np.testing.assert_array_equal(selected.labels, split.labels)
            for i in range(len(split)):
                start, stop = selected.span(i)
                assert stop - start == split.lengths[i]
                np.testing.assert_array_equal(selected.hidden[start:stop],
                                              whole.hidden[slice(*whole.span(rows[name][i]))])
            plan = inputs.plan_eval_batches(split.lengths, 8, padding)
            for indices, (features, labels, _) in zip(plan, cache.batches(selected, plan, 8, MAX_LEN,
                                                                          packed=padding == "pack")):
                np.testing.assert_array_equal(labels.ravel(), split.labels[indices])
                if padding == "bucket":
                    for row, index in enumerate(indices):
                        np.testing.assert_array_equal(features["hidden"][row, :split.lengths[index]],
                                                      whole.hidden[slice(*whole.span(rows[name][index]))])
    # Memory: the splits' shares of the one array, not a copy each.
    assert (sum(cache_pool.select(whole, rows, seeds[0][name], 0.5).nbytes for name, rows in zero_rows.items())
            == pytest.approx(whole.nbytes * sum(split.lengths.sum() for split in seeds[0].values())
                             / whole.lengths.sum()))
    cache.clear_memory()


class _Rows:
    """A stand-in data set of `n` rows for `train_validation_split`: what it takes are row numbers."""

    def __init__(self, n, rows=None):
        self.rows = np.arange(n) if rows is None else np.asarray(rows)
        self.source = "rows"

    def __len__(self):
        return len(self.rows)

    def take(self, indices):
        return _Rows(0, self.rows[np.asarray(indices, int)])


def test_a_cache_reused_in_memory_carries_the_labels_of_the_split_that_asks(encoded_rte):
    """The same texts with other labels (another label column, or read as scores): the prefix's outputs are the
    same and are reused, but a run must train on its own labels, as a cache read back from disk always did. In one
    process a regression run after another on the same texts trained on the first's targets."""
    import dataclasses

    cache.clear_memory()
    backbone = make_tiny_backbone()
    prefix = cached_prefix.prefix_model(backbone, 1)
    key = cache.Prefix("tiny", "rte", NUM_LAYERS - 1).key("train", encoded_rte)
    first, _, _ = cache.build(prefix, encoded_rte, key)
    scores = dataclasses.replace(encoded_rte, labels=np.linspace(0.0, 5.0, len(encoded_rte)), regression=True)
    assert cache.Prefix("tiny", "rte", NUM_LAYERS - 1).key("train", scores) == key  # labels are not what it keys
    again, seconds, reused = cache.build(prefix, scores, key)
    assert reused and seconds == 0.0 and again.hidden is first.hidden  # the outputs are not computed again
    assert again.regression and np.array_equal(again.labels, scores.labels)
    assert not first.regression and np.array_equal(first.labels, encoded_rte.labels)  # the first run's unchanged
    cache.clear_memory()


def test_packed_cache_keeps_the_real_tokens_and_trains_on_packed_rows(encoded_rte):
    """`--cache_frozen --padding=pack`: the prefix run on packed rows stores what the padded prefix computes (every
    real token, float16, to its rounding: 2**-10 relative), under a name of its own; the packed feed lays the cache
    out in rows (some shared by several examples) and the packed suffix scores every example as the padded suffix
    does from the same cache, to float32 rounding (1e-5), in the split's order. The models run eagerly (one call
    per batch of a tiny model costs less than tracing it)."""
    from tf_transfer.core.setting_groups import InputSettings
    from tf_transfer.data import feeds

    cache.clear_memory()
    backbone, head = make_tiny_backbone(), heads.pooled_head(2)
    # Packed rows in multiples of 4 tokens (`packing.ROW_STEP`), buckets too: the tiny RTE pairs (10-16 tokens) then
    # pack two or three to a row.
    depth, settings = NUM_LAYERS - 1, InputSettings(batch_size=8, eval_batch_size=64, bucket_step=4)
    padded_key, packed_key = (cache.Prefix("tiny", "rte", depth, packed=packed).key("train", encoded_rte)
                              for packed in (False, True))
    assert padded_key != packed_key and "-pack-" in packed_key
    prefix = cached_prefix.prefix_model(backbone, 1, packed=True)
    cached, seconds, reused = cache.build(prefix, encoded_rte, packed_key, settings, packed=True,
                                          run=lambda features: prefix(features, training=False))
    assert seconds > 0 and not reused and cached.build_cpu_s > 0
    everything = [np.arange(len(encoded_rte))]
    padded = next(inputs.batches(encoded_rte, everything, "fixed", 4, with_labels=False))
    hidden = np.asarray(cached_prefix.prefix_model(backbone, 1)(padded, training=False))
    real = np.concatenate([hidden[i, :n] for i, n in enumerate(encoded_rte.lengths)])
    np.testing.assert_allclose(cached.hidden, real.astype(np.float16), rtol=2**-10, atol=1e-6)

    packed_feed = feeds.CachedFeed({"train": cached}, settings, packed=True)
    assert any(len(features["cls_positions"]) > len(features["hidden"]) for features, _, _ in
               cache.batches(cached, packed_feed.plan(1), 4, MAX_LEN, packed=True))
    got = packed_feed.predict(cached_prefix.suffix_classifier(backbone, 1, head, packed=True), "train")
    features = next(cache.batches(cached, everything, 4, MAX_LEN, with_labels=False))
    expected = cached_prefix.suffix_classifier(backbone, 1, head)(features, training=False)
    np.testing.assert_allclose(got, np.asarray(expected), rtol=0, atol=1e-5)
    cache.clear_memory()


def test_pipelines_prefetch_a_fixed_buffer_without_autotuning(encoded_rte):
    """Autotuning's model thread made every iterator teardown wait for its next wake-up (inputs.prefetched)."""
    plan = inputs.plan_eval_batches(encoded_rte.lengths, 16, "bucket")
    backbone = make_tiny_backbone()
    prefix = cached_prefix.prefix_model(backbone, 1)
    key = cache.Prefix("tiny", "rte", NUM_LAYERS - 1).key("train", encoded_rte)
    cached, _, _ = cache.build(prefix, encoded_rte, key)
    for dataset in (inputs.to_dataset(encoded_rte, plan, "bucket", 16),
                    cache.to_dataset(cached, plan, 16, MAX_LEN)):
        assert dataset.options().autotune.enabled is False
        assert int(dataset.cardinality()) == len(plan) == sum(1 for _ in dataset)
    cache.clear_memory()


def test_cache_key_depends_on_depth_and_data(encoded_rte):
    key = cache.Prefix("p", "rte", 2).key("train", encoded_rte)
    assert key != cache.Prefix("p", "rte", 1).key("train", encoded_rte)
    first5 = inputs.Encoded(encoded_rte.token_ids[:5], encoded_rte.segment_ids[:5], encoded_rte.lengths[:5],
                            encoded_rte.labels[:5], encoded_rte.regression)
    assert key != cache.Prefix("p", "rte", 2).key("train", first5)
    assert key == cache.Prefix("p", "rte", 2).key("train", encoded_rte)


def test_caches_written_by_earlier_versions_keep_their_names():
    """A cache on disk is found by its name: these are the names the code before `cache.Prefix` (at ea1afee) gave
    the same settings and examples."""
    encoded = inputs.Encoded(np.array([[2, 7, 3, 0], [2, 9, 11, 3]], np.int32), np.zeros((2, 4), np.int32),
                             np.array([3, 4]), np.array([0, 1]))
    assert cache.Prefix("bert_tiny_en_uncased", "mrpc", 2).key("train", encoded) == "mrpc-train-d2-a412c8767ef58dc7"
    assert (cache.Prefix("bert_tiny_en_uncased", "mrpc", 4, cls_only=True, precision="mixed_bfloat16")
            .key("train", encoded) == "mrpc-train-d4-80d005af80bad769")


def test_run_with_cache_records_and_reuses_it(glue_dir, two_block_preset, tmp_path):
    cache.clear_memory()
    settings = dict(task="rte", preset=two_block_preset, trainable_layers=1, lr=1e-3, batch_size=8, max_epochs=1,
                    data_dir=glue_dir, max_seq_length=32, cache_frozen=True)
    first = runner.run_glue(GlueSettings(**settings), str(tmp_path / "a"))
    second = runner.run_glue(GlueSettings(**settings, seed=1), str(tmp_path / "b"))
    assert first["completed"] and first["cache_frozen"] is True and first["cache_time_s"] > 0
    assert first["trainable_params"] < first["total_params"]
    # Seed 1 holds out another validation share of the same training file: the training and validation splits are
    # cached together (`cache_pool.pool`), so its caches are seed 0's, charged what they cost to build.
    assert second["cache_time_s"] == 0.0
    assert second["cache_build_s"] == pytest.approx(first["cache_build_s"])
    third = runner.run_glue(GlueSettings(**{**settings, "lr": 2e-3}), str(tmp_path / "c"))
    assert third["cache_time_s"] == 0.0


def test_fused_adamw_updates_exactly_like_keras_adamw():
    import keras
    import tensorflow as tf

    from tf_transfer.training import optimizers

    def run(optimizer_class):
        keras.utils.set_random_seed(0)
        embedding = keras.Variable(np.random.default_rng(0).normal(size=(50, 4)).astype("float32"), name="table")
        kernel = keras.Variable(np.random.default_rng(1).normal(size=(4, 3)).astype("float32"), name="kernel")
        bias = keras.Variable(np.zeros(3, "float32"), name="bias")
        optimizer = optimizer_class(learning_rate=1e-2, weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0)
        optimizer.exclude_from_weight_decay(var_names=["bias"])
        for step in range(4):
            ids = tf.constant([step, 7, 7, 20 + step])
            with tf.GradientTape() as tape:
                # A gathered embedding gives the sparse (IndexedSlices) gradient the word embeddings have.
                loss = tf.reduce_sum(tf.tanh(tf.matmul(tf.gather(embedding.value, ids), kernel.value) + bias.value))
            grads = tape.gradient(loss, [embedding.value, kernel.value, bias.value])
            optimizer.apply_gradients(zip(grads, [embedding, kernel, bias]))
        return [np.asarray(v) for v in (embedding, kernel, bias)]

    for fused, reference in zip(run(optimizers.FusedAdamW), run(keras.optimizers.AdamW)):
        # Float32 rounding only (the bias-corrected step size is computed in a different order).
        np.testing.assert_allclose(fused, reference, rtol=1e-5, atol=1e-6)


def test_fused_adamw_makes_its_scalars_once_per_step_with_the_same_numbers():
    """In a traced step the update's step-dependent scalars are made once for all variables (two `Pow` ops, not
    two per variable), and the variables end bit for bit where the per-variable scalars put them."""
    import keras
    import tensorflow as tf

    from tf_transfer.training import optimizers

    def run(hoisted: bool):
        variables = [keras.Variable(np.random.default_rng(i).normal(size=(4, 3)).astype("float32"), name=f"v{i}")
                     for i in range(3)]
        # No weight decay: the per-variable side below calls the Adam update alone.
        optimizer = optimizers.FusedAdamW(learning_rate=1e-2, weight_decay=0.0, epsilon=1e-6)
        optimizer.build(variables)

        @tf.function
        def step(seed):
            with tf.GradientTape() as tape:
                loss = tf.add_n([tf.reduce_sum(tf.sin(v.value * tf.cast(seed + 1, tf.float32))) for v in variables])
            grads = tape.gradient(loss, [v.value for v in variables])
            if hoisted:
                optimizer.apply_gradients(zip(grads, variables))
            else:  # the scalars made for each variable, as before they were made once
                for grad, variable in zip(grads, variables):
                    optimizer.update_step(grad, variable.value, optimizer.learning_rate)
                optimizer.iterations.assign_add(1)

        for seed in range(4):
            step(tf.constant(seed))
        graph = step.get_concrete_function(tf.TensorSpec([], tf.int32)).graph
        powers = sum(op.type == "Pow" for op in graph.get_operations())
        return [np.asarray(v) for v in variables], powers

    (hoisted, powers), (per_variable, per_variable_powers) = run(True), run(False)
    assert (powers, per_variable_powers) == (2, 6)
    for a, b in zip(hoisted, per_variable):
        np.testing.assert_array_equal(a, b)
