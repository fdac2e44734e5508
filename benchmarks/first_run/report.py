"""The first-run benchmark's report (`study.py`'s runs): per file, each route's test score against full fine-tuning
at its searched rate (seed-paired 95% t-intervals), its wall and CPU time to the end and to the best epoch, its peak
memory, and a figure of score against time (the front); then the search that chose the candidate.

    python benchmarks/first_run/report.py --runs=reports/first_run/runs --out=reports/first_run

Writes `README.md`'s generated part (`results.md`), `front.png` (the compared seeds) and `search_front.png` (the
search at seed 0) in `--out`. Only runs that completed count; a
(file, seed) whose routes did not all complete, or ran on more than one kind of machine, is left out of the pairs
(the second listed, to rerun on one).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import study  # noqa: E402  (the design: files, routes, seeds, the searched rate, the chosen candidate)

from tf_transfer.core import planning, stats  # noqa: E402

CONTENDED = 0.9  # an epoch below this CPU/wall ratio, on a run pinned to one core, had to share it
TARGET_POINTS, TARGET_SHARE = 1.0, 0.40


def route_label(route: str) -> str:
    if route.startswith("hf_"):
        return f"HF Trainer, all blocks, lr {float(route.split('_lr')[1]):g}"
    kind, rate = route.split("_lr")
    if kind == "full":
        return f"full fine-tuning, lr {float(rate):g}"
    return f"last {kind[1:-1]} over the cache, lr {float(rate):g}"


def run_facts(runs: str, file: str, route: str, seed: int):
    """One completed run's numbers (scores in points), or None."""
    folder = os.path.join(runs, file, route, f"seed{seed}")
    summary, process = study.read(os.path.join(folder, "summary.json")), study.read(
        os.path.join(folder, "process.json"))
    if not summary or not summary.get("completed") or not process:
        return None
    metric, epochs = summary["metric"], summary["epochs"]
    best = summary["best_epoch"]
    scale = -1.0 if metric == "mse" else 100.0
    ratios = [e["epoch_cpu_s"] / e["epoch_time_s"] for e in epochs if e.get("epoch_time_s")]
    to_best = sum(e["epoch_time_s"] for e in epochs[:best]) + (summary.get("cache_build_s") or 0.0)
    return {"score": scale * epochs[best - 1]["test"][metric], "validation": scale * epochs[best - 1]["val"][metric],
            "wall_s": process["wall_s"], "cpu_s": process["cpu_s"], "to_best_s": to_best, "epochs": len(epochs),
            "best_epoch": best, "peak_mb": summary.get("peak_memory_mb"), "metric": metric,
            "contended": min(ratios) < CONTENDED if ratios else False}


def compared(runs: str, file: str, routes: list, folders: Optional[dict] = None,
             seeds: Optional[list] = None) -> tuple:
    """`({seed: {route: facts}}, mixed)`: the compared seeds (or `seeds`) whose every route completed on one kind of
    machine, and `{seed: kinds}` of those whose routes completed on several (a pair's times compare only on one). A
    route's runs are in `runs`, or in `folders[route]` (another study's runs paired with these)."""
    found, mixed = {}, {}
    folder = lambda route: (folders or {}).get(route, runs)  # noqa: E731
    for seed in seeds or study.COMPARED_SEEDS:
        facts = {route: run_facts(folder(route), file, route, seed) for route in routes}
        if all(facts.values()):
            kinds = sorted({study.machine_kind(folder(route), file, route, seed) for route in routes})
            if len(kinds) > 1:
                mixed[seed] = kinds
            else:
                found[seed] = facts
    return found, mixed


def interval_text(interval, digits=1, scale=1.0, pct=False) -> str:
    """An estimate with its interval, signed (`+1.2 [-0.3, +2.7]`), or the estimate alone where there is none."""
    if np.isnan(interval.low):
        return f"{interval.estimate * scale:+.{digits}f}{'%' if pct else ''}"
    unit = "%" if pct else ""
    return (f"{interval.estimate * scale:+.{digits}f}{unit} [{interval.low * scale:+.{digits}f}{unit}, "
            f"{interval.high * scale:+.{digits}f}{unit}]")


def share_text(share) -> str:
    """A share of full fine-tuning's time with its interval, in percent (`39% [26%, 59%]`)."""
    return interval_text(share, 0, 100, pct=True).replace("+", "")


def paired_share(got: list, ref: list, key: str = "wall_s"):
    """The seed-paired share of full fine-tuning's time (`key`): the geometric mean of the per-seed ratios, with its
    interval on the log scale (a t-interval on the ratios themselves can fall below zero at 2 seeds)."""
    return stats.paired_ratio([g[key] for g in got], [r[key] for r in ref])


