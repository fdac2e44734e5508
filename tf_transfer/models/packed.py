"""The packed classifier (`--padding=pack`): a backbone's own layers applied to rows that hold several examples
end to end (`tf_transfer.data.packing`), computing for each example what the padded model computes.

keras-hub's backbones, as functional models, take only a padding mask, so this model calls their pieces itself,
as the frozen-prefix cache's models do (`cached_prefix`): the embeddings with explicit position ids (restarting at
0 at each example's first token; keras-hub's `PositionEmbedding` takes `positions`), each example's own segment
ids, then every block with a 3-D attention mask that lets a token see only the tokens of its own example (a
block-diagonal mask per row: Krell et al., "Efficient Sequence Packing without Cross-contamination", 2021). The
head reads each example's first token ([CLS]) through the family's pooler, so the outputs are per example, in the
batch's order, and so are the loss and the metrics.

Masked attention weights are exactly 0 (keras' masked softmax adds -1e9 before `exp`), layer norms and dense
layers act per token, and DeBERTa-v3's relative positions depend only on the distance between two tokens: an
example's outputs differ from the padded model's only by the summation order of differently shaped matrix
products (tests/models/test_packed.py measures it per family).

Example:

>>> from tf_transfer.models import heads, packed
>>> model = packed.build_classifier(backbone, head=heads.pooled_head(2, backbone=backbone))  # doctest: +SKIP
>>> logits = model(packing_features)  # one row per example  # doctest: +SKIP
"""

from __future__ import annotations

import keras
from keras import ops

from tf_transfer.core.errors import TransferError
from tf_transfer.data import packing
from tf_transfer.models import families

# Family key -> how its embeddings take explicit positions: "absolute" (a position table: BERT's and ELECTRA's own
# layers, RoBERTa's and DistilBERT's TokenAndPositionEmbedding), "relative" (none: DeBERTa-v3's blocks see only
# distances between tokens, unchanged by where an example sits in its row).
POSITIONS = {"bert": "absolute", "electra": "absolute", "roberta": "absolute", "distil_bert": "absolute",
             "deberta_v3": "relative"}


def check_packable(backbone) -> None:
    """`TransferError` naming the family when the packed model does not know its embeddings."""
    family = families.of(backbone)
    if family.key not in POSITIONS:
        supported = ", ".join(f.name for f in families.FAMILIES.values() if f.key in POSITIONS)
        raise TransferError(f"--padding=pack does not support {family.name} encoders (its embeddings take no "
                            f"explicit positions here): use --padding=bucket, or a {supported} preset")


def packed_inputs(family: families.Family) -> dict:
    """The packed model's inputs: the family's token inputs without `padding_mask`, and `packing.PACKED_INPUTS`."""
    names = [name for name in family.inputs if name != "padding_mask"] + list(packing.PACKED_INPUTS)
    return {name: keras.Input(shape=() if name == "cls_positions" else (None,), dtype="int32", name=name)
            for name in names}


def embed(backbone, inputs: dict):
    """The embeddings' output (block 0's input) of packed rows: positions from `position_ids`, not the row index."""
    family = families.of(backbone)
    if family.key in ("bert", "electra"):
        tokens = backbone.token_embedding(inputs["token_ids"])
        positions = backbone.position_embedding(tokens, positions=inputs["position_ids"])
        hidden = backbone.embeddings_add((tokens, positions, backbone.segment_embedding(inputs["segment_ids"])))
    elif family.key in ("roberta", "distil_bert"):
        hidden = backbone.embeddings(inputs["token_ids"], positions=inputs["position_ids"])
    else:
        hidden = backbone.token_embedding(inputs["token_ids"])
    hidden = backbone.embeddings_dropout(backbone.embeddings_layer_norm(hidden))
    if getattr(backbone, "embeddings_projection", None) is not None:  # ELECTRA's narrower embeddings
        hidden = backbone.embeddings_projection(hidden)
    return hidden


def attention_mask(example_ids):
    """`[rows, width, width]`: token i of a row may attend to token j when both belong to the same example."""
    return ops.cast(ops.equal(ops.expand_dims(example_ids, 2), ops.expand_dims(example_ids, 1)), "int32")


def first_tokens(hidden, cls_positions):
    """`[examples, hidden]`: each example's first token's vector, read at its flat index in the rows."""
    return ops.take(ops.reshape(hidden, (-1, ops.shape(hidden)[-1])), cls_positions, axis=0)


def _classify(backbone, hidden, cls_positions, head):
    """`head`'s outputs on the family's sentence vector of each example (its pooled [CLS], or its first token's
    vector), read from packed rows."""
    first = first_tokens(hidden, cls_positions)
    vector = backbone.get_layer("pooled_dense")(first) if families.of(backbone).pooler else first
    return head(vector)


