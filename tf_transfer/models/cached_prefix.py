"""The two models on either side of the frozen-prefix cache (`tf_transfer.data.cache`): the prefix (embeddings and
frozen blocks, run once per split to fill the cache) and the suffix classifier (the last k blocks, the pooler and the
head, trained on the cached outputs with the backbone's own weights).

Example:

>>> from tf_transfer.models import cached_prefix
>>> prefix = cached_prefix.prefix_model(backbone, trainable_layers=2)  # doctest: +SKIP
>>> model = cached_prefix.suffix_classifier(backbone, trainable_layers=2, head=head)  # doctest: +SKIP
"""

from __future__ import annotations

from tf_transfer.data import cache, cache_pool
from tf_transfer.data.cache import frozen_depth
from tf_transfer.models import families


def prefix_model(backbone, trainable_layers, packed: bool = False):
    """A Keras model from the backbone's inputs to the output of the last frozen block (or the embeddings);
    `packed`: the same on packed rows (`tf_transfer.models.packed.prefix_model`)."""
    import keras

    depth = frozen_depth(trainable_layers, backbone.num_layers)
    if packed:
        from tf_transfer.models import packed as packed_model

        return packed_model.prefix_model(backbone, depth)
    if depth == 0:
        output = families.embeddings_output(backbone)
    else:
        output = backbone.transformer_layers[depth - 1].output
    return keras.Model(backbone.input, output, name="frozen_prefix")


def suffix_classifier(backbone, trainable_layers, head, hidden_dtype: str = "float16", packed: bool = False):
    """The last k blocks, the pooler (where the family has one) and `head` as a model on cached prefix outputs
    (weights shared with `backbone`, so training it trains the backbone's own blocks). `hidden_dtype` is the
    cache's (float16); float32 takes the prefix's output unrounded. `packed`: on packed rows of the cached outputs
    (`tf_transfer.models.packed.suffix_classifier`)."""
    import keras

    depth = frozen_depth(trainable_layers, backbone.num_layers)
    if packed:
        from tf_transfer.models import packed as packed_model

        return packed_model.suffix_classifier(backbone, depth, head, hidden_dtype)
    hidden_input = keras.Input(shape=(None, backbone.hidden_dim), dtype=hidden_dtype, name="hidden")
    mask_input = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
    x = keras.ops.cast(hidden_input, backbone.transformer_layers[0].compute_dtype)
    x = families.run_blocks(backbone, backbone.transformer_layers[depth:], x, mask_input)
    first = x[:, 0, :]
    pooled = backbone.get_layer("pooled_dense")(first) if families.of(backbone).pooler else first
    outputs = head(pooled)
    return keras.Model({"hidden": hidden_input, "padding_mask": mask_input}, outputs, name="cached_classifier")


def blocks_model(backbone, start: int, stop: int, hidden_dtype: str = "float16", packed: bool = False):
    """Blocks `start..stop-1` of the backbone as a model on a cached prefix's outputs (`{"hidden", "padding_mask"}`,
    the output of block start-1 or of the embeddings): extends a frozen-prefix cache by the blocks that froze next
    (`cache.extend`), weights shared with `backbone`. `packed`: the same on packed rows
    (`tf_transfer.models.packed.blocks_model`)."""
    import keras

    if packed:
        from tf_transfer.models import packed as packed_model

        return packed_model.blocks_model(backbone, start, stop, hidden_dtype)

    hidden_input = keras.Input(shape=(None, backbone.hidden_dim), dtype=hidden_dtype, name="hidden")
    mask_input = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
    x = keras.ops.cast(hidden_input, backbone.transformer_layers[0].compute_dtype)
    x = families.run_blocks(backbone, backbone.transformer_layers[start:stop], x, mask_input)
    return keras.Model({"hidden": hidden_input, "padding_mask": mask_input}, x, name=f"blocks_{start}_{stop}")


def cache_splits(backbone, trainable_layers, encoded: dict, weights: str, dataset: str, batching,
                 precision: str = "float32", cache_dir=None, packed: bool = False, pooled: tuple = ()) -> dict:
    """`{split: (CachedSplit, seconds spent, reused?)}`: the frozen prefix's outputs of every encoded split
    (`cache.build`, keyed by `cache.Prefix(weights, dataset, depth, ...)`), the prefix run once for them all. The
    commands' `--cache_frozen` and the Python API's `CachedClassifier` build their caches here. `packed`: the
    prefix runs on packed rows (`--padding=pack`), a cache of its own. `pooled`: the names of splits cached
    together (`cache_pool.pool`; a run's training and validation splits, which its seed draws from one file), each
    charged its share of the build by its real tokens."""
    prefix = prefix_model(backbone, trainable_layers, packed)
    depth = frozen_depth(trainable_layers, backbone.num_layers)
    cls_only = depth == backbone.num_layers
    identity = cache.Prefix(weights, dataset, depth, cls_only, precision, packed)

    def built(name, split):
        return cache.build(prefix, split, identity.key(name, split), batching, cls_only, cache_dir, packed=packed)

    together = [name for name in pooled if name in encoded]
    together = together if len(together) > 1 else []
    result = {name: built(name, split) for name, split in encoded.items() if name not in together}
    if together:
        union, rows = cache_pool.pool({name: encoded[name] for name in together})
        whole, spent, reused = built("+".join(together), union)
        tokens = {name: float(encoded[name].lengths.sum()) for name in together}
        for name in together:
            share = tokens[name] / (sum(tokens.values()) or 1.0)
            result[name] = (cache_pool.select(whole, rows[name], encoded[name], share), spent * share, reused)
    return {name: result[name] for name in encoded}
