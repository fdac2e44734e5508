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

from tf_transfer.data import inputs, packing
from tf_transfer.core import disk
from tf_transfer.core.errors import TransferError
from tf_transfer.models import families, serving

META = "tf_transfer_task.json"
# Present in an exported folder while it is being written (`export_classifier`).
UNFINISHED = ".export-unfinished"


def check_exportable(backbone, export_format: str = "preset") -> None:
    """`TransferError` for a backbone whose family keras-hub has no text classifier for, or (a SavedModel) whose
    tokenizer the serving graph does not reproduce."""
    family = families.of(backbone)
    if family.classifier is None:
        exportable = ", ".join(f.name for f in families.FAMILIES.values() if f.classifier)
        raise TransferError(f"--export_dir: keras-hub has no {family.name} text classifier to export to; runs of "
                            f"{exportable} presets can be exported")
    if serving.check_format(export_format) == "saved_model":
        serving.check_family(family)


def export_classifier(backbone, tokenizer, head, task, max_seq_length: int, folder: str, dropout: float = 0.1,
                      padding: str = "bucket", export_format: str = "preset"):
    """Writes the preset folder (or, `export_format="saved_model"`, the SavedModel); returns the keras-hub
    classifier that was saved. `padding` (how the run was trained) is recorded as the way `predict` scores with it
    by default."""
    import keras_hub

    check_exportable(backbone, export_format)
    name = families.of(backbone).classifier
    preprocessor = getattr(keras_hub.models, name + "Preprocessor")(tokenizer, sequence_length=max_seq_length,
                                                                     truncate="round_robin")
    hidden = {} if head.hidden is None else {"hidden_dim": head.hidden_units}
    classifier = getattr(keras_hub.models, name)(backbone=backbone, num_classes=task.num_labels,
                                                 preprocessor=preprocessor, activation=None, dropout=dropout, **hidden)
    if head.hidden is not None:
        classifier.get_layer("pooled_dense").set_weights(head.hidden.get_weights())
    classifier.get_layer("logits").set_weights(head.dense.get_weights())
    meta = {"task": task.name, "labels": list(task.labels) if task.labels else None,
            "regression": task.is_regression, "pair": task.is_pair, "text_columns": list(task.text_columns),
            "label_column": task.label_column, "max_seq_length": max_seq_length,
            "padding": padding}
    _write(classifier, folder, meta, export_format)
    return classifier


def _write(classifier, folder: str, meta: dict, export_format: str) -> None:
    """Saves `classifier` to `folder` in `export_format`, with `meta` (`tf_transfer_task.json`) beside it (a
    preset's with the SHA-256 of each file keras-hub wrote); until the export is whole the folder says so (a full
    disk or a kill half way leaves it refused, not taken for the older export it partly replaced)."""
    meta = {key: value for key, value in meta.items() if key != "sha256"}  # a converted folder's digests: not these
    with disk.writing(folder, "the exported model"):
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, UNFINISHED), "w"):
            pass
        if export_format == "saved_model":
            serving.export_saved_model(classifier, folder, meta.get("labels"), meta["text_columns"],
                                       bool(meta.get("regression")), meta)
        else:
            classifier.save_to_preset(folder)
            with open(os.path.join(folder, META), "w") as f:
                json.dump({**meta, "sha256": _digests(folder)}, f, indent=2)
        os.remove(os.path.join(folder, UNFINISHED))


