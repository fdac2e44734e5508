"""A run's model from its settings: the backbone and tokenizer `ModelSettings` name, from either source.

A preset (a keras-hub name, a handle, a local folder or an installed package: `backbones.load_preset`) or a
TensorFlow 1 checkpoint with its `bert_config.json` and `vocab.txt` (`tf1_checkpoint.load_tf1_bert`); either way
the dropout override applied and the blocks to train checked against the depth loaded.
"""

from __future__ import annotations

from typing import Optional

from absl import logging

from tf_transfer.core.setting_groups import ModelSettings
from tf_transfer.models import backbones, freezing, tf1_checkpoint


def load_model(model: ModelSettings, supported: Optional[tuple] = None,
               purpose: str = "") -> backbones.LoadedPreset:
    """The backbone and tokenizer of a run's model settings (`settings.model`): a preset (`backbones.load_preset`), or a
    TensorFlow 1 checkpoint with its config and vocabulary (`--init_checkpoint`), with `model.dropout` applied and
    `model.trainable_layers` checked against the backbone's depth (one error line for a k it does not have).
    Every study loads its model here.

    Example:

    >>> from tf_transfer.core.setting_groups import ModelSettings
    >>> from tf_transfer.models import loader
    >>> loaded = loader.load_model(ModelSettings(preset="all_minilm_l6_v2_en", trainable_layers=2))  # doctest: +SKIP
    >>> loaded.backbone.num_layers  # doctest: +SKIP
    6
    """
    check_depth(model)
    if model.init_checkpoint:
        loaded = tf1_checkpoint.load_tf1_bert(model.init_checkpoint, model.bert_config_file, model.vocab_file,
                                              dropout=model.dropout)
    else:
        loaded = backbones.load_preset(model.preset, model.dropout, supported, purpose)
    freezing.check_trainable_layers(model.trainable_layers, loaded.backbone.num_layers)
    if not loaded.announced:  # offline, the fallback's one line said where the weights came from
        logging.info("preset %s: weights from %s", model.weights, loaded.source)
    return loaded


def check_depth(model: ModelSettings) -> None:
    """`model.trainable_layers` checked against the depth the model's config file gives (a preset folder's or an
    installed package's `config.json`, a TF1 checkpoint's `bert_config.json`), before any weight is read: a k the
    model does not have is refused in a moment, not after the model has loaded. Nothing is checked where no local
    config says (a hub preset): `load_model` checks the depth it loaded."""
    if model.init_checkpoint:
        depth = backbones.config_depth(model.bert_config_file) if model.bert_config_file else None
    else:
        depth = backbones.preset_depth(model.preset)
    if depth is not None and isinstance(model.trainable_layers, int):  # "all" fits any depth; None: decided later
        freezing.check_trainable_layers(model.trainable_layers, depth)
