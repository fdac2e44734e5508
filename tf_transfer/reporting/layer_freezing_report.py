"""The layer-freezing sweep's report (experiments/layer_freezing.py): the paper's claims checked, per task the line
search and the sweep by frozen blocks against the majority class, the 90% point, a figure and the runs still to run.
The grid and this report take the paper's tasks and scoring from `layer_freezing_paper` (the report imports no
grid).

>>> from tf_transfer.reporting import layer_freezing_report
>>> layer_freezing_report.smallest_reaching({1: 0.50, 2: 0.85, 3: 0.90}, full=0.90)
2
"""

from __future__ import annotations

import math
import os
from collections import defaultdict

from tf_transfer.core import stats
from tf_transfer.reporting import claims
from tf_transfer.reporting import tables as reports
from tf_transfer.reporting.data_note import data_section
from tf_transfer.reporting.layer_freezing_paper import TASKS, final_score
from tf_transfer.studies.grid import Grid

SHARE = 0.9  # the paper's operating point: 90% of the full model's quality
# Every claim here is the paper's, tested at a smaller protocol than its own.
CLAIMS_PROTOCOL = ("6-block all-MiniLM-L6-v2 on one CPU core, 3 seeds, RTE and STS-B; the paper: BERT-base and "
                   "RoBERTa, base and large, on a GPU")
# `Claim` and `not_run` here make a paper's claims tested at CLAIMS_PROTOCOL (`claims.at_protocol`).
Claim, not_run = claims.at_protocol(CLAIMS_PROTOCOL)


def smallest_reaching(means: dict, full, baseline=None):
    """The smallest trainable k whose mean score reaches `SHARE` of the full model's: of its score (the paper's
    definition, `baseline=None`), or of its gain over a constant prediction (`(score - baseline) / (full -
    baseline)`); None when no k does or the share is undefined."""
    reaching = [k for k, mean in means.items() if _share(mean, full, baseline) is not None
                and _share(mean, full, baseline) >= SHARE]
    return min(reaching) if reaching else None


def _share(score, full, baseline=None):
    if baseline is None:
        return score / full if score is not None and full else None
    return reports.above_baseline(score, baseline, full)


def report(collected: list, out: str, study: Grid, variant: str) -> None:
    presets = list(dict.fromkeys(r["settings"].get("preset") for r in collected))
    if len(presets) > 1:  # BERT and RoBERTa (or --presets): one report per backbone, each in its own folder
        _index(collected, presets, out, study, variant)
        return
    os.makedirs(out, exist_ok=True)
    search = defaultdict(list)
    cells = defaultdict(list)
    for run in collected:
        s = run["settings"]
        (search if s["part"] == "line_search" else cells)[(s["task"], s["trainable_layers"], s["lr"])].append(run)
    tasks = [t for t in TASKS if any(key[0] == t for key in {**search, **cells})]
    majority = reports.dev_baselines(tasks, collected, out)
    results = {task: _task_results(task, cells, majority.get(task)) for task in tasks}
    lines = [f"# Layer-freezing sweep ({variant} variant)", "", f"Reproduces {study.paper}.", ""]
    lines += data_section(collected)
    lines += _claims(tasks, results, collected)
    lines += _about_section(collected, out, study, variant)
    csv_rows, points = [], {}
    for task in tasks:
        lines += [f"## {task}", ""]
        lines += _line_search_table(task, search, majority.get(task))
        lines += _stand_in_note(task, cells)
        table, task_csv, points[task] = _sweep_table(task, cells, results[task], majority.get(task))
        lines += table + _ninety_lines(results[task], majority.get(task))
        csv_rows += task_csv
    _figure(os.path.join(out, "score_by_trainable_blocks.png"), tasks, points, results)
    lines += ["![score by trainable blocks](score_by_trainable_blocks.png)", ""]
    lines += _missing_section(collected)
    reports.write_csv(os.path.join(out, "scores.csv"),
                      ["task", "trainable_layers", "num_layers", "lr", "seed", "val", "test", "validation_fraction",
                       "majority"], csv_rows)
    reports.write_baselines(out, majority)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def _index(collected: list, presets: list, out: str, study: Grid, variant: str) -> None:
    """One report per backbone in a folder each, and an index of them in `<out>/README.md`."""
    os.makedirs(out, exist_ok=True)
    lines = [f"# Layer-freezing sweep ({variant} variant)", "", "One report per backbone:", ""]
    for preset in presets:
        folder = os.path.basename(str(preset).rstrip("/"))
        report([r for r in collected if r["settings"].get("preset") == preset], os.path.join(out, folder),
               study, variant)
        lines.append(f"- [{preset}]({folder}/README.md)")
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def _about_section(collected: list, out: str, study: Grid, variant: str) -> list:
    """How the variant differs from the paper, the commands, what is still to run, the machines and the protocol."""
    chosen = study.variant(variant)
    lines = []
    if chosen.differences:
        lines += ["## How this differs from the paper", ""] + [f"- {d}" for d in chosen.differences] + [""]
    lines += reports.commands_section(study, variant, out)
    lines += reports.still_to_run("layer_freezing", collected, chosen, TASKS)
    lines += [reports.completed_count(collected) + ".", ""]
    lines += reports.machines_section(collected)
    return lines + ["## Protocol", "", PROTOCOL, ""]


