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

# From the first-run benchmark's search (reports/first_run, seed 0, best validation score on four user-like files):
# full fine-tuning was best at 5e-5 on SST-2, Quora and STS-B and 0.2 points from its best on SST-5; the last 2
# blocks over the cache at 3e-4 is the candidate its rule chose (at most 40% of full fine-tuning's CPU time on every
# file, the smallest worst deficit: SST-2 -1.8, SST-5 -1.7, Quora -1.8, STS-B -0.1 points). Another method (LoRA,
# BitFit) takes 1e-3, the rate reports/methods searched for LoRA on 4 of its 5 tasks and for BitFit on 3.
FIRST_RUN_LR = {"full fine-tuning": 5e-5, "last k over the cache": 3e-4, "method": 1e-3}


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