def target_verdict(score, share) -> str:
    """Our own target (within 1 point of full fine-tuning at no more than 40% of its wall time): met, missed or
    inconclusive, on the intervals' bounds."""
    if np.isnan(score.low):
        return "inconclusive (too few seeds for an interval)"
    if score.high < -TARGET_POINTS or share.low > TARGET_SHARE:
        return "target missed"
    if score.low > -TARGET_POINTS and share.high <= TARGET_SHARE:
        return "target met"
    return "inconclusive"


def seeds_needed(sd: float, most: int = 30) -> str:
    """How many seeds an interval of +-1 point needs at the paired differences' SD seen so far (the t-interval's
    expected half-width, `planning.seeds_for_margin`): what would decide an inconclusive verdict."""
    needed = planning.seeds_for_margin(sd, TARGET_POINTS, most=most)
    return (f"at the paired differences' SD so far ({sd:.1f} points), an interval of +-{TARGET_POINTS:g} point needs "
            + (f"about {needed} seeds" if needed else f"more than {most} seeds"))


def verdict_line(route: str, score, share, cpu_share, uncontended=None, sd=None) -> str:
    """A route's verdict on our target with the intervals it rests on (and, where inconclusive, the seeds that
    would decide it)."""
    verdict = target_verdict(score, share)
    return (f"{route_label(route)}: {verdict} (within {TARGET_POINTS:g} point at no more than {TARGET_SHARE:.0%} of "
            f"full fine-tuning's wall time): {interval_text(score)} points at {share_text(share)} of its wall time "
            f"({share_text(cpu_share)} of its CPU time"
            + (f"; {share_text(uncontended)} of its wall time without the contended pairs" if uncontended else "")
            + ")" + (f"; {seeds_needed(sd)}" if verdict == "inconclusive" and sd is not None else ""))


def second_look(runs: str, file: str, route: str, reference: str) -> Optional[str]:
    """The chosen candidate against full fine-tuning over the compared seeds and the file's `study.POWER_SEEDS`
    (added after the first look left it inconclusive), or None where the file has none. A second look: its interval
    is not widened for having looked first, which the line says."""
    added = study.POWER_SEEDS.get(file)
    if not added:
        return None
    every = study.COMPARED_SEEDS + added
    pairs, _ = compared(runs, file, [reference, route], seeds=every)  # a seed on two kinds of machine: not counted
    looked = (f"Seeds {every[0]}-{every[-1]}, the last {len(added)} added after seeds {study.COMPARED_SEEDS[0]}-"
              f"{study.COMPARED_SEEDS[-1]} left the verdict inconclusive (a second look: the interval is not widened "
              f"for it)")
    if len(pairs) < len(every):
        return f"{looked}: {len(pairs)} of {len(every)} seeds completed on one kind of machine so far."
    got, ref = [pairs[s][route] for s in every], [pairs[s][reference] for s in every]
    score = stats.paired_difference([g["score"] for g in got], [r["score"] for r in ref])
    contended = [str(s) for s in every if pairs[s][route]["contended"] or pairs[s][reference]["contended"]]
    said = verdict_line(route, score, paired_share(got, ref), paired_share(got, ref, "cpu_s"),
                        sd=score.se * np.sqrt(score.n))
    return (f"{looked}: {said}"
            + (f" (contended pairs: seeds {', '.join(contended)})" if contended else ""))


def file_table(runs: str, file: str, routes: list, reference: str) -> tuple:
    pairs, mixed = compared(runs, file, routes)
    lines = [f"| route | seeds | test score (points) | vs full fine-tuning [95%] | wall to the end (s) | "
             f"share of full's wall [95%] | CPU s | training s to best epoch | peak memory (MB) |",
             "|---|---|---|---|---|---|---|---|---|"]
    points, verdicts = {}, {}
    for route in routes:
        seeds = sorted(pairs)
        if not seeds:
            continue
        got = [pairs[s][route] for s in seeds]
        ref = [pairs[s][reference] for s in seeds]
        score = stats.paired_difference([g["score"] for g in got], [r["score"] for r in ref])
        share = paired_share(got, ref)
        mean = lambda key: float(np.mean([g[key] for g in got]))
        points[route] = (mean("wall_s"), mean("score"), np.std([g["score"] for g in got], ddof=1)
                         if len(got) > 1 else 0.0)
        is_ref = route == reference
        lines.append(f"| {route_label(route)}{' (reference)' if is_ref else ''} | {len(seeds)} | {mean('score'):.1f} | "
                     f"{'reference' if is_ref else interval_text(score)} | {mean('wall_s'):.0f} | "
                     f"{'100%' if is_ref else share_text(share)} | {mean('cpu_s'):.0f} | "
                     f"{mean('to_best_s'):.0f} | {mean('peak_mb'):.0f} |")
        if not is_ref and not route.startswith("hf_"):
            alone = [s for s in seeds if not (pairs[s][route]["contended"] or pairs[s][reference]["contended"])]
            uncontended = paired_share([pairs[s][route] for s in alone], [pairs[s][reference] for s in alone]) if (
                alone and len(alone) < len(seeds)) else None
            sd = score.se * np.sqrt(score.n)  # the paired differences' SD, from the interval's standard error
            verdicts[route] = (score, share, paired_share(got, ref, "cpu_s"), uncontended, sd)
    contended = [f"{route_label(r)} seed {s}" for s in sorted(pairs) for r in routes if pairs[s][r]["contended"]]
    return lines, points, verdicts, contended, sorted(pairs), mixed


