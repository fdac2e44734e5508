"""Export a trained run as a keras-hub preset folder (backbone, tokenizer, preprocessor, task) and score files with it.

The exported task is keras-hub's own TextClassifier of the backbone's family (`BertTextClassifier`: pooled [CLS]
-> dropout -> dense "logits"; RoBERTa's, DistilBERT's and DeBERTa-v3's add their dense layer over the first token:
the same structures as `heads.PooledHead`), so `keras_hub.models.TextClassifier.from_preset(folder)` loads it
anywhere keras-hub runs; keras-hub has no ELECTRA classifier, so ELECTRA runs cannot be exported.
`tf_transfer_task.json` beside it names the task's labels (or says it is a regression).

Example:

>>> from tf_transfer.models import export
>>> export.export_classifier(backbone, tokenizer, head, task, max_seq_length=128, folder="exported/")  # doctest: +SKIP
>>> classifier, meta = export.load("exported/")  # doctest: +SKIP
>>> export.predict(classifier, meta, ["a sentence"], ["another"])  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

from tf_transfer.data import inputs
from tf_transfer.core.errors import TransferError
from tf_transfer.models import families

META = "tf_transfer_task.json"


def check_exportable(backbone) -> None:
    """`TransferError` for a backbone whose family keras-hub has no text classifier for."""
    family = families.of(backbone)
    if family.classifier is None:
        exportable = ", ".join(f.name for f in families.FAMILIES.values() if f.classifier)
        raise TransferError(f"--export_dir: keras-hub has no {family.name} text classifier to export to; runs of "
                            f"{exportable} presets can be exported")


def export_classifier(backbone, tokenizer, head, task, max_seq_length: int, folder: str, dropout: float = 0.1):
    """Writes the preset folder; returns the keras-hub classifier that was saved."""
    import keras_hub

    check_exportable(backbone)
    name = families.of(backbone).classifier
    preprocessor = getattr(keras_hub.models, name + "Preprocessor")(tokenizer, sequence_length=max_seq_length,
                                                                     truncate="round_robin")
    hidden = {} if head.hidden is None else {"hidden_dim": head.hidden_units}
    classifier = getattr(keras_hub.models, name)(backbone=backbone, num_classes=task.num_labels,
                                                 preprocessor=preprocessor, activation=None, dropout=dropout, **hidden)
    if head.hidden is not None:
        classifier.get_layer("pooled_dense").set_weights(head.hidden.get_weights())
    classifier.get_layer("logits").set_weights(head.dense.get_weights())
    os.makedirs(folder, exist_ok=True)
    classifier.save_to_preset(folder)
    meta = {"task": task.name, "labels": list(task.labels) if task.labels else None,
            "regression": task.is_regression, "pair": task.is_pair, "text_columns": list(task.text_columns),
            "label_column": task.label_column, "max_seq_length": max_seq_length}
    with open(os.path.join(folder, META), "w") as f:
        json.dump(meta, f, indent=2)
    return classifier


def read_meta(folder: str) -> dict:
    """`tf_transfer_task.json` of an exported folder (`{}` for a folder exported before it was written), without
    loading the model; `TransferError` for a folder that holds no exported classifier."""
    if not os.path.isfile(os.path.join(folder, "task.json")):
        raise TransferError(f"{folder} is not an exported classifier (no task.json): export one with --export_dir")
    meta_path = os.path.join(folder, META)
    if not os.path.isfile(meta_path):
        return {}
    with open(meta_path) as f:
        return json.load(f)


def load(folder: str):
    """Returns `(classifier, meta)` from an exported folder."""
    import keras_hub

    meta = read_meta(folder)
    return keras_hub.models.TextClassifier.from_preset(folder), meta


def probabilities(logits: np.ndarray) -> np.ndarray:
    """Softmax of each row of logits (the exported classifier's outputs), computed stably."""
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def predict(classifier, meta: dict, text_a: list, text_b: Optional[list] = None, batch_size: int = 64,
            callbacks: Optional[list] = None):
    """Returns `(outputs, predictions)`: raw logits or scores, and label values (or scores for regression).
    `callbacks` are Keras callbacks of the one `predict` call (e.g. progress after each batch)."""
    import tensorflow as tf

    x = tf.constant(text_a) if text_b is None else (tf.constant(text_a), tf.constant(text_b))
    # Each element a 1-tuple: Keras reads an element `(a, b)` as (inputs, labels), which scored a pair's first
    # sentence alone.
    dataset = inputs.prefetched(tf.data.Dataset.from_tensor_slices((x,)).batch(batch_size),
                                -(-len(text_a) // batch_size))
    outputs = np.asarray(classifier.predict(dataset, verbose=0, callbacks=callbacks))
    if meta.get("regression"):
        return outputs, outputs[:, 0]
    indices = outputs.argmax(axis=-1)
    labels = meta.get("labels")
    return outputs, [labels[i] for i in indices] if labels else indices.tolist()
