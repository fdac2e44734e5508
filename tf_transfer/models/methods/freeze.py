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

# The sweep's candidates, one rate each: the first-run benchmark's search (reports/first_run: 6,000-row files, the
# sweep's protocol) found full fine-tuning at 5e-5 within 0.2 points of its best searched rate on every file, and put
# the last 2 over the cache at 3e-4 and the last 3 (of 6) at 1e-4 on the score/time front; the last block alone and
# the rate 1e-3 were below them in the sweeps on its files (benchmarks/LOG.md). `--lrs` gives every candidate others.
FULL_RATE = 5e-5
TWO_BLOCKS_RATE = 3e-4
HALF_RATE = 1e-4


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
        """Full fine-tuning, and the last 2 and L/2 blocks over the frozen-prefix cache (the last block alone where
        the encoder has no other depth)."""
        rates = {num_layers // 2: HALF_RATE, 2: TWO_BLOCKS_RATE}
        depths = sorted(k for k in rates if 1 <= k < num_layers) or ([1] if num_layers > 1 else [])
        return [({"trainable_layers": freezing.ALL}, (FULL_RATE,))] + [
            ({"trainable_layers": k, "cache_frozen": True}, (rates.get(k, TWO_BLOCKS_RATE),)) for k in depths]