# The search's routes at seed 0: full fine-tuning at each rate, then the earlier default and the candidates.
PARTIAL_ROUTES = [study.OLD_DEFAULT] + [study.cached(k, lr) for k, lr in study.CANDIDATES]
SEARCH_ROUTES = [study.full(lr) for lr in study.FULL_RATES + [study.FULL_BEYOND]] + PARTIAL_ROUTES


def front_offers(runs: str, file: str) -> str:
    """What the search (seed 0, validation) offered on `file` against full fine-tuning at its searched rate: the
    fastest route within the target's points, and the closest one within its share of the time (CPU seconds)."""
    found = study.search_against_full(runs, file, PARTIAL_ROUTES)
    if found is None:
        return "the search is unfinished"
    close = [r for r, (d, _) in found.items() if d >= -TARGET_POINTS]
    fast = [r for r, (_, s) in found.items() if s <= TARGET_SHARE]
    said = []
    if close:
        r = min(close, key=lambda r: found[r][1])
        said.append(f"{route_label(r)} within {TARGET_POINTS:g} point ({found[r][0]:+.1f}) at {found[r][1]:.0%} "
                    "of full fine-tuning's CPU time")
    else:
        said.append(f"no candidate within {TARGET_POINTS:g} point")
    if fast:
        r = max(fast, key=lambda r: found[r][0])
        said.append(f"within {TARGET_SHARE:.0%} of its time, at best {route_label(r)} ({found[r][0]:+.1f} points at "
                    f"{found[r][1]:.0%})")
    return "; ".join(said) + " (seed 0, validation)"


def search_points(runs: str, file: str) -> dict:
    """`{route: (CPU seconds, best validation score, 0)}` of the search's completed runs on `file` (seed 0)."""
    found = {route: run_facts(runs, file, route, study.SEARCH_SEED) for route in SEARCH_ROUTES}
    return {route: (facts["cpu_s"], facts["validation"], 0.0) for route, facts in found.items() if facts}


def search_table(runs: str, file: str) -> list:
    rate = study.searched_full_rate(runs, file)
    full_cpu = None
    if rate:
        facts = run_facts(runs, file, study.full(rate), study.SEARCH_SEED)
        full_cpu = facts and facts["cpu_s"]
    lines = ["| route (seed 0) | best validation (points) | epochs (best) | wall (s) | CPU (s) | share of full's CPU |",
             "|---|---|---|---|---|---|"]
    for route in SEARCH_ROUTES:
        facts = run_facts(runs, file, route, study.SEARCH_SEED)
        if not facts:
            continue
        mark = " (searched rate)" if rate and route == study.full(rate) else ""
        share = f"{100 * facts['cpu_s'] / full_cpu:.0f}%" if full_cpu else "n/a"
        lines.append(f"| {route_label(route)}{mark} | {facts['validation']:.1f} | {facts['epochs']} "
                     f"({facts['best_epoch']}) | {facts['wall_s']:.0f} | {facts['cpu_s']:.0f} | {share} |")
    return lines


def compared_label(route: str) -> str:
    """A compared route by its role: full fine-tuning's searched rate differs by file, so one colour for it (and
    for the peer at that rate) on every panel."""
    if route.startswith("full"):
        return "full fine-tuning at its searched rate"
    if route.startswith("hf_"):
        return "HF Trainer, all blocks, at that rate"
    return route_label(route)


