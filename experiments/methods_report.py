"""The methods study's report (experiments/methods.py): the LoRA, BitFit and Ladder Side-Tuning claims checked first,
then score, training time, trainable weights and peak memory per method (over the tasks, then task by task), the
learning-rate searches, two Pareto figures (score against time, and against peak memory) and every run as CSV.

Scores are GLUE dev (the test set) at the epoch early stopping keeps (the best validation epoch), in points (x100) of
each task's metric; times are the runs' training time to their stopping point, the frozen-prefix cache's build
included; peak memory is each run's process peak resident set (`peak_memory_mb`), every run in its own process.
"""

from __future__ import annotations

import os
from collections import defaultdict

from tf_transfer.data.tasks import get_task
from tf_transfer.reporting import tables as reports

FULL = "full fine-tuning"
# A method "matches" full fine-tuning when its mean score over the tasks is at most this many points lower.
MATCH_POINTS = 1.0
# Ladder Side-Tuning: LoRA, adapters and BitFit "only save 26%" of full fine-tuning's memory (LST: 69%); read here as
# "at most 40%".
SMALL_SAVING = 0.40
# A task full fine-tuning "learned": its mean score this many points above the constant prediction's.
LEARNED_POINTS = 10.0


def _study():
    from experiments import methods  # the grid module imports this one

    return methods


def score(summary: dict):
    """GLUE dev score, in points, at the epoch early stopping keeps."""
    epoch = reports.best_epoch(summary)
    value = None if epoch is None else reports.test_score(epoch, summary["metric"])
    return None if value is None else 100 * value


def epoch_seconds(summary: dict, clock: str):
    key = "epoch_cpu_s" if clock == "cpu" else "epoch_time_s"
    values = [e.get(key) for e in summary["epochs"] if e.get(key) is not None]
    return sum(values) / len(values) if values else None


def cells(collected: list) -> dict:
    """`{(method, task): [entries]}` of the compared runs (the search parts are their own)."""
    methods = _study().METHODS
    found = defaultdict(list)
    for run in collected:
        if run["settings"]["part"] in methods:
            found[(run["settings"]["part"], run["settings"]["task"])].append(run)
    return found


def measures(runs: list, clock: str) -> dict:
    """Per-seed values of one cell: score, time to stop, time per epoch, peak memory; the rates that ran."""
    done = [r["summary"] for r in runs if r["summary"]]
    return {"expected": len(runs), "summaries": done,
            "score": [score(s) for s in done],
            "time": [reports.time_to_stop(s, clock) for s in done],
            "epoch": [epoch_seconds(s, clock) for s in done],
            "memory": [s.get("peak_memory_mb") for s in done],
            "lr": sorted({s["lr"] for s in done})}


def _mean(values):
    return reports.mean_std(values)[0]


def overall(table: dict, tasks: list) -> dict:
    """Per method: means over the tasks (of each task's mean over seeds) of score, of time and memory relative to full
    fine-tuning's on the same task, and of time per epoch and peak memory; `tasks` says how many tasks count."""
    result = {}
    for method in _study().METHODS:
        scores, times, memories, epochs, peaks, counted = [], [], [], [], [], []
        for task in tasks:
            mine, full = table.get((method, task)), table.get((FULL, task))
            if not mine or _mean(mine["score"]) is None or not full or _mean(full["score"]) is None:
                continue
            counted.append(task)
            scores.append(_mean(mine["score"]) - _mean(full["score"]))
            times.append(_ratio(_mean(mine["time"]), _mean(full["time"])))
            memories.append(_ratio(_mean(mine["memory"]), _mean(full["memory"])))
            epochs.append(_mean(mine["epoch"]))
            peaks.append(_mean(mine["memory"]))
        absolute = [_mean(table[(method, t)]["score"]) for t in counted]
        result[method] = {"tasks": counted, "score": _mean(absolute), "delta": _mean(scores),
                          "time_ratio": _mean(times), "memory_ratio": _mean(memories), "epoch": _mean(epochs),
                          "memory": _mean(peaks)}
    return result


def _ratio(a, b):
    return a / b if a is not None and b else None


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _points(value) -> str:
    return "n/a" if value is None else f"{value:+.1f}"


def trainable_text(table: dict, method: str, tasks: list) -> str:
    for task in tasks:
        cell = table.get((method, task))
        if cell and cell["summaries"]:
            summary = cell["summaries"][0]
            lora = (summary.get("lora") or {}).get("weights")
            share = summary["trainable_params"] / summary["total_params"]
            return (f"{summary['trainable_params']:,} ({100 * share:.2f}%)"
                    + (f", of which LoRA {lora:,}" if lora else ""))
    return "n/a"


