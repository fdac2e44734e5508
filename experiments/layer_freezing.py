"""Lee, Tang & Lin, "What Would Elsa Do? Freezing Layers During Transformer Fine-Tuning".

Freeze the embeddings and the first N of L blocks for N = L/2 ... L, plus full fine-tuning; the learning rate is
picked by a line search over 1e-5 ... 5e-5 on the full model and reused for every N; batch 16, 3 epochs, 5 seeds.
The fixed settings are `flags/elsa_common.flags`.

    python -m tf_transfer.experiments run layer_freezing --dry_run
    python -m tf_transfer.experiments run layer_freezing --variant=cpu
    python -m tf_transfer.experiments report layer_freezing --variant=cpu --out=reports/layer_freezing
"""

from __future__ import annotations

import os
from collections import defaultdict

from tf_transfer.training import record
from tf_transfer.reporting import tables as reports
from tf_transfer.studies import grid as studies
from tf_transfer.studies.grid import Study, Variant

from experiments.transfer_learning import pinned_commands

TASKS = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]
LINE_SEARCH = [1e-5, 2e-5, 3e-5, 4e-5, 5e-5]
PENDING_LR = "<line search>"


def sweep(depth: int) -> list:
    """Trainable blocks k = L - N for N = L/2 ... L frozen, then full fine-tuning."""
    return list(range(depth // 2, -1, -1)) + ["all"]


def final_score(summary: dict, split: str = "test"):
    last = summary["epochs"][-1]
    return reports.test_score(last, summary["metric"]) if split == "test" else last["val"].get(summary["metric"])


def searched_lr(settings: dict, runs_dir: str, study: Study):
    """The line search's winner for this task (best validation score after the last epoch), or None if unfinished.

    It is chosen on the validation split, never on GLUE dev, which is the test set."""
    candidates = []
    for lr in LINE_SEARCH:
        probe = {**settings, "trainable_layers": "all", "lr": lr, "seed": 0, "part": "line_search"}
        if probe.get("cache_frozen"):  # the full model has nothing frozen to cache (and so no cache folder)
            probe["cache_frozen"] = False
            probe.pop("cache_dir", None)
        summary = record.read_summary(studies.run_dir(runs_dir, study, probe))
        if not summary or not summary.get("completed"):
            return None
        score = final_score(summary, "val")
        candidates.append((score if score is not None else float("-inf"), lr))
    return max(candidates)[1]


def report(collected: list, out: str, study: Study, variant: str) -> None:
    os.makedirs(out, exist_ok=True)
    chosen = study.variant(variant)
    search = defaultdict(list)
    cells = defaultdict(list)
    for run in collected:
        s = run["settings"]
        (search if s["part"] == "line_search" else cells)[(s["task"], s["trainable_layers"], s["lr"])].append(run)
    tasks = [t for t in TASKS if any(key[0] == t for key in {**search, **cells})]
    lines = [f"# Layer-freezing sweep ({variant} variant)", "", f"Reproduces {study.paper}.", ""]
    if chosen.differences:
        lines += ["## How this differs from the paper", ""] + [f"- {d}" for d in chosen.differences] + [""]
    lines += reports.commands_section(study, variant, out)
    lines += [f"{sum(1 for r in collected if r['summary'])} of {len(collected)} runs completed.", ""]
    lines += reports.machines_section(collected)
    csv_rows = []
    plt = reports.pyplot()
    fig, axis = plt.subplots(figsize=(6.5, 4.2))
    for task in tasks:
        lines += [f"## {task}", ""]
        rows = []
        for (t, _, lr), runs in sorted(search.items(), key=lambda kv: kv[0][2]):
            if t == task:
                done = [r["summary"] for r in runs if r["summary"]]
                rows.append([f"{lr:g}", reports.cell([final_score(s, "val") for s in done], len(runs)),
                             reports.cell([final_score(s) for s in done], len(runs))])
        if rows:
            lines += ["Line search on the full model (validation score picks the rate):", "",
                      reports.markdown_table(["lr", "validation", "test (GLUE dev)"], rows), ""]
        task_cells = {key: runs for key, runs in cells.items() if key[0] == task}
        full = [r["summary"] for key, runs in task_cells.items() if key[1] == "all" for r in runs if r["summary"]]
        full_score = reports.mean_std([final_score(s) for s in full])[0]
        metric = full[0]["metric"] if full else None
        rows, xs, ys, spreads = [], [], [], []
        depth = None
        smallest = None
        for (t, k, lr), runs in sorted(task_cells.items(), key=lambda kv: (kv[0][1] == "all", str(kv[0][1]))):
            done = [r["summary"] for r in runs if r["summary"]]
            depth = depth or (done[0]["num_layers"] if done else None)
            scores = [final_score(s) for s in done]
            mean, spread = reports.mean_std(scores)
            frozen = "none (full)" if k == "all" else (depth - k if depth else f"L-{k}")
            relative = (f"{mean - full_score:+.3f}" if mean is not None and full_score is not None else "n/a")
            share = (f"{100 * mean / full_score:.0f}%" if mean is not None and full_score else "n/a")
            rows.append([frozen, k, lr, reports.cell(scores, len(runs)), relative, share])
            for s in done:
                csv_rows.append([task, k, s["num_layers"], lr, s["seed"], final_score(s, "val"), final_score(s)])
            if k != "all" and mean is not None:
                xs.append(k)
                ys.append(mean)
                spreads.append(spread)
                if full_score and mean >= 0.9 * full_score and (smallest is None or k < smallest):
                    smallest = k
        lines += [f"Test {metric or 'score'} after the last epoch, by frozen blocks N (k = L − N trainable):", "",
                  reports.markdown_table(["frozen N", "trainable k", "lr", "score", "frozen − full",
                                          "of full"], rows), "",
                  f"Smallest number of trainable blocks reaching 90% of the full model's score: "
                  f"{smallest if smallest is not None else 'none measured' if full_score else 'n/a (full missing)'}.",
                  ""]
        if xs:
            order = sorted(range(len(xs)), key=lambda i: xs[i])
            bars = axis.errorbar([xs[i] for i in order], [ys[i] for i in order],
                                 yerr=[spreads[i] for i in order], marker="o", capsize=3, label=task)
            if full_score is not None:
                full_spread = reports.mean_std([final_score(s) for s in full])[1]
                colour = bars.lines[0].get_color()
                axis.axhline(full_score, color=colour, linestyle=":", alpha=0.7)
                axis.axhspan(full_score - full_spread, full_score + full_spread, color=colour, alpha=0.08)
    axis.set_xlabel("trainable blocks k (the other L − k and the embeddings frozen)")
    axis.set_ylabel("test score (GLUE dev), mean ± std over seeds")
    axis.set_title("dotted and band: full fine-tuning, mean ± std")
    axis.xaxis.get_major_locator().set_params(integer=True)
    axis.grid(alpha=0.3)
    if tasks:
        axis.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "score_by_trainable_blocks.png"), dpi=110)
    plt.close(fig)
    lines += ["![score by trainable blocks](score_by_trainable_blocks.png)", ""]
    missing = [[r["settings"]["task"], r["settings"]["part"], r["settings"]["trainable_layers"],
                r["settings"]["lr"], r["settings"]["seed"],
                "failed: " + r["error"] if r["error"] else "unfinished" if r["partial"] else "not run"]
               for r in collected if not r["summary"]]
    if missing:
        lines += ["## Runs not completed", "",
                  reports.markdown_table(["task", "part", "k", "lr", "seed", "state"], missing), ""]
    reports.write_csv(os.path.join(out, "scores.csv"),
                      ["task", "trainable_layers", "num_layers", "lr", "seed", "val", "test"], csv_rows)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


