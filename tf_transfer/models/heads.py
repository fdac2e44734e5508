"""Task heads as small Keras layers, and the classifier that puts one on a backbone.

Example:

>>> from tf_transfer import heads
>>> model = heads.build_classifier(backbone, num_outputs=2, dropout=0.1)  # doctest: +SKIP
>>> logits = model({"token_ids": ids, "segment_ids": segments, "padding_mask": mask})  # doctest: +SKIP
"""

from __future__ import annotations

import keras


@keras.saving.register_keras_serializable(package="tf_transfer")
class PooledHead(keras.layers.Layer):
    """Dropout then a dense layer over the pooled [CLS] vector, as in BERT's `run_classifier.py`.

    `num_outputs=1` is the regression head (STS-B, trained with mean squared error); otherwise it returns logits.
    """

    def __init__(self, num_outputs: int, dropout: float = 0.1, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.num_outputs = num_outputs
        self.dropout_rate = dropout
        self.initializer_range = initializer_range
        # Sublayers take the global policy unless told: under mixed precision a float32 head would compute and
        # return bfloat16/float16 logits.
        self.dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.dense = keras.layers.Dense(
            num_outputs,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
            dtype=self.dtype_policy,
            name="logits",
        )

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.built = True

    def call(self, pooled, training=None):
        return self.dense(self.dropout(pooled, training=training))

    def get_config(self):
        return {
            **super().get_config(),
            "num_outputs": self.num_outputs,
            "dropout": self.dropout_rate,
            "initializer_range": self.initializer_range,
        }


def backbone_inputs():
    """The three inputs of a BERT backbone; `padding_mask` is int32 (a bool mask breaks MirroredStrategy)."""
    return {
        name: keras.Input(shape=(None,), dtype="int32", name=name)
        for name in ("token_ids", "segment_ids", "padding_mask")
    }


def pooled_head(num_outputs: int, dropout: float = 0.1) -> PooledHead:
    """The classification/regression head; float32 even under mixed precision, so logits and losses are."""
    return PooledHead(num_outputs, dropout, dtype="float32", name="head")


def build_classifier(backbone, num_outputs: int, dropout: float = 0.1, head=None) -> keras.Model:
    """A functional model: backbone -> pooled [CLS] -> `PooledHead`. Outputs float32 logits (or the score)."""
    inputs = backbone_inputs()
    pooled = backbone(inputs)["pooled_output"]
    outputs = (head or pooled_head(num_outputs, dropout))(pooled)
    return keras.Model(inputs, outputs, name="classifier")
