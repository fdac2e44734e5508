"""Export a trained keras-hub text classifier as a TensorFlow SavedModel that serves raw strings.

The SavedModel's `serving_default` signature takes one batch of strings per text column (named after the training
file's columns), tokenizes and packs them inside the graph with tensorflow-text ops, the way the classifier's
keras-hub preprocessor does (lower-casing, accent stripping and splitting of its WordPiece tokenizer, the same
truncation and `[CLS] a [SEP] b [SEP]` layout), runs the classifier and returns `label` (the label names as strings),
`probabilities` and `label_names` (the label order, one row per input row), or `score` for a regression. Loading it
needs TensorFlow and tensorflow-text only (`import tensorflow_text` registers the tokenizer's ops): no keras-hub,
no tf_transfer, no Keras object in the SavedModel (tensorflow_text imports Keras for layers of its own).
docs/glue.md "Serving" shows the load, `saved_model_cli` and TensorFlow Serving.

Example:

>>> from tf_transfer.models import serving
>>> serving.input_names(["sentence1", "sentence2"]), serving.input_names(["review text", "2nd"])
(['sentence1', 'sentence2'], ['review_text', 'c_2nd'])
>>> serving.export_saved_model(classifier, "served/", labels=["neg", "pos"], text_columns=["text"])  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import re
from typing import Optional, Sequence

from tf_transfer.core.errors import TransferError
from tf_transfer.models import families

SIGNATURE = "serving_default"
WORDPIECE_FAMILIES = ("bert", "distil_bert")  # `families.Family.key`s whose tokenizer `_Packer` reproduces
# Beside the SavedModel, read by no server: what tf_transfer knows of the task (its labels, columns, length).
META = "tf_transfer_task.json"
META_FOLDER = "assets.extra"  # TensorFlow Serving's place for files that are not part of the graph

# keras-hub's WordPieceTokenizer splits words on these (its `pretokenize`, in TensorFlow's RE2 syntax); copied so
# that the exported graph tokenizes as the preprocessor did without keras-hub (tests/models/test_serving.py
# compares the ids on texts with accents, punctuation, CJK, control and NUL characters and truncated pairs).
_WHITESPACE = r"\s|\p{Cc}|\p{Cf}"
_PUNCTUATION = r"[!-/]|[:-@]|[\[-`]|[{-~]|[\p{P}]"
_CJK = (r"[\x{4E00}-\x{9FFF}]|[\x{3400}-\x{4DBF}]|[\x{20000}-\x{2A6DF}]|[\x{2A700}-\x{2B73F}]|[\x{2B740}-\x{2B81F}]"
        r"|[\x{2B820}-\x{2CEAF}]|[\x{F900}-\x{FAFF}]|[\x{2F800}-\x{2FA1F}]")


# What `--export_format` writes: a keras-hub preset folder (the default; `predict` and keras-hub load it), or this
# module's SavedModel.
FORMATS = ("preset", "saved_model")


def check_format(export_format: str) -> str:
    """`export_format` when it is one of `FORMATS`, else a `TransferError` naming them.

    >>> check_format("saved_model")
    'saved_model'
    """
    if export_format not in FORMATS:
        raise TransferError(f"--export_format={export_format}: choose one of {', '.join(FORMATS)}")
    return export_format


def input_names(columns: Sequence[str]) -> list:
    """The signature's input names for the text columns: each column's name where it is a plain identifier, else
    with every other character made `_` (and `c_` before a leading digit), as TensorFlow Serving's request keys
    must be; `TransferError` when two columns would get the same name.

    >>> input_names(["question-1", "question 1"])
    Traceback (most recent call last):
    ...
    tf_transfer.core.errors.TransferError: --export_format=saved_model: the text columns question-1, question 1 \