STUDY = Study(
    name="layer_freezing",
    paper='Lee, Tang & Lin, "What Would Elsa Do? Freezing Layers During Transformer Fine-Tuning"',
    flagfile="flags/elsa_common.flags",
    axes={"task": TASKS, "seed": [0, 1, 2, 3, 4]},
    parts={"line_search": {"trainable_layers": ["all"], "lr": LINE_SEARCH, "seed": [0]},
           "sweep": {"trainable_layers": sweep, "lr": [PENDING_LR]}},
    dependent={"lr": searched_lr},
    variants={
        "paper": Variant(),
        "cpu": Variant(
            settings={"preset": "all_minilm_l6_v2_en", "cache_frozen": "auto", "precision": "mixed_bfloat16"},
            axes={"task": ["rte", "stsb"], "seed": [0, 1, 2]},
            differences=(
                "Backbone all-MiniLM-L6-v2 (L = 6) instead of BERT-base (L = 12): N runs over 3..6 frozen blocks.",
                "3 seeds instead of 5, and only RTE and STS-B, for CPU time; the line search uses seed 0 only.",
                "Frozen blocks use the frozen-prefix cache (--cache_frozen): they run once in inference mode, so "
                "dropout is off inside them.",
                "Mixed precision (--precision=mixed_bfloat16), about 1.5x float32's rate on this machine's AMX units; "
                "each run pinned to one core, two shards side by side (the paper: float32 on a GPU).",
            ),
            clock="cpu",
            commands=pinned_commands("layer_freezing"),
        ),
    },
    report=report,
)
