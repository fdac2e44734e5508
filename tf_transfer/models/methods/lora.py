"""`--method=lora` (Hu et al. 2021, arXiv 2106.09685): trains a rank-r update of each targeted weight matrix and
nothing else of the blocks: h = W x + b + (alpha / r) B A x, with B (r, d_out) zero, so that the first step computes
what the pretrained model computes, and A (d_in, r) drawn as the LoRA authors' loralib and Hugging Face PEFT's default
draw it: Kaiming-uniform with a = sqrt(5), i.e. uniform in +-1 / sqrt(d_in) (std 0.03 at d_in = 384, whatever the
rank); `lora_init="gaussian"` draws A from N(0, 1 / r) instead (PEFT's "gaussian", this project's only choice before
2026-11-25: 4.2x larger at r = 8, so a rate searched under one does not carry over to the other). A kernel
of several axes (BERT's query: hidden x heads x head_dim) is seen as the matrix (hidden, heads * head_dim), as the
paper and PEFT see Wq; keras-hub's `enable_lora` factorizes per head instead (A: hidden x heads x r), which trains
six times the weights on all-MiniLM-L6 (docs/methods.md). The update is computed from the activations (x A, then
B), as PEFT does, so no gradient of the frozen W is ever formed. With `trainable_layers=k` only the last k blocks
get adapters (the rest can be cached); the pooler and the head train in full.

Example (all-MiniLM-L6-v2, r=8 on query and value: 6 blocks x 2 targets x (384 + 384) x 8 = 73,728 weights):

>>> from tf_transfer.models import methods
>>> from tf_transfer.models.methods import lora
>>> lora.lora_weight_count(hidden=384, layers=6, rank=8, targets=("query", "value"))
73728
>>> methods.apply(backbone, "lora", trainable_layers="all", lora_rank=8)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Sequence

from tf_transfer.core import settings as settings_lib
from tf_transfer.core.errors import TransferError
from tf_transfer.core.record_schema import Field, Schema
from tf_transfer.core.settings import setting
from tf_transfer.models import freezing
import tf_transfer.models.methods.scope as scope
from tf_transfer.models.methods.registry import Method, register

# Where each target sits in a block of keras-hub's encoders (TransformerEncoder, and DeBERTa-v3's
# DisentangledAttentionEncoder): (attribute of the block, attribute of that, or None).
LORA_TARGETS = {
    "query": ("_self_attention_layer", "_query_dense"),
    "key": ("_self_attention_layer", "_key_dense"),
    "value": ("_self_attention_layer", "_value_dense"),
    "attention_output": ("_self_attention_layer", "_output_dense"),
    "intermediate": ("_feedforward_intermediate_dense", None),
    "output": ("_feedforward_output_dense", None),
}
DEFAULT_TARGETS = ("query", "value")
# How A is drawn: the paper's code and PEFT's default, and PEFT's "gaussian" option.
LORA_INITS = ("kaiming_uniform", "gaussian")


def lora_weight_count(hidden: int, layers: int, rank: int, targets: Sequence[str], intermediate: int = None) -> int:
    """LoRA's trainable weights for square targets (and the feed-forward pair, given `intermediate`):
    r (d_in + d_out) per targeted matrix."""
    sizes = {"query": (hidden, hidden), "key": (hidden, hidden), "value": (hidden, hidden),
             "attention_output": (hidden, hidden), "intermediate": (hidden, intermediate),
             "output": (intermediate, hidden)}
    return layers * sum(rank * (sizes[t][0] + sizes[t][1]) for t in targets)


RATES = (5e-4, 2e-3)  # the sweep's (the paper's GLUE rates for RoBERTa-base: 4e-4..5e-4)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoraConfig:
    """LoRA's settings, each a flag of the commands that train it (Hugging Face PEFT's `LoraConfig`: r, lora_alpha,
    target_modules, init_lora_weights)."""

    lora_rank: int = setting(8, "--method=lora: the rank r of each update.")
    lora_alpha: float = setting(8.0, "--method=lora: updates are scaled by lora_alpha / lora_rank (the paper fixes "
                                     "alpha at the first rank it tries; Hugging Face PEFT's default is 8).")
    lora_targets: tuple = setting(DEFAULT_TARGETS, "--method=lora: the dense layers of each block that get an "
                                  "update, some of " + ", ".join(LORA_TARGETS) + " (the paper: query,value).")
    # Came after runs of every method were made, with another default than those runs had: recorded only for LoRA
    # runs (`only_for_method`), so that no other run's name changed.
    lora_init: str = setting(LORA_INITS[0], "--method=lora: how A is drawn: kaiming_uniform (the LoRA authors' code "
                             "and Hugging Face PEFT's default: uniform in +-1/sqrt(d_in)) or gaussian (N(0, 1/r), "
                             "PEFT's option; this project's LoRA runs before 2026-11-25). B starts at zero either "
                             "way.", older="gaussian", only_for_method=True)

    def __post_init__(self):
        object.__setattr__(self, "lora_targets", tuple(self.lora_targets))  # flags and JSON give lists
        settings_lib.check("lora_rank", self.lora_rank, (settings_lib.at_least(1), "must be at least 1"))
        settings_lib.check("lora_alpha", self.lora_alpha,
                           (settings_lib.in_range(0.0, float("inf"), low_open=True), "must be above 0"))
        settings_lib.check("lora_targets", self.lora_targets,
                           ((lambda value: bool(value) and set(value) <= set(LORA_TARGETS)),
                            "must name some of " + ", ".join(LORA_TARGETS)))
        settings_lib.check("lora_init", self.lora_init,
                           ((lambda value: value in LORA_INITS), "must be one of " + ", ".join(LORA_INITS)))


@register
class LoRA(Method):
    name = "lora"
    title = "LoRA"
    help = ("the paper's rank-r update of --lora_targets in the last --trainable_layers blocks, all by default; the "
            "pooler and head in full")
    color = "tab:orange"
    config = LoraConfig
    hparams_off = {"lora_rank": 0, "lora_init": "-"}
    backward_passes = 1  # the activations' gradients; LoRA's rank-r products are not counted
    # One rank by default: ranks 4, 8 and 16 cost the same time and scored within each other's intervals
    # (reports/methods: -2.1, -1.6 and -0.4 points against full fine-tuning); each rank adds 4 candidates to price.
    sweep_options = {"lora_ranks": (["8"], "sweep: the LoRA ranks among the candidates (the paper's 8; e.g. 4,8,16 "
                                           "for more, 4 candidates each).", int)}
    sweep_left_out = ("in the sweep checks on the first-run benchmark's four 6,000-row files (reports/first_run), "
                      "rank 8 on the last 2 blocks over the cache scored 1.7-3.7 points below the best candidate on "
                      "each, never within the recommendation's 1 point, and its 2 rates added 3-10 minutes to the "
                      "half hour an answer needs there on 2 cores")
    sweep_columns = ("lora_rank",)
    record_fields = (Field("lora", (dict,), "with `--method=lora`: `{rank, alpha, init, targets, layers, weights}` "
                           "(`init` absent in runs made before 2026-11-25, which drew A from a Gaussian)",
                           required=False, keys=Schema("lora", (
                               Field("rank", (int,), "r"), Field("alpha", (float,), "the scale's numerator"),
                               Field("init", (str,), "how A was drawn", required=False, older="gaussian"),
                               Field("targets", (list,), "the dense layers updated"),
                               Field("layers", (int,), "layers with an update"),
                               Field("weights", (int,), "LoRA's trainable weights")))),)

    def check_together(self, settings) -> list:
        return scope.needs_a_block(settings)

    def apply(self, backbone, options, trainable_layers) -> None:
        blocks = scope.blocks_in_scope(backbone, trainable_layers, self.name)
        layers = [_target(backbone, block, target) for block in blocks for target in options.lora_targets]
        for block in blocks:
            _freeze_weights_of(block)
        for layer in layers:
            enable_lora(layer, options.lora_rank, options.lora_alpha, options.lora_init)
        if trainable_layers == freezing.ALL:  # the embeddings train only under the freezing rule's "all"
            for layer in backbone.layers:
                if freezing.block_of(backbone, layer) == "embeddings":
                    layer.trainable = False

    def describe(self, settings) -> str:
        return f", LoRA r={settings.lora_rank} on {','.join(settings.lora_targets)}"

    def summary_facts(self, options, backbone) -> dict:
        layers = lora_layers(backbone)
        return {"lora": {"rank": options.lora_rank, "alpha": options.lora_alpha, "init": options.lora_init,
                         "targets": list(options.lora_targets), "layers": len(layers),
                         "weights": sum(int(l.lora_a.shape[0] + l.lora_b.shape[1]) * options.lora_rank
                                        for l in layers)}}

    def added_weights(self, summary: dict):
        return (summary.get("lora") or {}).get("weights")

    def hparams(self, settings) -> dict:
        return {"lora_rank": settings.lora_rank, "lora_init": settings.lora_init}

    def run_name_part(self, settings) -> str:
        return f"lora_r{settings.lora_rank}_"

    def table_label(self, summary: dict) -> str:
        lora = summary.get("lora")
        return f"lora r{lora['rank']} ({','.join(lora['targets'])})" if lora else self.name

    def sweep_candidates(self, num_layers: int, options: dict) -> list:
        """Each of `options["lora_ranks"]` on the last 2 blocks over the frozen-prefix cache (on every block where
        the encoder has no more). Not on every block by default: there it takes 60-65% of full fine-tuning's time
        (reports/methods_paired), and the sweep on the first-run benchmark's SST-2 file pruned it after 3 epochs
        (benchmarks/LOG.md); `tf_transfer.glue --method=lora` trains it."""
        ranks, tail = options["lora_ranks"], min(2, num_layers)
        if tail >= num_layers:
            return [({"method": self.name, "lora_rank": r, "trainable_layers": freezing.ALL}, RATES) for r in ranks]
        return [({"method": self.name, "lora_rank": r, "trainable_layers": tail, "cache_frozen": True}, RATES)
                for r in ranks]

    def candidate_tag(self, settings: dict) -> str:
        return f"{self.name}_r{settings['lora_rank']}"

    def merge_for_export(self, backbone) -> None:
        """Folds each update into its kernel (B then zero): the exported backbone is a plain one. (Saving merges
        too, `save_own_variables`; folding first makes the live model and the saved one the same weights.)"""
        for layer in lora_layers(backbone):
            layer._kernel.assign(layer.merged_kernel())
            layer.lora_b.assign(layer.lora_b * 0)


def _target(backbone, block, target: str):
    outer, inner = LORA_TARGETS[target]
    layer = getattr(block, outer, None)
    layer = getattr(layer, inner, None) if inner and layer is not None else layer
    if layer is None or not hasattr(layer, "kernel"):
        raise TransferError(f"--method=lora cannot target {target!r} in {type(backbone).__name__}'s blocks "
                            f"({type(block).__name__} has no such dense layer): use some of "
                            f"{', '.join(LORA_TARGETS)} that it has, or another --method")
    return layer


def _freeze_weights_of(block) -> None:
    block.trainable = True  # a layer that is not trainable hides every variable in it, LoRA's too
    for variable in block.weights:
        variable.trainable = False


def _lora_a_initializer(init: str, d_in: int, rank: int):
    import keras

    if init == "kaiming_uniform":
        # torch's kaiming_uniform_(a=sqrt(5)) on A's (r, d_in) weight: bound gain * sqrt(3 / fan_in) with gain
        # sqrt(2 / (1 + a^2)) = sqrt(1 / 3), i.e. 1 / sqrt(d_in) (loralib's and PEFT's LoRA layers).
        bound = 1.0 / math.sqrt(d_in)
        return keras.initializers.RandomUniform(-bound, bound)
    if init == "gaussian":
        return keras.initializers.RandomNormal(stddev=1.0 / rank)
    raise TransferError(f"--lora_init={init!r} is not a LoRA initialisation: use one of {', '.join(LORA_INITS)}")


def enable_lora(layer, rank: int, alpha: float, init: str = LORA_INITS[0]) -> None:
    """Adds the paper's LoRA to a built `Dense` or `EinsumDense` (in place): A (d_in, r) drawn by `init`, B (r, d_out)
    zero, the layer's own kernel and bias frozen. Its saved weights (`save_own_variables`, and so an exported preset)
    are the merged kernel and the bias, which a plain layer reads."""
    if getattr(layer, "quantization_mode", None):
        raise TransferError(f"--method=lora: layer {layer.name} is quantized ({layer.quantization_mode}); LoRA "
                            "here needs a float kernel")
    in_axes = _input_axes(layer)
    shape = tuple(layer.kernel.shape)
    d_in, d_out = math.prod(shape[:in_axes]), math.prod(shape[in_axes:])
    if not 1 <= rank <= min(d_in, d_out):
        raise TransferError(f"--lora_rank={rank} does not fit {layer.name}'s {d_in} x {d_out} kernel: use 1.."
                            f"{min(d_in, d_out)}")
    initializer = _lora_a_initializer(init, d_in, rank)
    layer._tracker.unlock()  # a built layer refuses new variables unless asked (as Keras' own enable_lora does)
    try:
        # float32 under mixed precision too, as Keras' own LoRA weights: small updates must not round away.
        layer.lora_a = layer.add_weight(name="lora_a", shape=(d_in, rank), trainable=True, dtype="float32",
                                        initializer=initializer)
        layer.lora_b = layer.add_weight(name="lora_b", shape=(rank, d_out), trainable=True, dtype="float32",
                                        initializer="zeros")
    finally:
        layer._tracker.lock()
    layer._kernel.trainable = False
    if layer.bias is not None:
        layer.bias.trainable = False
    layer.lora_input_axes, layer.lora_output_shape = in_axes, shape[in_axes:]
    layer.lora_scale = alpha / rank
    layer.__class__ = _lora_class(type(layer))


def _input_axes(layer) -> int:
    """How many trailing input axes the kernel contracts: 1 for `Dense`; for `EinsumDense` read from its equation,
    which must put them first in the kernel and keep the input's other axes first in the output."""
    equation = getattr(layer, "equation", None)
    if equation is None:
        return 1
    match = re.fullmatch(r"(\w+),(\w+)->(\w+)", equation.replace(" ", ""))
    if not match:
        raise TransferError(f"--method=lora cannot read {layer.name}'s equation {equation!r}")
    source, kernel, output = match.groups()
    contracted = [axis for axis in kernel if axis in source and axis not in output]
    leading = source[: len(source) - len(contracted)]
    if (kernel[: len(contracted)] != "".join(contracted) or not source.endswith("".join(contracted))
            or output != leading + kernel[len(contracted):]):
        raise TransferError(f"--method=lora cannot target {layer.name}: its equation {equation!r} is not a matrix "
                            "product over the input's last axes")
    return len(contracted)


