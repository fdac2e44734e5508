"""What trains in a user's own keras-hub model: the freezing rule and the training methods of the commands, applied
to a text classifier (`keras_hub.models.BertTextClassifier` and the other families' classifiers) or a backbone,
with plain keyword arguments. `import tf_transfer` exports these functions (docs/python.md).

Example:

>>> import tf_transfer
>>> tf_transfer.freeze(classifier, trainable_layers=2)  # doctest: +SKIP
>>> print(tf_transfer.parameter_table(classifier))  # doctest: +SKIP
"""

from __future__ import annotations

from tf_transfer.core import settings as settings_lib
from tf_transfer.core.errors import TransferError
from tf_transfer.models import freezing, methods

# The method last applied to a backbone, for `merge`: Keras layers take new attributes.
_METHOD_ATTRIBUTE = "_tf_transfer_method"


class ParameterTable(list):
    """Rows `(part, trainable, total)` (embeddings, block_0.., pooler, head, total), printed as the commands print
    them."""

    @property
    def trainable(self) -> int:
        """The model's trainable parameters (the table's last row)."""
        return self[-1][1]

    def __str__(self) -> str:
        return freezing.format_table(self)


def backbone_of(model):
    """The encoder of `model`: the model itself when it is a backbone, else its `backbone` attribute (keras-hub's
    tasks) or its one sub-layer with encoder blocks (a functional classifier built around a backbone).

    Args:
      model: a keras-hub text classifier, a backbone, or a Keras model that holds one.

    Raises:
      TransferError: `model` holds no encoder with `transformer_layers`.

    Examples:

    >>> import keras_hub
    >>> from tf_transfer.models import user_model
    >>> backbone = keras_hub.models.BertBackbone(vocabulary_size=30, num_layers=2, num_heads=2, hidden_dim=8,
    ...                                          intermediate_dim=16, max_sequence_length=16)
    >>> user_model.backbone_of(backbone) is backbone
    True
    """
    if hasattr(model, "transformer_layers"):
        return model
    if hasattr(getattr(model, "backbone", None), "transformer_layers"):
        return model.backbone
    found = [layer for layer in getattr(model, "layers", []) if hasattr(layer, "transformer_layers")]
    if len(found) == 1:
        return found[0]
    raise TransferError(f"{type(model).__name__} holds no keras-hub encoder backbone (a model with "
                        "`transformer_layers`, as BERT, RoBERTa, DistilBERT, ELECTRA and DeBERTa-v3 have): pass a "
                        "keras-hub text classifier or backbone")


def freeze(model, trainable_layers=2):
    """Freezes the embeddings and every encoder block but the last `trainable_layers`, as the commands'
    `--trainable_layers` does (the pooler and a classifier's head train; `"all"` trains everything). Keras reads what
    trains when `fit` first runs after `compile`: call it before `compile` (or compile again).

    Args:
      model: a keras-hub text classifier or backbone (BERT, RoBERTa, DistilBERT, ELECTRA, DeBERTa-v3).
      trainable_layers: how many of the top encoder blocks train, 0..L, or `"all"`.

    Returns:
      The model's `parameter_table` after freezing.

    Raises:
      TransferError: `trainable_layers` is not 0..L or `"all"` (the message names the backbone's depth).

    Examples:

    >>> import keras_hub, tf_transfer
    >>> backbone = keras_hub.models.BertBackbone(vocabulary_size=30, num_layers=3, num_heads=2, hidden_dim=8,
    ...                                          intermediate_dim=16, max_sequence_length=16)
    >>> [row[1] > 0 for row in tf_transfer.freeze(backbone, trainable_layers=1)[:5]]
    [False, False, False, True, True]
    >>> tf_transfer.freeze(backbone, trainable_layers=4)
    Traceback (most recent call last):
    ...
    tf_transfer.core.errors.TransferError: --trainable_layers=4 exceeds the backbone's 3 encoder blocks: use 0..3 or 'all'
    """
    return apply_method(model, "freeze", trainable_layers)