def method_rows(table: dict, tasks: list, summary: dict) -> list:
    rows = []
    for method in _study().METHODS:
        m = summary[method]
        rates = "; ".join(f"{t} {'/'.join(f'{lr:g}' for lr in table[(method, t)]['lr'])}" for t in tasks
                          if table.get((method, t)) and table[(method, t)]["lr"])
        count = "" if len(m["tasks"]) == len(tasks) else f" ({len(m['tasks'])}/{len(tasks)} tasks)"
        rows.append([method, trainable_text(table, method, tasks), rates or "n/a",
                     "n/a" if m["score"] is None else f"{m['score']:.1f}{count}", _points(m["delta"]),
                     _pct(m["time_ratio"]), "n/a" if m["epoch"] is None else f"{m['epoch']:.1f}",
                     "n/a" if m["memory"] is None else f"{m['memory']:,.0f}", _pct(m["memory_ratio"])])
    return rows


METHOD_HEADER = ["method", "trainable weights (share)", "rate per task", "score (mean of tasks)",
                 "vs full (points)", "time to stop, vs full", "s per epoch", "peak memory (MB)", "memory vs full"]


def task_rows(table: dict, task: str, baseline) -> list:
    """One row per method, then the constant prediction's score on GLUE dev (`baseline`, None if unknown)."""
    full = table.get((FULL, task))
    rows = []
    for method in _study().METHODS:
        cell = table.get((method, task))
        if not cell:
            continue
        mean = _mean(cell["score"])
        delta = "–" if method == FULL or not full or mean is None or _mean(full["score"]) is None else \
            f"{mean - _mean(full['score']):+.1f} ({reports.p_text(reports.welch_p(cell['score'], full['score']))})"
        rows.append([method, "/".join(f"{lr:g}" for lr in cell["lr"]) or "n/a",
                     reports.cell(cell["score"], cell["expected"], digits=1) + reports.censored_mark(cell["summaries"]),
                     delta, reports.cell(cell["time"], cell["expected"], digits=0),
                     reports.cell(cell["epoch"], cell["expected"], digits=1),
                     reports.cell(cell["memory"], cell["expected"], digits=0)])
    constant = "n/a (GLUE dev not found: pass --data_dir)" if not baseline else \
        f"{100 * baseline['score']:.1f} ({baseline['note']})"
    rows.append(["majority class (constant prediction)", "–", constant, "–", "–", "–", "–"])
    return rows


TASK_HEADER = ["method", "rate", "score", "vs full, points (Welch p)", "time to stop (s)", "s per epoch",
               "peak memory (MB)"]


def _per_task(table: dict, method: str, tasks: list, key: str, form) -> str:
    parts = []
    for task in tasks:
        mine, full = table.get((method, task)), table.get((FULL, task))
        if mine and full and _mean(mine[key]) is not None and _mean(full[key]) is not None:
            parts.append(f"{task} {form(_mean(mine[key]), _mean(full[key]))} "
                         f"({reports.p_text(reports.welch_p(mine[key], full[key]))})")
    return "; ".join(parts) or "no task with both sides"


def _complete(summary: dict, methods: list, tasks: list) -> bool:
    return all(len(summary[m]["tasks"]) == len(tasks) for m in methods)


def learned(table: dict, tasks: list, baselines: dict) -> dict:
    """`{task: points}` by which full fine-tuning's mean score beats the constant prediction's on GLUE dev (tasks
    without a known baseline left out)."""
    gains = {}
    for task in tasks:
        full, base = table.get((FULL, task)), baselines.get(task)
        if full and base and _mean(full["score"]) is not None:
            gains[task] = _mean(full["score"]) - 100 * base["score"]
    return gains