_CLASSES = {}


def _lora_class(base):
    if base not in _CLASSES:
        _CLASSES[base] = type(f"LoRA{base.__name__}", (_LoRAMixin, base), {})
    return _CLASSES[base]


class _LoRAMixin:
    """The forward pass and saving of a `Dense`/`EinsumDense` with the paper's LoRA (see `enable_lora`)."""

    def call(self, inputs, training=None):
        from keras import ops

        kernel = self._kernel
        if getattr(self, "equation", None):
            outputs = ops.einsum(self.equation, inputs, kernel)
        else:
            outputs = ops.matmul(inputs, kernel)
        if self.bias is not None:
            outputs = ops.add(outputs, self.bias)
        outputs = ops.add(outputs, self.lora_update(inputs))
        return self.activation(outputs) if self.activation is not None else outputs

    def lora_update(self, inputs):
        """(alpha / r) B A x, shaped as the layer's output."""
        from keras import ops

        shape = ops.shape(inputs)
        leading = shape[: len(shape) - self.lora_input_axes]
        flat = ops.reshape(inputs, (-1, self.lora_a.shape[0]))
        update = ops.matmul(ops.matmul(flat, self.lora_a), self.lora_b) * self.lora_scale
        return ops.reshape(update, (*leading, *self.lora_output_shape))

    def merged_kernel(self):
        from keras import ops

        update = ops.matmul(self.lora_a, self.lora_b) * self.lora_scale
        return ops.add(self._kernel, ops.cast(ops.reshape(update, self._kernel.shape), self._kernel.dtype))

    def save_own_variables(self, store):
        # What a plain layer holds: the merged kernel, then the bias, so that a saved or exported model needs no
        # LoRA to be read and computes what the trained one computes.
        store["0"] = self.merged_kernel()
        if self.bias is not None:
            store["1"] = self.bias

    def load_own_variables(self, store):
        self._kernel.assign(store["0"])
        if self.bias is not None:
            self.bias.assign(store["1"])
        self.lora_b.assign(self.lora_b * 0)  # the loaded kernel already holds any update


def lora_layers(backbone) -> list:
    """The layers of `backbone` that carry LoRA."""
    return [layer for layer in backbone._flatten_layers(include_self=False) if isinstance(layer, _LoRAMixin)]
