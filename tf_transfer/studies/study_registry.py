"""The table of studies: the only list of them. Each row (`study.Study`) is defined beside its study's code and says
how a grid's run of it is trained, where it lives, how its completed result is read and what --data_dir/--data
become; a `Grid` names its study (`Grid(study="stack", ...)`) and asks its row (docs/layout.md, "Adding a study").

A grid that names no study runs `DEFAULT`'s runs: every grid written before studies were named, and any new grid of
GLUE-trainer runs.

Example:

>>> from tf_transfer.studies import study_registry
>>> sorted(study_registry.STUDIES)
['glue', 'multitask', 'sentiment', 'stack']
>>> study_registry.get().name == study_registry.DEFAULT
True
>>> study_registry.get("ner")
Traceback (most recent call last):
...
tf_transfer.core.errors.TransferError: unknown study 'ner': a grid names one of glue, multitask, sentiment, stack (tf_transfer/studies/study_registry.py)
"""

from __future__ import annotations

from typing import Optional

from tf_transfer.core.errors import TransferError
from tf_transfer.studies.glue import glue_study
from tf_transfer.studies.multitask import multitask_study
from tf_transfer.studies.sentiment import sentiment_study
from tf_transfer.studies.stack import stack_study
from tf_transfer.studies.study import Study

STUDIES = {row.name: row for row in (glue_study.STUDY, stack_study.STUDY, multitask_study.STUDY,
                                     sentiment_study.STUDY)}
# The study of a grid that names none: the GLUE trainer's.
DEFAULT = glue_study.STUDY.name


def get(name: Optional[str] = None) -> Study:
    """The row of study `name`; `DEFAULT`'s when None."""
    name = DEFAULT if name is None else name
    if name not in STUDIES:
        raise TransferError(f"unknown study {name!r}: a grid names one of {', '.join(sorted(STUDIES))} "
                            "(tf_transfer/studies/study_registry.py)")
    return STUDIES[name]
