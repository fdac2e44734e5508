"""`--method=autofreeze` (AutoFreeze, Liu et al. 2021, arXiv 2102.01386): every `--freeze_interval_steps`, blocks below
the first whose gradient-norm change reaches `--freeze_percentile` of the training blocks' changes freeze
(`schedules.autofreeze_frozen`); what the methods share is `method`.

Example:

>>> from tf_transfer.models import methods
>>> methods.get("autofreeze").run_name_part(None)
'autofreeze_'
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from tf_transfer.core import settings as settings_lib
from tf_transfer.core.settings import setting
import tf_transfer.models.methods.adaptive.method as adaptive
from tf_transfer.models.methods.adaptive import run
from tf_transfer.models.methods.registry import register


@dataclasses.dataclass(frozen=True, kw_only=True)
class AutoFreezeConfig:
    """AutoFreeze's settings, each a flag of the GLUE trainer."""

    freeze_interval_steps: Optional[int] = setting(
        None, "--method=autofreeze: training steps between freezing decisions (default: a tenth of all steps, "
              "--max_epochs x steps per epoch, as the AutoFreeze authors' 10 intervals).")
    freeze_percentile: float = setting(
        50.0, "--method=autofreeze: blocks below the first one whose gradient-norm change reaches this percentile "
              "(0-100] of the training blocks' changes freeze (AutoFreeze: the median, 50).")
    min_trainable_layers: int = adaptive.min_trainable_layers()

    def __post_init__(self):
        settings_lib.check("freeze_interval_steps", self.freeze_interval_steps, settings_lib.optional_at_least_1)
        settings_lib.check("freeze_percentile", self.freeze_percentile, (
            (lambda value: settings_lib.in_range(0.0, 100.0, low_open=True)(value) or value == 100),
            "must be in (0, 100]"))
        adaptive.check_min_trainable_layers(self)


@register
class AutoFreeze(adaptive.Adaptive):
    name = "autofreeze"
    title = "AutoFreeze"
    help = "the freezing rule's blocks at first; blocks whose gradients have settled freeze as it trains"
    color = "tab:red"
    config = AutoFreezeConfig
    trainer = run.AutoFreezeRun
