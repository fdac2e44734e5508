"""The methods study's report (experiments/methods.py): the LoRA, BitFit and Ladder Side-Tuning claims checked first,
then score, training time, trainable weights and peak memory per method (over the tasks, then task by task), the
learning-rate searches, two Pareto figures (score against time, and against peak memory) and every run as CSV.

Scores are GLUE dev (the test set) at the epoch early stopping keeps (the best validation epoch), in points (x100) of
each task's metric; times are the runs' training time to their stopping point, the frozen-prefix cache's build
included; peak memory is each run's process peak resident set (`peak_memory_mb`), every run in its own process.
"""

from __future__ import annotations

import functools
import os

from tf_transfer.core import stats
from tf_transfer.data.tasks import get_task
from tf_transfer.models import methods as methods_lib
from tf_transfer.reporting import claims
from tf_transfer.reporting import tables as reports
from tf_transfer.reporting.data_note import data_section
from tf_transfer.reporting import validation_baselines
from tf_transfer.reporting.method_comparison import (CSV_HEADER, FULL, LEARNED_POINTS, METHOD_HEADER, TASK_HEADER,
                                                     Design, _mean_interval, cells, collapsed, contention_section,
                                                     csv_rows, difference, learned, measures, memory_key, method_rows,
                                                     overall, saving, searches_section, task_rows, uncontended_table)

TOP = "last 2, cached"
PEFT = ("LoRA r8", "BitFit")
# A method "matches" full fine-tuning when the 95% interval of its seed-paired score difference (mean over the tasks
# that can be tested) lies above -1 point.
MATCH_POINTS = 1.0
# Ladder Side-Tuning: LoRA, adapters and BitFit "only save 26%" of full fine-tuning's memory (LST: 69%). Read as the
# band 26% +- 10 points: reproduced where the saving's interval lies inside it, not reproduced where it lies outside.
QUARTER_BAND = (0.16, 0.36)
# Every claim here is a paper's, tested at a smaller protocol than the papers'.
CLAIMS_PROTOCOL = ("6-block all-MiniLM-L6-v2, at most 1,000 training examples and 4 epochs, one CPU core per run; "
                   "the papers: RoBERTa, BERT, T5 or GPT-3 on GPUs")
# `Claim` and `not_run` here make a paper's claims tested at CLAIMS_PROTOCOL (`claims.at_protocol`).
Claim, not_run = claims.at_protocol(CLAIMS_PROTOCOL)


MEMORY = {"peak_above_start_mb": "peak resident set above the one before the first training step (what training "
                                 "adds: gradients, optimizer slots, activations, traced steps)",
          "peak_memory_mb": "process peak resident set (TensorFlow's own resident memory included: these runs "
                            "predate the record of the resident set before the first step)"}


def _gains_text(gains: dict, tasks: list) -> str:
    return ", ".join(f"{t} {gains[t]:+.1f}" for t in tasks if t in gains)


def _score_claim(table, tasks, method, claim, paper, gains, majority=None) -> claims.Claim:
    ran = {t: i for t in tasks if (i := difference(table, method, t, "score")) is not None}  # both sides ran
    if not ran:
        return not_run(claim, paper, _score_basis(claims.Finding(stats.NOT_RUN), tasks))
    found = claims.as_good_as({t: (i if claims.testable(gains, t) else None) for t, i in ran.items()}, MATCH_POINTS,
                              on_mean=True)
    tested = [t for t, v in found.results.items() if v.interval is not None]
    ours = (f"{found.mean.text()} points vs full fine-tuning (mean of {', '.join(tested)})" if found.mean else
            "no task where full fine-tuning learned enough to test it")
    # A run that collapsed to the constant prediction stays in the comparison; the row names it, since one such
    # seed can carry a task's difference and its interval.
    flat = [f"{t} {m} seed {reports.run_seed(summary)}" for t in tested for m in (method, FULL)
            for summary in table[(m, t)]["summaries"] if collapsed(summary, (majority or {}).get(t))]
    return Claim(claim, paper, ours, found.verdict, _score_basis(found, tasks)
                 + ("; collapsed to the constant prediction (kept): " + ", ".join(flat) if flat else ""),
                 found.results)


