"""The methods_paired study (experiments/methods_paired.py): its design recomputed from the committed runs it was
planned on, its grid's order (a seed's four runs together, searches on a seed never compared), and its report's pairing
rules on made-up summaries (no training)."""

import pickle

import pytest

from experiments import adaptive_freezing, adaptive_freezing_report
from experiments import methods_paired as study_module
from experiments import methods_paired_report as report
from experiments import methods_report
from tf_transfer.core import stats
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
            found.setdefault(method, {})[entry["settings"]["seed"]] = methods_report.score(entry["summary"])
    full = found.pop(adaptive_freezing_report.FULL)
    return [[scores[seed] - full[seed] for seed in sorted(scores)] for scores in found.values()]


@pytest.mark.parametrize("task", ["sst2", "stsb", "mrpc"])
def test_the_planning_sd_is_what_the_committed_adaptive_runs_measured(task):
    samples = _paired_differences(task)
    assert len(samples) == 3 and all(len(s) == 5 for s in samples)
    assert round(stats.pooled_sd(samples), 2) == study_module.PLANNING_SD[task]


def test_seeds_come_from_the_power_calculation_and_mrpc_is_left_out():
    assert study_module.SEEDS == {"sst2": [1, 2, 3, 4], "stsb": list(range(1, 13))}
    assert "mrpc" not in study_module.TASKS
    assert stats.seeds_for_margin(study_module.PLANNING_SD["mrpc"], study_module.MARGIN) > study_module.MOST_SEEDS
    for task, seeds in study_module.SEEDS.items():
        n = len(seeds)
        assert stats.expected_half_width(study_module.PLANNING_SD[task], n) <= study_module.MARGIN
        assert stats.expected_half_width(study_module.PLANNING_SD[task], n - 1) > study_module.MARGIN


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
    assert report.collapsed(_summary(1, "Intel", best=0.5, constant=0.5))
    assert not report.collapsed(_summary(1, "Intel", best=0.51, constant=0.5))
