"""Does the speed probe that every epoch records (`machine.speed_probe`: `speed_probe_cpu_ms`) follow the speed of
training? On one core with one thread, alternates the probe at the budget a long epoch gives it (1 s) with a fixed
piece of training (the same `--steps` batches of full fine-tuning of all-MiniLM-L6-v2 on MRPC), `--rounds` times.

    taskset -c 0 python benchmarks/speed_probe.py --data_dir=../shared/data/glue --rounds=30

Prints one JSON line per round (the probe's milliseconds and its own wall seconds, the training's CPU seconds per
step) and a summary line: how much the probe and the training each vary between rounds (the sd of their logs, as
a share), their correlation over the rounds (Pearson's r with Fisher's z interval: `stats.within_group_correlation`
with one group) and what one probe costs on the wall clock. A round lasts seconds, so this shows how precise the
probe is and whether it moves with training from one round to the next; whether it follows the drift of hours is
checked on the studies' own runs (the adaptive-freezing report's section on the machine's drift).
benchmarks/README.md has the measured numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")  # one run per core, as the studies pin them
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from freeze_measure_overhead import build  # noqa: E402  (beside this file: a GLUE task built as a run builds it)

from tf_transfer.core import machine, stats  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", required=True, help="GLUE folder in the original TSV layout")
    parser.add_argument("--task", default="mrpc")
    parser.add_argument("--steps", type=int, default=4, help="training steps per round")
    parser.add_argument("--rounds", type=int, default=30, help="probe-then-train rounds")
    parser.add_argument("--batch_size", type=int, default=32)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rounds < 4:
        parser.exit(2, "error: --steps must be 1 or more and --rounds 4 or more (a correlation's interval needs "
                       "4 rounds)\n")
    return args


def spread(values) -> float:
    """The sd of the logs, as a share (0.05: about 5%)."""
    return float(np.expm1(np.std(np.log(values), ddof=1)))


def main(argv=None) -> None:
    args = parse_args(argv)
    from tf_transfer.training import engine  # imports TensorFlow: not before the arguments are checked

    task = build(args.task, args.data_dir, "freeze", args.batch_size * (args.steps + 3), args.batch_size)
    plan = task.feed.plan(1)
    warm, timed = plan[:3], plan[3:3 + args.steps]
    task.model.fit(task.feed.dataset(warm), epochs=1, verbose=0, shuffle=False)  # traces the step
    budget_s = engine.PROBE_MAX_S  # what an epoch of 100 s or more gives the probe
    machine.speed_probe(budget_s)  # its first call in a process creates its operands
    probes, steps, costs = [], [], []
    for number in range(args.rounds):
        start = time.perf_counter()
        probes.append(machine.speed_probe(budget_s))
        costs.append(time.perf_counter() - start)
        cpu_start = machine.cpu_seconds()
        task.model.fit(task.feed.dataset(timed), epochs=1, verbose=0, shuffle=False)
        steps.append((machine.cpu_seconds() - cpu_start) / len(timed))
        print(json.dumps({"round": number, "speed_probe_cpu_ms": probes[-1], "probe_wall_s": costs[-1],
                          "step_cpu_s": steps[-1]}), flush=True)
    r = stats.within_group_correlation(np.log(steps), np.log(probes), [0] * args.rounds)
    print(json.dumps({"task": args.task, "steps": len(timed), "batch_size": args.batch_size, "rounds": args.rounds,
                      "probe_budget_s": budget_s, "median_probe_ms": float(np.median(probes)),
                      "probe_spread": spread(probes), "median_step_cpu_s": float(np.median(steps)),
                      "step_spread": spread(steps), "r": r.estimate, "r_95": [r.low, r.high],
                      "median_probe_wall_s": float(np.median(costs)), "machine": machine.describe()}))


if __name__ == "__main__":
    main()