def apply_method(model, method: str, trainable_layers="all", **options):
    """Sets what trains in `model` by a training method of the registry (`freeze`, `lora`, `bitfit`, or any method
    registered), as the commands' `--method` does: the freezing rule's scope of `trainable_layers` first, then the
    method within it. A method's options are its settings, with or without its prefix (`rank=8` or `lora_rank=8`).
    Call it before `compile`; LoRA adds its weights (the paper's A and B, not keras-hub's `enable_lora`).
    AutoFreeze and FreezeOut decide while training: use the `AutoFreeze` and `FreezeOut` callbacks.

    Args:
      model: a keras-hub text classifier or backbone.
      method: the method's name (`tf_transfer.methods()` lists them).
      trainable_layers: the blocks in the method's scope: the last k, or `"all"`.
      **options: the method's settings, e.g. `rank`, `alpha`, `targets`, `init` for `"lora"`, `layer_norm` for
        `"bitfit"`.

    Returns:
      The model's `parameter_table` afterwards.

    Raises:
      TransferError: an unknown method or option, an option out of its range, or a scope the method cannot use.

    Examples:

    >>> import keras_hub, tf_transfer
    >>> backbone = keras_hub.models.BertBackbone(vocabulary_size=30, num_layers=2, num_heads=2, hidden_dim=8,
    ...                                          intermediate_dim=16, max_sequence_length=16)
    >>> table = tf_transfer.apply_method(backbone, "lora", rank=2)
    >>> table[1]  # block_0: LoRA's A and B on query and value, 2 x 2 x (8 + 8)
    ('block_0', 64, 664)
    >>> tf_transfer.apply_method(backbone, "prompt")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tf_transfer.core.errors.TransferError: --method must be one of freeze, lora, bitfit, ..., got 'prompt'
    """
    settings_lib.check("method", method, methods.registry.name_check())
    chosen = methods.get(method)
    if chosen.trainer is not None:
        raise TransferError(f"--method={method} decides what trains while training: pass "
                            f"tf_transfer.{chosen.title.replace(' ', '')}() to fit's callbacks instead")
    backbone = backbone_of(model)
    trainable_layers = freezing.parse_trainable_layers(trainable_layers)
    model.trainable = True  # what a previous call froze, the head included, is the rule's to set again
    methods.apply(backbone, method, trainable_layers, **method_settings(method, options))
    setattr(backbone, _METHOD_ATTRIBUTE, method)
    shuffle_texts_each_epoch(model)
    return parameter_table(model)


def shuffle_texts_each_epoch(model) -> None:
    """Makes `model.fit` on raw texts (a list, array or pandas Series, or a tuple of two for sentence pairs, with
    labels) shuffle them each epoch, in an order from Keras' global seed (`keras.utils.set_random_seed`), as Keras'
    `fit` does for arrays. keras-hub's classifiers turn raw texts into a `tf.data.Dataset` in the order given, which
    Keras never shuffles (and then warns that `shuffle=True` is ignored, a default the user did not pass): every
    epoch would see the same order. Other inputs, `sample_weight` and `validation_split` go to the model's own `fit`
    unchanged. `apply_method` and `freeze` call it on a model with a preprocessor; calling it again does nothing."""
    if getattr(model, "preprocessor", None) is None or getattr(model, _SHUFFLING_ATTRIBUTE, False):
        return
    own_fit = model.fit

    def fit(x=None, y=None, batch_size=None, epochs=1, shuffle=True, **kwargs):
        if y is None or not _raw_texts(x) or {"sample_weight", "validation_split"} & set(kwargs):
            return own_fit(x, y, batch_size=batch_size, epochs=epochs, shuffle=shuffle, **kwargs)
        batches = text_batches(x, y, batch_size or 32, shuffle)
        return own_fit(batches, epochs=epochs, shuffle=False, **kwargs)  # the batches are shuffled: no warning

    model.fit = fit
    setattr(model, _SHUFFLING_ATTRIBUTE, True)


_SHUFFLING_ATTRIBUTE = "_tf_transfer_shuffles_texts"


def text_batches(x, y, batch_size: int, shuffle: bool = True):
    """A `tf.data.Dataset` of `(texts, labels)` batches of raw texts `x` (a tuple of two for sentence pairs),
    reshuffled each time it is iterated (each epoch of `fit`) when `shuffle`; seeded by Keras' global seed."""
    import numpy as np
    import tensorflow as tf

    texts = tuple(np.asarray(part, dtype=object).astype(str) for part in x) if isinstance(x, tuple) \
        else np.asarray(x, dtype=object).astype(str)
    dataset = tf.data.Dataset.from_tensor_slices((texts, np.asarray(y)))
    if shuffle:
        dataset = dataset.shuffle(len(y), reshuffle_each_iteration=True)
    return dataset.batch(batch_size)


