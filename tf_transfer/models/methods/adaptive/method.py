"""What `--method=autofreeze` and `--method=freezeout` share: freezing decided while training, a growing prefix
frozen (and cached) as the run goes, from the freezing rule's scope at the start. The rule and the schedule are
`schedules`; the run is `run.GrowingPrefixRun`, each method's subclass of it its `trainer`.

Example:

>>> from tf_transfer.models import methods
>>> methods.get("freezeout").sweep_candidates(12, {})  # it decides k itself: no fixed depth to sweep
[]
"""

from __future__ import annotations

import dataclasses

from tf_transfer.core import settings as settings_lib
from tf_transfer.core.record_schema import Field
from tf_transfer.core.settings import setting
from tf_transfer.models import freezing
from tf_transfer.models.methods.adaptive import schedules
import tf_transfer.models.methods.scope as scope
from tf_transfer.models.methods.registry import Method



def min_trainable_layers() -> dataclasses.Field:
    """The setting AutoFreeze's and FreezeOut's configs share, declared here once (`check_min_trainable_layers`)."""
    return setting(1, "--method=autofreeze or freezeout: the top blocks that never freeze (0: every block may "
                      "freeze, the pooler and head train to the end).")


def check_min_trainable_layers(config) -> None:
    settings_lib.check("min_trainable_layers", config.min_trainable_layers, (settings_lib.at_least(0), "must be >= 0"))


class Adaptive(Method):
    """The pieces AutoFreeze and FreezeOut share (each subclass registers itself with its own settings)."""

    # Both decide against the planned steps (--max_epochs x steps per epoch): AutoFreeze every tenth of them, FreezeOut
    # along them. The GLUE defaults (the transfer-learning paper's batch 1 for up to 30 epochs, stopped early) would
    # put AutoFreeze's first possible freeze at epoch 6 and FreezeOut's first at epoch 15, after early stopping has
    # usually ended the run, so a run without these flags takes the AutoFreeze authors' defaults
    # (freeze_intermediate_e2e_lr.py: batch 32, 3 epochs, rate 5e-5).
    run_defaults = ({"batch_size": 32, "max_epochs": 3, "lr": 5e-5},
                    "the AutoFreeze authors' defaults: freezing is planned over --max_epochs")
    record_fields = (
        Field("freezing", (dict,), "with `--method=autofreeze` or `freezeout`: the freeze record `{method, "
              "min_trainable_layers, total_steps, events, decisions, phases, traces, cache_s, compile_s, ...}` "
              "(docs/methods.md)", required=False),
        Field("frozen_blocks", (int,), "adaptive freezing: blocks frozen at the epoch's end", required=False,
              per_epoch=True),
        Field("trainable_params", (int,), "adaptive freezing: parameters still training at the epoch's end",
              required=False, per_epoch=True),
        Field("global_step", (int,), "adaptive freezing: training steps so far", required=False, per_epoch=True),
    )

    def check_together(self, settings) -> list:
        return [
            (not settings.cache_frozen,
             f"--method={settings.method} caches each frozen prefix itself as it grows: leave --cache_frozen off"),
            *scope.needs_a_block(settings),
            (settings.steps_per_execution == 1,
             f"--method={settings.method} decides between steps: use --steps_per_execution=1"),
            (settings.trainable_layers in (0, freezing.ALL) or settings.trainable_layers > settings.min_trainable_layers,
             f"--method={settings.method} with --trainable_layers={settings.trainable_layers} and "
             f"--min_trainable_layers={settings.min_trainable_layers} can never freeze a block: give more trainable "
             "layers or fewer kept"),
        ]

    def apply(self, backbone, options, trainable_layers) -> None:
        pass  # the freezing rule sets the start; the run freezes the rest as it goes

    def closing_line(self, summary: dict) -> str:
        return schedules.freeze_line(summary)

    def table_label(self, summary: dict) -> str:
        """The blocks still training at the end and when each freeze came (`autofreeze: k=1 at the end; froze
        2@40, 5@120`: 2 blocks frozen at step 40, 5 at step 120)."""
        freezing_record = summary.get("freezing")
        if not isinstance(freezing_record, dict) or not isinstance(summary.get("num_layers"), int):
            return self.name
        events = [e for e in freezing_record.get("events", []) if isinstance(e, dict)]
        frozen = max([e.get("frozen_blocks", 0) for e in events] + [0])
        steps = ", ".join(f"{e.get('frozen_blocks')}@{e.get('step')}" for e in events)
        return f"{self.name}: k={summary['num_layers'] - frozen} at the end; froze {steps or 'nothing'}"

    def sweep_candidates(self, num_layers: int, options: dict) -> list:
        return []  # not among the sweep's candidates (yet)

