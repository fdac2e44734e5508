"""AutoFreeze and FreezeOut as Keras callbacks: freezing decided while a user's own `model.fit` trains, with the
commands' decision loop (`decision_loop`: rule, schedule and freeze record; `--method=autofreeze` and `freezeout`,
docs/methods.md).

A callback sees the step's end, not its gradients: the blocks' gradient sums come from the optimizer
(`block_gradients.BlockGradients`, installed when training begins), and a freeze makes Keras trace the
training step again (`make_train_function(force=True)`) with fewer trainable variables. Unlike the commands, which
switch to a cache of the frozen prefix, the model goes on running its whole forward pass: the record's decisions are
the same, the time saved is only the frozen blocks' backward pass.

Example:

>>> import tf_transfer
>>> autofreeze = tf_transfer.AutoFreeze(interval_steps=10)
>>> classifier.fit(texts, labels, epochs=3, callbacks=[autofreeze])  # doctest: +SKIP
>>> [event["blocks"] for event in autofreeze.record["events"]]  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Optional

import keras

from tf_transfer.core.errors import TransferError
from tf_transfer.models import freezing, methods, user_model
from tf_transfer.models.methods.adaptive import decision_loop


def _checked(method: str, **values) -> None:
    """The method's settings checked as the commands check them (the same lines: its config's)."""
    methods.get(method).options(values)


class _AdaptiveFreezing(keras.callbacks.Callback):
    """What AutoFreeze and FreezeOut share: the step count, the growing frozen prefix and the record; the decisions
    are the commands' own loop (`decision_loop`), which each subclass makes."""

    method = ""

    def __init__(self, min_trainable_layers: int):
        super().__init__()
        self.min_trainable_layers = min_trainable_layers
        self.record = None
        self.frozen, self.step, self.epoch = -1, 0, 0
        self.backbone = None

    def on_train_begin(self, logs=None):
        if self.record is not None:  # a later `fit`: the same run goes on
            self._install()
            return
        self.backbone = user_model.backbone_of(self.model)
        self.num_blocks = len(self.backbone.transformer_layers)
        decision_loop.check_kept_blocks(self.min_trainable_layers, self.num_blocks)  # said before fit's steps
        steps, epochs = self.params.get("steps"), self.params.get("epochs")
        if not steps:
            raise TransferError(f"{type(self).__name__} plans its freezing over fit's steps: give fit data of known "
                                "length or steps_per_epoch")
        self.total_steps = int(steps) * int(epochs)
        self.first_block = self._frozen_at_start()
        embeddings_train = any(layer.trainable_weights for layer in self.backbone.layers
                               if freezing.block_of(self.backbone, layer) == "embeddings")
        self.frozen = -1 if embeddings_train else self.first_block
        self.decisions = self._decision_loop()
        self.record = self.decisions.record
        self.decisions.start(self.backbone, self.model.optimizer)
        self._install()

    def _frozen_at_start(self) -> int:
        """The blocks frozen before training (the freezing rule's `trainable_layers`, e.g. by `freeze`)."""
        frozen = 0
        for block in self.backbone.transformer_layers:
            if block.trainable_weights:
                break
            frozen += 1
        return frozen

    def _decision_loop(self) -> decision_loop.DecisionLoop:
        """The method's decision loop, of this callback's settings (each subclass)."""
        raise NotImplementedError

    def _install(self) -> None:
        """Each `fit` builds its step anew from what the rule has set up (AutoFreeze's sums: on its optimizer)."""
        if self.decisions.gradients is not None:
            self.decisions.gradients.install(self.model.optimizer)
        self.model.make_train_function(force=True)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch + 1  # the commands count epochs from 1

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        decided = self.decisions.decide(self.step, self.epoch, self.frozen)
        if decided is None:
            return
        wanted, why = decided
        before = self.frozen
        self._freeze_to(wanted)
        self.decisions.record_freeze(before, wanted, self.step, self.epoch, why,
                                     decision_loop.trainable_weights(self.model))

    def _freeze_to(self, frozen: int) -> None:
        """The embeddings and blocks 0..frozen-1 frozen (-1: none; 0: the embeddings alone), by the freezing rule's
        flags; the step is traced again, without them."""
        for layer in self.backbone.layers:
            part = freezing.block_of(self.backbone, layer)
            if part == "embeddings" and frozen >= 0:
                layer.trainable = False
            elif part.startswith("block_") and int(part[len("block_"):]) < frozen:
                layer.trainable = False
        self.frozen = frozen
        self.model.make_train_function(force=True)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["frozen_blocks"] = max(self.frozen, 0)
        self.record["global_step"] = self.step