def export(model, folder: str, format: str = "saved_model", labels=None, text_columns=("text",),
           regression: bool = False) -> str:
    """Exports a keras-hub text classifier, or a folder written by `glue --export_dir`, to `folder`.

    `format="saved_model"`: a TensorFlow SavedModel whose `serving_default` signature takes one batch of raw
    strings per text column and returns `label`, `probabilities` and `label_names` (or `score` for a regression),
    tokenizing in its graph: `tf.saved_model.load`, `saved_model_cli` and TensorFlow Serving use it without keras-hub
    or tf_transfer (BERT and DistilBERT presets). `format="preset"`: a keras-hub preset folder that
    `python -m tf_transfer.predict` and `keras_hub.models.TextClassifier.from_preset` load.

    Args:
        model: a keras-hub `TextClassifier` with its preprocessor (e.g. `BertTextClassifier`), or the path of a
            folder exported by `glue --export_dir` (its labels and columns are then its own).
        folder: where to write.
        format: `"saved_model"` or `"preset"`.
        labels: the class names in the order of the classifier's outputs (default: `"0"`, `"1"`, ...).
        text_columns: the names of the texts the classifier reads, one or two (a pair): the signature's inputs.
        regression: the classifier's one output is a score (`score` in the signature).

    Returns:
        `folder`.

    Examples:

    >>> import tf_transfer
    >>> tf_transfer.export(classifier, "served/sst2", labels=["negative", "positive"],
    ...                    text_columns=["sentence"])  # doctest: +SKIP
    'served/sst2'
    >>> tf_transfer.export("exported/rte", "served/rte")  # a folder written by glue --export_dir  # doctest: +SKIP
    'served/rte'
    """
    serving.check_format(format)
    if isinstance(model, (str, os.PathLike)):
        if not read_meta(str(model)):
            raise TransferError(f"{model}: no {META} beside the model (exported before it was written): export the "
                                "run again with --export_dir")
        model, meta = load(str(model))
    else:
        meta = {"labels": None if labels is None else list(labels), "regression": bool(regression),
                "text_columns": list(text_columns), "pair": len(text_columns) > 1}
    check_exportable(model.backbone, format)
    _write(model, str(folder), meta, format)
    return str(folder)


def _digests(folder: str) -> dict:
    """`{file: SHA-256}` of every file keras-hub wrote in `folder` (weights, configs, `assets/` vocabulary; paths
    relative to it), checked whenever the folder is read (`read_meta`)."""
    names = sorted(os.path.relpath(os.path.join(root, name), folder)
                   for root, _, files in os.walk(folder) for name in files)
    return {name: disk.file_sha256(os.path.join(folder, name)) for name in names if name not in (META, UNFINISHED)}


def read_meta(folder: str) -> dict:
    """`tf_transfer_task.json` of an exported folder (`{}` for a folder exported before it was written), without
    loading the model; `TransferError` for a folder that holds no exported classifier."""
    if os.path.exists(os.path.join(folder, UNFINISHED)):
        raise TransferError(f"{folder} holds an export that did not finish (a full disk or a stopped process): export "
                            "the run again")
    if serving.is_saved_model(folder):
        return serving.read_meta(folder)
    if not os.path.isfile(os.path.join(folder, "task.json")):
        raise TransferError(f"{folder} is not an exported classifier (no task.json, no saved_model.pb): export one "
                            "with --export_dir")
    meta_path = os.path.join(folder, META)
    if not os.path.isfile(meta_path):
        return {}
    try:
        with open(meta_path) as f:
            meta = json.load(f)
    except ValueError as e:
        raise TransferError(f"{meta_path} is unreadable ({type(e).__name__}: {e}): export the run again") from None
    for name, digest in (meta.get("sha256") or {}).items():  # folders exported before digests were kept: none
        path = os.path.join(folder, name)
        why = ("is missing" if not os.path.isfile(path) else
               "does not match the SHA-256 recorded when it was exported (damaged or changed since)"
               if disk.file_sha256(path) != digest else None)
        if why:
            raise TransferError(f"{path} {why}: the exported model is not used; export the run again "
                                "(python -m tf_transfer.glue with the run's flags and --export_dir)")
    return meta


def load(folder: str, meta: Optional[dict] = None):
    """Returns `(classifier, meta)` from an exported folder; `meta`: what `read_meta` returned for it already (its
    files checked), else it is read and checked here."""
    import keras_hub

    meta = read_meta(folder) if meta is None else meta
    return keras_hub.models.TextClassifier.from_preset(folder), meta


def load_scorer(folder: str, meta: Optional[dict] = None) -> tuple:
    """`(score, meta)` of the model exported to `folder` (either format; `meta` as `load`'s), loaded:
    `score(text_a, text_b, batch_size, progress, padding)` returns `(values, predictions)` in the rows' order, each
    row's probabilities (a column of scores for a regression) and its label (or score). `padding` is how a preset
    folder's classifier lays out its rows (`predict`); a SavedModel pads each batch to its longest row
    (`serving.predict`)."""
    if serving.is_saved_model(folder):
        serve, meta = serving.load(folder)
        return (lambda text_a, text_b, batch_size, progress, padding: serving.predict(
            serve, meta, text_a, text_b, batch_size, progress)), meta
    classifier, meta = load(folder, meta)

    def score(text_a, text_b, batch_size, progress, padding):
        outputs, predictions = predict(classifier, meta, text_a, text_b, batch_size, progress, padding=padding)
        return (outputs if meta.get("regression") else probabilities(outputs)), predictions

    return score, meta