def _base_text(base) -> str:
    return "n/a (GLUE dev not found: pass --data_dir)" if not base else f"{base['score']:.3f}"


def _line_search_table(task: str, search: dict, base) -> list:
    """The line search's scores per rate on the full model, with the majority class below."""
    rows = []
    for (t, _, lr), runs in sorted(search.items(), key=lambda kv: kv[0][2]):
        if t == task:
            done = [r["summary"] for r in runs if r["summary"]]
            rows.append([f"{lr:g}", reports.cell([final_score(s, "val") for s in done], len(runs)),
                         reports.cell([final_score(s) for s in done], len(runs))])
    if not rows:
        return []
    rows.append(["majority class (constant prediction)", "–", _base_text(base)])
    return ["Line search on the full model (trained on 90% of GLUE train; the held-out 10%, validation, "
            "picks the rate):", "", reports.markdown_table(["lr", "validation", "test (GLUE dev)"], rows), ""]


def _sweep_table(task: str, cells: dict, result: dict, base) -> tuple:
    """`(lines, csv rows, (ks, means, stds))`: the sweep's scores by frozen blocks, each run's CSV row, and the
    figure's points (the frozen ks with a mean)."""
    base_score = base["score"] if base else None
    rows, csv_rows, xs, ys, spreads = [], [], [], [], []
    full = result["full"]
    for (t, k, lr), runs in sorted(((key, runs) for key, runs in cells.items() if key[0] == task),
                                   key=lambda kv: (kv[0][1] == "all", str(kv[0][1]))):
        done = [r["summary"] for r in runs if r["summary"]]
        scores = [final_score(s) for s in done]
        mean, spread = reports.mean_std(scores)
        depth = result["depth"]
        frozen = "none (full)" if k == "all" else (depth - k if depth else f"L-{k}")
        relative = f"{mean - full:+.3f}" if mean is not None and full is not None else "n/a"
        rows.append([frozen, k, lr, reports.cell(scores, len(runs)), relative, reports.percent(_share(mean, full)),
                     reports.percent(_share(mean, full, base_score)) if base_score is not None else "n/a"])
        for s in done:
            csv_rows.append([task, k, s["num_layers"], lr, s["seed"], final_score(s, "val"), final_score(s),
                             (s.get("config") or {}).get("validation_fraction"), base_score])
        if k != "all" and mean is not None:
            xs.append(k)
            ys.append(mean)
            spreads.append(spread)
    rows.append(["majority class (constant prediction)", "–", "–", _base_text(base),
                 f"{base_score - full:+.3f}" if base_score is not None and full is not None
                 else "n/a", reports.percent(_share(base_score, full)), "0%" if base_score is not None
                 else "n/a"])
    lines = [f"Test {result['metric'] or 'score'} after the last epoch, by frozen blocks N (k = L − N trainable); "
             "`of full`: score / full score (the paper's measure); `of full above majority`: (score − "
             "majority) / (full − majority):", "",
             reports.markdown_table(["frozen N", "trainable k", "lr", "score", "frozen − full", "of full",
                                     "of full above majority"], rows), ""]
    return lines, csv_rows, (xs, ys, spreads)


