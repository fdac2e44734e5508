"""A first run's learning rate by the kind of route it takes (full fine-tuning, the last k blocks over the cache of
the frozen rest, another training method): the one table that glue's first run on a user's data, `compare` and the
freezing grid on a user's file read, so that a rate chosen from the first-run benchmark (reports/first_run) changes
all three at once.

>>> from tf_transfer.models import first_run_rates
>>> [first_run_rates.route_kind("freeze", "all"), first_run_rates.route_kind("freeze", 2),
...  first_run_rates.route_kind("lora", "all")]
['full fine-tuning', 'last k over the cache', 'method']
"""

from __future__ import annotations

from tf_transfer.models import freezing, methods

# Today every kind keeps full fine-tuning's rate, GlueSettings' default (2e-5).
FIRST_RUN_LR = {"full fine-tuning": 2e-5, "last k over the cache": 2e-5, "method": 2e-5}


def route_kind(method: str, trainable_layers) -> str:
    """The row of `FIRST_RUN_LR` a run's route takes: full fine-tuning (freezing nothing), the last k blocks (over
    the cache of the frozen rest, as a first run caches them), or another training method."""
    if method != methods.DEFAULT:
        return "method"
    full = freezing.parse_trainable_layers(trainable_layers) == freezing.ALL
    return "full fine-tuning" if full else "last k over the cache"


def first_run_lr(method: str, trainable_layers) -> float:
    """The first run's learning rate for a route (`FIRST_RUN_LR`)."""
    return FIRST_RUN_LR[route_kind(method, trainable_layers)]
