"""The encoder families a run can train, as data: what differs between BERT, RoBERTa, DistilBERT, ELECTRA and
DeBERTa-v3 once keras-hub has loaded them.

Every family exposes `backbone.transformer_layers`, so the freezing rule, the parameter table, layer-wise learning
rates and the frozen-prefix cache treat them alike. What differs is kept in `FAMILIES` (`tf_transfer.core.family_table`,
re-exported here), one row per keras-hub backbone class (a subclass, e.g. XLM-RoBERTa's, takes its parent's row):
the inputs the backbone takes, how a pair of texts is packed, and where the vector the head reads comes from,
copied from keras-hub's own `*TextClassifierPreprocessor` and `*TextClassifier` of the family; this module applies
them to a built backbone.

Example:

>>> from tf_transfer.models import families
>>> families.FAMILIES["RobertaBackbone"].inputs
('token_ids', 'padding_mask')
>>> families.of(backbone).name  # doctest: +SKIP
'RoBERTa'
"""

from __future__ import annotations

from tf_transfer.core.family_table import (BERT, FAMILIES, WITH_SEGMENTS, WITHOUT_SEGMENTS, Family, names, of,
                                       of_class, of_tokenizer, require)

__all__ = ["BERT", "FAMILIES", "WITH_SEGMENTS", "WITHOUT_SEGMENTS", "Family", "names", "of", "of_class",
           "of_tokenizer", "require", "sentence_vector", "embeddings_output", "run_blocks"]


def sentence_vector(family: Family, outputs):
    """The vector the head reads from the backbone's outputs: `pooled_output`, or the first token's vector of the
    sequence output (a tensor, or `sequence_output` of a dict)."""
    if family.pooler:
        return outputs["pooled_output"]
    sequence = outputs["sequence_output"] if isinstance(outputs, dict) else outputs
    return sequence[:, 0, :]


def embeddings_output(backbone):
    """The output of the embeddings: the hidden states block 0 takes (after ELECTRA's projection, if any)."""
    present = {layer.name for layer in backbone.layers}
    name = next(n for n in of(backbone).embeddings_output if n in present)
    return backbone.get_layer(name).output


def run_blocks(backbone, blocks, hidden, padding_mask=None, attention_mask=None):
    """Applies `blocks` (some of `backbone.transformer_layers`) to `hidden` as the backbone does, masked by a
    `padding_mask` `[batch, length]` or an `attention_mask` `[batch, length, length]` (packed rows): DeBERTa-v3's
    blocks also take the shared relative-position table, which depends on the batch size only."""
    family = of(backbone)
    extra = {}
    if family.relative_embeddings:
        extra["rel_embeddings"] = backbone.get_layer(family.relative_embeddings)(hidden)
    for block in blocks:
        hidden = block(hidden, padding_mask=padding_mask, attention_mask=attention_mask, **extra)
    return hidden
