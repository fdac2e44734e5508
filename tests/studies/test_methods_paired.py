"""The methods_paired study (experiments/methods_paired.py): its design recomputed from the committed runs it was
planned on, its grid's order (a seed's four runs together, searches on a seed never compared), and its report's pairing
rules on made-up summaries (no training)."""

import pickle

import pytest

from experiments import adaptive_freezing
from experiments import methods_paired as study_module
from tf_transfer.core import planning, stats
from tf_transfer.reporting import adaptive_freezing_report
from tf_transfer.reporting import claims as claims_model
from tf_transfer.reporting import method_comparison
from tf_transfer.reporting import methods_paired_report as report
from tf_transfer.studies import grid as studies

RUNS_DIR = "reports/runs"


@pytest.fixture(scope="module")
def grid_runs():
    return study_module.GRID.runs("cpu")


def _paired_differences(task: str) -> list:
    """Per compared method of the adaptive-freezing study, its seed-paired GLUE dev differences to full fine-tuning."""
    grid = adaptive_freezing.GRID
    runs = [r for r in grid.runs("cpu", tasks=[task]) if r["seed"] != adaptive_freezing_report.SEARCH_SEED]
    found = {}
    for entry in studies.collect(grid, runs, RUNS_DIR, log=lambda line: None):
        method = adaptive_freezing_report.compared_method(entry["settings"]["part"])
        if method and entry["summary"]:
            found.setdefault(method, {})[entry["settings"]["seed"]] = method_comparison.score(entry["summary"])
    full = found.pop(adaptive_freezing_report.FULL)
    return [[scores[seed] - full[seed] for seed in sorted(scores)] for scores in found.values()]


@pytest.mark.parametrize("task", ["sst2", "stsb", "mrpc"])
def test_the_planning_sd_is_what_the_committed_adaptive_runs_measured(task):
    samples = _paired_differences(task)
    assert len(samples) == 3 and all(len(s) == 5 for s in samples)
    assert round(planning.pooled_sd(samples), 2) == study_module.PLANNING_SD[task]


def test_seeds_come_from_the_power_calculation_and_mrpc_is_left_out():
    assert study_module.SEEDS == {"sst2": [1, 2, 3, 4], "stsb": list(range(1, 13))}
    assert "mrpc" not in study_module.TASKS
    assert planning.seeds_for_margin(study_module.PLANNING_SD["mrpc"], study_module.MARGIN) > study_module.MOST_SEEDS
    for task, seeds in study_module.SEEDS.items():
        n = len(seeds)
        assert planning.expected_half_width(study_module.PLANNING_SD[task], n) <= study_module.MARGIN
        assert planning.expected_half_width(study_module.PLANNING_SD[task], n - 1) > study_module.MARGIN


def test_the_grid_pickles_for_a_run_in_its_own_process():
    assert pickle.loads(pickle.dumps(study_module.GRID)).name == "methods_paired"


def test_searches_use_seed_0_only_and_a_seeds_four_runs_are_listed_together(grid_runs):
    searches = [r for r in grid_runs if not report.compared({"settings": r})]
    assert {r["seed"] for r in searches} == {study_module.SEARCH_SEED}
    assert not any(study_module.method_of(r) == study_module.FULL for r in searches)  # read from adaptive_freezing
    compared = [r for r in grid_runs if report.compared({"settings": r})]
    assert study_module.SEARCH_SEED not in {r["seed"] for r in compared}
    assert len(compared) == 4 * (4 + 12)
    for start in range(0, len(compared), 4):
        block = compared[start:start + 4]
        assert len({(r["task"], r["seed"]) for r in block}) == 1
        assert [study_module.method_of(r) for r in block] == list(study_module.METHODS)
    assert grid_runs.index(compared[0]) > max(grid_runs.index(r) for r in searches)


def test_full_fine_tunings_rate_and_one_search_run_are_read_from_the_adaptive_study(grid_runs):
    run = next(r for r in grid_runs if r["task"] == "stsb" and report.compared({"settings": r}))
    assert study_module.method_rate(study_module.FULL, run, RUNS_DIR, study_module.GRID) == 1e-4
    scores = study_module._scores(run, "last 2, cached", RUNS_DIR, study_module.GRID, [1e-4])
    assert scores is not None and 0.7 < scores[1e-4] < 0.9


def _summary(seed: int, cpu: str, best: float = 0.9, constant: float = 0.5) -> dict:
    return {"seed": seed, "machine": {"cpu": cpu, "cores": 1, "isa": ["avx2"]}, "metric": "accuracy",
            "constant_prediction": {"score": constant, "best": best}}


def _entry(task: str, seed: int, method: str, summary) -> dict:
    return {"settings": {"task": task, "seed": seed, "part": study_module.seed_part(task, seed, method)},
            "summary": summary, "stand_in": None}


def test_a_seed_run_on_two_kinds_of_machine_is_not_paired():
    collected = [_entry("stsb", 1, m, _summary(1, "Intel")) for m in study_module.METHODS]
    collected += [_entry("stsb", 2, m, _summary(2, "Intel" if i < 2 else "AMD"))
                  for i, m in enumerate(study_module.METHODS)]
    assert report.straddling_seeds(collected) == [("stsb", 2)]
    kept = report.paired_collected(collected)
    assert {r["settings"]["seed"] for r in kept} == {1}
    lines = "\n".join(report.pairs_section(collected, study_module.GRID.report.__self__))
    assert "stsb 1" in lines and "stsb seed 2" in lines


