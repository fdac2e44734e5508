"""The adaptive-freezing report's drift section: whether the machine's speed moved under the runs (the same work
timed again, per task and kind of machine), and the load each task's runs met; `adaptive_freezing_report` writes it."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from tf_transfer.core import stats
from tf_transfer.data.tasks import get_task
from tf_transfer.reporting import tables as reports
from tf_transfer.reporting.adaptive_freezing_protocol import AUTOFREEZE, FREEZEOUT, METHODS, STATIC, compared_method
from tf_transfer.reporting.method_comparison import _paired, machine_groups, ratio, share_text


def task_metric(collected: list, task: str) -> str:
    """The metric the task's runs stop and are scored on (the grid's `--metric`, else the task's primary)."""
    given = next((r["settings"].get("metric") for r in collected if r["settings"]["task"] == task), None)
    return given or get_task(task).primary_metric


def load_line(collected: list, task: str) -> str:
    """Each compared method's mean `others_cpu_load` over its runs' epochs (what else the machine ran beside them:
    a busy other core slows a pinned run's CPU seconds too), and how many runs recorded it."""
    found = defaultdict(list)
    for run in collected:
        method = compared_method(run["settings"]["part"])
        if method and run["settings"]["task"] == task and run["summary"]:
            found[method].append(reports.others_load(run["summary"]))
    cells = []
    for method in METHODS:
        loads = [x for x in found.get(method, []) if x is not None]
        if found.get(method):
            cells.append(f"{method} " + (f"{sum(loads) / len(loads):.2f}" if loads else "not recorded")
                         + f" ({len(loads)} of {len(found[method])} runs recorded it)")
    return ("Other work beside the runs (`others_cpu_load`: the machine's other processes' CPU seconds per wall "
            "second while an epoch trained, 0 idle, 1 one core busy, above 1 on 2 cores when other work also took "
            "turns on the run's core; mean over a run's epochs, then over runs; what a busy core costs a pinned run: "
            "benchmarks/README.md, *A busy neighbour core*): " + "; ".join(cells) + ".") if cells else ""


def _same_work(run: dict):
    """The setting of a run whose every epoch does the same work in every seed (full fine-tuning, or a static k over
    its cache: the same examples, the same trainable blocks), as a key; None for AutoFreeze and FreezeOut, whose
    epochs get cheaper as blocks freeze."""
    s = run["settings"]
    if s.get("method") != "freeze" or not run["summary"]:
        return None
    return s["task"], str(s["trainable_layers"]), float(s["lr"]), bool(s.get("cache_frozen"))


def drift_runs(collected: list) -> list:
    """`[(setting, mean log CPU s per epoch, mean log probe s)]` of the same-work runs that recorded the machine's
    speed probe after every epoch."""
    found = []
    for run in collected:
        key = _same_work(run)
        probes = reports.probe_seconds(run["summary"]) if key else None
        cpu = [e.get("epoch_cpu_s") for e in run["summary"]["epochs"]] if probes else None
        if probes and all(cpu):
            found.append((key, float(np.mean(np.log(cpu))), float(np.mean(np.log(probes)))))
    return found


def _spread(values, groups) -> float:
    """The pooled within-group sd of log values, as a share (0.1: about 10%)."""
    values, groups = np.asarray(values), list(groups)
    squares, df = 0.0, 0
    for group in set(groups):
        members = values[[i for i, g in enumerate(groups) if g == group]]
        squares, df = squares + float(np.sum((members - members.mean()) ** 2)), df + len(members) - 1
    return float(np.expm1(np.sqrt(squares / df))) if df else float("nan")


def drift_section(collected: list, table: dict, tasks: list) -> list:
    """Whether the machine's speed probe (`speed_probe_cpu_ms`, recorded since 2026-11-26 18:20 UTC) explains how
    the CPU seconds of the same work drift between runs, and the time shares divided by it beside the raw ones."""
    found = drift_runs(collected)
    groups = [key for key, _, _ in found]
    repeated = [i for i, g in enumerate(groups) if groups.count(g) > 1]
    lines = ["## The machine's drift, and the times divided by its speed", "",
             "The same work took different CPU seconds on different hours (this VM's speed drifts; on 2026-11-26 "
             "the same static-k epoch of STS-B took 139-153 CPU s in one run and 178-196 s in another). Since "
             "2026-11-26 18:20 UTC every epoch also records the machine's speed right after it (`speed_probe_cpu_ms`, "
             "docs/outputs.md). The check: over the runs whose epochs all do the same work in every seed (full "
             "fine-tuning and static k), does a run's CPU seconds per epoch move with its probe, beyond what its "
             "setting explains? (Run means of the logs, centred within each setting; Pearson's r with Fisher's z "
             "interval, `stats.within_group_correlation`.)", ""]
    if len(repeated) < 4:
        return lines + [f"Not enough probed runs yet: {len(found)} same-work run(s) recorded the probe on every "
                        f"epoch, {len(repeated)} of them in settings with at least two such runs. The times above "
                        "are raw CPU seconds.", ""]
    cpu, probe = [found[i][1] for i in repeated], [found[i][2] for i in repeated]
    kept = [groups[i] for i in repeated]
    r = stats.within_group_correlation(cpu, probe, kept)
    raw, divided = _spread(cpu, kept), _spread(np.subtract(cpu, probe), kept)
    tracks = r.defined and r.low > 0
    lines += [f"{len(repeated)} runs in {len(set(kept))} settings: r = {r.estimate:.2f} "
              + (f"[{r.low:.2f}, {r.high:.2f}]" if r.defined else "(no interval)")
              + f"; a setting's CPU seconds per epoch spread by {100 * raw:.0f}% between its runs (pooled sd), "
              f"{100 * divided:.0f}% once divided by the probe. "
              + ("The probe tracks the drift (the interval lies above 0)." if tracks else
                 "That the probe tracks the drift is not shown (the interval reaches 0 or below): the raw times "
                 "above stand, and the divided ones below are shown only for comparison."), ""]
    rows = []
    for method in (AUTOFREEZE, FREEZEOUT, STATIC):
        for label, kind in [group for task in tasks for group in machine_groups(table, method, task)]:
            task = label.split(" on ")[0]
            probed = ratio(table, method, task, key="probed", kind=kind)
            if probed is None or probed.n < 2:
                continue
            raw_same = ratio(table, method, task, seeds=set(_paired(table, method, task, "probed", kind=kind)),
                             kind=kind)
            rows.append([method, label, str(probed.n), share_text(raw_same), share_text(probed)])
    if rows:
        lines += ["Time to stop as a share of full fine-tuning's, over the seeds whose runs on both sides recorded "
                  "the probe on every epoch:", "",
                  reports.markdown_table(["method", "task", "seeds", "raw CPU seconds [95%]",
                                          "divided by the probe [95%]"], rows), ""]
    else:
        lines += ["No seed has both sides of a comparison probed yet.", ""]
    return lines
