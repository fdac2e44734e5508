"""The sweep on the first-run benchmark's files: `python -m tf_transfer.sweep --budget=30m` on each 6,000-row file
(`make_files.py`), run alone on the machine, one file after another. For each: what it said before training (does
an answer over all its candidates fit the budget?), what it took (wall time; the target is an end within 33
minutes), how it ended, what it recommended, and whether that recommendation is on the benchmark's front on the
same file: the search's (seed 0: best validation score against CPU seconds) and the compared seeds' (1-3: mean test
score against mean wall seconds, where the route ran at them; the regression check's runs included).

    python benchmarks/first_run/sweep_check.py run --data=DATA     # about 30 minutes a file, 2 hours for all four
    python benchmarks/first_run/sweep_check.py report              # the table, every kind of machine it ran on

A file's check is kept per kind of machine (`avx512`, `avx2` or `other`, by the CPU's features) in
`reports/first_run/sweeps/<file>-<kind>/`: `check.json` (the sweep's first line, wall and CPU seconds, how it
ended, the commit, the machine) beside the sweep's own report (`README.md`, `candidates.csv`); the sweep's runs stay
in `--work` (default: `sweeps/` beside `DATA`). A file already checked on this kind of machine is not run again.
Nothing else should run meanwhile: the sweep plans for, and uses, every core.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402  (the benchmark's search runs, the front)
import study  # noqa: E402  (the files, their columns, the route names)

CHECKS = os.path.join(study.ROOT, "reports/first_run/sweeps")
BUDGET = "30m"
ENDS_WITHIN_S = 33 * 60  # the mark: the 30-minute budget and 10% for start-up and the last epoch's scores
KEPT = ("README.md", "candidates.csv")  # of the sweep's report folder, committed beside check.json


def kind() -> str:
    """`avx512`, `avx2` or `other`: the vector units the sweep's speed follows (a check names its CPU too)."""
    from tf_transfer.core import machine

    isa = machine.describe()["isa"]
    return "avx512" if "avx512f" in isa else "avx2" if "avx2" in isa else "other"


def command(data: str, file: str, work: str) -> list:
    columns, label, regression = study.FILES[file]
    return [sys.executable, "-m", "tf_transfer.sweep", f"--train_file={os.path.join(data, f'{file}_train.csv')}",
            f"--text_column_names={','.join(columns)}", f"--label_column_name={label}",
            *(["--regression"] if regression else []), f"--budget={BUDGET}", f"--runs_dir={work}"]


def said(output: str) -> dict:
    """The sweep's first line and how it ended, read from its output."""
    first = next((line for line in output.splitlines() if line.startswith("[sweep] an answer over all")), None)
    fits = None if first is None else ("likely" if "is enough in the first case" in first else
                                       "yes" if " is enough" in first else "no")
    if fits in ("yes", "likely") and "to spare" in first:  # within what a plan may fall short of its sweep
        fits += ", little to spare"
    ended = next((line for line in output.splitlines() if line.startswith("sweep done")
                  or line.startswith("sweep stopped")), None)
    recommended = next((line for line in output.splitlines() if line.startswith("Recommended: ")), None)
    return {"said": first, "fits_said": fits, "ended": ended,
            "recommended": recommended and recommended.split(": ")[1]}