def _score_claim(table, tasks, summary, method, claim, paper, gains) -> list:
    m = summary[method]
    complete = _complete(summary, [method], tasks)
    verdict = "inconclusive" if not complete or m["delta"] is None else \
        "reproduced" if m["delta"] >= -MATCH_POINTS else "not reproduced"
    learnt = [t for t in m["tasks"] if gains.get(t, 0) >= LEARNED_POINTS]
    deltas = [_mean(table[(method, t)]["score"]) - _mean(table[(FULL, t)]["score"]) for t in learnt]
    basis = (f"reproduced if the mean over the tasks is at most {MATCH_POINTS:g} point below full fine-tuning's, "
             f"each at its searched rate; per task, points (Welch on the seeds' scores): "
             + _per_task(table, method, tasks, "score", lambda a, b: f"{a - b:+.1f}")
             + (f"; on the tasks full fine-tuning learned ({LEARNED_POINTS:g}+ points above the constant prediction: "
                f"{', '.join(learnt)}) the mean is {_points(_mean(deltas))} points" if learnt else ""))
    ours = f"{_points(m['delta'])} points vs full fine-tuning (mean of {len(m['tasks'])} tasks)"
    return [claim, paper, ours, verdict, basis]


def _faster_claim(table, tasks, summary) -> list:
    method = "LoRA r8"
    ratios = [_ratio(_mean(table[(method, t)]["epoch"]), _mean(table[(FULL, t)]["epoch"]))
              for t in summary[method]["tasks"]]
    faster = [r for r in ratios if r is not None and r < 1]
    verdict = "inconclusive" if not _complete(summary, [method, FULL], tasks) else \
        "reproduced" if len(faster) == len(ratios) else "not reproduced"
    ours = f"{_pct(1 - _mean(ratios)) if ratios else 'n/a'} less time per epoch (mean of {len(ratios)} tasks)"
    basis = ("reproduced if LoRA r8 takes less time per epoch than full fine-tuning on every task (the size is the "
             "paper's, on a GPU, not tested); per task, LoRA's time per epoch as a share of full fine-tuning's (Welch "
             "on the seeds' times): "
             + _per_task(table, method, tasks, "epoch", lambda a, b: f"{100 * a / b:.0f}%"))
    return ["LoRA trains faster than full fine-tuning (no gradients for the frozen weights)",
            "25% faster on GPT-3 175B (LoRA, section 4.2)", ours, verdict, basis]


PEFT = ("LoRA r8", "BitFit")
MEMORY_BASIS = ("peak memory is the process's peak resident set on a CPU, which includes TensorFlow's own resident "
                "memory (about 1.4 GB before the first step, benchmarks/README.md), so every saving here is diluted "
                "against a GPU's model-only count; per task, peak as a share of full fine-tuning's (Welch on the "
                "seeds' peaks): ")


def _saving(summary: dict, method: str):
    ratio = summary[method]["memory_ratio"]
    return None if ratio is None else 1 - ratio


def _memory_shares(table, method: str, tasks: list) -> str:
    return f"{method}: " + _per_task(table, method, tasks, "memory", lambda a, b: f"{100 * a / b:.0f}%")


def _small_saving_claim(table, tasks, summary) -> list:
    savings = [_saving(summary, m) for m in PEFT]
    small = all(s is not None and s <= SMALL_SAVING for s in savings)
    return ["LoRA and BitFit save only about a quarter of full fine-tuning's training memory",
            "26% (Ladder Side-Tuning, T5 on GLUE: LoRA, adapters, BitFit at similar parameter counts)",
            ", ".join(f"{m} {_pct(s)}" for m, s in zip(PEFT, savings)) + " less peak memory (mean of tasks)",
            "inconclusive" if not _complete(summary, [*PEFT, FULL], tasks) else
            "reproduced" if small else "not reproduced",
            f"reproduced if each saves at most {_pct(SMALL_SAVING)}; " + MEMORY_BASIS
            + " / ".join(_memory_shares(table, m, tasks) for m in PEFT)]


def _top_saves_more_claim(table, tasks, summary) -> list:
    cached = "last 2, cached"
    below = [t for t in summary[cached]["tasks"]
             if all(_mean(table[(cached, t)]["memory"]) < _mean(table[(m, t)]["memory"]) for m in PEFT
                    if table.get((m, t)) and _mean(table[(m, t)]["memory"]) is not None)]
    shown = [cached, "last 2, not cached", *PEFT]
    return ["Training only the top of the network (LST's side network; here the last 2 blocks over the "
            "frozen-prefix cache) saves more memory than LoRA and BitFit",
            "69% vs 26% saved (Ladder Side-Tuning)",
            "; ".join(f"{m} {_pct(_saving(summary, m))}" for m in shown) + " less peak memory (mean of tasks)",
            "inconclusive" if not _complete(summary, [*PEFT, cached, FULL], tasks) else
            "reproduced" if len(below) == len(tasks) else "not reproduced",
            f"reproduced if the cached last 2 peak below both LoRA r8 and BitFit on every task (below on "
            f"{len(below)} of {len(tasks)}); " + MEMORY_BASIS + _memory_shares(table, cached, tasks)]


