"""The multi-task study's claims table (Li, CS224N minBERT), built from its rows' `summary.json` files through
`claims.Claim`, and the constant prediction it is gated on.

A score claim is tested only where full fine-tuning (`li_finetune`) beats the constant prediction by at least 10
points of `overall` on dev (`claims.testable_from_runs`). The constant prediction predicts the training set's
majority class on SST and on paraphrase, and a constant similarity on STS (Pearson r undefined: 0 used). The runs do
not record it, so it is computed once from the CS224N files and kept as `constant_prediction.json` beside the runs
(`write_constant`, with the files' SHA-256); a fresh clone's report reads it back (`read_constant`).

Example (from the repository root):

>>> from tf_transfer.reporting import multitask_claims
>>> constant = multitask_claims.read_constant("reports/multitask/runs")
>>> round(constant["overall"], 4), constant["tasks"]["sts"]["score"]
(0.4541, 0.0)
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Optional

import numpy as np

from tf_transfer.core import stats
from tf_transfer.reporting import claims, tables

FILE = "constant_prediction.json"
REFERENCE = "li_finetune"  # full fine-tuning: the row the 10-point gate reads
# Each task's score key in a run's epoch record (`multitask_steps.scores`), and how the claims' cells name it.
SCORES = {"sst": "sst_accuracy", "para": "paraphrase_accuracy", "sts": "sts_pearson", "overall": "overall"}
TASK_TITLES = {"sst": "SST", "para": "paraphrase", "sts": "STS"}
PROTOCOL = "all-MiniLM-L6-v2 for BERT-base, 1,000 examples per task, 4 epochs, one seed"
Claim, not_run = claims.at_protocol(PROTOCOL)


# --- the constant prediction ---------------------------------------------------------------------------------------


def constant_prediction(config: dict, data_dir: str) -> dict:
    """The constant prediction's dev scores under a run's data settings (`config`, a multitask `summary.json`'s),
    read from `data_dir`: the majority class of the training examples the run trained on (`max_train_examples`
    of them) on SST and on paraphrase, Pearson 0 on STS, and their `overall`; with the SHA-256 of every file read.
    Raises `TransferError` (one line) where the data cannot be read."""
    import numpy as np

    from tf_transfer.core import disk
    from tf_transfer.data import cs224n
    from tf_transfer.studies.multitask.multitask_steps import overall_score

    settings = {key: config.get(key) for key in ("data_format", "split_seed", "quora_dev_fraction",
                                                  "max_train_examples")}
    data = cs224n.load(data_dir, settings["data_format"] or "cs224n", settings["quora_dev_fraction"],
                       settings["split_seed"] or 0)
    tasks = {}
    for name in ("sst", "para"):
        train = np.asarray(cs224n.cap(data.tasks[name].train, settings["max_train_examples"]).labels)
        values, counts = np.unique(train, return_counts=True)
        majority = values[int(np.argmax(counts))]
        dev = np.asarray(data.tasks[name].dev.labels)
        tasks[name] = {"metric": SCORES[name], "score": float(np.mean(dev == majority)), "predicts": int(majority),
                       "train_examples": len(train), "dev_examples": len(dev),
                       "note": "the training set's majority class"}
    tasks["sts"] = {"metric": SCORES["sts"], "score": 0.0, "predicts": None,
                    "dev_examples": len(data.tasks["sts"].dev.labels),
                    "note": "a constant's correlation is undefined; 0 used"}
    files = sorted({os.path.basename(e.source) for t in data.tasks.values() for e in (t.train, t.dev) if e.source})
    return {"data_settings": settings, "tasks": tasks,
            "overall": overall_score(tasks["sst"]["score"], tasks["para"]["score"], tasks["sts"]["score"]),
            "files": {name: disk.file_sha256(os.path.join(data_dir, name)) for name in files}}


def write_constant(runs_dir: str, found: dict, command: str) -> str:
    """`found` (`constant_prediction`) as `<runs_dir>/constant_prediction.json`, saying the `command` that wrote it."""
    from tf_transfer.training import record

    path = os.path.join(runs_dir, FILE)
    record.write_json_atomic(path, {"what": "the constant prediction's dev scores, the 10-point gate of the claims "
                                            "table (tf_transfer/reporting/multitask_claims.py)",
                                    "command": command, **found})
    return path


def read_constant(runs_dir: str) -> Optional[dict]:
    """The committed `constant_prediction.json` beside the runs, None where there is none."""
    path = os.path.join(runs_dir, FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def constant_for(done: list, runs_dir: str, data_dir: Optional[str], command: str) -> Optional[dict]:
    """The constant prediction for a report over a grid's completed runs (`done`, `grid.collect`'s entries):
    computed from `data_dir` where the report was given it, under `REFERENCE`'s data settings, and written beside
    the runs with `command`; else the committed file read back (None where there is none)."""
    if data_dir and done:
        reference = next((c for c in done if c["settings"]["part"] == REFERENCE), done[0])
        write_constant(runs_dir, constant_prediction(reference["summary"]["config"], data_dir), command)
    return read_constant(runs_dir)


# --- the claims ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RowClaim:
    """A paper's claim checked on the rows: `ours` and `note` are templates over the rows' best-on-dev scores
    (`{li_finetune[sts]:.3f}`; `{a-b[overall]:+.3f}` is row a's score minus row b's) and `{way}`, whether the
    first of `pairs` goes the paper's way; `pairs` are the claim's comparisons, `(a, b, score)`: a above b by more
    than `margin` (`direction` "at least"), within ±`margin` of b ("alike"), or not above b by more than it ("at
    most"), decided on the seed-paired interval of a - b (`claims.at_least`, `alike`, `at_most`), Holm over the
    pairs."""

    claim: str
    paper: str
    ours: str
    note: str
    pairs: tuple
    direction: str = "at least"
    margin: float = 0.0


# `overall` 0.01 is one point of the paper's scale: the margin of "about as good" and "does not help" claims, as the
# methods studies' one point of a GLUE score.
ONE_POINT = 0.01
ROW_CLAIMS = (
    RowClaim("Frozen BERT with trained heads is the weakest baseline (Table 2)",
             "0.606 vs 0.737 (fine-tune) and 0.767 (heads first)",
             "{li_heads_first[overall]:.4f} vs {li_finetune[overall]:.4f} and {li_heads_then_finetune[overall]:.4f}",
             "one seed each; a gap of {li_finetune-li_heads_first[overall]:.2f} against "
             "{li_heads_then_finetune-li_finetune[overall]:.3f} between the two fine-tuned rows; our frozen STS head "
             "is still at Pearson {li_heads_first[sts]:.2f} after ~125 steps",
             (("li_finetune", "li_heads_first", "overall"), ("li_heads_then_finetune", "li_heads_first", "overall"))),
    RowClaim("Heads first, then fine-tuning, is the best baseline, on every task (Table 2)",
             "0.767 vs 0.737; STS 0.811 vs 0.684",
             "{li_heads_then_finetune[overall]:.4f} vs {li_finetune[overall]:.4f}; STS "
             "{li_heads_then_finetune[sts]:.3f} vs {li_finetune[sts]:.3f}, SST {li_finetune[sst]:.4f} both",
             "one seed; {li_heads_then_finetune-li_finetune[overall]:+.3f} overall, and STS goes "
             "{li_heads_then_finetune-li_finetune[sts_way]}",
             (("li_heads_then_finetune", "li_finetune", "overall"), ("li_heads_then_finetune", "li_finetune", "sst"),
              ("li_heads_then_finetune", "li_finetune", "para"), ("li_heads_then_finetune", "li_finetune", "sts"))),
    RowClaim("Mean pooling beats [CLS] for paraphrase and similarity (Table 3 vs Table 2)",
             "para 0.882 vs 0.855, STS 0.846 vs 0.684; overall 0.772 vs 0.737",
             "para {li_pooling_mean[para]:.4f} vs {li_finetune[para]:.4f}, STS {li_pooling_mean[sts]:.3f} vs "
             "{li_finetune[sts]:.3f}; overall {li_pooling_mean[overall]:.4f} vs {li_finetune[overall]:.4f}",
             "one seed; {li_pooling_mean-li_finetune[overall]:+.3f} overall, {way}; the order differs too (mean: "
             "para, sts, sst; [CLS]: sst, para, sts), as in the paper; SST is the constant {li_finetune[sst]:.4f} in "
             "both",
             (("li_pooling_mean", "li_finetune", "para"), ("li_pooling_mean", "li_finetune", "sts"))),
    RowClaim("[CLS] for sentiment with mean for the pairs is about as good as mean for all (Table 4 vs 3)",
             "0.770 vs 0.772 (20 epochs)",
             "{li_pooling_mixed[overall]:.4f} vs {li_pooling_mean[overall]:.4f} (STS {li_pooling_mixed[sts]:.3f} vs "
             "{li_pooling_mean[sts]:.3f}, para {li_pooling_mixed[para]:.4f} vs {li_pooling_mean[para]:.4f})",
             "one seed; {li_pooling_mixed-li_pooling_mean[overall_apart]:.4f} apart, but the rows differ only in SST's "
             "pooling and neither SST head moves off the constant {li_pooling_mean[sst]:.4f} at this budget",
             (("li_pooling_mixed", "li_pooling_mean", "overall"),), "alike", ONE_POINT),
    RowClaim("Layer-wise decay ξ = 0.95 does not help (Tables 5, 6)",
             "0.769 vs 0.772 (mean); 0.770 vs 0.770 (mixed)",
             "{li_llrd[overall]:.4f} vs {li_pooling_mean[overall]:.4f} (mean); {li_llrd_mixed[overall]:.4f} vs "
             "{li_pooling_mixed[overall]:.4f} (mixed)",
             "one seed; {li_llrd-li_pooling_mean[overall]:+.3f} and {li_llrd_mixed-li_pooling_mixed[overall]:+.3f}, "
             "{way}; on 6 blocks the lowest block still trains at 0.95^5 = 0.77 of lr",
             (("li_llrd", "li_pooling_mean", "overall"), ("li_llrd_mixed", "li_pooling_mixed", "overall")),
             "at most", ONE_POINT),
    RowClaim("Summing the three losses per step hurts (Table 7 vs Table 4)",
             "0.759 vs 0.770",
             "{li_summed[overall]:.4f} vs {li_pooling_mixed[overall]:.4f} (STS {li_summed[sts]:.3f} vs "
             "{li_pooling_mixed[sts]:.3f})",
             "one seed; {li_summed-li_pooling_mixed[overall]:+.3f}, {way} for another reason: with 1,000 examples per "
             "task summed makes a third of the sequential steps, where the paper blames reusing the small tasks "
             "10–20 times; both [CLS] for SST, mean for the pairs",
             (("li_pooling_mixed", "li_summed", "overall"),)),
    # `claims.table` writes a cell's "|" as "/": the absolute difference is spelt out.
    RowClaim("The SBERT pair head [u, v, abs(u − v)] helps paraphrase and similarity (abstract)",
             "no numbers",
             "SBERT {li_finetune[overall]:.4f} vs packed pair {li_concat[overall]:.4f} (STS {li_finetune[sts]:.3f} vs "
             "{li_concat[sts]:.3f}, para {li_finetune[para]:.4f} both)",
             "one seed, {way} by {li_concat-li_finetune[overall_apart]:.3f}; the paper reports no pair head but SBERT",
             (("li_finetune", "li_concat", "para"), ("li_finetune", "li_concat", "sts"))),
)
# The paper's claims no row tests yet.
UNRUN = (
    ("lr 1e-5 beats 2e-5 (Tables 3, 5, 6)", "0.772 vs 0.762 (Table 3)",
     "not among the rows: `li_pooling_mean` with `--lr=2e-5`"),
    ("More epochs help (Tables 4, 8)", "100 vs 20 epochs: 0.773 vs 0.770 (Table 4), but 0.770 vs 0.772 (Table 3)",
     "our rows train 4 epochs"),
)
WAYS = {1: "the paper's direction", -1: "the other way", 0: "neither way"}  # by the sign of a - b
DECIDE = {"at least": claims.at_least, "alike": claims.alike, "at most": claims.at_most}


def best_scores(summary: dict) -> dict:
    """A row's best-on-dev scores, `{sst, para, sts, overall}` (None where the row has no best epoch)."""
    best = summary.get("best_epoch")
    scores = summary["epochs"][best - 1]["test"] if best else {}
    return {task: scores.get(key) for task, key in SCORES.items()}


class _Cells(dict):
    """The template namespace: a row's scores by its name, and `a-b` as row a's minus row b's per score, with
    `<score>_way` (the paper's direction where a - b has the sign the claim expects, `sign`) and `<score>_apart`
    (the size)."""

    def __init__(self, rows: dict, sign: float):
        super().__init__(rows)
        self.sign = sign

    def __missing__(self, key: str):
        a, b = key.split("-")
        found = {}
        for score in SCORES:
            difference = self[a][score] - self[b][score]
            found[score], found[f"{score}_apart"] = difference, abs(difference)
            found[f"{score}_way"] = WAYS[int(np.sign(difference * self.sign))]
        return found


def _fill(note: str, rows: dict, spec: RowClaim) -> str:
    """`note` with the rows' numbers, `{way}` read from the first pair's rows on `overall`, and minus signs as the
    table's prose writes them."""
    # An "at most" claim's pairs are listed a not above b: the paper's way is a - b below 0.
    cells = _Cells(rows, -1.0 if spec.direction == "at most" else 1.0)
    first_a, first_b, _ = spec.pairs[0]
    cells["way"] = cells[f"{first_a}-{first_b}"]["overall_way"]
    return re.sub(r"-(?=\d)", "−", note.format_map(cells))


def gate(rows: dict, constant: Optional[dict]) -> tuple:
    """`(testable, gain in points)`: whether `REFERENCE`'s `overall` beats the constant prediction's by 10 points
    (`claims.testable_from_runs`); gain None where the constant is unknown."""
    if constant is None or REFERENCE not in rows:
        return False, None
    gain = 100 * (rows[REFERENCE]["overall"] - constant["overall"])
    return bool(claims.testable_from_runs([rows[REFERENCE]], {"score": constant["overall"]},
                                          lambda scores: scores["overall"])), gain


def gate_text(testable: bool, gain: Optional[float], seeds: int) -> str:
    """The gate's reading, as the basis cells open (`seeds`: the reference row's)."""
    if gain is None:
        return "not testable at this budget: the constant prediction's score is unknown (no constant_prediction.json)"
    side = "at least" if testable else "under"
    return (f"{'testable' if testable else 'not testable at this budget'}: full fine-tuning is {gain:.1f} points above "
            f"the constant prediction on dev ({side} {claims.LEARNED_POINTS:g})"
            + (", and one seed gives no interval" if seeds == 1 and not testable else ""))


def claims_of(summaries: dict, constant: Optional[dict]) -> list:
    """The paper's claims as `Claim`s over `{row: [summary, ...]}` (one per seed), gated on `constant`."""
    runs = {row: [best_scores(s) for s in found] for row, found in summaries.items() if found}
    rows = {row: {k: stats.mean([s[k] for s in seeds]) for k in SCORES} for row, seeds in runs.items()}
    testable, gain = gate(rows, constant)
    found = []
    for spec in ROW_CLAIMS:
        if any(row not in rows for pair in spec.pairs for row in pair[:2]):
            found.append(not_run(spec.claim, spec.paper, "not all of its rows have run"))
            continue
        intervals = {f"{TASK_TITLES.get(s, s)} {a} − {b}": _paired(summaries[a], summaries[b], s) if testable
                     else None for a, b, s in spec.pairs}
        decided = DECIDE[spec.direction](intervals, spec.margin)
        ours = spec.ours.format_map(_Cells(rows, 1.0))
        found.append(Claim(spec.claim, spec.paper, ours, decided.verdict,
                           f"{gate_text(testable, gain, len(runs.get(REFERENCE, [])))}; {_fill(spec.note, rows, spec)}"
                           + (f"; per comparison: {decided.cells(digits=3)}" if testable else ""), decided.results))
    return found + [not_run(claim, paper, basis) for claim, paper, basis in UNRUN]


def _paired(a: list, b: list, score: str) -> stats.Interval:
    """The interval of row a's best-on-dev `score` minus row b's, paired by seed (undefined for one seed)."""
    return tables.seed_difference(a, b, lambda summary: best_scores(summary)[score])


def constant_sentence(summaries: dict, constant: Optional[dict]) -> str:
    """What the gate read: full fine-tuning's `overall` against the constant prediction's, and per task."""
    if constant is None or not summaries.get(REFERENCE):
        return "The constant prediction's score is not known here, so every score claim is not testable."
    full = best_scores(summaries[REFERENCE][0])
    tasks = constant["tasks"]
    exact = [TASK_TITLES[t] for t in ("sst", "para") if abs(full[t] - tasks[t]["score"]) < 1e-9]
    learned = [TASK_TITLES[t] for t in TASK_TITLES if TASK_TITLES[t] not in exact]
    gain = 100 * (full["overall"] - constant["overall"])
    return (f"Full fine-tuning (`{REFERENCE}`, {full['overall']:.4f}) is {gain:.1f}"
            f" points of `overall` above the constant prediction's {constant['overall']:.4f} (`runs/{FILE}`): the "
            f"training set's majority class on SST ({tasks['sst']['score']:.4f}) and on paraphrase "
            f"({tasks['para']['score']:.4f}, \"not a duplicate\"), and r = 0 on STS (a constant's correlation is "
            "undefined; 0 used, so (r + 1) / 2 = 0.5). Per task it is "
            + ", ".join(f"{TASK_TITLES[t]} {100 * (full[t] - tasks[t]['score']):+.1f}" for t in TASK_TITLES)
            + " points above the constant; the claims compare `overall`, so the gate reads `overall`."
            + (f" Its {' and '.join(exact)} scores are exactly the constant's"
               + (f", so only its {learned[0]} head learned." if len(learned) == 1 else ".") if exact else ""))


def claims_lines(summaries: dict, constant: Optional[dict]) -> list:
    """The generated part of the report's claims section: what the gate read, and the claims table."""
    found = claims_of(summaries, constant)
    untested = all(c.verdict in (stats.NOT_TESTABLE, stats.NOT_RUN) for c in found)
    one_seed = all(len(runs) == 1 for runs in summaries.values() if runs)
    return [constant_sentence(summaries, constant)
            + (" So every score claim here is not testable at this budget"
               + (", and one seed per row would give no interval anyway." if one_seed else ".") if untested else ""),
            "", claims.table(found)]


# --- the report's generated blocks ----------------------------------------------------------------------------------


def _markers(name: str) -> tuple:
    return (f"<!-- {name}: generated from the runs (tf_transfer/reporting/multitask_claims.py); not by hand. -->",
            f"<!-- End of the {name}. -->")


def has_blocks(text: str, names) -> bool:
    """Whether `text` (a report's README) holds every named generated block."""
    return all(marker in text for name in names for marker in _markers(name))


def with_blocks(text: str, blocks: dict) -> str:
    """`text` with each generated block `{name: lines}` between its markers replaced by `lines` (the hand-written
    rest kept)."""
    for name, lines in blocks.items():
        begin, end = _markers(name)
        start, stop = text.index(begin), text.index(end) + len(end)
        # Blank lines around the lines: a table's last row must not run into the closing marker.
        text = text[:start] + "\n".join([begin, "", *lines, "", end]) + text[stop:]
    return text


# The files a report over a folder without the README's blocks writes instead, per block.
BLOCK_FILES = {"claims table": "claims.md", "rows' table": "table.md"}


def write_blocks(out: str, blocks: dict) -> str:
    """Writes the generated `blocks` (`{name: lines}`) into `<out>/README.md` where it holds them all (the rest of it
    is written by hand), else each into its own file (`BLOCK_FILES`); returns what it wrote."""
    os.makedirs(out, exist_ok=True)
    readme = os.path.join(out, "README.md")
    text = ""
    if os.path.exists(readme):
        with open(readme, encoding="utf-8") as f:
            text = f.read()
    if has_blocks(text, blocks):
        with open(readme, "w", encoding="utf-8") as f:
            f.write(with_blocks(text, blocks))
        return readme
    for name, lines in blocks.items():
        with open(os.path.join(out, BLOCK_FILES[name]), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return out