def _raw_texts(x) -> bool:
    """Texts as a list, array or pandas Series of strings, or a tuple of two of those (sentence pairs)."""
    import numpy as np

    parts = x if isinstance(x, tuple) and len(x) == 2 else (x,)
    for part in parts:
        if not isinstance(part, (list, np.ndarray)) and type(part).__name__ != "Series":
            return False
        if len(part) == 0 or not isinstance(part[0] if not hasattr(part, "iloc") else part.iloc[0], str):
            return False
    return True


def method_settings(method: str, options: dict) -> dict:
    """`options` of `method` under the names of its settings (`rank` -> `lora_rank`), checked as the commands check
    them: what `apply_method` takes as keyword arguments, and `compare` in each setting's dict.

    Args:
      method: a method's name (`tf_transfer.methods()`).
      options: its settings, with or without the method's prefix.

    Returns:
      `{setting: value}`, e.g. `{"lora_rank": 8}`.

    Raises:
      TransferError: an unknown method, an option it does not have, or a value out of its range.

    Examples:

    >>> from tf_transfer.models import user_model
    >>> user_model.method_settings("lora", {"rank": 8, "lora_alpha": 16.0})
    {'lora_rank': 8, 'lora_alpha': 16.0}
    >>> user_model.method_settings("bitfit", {"rank": 8})
    Traceback (most recent call last):
    ...
    tf_transfer.core.errors.TransferError: --method=bitfit has no setting 'rank': its settings are bitfit_layer_norm
    """
    settings_lib.check("method", method, methods.registry.name_check())
    chosen = methods.get(method)
    named = {}
    for name, value in options.items():
        field = name if name in chosen.settings else f"{chosen.name}_{name}"
        if field not in chosen.settings:
            known = ", ".join(chosen.settings) or "none"
            raise TransferError(f"--method={chosen.name} has no setting {name!r}: its settings are {known}")
        if isinstance(value, (list, str)) and chosen.settings[field][0] is tuple:
            value = tuple(value.split(",")) if isinstance(value, str) else tuple(value)
        named[field] = value
    chosen.options(named)  # checked as its config checks them
    return named


def merge(model) -> None:
    """Makes the trained model a plain keras-hub model again, in place, for export (`model.save`,
    `save_to_preset`): LoRA's updates folded into their kernels; nothing to do for freezing and BitFit.

    Args:
      model: a model `apply_method` (or `freeze`) set up, after training.

    Examples:

    >>> import keras_hub, tf_transfer
    >>> backbone = keras_hub.models.BertBackbone(vocabulary_size=30, num_layers=2, num_heads=2, hidden_dim=8,
    ...                                          intermediate_dim=16, max_sequence_length=16)
    >>> _ = tf_transfer.apply_method(backbone, "lora", rank=2)
    >>> tf_transfer.merge(backbone)
    """
    backbone = backbone_of(model)
    methods.get(getattr(backbone, _METHOD_ATTRIBUTE, methods.DEFAULT)).merge_for_export(backbone)


def parameter_table(model) -> ParameterTable:
    """What trains in `model`: the commands' table of trainable and total parameters per part (embeddings, each
    block, the pooler, the head), from the model's actual trainable variables.

    Args:
      model: a keras-hub text classifier or backbone.

    Returns:
      A `ParameterTable`: a list of `(part, trainable, total)` rows ending with `("total", ...)`; `str()` of it is
      the table as the commands print it, `.trainable` the trainable total.

    Examples:

    >>> import keras_hub, tf_transfer
    >>> backbone = keras_hub.models.BertBackbone(vocabulary_size=30, num_layers=2, num_heads=2, hidden_dim=8,
    ...                                          intermediate_dim=16, max_sequence_length=16)
    >>> tf_transfer.parameter_table(backbone)[-1]
    ('total', 1672, 1672)
    """
    return ParameterTable(freezing.parameter_table(model, backbone_of(model)))