def claims(table: dict, tasks: list, summary: dict, gains: dict) -> list:
    return [
        _score_claim(table, tasks, summary, "LoRA r8", "LoRA (rank 8 on query and value) scores as full "
                     "fine-tuning does", "RoBERTa-base GLUE mean 87.2 vs 86.4 (+0.8), 0.3M of 125M weights trained "
                     "(LoRA, Table 2)", gains),
        _score_claim(table, tasks, summary, "BitFit", "BitFit (biases only) is competitive with full fine-tuning "
                     "on small to medium data", "competitive with, sometimes better than, fine-tuning the entire "
                     "model (BitFit, abstract; BERT on GLUE)", gains),
        _faster_claim(table, tasks, summary),
        _small_saving_claim(table, tasks, summary),
        _top_saves_more_claim(table, tasks, summary),
    ]


def search_rows(collected: list, tasks: list) -> list:
    """Per task and family: each rate's best validation score (x100) at seed 0, the chosen rate marked."""
    methods = _study()
    found = defaultdict(dict)
    for run in collected:
        s = run["settings"]
        if s["part"].startswith("search_") and run["summary"]:
            value = methods.best_validation(run["summary"])
            found[(s["task"], s["part"][len("search_"):])][s["lr"]] = None if value is None else 100 * value
    rows = []
    for task in tasks:
        for family, (rates, searcher) in methods.SEARCH.items():
            scores = found.get((task, family), {})
            chosen = methods.pick_rate(scores) if len(scores) == len(rates) else None  # the runs' own rule
            edge = chosen is not None and chosen in (rates[0], rates[-1])
            rows.append([task, searcher, "yes" if edge else "", *[("**" if lr == chosen else "") + (
                "missing" if lr not in scores else "n/a" if scores[lr] is None else f"{scores[lr]:.1f}")
                + ("**" if lr == chosen else "") for lr in rates]])
    return rows


COLORS = {"full": "black", "freeze": "tab:blue", "lora": "tab:orange", "bitfit": "tab:green"}