def test_a_run_at_the_constant_prediction_is_flagged_collapsed():
    assert method_comparison.collapsed(_summary(1, "Intel", best=0.5, constant=0.5))
    assert not method_comparison.collapsed(_summary(1, "Intel", best=0.51, constant=0.5))


# Per method: (GLUE dev points above or below full fine-tuning's, CPU seconds per epoch).
SYNTHETIC = {"full fine-tuning": (0.0, 100.0), "last 2, cached": (-0.5, 30.0), "LoRA r8": (-3.0, 65.0),
             "BitFit": (-6.0, 66.0)}


def _run_summary(task: str, seed: int, method: str, cpu: str = "Intel") -> dict:
    metric = "spearman" if task == "stsb" else "accuracy"
    delta, seconds = SYNTHETIC[method]
    dev = (80.0 + delta + 0.2 * seed + (0.3 if seed % 2 else 0.0)) / 100
    epochs = [{"epoch": e, "train_time_s": seconds * e, "train_cpu_s": seconds * e, "epoch_cpu_s": seconds + 5,
               "speed_probe_cpu_ms": 10.0 + seed, "val": {metric: 0.9 if e == 2 else 0.85},
               "test": {metric: dev if e == 2 else dev - 0.05}} for e in (1, 2, 3)]
    return {"completed": True, "task": task, "seed": seed, "metric": metric, "epochs": epochs, "best_epoch": 2,
            "stopped_early": True, "early_stopping": {"patience": 2, "wait": 1}, "lr": 1e-4, "num_layers": 6,
            "trainable_layers": "all", "trainable_params": 1000, "total_params": 22_000_000, "cache_time_s": 0.0,
            "cache_build_cpu_s": None, "peak_memory_mb": 2000.0, "peak_above_start_mb": 200.0 + seconds,
            "machine": {"cpu": cpu, "cores": 1, "isa": ["avx2"]}, "examples": {"train": 100, "validation": 10,
                                                                               "test/dev": 20},
            "constant_prediction": {"score": 0.5, "best": 0.9}, "config": {"task": task, "seed": seed}}


def _report(tmp_path, last_seed: int) -> str:
    """The report over made-up runs of every compared seed up to `last_seed` (the rest not run)."""
    collected = [{"settings": {**run, "lr": 1e-4}, "folder": str(tmp_path / "runs" / "methods_paired" / "x"),
                  "summary": (_run_summary(run["task"], run["seed"], study_module.method_of(run))
                              if report.compared({"settings": run}) and run["seed"] <= last_seed else None),
                  "partial": None, "error": None, "stand_in": None}
                 for run in study_module.GRID.runs("cpu")]
    out = tmp_path / "report"
    out.mkdir()
    # Full fine-tuning's validation 90 against the constant prediction's 50 on every seed: 40 points, testable.
    (out / "majority_validation.csv").write_text("task,seed,metric,score,examples,majority,note\n" + "".join(
        f"{t},{s},{'spearman' if t == 'stsb' else 'accuracy'},0.5,10,1,made up\n" for t in ("sst2", "stsb")
        for s in range(1, last_seed + 1)))
    study_module.GRID.report(collected, str(out), study_module.GRID, "cpu")
    return (out / "README.md").read_text()


def _verdicts(text: str) -> tuple:
    claims = text.split("## The claims")[1].split("##")[0]
    return claims, {row.split(" | ")[0].lstrip("| "): row.split(" | ")[3] for row in claims.splitlines()
                    if row.startswith("| ") and " | " in row and row.split(" | ")[3] in claims_model.VERDICTS}


def test_the_report_opens_with_the_answer_and_judges_on_seed_paired_intervals(tmp_path):
    text = _report(tmp_path, last_seed=max(max(seeds) for seeds in study_module.SEEDS.values()))
    assert text.index("## The answer") < text.index("## The design, fixed before") < text.index("## The claims")
    answer = text.split("## The design")[0]
    assert "+40.0 [+40.0, +40.0] points, testable" in answer
    assert "| last 2, cached | 4 | -0.5 [-0.5, -0.5] | 30% [30%, 30%] |" in answer
    assert "| BitFit | 12 | -6.0 [-6.0, -6.0] | 66% [66%, 66%] |" in answer
    claims, verdicts = _verdicts(text)
    assert "LoRA (rank 8 on query and value) scores as full fine-tuning does" in claims
    assert verdicts["LoRA (rank 8 on query and value) scores as full fine-tuning does"] == (
        "not reproduced at this protocol")
    assert verdicts["The last 2 blocks over the frozen-prefix cache score as full fine-tuning does"] == "target met"
    # LoRA saves 35% of the CPU seconds on both tasks (33% of its epochs' probe-divided seconds): both say faster.
    assert verdicts["LoRA r8 trains faster than full fine-tuning (no gradients for the frozen weights)"] == "reproduced"
    assert "sst2 reproduced: +35% [+35%, +35%], divided by the probe +33% [+33%, +33%]" in claims
    assert "- Intel, AVX2: sst2 4, stsb 12" in text


def test_a_claim_waits_for_every_planned_seed_before_its_verdict(tmp_path):
    """Seeds 1-3 run of SST-2's 4 and STS-B's 12: the figures so far are shown, the verdict is not read yet (a task
    still to come may become testable, and Holm then corrects over more tasks)."""
    claims, verdicts = _verdicts(_report(tmp_path, last_seed=3))
    assert set(verdicts.values()) == {stats.NOT_RUN}, verdicts
    assert claims.count("so far, no verdict until every planned seed has run (sst2 3 of 4 seeds, stsb 3 of 12 "
                        "seeds): mean of the testable tasks") == 3