def _score_basis(found, tasks) -> str:
    return (f"reproduced if the 95% interval of the mean over the testable tasks of the seed-paired difference lies "
            f"above -{MATCH_POINTS:g} point, not reproduced if below, each method at its searched rate; per task "
            f"(Holm over the testable tasks): " + (found.cells(order=tasks) or "no task"))


def _faster_claim(table, tasks, uncontended=None) -> claims.Claim:
    """LoRA r8's saving of time per epoch, decided over all runs; with `uncontended` (`uncontended_table`) the same
    saving over the pairs with neither run contended is shown beside it (it does not decide: the contention rule
    was fixed after the runs)."""
    method = "LoRA r8"
    intervals = {t: saving(table, method, t, "epoch") for t in tasks if table.get((method, t))}
    found = claims.ahead({t: i for t, i in intervals.items() if i is not None})
    claim = "LoRA trains faster than full fine-tuning (no gradients for the frozen weights)"
    paper = "25% faster on GPT-3 175B (LoRA, section 4.2)"
    alone = {t: i for t in tasks if (i := saving(uncontended or {}, method, t, "epoch")) is not None}
    basis = ("reproduced if LoRA r8's seed-paired saving of time per epoch is above 0 on every task (Holm over the "
             "tasks; the size is the paper's, on a GPU, not tested); per task, the saving: "
             + (found.cells(scale=100, unit="%", order=tasks) or "no task")
             + ("" if uncontended is None else "; uncontended pairs only: " + (", ".join(
                 f"{t} {i.text(1, 100, '%')} over {i.n} seed{'s' * (i.n != 1)}" for t, i in alone.items()) or "none")))
    if not found.results:
        return not_run(claim, paper, basis)
    mean = stats.mean_of([v.interval for v in found.results.values()])
    ours = f"time per epoch saved: {mean.text(1, 100, '%')} (mean of {len(found.results)} tasks)"
    if alone:
        ours += (f"; uncontended pairs only: {stats.mean_of(alone.values()).text(1, 100, '%')} (mean of "
                 f"{len(alone)} tasks)")
    return Claim(claim, paper, ours, found.verdict, basis, found.results)


def _memory_basis(memory: str) -> str:
    return f"memory is the {MEMORY[memory]}; seed-paired shares saved against full fine-tuning, mean of the tasks"


def _small_saving_claim(table, tasks, summary, memory) -> claims.Claim:
    kinds, ours, per_method = [], [], []
    for method in PEFT:
        mean = summary[method]["intervals"].get("memory_saving")
        kinds.append(claims.in_band(mean, *QUARTER_BAND).verdict)
        ours.append(f"{method} {mean.text(1, 100, '%') if mean else 'n/a'}")
        per_method.append(f"{method}: " + "; ".join(
            f"{t} {i.text(1, 100, '%')}" for t in tasks if (i := saving(table, method, t, "memory")) is not None))
    # The process peak holds TensorFlow's fixed resident memory, which shrinks every share saved by an unknown
    # factor: a band cannot be judged on it (an ordering of savings can, as the next claim's).
    diluted = memory == "peak_memory_mb"
    ran = any(summary[method]["intervals"].get("memory_saving") for method in PEFT)
    return Claim("LoRA and BitFit save about a quarter of full fine-tuning's training memory",
                 "26% (Ladder Side-Tuning, T5 on GLUE: LoRA, adapters, BitFit at similar parameter counts)",
                 "memory saved: " + ", ".join(ours),
                 stats.NOT_RUN if not ran else stats.INCONCLUSIVE if diluted else stats.overall(kinds),
                 f"reproduced if each method's saving (95% interval) lies within {reports.percent(QUARTER_BAND[0])}-"
                 f"{reports.percent(QUARTER_BAND[1])} (the paper's 26% +- 10 points), not reproduced if wholly outside"
                 + ("; inconclusive here whatever the shares: these runs record only the process peak, whose fixed "
                    "part (TensorFlow's own resident memory) shrinks every share saved, so the share of what training "
                    "adds is unknown (the methods_full study records it)" if diluted else "")
                 + "; " + _memory_basis(memory) + "; per task: " + " / ".join(per_method))