def check(data: str, file: str, work: str, checks: str, make_command=command) -> None:
    out = os.path.join(checks, f"{file}-{kind()}")
    if os.path.exists(os.path.join(out, "check.json")):
        return
    work = os.path.join(work, file)
    shutil.rmtree(work, ignore_errors=True)  # an unfinished check starts afresh: its time is the whole sweep's
    os.makedirs(work)
    print(f"{time.strftime('%H:%M:%S')} {file}: the sweep starts (log: {work}/log.txt)", flush=True)
    before, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    with open(os.path.join(work, "log.txt"), "w") as log:
        status = subprocess.call(make_command(data, file, work), stdout=log, stderr=subprocess.STDOUT,
                                 cwd=study.ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    from tf_transfer.core import machine

    with open(os.path.join(work, "log.txt")) as f:
        record = said(f.read())
    record.update(file=file, exit_status=status, wall_s=time.perf_counter() - wall, budget=BUDGET,
                  cpu_s=(after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
                  commit=_commit(), machine=machine.describe(), finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    os.makedirs(out, exist_ok=True)
    for folder in glob.glob(os.path.join(work, "sweep", "*")):
        for name in KEPT:
            if os.path.exists(os.path.join(folder, name)):
                shutil.copy(os.path.join(folder, name), out)
    with open(os.path.join(out, "check.json" if status == 0 else "failed.json"), "w") as f:
        json.dump(record, f, indent=1)  # a failed check is run again by the next `run`: its log says why
    if status == 0 and os.path.exists(os.path.join(out, "failed.json")):
        os.remove(os.path.join(out, "failed.json"))  # an earlier attempt's
    print(f"{time.strftime('%H:%M:%S')} {file}: exit {status}, {record['wall_s'] / 60:.1f} min; "
          f"{record['said']}; {record['ended']}", flush=True)


def _commit() -> str:
    try:
        done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=study.ROOT, capture_output=True,
                              text=True)
    except OSError:  # no git: a copy of the tree
        return "unknown"
    return done.stdout.strip() or "unknown"


def benchmark_route(candidate: str):
    """The benchmark's route of a sweep candidate (`freeze_k3_lr0.0001` -> `k3c_lr1e-04`); None for one it never
    ran (LoRA, BitFit)."""
    found = re.fullmatch(r"freeze_k(all|\d+)_lr([0-9.e-]+)", candidate or "")
    if not found:
        return None
    rate = float(found.group(2))
    return study.full(rate) if found.group(1) == "all" else study.cached(int(found.group(1)), rate)


def compared_points(runs_folders: list, file: str) -> dict:
    """`{route: (mean wall seconds, mean test score, kind of machine)}` of the routes run at every compared seed on
    `file`, in any of `runs_folders` (the benchmark's runs, the regression check's); `None` for a route whose seeds ran
    on several kinds of machine (`study.machine_kind`): its mean time is no one machine's. A route run at those
    seeds in two of the folders is refused (`ValueError`): which one's runs it stands for is the user's choice."""
    points, found_in = {}, {}
    for runs in runs_folders:
        for route in sorted(os.listdir(os.path.join(runs, file))) if os.path.isdir(os.path.join(runs, file)) else []:
            facts = [report.run_facts(runs, file, route, seed) for seed in study.COMPARED_SEEDS]
            if all(facts):
                if route in found_in:
                    raise ValueError(f"{file}: {route} has runs at seeds {study.COMPARED_SEEDS} in both "
                                     f"{found_in[route]} and {runs}: keep one (move the other aside)")
                found_in[route] = runs
                kinds = {study.machine_kind(runs, file, route, seed) for seed in study.COMPARED_SEEDS}
                points[route] = (sum(f["wall_s"] for f in facts) / len(facts),
                                 sum(f["score"] for f in facts) / len(facts), kinds.pop()) if len(kinds) == 1 else None
    return points


def _placed(route: str, points: dict, seconds: str) -> str:
    """"yes" where no other route of `points` (`{route: (seconds, score, ...)}`) scored at least as well in no more
    time, one of them strictly; else "no" and the one that did."""
    cost, score = points[route][:2]
    better = [r for r, (c, s, *_) in points.items()
              if r != route and c <= cost and s >= score and (c, s) != (cost, score)]
    if better:
        c, s = points[better[0]][:2]
        return f"no: {report.route_label(better[0])} {s:.1f} in {c:.0f} {seconds}"
    return f"yes ({score:.1f} in {cost:.0f} {seconds})"


def on_front(runs_folders: list, file: str, candidate: str) -> str:
    """Where a recommendation sits against the benchmark's routes on `file`, on two fronts: the search's (seed 0,
    best validation score against CPU seconds, every route searched) and the compared seeds' (1-3, mean test score
    against mean wall seconds, the routes run there on the same kind of machine as it), in words."""
    route = benchmark_route(candidate)
    search = report.search_points(runs_folders[0], file)
    if route not in search:
        return f"not among the benchmark's routes ({candidate})" if candidate else "nothing recommended"
    compared = compared_points(runs_folders, file)
    if route not in compared:
        placed = "not run there"
    elif compared[route] is None:
        placed = "its seeds ran on several kinds of machine"
    else:  # times compare on one kind of machine only
        placed = _placed(route, {r: p for r, p in compared.items() if p and p[2] == compared[route][2]}, "s")
    return f"search: {_placed(route, search, 'CPU s')}; compared seeds: {placed}"


def table(checks: str, runs_folders: list) -> list:
    lines = ["| file | machine | commit | said before training | all fit said | took | within 33 min | ended | "
             "recommended | on the benchmark's front (points in seconds) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for path in sorted(glob.glob(os.path.join(checks, "*", "check.json"))):
        with open(path) as f:
            c = json.load(f)
        needs = re.search(r"needs about ([^;]*?)(?: on \d+ workers| on 1 worker)", c["said"] or "")
        lines.append(
            f"| {c['file']} | {c['machine']['cpu']} ({os.path.basename(os.path.dirname(path)).split('-')[-1]}) | "
            f"{c['commit']} | {needs.group(1) if needs else c['said']} | {c['fits_said']} | "
            f"{int(c['wall_s'] // 60)}:{int(c['wall_s'] % 60):02d} | {'yes' if c['wall_s'] <= ENDS_WITHIN_S else 'no'} "
            f"| {(c['ended'] or '').split(';')[0]} | {c['recommended']} | "
            f"{on_front(runs_folders, c['file'], c['recommended'])} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("run", "report"))
    parser.add_argument("--data", help="the folder make_files.py wrote (run only)")
    parser.add_argument("--files", default=",".join(study.FILES), help="comma-separated, of " + ",".join(study.FILES))
    parser.add_argument("--work", help="where the sweeps' runs go (default: sweeps/ beside --data)")
    parser.add_argument("--checks", default=CHECKS)
    parser.add_argument("--benchmark_runs", default=os.path.join(study.ROOT, "reports/first_run/runs"))
    parser.add_argument("--regression_runs", default=os.path.join(study.ROOT, "reports/first_run/regression_check"))
    args = parser.parse_args()
    files = args.files.split(",")
    if set(files) - set(study.FILES):
        parser.error(f"--files: no file {sorted(set(files) - set(study.FILES))[0]!r}; give some of "
                     f"{','.join(study.FILES)}")
    if args.action == "run":
        study.check_data(parser, args.data, files)
        for file in files:
            work = args.work or os.path.join(os.path.dirname(os.path.abspath(args.data)), "sweeps")
            check(args.data, file, work, args.checks)
    else:
        print("\n".join(table(args.checks, [args.benchmark_runs, args.regression_runs])))


if __name__ == "__main__":
    main()
