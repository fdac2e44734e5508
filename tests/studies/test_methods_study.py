"""The methods study (experiments/methods.py): its grid, the per-method rate search and its report's claims."""

import csv
import os

import pytest

from experiments import load_grid
from experiments import methods as study_module
from tf_transfer.studies import grid as studies
from tf_transfer.training import record


@pytest.fixture(scope="module")
def study():
    return load_grid("methods")


def test_cpu_grid_searches_each_family_then_runs_every_method_at_three_seeds(study):
    runs = study.runs("cpu")
    search = [r for r in runs if r["part"].startswith("search_")]
    compared = [r for r in runs if not r["part"].startswith("search_")]
    assert len(search) == 5 * 4 * 3 and len(compared) == 5 * 8 * 3
    assert {r["part"] for r in compared} == set(study_module.METHODS)
    assert all(r["lr"] == study_module.PENDING_LR for r in compared)
    assert {(r["task"], r["max_train_examples"], r["validation_fraction"], r["max_epochs"]) for r in runs} == {
        (t, 1000, 0.015 if t == "sst2" else 0.1, 4) for t in study_module.TASKS}
    paper = study.runs("paper")  # whole training sets, but SST-2 stays a sample
    assert {(r["task"], r.get("max_train_examples")) for r in paper} == {
        (t, 10000 if t == "sst2" else None) for t in study_module.TASKS}
    search_folders = {studies.run_dir("runs", study, r) for r in search}
    for run in compared:
        assert study_module.method_of(run) == run["part"]
        assert {studies.run_dir("runs", study, probe) for probe in study_module.search_runs(run)} <= search_folders
    lora_last2 = next(r for r in compared if r["part"] == "LoRA r8, last 2, cached")
    assert lora_last2["cache_frozen"] is True and lora_last2["trainable_layers"] == 2


def _summary(folder, task_metric, val, test=50.0, seconds=10.0, memory=2000.0, trainable=1000, epochs=3,
             extra=None, settings=None):
    """A completed run's summary: `epochs` epochs, the best (epoch 2) scoring `val`/`test` (x100), `seconds` each."""
    metric = task_metric
    records = [{"epoch": e, "epoch_time_s": seconds, "train_time_s": seconds * e, "epoch_cpu_s": seconds,
                "train_cpu_s": seconds * e, "val": {metric: (val if e == 2 else val - 5) / 100},
                "test": {metric: (test if e == 2 else test - 5) / 100}} for e in range(1, epochs + 1)]
    record.write_json_atomic(os.path.join(folder, "summary.json"), {
        "completed": True, "epochs": records, "best_epoch": 2, "metric": metric, "stopped_early": True,
        "early_stopping": {"patience": 2, "wait": 2}, "peak_memory_mb": memory, "trainable_params": trainable,
        "total_params": 22_000_000, "lr": extra.get("lr") if extra else None, "cache_time_s": 0.0,
        "seed": (settings or {}).get("seed"), "task": (settings or {}).get("task"),
        "config": {k: v for k, v in (settings or {}).items() if k != "part"}, **(extra or {})})


def test_searched_rate_is_the_best_validation_score_and_waits_for_every_search_run(study, tmp_path):
    runs_dir = str(tmp_path)
    run = next(r for r in study.runs("cpu") if r["part"] == "LoRA r16" and r["task"] == "rte" and r["seed"] == 1)
    probes = study_module.search_runs(run)
    assert [p["lr"] for p in probes] == study_module.SEARCH["lora"][0]
    assert all(p["lora_rank"] == 8 and p["seed"] == 0 for p in probes)  # LoRA r16 takes rank 8's search
    for probe, val in zip(probes[:2], (60.0, 70.0)):
        _summary(studies.run_dir(runs_dir, study, probe), "accuracy", val)
    assert study_module.searched_lr(run, runs_dir, study) is None  # the third rate has not run
    _summary(studies.run_dir(runs_dir, study, probes[2]), "accuracy", 70.0)
    assert study_module.searched_lr(run, runs_dir, study) == probes[1]["lr"]  # a tie goes to the smaller rate
    resolved = studies.resolve(study, run, runs_dir)
    assert resolved["lr"] == probes[1]["lr"] and resolved["lora_rank"] == 16


# Per method: (score delta vs full in points, memory, seconds per epoch) of the synthetic runs below.
SYNTHETIC = {"full fine-tuning": (0.0, 2600, 27), "last 2, cached": (-3.0, 1550, 5),
             "last 2, not cached": (-3.0, 2100, 14), "LoRA r4": (-1.0, 2300, 20), "LoRA r8": (-0.5, 2300, 20),
             "LoRA r16": (-0.2, 2320, 21), "LoRA r8, last 2, cached": (-4.0, 1540, 5), "BitFit": (-2.5, 2250, 19)}


