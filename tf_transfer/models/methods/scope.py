"""The scope a method works in: the blocks the freezing rule's `trainable_layers` leaves trainable, and the rule that
a method other than freezing needs at least one of them.

Example:

>>> from tf_transfer.models.methods import scope
>>> scope.blocks_in_scope(backbone, 2, "lora")  # doctest: +SKIP
[<TransformerEncoder ...>, <TransformerEncoder ...>]
"""

from __future__ import annotations

from tf_transfer.core.errors import TransferError
from tf_transfer.models import freezing


def needs_a_block(settings) -> list:
    """`check_together`'s rule for a method that trains something inside the blocks."""
    return [(settings.trainable_layers != 0,
             f"--method={settings.method} with --trainable_layers=0 trains nothing of the blocks: give k >= 1 or "
             "'all' (--method=freeze --trainable_layers=0 trains the pooler and head alone)")]


def blocks_in_scope(backbone, trainable_layers, method: str) -> list:
    """The last `trainable_layers` blocks of `backbone` (all of them for "all"); refused for 0."""
    blocks = list(backbone.transformer_layers)
    if trainable_layers == 0:
        raise TransferError(f"--method={method} with --trainable_layers=0 trains nothing of the blocks (only the "
                            "pooler and head, which --method=freeze --trainable_layers=0 trains): give k >= 1 or "
                            "'all'")
    return blocks if trainable_layers == freezing.ALL else blocks[len(blocks) - trainable_layers:]
