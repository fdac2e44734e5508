"""Training methods beside freezing: LoRA as in its paper, and BitFit. Each decides which backbone weights train.

`freeze` (the default) is `tf_transfer.models.freezing`: the last k blocks and the pooler train, nothing else.

`lora` (Hu et al. 2021, arXiv 2106.09685) trains a rank-r update of each targeted weight matrix and nothing else of
the blocks: h = W x + b + (alpha / r) B A x, with B (r, d_out) zero, so that the first step computes what the
pretrained model computes, and A (d_in, r) drawn as the LoRA authors' loralib and Hugging Face PEFT's default draw it:
Kaiming-uniform with a = sqrt(5), i.e. uniform in +-1 / sqrt(d_in) (std 0.03 at d_in = 384, whatever the rank);
`lora_init="gaussian"` draws A from N(0, 1 / r) instead (PEFT's "gaussian", this project's only choice before
2026-11-25: 4.2x larger at r = 8, so a rate searched under one does not carry over to the other). A kernel
of several axes (BERT's query: hidden x heads x head_dim) is seen as the matrix (hidden, heads * head_dim), as the
paper and PEFT see Wq; keras-hub's `enable_lora` factorizes per head instead (A: hidden x heads x r), which trains
six times the weights on all-MiniLM-L6 (docs/methods.md). The update is computed from the activations (x A, then
B), as PEFT does, so no gradient of the frozen W is ever formed. With `trainable_layers=k` only the last k blocks
get adapters (the rest can be cached); the pooler and the head train in full.

`bitfit` (Ben Zaken et al. 2021, arXiv 2106.10199) trains the bias terms of the blocks in scope (and of the
embeddings' and pooler's layers when every block is in scope): every dense layer's bias and every LayerNorm's beta
(the BitFit code trains every parameter named "bias", LayerNorm's included); `bitfit_layer_norm` adds the
LayerNorms' gamma. The head trains in full.

Example (all-MiniLM-L6-v2, r=8 on query and value: 6 blocks x 2 targets x (384 + 384) x 8 = 73,728 weights):

>>> from tf_transfer.models import methods
>>> methods.lora_weight_count(hidden=384, layers=6, rank=8, targets=("query", "value"))
73728
>>> methods.apply(backbone, "lora", trainable_layers="all", lora_rank=8)  # doctest: +SKIP
"""

from __future__ import annotations

import math
import re
from typing import Sequence

from tf_transfer.core.errors import TransferError
from tf_transfer.models import freezing

# Freezing decided during training (`tf_transfer.models.freeze_schedules`): what trains at the start is the freezing
# rule's, and a growing prefix freezes as the run goes.
ADAPTIVE = ("autofreeze", "freezeout")
METHODS = ("freeze", "lora", "bitfit") + ADAPTIVE

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


def check_method(method: str, lora_targets: Sequence[str]) -> None:
    if method not in METHODS:
        raise TransferError(f"--method={method!r} is not a training method: use one of {', '.join(METHODS)}")
    unknown = [t for t in lora_targets if t not in LORA_TARGETS]
    if unknown:
        raise TransferError(f"--lora_targets: {unknown[0]!r} is not a LoRA target: use some of "
                            f"{', '.join(LORA_TARGETS)}")


def apply(backbone, method: str, trainable_layers=freezing.ALL, lora_rank: int = 8, lora_alpha: float = 8.0,
          lora_targets: Sequence[str] = DEFAULT_TARGETS, bitfit_layer_norm: bool = False,
          lora_init: str = LORA_INITS[0]) -> None:
    """Sets what trains in `backbone` for `method` (in place; LoRA's variables are created here, so call it inside
    the strategy's scope, after the pretrained weights are loaded and before the model is compiled)."""
    check_method(method, lora_targets)
    freezing.set_trainable_layers(backbone, trainable_layers)
    if method == "freeze" or method in ADAPTIVE:
        return
    blocks = _blocks_in_scope(backbone, trainable_layers, method)
    if method == "lora":
        layers = [_target(backbone, block, target) for block in blocks for target in lora_targets]
        for block in blocks:
            _freeze_weights_of(block)
        for layer in layers:
            enable_lora(layer, lora_rank, lora_alpha, lora_init)
        if trainable_layers == freezing.ALL:  # the embeddings train only under the freezing rule's "all"
            for layer in backbone.layers:
                if freezing.block_of(backbone, layer) == "embeddings":
                    layer.trainable = False
        return
    _bitfit(backbone, blocks, trainable_layers == freezing.ALL, bitfit_layer_norm)


def _blocks_in_scope(backbone, trainable_layers, method: str) -> list:
    blocks = list(backbone.transformer_layers)
    if trainable_layers == 0:
        raise TransferError(f"--method={method} with --trainable_layers=0 trains nothing of the blocks (only the "
                            "pooler and head, which --method=freeze --trainable_layers=0 trains): give k >= 1 or "
                            "'all'")
    return blocks if trainable_layers == freezing.ALL else blocks[len(blocks) - trainable_layers:]


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


def _bitfit(backbone, blocks: list, everything: bool, layer_norm: bool) -> None:
    wanted = ("bias", "beta") + (("gamma",) if layer_norm else ())
    # Outside the blocks: the pooler's bias always, the embeddings' LayerNorm only when every block trains (the
    # freezing rule has already frozen the embeddings otherwise).
    in_scope = list(blocks) + [layer for layer in backbone.layers
                               if freezing.block_of(backbone, layer) in (("pooler", "embeddings") if everything
                                                                         else ("pooler",))]
    count = 0
    for layer in in_scope:
        layer.trainable = True
        for variable in layer.weights:
            variable.trainable = variable.name in wanted
            count += math.prod(variable.shape) if variable.trainable else 0
    if not count:
        raise TransferError(f"--method=bitfit: {type(backbone).__name__} has no bias terms in the blocks it would "
                            "train: use --method=freeze or lora")


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