class AutoFreeze(_AdaptiveFreezing):
    """AutoFreeze (Liu et al. 2021) in `model.fit`: every `interval_steps`, the blocks below the first whose
    gradient-norm change reaches `percentile` of the training blocks' changes freeze, with the embeddings; the top
    `min_trainable_layers` never do. The same rule and record as `--method=autofreeze`, from the same functions.

    Args:
      interval_steps: training steps between decisions; None: a tenth of fit's steps (epochs x steps per epoch).
      percentile: (0, 100]; 50 is AutoFreeze's median.
      min_trainable_layers: the top blocks that never freeze.

    Attributes:
      record: the freeze record as the commands write it to summary.json's "freezing": `events` (each freeze: its
        step, epoch, blocks and the changes that decided it) and `decisions` (every decision's norms).

    Examples:

    >>> import tf_transfer
    >>> tf_transfer.AutoFreeze(interval_steps=5, percentile=50).percentile
    50
    >>> tf_transfer.AutoFreeze(percentile=0)
    Traceback (most recent call last):
    ...
    tf_transfer.core.errors.TransferError: --freeze_percentile must be in (0, 100], got 0
    """

    method = "autofreeze"

    def __init__(self, interval_steps: Optional[int] = None, percentile: float = 50.0, min_trainable_layers: int = 1):
        _checked(self.method, freeze_interval_steps=interval_steps, freeze_percentile=percentile,
                 min_trainable_layers=min_trainable_layers)
        super().__init__(min_trainable_layers)
        self.interval_steps, self.percentile = interval_steps, percentile

    def _decision_loop(self) -> decision_loop.DecisionLoop:
        return decision_loop.AutoFreezeLoop(self.num_blocks, self.total_steps, self.first_block,
                                            self.min_trainable_layers, self.interval_steps, self.percentile)


class FreezeOut(_AdaptiveFreezing):
    """FreezeOut (Brock et al. 2017) in `model.fit`: the embeddings at `t0` of fit's steps and each block above
    later, each layer's rate annealed to zero by its time; the top `min_trainable_layers` anneal with the head. The
    same schedule and record as `--method=freezeout`.

    Args:
      t0: when the embeddings freeze, as a share of the steps (before `scale`), in (0, 1).
      scale: "linear", "squared" or "cubic" scaling of the times.
      scale_lr: start each layer's rate at lr / t_i (the authors' default).
      min_trainable_layers: the top blocks that never freeze.

    Attributes:
      record: the freeze record (`events`, the schedule's `times` and `freeze_steps`).

    Examples:

    >>> import tf_transfer
    >>> tf_transfer.FreezeOut(t0=0.5, scale="linear").scale
    'linear'
    """

    method = "freezeout"

    def __init__(self, t0: float = 0.8, scale: str = "cubic", scale_lr: bool = True, min_trainable_layers: int = 1):
        _checked(self.method, freezeout_t0=t0, freezeout_scale=scale, min_trainable_layers=min_trainable_layers)
        super().__init__(min_trainable_layers)
        self.t0, self.scale, self.scale_lr = t0, scale, scale_lr

    def _decision_loop(self) -> decision_loop.DecisionLoop:
        return decision_loop.FreezeOutLoop(self.num_blocks, self.total_steps, self.first_block,
                                           self.min_trainable_layers, self.t0, self.scale, self.scale_lr)