def build_classifier(backbone, head) -> keras.Model:
    """A functional model from packed inputs (`packed_inputs`) to `head`'s outputs, one row per example: the
    backbone's embeddings and blocks on packed rows, then the family's sentence vector of each example (its pooled
    [CLS], or its first token's vector) and `head`."""
    check_packable(backbone)
    inputs = packed_inputs(families.of(backbone))
    hidden = families.run_blocks(backbone, backbone.transformer_layers, embed(backbone, inputs),
                                 attention_mask=attention_mask(inputs["example_ids"]))
    return keras.Model(inputs, _classify(backbone, hidden, inputs["cls_positions"], head), name="packed_classifier")


def prefix_model(backbone, depth: int) -> keras.Model:
    """The frozen prefix on packed rows (`--cache_frozen --padding=pack`): from packed inputs (`packed_inputs`
    without `cls_positions`) to the output of block `depth - 1` (the embeddings' for 0), `[rows, width, hidden]`,
    each example's tokens where the packing put them. What the padded prefix (`cached_prefix.prefix_model`)
    computes for the real tokens, on (almost) only real tokens.

    >>> prefix = packed.prefix_model(backbone, depth=4)  # doctest: +SKIP
    >>> hidden = prefix({k: v for k, v in packing_features.items() if k != "cls_positions"})  # doctest: +SKIP
    """
    check_packable(backbone)
    inputs = packed_inputs(families.of(backbone))
    inputs.pop("cls_positions")
    hidden = embed(backbone, inputs)
    if depth:
        hidden = families.run_blocks(backbone, backbone.transformer_layers[:depth], hidden,
                                     attention_mask=attention_mask(inputs["example_ids"]))
    return keras.Model(inputs, hidden, name="packed_frozen_prefix")


def blocks_model(backbone, start: int, stop: int, hidden_dtype: str = "float16") -> keras.Model:
    """Blocks `start..stop-1` on packed rows of cached prefix outputs (`{"hidden", "example_ids"}`, as
    `suffix_classifier`'s inputs without `cls_positions`) to their output `[rows, width, hidden]`: extends a packed
    frozen-prefix cache by the blocks that froze next (`cache.extend(..., packed=True)`), as
    `cached_prefix.blocks_model` extends a padded one; weights shared with `backbone`.

    >>> blocks = packed.blocks_model(backbone, 1, 3)  # doctest: +SKIP
    >>> deeper = blocks({"hidden": rows, "example_ids": ids})  # doctest: +SKIP
    """
    check_packable(backbone)
    inputs = {"hidden": keras.Input(shape=(None, backbone.hidden_dim), dtype=hidden_dtype, name="hidden"),
              "example_ids": keras.Input(shape=(None,), dtype="int32", name="example_ids")}
    hidden = ops.cast(inputs["hidden"], backbone.transformer_layers[0].compute_dtype)
    hidden = families.run_blocks(backbone, backbone.transformer_layers[start:stop], hidden,
                                 attention_mask=attention_mask(inputs["example_ids"]))
    return keras.Model(inputs, hidden, name=f"packed_blocks_{start}_{stop}")


def suffix_classifier(backbone, depth: int, head, hidden_dtype: str = "float16") -> keras.Model:
    """The blocks from `depth` on, the pooler (where the family has one) and `head` on packed rows of cached prefix
    outputs (`tf_transfer.data.cache`'s packed batches): inputs `hidden` `[rows, width, hidden]` in `hidden_dtype`,
    `example_ids` and `cls_positions` as the packed inputs'; one output row per example. Weights shared with
    `backbone`, as `cached_prefix.suffix_classifier`'s.

    >>> model = packed.suffix_classifier(backbone, depth=4, head=head)  # doctest: +SKIP
    >>> logits = model({"hidden": rows, "example_ids": ids, "cls_positions": starts})  # doctest: +SKIP
    """
    check_packable(backbone)
    inputs = {"hidden": keras.Input(shape=(None, backbone.hidden_dim), dtype=hidden_dtype, name="hidden"),
              "example_ids": keras.Input(shape=(None,), dtype="int32", name="example_ids"),
              "cls_positions": keras.Input(shape=(), dtype="int32", name="cls_positions")}
    hidden = ops.cast(inputs["hidden"], backbone.transformer_layers[0].compute_dtype)
    hidden = families.run_blocks(backbone, backbone.transformer_layers[depth:], hidden,
                                 attention_mask=attention_mask(inputs["example_ids"]))
    return keras.Model(inputs, _classify(backbone, hidden, inputs["cls_positions"], head),
                       name="packed_cached_classifier")
