"""What a grid's runs trained, stopped and were scored on, said in its report's header.

A report on a sample must never read as one on the whole data set: each task's line gives the training examples
and the cap that made them so, where validation came from and its size, and the test set, as the completed runs'
own `summary.json` recorded them (`examples`, `config`). Runs of one task that differ (a line search on another
split, say) get one entry each, with their count.

Example:

>>> from tf_transfer.reporting.data_note import data_section
>>> run = {"summary": {"task": "rte", "examples": {"train": 1000, "validation": 249, "test/dev": 277},
...                    "config": {"max_train_examples": 1000, "validation_fraction": 0.1}}}
>>> data_section([run])[2]
'- rte: 1,000 training examples (capped by --max_train_examples=1,000), validation 249 (10% of the training data held out, seeded), test 277 (GLUE dev)'
"""

from __future__ import annotations

import os
from collections import Counter


def _source(config: dict, key: str, glue_name: str) -> str:
    path = config.get(key)
    return f"`{os.path.basename(path)}`" if path else glue_name


def _entry(summary: dict) -> str:
    config = summary.get("config") or {}
    examples = summary.get("examples") or {}
    cap = config.get("max_train_examples")
    held_out = bool(config.get("validation_fraction")) and not config.get("validation_file")
    train = (f"{examples.get('train', 0):,} training examples"
             + (f" (capped by --max_train_examples={cap:,})" if cap else
                " (the whole training split less validation)" if held_out else " (the whole training split)"))
    if config.get("validation_file"):
        validation = f"validation {examples.get('validation', 0):,} ({_source(config, 'validation_file', '')})"
    elif held_out:
        validation = (f"validation {examples.get('validation', 0):,} ({100 * config['validation_fraction']:g}% of "
                      "the training data held out, seeded)")
    else:
        validation = "no validation split (nothing held out)"
    test = examples.get("test/dev", examples.get("test"))
    tested = (f"test {test:,} ({_source(config, 'test_file', 'GLUE dev')})" if test else "no test set")
    return f"{train}, {validation}, {tested}"


def data_section(collected: list) -> list:
    """Markdown lines: a sentence and one bullet per task (per kind of run within a task) from the completed runs of
    `collected` (grid records with a `summary`); nothing when no run has completed."""
    entries = {}
    for run in collected:
        summary = run.get("summary")
        if summary and summary.get("examples"):
            entries.setdefault(summary["task"], Counter())[_entry(summary)] += 1
    if not entries:
        return []
    lines = ["Data, as the completed runs recorded it (training examples and their cap, validation, test):", ""]
    for task, kinds in entries.items():
        if len(kinds) == 1:
            lines.append(f"- {task}: {next(iter(kinds))}")
        else:
            lines.append(f"- {task}: " + "; ".join(f"{count} run{'s' if count > 1 else ''}: {kind}"
                                                   for kind, count in kinds.most_common()))
    return lines + [""]