def _figure(path: str, tasks: list, points: dict, results: dict) -> None:
    """Mean score by trainable blocks per task, error bars one std, full fine-tuning dotted with its band."""
    plt = reports.pyplot()
    fig, axis = plt.subplots(figsize=(6.5, 4.2))
    for task in tasks:
        xs, ys, spreads = points[task]
        result = results[task]
        if xs:
            order = sorted(range(len(xs)), key=lambda i: xs[i])
            bars = axis.errorbar([xs[i] for i in order], [ys[i] for i in order],
                                 yerr=[spreads[i] for i in order], marker="o", capsize=3, label=task)
            if result["full"] is not None:
                colour = bars.lines[0].get_color()
                axis.axhline(result["full"], color=colour, linestyle=":", alpha=0.7)
                axis.axhspan(result["full"] - result["full_spread"], result["full"] + result["full_spread"],
                             color=colour, alpha=0.08)
    axis.set_xlabel("trainable blocks k (the other L − k and the embeddings frozen)")
    axis.set_ylabel("test score (GLUE dev), mean ± std over seeds")
    axis.set_title("dotted and band: full fine-tuning, mean ± std")
    axis.xaxis.get_major_locator().set_params(integer=True)
    axis.grid(alpha=0.3)
    if any(points[task][0] for task in tasks):  # a task with only full fine-tuning has no labelled line
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _missing_section(collected: list) -> list:
    missing = [[r["settings"]["task"], r["settings"]["part"], r["settings"]["trainable_layers"],
                r["settings"]["lr"], r["settings"]["seed"],
                "failed: " + r["error"] if r["error"] else "unfinished" if r["partial"] else "not run"]
               for r in collected if not r["summary"]]
    if not missing:
        return []
    return ["## Runs not completed", "",
            reports.markdown_table(["task", "part", "k", "lr", "seed", "state"], missing), ""]


PROTOCOL = (
    "The line search trains the full model at each rate on 90% of GLUE train (seed 0) and scores the held-out "
    "10% after the last epoch; the best validation score picks the rate, which every sweep run then uses. GLUE "
    "dev, the test set, never chooses anything. (The paper reports \"the best results\" of its line search without "
    "saying what it chose on.) The sweep then trains, as the paper, on the whole of GLUE train for the 3 epochs "
    "with no early stopping (`--validation_fraction=0 --patience=0`: nothing is held out, nothing is scored as "
    "validation, no epoch is chosen) and the score is GLUE dev's after the last epoch. The majority class (the "
    "constant prediction of GLUE dev's most frequent label, by the task's metric; for STS-B a constant "
    "prediction's correlation is undefined and 0 is used) is shown in every table; the 90% point is given as the "
    "paper defines it (score / full) and relative to that baseline ((score − majority) / (full − majority)).")


def _task_results(task: str, cells: dict, base) -> dict:
    task_cells = {key: runs for key, runs in cells.items() if key[0] == task}
    full = [r["summary"] for key, runs in task_cells.items() if key[1] == "all" for r in runs if r["summary"]]
    full_scores = [final_score(s) for s in full]
    full_mean, full_spread = reports.mean_std(full_scores)
    by_k, depth = {}, None
    for (_, k, _), runs in task_cells.items():
        done = [r["summary"] for r in runs if r["summary"]]
        depth = depth or (done[0]["num_layers"] if done else None)
        if k != "all" and done:
            by_k[k] = [final_score(s) for s in done]
    means = {k: reports.mean_std(scores)[0] for k, scores in by_k.items()}
    base_score = base["score"] if base else None
    return {"task": task, "metric": full[0]["metric"] if full else None, "depth": depth, "full": full_mean,
            "full_spread": full_spread, "full_scores": full_scores, "by_k": by_k, "means": means,
            "raw": smallest_reaching(means, full_mean), "relative": smallest_reaching(means, full_mean, base_score)
            if base_score is not None else None, "base": base_score}


def _ninety_lines(result: dict, base) -> list:
    if result["full"] is None:
        return ["Smallest number of trainable blocks reaching 90% of the full model's score: n/a (full missing).", ""]
    lines = [f"Smallest number of trainable blocks reaching 90% of the full model's score: "
             f"{result['raw'] if result['raw'] is not None else 'none measured'} (score / full, the paper's "
             "definition); relative to the majority class: "
             + (("none measured" if result["relative"] is None else str(result["relative"])) if base else "n/a")
             + ".", ""]
    if base:
        gap = result["full"] - base["score"]
        lines += [f"The full model scores {result['full']:.3f}, {gap:+.3f} against the majority class "
                  f"({base['score']:.3f}, {base['note']}; {base['examples']} dev examples)"
                  + (": barely above it, so a share of the full score says little about what freezing keeps."
                     if gap < 0.05 and not (result["raw"] is None) == (result["relative"] is None) else ".")
                  + (f" Baseline read from {base['source']}." if "majority.csv" in str(base.get("source")) else ""),
                  ""]
    return lines


