"""Task heads for stack-and-finetune (arXiv 1907.05338), and the models that put one on a BERT backbone.

Every head is a small registered Keras layer with He (Kaiming) initialised kernels and dropout (0.1 in the paper)
on its input and before its output layer, and returns float32 logits:

  * `linear`: one dense layer on [CLS] (BERT's pooled output), or on every token when tagging.
  * `mlp`: a ReLU dense layer of `units`, then the output layer; on [CLS], or per token when tagging.
  * `bilstm`: a bidirectional LSTM over the token outputs; per token when tagging, else masked max-pooled.
  * `cnn`: the paper's DenseNet over the token outputs: four dense blocks of four 1-D convolutions (inside a block
    each convolution sees the concatenation of the block's input and every earlier convolution's output), joined
    by 1x1 transition convolutions; the last block's output is max-pooled and concatenated with [CLS]. Not for
    tagging.
  * `highway_lstm`: two stacked bidirectional LSTMs joined by highway connections (a learned gate mixes each
    layer's output with a linear projection of its input).
  * `transformer`: one more `keras_hub.layers.TransformerEncoder` block over the token outputs; per token when
    tagging, else its [CLS] position.
  * `bimpm` (pairs): BiMPM-style multi-perspective matching between the two sentences' token outputs (full,
    max-pooling, attentive and max-attentive matching, both directions, shared perspective weights), aggregated
    by a BiLSTM whose final states of both sentences feed a ReLU layer and the output layer.
  * `sim_transformer` (pairs): the same matching layer, its output projected and fed to a transformer block
    instead of the BiLSTM, max-pooled per sentence.

Pair heads see the two sentences encoded separately by the same (shared) backbone; every other head sees one
packed sequence (`[CLS] a [SEP] b [SEP]` for pairs).

Example:

>>> from tf_transfer.models import stack_heads
>>> head = stack_heads.make_head("bimpm", num_outputs=2, units=128, perspectives=20)  # doctest: +SKIP
>>> model = stack_heads.build_model(backbone, head, pair=True)  # doctest: +SKIP
>>> logits = model({"token_ids_a": ids_a, "segment_ids_a": seg_a, "padding_mask_a": mask_a,
...                 "token_ids_b": ids_b, "segment_ids_b": seg_b, "padding_mask_b": mask_b})  # doctest: +SKIP
"""

from __future__ import annotations

import keras
import keras_hub
from keras import ops

from tf_transfer.models.pooling import masked_mean

PACKAGE = "tf_transfer.stack"
# The paper: "The DenseNet structure contains four independent blocks and each block has four CNNs connected by
# residual" (read as DenseNet's dense blocks: shortcut connections only inside a block); the kernel is our choice.
CNN_BLOCKS = 4
CNN_LAYERS_PER_BLOCK = 4
CNN_KERNEL = 3
HIGHWAY_LAYERS = 2
HIGHWAY_GATE_BIAS = -1.0  # starts each gate leaning towards carrying the input through, as highway networks do
MATCHING_STRATEGIES = 4  # full, max-pooling, attentive, max-attentive
EPSILON = 1e-6


def _he():
    return keras.initializers.HeNormal()


def _mask(mask):
    return ops.cast(mask, "bool")


def masked_max(sequence, mask):
    """Max over time of the positions where `mask` is true (padding never wins)."""
    very_negative = ops.full_like(sequence, -1e9)
    return ops.max(ops.where(ops.expand_dims(_mask(mask), -1), sequence, very_negative), axis=1)



def transformer_heads(width: int) -> int:
    """Attention heads for a block of `width`: 4 where they divide it (every BERT and MiniLM size), else fewer."""
    return next(h for h in (4, 2, 1) if width % h == 0)