would all be the input question_1 of the signature: rename them in the training file
    """
    names = []
    for column in columns:
        name = re.sub(r"\W", "_", str(column), flags=re.ASCII) or "text"
        names.append("c_" + name if name[0].isdigit() else name)
    for name in set(names):
        same = [str(c) for c, n in zip(columns, names) if n == name]
        if len(same) > 1:
            raise TransferError(f"--export_format=saved_model: the text columns {', '.join(same)} would all be the "
                                f"input {name} of the signature: rename them in the training file")
    return names


def check_family(family) -> None:
    """`TransferError` for an encoder family whose tokenizing the serving graph does not reproduce: it does
    WordPiece with one `[SEP]` between texts (BERT, DistilBERT)."""
    if family.key not in WORDPIECE_FAMILIES:
        raise TransferError(f"--export_format=saved_model: the SavedModel tokenizes in its graph as BERT and "
                            f"DistilBERT presets do, not as {family.name}'s: export this run with "
                            "--export_format=preset")


def check_servable(classifier) -> None:
    """`check_family`, and a `TransferError` for a tokenizer set up otherwise than keras-hub's BERT presets are
    (another WordPiece class, special tokens read inside the text)."""
    import keras_hub

    check_family(families.of(classifier.backbone))
    tokenizer = classifier.preprocessor.tokenizer
    if not isinstance(tokenizer, keras_hub.tokenizers.WordPieceTokenizer) or tokenizer.special_tokens_in_strings:
        raise TransferError("--export_format=saved_model: the tokenizer is not keras-hub's WordPiece with special "
                            "tokens kept out of the text: use --export_format=preset")


class _Packer:
    """Strings in, the backbone's inputs out, in TensorFlow and tensorflow-text ops only: keras-hub's pretokenizing,
    WordPiece (`tf_text.FastWordpieceTokenizer`, built as keras-hub builds it), the preprocessor's truncation and
    layout, padded to the batch's longest row (padding is masked out of attention, so a row's outputs do not
    depend on its batch)."""

    def __init__(self, preprocessor, input_names: tuple):
        import tensorflow_text as tf_text

        if preprocessor.packer is None:  # keras-hub makes it when the preprocessor is first built
            preprocessor.build(None)
        tokenizer, packer = preprocessor.tokenizer, preprocessor.packer
        self.tokenizer = tokenizer
        self.wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=tokenizer.get_vocabulary(), token_out_type="int32", suffix_indicator=tokenizer.suffix_indicator,
            unknown_token=tokenizer.oov_token, no_pretokenization=True, support_detokenization=False)
        self.start, self.end, self.pad = (_single(packer.start_value), _single(packer.end_value),
                                          packer.pad_value)
        self.sequence_length = int(preprocessor.sequence_length)
        self.trimmer = {"round_robin": tf_text.RoundRobinTrimmer,
                        "waterfall": tf_text.WaterfallTrimmer}[packer.truncate]
        self.input_names = input_names

    def _words(self, text):
        """keras-hub's `pretokenize` of a batch of strings: ragged words."""
        import tensorflow as tf
        import tensorflow_text as tf_text

        tokenizer = self.tokenizer
        split_on_cjk = tokenizer.split and tokenizer.split_on_cjk
        if split_on_cjk:
            text = tf.strings.regex_replace(text, _CJK, r" \0 ")
        if tokenizer.strip_accents:
            text = tf.strings.regex_replace(tf_text.normalize_utf8(text, "NFD"), r"\p{Mn}", "")
        if tokenizer.split:
            # A NUL splits words as keras-hub reads it, but would end the text in `regex_split`'s kernel.
            text = tf.strings.regex_replace(text, r"\x00", " ")
            delimiters, kept = (_WHITESPACE + "|" + _PUNCTUATION, _PUNCTUATION)
            if split_on_cjk:
                delimiters, kept = delimiters + "|" + _CJK, kept + "|" + _CJK
            words = tf_text.regex_split(text, delim_regex_pattern=delimiters, keep_delim_regex_pattern=kept)
        else:
            words = tf.RaggedTensor.from_tensor(text[:, None])
        return tf_text.case_fold_utf8(words) if tokenizer.lowercase else words

    def __call__(self, texts: list) -> dict:
        import tensorflow as tf
        import tensorflow_text as tf_text

        segments = [self.wordpiece.tokenize(self._words(text)).merge_dims(-2, -1) for text in texts]
        special = 2 + len(segments) - 1  # [CLS], a [SEP] after each text
        trimmed = self.trimmer(self.sequence_length - special).trim(segments)
        token_ids, segment_ids = tf_text.combine_segments(trimmed, self.start, self.end)
        features = {"token_ids": token_ids.to_tensor(self.pad), "segment_ids": segment_ids.to_tensor(0)}
        features["padding_mask"] = tf.sequence_mask(token_ids.row_lengths(), tf.shape(features["token_ids"])[1],
                                                    dtype=tf.int32)
        return {name: tf.cast(features[name], tf.int32) for name in self.input_names}


def _single(values) -> int:
    """The one id of a packer's start or end value (a list of one id, or the id)."""
    if isinstance(values, (list, tuple)):
        if len(values) != 1:
            raise TransferError(f"--export_format=saved_model: the packer adds {len(values)} tokens where BERT "
                                "adds one: use --export_format=preset")
        return int(values[0])
    return int(values)


