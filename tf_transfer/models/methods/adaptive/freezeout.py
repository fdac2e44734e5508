"""`--method=freezeout` (FreezeOut, Brock et al. 2017, arXiv 1706.04983): each layer freezes at its scheduled step,
the embeddings at `--freezeout_t0` of training and the blocks above evenly after them, each layer's rate annealed to
zero by then (`schedules.freezeout_times`); what the methods share is `method`.

Example:

>>> from tf_transfer.models import methods
>>> methods.get("freezeout").run_name_part(None)
'freezeout_'
"""

from __future__ import annotations

import dataclasses

from tf_transfer.core import settings as settings_lib
from tf_transfer.core.settings import setting
import tf_transfer.models.methods.adaptive.method as adaptive
from tf_transfer.models.methods.adaptive import run
from tf_transfer.models.methods.registry import register

SCALES = ("linear", "squared", "cubic")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FreezeOutConfig:
    """FreezeOut's settings, each a flag of the GLUE trainer."""

    min_trainable_layers: int = adaptive.min_trainable_layers()
    freezeout_t0: float = setting(0.8, "--method=freezeout: how far into training (before scaling) the embeddings "
                                       "freeze, in (0, 1); the blocks above follow, evenly spaced to the head's 1 "
                                       "(FreezeOut's default 0.8).")
    freezeout_scale: str = setting("cubic", "--method=freezeout: linear, squared or cubic scaling of each layer's "
                                            "freezing time (FreezeOut's recommended and default: cubic).")
    freezeout_scale_lr: bool = setting(True, "--method=freezeout: start each layer's rate at lr / t_i, so that every "
                                             "layer moves about as far (FreezeOut's default).")

    def __post_init__(self):
        adaptive.check_min_trainable_layers(self)
        settings_lib.check("freezeout_t0", self.freezeout_t0,
                           (settings_lib.in_range(0.0, 1.0, low_open=True), "must be in (0, 1)"))
        settings_lib.check("freezeout_scale", self.freezeout_scale, settings_lib.one_of(SCALES))


@register
class FreezeOut(adaptive.Adaptive):
    name = "freezeout"
    title = "FreezeOut"
    help = "the freezing rule's blocks at first; each layer freezes on its schedule, its rate annealed to zero"
    color = "tab:purple"
    config = FreezeOutConfig
    trainer = run.FreezeOutRun