def _top_saves_more_claim(table, tasks, summary, memory) -> claims.Claim:
    kinds, ours, ran = [], [], False
    for method in PEFT:
        per_task = []
        for t in tasks:
            top, other = saving(table, TOP, t, "memory"), saving(table, method, t, "memory")
            per_task.append(None if top is None or other is None else _difference_of(table, t, method, memory))
        mean = _mean_interval(per_task) if per_task else None
        kinds.append(claims.ahead(mean).verdict if mean else stats.INCONCLUSIVE)
        ours.append(f"than {method}: {mean.text(1, 100, ' points') if mean else 'n/a'}")
        ran = ran or mean is not None
    kind = stats.overall(kinds) if ran else stats.NOT_RUN
    return Claim("Not training the bulk of the network saves more memory than LoRA and BitFit (LST's claim, restated "
                 "for freezing: here the last 2 blocks over the frozen-prefix cache, no backward pass below them; not "
                 "a side network)",
                 "69% vs 26% saved (Ladder Side-Tuning)",
                 f"{TOP} saves more " + "; ".join(ours) + " of full fine-tuning's memory", kind,
                 "reproduced if the seed-paired difference of savings (mean of the tasks) is above 0 against both (an "
                 "ordering, which a fixed part of the memory does not change); "
                 + _memory_basis(memory) + f"; {TOP}'s saving per task: " + "; ".join(
                     f"{t} {i.text(1, 100, '%')}" for t in tasks if (i := saving(table, TOP, t, "memory")) is not None))


def _difference_of(table, task: str, method: str, memory: str):
    """Seed-paired interval of the top's saving minus `method`'s: (m - top) / full per seed."""
    top, mine, full = (table[(m, task)] for m in (TOP, method, FULL))
    a, b, c = (reports.by_seed(cell["summaries"], cell["values"]["memory"]) for cell in (top, mine, full))
    common = sorted(set(a) & set(b) & set(c), key=str)
    return stats.paired_difference([(b[s] - a[s]) / c[s] for s in common], [0.0] * len(common)) if common else None


def claims_of(table: dict, tasks: list, summary: dict, gains: dict, memory: str, majority=None,
              uncontended=None) -> list:
    """The papers' claims about the methods, as `Claim`s (the time claim shown over `uncontended` too, if given)."""
    return [
        _score_claim(table, tasks, "LoRA r8", "LoRA (rank 8 on query and value) scores as full fine-tuning "
                     "does", "RoBERTa-base GLUE mean 87.2 vs 86.4 (+0.8), 0.3M of 125M weights trained "
                     "(LoRA, Table 2)", gains, majority),
        _score_claim(table, tasks, "BitFit", "BitFit (biases only) is competitive with full fine-tuning "
                     "on small to medium data", "competitive with, sometimes better than, fine-tuning the entire "
                     "model (BitFit, abstract; BERT on GLUE)", gains, majority),
        _faster_claim(table, tasks, uncontended),
        _small_saving_claim(table, tasks, summary, memory),
        _top_saves_more_claim(table, tasks, summary, memory),
    ]


def _color(settings: dict) -> str:
    if methods_lib.name_of(settings) != methods_lib.DEFAULT:
        return methods_lib.of(settings).color
    return "black" if settings.get("trainable_layers") == "all" else methods_lib.of(settings).color


