"""Where the Hugging Face peer's training step spends its time: a torch.profiler trace of a few Trainer steps, split
into the same parts as tf_transfer's (`tf_transfer.training.profiling.category`).

Used by `benchmarks/hf_baseline.py --profile_steps=N` (after its timed spans, N more steps are traced). Each ATen
op's self CPU time goes to the first part named by the op or by an op or autograd node it runs inside (the
optimizer's step, a dropout, a layer norm, ...). With one thread, the steps' wall time minus the ops' self time is
the framework's own time (Python, the autograd engine, the Trainer, the data loader).

Example:

>>> from benchmarks import torch_profile
>>> callback = torch_profile.ProfileSteps(first_step=50, steps=4)  # doctest: +SKIP
>>> trainer = transformers.Trainer(..., callbacks=[callback.callback(transformers)])  # doctest: +SKIP
>>> callback.result["categories"]  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import time

# First match wins, over the op's own name and then its ancestors' (nearest first).
_PARTS = (
    ("optimizer", ("optimizer.step", "adamw", "_foreach", "clip_grad")),
    ("dropout", ("dropout", "bernoulli")),
    ("attention", ("scaled_dot_product", "softmax", "bmm", "flashattention")),
    ("layer norm", ("layer_norm", "layernorm")),
    ("GELU", ("gelu",)),
    ("matmul", ("addmm", "::mm", "mmbackward", "matmul", "linear")),
    ("embeddings", ("embedding",)),
)


def part_of(names: list) -> str:
    """The part of the step an op belongs to, from its name and its ancestors' names (nearest first)."""
    for name in names:
        lowered = name.lower()
        for part, keys in _PARTS:
            if any(key in lowered for key in keys):
                return part
    return "other"


def categories(events) -> dict:
    """`{part: self CPU seconds}` of the ATen ops among torch.profiler `events`."""
    seconds = collections.Counter()
    for event in events:
        if not event.name.startswith("aten::"):
            continue
        names, parent = [event.name], event.cpu_parent
        while parent is not None:
            names.append(parent.name)
            parent = parent.cpu_parent
        seconds[part_of(names)] += event.self_cpu_time_total / 1e6
    return dict(seconds)


class ProfileSteps:
    """Traces steps `first_step .. first_step + steps - 1` of a Trainer run; `result` then holds the parts' seconds
    and shares, the traced steps' wall seconds and the ops' summed self seconds."""

    def __init__(self, first_step: int, steps: int):
        self.first_step, self.steps = first_step, steps
        self.profiler, self.started, self.result = None, None, None

    def callback(self, transformers):
        owner = self

        class Callback(transformers.TrainerCallback):
            def on_step_begin(self, args_, state, control, **kwargs):
                if state.global_step == owner.first_step and owner.profiler is None:
                    import torch

                    owner.profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                    owner.profiler.__enter__()
                    owner.started = (time.perf_counter(), time.process_time())

            def on_step_end(self, args_, state, control, **kwargs):
                if owner.profiler is not None and owner.result is None and \
                        state.global_step == owner.first_step + owner.steps:
                    wall, cpu = time.perf_counter() - owner.started[0], time.process_time() - owner.started[1]
                    owner.profiler.__exit__(None, None, None)
                    owner.result = summary(owner.profiler.events(), wall, cpu)

        return Callback()


def summary(events, wall_s: float, cpu_s: float) -> dict:
    parts = categories(events)
    busy = sum(parts.values())
    return {"profile_categories": [{"category": name, "seconds": round(s, 4), "share": round(s / busy, 4)}
                                   for name, s in sorted(parts.items(), key=lambda item: -item[1])],
            "profile_traced_s": wall_s, "profile_traced_cpu_s": cpu_s, "profile_op_busy_s": busy}
