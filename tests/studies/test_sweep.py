"""The budgeted sweep: candidates, successive halving, the seed round, a killed sweep's rerun, the recommendation."""

import json
import os
import socket

import pytest

from conftest import run_module
from tf_transfer.core.errors import TransferError
from tf_transfer.studies import sweep


def test_candidates_cover_each_method_at_its_own_rates():
    found = sweep.candidates(["freeze", "lora", "bitfit"], num_layers=6)
    assert {"freeze_kall_lr2e-05", "freeze_k3_lr0.001", "lora_r8_kall_lr0.0005", "lora_r16_k2_lr0.002",
            "bitfit_kall_lr0.005"} <= set(found)
    assert found["freeze_k2_lr0.0001"] == {"trainable_layers": 2, "cache_frozen": True, "lr": 1e-4}
    assert found["lora_r4_k2_lr0.0005"]["cache_frozen"] is True
    assert len(found) == 2 * (1 + 3) + 2 * (3 + 3) + 2  # full + k in {1, 2, 3}; 3 ranks x {all, last 2}; BitFit
    assert set(sweep.candidates(["bitfit"], 6, lrs=[1e-3])) == {"bitfit_kall_lr0.001"}
    # Queued cheapest first: the last block over the cache (1 forward + 2 backward block passes), ..., LoRA on all
    # blocks (6 + 6), full fine-tuning (6 + 12) last.
    order = list(found)
    assert order[0].startswith("freeze_k1") and order[-1].startswith("freeze_kall")
    assert order.index("lora_r8_k2_lr0.0005") < order.index("lora_r8_kall_lr0.0005") < order.index("freeze_kall_lr2e-05")
    with pytest.raises(TransferError, match="'adapters' is not a method"):
        sweep.candidates(["adapters"], 6)


def test_the_recommendation_is_the_cheapest_within_the_seed_noise_of_the_best():
    scores = {"full": [0.84, 0.86, 0.85], "lora": [0.83, 0.85, 0.84], "k1": [0.70, 0.71, 0.69]}
    times = {"full": 60.0, "lora": 30.0, "k1": 5.0}
    chosen = sweep.recommend(scores, times)
    assert chosen["candidate"] == "lora" and chosen["best"] == "full"
    assert chosen["noise"] == pytest.approx(0.01) and chosen["within"] == ["full", "lora"]
    assert sweep.recommend({"a": [1.0], "b": [0.9]}, {"a": 9.0, "b": 1.0})["candidate"] == "a"  # noise unknown
    assert sweep.recommend({"mse_a": [0.5], "mse_b": [0.4]}, {}, lower_is_better=True)["candidate"] == "mse_b"


def test_the_recommendation_line_names_the_cache_build_a_cached_candidate_pays_once():
    from tf_transfer.reporting import sweep_report

    def row(name, vals, seconds, built):
        return {"candidate": name, "seeds": len(vals), "_vals": vals, "epoch_time_s": seconds, "status": "ran",
                "cache_build_s": built}

    rows = [row("freeze_kall", [0.84, 0.86], 60.0, None), row("freeze_k2", [0.85, 0.85], 8.0, 21.4)]
    chosen, line = sweep_report.recommendation(rows, "f1")
    assert chosen["candidate"] == "freeze_k2"
    assert line.endswith("8.0 s per epoch here, after 21 s building the frozen-prefix cache once.")
    assert sweep_report.recommendation(rows[:1], "f1")[1].endswith("60.0 s per epoch here.")


@pytest.mark.parametrize("text, fragment", [("soon", "is not a duration"), ("0m", "more than nothing")])
def test_a_budget_that_is_no_duration_is_refused(text, fragment):
    with pytest.raises(TransferError, match=fragment):
        sweep.parse_budget(text)


