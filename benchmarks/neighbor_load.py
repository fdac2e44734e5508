"""How much slower is a run pinned to one core when the other core is busy? The same training steps, timed
alternately with the other core idle and with it running the same training (the studies run one run per core).

    python benchmarks/neighbor_load.py --data_dir=../shared/data/glue --repeats=10

Needs the machine to itself (two cores: this process takes `--core`, its neighbour `--neighbor_core`). The
neighbour is a second process of this script, pinned to the other core, that trains the same model on the same
batches without end; it is stopped (SIGSTOP) while the idle timings run and continued (SIGCONT) two seconds before
the busy ones. Both processes use one thread. Each repeat times one `fit` over the same `--steps` batches with the
neighbour stopped and with it running, the order swapped every repeat, so that slow drifts fall on both alike.
Prints one JSON line per timing (with `others_cpu_load`, the rest of the machine's CPU seconds per wall second
during it, as every epoch records it: about 1 busy, 0 idle) and a summary line: the medians, and the slowdown as
the geometric mean of the per-repeat ratios busy / idle with its 95% paired t interval
(`tf_transfer.core.stats.paired_difference` on the logs), on the process's CPU seconds (what the studies' `cpu`
clock counts) and on the wall clock.
benchmarks/README.md has the measured numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")  # one run per core, as the studies pin them
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from freeze_measure_overhead import build  # noqa: E402  (beside this file: a GLUE task built as a run builds it)

from tf_transfer.core import machine, stats  # noqa: E402

READY = "neighbor ready"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", required=True, help="GLUE folder in the original TSV layout")
    parser.add_argument("--task", default="mrpc")
    parser.add_argument("--steps", type=int, default=8, help="training steps per timing")
    parser.add_argument("--repeats", type=int, default=10, help="timings per condition, alternated")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--core", type=int, default=0, help="the timed process's core")
    parser.add_argument("--neighbor_core", type=int, default=1, help="the neighbour's core")
    parser.add_argument("--neighbor", action="store_true", help=argparse.SUPPRESS)  # the child's role
    args = parser.parse_args(argv)
    usable = os.sched_getaffinity(0)
    if args.steps < 1 or args.repeats < 2:
        parser.exit(2, "error: --steps must be 1 or more and --repeats 2 or more (an interval needs two pairs)\n")
    if args.core == args.neighbor_core or not {args.core, args.neighbor_core} <= usable:
        parser.exit(2, f"error: --core={args.core} and --neighbor_core={args.neighbor_core} must be two different "
                       f"cores of this process's {sorted(usable)}\n")
    return args


def prepared(args):
    """The built task and its batches: 3 to trace the step, then `--steps` timed."""
    task = build(args.task, args.data_dir, "freeze", args.batch_size * (args.steps + 3), args.batch_size)
    plan = task.feed.plan(1)
    warm, timed = plan[:3], plan[3:3 + args.steps]
    task.model.fit(task.feed.dataset(warm), epochs=1, verbose=0, shuffle=False)
    return task, timed


def neighbor(args) -> None:
    os.sched_setaffinity(0, {args.neighbor_core})
    task, timed = prepared(args)
    print(READY, flush=True)
    while True:
        task.model.fit(task.feed.dataset(timed), epochs=1, verbose=0, shuffle=False)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.neighbor:
        return neighbor(args)
    # Started before this process pins itself: a child inherits its parent's cores.
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--neighbor", *sys.argv[1:]],
                             stdout=subprocess.PIPE, text=True)
    os.sched_setaffinity(0, {args.core})
    try:
        task, timed = prepared(args)
        while child.stdout.readline().strip() != READY:  # the neighbour's warm-up ran beside ours
            if child.poll() is not None:
                raise SystemExit(f"error: the neighbour process ended (exit {child.returncode}) before training")
        child.send_signal(signal.SIGSTOP)
        times = {condition: {"cpu": [], "wall": [], "others": []} for condition in ("idle", "busy")}
        for repeat in range(args.repeats):
            for condition in (("idle", "busy") if repeat % 2 == 0 else ("busy", "idle")):
                if condition == "busy":
                    child.send_signal(signal.SIGCONT)
                    time.sleep(2.0)  # its step under way before ours is timed
                start, cpu_start, busy_start = time.perf_counter(), machine.cpu_seconds(), machine.busy_cpu_seconds()
                task.model.fit(task.feed.dataset(timed), epochs=1, verbose=0, shuffle=False)
                elapsed, own = time.perf_counter() - start, machine.cpu_seconds() - cpu_start
                wall, cpu = elapsed / len(timed), own / len(timed)
                # What the rest of the machine ran meanwhile, as each epoch records it: about 1 while the
                # neighbour trains, about 0 while it is stopped (the check that the two conditions differ).
                others = machine.others_cpu_load(busy_start, machine.busy_cpu_seconds(), own, elapsed)
                if condition == "busy":
                    child.send_signal(signal.SIGSTOP)
                times[condition]["cpu"].append(cpu)
                times[condition]["wall"].append(wall)
                times[condition]["others"].append(others)
                print(json.dumps({"condition": condition, "repeat": repeat, "step_s": wall, "step_cpu_s": cpu,
                                  "others_cpu_load": others}), flush=True)
    finally:
        child.send_signal(signal.SIGCONT)
        child.kill()
        child.wait()
    summary = {"task": args.task, "steps": len(timed), "batch_size": args.batch_size, "repeats": args.repeats,
               "median_others_cpu_load": {c: float(np.median(times[c]["others"])) if None not in times[c]["others"]
                                          else None for c in times}}
    for clock in ("cpu", "wall"):
        busy, idle = (np.array(times[c][clock]) for c in ("busy", "idle"))
        slowdown = stats.paired_difference(np.log(busy), np.log(idle))
        summary[clock] = {"median_idle_step_s": float(np.median(idle)), "median_busy_step_s": float(np.median(busy)),
                          "slowdown": float(np.expm1(slowdown.estimate)),
                          "slowdown_95": [float(np.expm1(slowdown.low)), float(np.expm1(slowdown.high))]}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
