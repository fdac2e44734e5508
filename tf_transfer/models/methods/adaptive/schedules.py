"""When blocks freeze during training: AutoFreeze's rule and FreezeOut's schedule, as plain numbers (no TensorFlow).

A run of `--method=autofreeze` or `--method=freezeout` starts with every block it may train (all, or the last
`trainable_layers`) and freezes a growing prefix of them: the embeddings and blocks 0..j. These two functions say how
many blocks are frozen after a decision; `decision_loop` asks them for `run` (the commands) and `callbacks`
(`model.fit`).

AutoFreeze (Liu, Agarwal & Venkataraman, arXiv 2102.01386; the authors' `freeze_intermediate_e2e_lr.py`): over each
interval of steps the gradients of every block are summed; at the interval's end a block's statistic is the L1 norm
of that sum, and its change is `|previous - current| / previous` against the interval before. Among the blocks that
still train, those below the first block whose change reaches the `percentile`-th percentile of their changes freeze
(default the median). Here two limits are added, as the issue asks: the top `min_trainable` blocks never freeze, and a
decision never unfreezes.

FreezeOut (Brock, Lim, Ritchie & Weston, arXiv 1706.04983; the authors' code): layer i of N+1 (here the embeddings are
layer 0, block b is layer b+1, the pooler and head are layer N = L+1) trains until the share `t_i` of all steps, with
`t_i = scale(t_0 + (1 - t_0) i / N)` (cubic by default, `t_0` = 0.8 "pre-cubed"), its learning rate annealed by
`0.5 (1 + cos(pi step / (t_i T)))` and, with `scale_lr` (their default), its initial rate multiplied by `1 / t_i`. The
top `min_trainable` blocks take the top layer's schedule (`t = 1`), since they never freeze.

Example:

>>> from tf_transfer.models.methods.adaptive import schedules as fs
>>> fs.autofreeze_frozen([2.0, 2.0, 2.0, 2.0], [1.5, 1.0, 0.5, 0.75], frozen=0, percentile=50, min_trainable=1)
(2, [0.25, 0.5, 0.75, 0.625], 0.5625)
>>> [round(t, 3) for t in fs.freezeout_times(num_blocks=2, t0=0.8, scale="cubic", min_trainable=1)]
[0.512, 0.651, 1.0]
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

SCALES = {"linear": lambda x: x, "squared": lambda x: x ** 2, "cubic": lambda x: x ** 3}


def norm_changes(previous: Sequence[float], current: Sequence[float]) -> list:
    """`|previous - current| / previous` per block; a block whose previous norm is 0 changed infinitely (unless its
    current one is 0 too: no change)."""
    changes = []
    for before, now in zip(previous, current):
        if before > 0:
            changes.append(abs(before - now) / before)
        else:
            changes.append(0.0 if now == 0 else math.inf)
    return changes


def autofreeze_frozen(previous: Optional[Sequence[float]], current: Sequence[float], frozen: int,
                      percentile: float, min_trainable: int) -> tuple:
    """`(frozen blocks after this decision, each block's change, the threshold)` from the blocks' gradient norms of
    the interval before (`previous`, None at the first interval: nothing freezes) and of this one (`current`), with
    `frozen` blocks frozen so far. Changes and threshold are None at the first interval; a frozen block's change is
    None (it has no gradient to change)."""
    num_blocks = len(current)
    if previous is None:
        return frozen, None, None
    changes = [None] * frozen + norm_changes(previous[frozen:], current[frozen:])
    active = [c for c in changes[frozen:] if not math.isnan(c)]
    if not active:
        return frozen, changes, None
    threshold = float(np.percentile(active, percentile))
    first_changing = next((i for i in range(frozen, num_blocks) if changes[i] >= threshold), num_blocks)
    limit = max(num_blocks - min_trainable, frozen)
    return min(max(first_changing, frozen), limit), changes, threshold


def freezeout_times(num_blocks: int, t0: float, scale: str, min_trainable: int) -> list:
    """The share of all steps after which each layer freezes: the embeddings, then block 0..L-1 (the pooler and head
    are layer L+1, t = 1). The top `min_trainable` blocks get t = 1: they anneal with the head and never freeze."""
    top = num_blocks + 1
    times = [SCALES[scale](t0 + (1 - t0) * i / top) for i in range(num_blocks + 1)]
    for block in range(max(num_blocks - min_trainable, 0), num_blocks):
        times[block + 1] = 1.0
    return times


def freezeout_freeze_steps(times: Sequence[float], total_steps: int) -> list:
    """The global step (1-based: after that many steps) at which each layer of `times` freezes; None for t = 1."""
    # (rounding noise aside: 0.8 ** 3 * 1000 is 512.0000000000001, step 512)
    return [None if t >= 1.0 else max(1, math.ceil(t * total_steps - 1e-9)) for t in times]


def freezeout_frozen(step: int, freeze_steps: Sequence[Optional[int]]) -> int:
    """How many blocks are frozen after `step` steps (the embeddings are layer 0 of `freeze_steps`): the leading
    layers whose freeze step has passed, less the embeddings; -1 when not even the embeddings are frozen."""
    layers = 0
    for at in freeze_steps:
        if at is None or step < at:
            break
        layers += 1
    return layers - 1


def freezeout_rate_factor(step: float, time: float, total_steps: int, scale_lr: bool) -> float:
    """The multiplier of a layer's learning rate after `step` steps: `(1 / t_i if scale_lr) * 0.5 (1 + cos(pi step
    / (t_i T)))`, 0 once the layer's time has passed (the TensorFlow twin is in `layer_rates`)."""
    end = time * total_steps
    if step >= end:
        return 0.0
    return (1.0 / time if scale_lr else 1.0) * 0.5 * (1.0 + math.cos(math.pi * step / end))


# --- the freeze record (summary.json "freezing", and the callbacks' `record`) ----------------------------------------

def new_record(method: str, min_trainable: int, total_steps: int) -> dict:
    """The freeze record a run of `method` starts with: its settings, then `events` (each freeze) and `decisions`
    (each AutoFreeze decision), filled by `autofreeze_decision` and `freeze_event`."""
    return {"method": method, "min_trainable_layers": min_trainable, "total_steps": total_steps, "events": [],
            "decisions": [], "previous_norms": None}


def autofreeze_decision(record: dict, norms: Sequence[float], frozen: int, percentile: float, min_trainable: int,
                        step: int, epoch: int) -> tuple:
    """`(blocks frozen after this decision, why)` from the blocks' gradient norms of the interval that ends at
    `step` (`autofreeze_frozen` against the record's previous norms); the decision is added to `record`."""
    wanted, changes, threshold = autofreeze_frozen(record["previous_norms"], norms, frozen, percentile, min_trainable)
    record["previous_norms"] = list(norms)
    record["decisions"].append({"step": step, "epoch": epoch, "norms": list(norms), "changes": changes,
                                "threshold": threshold, "frozen_blocks": wanted})
    return wanted, {"rule": record["method"], "threshold": threshold, "changes": changes}


def freezeout_decision(record: dict, step: int, freeze_steps: Sequence[Optional[int]], frozen: int) -> tuple:
    """`(layers frozen after `step`, why)` by FreezeOut's schedule (-1: not even the embeddings)."""
    wanted = freezeout_frozen(step, freeze_steps)
    return wanted, {"rule": record["method"], "freeze_steps": list(freeze_steps[frozen + 1:wanted + 1])}


def freeze_event(before: int, frozen: int, step: int, epoch: int, why: dict, trainable_params: int) -> dict:
    """One freeze of the record's `events`: blocks `before..frozen-1` (and the embeddings when `before` is -1)."""
    return {"frozen_blocks": frozen, "blocks": list(range(max(before, 0), frozen)), "embeddings": before < 0,
            "step": step, "epoch": epoch, **(why or {}), "trainable_params": trainable_params}


def freeze_line(summary: dict) -> str:
    """The final line's account of the freezes: `froze blocks 0-1 at step 40 (epoch 1), block 2 at step 80 (epoch
    2); trained the last 3 of 6 blocks at the end`; empty for a run that is not adaptive."""
    freezing = summary.get("freezing")
    if not freezing:
        return ""
    parts = []
    for event in freezing["events"]:
        blocks = event["blocks"]
        named = (f"blocks {blocks[0]}-{blocks[-1]}" if len(blocks) > 1 else f"block {blocks[0]}" if blocks
                 else "the embeddings")
        when = ("from the start (--trainable_layers)" if event.get("rule") == "--trainable_layers"
                else f"at step {event['step']} (epoch {event['epoch']})")
        parts.append(f"{named} {when}")
    num_blocks = summary.get("num_layers")
    final = max((e["frozen_blocks"] for e in freezing["events"]), default=-1)
    left = num_blocks - max(final, 0) if num_blocks is not None else "?"
    return (f"froze {'; '.join(parts) if parts else 'nothing'}; the last {left} of {num_blocks} blocks trained at "
            f"the end (freeze record: summary.json \"freezing\")")
