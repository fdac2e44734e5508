"""The runs of a comparison (`tf_transfer.compare`, docs/python.md): every setting at every seed, one run of the GLUE
trainer each on a user's own data set, worked through by the grid runner (`grid.run_study`) in a folder of runs as
`experiments run freezing --train_file=...` does, so that a second call trains only what the first did not finish.

Full fine-tuning (`FULL`) is always among the settings: the intervals are against it, paired by seed.

Example:

>>> from tf_transfer.studies.glue import comparison_runs
>>> [comparison_runs.label(comparison_runs.setting(item)) for item in (2, "all", {"method": "lora", "rank": 8})]
['last 2', 'full fine-tuning', 'lora rank=8']
>>> comparison_runs.setting({"method": "prompt"})
Traceback (most recent call last):
...
tf_transfer.core.errors.TransferError: --method must be one of freeze, lora, bitfit, autofreeze, freezeout, got 'prompt'
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Callable, Optional

from tf_transfer.core.errors import TransferError
from tf_transfer.models import freezing, methods, user_model
from tf_transfer.studies import grid as grid_lib
from tf_transfer.models.first_run_rates import first_run_lr
from tf_transfer.studies.glue.glue_settings import FIRST_RUN, GlueSettings

FULL = {"method": methods.DEFAULT, "trainable_layers": freezing.ALL}
FULL_LABEL = "full fine-tuning"
# What every run takes where neither its setting nor `compare`'s keyword arguments say: the commands' first run on
# a user's data (a small encoder that loads offline, batch 32, up to 5 epochs stopped early, packed batches).
DEFAULTS = {name: value for name, value in FIRST_RUN.items() if name != "trainable_layers"}
GRID = grid_lib.Grid(name="compare", paper="none: the settings a user compares on their own data", flagfile="",
                     axes={}, variants={}, report=None,
                     shown=("method", "trainable_layers", "lr", "seed"))
SETTING_FIELDS = {field.name for field in dataclasses.fields(GlueSettings)}


def setting(item) -> dict:
    """One setting as GLUE-trainer settings: a number of top blocks (or `"all"`) is freezing all but those, a dict
    names `method`, `trainable_layers`, `lr` (any setting of the GLUE trainer) and the method's options with or
    without its prefix (`rank` or `lora_rank`)."""
    if not isinstance(item, dict):
        return {**FULL, "trainable_layers": freezing.parse_trainable_layers(item)}
    method = item.get("method", methods.DEFAULT)
    shared = {name: value for name, value in item.items() if name in SETTING_FIELDS}
    own = user_model.method_settings(method, {k: v for k, v in item.items() if k not in SETTING_FIELDS})
    found = {"trainable_layers": freezing.ALL, **shared, **own, "method": method}
    found["trainable_layers"] = freezing.parse_trainable_layers(found["trainable_layers"])
    return found


def label(settings: dict) -> str:
    """A setting's name in the table and figure, from what it sets beyond full fine-tuning."""
    k = settings["trainable_layers"]
    if settings["method"] == methods.DEFAULT:
        name = FULL_LABEL if k == freezing.ALL else f"last {k}"
    else:
        prefix = f"{settings['method']}_"
        options = [f"{name[len(prefix):]}={value}" for name, value in settings.items() if name.startswith(prefix)]
        name = " ".join([settings["method"], *options] + ([] if k == freezing.ALL else [f"last {k}"]))
    others = [f"{name}={value}" for name, value in settings.items()
              if name not in ("method", "trainable_layers") and not name.startswith(f"{settings['method']}_")]
    return ", ".join([name, *others])


def settings_by_label(settings) -> dict:
    """`{label: setting}` of a list of settings (labelled by `label`) or of a dict of them by the user's labels, full
    fine-tuning first (added when missing)."""
    items = settings.items() if isinstance(settings, dict) else [(None, item) for item in settings]
    found = {}
    for name, item in items:
        chosen = setting(item)
        name = name or label(chosen)
        if name in found:
            raise TransferError(f"two settings are both {name!r}: pass a dict of settings by the names to show")
        found[name] = chosen
    full = [name for name, chosen in found.items() if _is_full(chosen)]
    if len(full) > 1:
        raise TransferError(f"{' and '.join(repr(n) for n in full)} are both full fine-tuning, the reference of the "
                            "intervals: keep one")
    reference = full[0] if full else FULL_LABEL
    return {reference: found.get(reference, dict(FULL)), **{n: c for n, c in found.items() if n != reference}}