def _stand_in_note(task: str, cells: dict) -> list:
    standing = [r for key, runs in cells.items() if key[0] == task for r in runs if r["stand_in"]]
    if not standing:
        return []
    reasons = sorted({r["stand_in"]["reason"] for r in standing})
    return [f"**{len(standing)} sweep runs of {task} below are stand-ins, not runs of the current protocol**: "
            + "; ".join(reasons) + ". Rerun them with the commands under *Still to run*.", ""]


def _against_share(r: dict, k) -> stats.Interval:
    """k's scores minus 90% of the full model's, Welch (the sweep's seeds share their data: all of GLUE train, scored
    on GLUE dev, so no seed fixes a split of its own to pair on); NaN without runs at k."""
    return stats.welch_difference(r["by_k"].get(k, []), [SHARE * v for v in r["full_scores"] if v is not None])


def _claims(tasks: list, results: dict, collected: list) -> list:
    standing = any(r["stand_in"] for r in collected)
    backbones = sorted({(r["summary"].get("preset"), r["summary"].get("num_layers")) for r in collected
                        if r["summary"]}, key=str)
    note = ("setting differs: backbone " + (", ".join(f"{preset} (L = {depth})" for preset, depth in backbones)
                                           or "none run yet")
            + " (the paper: BERT and RoBERTa, base L = 12 and large L = 24), 3 seeds (the paper: 5), tasks "
            + ", ".join(tasks)
            + ("; sweep runs trained on 90% of train (stand-ins, rerun pending)" if standing else ""))
    # Decided before the runs: a score claim counts on a task only where full fine-tuning beats the constant
    # prediction by 10 points (the sweep holds nothing out, so on GLUE dev); unknown baseline: the task counts.
    learned = {t: results[t]["full"] is not None and (results[t]["base"] is None or stats.learned(
        results[t]["full_scores"], results[t]["base"])) for t in tasks}
    gains = "; ".join(f"{t} {100 * (results[t]['full'] - results[t]['base']):+.1f}" for t in tasks
                      if results[t]["full"] is not None and results[t]["base"] is not None)
    testable_note = (f"full fine-tuning over the majority class on dev, points: {gains}; " if gains else "") + note
    rows = _fourth_claims(tasks, results, learned, testable_note)
    rows.append(_output_layers_claim(tasks, results, learned, testable_note))
    rows.append(_half_claim(tasks, results, learned, testable_note))
    rows.append(_all_layers_claim(tasks, results, note))
    return ["## The paper's claims, checked", "",
            "Generated from the runs below (rerunning the report keeps it current). "
            + claims.testable_sentence(
                "Here the seeds do not pair: the sweep trains every seed on all of GLUE train and scores GLUE dev, "
                "so a seed fixes no split or sample of its own (only the initialisation and the order), and the "
                "intervals are Welch's. The sweep holds nothing out, so the 10-point rule reads GLUE dev: full "
                "fine-tuning's dev score against the majority class's (validation scores are not in the sweep's "
                "runs). The ours column gives the paper's criterion on means, and the same measure relative to the "
                "majority class."), "", claims.table(rows), ""]