def figure(path: str, summary: dict, methods: dict, x_key: str, x_label: str, title: str) -> bool:
    """Score (mean of tasks) against `x_key` per method, with the 95% intervals of the score's difference to full
    fine-tuning (and of the time share, for `time_ratio`) as bars; the Pareto front (less x, more score) drawn.
    False, and no file (an older one removed), where no method has a point yet: empty axes would read as a result."""
    points = [(m, summary[m][x_key], summary[m]["score"]) for m in methods
              if summary[m][x_key] is not None and summary[m]["score"] is not None]
    if not points:
        if os.path.exists(path):
            os.remove(path)
        return False
    plt = reports.pyplot()
    fig, axis = plt.subplots(figsize=(6.4, 4.4))
    for method, x, y in points:
        bars = summary[method]["intervals"]
        yerr = _half(bars.get("delta"))
        xerr = _half(bars.get("time_saving")) if x_key == "time_ratio" else None
        axis.errorbar(x, y, yerr=yerr, xerr=xerr, fmt="o", color=_color(methods[method]), ms=6, capsize=3, lw=1)
        axis.annotate(method, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
    front, best = [], float("-inf")
    for method, x, y in sorted(points, key=lambda p: (p[1], -p[2])):
        if y > best:
            front.append((x, y))
            best = y
    if front:
        axis.plot(*zip(*front), color="grey", lw=1, label="Pareto front (of the means)")
        axis.legend(fontsize=7)
    axis.set_xlabel(x_label)
    axis.set_ylabel("score, mean of the tasks (points); bars: 95% vs full")
    axis.set_title(title, fontsize=9)
    axis.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _half(interval):
    return None if interval is None or not interval.defined else (interval.high - interval.low) / 2


def _gate_text(table: dict, task: str, baselines: dict) -> str:
    """What passing the gate would take on a task: `mrpc needs 89.6 f1 (the constant prediction's 79.6)`."""
    from tf_transfer.reporting import validation_baselines

    base, full = validation_baselines.mean_score(baselines, task), table.get((FULL, task))
    if base is None or not full or not full["summaries"]:
        return ""
    return (f"{task} needs {100 * base + LEARNED_POINTS:.1f} {full['summaries'][0]['metric']} (the constant "
            f"prediction's {100 * base:.1f})")


def claims_section(table: dict, tasks: list, summary: dict, gains: dict, memory: str, done: str,
                   decided: str = "before the runs", baselines=None, majority=None, uncontended=None) -> list:
    barely = [t for t in tasks if t in gains and not claims.testable(gains, t)]
    unrun = [t for t in tasks if t not in gains]
    never = [why for t in barely if (why := _gate_text(table, t, baselines or {}))]
    lines = ["## The claims, checked", "", done, "",
             claims.testable_sentence(
                 "Here the test is on validation: full fine-tuning's best validation score against the constant "
                 "prediction's on the same splits (`majority_validation.csv`), per task: "
                 + (_gains_text(gains, tasks) + " points" if gains else "no compared run of full fine-tuning yet")
                 + ". Seeds pair across methods (a seed fixes the validation split, the training sample and "
                 "order), so every interval is seed-paired; a claim about the mean over tasks is tested on the mean "
                 "of the tasks' intervals.", decided), "",
             claims.table(claims_of(table, tasks, summary, gains, memory, majority, uncontended)), ""]
    if barely:
        lines += [f"Not testable at this budget (full fine-tuning less than {LEARNED_POINTS:g} points above the "
                  f"constant prediction on validation, or no baseline): {', '.join(barely)}. Differences between "
                  "methods there are mostly noise; they are shown below, not judged."
                  + (" On validation, " + "; ".join(never) + "." if never else ""), ""]
    if unrun:
        lines += [f"Not run yet (no compared run of full fine-tuning): {', '.join(unrun)}.", ""]
    return lines


def runs_sentence(collected: list, compared: list, design: Design) -> str:
    """How many runs have completed (and how many distinct ones, where compared seed-0 runs are the searches'), and
    whether the study is still running or why it stopped."""
    own = sum(1 for r in collected if r["summary"])
    return (f"Runs so far: {own} of {len(collected)} completed ({sum(1 for r in compared if r['summary'])} of the "
            f"{len(compared)} compared)."
            + (f" They are {len({r['folder'] for r in collected if r['summary']})} distinct runs: a compared "
               "seed-0 run is its search's run at the chosen rate, counted twice above."
               if design.compared_seeds_searched else "")
            + ("" if own == len(collected) else
               f" The study stopped: {design.stopped}" if design.stopped else
               " The verdicts below rest on the runs completed so far; the study is still running (see *Still to "
               "run*)."))


def figures(out: str, summary: dict, methods: dict, memory: str) -> list:
    """The score-against-time and score-against-memory figures drawn in `out`, as Markdown image links."""
    return [f"![{title}]({name})" for name, title, drawn in [
        ("score_vs_time.png", "score against time", figure(
            os.path.join(out, "score_vs_time.png"), summary, methods, "time_ratio",
            "training time to the stopping point, share of full fine-tuning's (mean of tasks)",
            "score against training time")),
        ("score_vs_memory.png", "score against memory", figure(
            os.path.join(out, "score_vs_memory.png"), summary, methods, "memory",
            f"memory, MB (mean of tasks; {memory})", "score against memory"))] if drawn]


def write_report(collected: list, out: str, study, variant: str, design: Design) -> str:
    chosen = study.variant(variant)
    methods = design.methods
    tasks = [t for t in design.tasks if any(r["settings"]["task"] == t for r in collected)]
    memory = memory_key([r for r in collected if r["settings"]["part"] in methods])
    table = {key: measures(runs, chosen.clock, memory) for key, runs in cells(collected, methods).items()}
    summary = overall(table, tasks, methods)
    os.makedirs(out, exist_ok=True)
    images = figures(out, summary, methods, memory)
    reports.write_csv(os.path.join(out, "runs.csv"), CSV_HEADER, csv_rows(collected, chosen.clock, design))
    majority = reports.dev_baselines(tasks, collected, out)
    reports.write_baselines(out, majority)
    compared = [r for r in collected if r["settings"]["part"] in methods]
    baselines = validation_baselines.collect([r["summary"] for r in compared if r["summary"]
                                              and r["settings"]["part"] == FULL], out)
    seeds = sorted({r["settings"]["seed"] for r in compared})
    own = sum(1 for r in collected if r["summary"])
    done = runs_sentence(collected, compared, design)
    retired = bool(design.stopped) and not any(r["summary"] for r in compared)
    lines = [("# Retired, superseded before any compared run: " if retired else "# ")
             + f"What to train: freezing, LoRA and BitFit compared ({variant} variant)", "",
             f"Checks {study.paper} on {', '.join(tasks)} with all-MiniLM-L6-v2 (6 blocks, 384 wide), seeds "
             f"{', '.join(map(str, seeds))} compared, each method at its own rate searched per task. Generated from "
             "the runs below by the command at the end; rerunning it keeps the report current.", ""]
    lines += data_section(collected)
    if retired:
        # A study retired before any compared run has nothing to check a claim on: no claims table, and a pointer to
        # what superseded it.
        lines += ["## Retired", "", done + " It checks no claims: no compared run was made.", ""]
    else:
        lines += claims_section(table, tasks, summary, learned(table, tasks, baselines), memory, done,
                                design.gate_decided, baselines, majority,
                                uncontended_table(compared, chosen.clock, memory, methods))
        lines += contention_section(compared)
    lines += ["## Per method", "", reports.clock_sentence(chosen.clock)
              + f" Memory: the {MEMORY[memory]}. Scores: GLUE dev at the best validation epoch, in points of each "
              "task's metric; means of the tasks (each a mean over seeds), the difference to full fine-tuning with "
              "the 95% interval of the mean of the tasks' seed-paired differences; time and memory relative to full "
              "fine-tuning are means of the per-task ratios.", "",
              reports.markdown_table(METHOD_HEADER, method_rows(table, tasks, summary, methods)), "",
              " ".join(images) or "No figures yet: no method has a score over the compared runs so far.", ""]
    for task in tasks:
        metric = next((r["summary"]["metric"] for r in collected if r["summary"] and r["settings"]["task"] == task),
                      get_task(task).primary_metric)
        lines += [f"### {task} ({metric})", "",
                  reports.markdown_table(TASK_HEADER, task_rows(table, task, majority.get(task), methods)), ""]
    lines += ["† n/m: n of the m runs reached the epoch cap without early stopping (their time is a lower bound).",
              ""]
    lines += searches_section(collected, tasks, design, baselines)
    if chosen.differences:
        lines += ["## Settings, and how they differ from the papers", ""]
        lines += [f"- {d}" for d in chosen.differences] + [""]
    lines += reports.commands_section(study, variant, out)
    lines += reports.still_to_run(study.name, collected, chosen, design.tasks)
    lines += [f"{own} of {len(collected)} runs completed. Every run: `runs.csv`.", ""]
    lines += reports.machines_section(collected)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return out


def report_of(design: Design):
    """A methods grid's `report`: this report of its runs, as `design` describes them."""
    return functools.partial(write_report, design=design)