def _collected(study, tmp_path, tasks, data_dir=None):
    collected = []
    for run in study.runs("cpu", tasks=tasks):
        if run["part"].startswith("search_"):
            continue
        settings = {**run, "lr": 1e-3, "data_dir": data_dir}
        folder = str(tmp_path / run["part"].replace(" ", "_").replace(",", "") / run["task"] / f"seed{run['seed']}")
        delta, memory, seconds = SYNTHETIC[run["part"]]
        # Validation 99: full fine-tuning learned (10+ points above the constant prediction), so claims are tested.
        _summary(folder, "accuracy", 99.0, test=80.0 + delta + run["seed"] * 0.1, seconds=seconds,
                 memory=memory + run["seed"], extra={"lr": 1e-3, "peak_above_start_mb": memory - 1000 + run["seed"]},
                 settings=settings)
        collected.append({"settings": settings, "folder": folder, "summary": record.read_summary(folder),
                          "partial": None, "error": None, "stand_in": None})
    return collected


def test_report_opens_with_the_claims_and_gives_their_verdicts(study, tmp_path, glue_dir):
    collected = _collected(study, tmp_path / "runs", ["mrpc", "rte"], glue_dir)
    out = tmp_path / "report"
    study.report(collected, str(out), study, "cpu")
    text = (out / "README.md").read_text()
    assert text.index("## The claims, checked") < text.index("## Per method")
    claims = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[3] for line in text.splitlines()
              if line.startswith("| ") and (" | reproduced |" in line or " | not reproduced at this protocol |" in line)}
    # Every seed's difference is the same, so each interval is its point: a clear win, a clear loss.
    assert claims["LoRA (rank 8 on query and value) scores as full fine-tuning does"] == "reproduced"  # -0.5
    assert claims["BitFit (biases only) is competitive with full fine-tuning on small to medium data"] == \
        "not reproduced at this protocol"  # -2.5 points
    assert claims["LoRA trains faster than full fine-tuning (no gradients for the frozen weights)"] == "reproduced"
    # Above the start: 1 - 1300/1600 and 1 - 1250/1600, inside 26% +- 10 points.
    assert claims["LoRA and BitFit save about a quarter of full fine-tuning's training memory"] == "reproduced"
    assert "LoRA r8 +18.7% [" in text and "BitFit +21.9% [" in text
    assert "| LoRA r8 | " in text and "| -0.5 [-0.5, -0.5] |" in text
    # The constant prediction's GLUE dev score beside the methods', read from the runs' GLUE folder, and kept for a
    # report regenerated where that folder is not.
    assert text.count("| majority class (constant prediction) | – | ") == 2
    assert (out / "majority.csv").read_text().count("\n") == 3
    with open(out / "runs.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 8 * 3 and {r["method"] for r in rows} == set(study_module.METHODS)
    assert (out / "score_vs_time.png").stat().st_size > 0 and (out / "score_vs_memory.png").stat().st_size > 0
    assert len(claims) == 5  # both tasks of the report are complete: every claim decided


def test_report_of_an_unfinished_grid_says_what_is_missing(study, tmp_path):
    collected = _collected(study, tmp_path / "runs", ["mrpc"])
    collected = [c for c in collected if c["settings"]["part"] != "BitFit"]
    for run in study.runs("cpu", tasks=["mrpc"]):
        if run["part"] == "BitFit":
            collected.append({"settings": run, "folder": "nowhere", "summary": None, "partial": None, "error": None,
                              "stand_in": None})
    out = tmp_path / "report"
    study.report(collected, str(out), study, "cpu")
    text = (out / "README.md").read_text()
    claims = text.split("## Per method")[0]
    bitfit = next(line for line in claims.splitlines() if line.startswith("| BitFit (biases only)"))
    assert "| not run yet | not run yet |" in bitfit  # no interval, so no verdict either
    assert "## Still to run" in text and "3 runs of part `BitFit` (mrpc): not run yet." in text


def test_full_budget_grid_searches_each_method_and_tries_a_rate_beyond_an_end_only_when_the_best_sits_there(
        tmp_path):
    from experiments import methods_full

    study, runs_dir = load_grid("methods_full"), str(tmp_path)
    runs = study.runs("cpu", tasks=["rte"])
    compared = [r for r in runs if r["part"] in methods_full.METHODS]
    assert len(compared) == 5 * 5 and {r["seed"] for r in compared} == {1, 2, 3, 4, 5}  # fresh seeds, not 0
    assert {(r["max_epochs"], r["patience"], r["lr_schedule"]) for r in runs} == {(10, 3, "linear")}
    assert all(r.get("max_train_examples") is None for r in runs)  # RTE's whole training set
    lora = next(r for r in compared if r["part"] == "LoRA r8")
    search = [r for r in runs if r["part"] == "search: LoRA r8"]
    beyond = next(r for r in runs if r["part"] == "beyond: LoRA r8")
    rates = methods_full.RATES["LoRA r8"]
    assert [r["lr"] for r in search] == rates and rates[-1] / rates[0] >= 30
    for run, val in zip(search, (60.0, 70.0, 65.0, 50.0)):  # the best inside the range
        _summary(studies.run_dir(runs_dir, study, run), "accuracy", val)
    assert studies.resolve(study, beyond, runs_dir)["lr"] == studies.NOT_NEEDED
    assert studies.resolve(study, lora, runs_dir)["lr"] == rates[1]
    assert not any(r["part"] == "beyond: LoRA r8" for r in (c["settings"] for c in studies.collect(
        study, runs, runs_dir)))  # a run not needed is neither trained nor reported
    _summary(studies.run_dir(runs_dir, study, search[-1]), "accuracy", 80.0)  # now the best sits at the top
    assert studies.resolve(study, beyond, runs_dir)["lr"] == methods_full.BEYOND["LoRA r8"][1]
    assert studies.resolve(study, lora, runs_dir) is None  # waits for the rate beyond
    _summary(studies.run_dir(runs_dir, study, {**beyond, "lr": methods_full.BEYOND["LoRA r8"][1]}), "accuracy", 75.0)
    assert studies.resolve(study, lora, runs_dir)["lr"] == rates[-1]


def test_a_figure_with_no_point_yet_is_not_drawn_and_an_older_one_is_removed(tmp_path):
    from tf_transfer.reporting import methods_report

    path = tmp_path / "score_vs_time.png"
    path.write_bytes(b"an older figure")
    nothing = {"full": {"time_ratio": None, "score": None}, "lora": {"time_ratio": None, "score": 84.0}}
    methods = {"full": {"trainable_layers": "all"}, "lora": {"method": "lora"}}
    assert methods_report.figure(str(path), nothing, methods, "time_ratio", "x", "t") is False
    assert not path.exists()
    one = {**nothing, "lora": {"time_ratio": 0.5, "score": 84.0, "intervals": {}}}
    assert methods_report.figure(str(path), one, methods, "time_ratio", "x", "t") is True
    assert path.read_bytes().startswith(b"\x89PNG")


def _timed_run(task: str, method: str, seed: int, cpu_s: float, wall_s: float) -> dict:
    """A compared run of one epoch taking `cpu_s` CPU seconds over `wall_s` wall seconds (no training)."""
    epoch = {"epoch_cpu_s": cpu_s, "epoch_time_s": wall_s, "train_cpu_s": cpu_s, "train_time_s": wall_s,
             "val": {"accuracy": 0.8}, "test": {"accuracy": 0.8}}
    summary = {"seed": seed, "metric": "accuracy", "best_epoch": 1, "epochs": [epoch], "lr": 1e-3,
               "machine": {"cpu": "AMD EPYC", "cores": 1, "isa": ["avx2"]}}
    return {"settings": {"task": task, "part": method, "seed": seed}, "summary": summary}


def test_the_time_claim_is_shown_over_all_runs_and_over_the_uncontended_ones():
    from tf_transfer.reporting import method_comparison, methods_report

    methods = {name: study_module.METHODS[name] for name in (methods_report.FULL, "LoRA r8")}
    # LoRA saves 40%, 35% and 30% at seeds 0-2; its seed-0 run waited for its core (half its wall time on the CPU).
    compared = [_timed_run("sst2", methods_report.FULL, seed, 100.0, 100.0) for seed in range(3)]
    compared += [_timed_run("sst2", "LoRA r8", seed, cpu, 2 * cpu if seed == 0 else cpu)
                 for seed, cpu in enumerate([60.0, 65.0, 70.0])]
    table = {key: methods_report.measures(runs, "cpu", "peak_memory_mb")
             for key, runs in methods_report.cells(compared, methods).items()}
    uncontended = methods_report.uncontended_table(compared, "cpu", "peak_memory_mb", methods)
    claim = methods_report._faster_claim(table, ["sst2"], uncontended)
    assert claim.verdict == "reproduced"
    assert claim.ours.startswith("time per epoch saved: +35.0% [")
    assert "; uncontended pairs only: +32.5% [" in claim.ours
    assert "uncontended pairs only: sst2 +32.5% [" in claim.basis and "over 2 seeds" in claim.basis
    section = "\n".join(methods_report.contention_section(compared))
    assert "1 of the 6 compared runs were contended" in section
    assert "| sst2 LoRA r8 seed 0 | 0.50 | 120 | 60 |" in section


def test_a_run_that_predates_the_constant_record_is_flagged_collapsed_by_its_splits_baseline():
    from tf_transfer.reporting import method_comparison, methods_report

    run = _timed_run("mrpc", "BitFit", 0, 10.0, 10.0)["summary"]  # best validation accuracy 0.8, no record
    assert methods_report.collapsed(run, validation_baseline={"score": 0.8})
    assert not methods_report.collapsed(run, validation_baseline={"score": 0.79})
    assert not methods_report.collapsed(run)  # nothing to compare with: not flagged
    design = method_comparison.Design({}, ["mrpc"], study_module.method_of, study_module.pick_rate,
                                   search_labels={"search_bitfit": "BitFit"})
    search = {"settings": {"task": "mrpc", "part": "search_bitfit", "seed": 0, "lr": 1e-3}, "summary": run}
    rows = method_comparison.search_rows([search], ["mrpc"], design, {("mrpc", 0): {"score": 0.8}})
    assert rows == [["mrpc", "BitFit", "yes", "**0.001: 80.0** (collapsed)"]]
