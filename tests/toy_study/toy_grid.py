"""Step 5 of the checklist, the grid: what runs, as data. Two rates at one seed; its study is the toy's row and its
report the toy report's entry point (a grid takes nothing else from its report)."""

from __future__ import annotations

from tf_transfer.studies.grid import Grid, Variant
from toy_study import toy_report

GRID = Grid(
    name="toy",
    paper="none: a toy study that follows docs/layout.md's checklist",
    flagfile="tests/toy_study/toy.flags",
    axes={"rate": [0.05, 0.2], "seed": [0]},
    variants={"paper": Variant()},
    report=toy_report.write_report,
    study="toy",
    shown=("rate", "seed", "epochs"),
)
