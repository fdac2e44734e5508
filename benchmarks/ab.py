"""A/B of one change to our training step: two `tf_transfer.bench` commands, their timed repeats interleaved.

Each side is one process (built and warmed up once, the other side waiting), then `--rounds` rounds of one timed
repeat each, A then B, never overlapping (the protocol of benchmarks/fair.py). Prints the medians and the median of
the per-round ratios B / A, per wall second and per CPU second, and each side's loss-free facts (padding,
warm-up); run from the repository root:

    python benchmarks/ab.py --data_dir=../shared/data/glue --b="--jit_compile=true"
    python benchmarks/ab.py --data_dir=../shared/data/glue --common="--trainable_layers=2 --cache_frozen" \\
        --a_env=TF_ENABLE_ONEDNN_OPTS=1 --b_env=TF_ENABLE_ONEDNN_OPTS=0

Whether B computes the same numbers as A is not measured here: the change's own test says (docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fair  # noqa: E402  (beside this file)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default=os.environ.get("GLUE_DIR"), help="GLUE folder (MRPC/train.tsv).")
    parser.add_argument("--common", default="--trainable_layers=all", help="Bench flags both sides get.")
    parser.add_argument("--a", default="", help="Bench flags of side A (the baseline).")
    parser.add_argument("--b", default="", help="Bench flags of side B (the change).")
    parser.add_argument("--a_env", default="", help="NAME=VALUE,... set for side A only.")
    parser.add_argument("--b_env", default="", help="NAME=VALUE,... set for side B only.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--warmup_steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args(argv)
    if not args.data_dir or not os.path.exists(os.path.join(args.data_dir, "MRPC", "train.tsv")):
        parser.exit(2, f"error: --data_dir={args.data_dir} has no MRPC/train.tsv: pass the GLUE folder\n")
    return args


def side(args, name: str, flags: str, env: str) -> fair.Side:
    command = (f"-m tf_transfer.bench --task=mrpc --preset=all_minilm_l6_v2_en --data_dir={args.data_dir} "
               f"--max_train_examples={fair.EXAMPLES} --batch_size=32 --steps={args.steps} "
               f"--warmup_steps={args.warmup_steps} --repeats={args.rounds} --wait_between_repeats "
               f"{args.common} {flags}")
    environment = fair.thread_env(args.threads)
    environment.update(dict(pair.split("=", 1) for pair in env.split(",") if pair))
    return fair.Side(name, [sys.executable, *command.split()], environment)


def main(argv=None) -> None:
    args = parse_args(argv)
    sides = []
    for name, flags, env in (("A", args.a, args.a_env), ("B", args.b, args.b_env)):
        sides.append(side(args, name, flags, env))
        if not sides[-1].wait_ready():
            sides[-1].result()
    for round_ in range(args.rounds):
        for one in sides:
            one.go()
            if round_ + 1 < args.rounds:
                one.wait_ready()
            else:
                one.process.stdin.close()
                one.process.wait()
    a, b = (one.result() for one in sides)
    print(f"A: {args.common} {args.a} {args.a_env}\nB: {args.common} {args.b} {args.b_env}\n"
          f"{args.threads} thread(s) a side, {args.rounds} rounds of {args.steps} steps, commit {fair.commit()}")
    for label, rates in (("examples/s", lambda r: r["train_examples_per_s_repeats"]),
                         ("examples per CPU second", fair.cpu_rates)):
        ratios = [y / x for x, y in zip(rates(a), rates(b))]
        print(f"{label}: A {statistics.median(rates(a)):.2f} {[round(r, 2) for r in rates(a)]}, "
              f"B {statistics.median(rates(b)):.2f} {[round(r, 2) for r in rates(b)]}, "
              f"B/A {statistics.median(ratios):.3f} (per round {[round(r, 3) for r in ratios]})")
    for name, result in (("A", a), ("B", b)):
        print(f"{name}: padding efficiency {result['padding_efficiency']:.3f}, warm-up {result['warmup_s']:.1f} s, "
              f"GFLOP/s {result['gflop_per_s']:.1f}, cpu utilization {result['cpu_utilization_repeats']}")


if __name__ == "__main__":
    main()
