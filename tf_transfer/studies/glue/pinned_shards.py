"""The commands that run a GLUE grid's cpu variant as two shards, each pinned to one core, reading GLUE from
`$GLUE_DIR`: what a grid shows as its `commands` (transfer_learning, layer_freezing, methods, methods_full). Their
runs are timed on the CPU clock, so other work may share the machine.

Example:

>>> from tf_transfer.studies.glue.pinned_shards import pinned_commands
>>> pinned_commands("methods")[0].split(" --runs_dir")[0]
'taskset -c 0 python -m tf_transfer.experiments run methods --variant=cpu --shard=1/2'
"""

from __future__ import annotations


def pinned_commands(study: str, extra: str = "") -> tuple:
    """Two shards, one core each: the grid's runs are timed on the CPU clock, so other work may share the
    machine."""
    return tuple(f"taskset -c {core} python -m tf_transfer.experiments run {study} --variant=cpu --shard={core + 1}/2 "
                 f"--runs_dir=reports/runs --cache_dir=runs/cache --data_dir=$GLUE_DIR{extra} &"
                 for core in (0, 1))
