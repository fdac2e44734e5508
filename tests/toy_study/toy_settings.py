"""Step 2 of the checklist, settings: every setting of one toy run, a frozen dataclass whose fields are its flags."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from tf_transfer.core.settings import RunSettings, at_least, positive, setting


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToySettings(RunSettings):
    """A dense layer learning the sign of a random feature: its rate, epochs and number of examples."""

    rate: float = setting(0.05, "Adam's learning rate.")
    epochs: int = setting(2, "Epochs to train (no early stopping).")
    examples: int = setting(64, "Random examples drawn (half train, a quarter validation, a quarter test).")

    CHECKS: ClassVar[dict] = {**RunSettings.CHECKS, "rate": positive, "epochs": (at_least(1), "must be at least 1"),
                              "examples": (at_least(8), "must be at least 8")}
    # The toy builds no BERT, no tokenized feed and no optimizer from the groups: it takes none of their settings.