# Validation scores per epoch of four candidates, for a sweep whose runs are only these reports (no training).
SCORES = {"a": [0.80, 0.85, 0.86], "b": [0.50, 0.55, 0.60], "c": [0.82, 0.84, 0.85], "d": [0.40, 0.41, 0.42]}


def _fake_trial(url, trial_id, settings, folder, remaining_s):
    import optuna

    trial = optuna.trial.Trial(sweep.load(url), trial_id)
    name = os.path.basename(os.path.dirname(folder))
    for epoch, value in enumerate(SCORES[name], start=1):
        if sweep.report_epoch(trial, value + 0.01 * settings["seed"], epoch, len(SCORES[name])):
            return {"value": None, "pruned": True, "epoch_time_s": 1.0}
    return {"value": max(SCORES[name]) + 0.01 * settings["seed"], "pruned": False, "epoch_time_s": 1.0}


def test_successive_halving_prunes_the_weaker_then_the_best_run_at_more_seeds(tmp_path):
    import optuna

    study, url = sweep.open_study(str(tmp_path), {"lr": 1.0}, lambda: {name: {} for name in SCORES}, 600.0)
    assert sweep.run_sweep(study, url, str(tmp_path), _fake_trial, top=2, seeds=3, log=lambda line: None) == "done"
    states = {(t.params["candidate"], t.params["seed"]): t.state.name for t in study.trials}
    # Queued a, b, c, d: at epoch 1 only a trial in the best third of those that got there goes on (Optuna's
    # successive halving keeps the best one while fewer than three have).
    assert states[("a", 0)] == "COMPLETE" and states[("b", 0)] == "PRUNED" and states[("d", 0)] == "PRUNED"
    assert study.user_attrs["seed_round"] == [name for name in ("a", "c") if states[(name, 0)] == "COMPLETE"]
    assert states[("a", 1)] == states[("a", 2)] == "COMPLETE"
    # A budget already spent starts nothing.
    spent, url2 = sweep.open_study(str(tmp_path / "spent"), {}, lambda: {"a": {}}, 1.0)
    first = spent.ask()
    first.set_user_attr("train_s", 5.0)
    spent.tell(first, state=optuna.trial.TrialState.FAIL)
    assert sweep.run_sweep(spent, url2, str(tmp_path / "spent"), _fake_trial, log=lambda line: None) == "budget"


def test_sweep_command_runs_every_candidate_recommends_and_a_rerun_goes_on_after_a_kill(tmp_path, one_block_preset):
    from conftest import SENTENCES, write_csv

    data = write_csv(tmp_path / "reviews.csv", ["review", "stars"],
                     [(f"{SENTENCES[i % len(SENTENCES)]} {SENTENCES[(3 * i) % len(SENTENCES)]}", ("bad", "good")[i % 2])
                      for i in range(48)])
    common = ["sweep", f"--train_file={data}", "--text_columns=review", "--label_column=stars",
              f"--presets={one_block_preset}", "--methods=freeze,lora", "--lora_ranks=2", "--lrs=1e-2",
              "--max_epochs=3", "--max_seq_length=32", "--sweep_top=1", "--sweep_seeds=2", "--noisolate_runs",
              f"--runs_dir={tmp_path / 'runs'}"]
    sweep_dir = tmp_path / "runs" / "sweep" / "reviews"
    # A sweep killed while a trial ran: the study holds that trial RUNNING, owned by a process that is gone.
    import optuna

    study, url = sweep.open_study(str(sweep_dir), _base(common), lambda: sweep.candidates(
        ["freeze", "lora"], 1, [1e-2], [2]), 600.0)
    killed = study.ask()
    killed.suggest_categorical("candidate", sorted(study.user_attrs["candidates"]))
    killed.suggest_int("seed", 0, 1000)
    killed.set_user_attr("host", socket.gethostname())
    killed.set_user_attr("pid", 2 ** 22 + 1)  # above Linux's pid_max: no such process

    done = run_module("tf_transfer.experiments", *common, "--budget=10m")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Recommended: " in done.stdout.strip().splitlines()[-1]
    study = optuna.load_study(study_name="sweep", storage=url)
    by_state = {}
    for trial in study.trials:
        by_state.setdefault(trial.state.name, []).append(trial)
    assert study.trials[0].state.name == "FAIL"  # the killed one, run again as a new trial
    names = set(study.user_attrs["candidates"])
    assert names == {"freeze_kall_lr0.01", "lora_r2_kall_lr0.01"}  # one block: no k < L
    ran = [t for t in by_state.get("COMPLETE", []) + by_state.get("PRUNED", []) if t.params["seed"] == 0]
    assert sorted(t.params["candidate"] for t in ran) == sorted(names)  # every candidate once, the killed one too
    seed_round = study.user_attrs["seed_round"]
    assert len(seed_round) == 1 and any(t.params == {"candidate": seed_round[0], "seed": 1}
                                        for t in by_state["COMPLETE"])
    report = (sweep_dir / "README.md").read_text()
    assert "| lora_r2_kall_lr0.01 |" in report and "Recommended: " in report
    assert (sweep_dir / "pareto.png").stat().st_size > 1000
    summary = json.loads((sweep_dir / "lora_r2_kall_lr0.01" / "seed0" / "summary.json").read_text())
    assert summary["method"] == "lora" and summary["lora"]["rank"] == 2
    # Rerun: nothing is left to run; the report and recommendation are the same.
    again = run_module("tf_transfer.experiments", *common, "--budget=10m")
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] == done.stdout.strip().splitlines()[-1]
    assert len(optuna.load_study(study_name="sweep", storage=url).trials) == len(study.trials)