def _is_full(settings: dict) -> bool:
    return settings["method"] == methods.DEFAULT and settings["trainable_layers"] == freezing.ALL


def data_file(data, folder: str, role: str) -> Optional[str]:
    """The path of `data` as the runs read it: a file's own, or a pandas DataFrame written once as CSV into
    `folder/data`, named by its content (another DataFrame: other runs, never another's results)."""
    if data is None or isinstance(data, (str, os.PathLike)):
        return None if data is None else os.fspath(data)
    if not hasattr(data, "to_csv"):
        raise TransferError(f"the {role} data must be a pandas DataFrame or a file's path, got {type(data).__name__}")
    text = data.to_csv(index=False)
    path = os.path.join(folder, "data", f"{role}_{hashlib.sha256(text.encode()).hexdigest()[:12]}.csv")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", newline="") as f:
            f.write(text)
    return path


def runs(settings: dict, seeds, common: dict) -> list:
    """`(label, run)` of each setting of `{label: setting}` at each seed, over `common` (data and shared settings)
    and `DEFAULTS`: seed by seed, so that the runs of an unfinished comparison pair up. A setting without a rate
    takes the first run's for its kind of route (`glue_settings.FIRST_RUN_LR`). The frozen prefix is cached
    where something is frozen and the method is not one that decides while training (as the freezing grid does),
    unless a setting or `common` says."""
    listed = []
    for seed in seeds:
        for name, chosen in settings.items():
            run = {**DEFAULTS, **common, **chosen, "seed": int(seed), "part": "main"}
            if "lr" not in chosen and "lr" not in common:  # the first run's rate for this kind of route
                run["lr"] = first_run_lr(run["method"], run["trainable_layers"])
            if "cache_frozen" not in chosen and "cache_frozen" not in common:
                run["cache_frozen"] = (run["trainable_layers"] != freezing.ALL
                                       and methods.get(run["method"]).trainer is None)
            listed.append((name, run))
    return listed


def train(runs_dir: str, listed: list, log: Callable = print) -> dict:
    """Trains the runs of `listed` (`runs`' pairs) not completed under `runs_dir`, one at a time in this process;
    returns the grid runner's counts. A run that failed is retried by the next call.

    Raises:
      TransferError: a setting the GLUE trainer refuses or data it cannot read (before any training), or runs that
        failed (each one's error is also in the error.json beside it).
    """
    from tf_transfer.data import user_data

    folders = [run_dir(runs_dir, run) for _, run in listed]  # every setting's refusal before the first run trains
    first = GlueSettings(**{k: v for k, v in listed[0][1].items() if k != "part"})
    user_data.check_files(first.data_spec, first.skip_bad_rows, first.metric)
    counts = grid_lib.run_study(GRID, [run for _, run in listed], runs_dir, _train_one, log)
    if counts["failed"]:
        error = next(error for error in map(_error, folders) if error)
        raise TransferError(f"{counts['failed']} of {len(listed)} runs failed, the first: {error} (call again with "
                            "the same folder to retry them)")
    return counts


def run_dir(runs_dir: str, run: dict) -> str:
    """Where a comparison's run lives: `<runs_dir>/compare/<data set>/<run name>/seed<seed>`."""
    return grid_lib.run_dir(runs_dir, GRID, run)


def collect(runs_dir: str, listed: list, log: Callable = print) -> list:
    """`grid.collect`'s entries of `listed` (`runs`' pairs), each with its setting's label as `setting`."""
    collected = grid_lib.collect(GRID, [run for _, run in listed], runs_dir, log)
    return [{**entry, "setting": name} for entry, (name, _) in zip(collected, listed)]


def _train_one(settings: dict, folder: str) -> None:
    import keras

    keras.backend.clear_session()  # one process trains every run: the previous run's model goes
    grid_lib.train_run(GRID, settings, folder)


def _error(folder: str) -> Optional[str]:
    from tf_transfer.training import record

    path = os.path.join(folder, "error.json")
    return record.read_json(path).get("error") if os.path.exists(path) else None
