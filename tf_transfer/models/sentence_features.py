"""One feature vector per text from a keras-hub BERT backbone, and Hart's logistic head on top of it.

Poolings: `cls` (the last block's [CLS] vector), `mean` (over real tokens, [CLS] and [SEP] included, as
sentence-BERT) and `last4_concat` (the [CLS] vectors of the last four hidden states, BERT's feature-based recipe),
built from the backbone's own sub-layers so that `freezing.set_trainable_layers` still decides what trains.

Example:

>>> from tf_transfer.models import sentence_features
>>> sentence_features.POOLINGS
('cls', 'last4_concat', 'mean')
>>> features = sentence_features.build_feature_model(backbone, "mean")  # doctest: +SKIP
>>> paper_head = sentence_features.head_outputs(features.output, num_classes=2)  # doctest: +SKIP
>>> relu_first = sentence_features.head_outputs(features.output, num_classes=2, hidden_units=64)  # doctest: +SKIP
"""

from __future__ import annotations

from tf_transfer.core.errors import TransferError

POOLINGS = ("cls", "last4_concat", "mean")


def hidden_states(backbone, token_inputs: dict, training=None) -> list:
    """[embeddings output, block 0 output, ..., block L-1 output] of a keras-hub BertBackbone.

    Re-applies the backbone's own sub-layers in the order of `BertBackbone.__init__`, so the weights are the same
    variables and `freezing.set_trainable_layers(backbone, ...)` governs what trains. The backbone's functional
    outputs only expose the last block, and BERT's feature-based recipe needs the last four.
    """
    layer = backbone.get_layer
    tokens = layer("token_embedding")(token_inputs["token_ids"])
    positions = layer("position_embedding")(tokens)
    segments = layer("segment_embedding")(token_inputs["segment_ids"])
    x = layer("embeddings_add")((tokens, positions, segments))
    x = layer("embeddings_layer_norm")(x)
    x = layer("embeddings_dropout")(x, training=training)
    states = [x]
    for block in backbone.transformer_layers:
        x = block(x, padding_mask=token_inputs["padding_mask"], training=training)
        states.append(x)
    return states


def build_feature_model(backbone, pooling: str):
    """Token inputs -> one feature vector per text.

    cls: the last block's [CLS] vector (BERT's pooler is not used: it was trained for next-sentence prediction, and
    sentence-transformers models such as all-MiniLM-L6-v2 are not trained through it); mean: mean over real
    tokens; last4_concat: the [CLS] vectors of the last four hidden states concatenated (BERT paper, section 5.3),
    the embeddings output counting as a hidden state as in Hugging Face's `hidden_states`.
    """
    import keras

    from tf_transfer.models import heads
    from tf_transfer.models.pooling import MeanPooling

    if pooling not in POOLINGS:
        raise TransferError(f"unknown --pooling={pooling!r}: choose one of {', '.join(POOLINGS)}")
    token_inputs = heads.backbone_inputs()
    states = hidden_states(backbone, token_inputs)
    if pooling == "cls":
        features = states[-1][:, 0, :]
    elif pooling == "mean":
        # Summed in float32: under mixed precision a bfloat16 sum over 128 tokens would lose digits.
        features = MeanPooling(dtype="float32", name="mean_pooling")(states[-1], token_inputs["padding_mask"])
    else:
        if len(states) < 4:
            raise TransferError(f"--pooling=last4_concat needs at least 3 encoder blocks (4 hidden states); the "
                                f"backbone has {len(states) - 1}")
        features = keras.layers.Concatenate(axis=-1, name="last4_concat")([s[:, 0, :] for s in states[-4:]])
    return keras.Model(token_inputs, features, name=f"features_{pooling}")


def head_outputs(features, num_classes: int, hidden_units: int = 0):
    """Hart's head on the features: with `hidden_units=0` (the paper's) a single dense layer with a logistic
    activation, i.e. logistic regression on the features, the equivalent of the sparse baselines' classifier (one
    sigmoid unit for two classes; for more, its multi-class form, a softmax layer of one unit per class). With
    `hidden_units` > 0 a dense ReLU layer of that many units comes first.

    Every layer is float32 under any precision policy (given explicitly: layers take the global policy
    otherwise), so the head computes, and returns probabilities, in float32 and the loss is taken in float32.
    """
    import keras

    if hidden_units < 0:
        raise TransferError(f"--hidden_units must be 0 (the paper's logistic layer) or more, got {hidden_units}")
    if hidden_units:
        features = keras.layers.Dense(hidden_units, activation="relu", dtype="float32", name="hidden")(features)
    if num_classes == 2:
        return keras.layers.Dense(1, activation="sigmoid", dtype="float32", name="logistic")(features)
    return keras.layers.Dense(num_classes, activation="softmax", dtype="float32", name="softmax")(features)