def figure(path: str, summary: dict, x_key: str, x_label: str, title: str) -> None:
    """Score (mean of tasks) against `x_key` per method, the Pareto front (less x, more score) drawn."""
    methods = _study().METHODS
    plt = reports.pyplot()
    fig, axis = plt.subplots(figsize=(6.4, 4.4))
    points = [(m, summary[m][x_key], summary[m]["score"]) for m in methods
              if summary[m][x_key] is not None and summary[m]["score"] is not None]
    for method, x, y in points:
        axis.scatter(x, y, color=COLORS[methods[method]["family"]], s=36)
        axis.annotate(method, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
    front, best = [], float("-inf")
    for method, x, y in sorted(points, key=lambda p: (p[1], -p[2])):
        if y > best:
            front.append((x, y))
            best = y
    if front:
        axis.plot(*zip(*front), color="grey", lw=1, label="Pareto front")
        axis.legend(fontsize=7)
    axis.set_xlabel(x_label)
    axis.set_ylabel("score, mean of the tasks (points)")
    axis.set_title(title, fontsize=9)
    axis.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


CSV_HEADER = ["task", "method", "part", "lr", "seed", "metric", "validation_best", "test_at_best", "best_epoch",
              "epochs", "time_to_stop_s", "s_per_epoch", "peak_memory_mb", "trainable_params", "machine", "folder"]


def csv_rows(collected: list, clock: str) -> list:
    rows = []
    for run in collected:
        summary, s = run["summary"], run["settings"]
        if not summary:
            continue
        value = _study().best_validation(summary)
        rows.append([s["task"], _study().method_of(s), s["part"], s["lr"], s["seed"], summary["metric"],
                     None if value is None else round(100 * value, 2), round(score(summary), 2),
                     summary.get("best_epoch"), len(summary["epochs"]),
                     round(reports.time_to_stop(summary, clock), 1), round(epoch_seconds(summary, clock), 2),
                     round(summary.get("peak_memory_mb") or 0), summary.get("trainable_params"),
                     reports.machine_label(summary.get("machine")), run["folder"]])
    return rows


def claims_section(table: dict, tasks: list, summary: dict, gains: dict) -> list:
    barely = [f"{t} ({gains[t]:+.1f})" for t in tasks if t in gains and gains[t] < LEARNED_POINTS]
    lines = ["## The claims, checked", "",
             "Verdicts apply each claim's test, stated in its basis, to our means over seeds and tasks; the basis "
             "gives the per-task values with Welch's test (p) of the two sides' seeds.", "",
             reports.claims_table(claims(table, tasks, summary, gains)), ""]
    if barely:
        lines += [f"Full fine-tuning scored less than {LEARNED_POINTS:g} points above the constant prediction on "
                  f"{', '.join(barely)}: at this budget those tasks were barely learned, and differences between "
                  "methods there are mostly noise. The score claims' basis also gives the mean over the other tasks.",
                  ""]
    return lines


def searches_section(collected: list, tasks: list) -> list:
    lines = ["## The learning-rate searches", "",
             "Seed 0, best validation score (x100, on the split held out of GLUE train) per rate; the chosen rate in "
             "bold (ties: the smaller).", ""]
    lines += [f"- {searcher}: {', '.join(f'{lr:g}' for lr in rates)}" for rates, searcher in _study().SEARCH.values()]
    searches = search_rows(collected, tasks)
    edges = sum(1 for row in searches if row[2])
    return lines + ["", f"{edges} of {len(searches)} chosen rates lie at an end of their range (`at an end`): a "
                    "wider search might have found a better one there.", "",
                    reports.markdown_table(["task", "searched by", "at an end", "low", "middle", "high"], searches),
                    ""]


def write_report(collected: list, out: str, study, variant: str) -> str:
    chosen = study.variant(variant)
    tasks = [t for t in _study().TASKS if any(r["settings"]["task"] == t for r in collected)]
    table = {key: measures(runs, chosen.clock) for key, runs in cells(collected).items()}
    summary = overall(table, tasks)
    os.makedirs(out, exist_ok=True)
    figure(os.path.join(out, "score_vs_time.png"), summary, "time_ratio",
           "training time to the stopping point, share of full fine-tuning's (mean of tasks)",
           "score against training time")
    figure(os.path.join(out, "score_vs_memory.png"), summary, "memory",
           "peak memory, MB (mean of tasks; process resident set)", "score against peak memory")
    reports.write_csv(os.path.join(out, "runs.csv"), CSV_HEADER, csv_rows(collected, chosen.clock))
    majority = reports.dev_baselines(tasks, collected, out)
    reports.write_baselines(out, majority)
    lines = [f"# What to train: freezing, LoRA and BitFit compared ({variant} variant)", "",
             f"Checks {study.paper} on {', '.join(tasks)} with all-MiniLM-L6-v2 (6 blocks, 384 wide), "
             f"{len(_study().SEEDS)} seeds, each method at its own rate searched per task. Generated from the runs "
             "below by the command at the end; rerunning it keeps the report current.", ""]
    lines += claims_section(table, tasks, summary, learned(table, tasks, majority))
    lines += ["## Per method", "", reports.clock_sentence(chosen.clock)
              + " Scores: GLUE dev at the best validation epoch, in points of each task's metric; means of the tasks "
              "(each a mean over seeds); time and memory relative to full fine-tuning are means of the per-task "
              "ratios.", "", reports.markdown_table(METHOD_HEADER, method_rows(table, tasks, summary)), "",
              "![score against time](score_vs_time.png) ![score against memory](score_vs_memory.png)", ""]
    for task in tasks:
        metric = next((r["summary"]["metric"] for r in collected if r["summary"] and r["settings"]["task"] == task),
                      get_task(task).primary_metric)
        lines += [f"### {task} ({metric})", "",
                  reports.markdown_table(TASK_HEADER, task_rows(table, task, majority.get(task))), ""]
    lines += ["† n/m: n of the m runs reached the epoch cap without early stopping (their time is a lower bound).",
              ""]
    lines += searches_section(collected, tasks)
    if chosen.differences:
        lines += ["## Settings, and how they differ from the papers", ""]
        lines += [f"- {d}" for d in chosen.differences] + [""]
    lines += reports.commands_section(study, variant, out)
    lines += reports.still_to_run(study.name, collected, chosen, _study().TASKS)
    own = sum(1 for r in collected if r["summary"])
    lines += [f"{own} of {len(collected)} runs completed (the seed-0 run of each method that searched its rate is "
              "its search's run, counted in both). Every run: `runs.csv`.", ""]
    lines += reports.machines_section(collected)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return out
