"""`--method=freeze`, the default: the freezing rule alone (`tf_transfer.models.freezing`): the last k blocks and the
pooler train in full, nothing else of the backbone; `trainable_layers="all"` is full fine-tuning.

Example:

>>> from tf_transfer.models import methods
>>> methods.get("freeze").backward_passes  # the weights' gradients as well as the activations'
2
"""

from __future__ import annotations

from tf_transfer.models import freezing
from tf_transfer.models.methods.registry import Method, register

# The sweep's learning rates (LoRA's and BitFit's papers train 10-100x above full fine-tuning).
FULL_RATES = (2e-5, 1e-4)
PARTIAL_RATES = (1e-4, 1e-3)


@register
class Freeze(Method):
    name = "freeze"
    title = "freezing"
    help = "the last --trainable_layers blocks and the pooler"
    color = "tab:blue"

    def apply(self, backbone, options, trainable_layers) -> None:
        pass  # the freezing rule, already applied, is the whole method

    def run_name_part(self, settings) -> str:
        return ""

    def sweep_candidates(self, num_layers: int, options: dict) -> list:
        """Full fine-tuning, and the last 1, 2 and L/2 blocks over the frozen-prefix cache."""
        depths = sorted({k for k in (1, 2, num_layers // 2) if 1 <= k < num_layers})
        return [({"trainable_layers": freezing.ALL}, FULL_RATES)] + [
            ({"trainable_layers": k, "cache_frozen": True}, PARTIAL_RATES) for k in depths]