def probabilities(logits: np.ndarray) -> np.ndarray:
    """Softmax of each row of logits (the exported classifier's outputs), computed stably."""
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


# How `predict` lays out rows: `bucket` pads each group of similar length to its group's length; `pack` lays the
# rows of a batch end to end (`tf_transfer.data.packing`), each seeing only itself.
PREDICT_PADDINGS = ("bucket", "pack")
# Rows tokenized at a time when packing: each is padded to the full length first, so a whole file at once would hold
# rows x sequence_length ids.
PACK_CHUNK_ROWS = 4096


def trained_padding(meta: dict) -> str:
    """How `predict` scores with an exported classifier by default: packed where its run trained packed (the same
    function on fewer tokens), else bucketed (folders exported before the padding was recorded included).

    >>> trained_padding({"padding": "pack"}), trained_padding({"padding": "fixed"}), trained_padding({})
    ('pack', 'bucket', 'bucket')
    """
    return "pack" if meta.get("padding") == "pack" else "bucket"


def check_padding(padding: str) -> str:
    """`padding` when `predict` knows it, else a `TransferError` naming the ones it knows.

    >>> check_padding("pack")
    'pack'
    """
    if padding not in PREDICT_PADDINGS:
        raise TransferError(f"--padding={padding}: predict scores with one of {', '.join(PREDICT_PADDINGS)}")
    return padding


def predict(classifier, meta: dict, text_a: list, text_b: Optional[list] = None, batch_size: int = 64,
            progress=None, bucket_step: int = 16, padding: str = "bucket"):
    """Returns `(outputs, predictions)` in the rows' order: raw logits or scores, and label values (or scores for
    regression). `progress(rows done)` is called after every batch.

    `padding="bucket"`: rows are scored in groups of similar length, each packed only to its group's length (the
    next multiple of `bucket_step` above its longest row, at most the exported `sequence_length`): padding is masked
    out of attention, so a row's outputs do not change, but short texts no longer pay for the full length (a file
    of short texts scores several times faster). `padding="pack"`: each batch of `batch_size` rows is laid end to
    end in rows of the exported `sequence_length` (`packed_classifier`; widths in multiples of `packing.ROW_STEP`,
    not of `bucket_step`), which computes the same outputs on fewer tokens (up to float32 rounding:
    tests/models/test_export.py).
    """
    if check_padding(padding) == "pack":
        outputs = _predict_packed(classifier, text_a, text_b, batch_size, progress)
    else:
        outputs = _predict_bucketed(classifier, text_a, text_b, batch_size, progress, bucket_step)
    if meta.get("regression"):
        return outputs, outputs[:, 0]
    indices = outputs.argmax(axis=-1)
    labels = meta.get("labels")
    return outputs, [labels[i] for i in indices] if labels else indices.tolist()