def _base(common):
    """The sweep's settings as the command builds them from flags/sweep.flags and its flags."""
    from tf_transfer.core import settings as settings_lib
    from tf_transfer.studies.glue_settings import GlueSettings

    base = settings_lib.read_flagfile("flags/sweep.flags", GlueSettings)
    flags = dict(flag.lstrip("-").split("=", 1) for flag in common[1:] if "=" in flag)
    base.update(train_file=flags["train_file"], text_columns=["review"], label_column="stars",
                max_epochs=3, max_seq_length=32, preset=flags["presets"])
    return base


def _slow_one_epoch_trial(url, trial_id, settings, folder, remaining_s):
    import time

    time.sleep(0.3)
    return {"value": 0.5, "pruned": False, "epoch_time_s": 0.25, "epochs": 1}


def test_no_run_starts_whose_first_epoch_would_not_fit_the_budget_left(tmp_path):
    """The first run of a shape has no estimate and runs; the next of the same shape would need about as long as
    that one's first epoch, which no longer fits."""
    same_shape = {"a": {"trainable_layers": "all", "lr": 1e-3}, "b": {"trainable_layers": "all", "lr": 1e-2}}
    study, url = sweep.open_study(str(tmp_path), {}, lambda: same_shape, 0.5)
    assert sweep.run_sweep(study, url, str(tmp_path), _slow_one_epoch_trial, log=lambda line: None) == "budget"
    assert [(t.state.name, t.params.get("candidate")) for t in study.trials] == [("COMPLETE", "a"), ("WAITING", None)]


@pytest.mark.parametrize("flags, fragment", [
    ([], "experiments sweep needs --budget"),
    (["--budget=1h", "--methods=adapters"], "--methods: 'adapters' is not a method"),
    (["--budget=1h", "--lora_ranks=eight"], "--lora_ranks takes whole numbers"),
    (["--budget=soon"], "is not a duration"),
])
def test_bad_sweep_flags_are_one_error_line_before_anything_is_written(tmp_path, flags, fragment):
    done = run_module("tf_transfer.experiments", "sweep", "--task=rte", f"--runs_dir={tmp_path}", *flags)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and fragment in errors[0], done.stderr[-2000:]
    assert not os.listdir(tmp_path)
