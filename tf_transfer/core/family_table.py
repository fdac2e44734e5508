"""The encoder families a run can train, as a table: what differs between BERT, RoBERTa, DistilBERT, ELECTRA and
DeBERTa-v3 once keras-hub has loaded them (the inputs a backbone takes, how a pair of texts is packed, where the head
reads), one row per keras-hub backbone class. Pure data, read by the data layer (packing) and the models layer
(`tf_transfer.models.families`, which builds on it).

Example:

>>> from tf_transfer.core import family_table
>>> family_table.FAMILIES["RobertaBackbone"].inputs, family_table.FAMILIES["RobertaBackbone"].pair_separator
(('token_ids', 'padding_mask'), 2)
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from tf_transfer.core.errors import TransferError

WITH_SEGMENTS = ("token_ids", "segment_ids", "padding_mask")
WITHOUT_SEGMENTS = ("token_ids", "padding_mask")


@dataclasses.dataclass(frozen=True)
class Family:
    """What one encoder family does differently.

    key: short name used in messages and options (keras-hub's folder name).
    name: the family's usual spelling.
    inputs: the backbone's inputs; the feeds give a model exactly these (no `segment_ids` where it takes none).
    pair_separator: how many end tokens stand between the two texts of a pair: 1 gives `[CLS] a [SEP] b [SEP]`,
      2 RoBERTa's `<s> a </s></s> b </s>`.
    pooler: the head reads the backbone's `pooled_output` (its `pooled_dense` over the first token); False: the
      head reads the first token's vector of the sequence output.
    head_hidden: without a pooler, keras-hub's TextClassifier puts a dense layer of the hidden width with this
      activation between that vector and the logits; the head does the same (`heads.PooledHead`).
    head_hidden_dropout: that classifier also applies dropout before its dense layer.
    relative_embeddings: the layer whose output every block takes besides the hidden states (DeBERTa-v3's shared
      relative-position table), or None.
    embeddings_output: the layers that can end the embeddings (the first present is the input of block 0).
    classifier: keras-hub's TextClassifier class of the family, which `--export_dir` saves; None where keras-hub
      has none.
    """

    key: str
    name: str
    inputs: tuple
    pair_separator: int = 1
    pooler: bool = False
    head_hidden: Optional[str] = None
    head_hidden_dropout: bool = False
    relative_embeddings: Optional[str] = None
    embeddings_output: tuple = ("embeddings_dropout",)
    classifier: Optional[str] = None


# keras-hub backbone class -> family. ELECTRA's backbone has a `pooled_dense`, but the pretrained discriminators
# carry no pooler weights (keras-hub's conversion leaves it at its random initialisation, and keras-hub has no ELECTRA
# classifier): it is trained with the head, a fresh dense tanh layer over the first token like RoBERTa's head.
FAMILIES = {
    "BertBackbone": Family("bert", "BERT", WITH_SEGMENTS, pooler=True, classifier="BertTextClassifier"),
    "ElectraBackbone": Family("electra", "ELECTRA", WITH_SEGMENTS, pooler=True,
                              embeddings_output=("embeddings_projection", "embeddings_dropout")),
    "RobertaBackbone": Family("roberta", "RoBERTa", WITHOUT_SEGMENTS, pair_separator=2, head_hidden="tanh",
                              head_hidden_dropout=True, classifier="RobertaTextClassifier"),
    "DistilBertBackbone": Family("distil_bert", "DistilBERT", WITHOUT_SEGMENTS, head_hidden="relu",
                                 classifier="DistilBertTextClassifier"),
    "DebertaV3Backbone": Family("deberta_v3", "DeBERTa-v3", WITHOUT_SEGMENTS, head_hidden="gelu",
                                head_hidden_dropout=True, relative_embeddings="rel_embedding",
                                classifier="DebertaV3TextClassifier"),
}
BERT = FAMILIES["BertBackbone"]


def names() -> str:
    return ", ".join(f"{f.name} ({cls})" for cls, f in FAMILIES.items())


def of_class(backbone_class, preset: str = "") -> Family:
    """The family of a keras-hub backbone class (or of its nearest listed parent); `TransferError` otherwise."""
    for cls in backbone_class.__mro__:
        if cls.__name__ in FAMILIES:
            return FAMILIES[cls.__name__]
    what = f"preset {preset!r} holds" if preset else "this is"
    raise TransferError(f"{what} a {backbone_class.__name__}, not an encoder whose blocks can be frozen one by one "
                        f"(keras-hub `transformer_layers`): use a preset of {names()}")


def of(backbone) -> Family:
    return of_class(type(backbone))


def of_tokenizer(tokenizer) -> Family:
    """The family of a keras-hub tokenizer (its `backbone_cls`); BERT's for a tokenizer that names none."""
    backbone_class = getattr(tokenizer, "backbone_cls", None)
    return BERT if backbone_class is None else of_class(backbone_class)


def require(family: Family, supported: tuple, preset: str, purpose: str) -> None:
    """`TransferError` unless `family` is one of the `supported` keys (for the studies built on BERT only)."""
    if family.key not in supported:
        allowed = ", ".join(f.name for f in FAMILIES.values() if f.key in supported)
        raise TransferError(f"--preset={preset} is a {family.name} encoder; {purpose} supports {allowed} presets only")
