"""A second regression file beside the first-run benchmark's STS-B: is the default's miss there about regression or
about STS-B's sentence pairs? Added after the benchmark, so it takes no part in choosing the default.

- `sst5_score`: the benchmark's `sst5` files (`make_files.py`) read as scores, their 0-4 labels with `--regression`,
  by the benchmark's protocol (`study.PROTOCOL`) at its compared seeds: the first run's default (the last 2 blocks
  over the cache at 3e-4), the last 3 at 1e-4, and full fine-tuning at 5e-5, the rate a first run gives
  `--trainable_layers=all` (not searched on this file, as a user's first run does not search it).
- `stsb`: the last 3 at 1e-4 at the compared seeds, against the benchmark's own full fine-tuning and default runs.

Each run is its own process pinned to one core, recorded as the benchmark's are (`study.run_job`); the report is
each route's test Spearman correlation (points) against full fine-tuning, seed-paired 95% t-intervals, and its share
of full fine-tuning's wall time (the geometric mean of the per-seed ratios).

    taskset -c 0 python benchmarks/first_run/regression_check.py run --data=/work/first_run/data &
    taskset -c 1 python benchmarks/first_run/regression_check.py run --data=/work/first_run/data &
    python benchmarks/first_run/regression_check.py report
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402  (one run's facts, the paired share, the verdict against the target)
import study  # noqa: E402  (the protocol, the routes, the runner)

from tf_transfer.core import stats  # noqa: E402

RUNS = os.path.join(study.ROOT, "reports/first_run/regression_check")
# file: (the data files it reads, text columns, label column)
FILES = {"sst5_score": ("sst5", ("sentence",), "sentiment"), "stsb": ("stsb", ("sentence1", "sentence2"), "score")}
FULL, DEFAULT, LAST_3 = study.full(5e-5), study.cached(2, 3e-4), study.cached(3, 1e-4)
ROUTES = [FULL, DEFAULT, LAST_3]  # on each file
# The routes the benchmark itself ran at the compared seeds, read from its runs.
FROM_BENCHMARK = {("stsb", FULL), ("stsb", DEFAULT)}


def jobs() -> list:
    return [(file, route, seed) for seed in study.COMPARED_SEEDS for file in FILES for route in ROUTES
            if (file, route) not in FROM_BENCHMARK]


def command(data: str, file: str, route: str, seed: int, out: str) -> list:
    source, columns, label = FILES[file]
    return [sys.executable, "-m", "tf_transfer.glue", f"--train_file={os.path.join(data, f'{source}_train.csv')}",
            f"--test_file={os.path.join(data, f'{source}_test.csv')}", f"--text_column_names={','.join(columns)}",
            f"--label_column_name={label}", "--regression", f"--seed={seed}", f"--output_dir={out}",
            f"--cache_dir={os.path.join(os.path.dirname(data), 'cache')}", *study.PROTOCOL, *study.route_flags(route)]


def table(runs: str, benchmark_runs: str) -> list:
    lines = ["| file | route | test Spearman (points), seeds 1-3 | vs full fine-tuning [95%] | "
             "share of its wall time [95%] | verdict (within 1 point at <= 40%) |", "|---|---|---|---|---|---|"]
    contended = []
    for file in FILES:
        folders = {route: benchmark_runs for name, route in FROM_BENCHMARK if name == file}
        pairs, mixed = report.compared(runs, file, ROUTES, folders)  # every route at a seed, on one kind of machine
        if mixed:
            lines.append(f"| {file} | seeds {', '.join(map(str, sorted(mixed)))} ran on several kinds of machine: "
                         f"{'; '.join(sorted({k for kinds in mixed.values() for k in kinds}))} | | | | |")
        if len(pairs) < len(study.COMPARED_SEEDS):
            lines.append(f"| {file} | not every run has completed on one kind of machine | | | | |")
            continue
        facts = {route: [pairs[seed][route] for seed in study.COMPARED_SEEDS] for route in ROUTES}
        reference = facts[FULL]
        for route in ROUTES:
            scores = ", ".join(f"{f['score']:.1f}" for f in facts[route])
            if route == FULL:
                lines.append(f"| {file} | {report.route_label(route)} | {scores} | reference | 100% | |")
                continue
            score = stats.paired_difference([f["score"] for f in facts[route]], [f["score"] for f in reference])
            share = report.paired_share(facts[route], reference)
            lines.append(f"| {file} | {report.route_label(route)} | {scores} | {report.interval_text(score)} | "
                         f"{report.share_text(share)} | "
                         f"{report.target_verdict(score, share)} |")
        contended += [f"{file} {report.route_label(route)} seed {seed}" for route in ROUTES
                      for seed, f in zip(study.COMPARED_SEEDS, facts[route]) if f["contended"]]
    if contended:
        lines += ["", f"Contended runs (an epoch below {report.CONTENDED:.0%} CPU): {', '.join(contended)}."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("run", "report"))
    parser.add_argument("--data", help="the folder make_files.py wrote (run only)")
    parser.add_argument("--runs", default=RUNS)
    parser.add_argument("--benchmark_runs", default=os.path.join(study.ROOT, "reports/first_run/runs"))
    args = parser.parse_args()
    if args.action == "run":
        study.check_data(parser, args.data, {source for source, _, _ in FILES.values()})
        for file, route, seed in jobs():
            study.run_job(args.data, args.runs, file, route, seed, make_command=command)
    else:
        print("\n".join(table(args.runs, args.benchmark_runs)))


if __name__ == "__main__":
    main()