def _fourth_claims(tasks: list, results: dict, learned: dict, testable_note: str) -> list:
    """Per task: a fourth of the final layers (rounded up) reaches 90% of the full model's quality."""
    rows = []
    quarters = {t: math.ceil(results[t]["depth"] / 4) for t in tasks if results[t]["depth"]}
    fourth = claims.ahead({t: _against_share(results[t], quarters[t]) if learned[t] else None
                           for t in tasks if t in quarters and results[t]["means"]}).results
    for task in tasks:
        r = results[task]
        claim = f"{task}: a fourth of the final layers reaches 90% of the full model's quality"
        paper = "a fourth (BERT-base: 3–5 of 12 by task; large: 6 of 24 BERT, 7 RoBERTa)"
        if task not in fourth:
            rows.append(not_run(claim, paper, "no completed full and frozen runs"))
            continue
        quarter = quarters[task]
        at = r["means"].get(quarter)
        ours = (f"smallest k reaching 90% (means): {r['raw'] if r['raw'] is not None else 'none'} of {r['depth']} "
                f"(score / full), {r['relative'] if r['relative'] is not None else 'none'} of {r['depth']} (above "
                f"majority); k = {quarter}: {reports.percent(_share(at, r['full']))}, "
                f"{reports.percent(_share(at, r['full'], r['base']))} above majority")
        found = fourth[task]
        interval = found.interval or _against_share(r, quarter)
        basis = (f"{found.cell(scale=100)}: a fourth of {r['depth']} blocks rounded up, k = {quarter}; its score minus "
                 f"90% of the full model's, points (Welch: {len(r['by_k'].get(quarter, []))} vs "
                 f"{len(r['full_scores'])} seeds, 95% t interval, Holm over the tasks), reproduced if all of it is "
                 f"above 0 (the paper's criterion)" + ("" if found.interval else f"; untested: {interval.text(1, 100)}")
                 + f"; full {r['full']:.3f} ± "
                 f"{r['full_spread']:.3f}, majority class "
                 + (f"{r['base']:.3f} (itself {reports.percent(_share(r['base'], r['full']))} of full)"
                    if r["base"] is not None else "n/a") + "; " + testable_note)
        rows.append(Claim(claim, paper, ours, found.kind, basis, {task: found}))
    return rows


def _output_layers_claim(tasks: list, results: dict, learned: dict, testable_note: str) -> claims.Claim:
    """Freezing every block (only the pooler and the head trained) is insufficient: 64% of the quality on average."""
    zero = [t for t in tasks if results[t]["means"].get(0) is not None and results[t]["full"]]
    claim = "training only the output layers (N = L frozen) is insufficient"
    paper = "64% of the full model's quality on average"
    if not zero:
        return not_run(claim, paper, "no completed runs with every block frozen")
    found = claims.at_most({t: _against_share(results[t], 0) if learned[t] else None for t in zero}, 0.0)
    mean = sum(_share(results[t]["means"][0], results[t]["full"]) for t in zero) / len(zero)
    return Claim(claim, paper, f"{100 * mean:.0f}% on average (means)", found.verdict,
                 "reproduced if below 90% of full on every testable task: k = 0's score minus 90% of full's, "
                 "points, Welch, 95% t interval, Holm over the tasks, all of it below 0; per task: "
                 + "; ".join(f"{t} {found.results[t].cell(scale=100)} "
                             f"({reports.percent(_share(results[t]['means'][0], results[t]['full']))} of full)"
                             for t in zero) + "; " + testable_note, found.results)


def _half_claim(tasks: list, results: dict, learned: dict, testable_note: str) -> claims.Claim:
    """Fine-tuning half of the layers comes close to the full model."""
    half = [t for t in tasks if results[t]["depth"] and results[t]["means"].get(results[t]["depth"] // 2) is not None
            and results[t]["full"]]
    claim = "fine-tuning half of the layers approaches the full model's quality"
    paper = "every model \"rapidly approaching the baseline quality\" at half (figure)"
    if not half:
        return not_run(claim, paper, "no completed runs at half")
    found = claims.ahead({t: _against_share(results[t], results[t]["depth"] // 2) if learned[t] else None
                          for t in half})
    halves = {t: results[t]["depth"] // 2 for t in half}
    return Claim(claim, paper,
                 "; ".join(f"{t} k = {k}: {reports.percent(_share(results[t]['means'][k], results[t]['full']))}"
                           for t, k in halves.items()),
                 found.verdict,
                 "reproduced if ≥ 90% of full on every testable task: the score at half minus 90% of full's, "
                 "points, Welch, 95% t interval, Holm over the tasks, all of it above 0; per task: "
                 + found.cells(scale=100) + "; " + testable_note, found.results)


def _all_layers_claim(tasks: list, results: dict, note: str) -> claims.Claim:
    """Fine-tuning all layers does not always help: about SST-2 and the large models, neither run here."""
    beaten = [f"{t} k = {k}" for t in tasks for k, mean in results[t]["means"].items()
              if results[t]["full"] is not None and mean > results[t]["full"]]
    return Claim("fine-tuning all layers does not always help (SST-2: freezing some layers scored higher)",
                 "SST-2, BERT-large and RoBERTa-large: higher when freezing 12–16 of 24",
                 "SST-2 and large models not run" + ("; here frozen above full (means): " + ", ".join(beaten)
                                                      if beaten else "; here no k beats the full model"),
                 stats.NOT_RUN, "the claim is about SST-2 and the large models, neither run here; " + note)
