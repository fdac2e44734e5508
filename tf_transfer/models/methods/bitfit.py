"""`--method=bitfit` (Ben Zaken et al. 2021, arXiv 2106.10199): trains the bias terms of the blocks in scope (and of
the embeddings' and pooler's layers when every block is in scope): every dense layer's bias and every LayerNorm's
beta (the BitFit code trains every parameter named "bias", LayerNorm's included); `bitfit_layer_norm` adds the
LayerNorms' gamma. The head trains in full.

Example:

>>> from tf_transfer.models import methods
>>> methods.apply(backbone, "bitfit", trainable_layers="all", bitfit_layer_norm=True)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import math

from tf_transfer.core.errors import TransferError
from tf_transfer.core.record_schema import Field
from tf_transfer.core.settings import setting
from tf_transfer.models import freezing
import tf_transfer.models.methods.scope as scope
from tf_transfer.models.methods.registry import Method, register

RATES = (1e-3, 5e-3)  # the sweep's: BitFit's paper trains at 1e-4..1e-3 with far more steps


@dataclasses.dataclass(frozen=True, kw_only=True)
class BitFitConfig:
    """BitFit's setting, a flag of the commands that train it."""

    bitfit_layer_norm: bool = setting(False, "--method=bitfit: also train the LayerNorms' scales (gamma); their "
                                             "betas are bias terms and train anyway.")


@register
class BitFit(Method):
    name = "bitfit"
    title = "BitFit"
    help = "the bias terms of those blocks; the head"
    color = "tab:green"
    config = BitFitConfig
    backward_passes = 1  # the activations' gradients; the bias sums are not counted
    sweep_left_out = ("reports/methods_paired: it scored below LoRA r8 at the same time on both tasks (against full "
                      "fine-tuning, SST-2 -3.6 vs -1.4 points, STS-B -1.0 vs -0.7, each at 60-65% of its time)")
    record_fields = (Field("bitfit", (dict,), "with `--method=bitfit`: `{layer_norm}` (whether the LayerNorms' gains "
                           "and biases train too)", required=False),)

    def check_together(self, settings) -> list:
        return scope.needs_a_block(settings)

    def apply(self, backbone, options, trainable_layers) -> None:
        blocks = scope.blocks_in_scope(backbone, trainable_layers, self.name)
        wanted = ("bias", "beta") + (("gamma",) if options.bitfit_layer_norm else ())
        # Outside the blocks: the pooler's bias always, the embeddings' LayerNorm only when every block trains (the
        # freezing rule has already frozen the embeddings otherwise).
        outside = ("pooler", "embeddings") if trainable_layers == freezing.ALL else ("pooler",)
        in_scope = blocks + [layer for layer in backbone.layers if freezing.block_of(backbone, layer) in outside]
        count = 0
        for layer in in_scope:
            layer.trainable = True
            for variable in layer.weights:
                variable.trainable = variable.name in wanted
                count += math.prod(variable.shape) if variable.trainable else 0
        if not count:
            raise TransferError(f"--method=bitfit: {type(backbone).__name__} has no bias terms in the blocks it "
                                "would train: use --method=freeze or lora")

    def describe(self, settings) -> str:
        return ", BitFit"

    def summary_facts(self, options, backbone) -> dict:
        return {"bitfit": {"layer_norm": options.bitfit_layer_norm}}

    def run_name_part(self, settings) -> str:
        return "bitfit_"

    def sweep_candidates(self, num_layers: int, options: dict) -> list:
        return [({"method": self.name, "trainable_layers": freezing.ALL}, RATES)]
