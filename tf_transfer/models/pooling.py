"""Sentence vectors from a backbone's token vectors: the masked mean over the non-padded tokens.

Example:

>>> import numpy as np
>>> from tf_transfer.models.pooling import MeanPooling
>>> tokens = np.array([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]], np.float32)
>>> np.asarray(MeanPooling()(tokens, np.array([[1, 1, 0]], np.int32))).tolist()
[[2.0, 3.0]]
"""

from __future__ import annotations

import keras
from keras import ops


def masked_mean(sequence, mask):
    """Mean over axis 1 of `sequence` where `mask` is true, summed in float32 (also under mixed precision).

    `where()`, not a product with the mask: padded positions may hold anything, NaN included.
    """
    mask = ops.cast(mask, "bool")[..., None]
    sequence = ops.cast(sequence, "float32")
    total = ops.sum(ops.where(mask, sequence, ops.zeros_like(sequence)), axis=1)
    count = ops.maximum(ops.sum(ops.cast(mask, sequence.dtype), axis=1), 1.0)
    return total / count


@keras.saving.register_keras_serializable(package="tf_transfer")
class MeanPooling(keras.layers.Layer):
    """Mean of the token vectors at non-padded positions (`padding_mask` 1); padded positions never contribute."""

    def call(self, sequence, padding_mask):
        return masked_mean(sequence, padding_mask)