class _Head(keras.layers.Layer):
    """Settings every head shares; `tagging` heads return logits per token, the others one row per example."""

    def __init__(self, num_outputs: int, tagging: bool = False, units: int = 128, dropout: float = 0.1, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.num_outputs, self.tagging, self.units, self.dropout_rate = num_outputs, tagging, units, dropout
        # Every sublayer is given the head's policy (float32 unless told): sublayers take the global policy
        # otherwise, and under mixed precision the head would compute and return 16-bit logits.
        self.input_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.output_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.logits = keras.layers.Dense(num_outputs, kernel_initializer=_he(), dtype=self.dtype_policy,
                                         name="logits")

    def get_config(self):
        return {**super().get_config(), "num_outputs": self.num_outputs, "tagging": self.tagging,
                "units": self.units, "dropout": self.dropout_rate}

    def output_layer(self, features, training):
        return self.logits(self.output_dropout(features, training=training))

    def build(self, input_shape):
        # Sub-layers are built here with known widths, so that a saved model's weights have places to load into.
        features_width = self.build_layers(input_shape)
        self.logits.build((None, features_width))
        self.built = True

    def build_layers(self, input_shape) -> int:
        """Builds the layers before the output layer; returns the width of the features it receives."""
        raise NotImplementedError

    def _features_shape(self, input_shape):
        return input_shape["sequence"] if self.tagging else input_shape["pooled"]


@keras.saving.register_keras_serializable(package=PACKAGE)
class LinearHead(_Head):
    def build_layers(self, input_shape) -> int:
        return self._features_shape(input_shape)[-1]

    def call(self, inputs, training=None):
        features = inputs["sequence"] if self.tagging else inputs["pooled"]
        return self.output_layer(self.input_dropout(features, training=training), training)


@keras.saving.register_keras_serializable(package=PACKAGE)
class MLPHead(_Head):
    def __init__(self, num_outputs: int, tagging: bool = False, units: int = 128, dropout: float = 0.1, **kwargs):
        super().__init__(num_outputs, tagging, units, dropout, **kwargs)
        self.hidden = keras.layers.Dense(units, activation="relu", kernel_initializer=_he(), dtype=self.dtype_policy,
                                         name="hidden")

    def build_layers(self, input_shape) -> int:
        self.hidden.build(self._features_shape(input_shape))
        return self.units

    def call(self, inputs, training=None):
        features = inputs["sequence"] if self.tagging else inputs["pooled"]
        hidden = self.hidden(self.input_dropout(features, training=training))
        return self.output_layer(hidden, training)


def _bilstm(units: int, name: str, dtype, return_sequences: bool = True):
    # He init on the input kernels; recurrent kernels keep Keras' orthogonal init, which keeps the recurrence stable.
    return keras.layers.Bidirectional(
        keras.layers.LSTM(units, return_sequences=return_sequences, kernel_initializer=_he(), dtype=dtype),
        dtype=dtype, name=name)


@keras.saving.register_keras_serializable(package=PACKAGE)
class BiLSTMHead(_Head):
    def __init__(self, num_outputs: int, tagging: bool = False, units: int = 128, dropout: float = 0.1, **kwargs):
        super().__init__(num_outputs, tagging, units, dropout, **kwargs)
        self.bilstm = _bilstm(units, "bilstm", self.dtype_policy)

    def build_layers(self, input_shape) -> int:
        self.bilstm.build(input_shape["sequence"])
        return 2 * self.units

    def call(self, inputs, training=None):
        mask = _mask(inputs["mask"])
        states = self.bilstm(self.input_dropout(inputs["sequence"], training=training), mask=mask, training=training)
        return self.output_layer(states if self.tagging else masked_max(states, mask), training)


@keras.saving.register_keras_serializable(package=PACKAGE)
class DenseCNNHead(_Head):
    """DenseNet (Huang et al. 2017) on BERT's token outputs, as the paper describes it: `CNN_BLOCKS` dense blocks in
    sequence, each of `CNN_LAYERS_PER_BLOCK` ReLU convolutions of `units` filters (kernel `CNN_KERNEL`). Inside a
    block, convolution i convolves the concatenation of the block's input and the outputs of convolutions 1..i-1
    (DenseNet's connectivity; the paper: "connected by residual"); a block's output is that concatenation with the
    last convolution's output added. Between blocks a transition (a ReLU 1x1 convolution to `units` channels, without
    DenseNet's pooling, so that every position keeps its padding mask) makes the next block's input; the blocks share
    no shortcut, hence "independent". The last block's output, max-pooled over the real tokens, is concatenated with
    [CLS] for prediction. Padding is zeroed before each convolution so that it cannot leak into the real positions'
    receptive fields."""

    def __init__(self, num_outputs: int, tagging: bool = False, units: int = 128, dropout: float = 0.1, **kwargs):
        if tagging:
            raise ValueError("the cnn head classifies whole sequences; it has no per-token output")
        super().__init__(num_outputs, tagging, units, dropout, **kwargs)
        self.blocks = [[keras.layers.Conv1D(units, CNN_KERNEL, padding="same", activation="relu",
                                            kernel_initializer=_he(), dtype=self.dtype_policy,
                                            name=f"block{b}_conv{i}")
                        for i in range(CNN_LAYERS_PER_BLOCK)]
                       for b in range(CNN_BLOCKS)]
        self.transitions = [keras.layers.Conv1D(units, 1, activation="relu", kernel_initializer=_he(),
                                                dtype=self.dtype_policy, name=f"transition{b}")
                            for b in range(CNN_BLOCKS - 1)]

    def _block_output_width(self, input_width: int) -> int:
        return input_width + CNN_LAYERS_PER_BLOCK * self.units

    def build_layers(self, input_shape) -> int:
        width = input_shape["sequence"][-1]
        for b, block in enumerate(self.blocks):
            for i, convolution in enumerate(block):
                convolution.build((None, None, width + i * self.units))
            width = self._block_output_width(width)
            if b < len(self.transitions):
                self.transitions[b].build((None, None, width))
                width = self.units
        return width + input_shape["pooled"][-1]

    def call(self, inputs, training=None):
        keep = ops.expand_dims(ops.cast(inputs["mask"], "float32"), -1)
        states = self.input_dropout(inputs["sequence"], training=training) * keep
        for b, block in enumerate(self.blocks):
            features = [states]
            for convolution in block:
                features.append(convolution(ops.concatenate(features, axis=-1)) * keep)
            states = ops.concatenate(features, axis=-1)
            if b < len(self.transitions):
                states = self.transitions[b](states) * keep
        pooled = masked_max(states, inputs["mask"])
        return self.output_layer(ops.concatenate([pooled, inputs["pooled"]], axis=-1), training)


@keras.saving.register_keras_serializable(package=PACKAGE)
class HighwayLSTMHead(_Head):
    """`HIGHWAY_LAYERS` BiLSTMs; between layers `h' = g * bilstm(h) + (1 - g) * W h` with `g = sigmoid(V h + b)`."""

    def __init__(self, num_outputs: int, tagging: bool = False, units: int = 128, dropout: float = 0.1, **kwargs):
        super().__init__(num_outputs, tagging, units, dropout, **kwargs)
        self.layers_ = [_bilstm(units, f"bilstm_{i}", self.dtype_policy) for i in range(HIGHWAY_LAYERS)]
        self.carries = [keras.layers.Dense(2 * units, use_bias=False, kernel_initializer=_he(),
                                           dtype=self.dtype_policy, name=f"carry_{i}")
                        for i in range(HIGHWAY_LAYERS)]
        self.gates = [keras.layers.Dense(2 * units, activation="sigmoid", kernel_initializer=_he(),
                                         bias_initializer=keras.initializers.Constant(HIGHWAY_GATE_BIAS),
                                         dtype=self.dtype_policy, name=f"gate_{i}") for i in range(HIGHWAY_LAYERS)]

    def build_layers(self, input_shape) -> int:
        shape = input_shape["sequence"]
        for bilstm, carry, gate in zip(self.layers_, self.carries, self.gates):
            for layer in (bilstm, carry, gate):
                layer.build(shape)
            shape = (None, None, 2 * self.units)
        return 2 * self.units

    def call(self, inputs, training=None):
        mask = _mask(inputs["mask"])
        states = self.input_dropout(inputs["sequence"], training=training)
        for bilstm, carry, gate in zip(self.layers_, self.carries, self.gates):
            transformed = bilstm(states, mask=mask, training=training)
            g = gate(states)
            states = g * transformed + (1.0 - g) * carry(states)
        return self.output_layer(states if self.tagging else masked_max(states, mask), training)


@keras.saving.register_keras_serializable(package=PACKAGE)
class TransformerHead(_Head):
    """One extra transformer block (feed-forward width 4 x `units`) on top of BERT's token outputs."""

    def build_layers(self, input_shape) -> int:
        # The block's width is the backbone's, known only now; so is the number of heads that divides it.
        width = input_shape["sequence"][-1]
        self.block = keras_hub.layers.TransformerEncoder(
            intermediate_dim=4 * self.units, num_heads=transformer_heads(width), dropout=self.dropout_rate,
            kernel_initializer=_he(), dtype=self.dtype_policy, name="block")
        self.block.build(input_shape["sequence"])
        return width

    def call(self, inputs, training=None):
        states = self.block(self.input_dropout(inputs["sequence"], training=training),
                            padding_mask=_mask(inputs["mask"]), training=training)
        return self.output_layer(states if self.tagging else states[:, 0, :], training)


@keras.saving.register_keras_serializable(package=PACKAGE)
class MultiPerspectiveMatching(keras.layers.Layer):
    """BiMPM's matching layer over two sequences of token vectors; returns `[batch, len_a, 4 * perspectives]`.

    For each position i of `a`, four strategies each give `perspectives` weighted cosines
    `cos(w_k * a_i, w_k * v)` (one weight vector `w_k` per perspective and strategy), where v is:
      * full: the masked mean of `b` (BERT's token outputs are already contextual, so no BiMPM context LSTM);
      * max-pooling: every b_j, keeping the largest cosine per perspective;
      * attentive: the mean of `b` weighted by softmax(cos(a_i, b_j)) (a softmax rather than BiMPM's division by
        the sum of cosines, which can be close to zero);
      * max-attentive: the b_j most similar to a_i.
    """

    def __init__(self, perspectives: int = 20, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.perspectives = perspectives

    def build(self, input_shape):
        width = input_shape[0][-1]
        self.perspective_weights = self.add_weight(name="perspective_weights", initializer=_he(),
                                                   shape=(MATCHING_STRATEGIES, self.perspectives, width))
        self.built = True

    def get_config(self):
        return {**super().get_config(), "perspectives": self.perspectives}

    # cos(w * x, w * y) = sum(x y w^2) / sqrt(sum(x^2 w^2) sum(y^2 w^2)): every sum over the width is a matmul with
    # w^2, so only the max-pooling strategy materialises a [batch, len_a, perspectives, width] tensor, once.

    @staticmethod
    def _norms(x, squared_w):
        """`[B, T, P]`: |w_k * x_t| for every position and perspective."""
        return ops.sqrt(ops.maximum(ops.matmul(x * x, ops.transpose(squared_w)), EPSILON))

    def _cosine_aligned(self, a, v, w):
        """`[B, Ta, P]`: weighted cosines between a_i and a vector v_i aligned with it (`v` is `[B, Ta, H]`)."""
        squared_w = w * w
        dots = ops.matmul(a * v, ops.transpose(squared_w))
        return dots / (self._norms(a, squared_w) * self._norms(v, squared_w) + EPSILON)

    def _max_cosine(self, a, b, mask_b, w):
        """`[B, Ta, P]`: for every a_i and perspective, the largest weighted cosine with any real b_j."""
        squared_w = w * w
        batch, length_a = ops.shape(a)[0], ops.shape(a)[1]
        scaled_a = ops.reshape(ops.expand_dims(a, 2) * squared_w, (batch, -1, ops.shape(a)[2]))  # [B, Ta*P, H]
        dots = ops.reshape(ops.matmul(scaled_a, ops.transpose(b, (0, 2, 1))),
                           (batch, length_a, self.perspectives, -1))  # [B, Ta, P, Tb]
        norms_a = ops.expand_dims(self._norms(a, squared_w), -1)  # [B, Ta, P, 1]
        norms_b = ops.expand_dims(ops.transpose(self._norms(b, squared_w), (0, 2, 1)), 1)  # [B, 1, P, Tb]
        cosines = dots / (norms_a * norms_b + EPSILON)
        padding = ops.expand_dims(ops.expand_dims(1.0 - mask_b, 1), 1)  # [B, 1, 1, Tb]
        return ops.max(cosines - 3.0 * padding, axis=-1)  # cosines are >= -1, so padding never wins

    def call(self, inputs):
        a, mask_a, b, mask_b = inputs
        mask_a, mask_b = ops.cast(mask_a, "float32"), ops.cast(mask_b, "float32")
        length_a = ops.shape(a)[1]
        full_w, max_w, attentive_w, max_attentive_w = (self.perspective_weights[i]
                                                       for i in range(MATCHING_STRATEGIES))

        sentence_b = ops.expand_dims(masked_mean(b, mask_b), 1)
        full = self._cosine_aligned(a, ops.repeat(sentence_b, length_a, axis=1), full_w)

        max_pooled = self._max_cosine(a, b, mask_b, max_w)

        unit_a = a / (ops.norm(a, axis=-1, keepdims=True) + EPSILON)
        unit_b = b / (ops.norm(b, axis=-1, keepdims=True) + EPSILON)
        similarity = ops.einsum("bih,bjh->bij", unit_a, unit_b) - 1e9 * ops.expand_dims(1.0 - mask_b, 1)
        attended = ops.einsum("bij,bjh->bih", ops.softmax(similarity, axis=-1), b)
        attentive = self._cosine_aligned(a, attended, attentive_w)
        most_similar = ops.one_hot(ops.argmax(similarity, axis=-1), ops.shape(b)[1], dtype=b.dtype)
        max_attentive = self._cosine_aligned(a, ops.einsum("bij,bjh->bih", most_similar, b), max_attentive_w)

        matched = ops.concatenate([full, max_pooled, attentive, max_attentive], axis=-1)
        return matched * ops.expand_dims(mask_a, -1)


class _PairHead(_Head):
    """Matches a against b and b against a with one `MultiPerspectiveMatching`, aggregates each side with the same
    `aggregate`, and classifies the concatenation through a ReLU layer of `units`."""

    def __init__(self, num_outputs: int, tagging: bool = False, units: int = 128, dropout: float = 0.1,
                 perspectives: int = 20, **kwargs):
        if tagging:
            raise ValueError("pair heads classify sentence pairs; they have no per-token output")
        super().__init__(num_outputs, tagging, units, dropout, **kwargs)
        self.perspectives = perspectives
        self.matching = MultiPerspectiveMatching(perspectives, dtype=self.dtype_policy, name="matching")
        self.hidden = keras.layers.Dense(units, activation="relu", kernel_initializer=_he(), dtype=self.dtype_policy,
                                         name="hidden")

    def get_config(self):
        return {**super().get_config(), "perspectives": self.perspectives}

    def build_layers(self, input_shape) -> int:
        self.matching.build((input_shape["sequence_a"], input_shape["mask_a"], input_shape["sequence_b"],
                             input_shape["mask_b"]))
        self.hidden.build((None, 2 * self.build_aggregation((None, None, MATCHING_STRATEGIES * self.perspectives))))
        return self.units

    def build_aggregation(self, matched_shape) -> int:
        """Builds the aggregation layers; returns the width of one side's summary."""
        raise NotImplementedError

    def aggregate(self, matched, mask, training):
        raise NotImplementedError

    def call(self, inputs, training=None):
        a = self.input_dropout(inputs["sequence_a"], training=training)
        b = self.input_dropout(inputs["sequence_b"], training=training)
        mask_a, mask_b = inputs["mask_a"], inputs["mask_b"]
        matched_a = self.matching((a, mask_a, b, mask_b))
        matched_b = self.matching((b, mask_b, a, mask_a))
        summary = ops.concatenate([self.aggregate(matched_a, mask_a, training),
                                   self.aggregate(matched_b, mask_b, training)], axis=-1)
        return self.output_layer(self.hidden(summary), training)


@keras.saving.register_keras_serializable(package=PACKAGE)
class BiMPMHead(_PairHead):
    def __init__(self, num_outputs: int, tagging: bool = False, units: int = 128, dropout: float = 0.1,
                 perspectives: int = 20, **kwargs):
        super().__init__(num_outputs, tagging, units, dropout, perspectives, **kwargs)
        # BiMPM's aggregation: the final state of each direction (at the last real token, thanks to the mask).
        self.aggregation = _bilstm(units, "aggregation", self.dtype_policy, return_sequences=False)

    def build_aggregation(self, matched_shape) -> int:
        self.aggregation.build(matched_shape)
        return 2 * self.units

    def aggregate(self, matched, mask, training):
        return self.aggregation(matched, mask=_mask(mask), training=training)


@keras.saving.register_keras_serializable(package=PACKAGE)
class SimTransformerHead(_PairHead):
    def __init__(self, num_outputs: int, tagging: bool = False, units: int = 128, dropout: float = 0.1,
                 perspectives: int = 20, **kwargs):
        super().__init__(num_outputs, tagging, units, dropout, perspectives, **kwargs)
        # The matching vectors are 4 x perspectives wide; a projection gives the block a width its heads divide.
        self.projection = keras.layers.Dense(units, kernel_initializer=_he(), dtype=self.dtype_policy,
                                             name="projection")
        self.block = keras_hub.layers.TransformerEncoder(
            intermediate_dim=4 * units, num_heads=transformer_heads(units), dropout=dropout,
            kernel_initializer=_he(), dtype=self.dtype_policy, name="block")

    def build_aggregation(self, matched_shape) -> int:
        self.projection.build(matched_shape)
        self.block.build((None, None, self.units))
        return self.units

    def aggregate(self, matched, mask, training):
        states = self.block(self.projection(matched), padding_mask=_mask(mask), training=training)
        return masked_max(states, mask)


HEAD_CLASSES = {
    "linear": LinearHead,
    "mlp": MLPHead,
    "bilstm": BiLSTMHead,
    "cnn": DenseCNNHead,
    "highway_lstm": HighwayLSTMHead,
    "transformer": TransformerHead,
    "bimpm": BiMPMHead,
    "sim_transformer": SimTransformerHead,
}
PAIR_HEAD_CLASSES = (BiMPMHead, SimTransformerHead)


def make_head(name: str, num_outputs: int, tagging: bool = False, units: int = 128, dropout: float = 0.1,
              perspectives: int = 20) -> keras.layers.Layer:
    """The head called `name` (a key of `HEAD_CLASSES`), named "head" so that it is easy to find in a model."""
    head_class = HEAD_CLASSES[name]
    extra = {"perspectives": perspectives} if issubclass(head_class, PAIR_HEAD_CLASSES) else {}
    return head_class(num_outputs, tagging=tagging, units=units, dropout=dropout, name="head", **extra)


def is_pair_head(head) -> bool:
    return isinstance(head, PAIR_HEAD_CLASSES)


def _inputs(suffix: str = "") -> dict:
    # int32 masks, as the core models: a bool mask breaks MirroredStrategy.
    return {f"{name}{suffix}": keras.Input(shape=(None,), dtype="int32", name=f"{name}{suffix}")
            for name in ("token_ids", "segment_ids", "padding_mask")}


def _encode(backbone, inputs: dict, suffix: str = ""):
    return backbone({name: inputs[f"{name}{suffix}"] for name in ("token_ids", "segment_ids", "padding_mask")})


def build_model(backbone, head, pair: bool = False) -> keras.Model:
    """backbone -> head. With `pair`, both sentences go through the same backbone (inputs suffixed `_a`, `_b`)."""
    if pair != is_pair_head(head):
        raise ValueError(f"head {type(head).__name__} {'needs' if is_pair_head(head) else 'cannot take'} "
                         "separately encoded pairs")
    if pair:
        inputs = {**_inputs("_a"), **_inputs("_b")}
        encoded_a, encoded_b = _encode(backbone, inputs, "_a"), _encode(backbone, inputs, "_b")
        outputs = head({"sequence_a": encoded_a["sequence_output"], "mask_a": inputs["padding_mask_a"],
                        "sequence_b": encoded_b["sequence_output"], "mask_b": inputs["padding_mask_b"]})
    else:
        inputs = _inputs()
        encoded = _encode(backbone, inputs)
        outputs = head({"sequence": encoded["sequence_output"], "pooled": encoded["pooled_output"],
                        "mask": inputs["padding_mask"]})
    return keras.Model(inputs, outputs, name=f"stack_{head.name}")