def figure(fronts: dict, path: str, xlabel: str = "wall time to the end, minutes (one core)",
           ylabel: str = "test score, points", label=route_label, note: str = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(fronts), figsize=(4.2 * len(fronts), 4.0), squeeze=False)
    # One colour per label on every panel (a panel lacking a route would shift the colour cycle).
    labels = sorted({label(route) for points in fronts.values() for route in points})
    colors = {name: plt.get_cmap("tab10")(i % 10) for i, name in enumerate(labels)}
    for ax, (file, points) in zip(axes[0], fronts.items()):
        for route in sorted(points, key=label):
            wall, score, spread = points[route]
            ax.errorbar(wall / 60, score, yerr=spread, fmt="o", capsize=3, color=colors[label(route)],
                        label=label(route))
        ax.set_title(file)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    shown = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            shown.setdefault(label, handle)
    fig.legend(list(shown.values()), list(shown), loc="lower center", ncol=3, fontsize=8, title=note,
               title_fontsize=8)
    fig.tight_layout(rect=(0, 0.2, 1, 1))
    fig.savefig(path, dpi=110)


def machines_line(runs: str) -> str:
    """How many runs completed, on which kinds of machine, and when (the first and last finish)."""
    kinds, finished = {}, []
    for file, route, seed in study.jobs(runs):
        summary = route and study.done(runs, file, route, seed)
        if summary:
            kind = study.machine_kind(runs, file, route, seed)
            kinds[kind] = kinds.get(kind, 0) + 1
            finished.append((summary.get("finished_at") or (study.read(os.path.join(
                runs, file, route, f"seed{seed}", "process.json")) or {}).get("finished_at") or "?")[:16])
    if not kinds:
        return "No run has completed yet."
    return (f"Runs completed: {sum(kinds.values())}, on {'; '.join(f'{k}: {n}' for k, n in kinds.items())}; "
            f"finished {min(finished)} to {max(finished)} UTC. Each job ran pinned to one core.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default=os.path.join(study.ROOT, "reports/first_run/runs"))
    parser.add_argument("--out", default=os.path.join(study.ROOT, "reports/first_run"))
    args = parser.parse_args()
    choice = study.chosen_candidate(args.runs)
    chosen = route_label(choice) if choice else "not yet (search unfinished)"
    out = [f"New default chosen on the search seed: **{chosen}**",
           "", machines_line(args.runs), ""]
    fronts = {}
    for file in study.FILES:
        rate = study.searched_full_rate(args.runs, file)
        out += [f"## {file}", ""]
        if rate:
            routes = [study.full(rate), f"hf_lr{rate:.0e}", study.OLD_DEFAULT] + (
                [choice] if choice and choice != study.OLD_DEFAULT else [])
            lines, points, verdicts, contended, seeds, mixed = file_table(args.runs, file, routes,
                                                                          study.full(rate))
            if seeds:
                out += [f"Compared seeds: {', '.join(map(str, seeds))}. Test score at the best validation epoch; "
                        "wall and CPU seconds of the whole process (start-up, cache builds and scoring included).",
                        "", *lines, ""]
                for route, (score, share, cpu_share, uncontended, sd) in verdicts.items():
                    out.append(f"- {verdict_line(route, score, share, cpu_share, uncontended, sd)}")
                    look = route == choice and second_look(args.runs, file, route, study.full(rate))
                    if look:
                        out.append(f"- {look}")
                    if target_verdict(score, share) != "target met" and route == choice:
                        out.append(f"- Where the new default is not shown to meet the target here, the search offered: "
                                   f"{front_offers(args.runs, file)}")
                if contended:
                    out.append(f"- Contended runs (an epoch below {CONTENDED:.0%} CPU): {', '.join(contended)}")
                out.append("")
                fronts[file] = points
            else:
                out += ["No compared seed has completed yet.", ""]
            for seed, kinds in sorted(mixed.items()):
                out += [f"Seed {seed} left out: its runs ran on {' and '.join(kinds)}; rerun them on one.", ""]
        out += [f"Search (seed 0, validation split of the training file):", "", *search_table(args.runs, file), ""]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(out) + "\n")
    if fronts:
        figure(fronts, os.path.join(args.out, "front.png"), label=compared_label,
               note="the means over the compared seeds; bars: their standard deviation")
    searched = {file: points for file in study.FILES if (points := search_points(args.runs, file))}
    if searched:  # the search's front: what the choice was made on (seed 0, validation, CPU seconds)
        figure(searched, os.path.join(args.out, "search_front.png"), "CPU time of the whole run, minutes (seed 0)",
               "best validation score, points")
    print(f"wrote {os.path.join(args.out, 'results.md')}")


if __name__ == "__main__":
    main()