def _predict_bucketed(classifier, text_a: list, text_b: Optional[list], batch_size: int, progress, bucket_step: int):
    preprocessor = classifier.preprocessor
    full = preprocessor.sequence_length
    lengths = _packed_lengths(preprocessor.tokenizer, text_a, text_b)
    buckets = np.minimum(-(-lengths // bucket_step) * bucket_step, full)
    outputs, done = None, 0
    try:
        for length in sorted(set(buckets.tolist())):
            rows = np.flatnonzero(buckets == length)
            preprocessor.sequence_length = int(length)
            part = _predict_rows(classifier, [text_a[i] for i in rows],
                                 None if text_b is None else [text_b[i] for i in rows], batch_size, progress, done)
            if outputs is None:
                outputs = np.zeros((len(text_a), part.shape[1]), part.dtype)
            outputs[rows] = part
            done += len(rows)
    finally:
        preprocessor.sequence_length = full
    return outputs


def packed_classifier(classifier):
    """The packed model (`tf_transfer.models.packed`) of an exported keras-hub classifier: its backbone's layers on
    packed rows, then the classifier's own head (its `pooled_dense` where the family has no pooler, its `logits`),
    weights shared or copied, in inference mode the same function as `classifier`.

    >>> model = packed_classifier(export.load("exported/")[0])  # doctest: +SKIP
    >>> logits = model(packing_features)  # one row per example  # doctest: +SKIP
    """
    from tf_transfer.models import heads, packed

    backbone, logits = classifier.backbone, classifier.get_layer("logits")
    head = heads.pooled_head(int(logits.units), 0.0, backbone)
    head.build((None, backbone.hidden_dim))
    if head.hidden is not None:
        head.hidden.set_weights(classifier.get_layer("pooled_dense").get_weights())
    head.dense.set_weights(logits.get_weights())
    return packed.build_classifier(backbone, head)


def _predict_packed(classifier, text_a: list, text_b: Optional[list], batch_size: int, progress):
    """The rows' outputs from `packed_classifier`: tokenized by the classifier's preprocessor in chunks of
    `PACK_CHUNK_ROWS`, each chunk's rows sorted by length into batches of `batch_size`, packed, scored, and put
    back in the rows' order."""
    import keras
    import tensorflow as tf

    model = packed_classifier(classifier)
    input_names = families.of(classifier.backbone).inputs
    outputs = np.zeros((len(text_a), int(model.output.shape[-1])), np.float32)
    for start in range(0, len(text_a), PACK_CHUNK_ROWS):
        stop = min(start + PACK_CHUNK_ROWS, len(text_a))
        x = (tf.constant(text_a[start:stop]) if text_b is None
             else (tf.constant(text_a[start:stop]), tf.constant(text_b[start:stop])))
        features = {name: np.asarray(value, np.int32) for name, value in classifier.preprocessor(x=x).items()}
        token_ids = features["token_ids"]
        segment_ids = features.get("segment_ids", np.zeros_like(token_ids))
        lengths = features["padding_mask"].sum(axis=1).astype(np.int32)
        encoded = inputs.Encoded(token_ids, segment_ids, lengths, np.zeros(len(lengths), np.int32),
                                 input_names=input_names)
        plan = inputs.plan_eval_batches(lengths, batch_size, "pack")
        callbacks = []
        if progress is not None:
            done = np.cumsum([len(indices) for indices in plan]) + start
            callbacks = [keras.callbacks.LambdaCallback(on_predict_batch_end=lambda batch, logs, done=done: progress(
                int(done[batch])))]
        scored = inputs.predict(model, inputs.to_dataset(encoded, plan, "pack", packing.ROW_STEP, with_labels=False),
                                callbacks)
        outputs[start + np.concatenate(plan)] = scored
    return outputs


def _packed_lengths(tokenizer, text_a: list, text_b: Optional[list], chunk: int = 4096) -> np.ndarray:
    """Each row's tokens plus room for the family's special tokens (4 covers every family's pair packing)."""
    import tensorflow as tf

    def counts(texts: list) -> np.ndarray:
        tokens = tokenizer(tf.constant(texts))  # ragged, or (keras-hub outside a graph) lists of ids
        if hasattr(tokens, "row_lengths"):
            return tokens.row_lengths().numpy()
        return np.array([len(row) for row in tokens], dtype=np.int64)

    lengths = [sum(counts(texts[start:start + chunk]) for texts in ([text_a] if text_b is None else [text_a, text_b]))
               + 4 for start in range(0, len(text_a), chunk)]
    return np.concatenate(lengths) if lengths else np.zeros(0, np.int64)


def _predict_rows(classifier, text_a: list, text_b: Optional[list], batch_size: int, progress, before: int):
    """The rows' outputs, packed by the classifier's preprocessor at its current length, then scored by Keras'
    own `predict` on those features: keras-hub's `predict` maps the preprocessor over the data each call, which
    costs seconds a call to trace."""
    import keras
    import tensorflow as tf

    x = tf.constant(text_a) if text_b is None else (tf.constant(text_a), tf.constant(text_b))
    # By keyword: a pair given positionally is read as (texts, labels), which packed the first sentences alone.
    features = classifier.preprocessor(x=x)
    dataset = inputs.prefetched(tf.data.Dataset.from_tensor_slices(features).batch(batch_size),
                                -(-len(text_a) // batch_size))
    callbacks = []
    if progress is not None:
        callbacks = [keras.callbacks.LambdaCallback(on_predict_batch_end=lambda batch, logs: progress(
            before + min((batch + 1) * batch_size, len(text_a))))]
    return np.asarray(keras.Model.predict(classifier, dataset, verbose=0, callbacks=callbacks))
