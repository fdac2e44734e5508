"""Step 6 of the checklist, the report: one table row per run of the grid, its best validation and its test accuracy at
that epoch, from the completed runs' `summary.json` (a run not completed says so)."""

from __future__ import annotations

import os

from tf_transfer.reporting import tables


def write_report(collected: list, out: str, grid, variant: str) -> str:
    rows = []
    for entry in collected:
        settings, summary = entry["settings"], entry["summary"]
        epoch = tables.best_epoch(summary) if summary else None
        cells = ([f"{epoch['val']['accuracy']:.3f}", f"{epoch['test']['accuracy']:.3f}", str(len(summary["epochs"]))]
                 if epoch else ["missing", "", ""])
        rows.append([f"{settings['rate']:g}", str(settings["seed"]), *cells])
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "README.md")
    with open(path, "w") as f:
        f.write(f"# {grid.name} ({variant})\n\n| rate | seed | validation | test | epochs |\n|---|---|---|---|---|\n")
        f.write("".join(f"| {' | '.join(row)} |\n" for row in rows))
    return path
