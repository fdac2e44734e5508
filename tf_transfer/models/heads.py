"""Task heads as small Keras layers, and the classifier that puts one on a backbone of any encoder family.

The head reads the vector keras-hub's own TextClassifier of the family reads (`families.sentence_vector`): BERT's
and ELECTRA's pooler output; for RoBERTa, DistilBERT and DeBERTa-v3, which have no pooler, the first token's vector
of the sequence output, through the dense layer their keras-hub classifiers put before the logits.

Example:

>>> from tf_transfer.models import heads
>>> model = heads.build_classifier(backbone, num_outputs=2, dropout=0.1)  # doctest: +SKIP
>>> logits = model({"token_ids": ids, "segment_ids": segments, "padding_mask": mask})  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Optional

import keras

from tf_transfer.models import families


@keras.saving.register_keras_serializable(package="tf_transfer")
class PooledHead(keras.layers.Layer):
    """Dropout then a dense layer over the pooled [CLS] vector, as in BERT's `run_classifier.py`.

    `num_outputs=1` is the regression head (STS-B, trained with mean squared error); otherwise it returns logits.
    `hidden_activation` (families without a pooler) first applies a dense layer of `hidden_units` with that
    activation, preceded by dropout if `hidden_dropout`, as keras-hub's RoBERTa, DistilBERT and DeBERTa-v3
    classifiers do (their `pooled_dense`).
    """

    def __init__(self, num_outputs: int, dropout: float = 0.1, initializer_range: float = 0.02,
                 hidden_activation: Optional[str] = None, hidden_units: Optional[int] = None,
                 hidden_dropout: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.num_outputs = num_outputs
        self.dropout_rate = dropout
        self.initializer_range = initializer_range
        self.hidden_activation, self.hidden_units, self.hidden_dropout = hidden_activation, hidden_units, hidden_dropout
        # Sublayers take the global policy unless told: under mixed precision a float32 head would compute and
        # return bfloat16/float16 logits.
        self.hidden = self.hidden_dropout_layer = None
        if hidden_activation:
            if hidden_dropout:
                self.hidden_dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
            self.hidden = keras.layers.Dense(
                hidden_units,
                activation=hidden_activation,
                kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
                dtype=self.dtype_policy,
                name="pooled_dense",
            )
        self.dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.dense = keras.layers.Dense(
            num_outputs,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
            dtype=self.dtype_policy,
            name="logits",
        )

    def build(self, input_shape):
        if self.hidden is not None:
            self.hidden.build(input_shape)
            input_shape = tuple(input_shape[:-1]) + (self.hidden_units,)
        self.dense.build(input_shape)
        self.built = True

    def call(self, pooled, training=None):
        if self.hidden is not None:
            if self.hidden_dropout_layer is not None:
                pooled = self.hidden_dropout_layer(pooled, training=training)
            pooled = self.hidden(pooled)
        return self.dense(self.dropout(pooled, training=training))

    def get_config(self):
        return {
            **super().get_config(),
            "num_outputs": self.num_outputs,
            "dropout": self.dropout_rate,
            "initializer_range": self.initializer_range,
            "hidden_activation": self.hidden_activation,
            "hidden_units": self.hidden_units,
            "hidden_dropout": self.hidden_dropout,
        }


def backbone_inputs(names: tuple = families.WITH_SEGMENTS):
    """The inputs of a backbone (a BERT's three by default); `padding_mask` is int32 (a bool mask breaks
    MirroredStrategy)."""
    return {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in names}


def pooled_head(num_outputs: int, dropout: float = 0.1, backbone=None) -> PooledHead:
    """The classification/regression head for `backbone`'s family (BERT's without one); float32 even under mixed
    precision, so logits and losses are."""
    family = families.BERT if backbone is None else families.of(backbone)
    hidden = {} if family.pooler else {"hidden_activation": family.head_hidden, "hidden_units": backbone.hidden_dim,
                                       "hidden_dropout": family.head_hidden_dropout}
    return PooledHead(num_outputs, dropout, dtype="float32", name="head", **hidden)


def build_classifier(backbone, num_outputs: int, dropout: float = 0.1, head=None) -> keras.Model:
    """A functional model: the backbone's inputs -> backbone -> the family's sentence vector (pooled [CLS], or the
    first token) -> `PooledHead`. Outputs float32 logits (or the score)."""
    family = families.of(backbone)
    inputs = backbone_inputs(family.inputs)
    vector = families.sentence_vector(family, backbone(inputs))
    outputs = (head or pooled_head(num_outputs, dropout, backbone))(vector)
    return keras.Model(inputs, outputs, name="classifier")
