"""The one decision loop of adaptive freezing, used by the command's run (`run.GrowingPrefixRun`) and the Keras
callbacks (`callbacks.AutoFreeze`, `callbacks.FreezeOut`) alike: the rule set up on the blocks and the optimizer
(AutoFreeze's gradient sums, FreezeOut's annealed rates), when the next decision is due, what it decides, and the
freeze record (`schedules`' numbers).

What stays with each caller is how a freeze is carried out and how the steps reach the loop: the run trains one
`fit` per segment up to the next decision and switches to a cache of the frozen prefix; a callback sees every step
and sets `trainable`. Both ask `decide` after a step and, when it answers, freeze and call `record_freeze`.

Example:

>>> loop = FreezeOutLoop(num_blocks=2, total_steps=4, first_block=0, min_trainable_layers=1, t0=0.5,
...                      scale="linear")
>>> loop.freeze_steps, loop.steps_to_decision(0)  # the embeddings, block 0, and block 1 kept to the end
([2, 3, None], 2)
>>> loop.decide(step=1, epoch=1, frozen=-1) is None, loop.decide(step=2, epoch=1, frozen=-1)
(True, (0, {'rule': 'freezeout', 'freeze_steps': [2]}))
>>> FreezeOutLoop(num_blocks=2, total_steps=4, first_block=0, min_trainable_layers=3)
Traceback (most recent call last):
...
tf_transfer.core.errors.TransferError: --min_trainable_layers=3 exceeds the backbone's 2 encoder blocks: use 0..2
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from tf_transfer.core.errors import TransferError
from tf_transfer.models.methods.adaptive import schedules


def check_kept_blocks(min_trainable_layers: int, num_blocks: int) -> None:
    """`TransferError` when more blocks are kept training than the backbone has."""
    if min_trainable_layers > num_blocks:
        raise TransferError(f"--min_trainable_layers={min_trainable_layers} exceeds the backbone's {num_blocks} "
                            f"encoder blocks: use 0..{num_blocks}")


def trainable_weights(model) -> int:
    """The weights `model` trains now (a freeze event's `trainable_params`)."""
    return int(sum(int(np.prod(v.shape)) for v in model.trainable_variables))


class DecisionLoop:
    """A run's decisions over `total_steps` steps of a backbone of `num_blocks` blocks, of which the first
    `first_block` were frozen before training (the freezing rule's); the top `min_trainable_layers` never freeze.
    `record` is the freeze record (summary.json's "freezing"); each method's subclass sets up its rule in `start`."""

    method = ""

    def __init__(self, num_blocks: int, total_steps: int, first_block: int, min_trainable_layers: int):
        check_kept_blocks(min_trainable_layers, num_blocks)
        self.num_blocks, self.total_steps, self.first_block = num_blocks, total_steps, first_block
        self.min_trainable_layers = min_trainable_layers
        self.record = schedules.new_record(self.method, min_trainable_layers, total_steps)
        self.gradients = None  # AutoFreeze's per-block gradient sums (`block_gradients.BlockGradients`)

    def start(self, backbone, optimizer, strategy=None) -> None:
        """Sets up the rule on the built backbone and optimizer (before its step is traced) and records its
        settings."""
        raise NotImplementedError

    def steps_to_decision(self, step: int) -> int:
        """Steps from `step` to the next one after which a decision is due."""
        raise NotImplementedError

    def _proposal(self, step: int, epoch: int, frozen: int) -> Optional[tuple]:
        """`(blocks frozen after `step`, why)` by the rule, or None: no decision due."""
        raise NotImplementedError

    def _freezes(self, wanted: int, frozen: int) -> bool:
        return wanted > frozen  # a decision never unfreezes

    def decide(self, step: int, epoch: int, frozen: int, agreed: Callable = lambda wanted: wanted) -> Optional[tuple]:
        """`(blocks frozen from now, why)` after `step` steps of epoch `epoch` with `frozen` frozen (-1: not even the
        embeddings), or None: no decision due, or nothing more to freeze. `agreed(wanted)` is what every process
        freezes (the run's: the chief's decision), asked at each decision due."""
        proposal = self._proposal(step, epoch, frozen)
        if proposal is None:
            return None
        wanted, why = proposal
        wanted = agreed(wanted)
        return (wanted, why) if self._freezes(wanted, frozen) else None

    def record_freeze(self, before: int, frozen: int, step: int, epoch: int, why: Optional[dict],
                      trainable_params: int, **measured) -> dict:
        """Adds the freeze from `before` to `frozen` blocks to the record's events (with what the caller `measured`
        of it, e.g. the run's cache seconds) and returns it."""
        event = {**schedules.freeze_event(before, frozen, step, epoch, why, trainable_params), **measured}
        self.record["events"].append(event)
        return event


class AutoFreezeLoop(DecisionLoop):
    """AutoFreeze's rule: every `interval_steps` (None: a tenth of the steps), the blocks below the first whose
    gradient-norm change reaches `percentile` of the training blocks' changes freeze, with the embeddings."""

    method = "autofreeze"

    def __init__(self, num_blocks: int, total_steps: int, first_block: int, min_trainable_layers: int,
                 interval_steps: Optional[int] = None, percentile: float = 50.0):
        super().__init__(num_blocks, total_steps, first_block, min_trainable_layers)
        self.interval = interval_steps or max(1, total_steps // 10)
        self.percentile = percentile

    def start(self, backbone, optimizer, strategy=None) -> None:
        from tf_transfer.models.methods.adaptive.block_gradients import BlockGradients

        self.record.update(interval_steps=self.interval, percentile=self.percentile)
        self.gradients = BlockGradients(strategy, [list(block.trainable_variables)
                                                   for block in backbone.transformer_layers])
        self.gradients.install(optimizer)

    def steps_to_decision(self, step: int) -> int:
        return self.interval - step % self.interval

    def _proposal(self, step: int, epoch: int, frozen: int) -> Optional[tuple]:
        if step % self.interval:
            return None
        norms = self.gradients.norms()
        self.gradients.reset()
        return schedules.autofreeze_decision(self.record, norms, max(frozen, self.first_block), self.percentile,
                                             self.min_trainable_layers, step, epoch)

    def _freezes(self, wanted: int, frozen: int) -> bool:
        return wanted > frozen and wanted > 0  # AutoFreeze freezes blocks, the embeddings with the first


class FreezeOutLoop(DecisionLoop):
    """FreezeOut's schedule: the embeddings at `t0` of the steps (before `scale`) and each block above later, each
    layer's rate annealed to zero by its time (times `1 / t_i` with `scale_lr`); it may freeze the embeddings alone."""

    method = "freezeout"

    def __init__(self, num_blocks: int, total_steps: int, first_block: int, min_trainable_layers: int,
                 t0: float = 0.8, scale: str = "cubic", scale_lr: bool = True):
        super().__init__(num_blocks, total_steps, first_block, min_trainable_layers)
        self.t0, self.scale, self.scale_lr = t0, scale, scale_lr
        self.times = schedules.freezeout_times(num_blocks, t0, scale, min_trainable_layers)
        self.freeze_steps = schedules.freezeout_freeze_steps(self.times, total_steps)

    def start(self, backbone, optimizer, strategy=None) -> None:
        from tf_transfer.models import freezing
        from tf_transfer.models.methods.adaptive import layer_rates

        layers = [[v for layer in backbone.layers if freezing.block_of(backbone, layer) == "embeddings"
                   for v in layer.trainable_variables]]
        layers += [list(block.trainable_variables) for block in backbone.transformer_layers]
        layer_rates.anneal_layers(optimizer, layers, self.times, self.total_steps, self.scale_lr)
        self.record.update(t0=self.t0, scale=self.scale, scale_lr=self.scale_lr, times=self.times,
                           freeze_steps=self.freeze_steps)

    def steps_to_decision(self, step: int) -> int:
        upcoming = [at for at in self.freeze_steps if at is not None and at > step]
        return (min(upcoming) - step) if upcoming else self.total_steps + 1

    def _proposal(self, step: int, epoch: int, frozen: int) -> Optional[tuple]:
        return schedules.freezeout_decision(self.record, step, self.freeze_steps, frozen)
