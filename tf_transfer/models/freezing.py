"""Which variables train: the per-block freezing rule and the parameter table.

`trainable_layers=k` freezes the embeddings and encoder blocks 0..L-k-1 and trains blocks L-k..L-1 and the pooler
(the head is trained by whoever builds it); `k=0` trains only the pooler; `"all"` trains everything, embeddings
included. The rule is the same for every encoder family (`tf_transfer.models.families`): the blocks are
`backbone.transformer_layers`, the pooler is the backbone's `pooled_dense` (BERT, ELECTRA; RoBERTa, DistilBERT and
DeBERTa-v3 have none, their head's dense layer is the head's), and everything else counts as embeddings (DeBERTa-v3's
relative-position table included). Keras reads `trainable` when a model is compiled: set it first, then compile.

Example:

>>> from tf_transfer.models import freezing
>>> freezing.set_trainable_layers(backbone, 2)  # doctest: +SKIP
>>> print(freezing.format_table(freezing.parameter_table(model, backbone)))  # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Union

from tf_transfer.core.errors import TransferError

ALL = "all"
TrainableLayers = Union[int, str]

# The pooler's name in keras-hub's BERT and ELECTRA backbones; every other sub-layer that is not a block is part of
# the embeddings.
POOLER = "pooled_dense"


def parse_trainable_layers(value) -> TrainableLayers:
    """`"all"` or a non-negative integer; anything else raises `TransferError`."""
    if isinstance(value, int):
        number = value
    elif str(value).strip().lower() == ALL:
        return ALL
    else:
        try:
            number = int(str(value).strip())
        except ValueError:
            raise TransferError(f"--trainable_layers must be 'all' or a whole number >= 0, got {value!r}") from None
    if number < 0:
        raise TransferError(f"--trainable_layers must be 'all' or a whole number >= 0, got {value!r}")
    return number


def check_trainable_layers(trainable_layers: TrainableLayers, num_layers: int) -> None:
    if trainable_layers != ALL and trainable_layers > num_layers:
        raise TransferError(
            f"--trainable_layers={trainable_layers} exceeds the backbone's {num_layers} encoder blocks: "
            f"use 0..{num_layers} or 'all'"
        )


def set_trainable_layers(backbone, trainable_layers: TrainableLayers) -> None:
    """Applies the freezing rule to `backbone` (a keras-hub encoder with `transformer_layers`) in place."""
    blocks = list(backbone.transformer_layers)
    check_trainable_layers(trainable_layers, len(blocks))
    backbone.trainable = True
    first_trained = 0 if trainable_layers == ALL else len(blocks) - trainable_layers
    block_ids = {id(block): i for i, block in enumerate(blocks)}
    for layer in backbone.layers:
        if id(layer) in block_ids:
            layer.trainable = block_ids[id(layer)] >= first_trained
        elif layer.name == POOLER:
            layer.trainable = True
        else:  # embeddings, their layer norm, and weightless layers
            layer.trainable = trainable_layers == ALL


def trainability(model) -> tuple:
    """What trains in `model` now: every layer's and every variable's `trainable`, for `set_trainability`. A
    method's choice within trained layers (LoRA's frozen kernels, BitFit's frozen matrices) is on the variables, and
    Keras resets every variable below a layer whose `trainable` is set: freezing and unfreezing the backbone loses it.
    """
    layers = model._flatten_layers(include_self=True, recursive=True)  # parents before their sub-layers
    return [(layer, layer.trainable) for layer in layers], [(v, v.trainable) for v in model.weights]


def set_trainability(state: tuple) -> None:
    """Puts back what `trainability` saw: the layers' flags (parents first, as each resets those below it), then
    the variables'."""
    layers, variables = state
    for layer, trainable in layers:
        layer.trainable = trainable
    for variable, trainable in variables:
        variable.trainable = trainable


def block_of(backbone, layer) -> str:
    """The row of the parameter table that `layer` (a direct sub-layer of the backbone) belongs to."""
    blocks = list(backbone.transformer_layers)
    for i, block in enumerate(blocks):
        if layer is block:
            return f"block_{i}"
    return "pooler" if layer.name == POOLER else "embeddings"


def parameter_table(model, backbone) -> list:
    """Rows `(part, trainable, total)`: embeddings, block_0..block_{L-1}, pooler, head, then "total".

    Counts are of the model's actual trainable variables, so the table shows what the optimizer will update.
    """
    trainable_ids = {id(v) for v in model.trainable_variables}
    order = ["embeddings"] + [f"block_{i}" for i in range(len(backbone.transformer_layers))] + ["pooler", "head"]
    rows = {name: [0, 0] for name in order}
    seen = set()
    for layer in backbone.layers:
        part = block_of(backbone, layer)
        for variable in layer.weights:
            if id(variable) in seen:
                continue
            seen.add(id(variable))
            size = math.prod(variable.shape)
            rows[part][1] += size
            rows[part][0] += size if id(variable) in trainable_ids else 0
    for variable in model.weights:
        if id(variable) in seen:
            continue
        seen.add(id(variable))
        size = math.prod(variable.shape)
        rows["head"][1] += size
        rows["head"][0] += size if id(variable) in trainable_ids else 0
    table = [(name, rows[name][0], rows[name][1]) for name in order]
    table.append(("total", sum(r[1] for r in table), sum(r[2] for r in table)))
    return table


def format_table(table) -> str:
    lines = [f"{'part':<12}{'trainable':>14}{'total':>14}"]
    lines += [f"{name:<12}{trainable:>14,}{total:>14,}" for name, trainable, total in table]
    return "\n".join(lines)
