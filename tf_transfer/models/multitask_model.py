"""The multi-task minBERT model: one shared backbone, a pooling per task, and a head per task.

Sentiment (`sst`) pools one sentence; paraphrase (`para`) and similarity (`sts`) pool a pair, either as one packed
sequence `[CLS] a [SEP] b [SEP]` (`concat`) or each sentence alone into u and v with Sentence-BERT's features
[u, v, |u - v|] (`sbert`). Pooling is BERT's pooler output (`cls`) or the masked mean of the last block (`mean`).

Example (any keras-hub BERT backbone; `settings` needs `poolings`, `pair_head`, `head_dropout`,
`trainable_layers`, `freeze_pooler`, `method` and the method's settings, as `MultitaskSettings` has):

>>> from tf_transfer.models import multitask_model
>>> model = multitask_model.build_model(backbone, settings, num_sentiment_classes=5)  # doctest: +SKIP
>>> features = {"token_ids": ids, "segment_ids": segments, "padding_mask": mask}  # doctest: +SKIP
>>> logits = model.task_output("sst", features)  # doctest: +SKIP
"""

from __future__ import annotations

import keras
from keras import ops

from tf_transfer.models import freezing
from tf_transfer.models import heads, methods
from tf_transfer.models.pooling import MeanPooling


@keras.saving.register_keras_serializable(package="tf_transfer")
class SbertPairFeatures(keras.layers.Layer):
    """Sentence-BERT's classification features of a pair: [u, v, |u - v|]."""

    def call(self, u, v):
        return ops.concatenate([u, v, ops.abs(u - v)], axis=-1)


class MultitaskBert(keras.Model):
    """The shared backbone, pooling and pair features, and one head per task.

    `task_output(task, features)` gives sentiment logits `[B, classes]`, paraphrase logits `[B]` or similarity
    scores `[B]`. Features are the backbone's three inputs; for the SBERT pair head, `{"a": ..., "b": ...}`.
    """

    def __init__(self, backbone, num_sentiment_classes: int, poolings: dict, pair_head: str,
                 head_dropout: float = 0.3, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.poolings = dict(poolings)
        self.pair_head = pair_head
        self.num_sentiment_classes = num_sentiment_classes
        self.mean_pooling = MeanPooling(name="mean_pooling")
        self.pair_features = SbertPairFeatures(name="sbert_pair_features")
        # heads.PooledHead is dropout then a dense layer, float32; one per task.
        self.task_heads = {
            "sst": heads.PooledHead(num_sentiment_classes, head_dropout, dtype="float32", name="sentiment_head"),
            "para": heads.PooledHead(1, head_dropout, dtype="float32", name="paraphrase_head"),
            "sts": heads.PooledHead(1, head_dropout, dtype="float32", name="similarity_head"),
        }

    def build(self, input_shape=None):
        # The backbone comes built; the heads' input widths follow from its width and the pair head.
        hidden = self.backbone.hidden_dim
        pair_width = 3 * hidden if self.pair_head == "sbert" else hidden
        self.task_heads["sst"].build((None, hidden))
        self.task_heads["para"].build((None, pair_width))
        self.task_heads["sts"].build((None, pair_width))
        self.built = True

    def embed(self, features, pooling: str, training=None):
        outputs = self.backbone(features, training=training)
        if pooling == "cls":
            return outputs["pooled_output"]
        return self.mean_pooling(outputs["sequence_output"], features["padding_mask"])

    def task_output(self, task: str, features, training=None):
        pooling = self.poolings[task]
        if task != "sst" and self.pair_head == "sbert":
            pooled = self.pair_features(self.embed(features["a"], pooling, training),
                                        self.embed(features["b"], pooling, training))
        else:
            pooled = self.embed(features, pooling, training)
        output = self.task_heads[task](pooled, training=training)
        return output if task == "sst" else output[:, 0]

    def call(self, inputs, training=None):
        """`{task: features}` -> `{task: output}` for the tasks present."""
        return {task: self.task_output(task, features, training) for task, features in inputs.items()}


def build_model(backbone, settings, num_sentiment_classes: int) -> MultitaskBert:
    """The multi-task model on `backbone` with the freezing rule and the training method applied (within
    `settings.trainable_layers`); every variable exists on return."""
    methods.apply(backbone, settings.method, settings.trainable_layers, **methods.registry.options_of(settings))
    if settings.freeze_pooler:
        backbone.get_layer(freezing.POOLER).trainable = False
    model = MultitaskBert(backbone, num_sentiment_classes, settings.poolings, settings.pair_head,
                          settings.head_dropout, name="multitask_bert")
    model.build()
    return model