def export_saved_model(classifier, folder: str, labels: Optional[Sequence] = None, text_columns: Sequence[str] = (
        "text",), regression: bool = False, meta: Optional[dict] = None) -> dict:
    """Writes `classifier` (a keras-hub TextClassifier with its preprocessor) to `folder` as a SavedModel whose
    `serving_default` takes one string input per text column (`input_names(text_columns)`) and returns `label`,
    `probabilities` and `label_names` (`labels`, or the class indices as strings), or `score` when `regression`.
    `meta` (e.g. the task's) is written with the signature's names to `assets.extra/tf_transfer_task.json`;
    returns that record."""
    import numpy as np
    import tensorflow as tf

    check_servable(classifier)
    names = input_names(text_columns)
    if len(names) not in (1, 2):
        raise TransferError(f"--export_format=saved_model: a classifier of one text or a pair, not {len(names)} "
                            "text columns")
    packer = _Packer(classifier.preprocessor, families.of(classifier.backbone).inputs)
    num_outputs = int(classifier.get_layer("logits").units)
    label_names = [str(label) for label in (labels if labels is not None else range(num_outputs))]
    if not regression and len(label_names) != num_outputs:
        raise TransferError(f"--export_format=saved_model: {len(label_names)} labels for {num_outputs} outputs")

    def serve(*texts):
        logits = tf.cast(classifier(packer(list(texts)), training=False), tf.float32)
        if regression:
            return {"score": logits[:, 0]}
        rows = tf.shape(logits)[0]
        names_tensor = tf.constant(label_names)
        return {"label": tf.gather(names_tensor, tf.argmax(logits, axis=-1)),
                "probabilities": tf.nn.softmax(logits, axis=-1),
                # The label order once per row: TensorFlow Serving's row format wants every output batched.
                "label_names": tf.tile(names_tensor[None, :], [rows, 1])}

    # A plain module holding the variables and the traced function, not the Keras model: the SavedModel then holds
    # no Keras object to restore, and saving it traces the function once (about half the time of Keras'
    # ExportArchive, which traces it again to find its variables).
    module = tf.Module()
    module.model_variables = list(classifier.variables)
    module.serve = tf.function(serve, input_signature=[tf.TensorSpec([None], tf.string, name=name)
                                                       for name in names], autograph=False)
    tf.saved_model.save(module, folder, signatures={SIGNATURE: module.serve.get_concrete_function()})
    record = {**(meta or {}), "format": "saved_model", "signature": SIGNATURE, "inputs": names, "pair": len(names) > 1,
              "text_columns": [str(c) for c in text_columns], "regression": bool(regression),
              "labels": None if regression else list(labels) if labels is not None else None,
              "max_seq_length": packer.sequence_length}
    os.makedirs(os.path.join(folder, META_FOLDER), exist_ok=True)
    with open(os.path.join(folder, META_FOLDER, META), "w") as f:
        json.dump(record, f, indent=2, default=lambda value: value.item() if isinstance(value, np.generic) else
                  str(value))
    return record


def is_saved_model(folder: str) -> bool:
    """Whether `folder` holds a SavedModel (as `export_saved_model` writes) rather than a keras-hub preset."""
    return os.path.isfile(os.path.join(folder, "saved_model.pb"))


def read_meta(folder: str) -> dict:
    """The record `export_saved_model` wrote beside the SavedModel in `folder`; `TransferError` without one."""
    path = os.path.join(folder, META_FOLDER, META)
    if not os.path.isfile(path):
        raise TransferError(f"{folder} is a SavedModel without {META_FOLDER}/{META}: tf_transfer.predict scores "
                            "SavedModels written by --export_format=saved_model; load others with "
                            "tf.saved_model.load")
    with open(path) as f:
        return json.load(f)


def load(folder: str) -> tuple:
    """`(serving_default, meta)` of the SavedModel in `folder`, loaded with TensorFlow and tensorflow-text."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops of the graph's tokenizer)

    meta = read_meta(folder)
    return tf.saved_model.load(folder).signatures[meta.get("signature", SIGNATURE)], meta


def predict(serve, meta: dict, text_a: list, text_b: Optional[list] = None, batch_size: int = 64,
            progress=None) -> tuple:
    """`(values, predictions)` of the SavedModel's `serve` (`load`) on the rows, in their order: each row's
    probabilities (or its score, a column, for a regression) and its label (or score). The rows go to the signature in batches of
    `batch_size` sorted by length, as a server is best sent them (each batch is padded to its longest row);
    `progress(rows done)` is called after every batch."""
    import numpy as np
    import tensorflow as tf

    columns = [text_a] if text_b is None else [text_a, text_b]
    order = np.argsort(sum(np.array([len(text) for text in texts]) for texts in columns), kind="stable")
    values, predictions = [None] * len(order), [None] * len(order)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        outputs = serve(**{name: tf.constant([texts[i] for i in rows]) for name, texts in zip(meta["inputs"],
                                                                                               columns)})
        if meta.get("regression"):
            batch_values = outputs["score"].numpy()[:, None]
            batch_predictions = batch_values[:, 0].tolist()
        else:
            batch_values = outputs["probabilities"].numpy()
            batch_predictions = [label.decode("utf-8") for label in outputs["label"].numpy()]
        for i, row in enumerate(rows):
            values[row], predictions[row] = batch_values[i], batch_predictions[i]
        if progress is not None:
            progress(min(start + batch_size, len(order)))
    width = 1 if meta.get("regression") else len(meta.get("labels") or [])
    return (np.stack(values) if values else np.zeros((0, width), np.float32)), predictions
