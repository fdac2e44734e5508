"""The budgeted sweep: candidates, successive halving, the seed round, a killed sweep's rerun, the recommendation."""

import dataclasses
import json
import os
import re
import socket

import pytest

from conftest import run_module
from tf_transfer.core.errors import TransferError
from tf_transfer.models import methods
from tf_transfer.studies.sweep import sweep_estimate, sweep_rung, sweep_search as sweep, sweep_seed_round, sweep_session


def test_candidates_cover_each_method_at_its_own_rates():
    found = sweep.candidates(["freeze", "lora", "bitfit"], num_layers=6, options={"lora_ranks": [4, 8, 16]})
    # Freezing: full fine-tuning at 5e-5, the last 2 over the cache at 3e-4 and the last L/2 at 1e-4 (the first-run
    # benchmark's front); LoRA: each rank on the last 2 over the cache at its 2 rates; BitFit at its 2.
    assert set(found) == {"freeze_kall_lr5e-05", "freeze_k2_lr0.0003", "freeze_k3_lr0.0001", "bitfit_kall_lr0.001",
                          "bitfit_kall_lr0.005"} | {f"lora_r{r}_k2_lr{lr}" for r in (4, 8, 16) for lr in ("0.0005",
                                                                                                      "0.002")}
    assert found["freeze_k2_lr0.0003"] == {"trainable_layers": 2, "cache_frozen": True, "lr": 3e-4}
    assert found["lora_r4_k2_lr0.0005"]["cache_frozen"] is True
    assert set(sweep.candidates(["freeze"], 12)) == {"freeze_kall_lr5e-05", "freeze_k2_lr0.0003",
                                                     "freeze_k6_lr0.0001"}
    assert set(sweep.candidates(["freeze"], 4)) == {"freeze_kall_lr5e-05", "freeze_k2_lr0.0003"}  # 2 is L/2
    assert set(sweep.candidates(["freeze", "lora"], 1, [1e-2])) == {"freeze_kall_lr0.01", "lora_r8_kall_lr0.01"}
    assert set(sweep.candidates(["bitfit"], 6, lrs=[1e-3])) == {"bitfit_kall_lr0.001"}
    # Queued cheapest first: LoRA on the last 2 over the cache (2 forward + 2 backward block passes), the last 2
    # (2 + 4), the last 3 (3 + 6), BitFit (6 + 6), full fine-tuning (6 + 12) last.
    order = list(found)
    assert order[0].startswith("lora_r") and order[-1] == "freeze_kall_lr5e-05"
    assert order.index("freeze_k2_lr0.0003") < order.index("freeze_k3_lr0.0001") < order.index("bitfit_kall_lr0.001")
    with pytest.raises(TransferError, match="'adapters' is not a method"):
        sweep.candidates(["adapters"], 6)


def test_the_default_sweep_leaves_out_the_methods_and_ranks_the_studies_found_dominated():
    # BitFit and LoRA stay methods --methods may name, each with its reason in --methods' help.
    assert methods.registry.in_default_sweep() == ("freeze",)
    assert {"bitfit", "lora"} <= set(methods.registry.in_sweep())
    left_out = methods.registry.left_out_of_default_sweep()
    assert "LoRA r8" in left_out["bitfit"] and "reports/first_run" in left_out["lora"]
    found = sweep.candidates(list(methods.registry.in_default_sweep()), num_layers=6)
    assert set(found) == {"freeze_kall_lr5e-05", "freeze_k2_lr0.0003", "freeze_k3_lr0.0001"}
    assert sweep_session.SweepOptions.__dataclass_fields__["methods"].default_factory() == ["freeze"]


def test_a_method_whose_sweep_left_out_is_no_string_is_refused():
    with pytest.raises(TransferError, match="sweep_left_out.*must be a string"):
        @methods.registry.register
        class Odd(methods.registry.Method):
            name, title, help, sweep_left_out = "odd", "odd", "nothing", True

            def apply(self, backbone, options, trainable_layers):
                pass
    assert "odd" not in methods.names()


def _runs(scores: dict, costs: dict, cut: dict = None, epochs: int = 3, max_epochs: int = 9) -> list:
    """`sweep.Run` rows: `scores` `{candidate: [score per seed]}`, `costs` `{candidate: seconds}`, `cut`
    `{(candidate, seed): why}`."""
    return [sweep.Run(name, seed, epochs, max_epochs, (cut or {}).get((name, seed)), score, costs[name])
            for name, values in scores.items() for seed, score in enumerate(values)]


CONSTANT = {0: 0.78, 1: 0.80, 2: 0.81}  # the constant prediction's validation score per seed (its split)


def test_the_cheapest_candidate_whose_interval_against_the_best_stays_within_the_margin_is_recommended():
    scores = {"full": [0.84, 0.86, 0.87], "lora": [0.835, 0.857, 0.866], "k1": [0.80, 0.83, 0.845]}
    costs = {"full": 600.0, "lora": 300.0, "k1": 60.0}
    decided = sweep.recommend(_runs(scores, costs), CONSTANT)
    found = decided["candidates"]
    assert decided["outcome"] == "recommended" and decided["best"] == "full" and decided["candidate"] == "lora"
    # lora - full pairs over the seeds: -0.5, -0.3, -0.4 points; its interval stays above -1 point.
    assert found["lora"]["vs_best"].method == "paired t" and found["lora"]["vs_best"].low > -0.01
    # k1 is cheaper still, but 2-4 points below the best: its interval reaches below -1 point.
    assert found["k1"]["vs_best"].low < -0.01 and not found["k1"]["as_good"]
    assert found["full"]["vs_constant"].low > 0
    # Lower-is-better scores (a loss) choose by the same rule, with the signs turned.
    low = sweep.recommend(_runs({k: [-v for v in vs] for k, vs in scores.items()}, costs),
                          {seed: -v for seed, v in CONSTANT.items()}, lower_is_better=True)
    assert (low["best"], low["candidate"]) == ("full", "lora")


def test_a_run_cut_by_the_budget_is_never_recommended():
    """The committed MRPC sweep's mistake: a cheap run cut by the budget after epoch 2 competed as complete."""
    scores = {"full": [0.84, 0.85, 0.86], "lora": [0.90, 0.91, 0.92]}
    costs = {"full": 600.0, "lora": 100.0}
    for cut in ({("lora", 0): "budget", ("lora", 1): "budget"}, {("lora", s): "budget" for s in range(3)},
                {("lora", 0): "pruned", ("lora", 2): "budget"}):
        decided = sweep.recommend(_runs(scores, costs, cut), CONSTANT)
        assert decided["candidate"] == decided["best"] == "full"
        assert decided["candidates"]["lora"]["why_not"].startswith("1 of its seeds" if len(cut) == 2 else "0 of")
    only_cut = sweep.recommend(_runs({"lora": [0.9, 0.9, 0.9]}, costs, {("lora", s): "budget" for s in range(3)}),
                               CONSTANT)
    assert only_cut["outcome"] == "no eligible candidate" and only_cut["candidate"] is None


def test_a_candidate_on_one_seed_or_a_shorter_epoch_cap_is_never_recommended():
    runs = _runs({"full": [0.84, 0.85, 0.86], "one": [0.95]}, {"full": 600.0, "one": 10.0})
    decided = sweep.recommend(runs, CONSTANT)
    assert decided["candidate"] == "full" and "1 of its seeds" in decided["candidates"]["one"]["why_not"]
    # Runs capped at fewer epochs than the others' do not compare with them.
    short = _runs({"short": [0.95, 0.96, 0.97]}, {"short": 5.0}, max_epochs=3)
    decided = sweep.recommend(_runs({"full": [0.84, 0.85, 0.86]}, {"full": 600.0}) + short, CONSTANT)
    assert decided["candidate"] == "full" and "capped below 9 epochs" in decided["candidates"]["short"]["why_not"]


def test_nothing_above_the_constant_prediction_is_said_instead_of_a_recommendation():
    from tf_transfer.reporting import sweep_report

    # The methods study's MRPC shape: BitFit scores the constant prediction exactly, full fine-tuning a point above
    # it on average with a seed that does worse.
    scores = {"bitfit": list(CONSTANT.values()), "full": [0.79, 0.83, 0.80]}
    runs = _runs(scores, {"bitfit": 50.0, "full": 100.0})
    constant = {seed: {"score": v, "predicts": "1"} for seed, v in CONSTANT.items()}
    decided, line = sweep_report.recommendation(runs, constant, "f1")
    assert decided["outcome"] == "nothing beat the constant prediction" and decided["candidate"] is None
    assert line.startswith("Nothing to recommend: no candidate's validation f1 beat the constant prediction "
                           "(always '1': 0.780 at seed 0)")
    assert "bitfit +0.0 [+0.0, +0.0]" in line and "full +1.0 [" in line
    none, line = sweep_report.recommendation(runs[:1], constant, "f1")
    assert none["outcome"] == "no eligible candidate" and line.startswith("Nothing to recommend: no candidate ran")


def test_the_recommendation_line_names_the_cost_to_the_stopping_rule_with_the_cache_build():
    from tf_transfer.reporting import sweep_report

    scores = {"freeze_kall": [0.84, 0.86, 0.85], "freeze_k2": [0.838, 0.857, 0.846]}
    constant = {seed: {"score": v, "predicts": "1"} for seed, v in CONSTANT.items()}
    decided, line = sweep_report.recommendation(_runs(scores, {"freeze_kall": 400.0, "freeze_k2": 81.4}), constant,
                                                "f1")
    assert decided["candidate"] == "freeze_k2"
    assert line.startswith("Recommended: freeze_k2: validation f1 0.847 over seeds 0, 1, 2, +5.0 [")
    assert "within 1 point of the best, freeze_kall at 0.850 (difference -0.3 [" in line
    assert line.endswith("81 s to its stopping rule here (CPU seconds, cache build included).")


def test_the_recommendation_says_how_many_candidates_were_never_compared():
    """A budget that decides among the cheapest candidates must not read as an answer over all of them."""
    from tf_transfer.reporting import sweep_report

    found = sweep.candidates(["freeze", "lora"], num_layers=6)  # 5: LoRA at 2 rates, k in {2, 3}, full fine-tuning
    cheap = [name for name in found if not name.startswith("freeze_kall")][:3]
    scores = {cheap[0]: [0.84, 0.86, 0.85], cheap[1]: [0.838, 0.857, 0.846], cheap[2]: [0.7]}
    runs = _runs(scores, {cheap[0]: 80.0, cheap[1]: 90.0, cheap[2]: 10.0}, cut={(cheap[2], 0): "pruned"})
    constant = {seed: {"score": v, "predicts": "1"} for seed, v in CONSTANT.items()}
    decided, line = sweep_report.recommendation(runs, constant, "f1", candidates=found)
    assert sweep_report.never_compared(found, runs, decided) == [n for n in found if n not in cheap]  # pruned: weighed
    assert (f"; but {len(found) - 3} of the {len(found)} candidates, full fine-tuning among them, were never "
            "compared: no run of theirs finished within the budget") in line
    assert "never compared" not in sweep_report.recommendation(runs, constant, "f1")[1]  # no list: nothing claimed
    # A candidate that ran to its stopping rule at seed 0, below those the seed round took, was weighed at one seed.
    runs = _runs(scores, {cheap[0]: 80.0, cheap[1]: 90.0, cheap[2]: 10.0})
    decided, line = sweep_report.recommendation(runs, constant, "f1", candidates=found)
    assert sweep_report.passed_over(runs, decided) == [cheap[2]]
    assert cheap[2] not in sweep_report.never_compared(found, runs, decided)
    assert f"; {cheap[2]} ran at seed 0 only, below the seed round's candidates there; but {len(found) - 3} " in line
    assert not sweep_report.passed_over(runs, decided, lower_is_better=True)  # 0.7 is no worse where lower wins
    # Full fine-tuning pruned at a rung by the cheaper ones' early scores: the line says so.
    full = next(name for name in found if name.startswith("freeze_kall"))
    runs = _runs({**scores, full: [0.72]}, {cheap[0]: 80.0, cheap[1]: 90.0, cheap[2]: 10.0, full: 200.0},
                 cut={(full, 0): "pruned"}, epochs=1)
    line = sweep_report.recommendation(runs, constant, "f1", candidates=found)[1]
    assert f"; {full} (full fine-tuning) was pruned after epoch 1, below the others there: it may learn more" in line
    # One that ran to its stopping rule at seed 0 above them, whose further seeds the budget did not reach.
    runs = _runs({**scores, cheap[2]: [0.9]}, {cheap[0]: 80.0, cheap[1]: 90.0, cheap[2]: 10.0})
    line = sweep_report.recommendation(runs, constant, "f1", candidates=found)[1]
    assert f"; {cheap[2]} ran at seed 0 only (0.900): its further seeds did not fit the budget; but 2 of the 5 " in line
    # Two rates of one setting (LoRA's) above the seeded candidate at seed 0: the lower is not seeded whatever the
    # budget (the seed round takes a setting once, at its best rate), and its line says that.
    runs = _runs({cheap[2]: [0.84, 0.86, 0.85], cheap[0]: [0.90], cheap[1]: [0.91]},
                 {cheap[0]: 80.0, cheap[1]: 80.0, cheap[2]: 90.0})
    line = sweep_report.recommendation(runs, constant, "f1", candidates=found)[1]
    assert (f"; {cheap[0]} ran at seed 0 only (0.900): the seed round takes its setting at its better rate there, "
            f"{cheap[1]}; {cheap[1]} ran at seed 0 only (0.910): its further seeds did not fit the budget; but 2 of "
            "the 5 ") in line


def test_a_runs_row_reads_its_cut_score_and_cost_from_its_summary():
    def summary(epochs, **facts):
        return {"seed": 1, "metric": "f1", "completed": True, "best_epoch": 2, "config": {"max_epochs": 9},
                "epochs": [{"epoch": i + 1, "val": {"f1": v}, "train_time_s": 20.0 * (i + 1),
                            "train_cpu_s": 19.0 * (i + 1), **(m or {})} for i, (v, m) in enumerate(epochs)], **facts}

    run = sweep.run_of("k2", summary([(0.7, None), (0.8, None), (0.75, None)], cache_build_cpu_s=12.0))
    assert run == sweep.Run("k2", 1, 3, 9, None, 0.8, 3 * 19.0 + 12.0)
    assert sweep.run_of("k2", summary([(0.7, None), (0.8, {"sweep": "budget"})])).cut == "budget"
    assert sweep.run_of("k2", summary([(0.7, None), (0.8, None)]), cut="pruned").cut == "pruned"
    assert sweep.run_of("k2", summary([(0.7, None), (0.8, None)], completed=False)).cut == "unfinished"


@pytest.mark.parametrize("text, fragment", [("soon", "is not a duration"), ("0m", "more than nothing")])
def test_a_budget_that_is_no_duration_is_refused(text, fragment):
    with pytest.raises(TransferError, match=fragment):
        sweep.parse_budget(text)


# Validation scores per epoch of four candidates, for a sweep whose runs are only these reports (no training).
SCORES = {"a": [0.80, 0.85, 0.86], "b": [0.50, 0.55, 0.60], "c": [0.82, 0.84, 0.85], "d": [0.40, 0.41, 0.42]}


def _fake_trial_of(scores: dict):
    """A trial function whose run of a candidate reports `scores[candidate]` epoch by epoch (plus 0.01 a seed)."""
    def fake_trial(url, trial_id, settings, folder, remaining_s):
        import optuna

        trial = optuna.trial.Trial(sweep.load(url), trial_id)
        name = os.path.basename(os.path.dirname(folder))
        for epoch, value in enumerate(scores[name], start=1):
            if sweep.report_epoch(trial, value + 0.01 * settings["seed"], epoch, len(scores[name])):
                return {"value": None, "pruned": True, "epoch_time_s": 1.0}
        return {"value": max(scores[name]) + 0.01 * settings["seed"], "pruned": False, "epoch_time_s": 1.0}
    return fake_trial


_fake_trial = _fake_trial_of(SCORES)


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


def test_the_reference_candidate_is_ranked_at_its_first_rung_but_stopped_only_from_the_next():
    """The first rung is the epoch at which full fine-tuning's reference run had just learned: its seed-0 run is
    asked there (its score ranks the others) but not stopped by its start; from 3r on it is ranked as any other."""
    import optuna

    study = optuna.create_study(direction="maximize", pruner=sweep.pruner_of_sweeps(1))
    study.set_user_attr("first_rung", 1)
    study.set_user_attr("reference", {"candidate": "full", "learned": True, "epochs": 1, "score": 0.7, "cut": None})

    def run(name: str, curve: list) -> int:
        study.enqueue_trial({"candidate": name})
        trial = study.ask()
        trial.suggest_categorical("candidate", ["k2", "k2b", "full"])
        pruned_at = next((epoch for epoch, value in enumerate(curve, start=1)
                          if sweep.report_epoch(trial, value, epoch, 5)), 0)
        study.tell(trial, state=optuna.trial.TrialState.PRUNED) if pruned_at else study.tell(trial, max(curve))
        return pruned_at

    assert run("k2", [0.80, 0.84, 0.85, 0.85, 0.85]) == 0  # the first at each rung goes on
    assert run("full", [0.70, 0.80, 0.83, 0.88, 0.89]) == 3  # below k2 at epoch 1 and at epoch 3: pruned at 3
    assert run("k2b", [0.70, 0.80, 0.83, 0.88, 0.89]) == 1  # another candidate on that curve: pruned at 1
    assert study.trials[1].system_attrs["completed_rung_0"] == 0.70  # full's epoch 1 was ranked with the others'


def test_full_fine_tuning_kept_at_its_second_rung_says_the_first_lines_second_case(capsys, monkeypatch):
    """A first line that called the budget enough in the first case only (successive halving stops full
    fine-tuning by epoch 3) is followed, when successive halving keeps it there instead, by a line saying so at once,
    with what the budget then decides and what to give for all: at that rung, from full fine-tuning's ranked run
    only, and not once another machine has joined the sweep."""
    import optuna

    from tf_transfer.studies.sweep import sweep_trial

    said = "[sweep] kept past epoch {epoch}: the second case"
    study = optuna.create_study(direction="maximize", pruner=sweep.pruner_of_sweeps(1))
    study.set_user_attr("first_rung", 1)
    study.set_user_attr("reference", {"candidate": "full", "learned": True, "epochs": 1, "score": 0.7, "cut": None})
    study.set_user_attr("budget_s", 3600.0)
    study.set_user_attr("plan", {"line": "[sweep] ...", "second_case": said, "for_budget_s": 3600.0})

    def trial_of(name: str, **marks):
        study.enqueue_trial({"candidate": name}, user_attrs=marks)
        trial = study.ask()
        trial.suggest_categorical("candidate", ["k2", "full"])
        return trial

    full, k2, full_seed_1 = trial_of("full"), trial_of("k2"), trial_of("full", seed_round=True)
    for trial, epoch in ((full, 1), (full, 2), (k2, 3), (full_seed_1, 3)):
        sweep_trial.say_second_case(study, trial, epoch)
    assert capsys.readouterr().out == ""
    sweep_trial.say_second_case(study, full, 3)
    assert capsys.readouterr().out == "[sweep] kept past epoch 3: the second case\n"
    monkeypatch.setenv(sweep.WORKER, "1 1e12")  # from the second worker's run: its mark
    sweep_trial.say_second_case(study, full, 3)
    assert capsys.readouterr().out == "[sweep w1] kept past epoch 3: the second case\n"
    # Said where the report is made: a run's held reports, once the first rung is known, included.
    held = sweep_trial.HeldReports(study, last_epoch=5)
    held.report(full, 0.8, 3)
    assert capsys.readouterr().out == "[sweep w1] kept past epoch 3: the second case\n"
    study.set_user_attr("budget_s", 7200.0)  # a rerun with a larger budget: the first line spoke of another
    sweep_trial.say_second_case(study, full, 3)
    study.set_user_attr("budget_s", 3600.0)
    study.set_user_attr("first_rung", 2)  # the reference learned at epoch 2: the second rung is epoch 6
    sweep_trial.say_second_case(study, full, 3)
    assert capsys.readouterr().out == ""
    study.set_user_attr("first_rung", 1)
    k2.set_user_attr("host", socket.gethostname())  # a trial of this machine's: said
    sweep_trial.say_second_case(study, full, 3)
    assert capsys.readouterr().out == "[sweep w1] kept past epoch 3: the second case\n"
    k2.set_user_attr("host", "another-machine")  # another machine joined: the plan was this one's alone
    sweep_trial.say_second_case(study, full, 3)
    assert capsys.readouterr().out == ""


def test_full_fine_tuning_queued_first_runs_at_every_seed_and_the_seed_round_takes_the_rest(tmp_path):
    """Where the plan puts full fine-tuning first (`order`), its further seeds are queued with it (they fill the
    workers while its seed 0 runs) and do not report to the pruner; the seed round then takes the best `top - 1` of
    the others, so that full fine-tuning is not run at a seed twice."""
    found = {"a": {"trainable_layers": 1, "lr": 1.0}, "c": {"trainable_layers": 1, "lr": 2.0},
             "b": {"trainable_layers": 1, "lr": 3.0}, "full": {"trainable_layers": "all", "lr": 1.0}}
    fake_trial = _fake_trial_of({**SCORES, "full": [0.90, 0.91, 0.92]})  # above every other at the first rung
    study, url = sweep.open_study(str(tmp_path), {"lr": 1.0}, lambda: found, 600.0, seeds=3,
                                  order=lambda f, reference: [reference] + [n for n in f if n != reference])
    queued = [(t.params.get("candidate") or t.system_attrs["fixed_params"]["candidate"],
               t.system_attrs["fixed_params"]["seed"], bool(t.user_attrs.get("seed_round"))) for t in study.trials]
    assert queued[:3] == [("full", 0, False), ("full", 1, True), ("full", 2, True)] and study.user_attrs["early"] == [
        "full"]
    assert sweep.run_sweep(study, url, str(tmp_path), fake_trial, top=2, seeds=3, log=lambda line: None) == "done"
    ran = [(t.params["candidate"], t.params["seed"]) for t in study.trials if t.state.name == "COMPLETE"]
    assert sorted(ran).count(("full", 1)) == 1 and ("full", 2) in ran
    # Full fine-tuning's seed 0 ranks nothing: the others meet each other at the rungs, not its faster start.
    assert study.trials[0].user_attrs["unpruned"] and not study.trials[0].intermediate_values
    assert study.user_attrs["seed_round"] == ["a"] and {("a", 1), ("a", 2)} <= set(ran)  # top 2, less full's
    # Without an order (a test's or an older caller's queue), nothing is queued early.
    plain, _ = sweep.open_study(str(tmp_path / "plain"), {"lr": 1.0}, lambda: found, 600.0, seeds=3)
    assert len(plain.trials) == len(found) and "early" not in plain.user_attrs


def test_an_idle_worker_starts_the_seed_round_of_the_candidates_the_running_runs_cannot_oust(tmp_path):
    """While a seed-0 run still trains and nothing else waits, the seed round of the best `top - 1` finished
    candidates is queued at once (that run can displace at most one of the best `top`); the rest once it ends."""
    import optuna

    from tf_transfer.studies.sweep import sweep_seed_round

    study, _ = sweep.open_study(str(tmp_path), {"lr": 1.0}, lambda: {name: {} for name in "abcd"}, 600.0)
    assert not sweep_seed_round.join(study, top=2, seeds=3)  # the seed round has not begun: nothing joins it
    for trial in study.get_trials(states=(optuna.trial.TrialState.WAITING,)):
        taken = study.ask()
        name = trial.system_attrs["fixed_params"]["candidate"]
        taken.suggest_categorical("candidate", list("abcd")), taken.suggest_int("seed", 0, 1000)
        if name != "d":  # d still trains
            study.tell(taken, {"a": 0.80, "b": 0.90, "c": 0.70}[name])
    assert sweep_seed_round.ranked_running(study) == 1
    assert sweep_seed_round.queue(study, top=2, seeds=3, running=1) and study.user_attrs["seed_round"] == ["b"]
    assert not sweep_seed_round.queue(study, top=2, seeds=3, running=1)  # nothing new while d trains

    def waiting():
        return [tuple(t.system_attrs["fixed_params"].values())
                for t in study.get_trials(states=(optuna.trial.TrialState.WAITING,))]

    assert sweep_seed_round.queue(study, top=2, seeds=3) and study.user_attrs["seed_round"] == ["b", "a"]
    assert waiting() == [("b", 1), ("b", 2), ("a", 1), ("a", 2)]  # a, below b, after it
    # d ends above every candidate whose seeds still wait: its seeds go first (the budget may not reach the end).
    # The sweep asks as soon as it ended, not once the queue is empty (`join`: the seed round has begun).
    running = next(t for t in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)))
    study.tell(running.number, 0.95)
    assert sweep_seed_round.join(study, top=3, seeds=3) and study.user_attrs["seed_round"] == ["b", "a", "d"]
    assert waiting() == [("d", 1), ("d", 2), ("b", 1), ("b", 2), ("a", 1), ("a", 2)]
    assert not sweep_seed_round.join(study, top=3, seeds=3)  # nothing new


def test_the_probes_start_up_counts_the_imports_a_trials_process_pays(monkeypatch):
    """Each trial runs in a process of its own and imports TensorFlow there; so does the probe, which counts the
    import in a run's start-up (a stand-in for glue_benchmark whose import takes 0.3 s, its steps none)."""
    import importlib.abc
    import importlib.machinery
    import sys
    import time

    import tf_transfer.studies.glue as package
    from tf_transfer.studies.glue import glue_benchmark  # noqa: F401  (so that monkeypatch puts it back)
    from tf_transfer.studies.glue.glue_settings import GlueSettings
    from tf_transfer.studies.sweep import sweep_plan

    name = "tf_transfer.studies.glue.glue_benchmark"

    def timed_steps(settings, steps, warmup_steps):
        return {"step_time_s": 0.0, "timed_steps": steps, "num_layers": 6, "train_examples_per_s": 100.0,
                "split_examples": {"train": 90, "validation": 10}}

    class SlowImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname, path, target=None):
            return importlib.machinery.ModuleSpec(fullname, self) if fullname == name else None

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            time.sleep(0.3)
            module.measure = timed_steps

    monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(package, "glue_benchmark")
    monkeypatch.setattr(sys, "meta_path", [SlowImport(), *sys.meta_path])
    monkeypatch.setattr(GlueSettings, "from_dict", staticmethod(lambda settings: settings))
    speed = sweep_plan.measure({"batch_size": 32}, steps=4, warmup_steps=1)
    assert 0.3 <= speed.startup_s < 5, speed
    assert (speed.train_examples, speed.scored_examples, speed.steps_per_epoch) == (90, 10, 3)


def test_a_sweeps_own_process_imports_no_tensorflow_scipy_or_scikit_learn():
    """The sweep's process plans, queues and reports; its runs train in processes of their own. What it imports is
    paid by each process on the sweep (two on two machines, and each of the tests' made-up sweeps): SciPy and
    scikit-learn, which tf_transfer.core.metrics imported at the top, were about 2 s of it."""
    import subprocess
    import sys

    script = ("import sys\n"
              "from tf_transfer import sweep\n"
              "from tf_transfer.reporting import sweep_report\n"
              "from tf_transfer.studies.sweep import sweep_plan, sweep_session, sweep_trial\n"
              "print(sorted(m for m in ('tensorflow', 'scipy', 'sklearn') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr[-2000:]


def test_the_seed_round_takes_each_setting_at_its_best_rate_once(tmp_path):
    """Two rates of one setting (the last 2 over the cache at 3e-4 and 1e-4) ended first and second at seed 0: the
    seed round takes the better rate and then the next setting, not the second rate, and its plan counts settings."""
    import optuna

    from tf_transfer.studies.sweep import sweep_plan, sweep_seed_round

    found = {"k2_fast": {"trainable_layers": 2, "cache_frozen": True, "lr": 3e-4},
             "k2_slow": {"trainable_layers": 2, "cache_frozen": True, "lr": 1e-4},
             "k3": {"trainable_layers": 3, "cache_frozen": True, "lr": 1e-4},
             "full": {"trainable_layers": "all", "lr": 5e-5}}
    study, _ = sweep.open_study(str(tmp_path), {"lr": 1.0}, lambda: found, 600.0)
    scores = {"k2_fast": 0.84, "k2_slow": 0.86, "k3": 0.83, "full": 0.80}
    for _ in study.get_trials(states=(optuna.trial.TrialState.WAITING,)):
        taken = study.ask()
        taken.suggest_categorical("candidate", list(found)), taken.suggest_int("seed", 0, 1000)
        study.tell(taken, scores[taken.params["candidate"]])
    assert [t.params["candidate"] for t in sweep_seed_round.candidates(study, top=3)] == ["k2_slow", "k3", "full"]
    assert sweep_seed_round.queue(study, top=2, seeds=3) and study.user_attrs["seed_round"] == ["k2_slow", "k3"]
    # The plan's seed round takes one run per setting of the others: a second rate of one setting adds its seed-0
    # run (all 5 epochs here), not its further seeds.
    speed = sweep_plan.Speed(example_s=0.02, block_s=0.001, startup_s=20.0, num_layers=6, train_examples=5400,
                             scored_examples=600, steps_per_epoch=169)
    both, one = (sweep_plan.plan({name: found[name] for name in names}, "full", speed, 2, 5, 2, top=3,
                                 full_first=False, front=True)
                 for names in (["k2_fast", "k2_slow", "full"], ["k2_slow", "full"]))
    fixed, epoch = sweep_plan.run_cost(found["k2_fast"], speed)  # less its cache, which k2_slow's run built
    assert both.training_s == pytest.approx(one.training_s + fixed - sweep_plan.build_s(found["k2_fast"], speed)
                                            + 5 * epoch)


def test_a_setting_seeded_at_one_rate_is_not_seeded_again_at_another_that_ends_better(tmp_path):
    """The seed round begun with the last 2 at 3e-4 while the same blocks at 1e-4 still trained at seed 0: when that
    run ends above it, nothing joins (the setting has its seeds; a second rate's would take another setting's
    minutes), while a new setting that ends among the best still does."""
    import optuna

    from tf_transfer.studies.sweep import sweep_seed_round

    found = {"k2_fast": {"trainable_layers": 2, "cache_frozen": True, "lr": 3e-4},
             "k2_slow": {"trainable_layers": 2, "cache_frozen": True, "lr": 1e-4},
             "k3": {"trainable_layers": 3, "cache_frozen": True, "lr": 1e-4}}
    study, _ = sweep.open_study(str(tmp_path), {"lr": 1.0}, lambda: found, 600.0)
    taken = {}
    for _ in study.get_trials(states=(optuna.trial.TrialState.WAITING,)):
        trial = study.ask()
        trial.suggest_categorical("candidate", list(found)), trial.suggest_int("seed", 0, 1000)
        taken[trial.params["candidate"]] = trial
    study.tell(taken["k2_fast"], 0.84)
    assert sweep_seed_round.queue(study, top=3, seeds=3, running=2) and study.user_attrs["seed_round"] == ["k2_fast"]
    study.tell(taken["k2_slow"], 0.86)  # the same blocks at another rate, above it
    assert not sweep_seed_round.join(study, top=3, seeds=3)
    study.tell(taken["k3"], 0.85)
    assert sweep_seed_round.join(study, top=3, seeds=3) and study.user_attrs["seed_round"] == ["k2_fast", "k3"]
    # k3's seeds after the last 2's: that setting ranks first, at the rate that ended better.
    assert [tuple(t.system_attrs["fixed_params"].values()) for t in study.get_trials(
        states=(optuna.trial.TrialState.WAITING,))] == [("k2_fast", 1), ("k2_fast", 2), ("k3", 1), ("k3", 2)]


def test_the_plan_counts_one_cache_build_per_depth():
    """The runs that freeze as many blocks read one cache, built by the first (`_run_trial`), whatever their seed
    (`cache_pool.pool`): on the first-run files, the LoRA and last-2 runs after the first of that depth at seed 0
    started in 9-12 s where the first took 41-54 s more (2026-11-29). LoRA over the last 2 and the last 2 alone
    share a cache, built once."""
    from tf_transfer.studies.sweep import sweep_plan

    speed = sweep_plan.Speed(example_s=0.02, block_s=0.001, startup_s=20.0, num_layers=6, train_examples=5400,
                             scored_examples=600, steps_per_epoch=169)
    found = {name: settings for name, settings in sweep.candidates(["freeze", "lora"], 6).items()
             if name in ("lora_r8_k2_lr0.002", "freeze_k2_lr0.0003", "freeze_kall_lr5e-05")}
    p = sweep_plan.plan(found, "freeze_kall_lr5e-05", speed, 2, 5, 2, top=3, seeds=3, full_first=False, front=True,
                        full_pruned=True)
    (full_fixed, full_epoch), (lora_fixed, lora_epoch), (k2_fixed, k2_epoch) = (
        sweep_plan.run_cost(found[name], speed) for name in ("freeze_kall_lr5e-05", "lora_r8_k2_lr0.002",
                                                            "freeze_k2_lr0.0003"))
    build = sweep_plan.build_s(found["freeze_k2_lr0.0003"], speed)
    assert build == pytest.approx(0.001 * 6000 * 4) and build == sweep_plan.build_s(found["lora_r8_k2_lr0.002"], speed)
    # The reference's epoch; full fine-tuning's seed 0 on from it to epoch 3; LoRA at seed 0 builds the cache the
    # last 2 read; each of seeds 1 and 2 runs both settings (the mean of their whole runs), neither building it.
    mean = (lora_fixed + 5 * lora_epoch + k2_fixed + 5 * k2_epoch) / 2 - build
    expected = (full_fixed + full_epoch) + (full_fixed + 2 * full_epoch) + (lora_fixed + 5 * lora_epoch) + (
        k2_fixed - build + 5 * k2_epoch) + 2 * (mean + mean)
    assert p.training_s == pytest.approx(expected)


def test_sweep_command_runs_every_candidate_recommends_and_a_rerun_goes_on_after_a_kill(tmp_path, one_block_preset):
    """Runs of at most 2 epochs: the reference learns by its first rung (epoch 1 or 2), each candidate reports its
    epochs to the pruner, the seed round runs and the rerun finds nothing left, as with 3 (the same trials, states
    and recommendation here: a third epoch only made the seed-0 runs longer)."""
    from conftest import SENTENCES, write_csv

    data = write_csv(tmp_path / "reviews.csv", ["review", "stars"],
                     [(f"{SENTENCES[i % len(SENTENCES)]} {SENTENCES[(3 * i) % len(SENTENCES)]}", ("bad", "good")[i % 2])
                      for i in range(48)])
    common = ["sweep", f"--train_file={data}", "--text_columns=review", "--label_column=stars",
              f"--presets={one_block_preset}", "--methods=freeze,lora", "--lora_ranks=2", "--lrs=1e-2",
              "--max_epochs=2", "--max_seq_length=32", "--sweep_top=1", "--sweep_seeds=2", "--noisolate_runs",
              "--workers=1", f"--runs_dir={tmp_path / 'runs'}"]
    # A sweep killed while a trial ran: the study holds that trial RUNNING, owned by a process that is gone.
    import optuna

    from tf_transfer.studies.sweep import sweep_storage

    from tf_transfer.data.examples import file_sha256

    # A user's file names its sweep by its contents too (another reviews.csv is another sweep).
    identity = {"base": _base(common), "methods": ["freeze", "lora"], "lrs": [1e-2], "lora_ranks": [2],
                "data_sha256": {"train_file": file_sha256(data)}}
    name = sweep_storage.default_name("reviews", identity)
    sweep_dir = tmp_path / "runs" / "sweep" / name
    study, where = sweep.open_study(str(sweep_dir), _base(common), lambda: sweep.candidates(
        ["freeze", "lora"], 1, [1e-2], {"lora_ranks": [2]}), 600.0, name=name, identity=identity)
    killed = study.ask()
    killed.suggest_categorical("candidate", sorted(study.user_attrs["candidates"]))
    killed.suggest_int("seed", 0, 1000)
    killed.set_user_attr("host", socket.gethostname())
    killed.set_user_attr("pid", 2 ** 22 + 1)  # above Linux's pid_max: no such process

    done = run_module("tf_transfer.experiments", *common, "--budget=10m")
    assert done.returncode == 0, done.stderr[-3000:]
    final = done.stdout.strip().splitlines()[-1]
    assert final.startswith(("Recommended: ", "Nothing to recommend: ")) and done.stdout.count(final) == 1
    # Each line a run logs or prints says whose it is (two workers' runs write into one terminal at once).
    epochs = re.findall(r"\] \[(\S+) seed (\d)\] epoch \d: ", done.stderr)
    assert {"freeze_kall_lr0.01", "lora_r2_kall_lr0.01"} <= {name for name, _ in epochs}, done.stderr[-3000:]
    assert not re.search(r"\.py:\d+\] epoch \d: ", done.stderr), done.stderr[-3000:]  # untagged
    # A run's parameter table is in its summary.json and the report's column, not printed per trial.
    assert "trainable parameters per block" not in done.stdout and "block_0 " not in done.stdout, done.stdout[-3000:]
    # And the sweep says how each candidate's run ended, as its trial was told.
    ends = dict(re.findall(r"^\[sweep\] (\S+) seed 0: (done|stopped by successive halving) after \d epochs? \(best "
                           r"validation accuracy \d\.\d{3}\), \d+\.\d min$", done.stdout, flags=re.M))
    assert set(ends) == {"freeze_kall_lr0.01", "lora_r2_kall_lr0.01"}, done.stdout[-3000:]
    # Before it trains, it says what an answer needs, measured on this machine and these data.
    first = done.stdout.splitlines()[0]
    assert first.startswith("[sweep] an answer over all 2 candidates needs about ") and "--budget=10m" in first, first
    study = sweep.load(where)
    by_state = {}
    for trial in study.trials:
        by_state.setdefault(trial.state.name, []).append(trial)
    # The killed one was the reference (full fine-tuning, queued first), run again as a new trial.
    assert study.trials[0].state.name == "FAIL" and study.trials[0].user_attrs["reference"]
    names = set(study.user_attrs["candidates"])
    assert names == {"freeze_kall_lr0.01", "lora_r2_kall_lr0.01"}  # one block: no k < L
    reference = [t for t in by_state["PRUNED"] if t.user_attrs.get("reference")]
    assert len(reference) == 1 and study.user_attrs["reference"]["candidate"] == "freeze_kall_lr0.01"
    assert 1 <= study.user_attrs["first_rung"] <= 2 and not (sweep_dir / "reference").exists()
    # The reference's run is full fine-tuning's seed 0 begun (started before LoRA's, queued ahead of it), which that
    # candidate's seed-0 trial resumed after the reference's epochs, or was ranked by at once.
    full, lora = (json.loads((sweep_dir / name / "seed0" / "summary.json").read_text()) for name in sorted(names))
    assert full["started_at"] < lora["started_at"] and len(full["epochs"]) >= study.user_attrs["first_rung"]
    # Its first epochs are the reference's own (the same scores and times, not trained again).
    paused = reference[0].user_attrs["run"]["epochs"]
    assert len(paused) == study.user_attrs["first_rung"]
    assert [(e["val"], e["epoch_time_s"]) for e in full["epochs"][:len(paused)]] == [
        (e["val"], e["epoch_time_s"]) for e in paused]
    ran = [t for t in by_state.get("COMPLETE", []) + by_state.get("PRUNED", [])
           if t.params["seed"] == 0 and not t.user_attrs.get("reference")]
    assert sorted(t.params["candidate"] for t in ran) == sorted(names)  # every candidate once, the killed one too
    assert {t.params["candidate"]: t.state.name for t in ran} == {
        name: "PRUNED" if how.startswith("stopped") else "COMPLETE" for name, how in ends.items()}
    for name in study.user_attrs.get("seed_round") or []:  # those that beat the constant prediction at seed 0
        assert any(t.params == {"candidate": name, "seed": 1} for t in by_state["COMPLETE"])
    report = (sweep_dir / "README.md").read_text()
    assert "| lora_r2_kall_lr0.01 |" in report and done.stdout.strip().splitlines()[-1] in report
    assert (sweep_dir / "pareto.png").stat().st_size > 1000
    summary = json.loads((sweep_dir / "lora_r2_kall_lr0.01" / "seed0" / "summary.json").read_text())
    assert summary["method"] == "lora" and summary["lora"]["rank"] == 2
    assert [row["part"] for row in summary["parameter_table"]][:2] == ["embeddings", "block_0"]
    # A sweep begun before its runs packed by default keeps the settings it stored (and so its runs' names).
    assert summary["config"]["padding"] == "bucket"
    # Rerun: nothing is left to run; the report and recommendation are the same.
    again = run_module("tf_transfer.experiments", *common, "--budget=10m")
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] == done.stdout.strip().splitlines()[-1]
    assert len(sweep.load(where).trials) == len(study.trials)


def _base(common):
    """The sweep's settings as the command builds them from flags/sweep.flags and its flags."""
    from tf_transfer.core import settings as settings_lib
    from tf_transfer.studies.glue.glue_settings import GlueSettings

    base = settings_lib.read_flagfile("flags/sweep.flags", GlueSettings)
    flags = dict(flag.lstrip("-").split("=", 1) for flag in common[1:] if "=" in flag)
    base.update(train_file=flags["train_file"], text_columns=["review"], label_column="stars",
                max_epochs=int(flags["max_epochs"]), max_seq_length=int(flags["max_seq_length"]),
                preset=flags["presets"])
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
    assert sweep.run_sweep(study, url, str(tmp_path), _slow_one_epoch_trial, seeds=1,
                           log=lambda line: None) == "budget"
    assert [(t.state.name, t.params.get("candidate")) for t in study.trials] == [("COMPLETE", "a"), ("WAITING", None)]


# Four candidates of three shapes (work per step in block passes on a 6-block encoder: k1 cached 3, k2 cached 6, all
# blocks 18), their per-epoch wall seconds proportional to it, and their validation scores per epoch.
SHAPES = {"k1": {"trainable_layers": 1, "cache_frozen": True, "lr": 1e-3},
          "k1b": {"trainable_layers": 1, "cache_frozen": True, "lr": 1e-4},
          "k2": {"trainable_layers": 2, "cache_frozen": True, "lr": 1e-3},
          "full": {"trainable_layers": "all", "lr": 1e-4}}
CURVES = {"k1": [0.70, 0.83, 0.84], "k1b": [0.75, 0.76, 0.77], "k2": [0.72, 0.85, 0.86], "full": [0.78, 0.86, 0.87]}


class _Clock:
    """The sweep's clock in a test: seconds pass only when a fake trial says so."""

    def __init__(self):
        self.now = 0.0

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def _timed_trial(clock, log):
    """A fake trial on `clock`: one second per block pass per epoch, 2 s of start-up, 3 s of cache build (paid by
    the first run of a seed over as many frozen blocks, as the sweep's shared cache is); the reference learns where
    its score beats the constant prediction (0.80) by a point; `log` collects `(candidate, seed or "reference",
    epochs)`."""
    built = set()

    def train(url, trial_id, settings, folder, remaining_s, deadline=None):
        import optuna

        study = sweep.load(url)
        trial = optuna.trial.Trial(study, trial_id)
        name = os.path.basename(os.path.dirname(folder))
        per_epoch = sweep_estimate.relative_cost(settings, 6)
        curve = [v + 0.01 * settings["seed"] for v in CURVES[name]]
        result = {"epoch_time_s": float(per_epoch), "startup_s": 2.0, "num_layers": 6,
                  "cache_build_s": 3.0 if settings.get("cache_frozen") else None}

        cache = (settings["trainable_layers"], settings["seed"]) if settings.get("cache_frozen") else None
        build_s = 3.0 if cache and cache not in built else 0.0
        built.add(cache)

        def end(epoch, **facts):
            clock.now += 2.0 + build_s + epoch * per_epoch
            log.append((name, "reference" if trial.user_attrs.get("reference") else settings["seed"], epoch))
            return {**result, "epochs": epoch, **facts}

        for epoch in range(1, len(curve) + 1):
            best = max(curve[:epoch])
            if trial.user_attrs.get("reference") and best >= 0.81:
                return end(epoch, value=best, pruned=False, cut="reference", learned_at=epoch)
            if trial.user_attrs.get("sets_rung"):  # full fine-tuning's seed 0 queued first: it sets the rung, goes on
                sweep_rung.learned(study, name, epoch, best, lower_is_better=False, log=lambda line: None)
            if sweep.report_epoch(trial, best, epoch, len(curve)):
                return end(epoch, value=None, pruned=True, cut="pruned")
        return end(len(curve), value=max(curve), pruned=False, cut=None)
    return train


def _timed_study(tmp_path, monkeypatch, budget_s, full_first=False):
    """A sweep of `SHAPES` on a fake clock whose constant prediction is known (0.80 at seed 0): the reference is
    queued first, or (`full_first`, as the plan orders a budget that compares it) full fine-tuning at 3 seeds."""
    clock = _Clock()
    monkeypatch.setattr(sweep, "time", clock)
    first = (lambda found, reference: [reference] + [n for n in found if n != reference]) if full_first else None
    study, url = sweep.open_study(str(tmp_path), {"max_epochs": 3}, lambda: SHAPES, budget_s, seeds=3,
                                  constant={"score": 0.80, "predicts": "1"}, order=first)
    return study, url, clock


def test_a_trial_that_does_not_fit_waits_behind_cheaper_ones_that_do(tmp_path, monkeypatch):
    """Full fine-tuning queued first at every seed: where its last seed no longer fits the budget, the cheaper
    candidates behind it still run (a sweep once stopped there with a third of its budget unspent)."""
    log = []
    study, url, clock = _timed_study(tmp_path, monkeypatch, 160.0, full_first=True)
    # Full fine-tuning at seeds 0 and 1 (2 s of start-up and 3 epochs of 18 s each): 112 s of 160; a third does not fit.
    assert sweep.run_sweep(study, url, str(tmp_path), _timed_trial(clock, log), top=2, seeds=3,
                           log=lambda line: None) == "budget"
    ran = [(name, seed) for name, seed, _ in log]
    assert ran[:2] == [("full", 0), ("full", 1)] and ("full", 2) not in ran
    assert ("k1", 0) in ran[2:]  # a cheaper candidate that fit ran after it was passed over
    assert any(t.user_attrs.get("unfitted") is not None for t in study.trials if t.state.name == "WAITING")


def test_the_first_rung_is_where_the_reference_beat_the_constant_prediction(tmp_path, monkeypatch):
    log = []
    study, url, clock = _timed_study(tmp_path, monkeypatch, 10_000.0)
    assert sweep.run_sweep(study, url, str(tmp_path), _timed_trial(clock, log), top=2, seeds=3,
                           log=lambda line: None) == "done"
    # Full fine-tuning, the reference, beat 0.80 by a point at epoch 2: the first rung is epoch 2, not 1, so no
    # candidate is ranked by its first epoch (k1's 0.70 would have lost to k1b's 0.75 there).
    assert log[0] == ("full", "reference", 2) and study.user_attrs["first_rung"] == 2
    assert study.user_attrs["reference"] == {"candidate": "full", "learned": True, "epochs": 2, "score": 0.86,
                                          "cut": "reference"}
    from tf_transfer.reporting import sweep_report

    assert sweep_report._rungs(study, "f1", {0: {"score": 0.80}}) == (
        "successive halving at epoch 2 (the best third goes on; the first rung is the epoch at which the "
        "reference, full at seed 0, beat the constant prediction's validation f1 (0.800) by 1 point: 0.860)")
    assert ("k1", 0, 3) in log and ("k1b", 0, 2) in log  # k1 kept at the rung, k1b pruned there
    assert study.user_attrs["seed_round"] == ["full", "k2"]  # the best two that beat the constant prediction


def test_a_run_started_while_the_reference_trains_is_ranked_at_the_rung_once_it_is_known(tmp_path, monkeypatch):
    """A second worker does not idle through the reference's epochs: the next candidate starts, trains on, and is
    asked at the first rung (epoch 2 here, not the pruner's default 1) only once the reference has set it."""
    from tf_transfer.studies.sweep import sweep_rung, sweep_storage
    from tf_transfer.studies.sweep.sweep_trial import HeldReports

    study, url, clock = _timed_study(tmp_path, monkeypatch, 10_000.0)
    reference, _, _ = sweep_storage.take(study, sorted(SHAPES))
    assert reference.user_attrs["reference"] and "first_rung" not in study.user_attrs
    # The other worker's next trial ranks; with the reference training it may start (the sweep does not wait).
    waiting = [t for t in study.get_trials(deepcopy=False) if t.state.name == "WAITING"]
    assert not sweep_rung.await_reference(study, waiting, True, 3, lambda line: None)
    runs = {}
    for _ in range(2):
        trial, name, _ = sweep_storage.take(study, sorted(SHAPES))
        runs[name] = (trial, HeldReports(study, last_epoch=3))
    (k1, k1_held), (k1b, k1b_held) = runs["k1"], runs["k1b"]
    # Epoch 1 at once would rank k1 (0.70) below k1b (0.75) and prune it; held, neither is asked yet.
    assert not k1b_held.report(k1b, 0.75, 1) and not k1_held.report(k1, 0.70, 1)
    assert k1_held.waiting == 1 and k1.study._storage.get_trial(k1._trial_id).intermediate_values == {}
    sweep_rung.set_first_rung(study, "full", {"learned_at": 2, "epochs": 2, "value": 0.86}, 3, lambda line: None)
    # Known now: the held epochs are reported in order, and the rung (2) ranks k1's 0.83 above k1b's 0.76.
    assert not k1b_held.report(k1b, 0.76, 2)
    assert not k1_held.report(k1, 0.83, 2) and k1_held.waiting == 0
    assert study._storage.get_trial(k1._trial_id).intermediate_values == {1: 0.70, 2: 0.83}
    assert study.pruner._pruner._min_resource == 2
    # Where the run that measures the rung failed and none waits, the rung is its runs' last epoch: nothing pruned.
    other, _, _ = _timed_study(tmp_path / "failed", monkeypatch, 10_000.0)
    failed, _, _ = sweep_storage.take(other, sorted(SHAPES))
    import optuna

    other.tell(failed, state=optuna.trial.TrialState.FAIL)
    assert sweep_rung.rung_known(other, 3, lambda line: None) and other.user_attrs["first_rung"] == 3


def test_a_reference_killed_after_the_epoch_it_learned_pauses_there_when_run_again(tmp_path, monkeypatch):
    """Its process died after that epoch's checkpoint, before the sweep set the rung: the retry trains nothing more
    (a run that went on would set the rung an epoch late) and answers as the reference that paused there."""
    from tf_transfer.studies.sweep import sweep_trial

    study, _, _ = _timed_study(tmp_path, monkeypatch, 10_000.0)  # constant prediction 0.80: learned from 0.81 on
    epochs = [{"epoch": 1, "val": {"f1": 0.78}, "epoch_time_s": 20.0}, {"epoch": 2, "val": {"f1": 0.86},
                                                                         "epoch_time_s": 21.0}]
    assert sweep_trial._learned_before(study, "full", epochs, "f1", False, False, True) == 2
    assert "first_rung" not in study.user_attrs  # the reference's rung is the sweep's to set, when it ends
    assert sweep_trial._learned_before(study, "full", epochs, "f1", False, False, False) is None  # ranked runs
    answer = sweep_trial._ended_before({"epochs": epochs}, None, 2, 0.86, start=0.0)
    assert answer["cut"] == "reference" and answer["learned_at"] == 2 and answer["value"] == 0.86
    assert not answer["pruned"] and answer["epoch_time_s"] == 21.0 and answer["epochs"] == 2
    # Pruned at an epoch it had trained: its line names the best score so far (it said "no score").
    pruned = sweep_trial._ended_before({"epochs": epochs[:1]}, 1, None, 0.78, start=0.0)
    assert pruned["pruned"] and sweep.ended_line("full", 0, pruned, "f1", 12.0) == (
        "[sweep] full seed 0: stopped by successive halving after 1 epoch (best validation f1 0.780), 0.2 min")


def test_full_fine_tuning_queued_first_measures_the_first_rung_as_it_goes_on(tmp_path, monkeypatch):
    """Queued first, full fine-tuning's seed 0 is the run that sets the first rung: no reference run repeats its
    first epochs, and the run goes on to its end."""
    log = []
    study, url, clock = _timed_study(tmp_path, monkeypatch, 10_000.0, full_first=True)
    assert not any(t.user_attrs.get("reference") for t in study.trials)
    assert study.trials[0].user_attrs["sets_rung"] and study.trials[0].user_attrs["unpruned"]
    assert sweep.run_sweep(study, url, str(tmp_path), _timed_trial(clock, log), top=2, seeds=3,
                           log=lambda line: None) == "done"
    assert log[0] == ("full", 0, 3) and study.user_attrs["first_rung"] == 2  # it beat 0.80 by a point at epoch 2
    assert study.user_attrs["reference"] == {"candidate": "full", "learned": True, "epochs": 2, "score": 0.86,
                                          "cut": None}
    assert ("k1", 0, 3) in log and ("k1b", 0, 2) in log  # ranked at the rung it set: k1 kept, k1b pruned there
    assert sweep_estimate.continued_epochs(study, study.trials[0]) == 0  # its own run: it continues none
    # A run that never learned sets nothing itself: the sweep says nothing is pruned when it ends.
    assert not sweep_rung.learned(study, "full", 1, 0.805, lower_is_better=False, sets_rung=False)


def test_the_budget_keeps_the_seed_round_and_starts_no_trial_it_cannot_fit(tmp_path, monkeypatch):
    import optuna

    log = []
    # The reference costs 2 + 2 x 18 = 38 s; k1 2 + 3 + 3 x 3 = 14 s, k1b (pruned at the rung; k1 built its cache)
    # 2 + 2 x 3 = 8 s.
    study, url, clock = _timed_study(tmp_path, monkeypatch, 100.0)
    assert sweep.run_sweep(study, url, str(tmp_path), _timed_trial(clock, log), top=1, seeds=3,
                           log=lambda line: None) == "budget"
    spent = sweep.spent_s(study)
    assert spent == 38 + 14 + 8 + 2 * 14
    # With 40 s left after the reference, k1 and k1b, the next candidate (k2, never measured: 2 s of start-up, its
    # cache from k1's scaled by its 4 frozen blocks, 2 epochs of 6 s scaled from the others' work per step: 16.4 s)
    # and the seed round of k1 (2 x its seed-0 run's 14 s) did not both fit: the seed round ran first (28 s), and
    # k2, which the 12 s left would not fit, waits behind it for a larger budget.
    assert study.user_attrs["seed_round"] == ["k1"]
    assert [entry for entry in log if entry[0] == "k1"] == [("k1", 0, 3), ("k1", 1, 3), ("k1", 2, 3)]
    assert not any(entry[0] == "k2" for entry in log)
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert sorted(t.system_attrs["fixed_params"]["candidate"] for t in waiting) == ["full", "k2"]  # neither fits


def _ran(study, found: dict, facts: dict, value=None, state=None):
    """Takes the next queued trial with what its run measured (`facts`, beside 2 s of start-up on 6 blocks) and
    ends it in `state` (None: it still runs)."""
    from tf_transfer.studies.sweep import sweep_storage

    trial = sweep_storage.take(study, sorted(found))[0]
    for key, fact in {"startup_s": 2.0, "num_layers": 6, "tail_s": 0.0, **facts}.items():
        trial.set_user_attr(key, fact)
    if state is not None:
        study.tell(trial, value, state=state)
    return trial


def test_the_seed_round_is_kept_beside_what_running_trials_will_still_spend(tmp_path):
    """A Quora sweep (2026-11-29) started full fine-tuning's seed 0, which continues the reference's run, while the
    last 3 blocks' seed 0 trained: priced to the first rung, which the reference had passed, and with that run
    counted at its next epoch alone, it and the seed round seemed to fit; the budget then cut it after epoch 2, before
    the rung that would have ranked it, and the seed round's runs did not fit. Priced to its next rung beside the
    running run's rest, it waits behind the seed round."""
    import optuna

    from tf_transfer.studies.sweep import sweep_storage

    found = {name: SHAPES[name] for name in ("k1", "k2", "full")}
    study, _ = sweep.open_study(str(tmp_path), {"max_epochs": 3}, lambda: found, 120.0, seeds=3,
                                constant={"score": 0.80, "predicts": "1"})

    def ran(facts: dict, value=None, state=optuna.trial.TrialState.COMPLETE):
        return _ran(study, found, facts, value, state)

    # The reference: 2 s of start-up and 1 epoch of 18 s, where it learned; k1 ran its 3 epochs of 3 s after a 3-s
    # cache build (14 s); k2 trains, its first epoch done and its next reserved (11 s spent, 17.6 reserved).
    ran({"epoch_time_s": 18.0, "epochs": 1, "train_s": 20.0, "reference": True}, state=optuna.trial.TrialState.PRUNED)
    sweep_rung.set_first_rung(study, "full", {"learned_at": 1, "epochs": 1, "value": 0.86}, 3, lambda line: None)
    ran({"epoch_time_s": 3.0, "epochs": 3, "cache_build_s": 3.0, "train_s": 14.0}, value=0.84)
    ran({"train_s": 11.0, "reserved_s": 17.6}, state=None)
    following = study.get_trials(states=(optuna.trial.TrialState.WAITING,))[0]
    assert sweep_storage.key_of(following)[:2] == ("full", 0)
    # Full fine-tuning's seed 0 goes on from the reference's epoch 1 to the next rung, 3: two epochs, not one.
    cost = sweep_estimate.estimate_s(study, found, following)
    assert cost == pytest.approx(2 + 2 * 18)
    # k2's whole run: 2 s, its cache (k1's scaled by 4 frozen blocks of 5) and 3 epochs of 6 s (k1's scaled by its
    # work per step), less the 17.6 s it holds.
    assert sweep_estimate.rest_s(study, found) == pytest.approx(2 + 3 * 4 / 5 + 3 * 6 - 17.6)
    remaining = 120.0 - sweep_storage.committed_s(study)  # 68.4 s: the full run's 38 and k1's seeds' 28 fit in it
    assert cost + sweep_seed_round.cost(study, 1, 3) <= remaining
    assert sweep._reserve(study, following, cost, remaining, 1, 3, lambda line: None) is None  # not beside k2's rest
    assert study.user_attrs["seed_round"] == ["k1"]
    waiting = [sweep_storage.key_of(t)[:2] for t in study.get_trials(states=(optuna.trial.TrialState.WAITING,))]
    assert waiting == [("k1", 1), ("k1", 2), ("full", 0)]


def test_a_trial_whose_cache_a_run_built_is_priced_without_the_build(tmp_path):
    """k1 at 1e-3 ran over 5 frozen blocks at seed 0: k1b (the same blocks at 1e-4) reads its cache, so its
    estimate holds no build; k2 (4 frozen blocks) still builds its own, priced from k1's build. k1's seed-round
    runs read the cache its seed-0 run built (`cache_pool.pool`): each is priced at that run less its 3-s build."""
    from tf_transfer.studies.sweep import sweep_seed_round

    import optuna

    from tf_transfer.studies.sweep import sweep_storage

    found = {name: SHAPES[name] for name in ("k1", "k1b", "k2", "full")}
    study, _ = sweep.open_study(str(tmp_path), {"max_epochs": 3}, lambda: found, 600.0, seeds=3,
                                constant={"score": 0.80, "predicts": "1"})
    _ran(study, found, {"epoch_time_s": 18.0, "epochs": 1, "train_s": 20.0, "reference": True}, None,
         optuna.trial.TrialState.PRUNED)
    sweep_rung.set_first_rung(study, "full", {"learned_at": 1, "epochs": 1, "value": 0.86}, 3, lambda line: None)
    _ran(study, found, {"epoch_time_s": 3.0, "epochs": 3, "cache_build_s": 3.0, "cache_time_s": 3.0,
                        "train_s": 14.0}, 0.84, optuna.trial.TrialState.COMPLETE)
    waiting = {sweep_storage.key_of(t)[0]: t for t in study.get_trials(states=(optuna.trial.TrialState.WAITING,))}
    assert sweep_estimate.estimate_s(study, found, waiting["k1b"]) == pytest.approx(2 + 3.0)  # to the first rung
    assert sweep_estimate.estimate_s(study, found, waiting["k2"]) == pytest.approx(2 + 3.0 * 4 / 5 + 6.0)
    assert sweep_seed_round.cost(study, 1, 3) == pytest.approx(2 * (14.0 - 3.0))


def test_a_worker_starts_no_trial_that_would_end_after_its_deadline(tmp_path, monkeypatch):
    log = []
    # The ledger holds plenty; the deadline does not: after the reference (38 s) and k1 (14 s) at 52 s, k1b's
    # estimate (2 s of start-up, 2 epochs of k1's 3 s; its cache k1's: 8 s) would end at 60 s, after 59.
    study, url, clock = _timed_study(tmp_path, monkeypatch, 10_000.0)
    assert sweep.run_sweep(study, url, str(tmp_path), _timed_trial(clock, log), top=1, seeds=3,
                           log=lambda line: None, deadline=59.0) == "budget"
    assert log == [("full", "reference", 2), ("k1", 0, 3)] and clock.now <= 59.0


def test_a_run_stops_after_its_last_epoch_that_ends_before_the_deadline(tmp_path):
    import time

    from tf_transfer.studies.sweep import sweep_trial

    study, _ = sweep.open_study(str(tmp_path), {}, lambda: {"a": {"trainable_layers": "all", "lr": 1e-3}}, 1e6)
    trial = study.ask()
    now = time.time()
    # The ledger has room for a 10 s epoch either way; the deadline 30 s away has room for it, 5 s away none.
    assert sweep_trial.reserve_rest(study, trial, now, 10.0, 10.0, 0.0, deadline=now + 30.0)
    assert not sweep_trial.reserve_rest(study, trial, now, 10.0, 10.0, 0.0, deadline=now + 5.0)
    assert sweep_trial.reserve_rest(study, trial, now, 0.0, 10.0, 0.0, deadline=now + 5.0)  # a last epoch ends it


def test_a_run_whose_patience_ends_it_where_the_budget_would_cut_it_is_not_cut(tmp_path, monkeypatch):
    """The engine judges early stopping after the sweep's hook: a seed-round run on Quora whose patience ran out at
    epoch 4, where the deadline left no room for a fifth, was marked cut by the budget, and the recommendation left
    out its seed. Epochs of 10 s on a made-up clock; the deadline fits epoch 4 (after 3: 30 s, 11 s for the next and
    a 10-s tail to 52) but no fifth."""
    import dataclasses

    from tf_transfer.core.setting_groups import LoopSettings
    from tf_transfer.studies.glue import glue_settings, glue_task
    from tf_transfer.studies.sweep import sweep_trial
    from tf_transfer.training import runner

    clock = _Clock()
    monkeypatch.setattr(sweep_trial, "time", clock)
    task = dataclasses.make_dataclass("Task", ["metric", "loop", "after_epoch"])(
        "accuracy", LoopSettings(max_epochs=5, patience=2), None)
    monkeypatch.setattr(glue_settings.GlueSettings, "from_dict", classmethod(lambda cls, given: given))
    monkeypatch.setattr(glue_task, "task_for", lambda given: task)

    def run(task, folder):  # the engine's loop: each epoch, then the hook; patience 2 ends it after epoch 4
        epochs = []
        for epoch, value in enumerate([0.78, 0.81, 0.808, 0.793], start=1):
            clock.now += 10.0
            epochs.append({"epoch": epoch, "val": {"accuracy": value}, "epoch_time_s": 10.0})
            if task.after_epoch(epochs[-1]):
                break
        return {"epochs": epochs, "best_epoch": 2}

    monkeypatch.setattr(runner, "run", run)
    study, where = sweep.open_study(str(tmp_path), {}, lambda: {"a": {"trainable_layers": "all", "lr": 1e-3}}, 1e6,
                                    constant={"score": None})

    def seed_round_run(folder: str, loop: LoopSettings) -> dict:
        task.loop, trial = loop, study.ask()
        trial.set_user_attr("seed_round", True)  # as on Quora; it ranks nothing
        return sweep_trial.train_trial(where, trial._trial_id, {}, str(tmp_path / folder), 0.0,
                                       deadline=clock.now + 52.0)

    result = seed_round_run("run", LoopSettings(max_epochs=5, patience=2))
    assert result["cut"] is None and result["epochs"] == 4 and result["value"] == 0.81
    # With patience 3 it would go on: the deadline cuts it after epoch 4, as before.
    assert seed_round_run("run3", LoopSettings(max_epochs=5, patience=3))["cut"] == "budget"


def test_a_sweep_whose_queue_emptied_with_runs_cut_by_the_budget_does_not_say_done(tmp_path, capsys):
    """On STS-B the deadline cut LoRA's two further seeds an epoch short of their stopping rule, the queue then
    empty: the last line said "sweep done", which reads as the whole answer."""
    import time

    study, _ = sweep.open_study(str(tmp_path), {}, lambda: {"a": {"trainable_layers": "all", "lr": 1e-3}}, 600.0)
    options = sweep_session.SweepOptions(budget="10m")
    report = lambda study, sweep_dir, out: (None, "Recommended: a", None)  # noqa: E731
    sweep_session._finish(options, study, str(tmp_path), "done", 2, time.time(), report)
    assert capsys.readouterr().out.startswith("sweep done; ")
    study.ask().set_user_attr("cut", "budget")
    sweep_session._finish(options, study, str(tmp_path), "done", 2, time.time(), report)
    assert capsys.readouterr().out.startswith("sweep stopped: budget spent (1 run cut short by it); ")


def test_the_plan_says_what_an_answer_needs_and_what_the_budget_decides():
    from tf_transfer.studies.sweep import sweep_plan

    speed = sweep_plan.Speed(example_s=0.05, block_s=0.0025, startup_s=30.0, num_layers=6, train_examples=5400,
                             scored_examples=600, steps_per_epoch=169)
    found = sweep.candidates(["freeze", "lora", "bitfit"], num_layers=6)
    reference = sweep.reference(found)
    whole = sweep_plan.plan(found, reference, speed, workers=2, max_epochs=5, patience=2)
    one = sweep_plan.plan(found, reference, speed, workers=1, max_epochs=5, patience=2)
    assert whole.candidates == len(found) and whole.needed_s < one.needed_s
    assert one.needed_s == pytest.approx(one.training_s)  # one worker: its wall time is all the training
    reached = [sweep_plan.plan(found, reference, speed, 2, 5, 2, budget_s=b).reached
               for b in (60, 1800, 3600, whole.needed_s)]
    assert reached == sorted(reached) and reached[0] == 0 and reached[-1] == len(found)
    assert sweep_plan.first_line(sweep_plan.plan(found, reference, speed, 2, 5, 2, budget_s=60), 60).endswith(
        "is too little for any answer (the reference, one candidate and the seed round need more): give "
        f"--budget={sweep_plan._minutes(whole.needed_s * 1.1, up=True)}")  # with the room a plan may fall short by
    some = sweep_plan.plan(found, reference, speed, 2, 5, 2, budget_s=3600)
    assert 1 < some.reached < len(found) and some.spent_s <= 3600
    assert (f"--budget=1h00m decides among full fine-tuning and the {some.reached - 1} cheapest of the others"
            in sweep_plan.first_line(some, 3600))
    # The queue: full fine-tuning (at every seed) first where the budget compares it, else all cheapest first.
    roomy = whole.needed_s * 1.1 + 60
    queue, fits = sweep_plan.order(found, reference, speed, 2, 5, 2, budget_s=roomy)
    assert queue[0] == reference and fits.full_first and sweep_plan.first_line(fits, roomy).endswith("is enough")
    # Within 10% of the plan (it may fall that short: `PLAN_SHORTFALL`), enough with little to spare, and room named.
    assert sweep_plan.first_line(fits, whole.needed_s * 1.05, timing_s=60).endswith(
        f"is enough by the plan, with less than 10% to spare (the machine's speed drifts as it runs): give "
        f"--budget={sweep_plan._minutes(whole.needed_s * 1.1 + 60, up=True)} for room")
    # The user's --budget is the one named, with what its probe left of it.
    assert sweep_plan.first_line(fits, roomy, "9h").endswith(
        f"--budget=9h ({sweep_plan._minutes(roomy)} left after timing this machine) is enough")
    queue, short = sweep_plan.order(found, reference, speed, 2, 5, 2, budget_s=1500)
    assert queue == list(found) and queue[-1] == reference and not short.full_first and short.reached >= 1
    # The budget it suggests adds what the probe took of the one given (here 60 s of 1,560).
    assert sweep_plan.first_line(short, 1500, "26m", timing_s=60).endswith(
        f"give --budget={sweep_plan._minutes(short.needed_s * 1.1 + 60, up=True)} for all")
    assert (f"decides among the {short.reached} cheapest of them (about " in sweep_plan.first_line(short, 1500))
    assert ("), more where successive halving stops some early (full fine-tuning, queued last, only then): give "
            "--budget=") in sweep_plan.first_line(short, 1500)
    # Queued cheapest first, full fine-tuning meets the others at the rungs: the line says first what an answer
    # needs where successive halving stops it by epoch 3 (its later epochs and further seeds not trained), then the
    # bound; with a budget between the two, that the budget is enough in the first case.
    likely = sweep_plan.plan(found, reference, speed, 2, 5, 2, budget_s=1500, full_first=False, full_pruned=True)
    cut = sweep_plan.plan(found, reference, speed, 2, 5, 2, full_first=False)
    assert likely.needed_s < cut.needed_s and likely.training_s < cut.training_s
    assert (f"needs about {sweep_plan._minutes(likely.needed_s)} on 2 workers, one per core, if successive halving "
            f"stops full fine-tuning by epoch 3 (it goes on there only among the best third of the runs; "
            f"docs/methods.md), {sweep_plan._minutes(cut.needed_s)} if not;"
            in sweep_plan.first_line(short, 1500, likely=likely))
    assert sweep_plan.second_case_line(short, 1500, likely=likely) is None  # not enough in the first case either
    between = (likely.needed_s + cut.needed_s) / 2
    short = sweep_plan.plan(found, reference, speed, 2, 5, 2, budget_s=between, full_first=False)
    assert short.answers and short.reached < len(found)
    assert (f"is enough in the first case, in the second decides among the {short.reached} cheapest (about "
            in sweep_plan.first_line(short, between, likely=likely))
    # When the second case comes, the sweep says so (`sweep_trial.say_second_case`): what the budget decides then,
    # and the budget for all, as the first line gave it.
    give = sweep_plan._minutes(short.needed_s * 1.1 + 60, up=True)
    assert sweep_plan.first_line(short, between, "30m", likely=likely, timing_s=60).endswith(f"--budget={give} for "
                                                                                             "all in either")
    assert sweep_plan.second_case_line(short, between, "30m", likely, timing_s=60).format(epoch=3) == (
        f"[sweep] successive halving kept full fine-tuning past epoch 3, the first line's second case: --budget=30m "
        f"decides among the {short.reached} cheapest (about {sweep_plan._minutes(short.spent_s)}); for an answer "
        f"over all, run this command again with --budget={give} when it ends (it goes on from its runs)")
    assert sweep_plan.second_case_line(short, between) is None  # a first line that stated one case
    edge = likely.needed_s * 1.05
    short = sweep_plan.plan(found, reference, speed, 2, 5, 2, budget_s=edge, full_first=False)
    assert ("is enough in the first case, with less than 10% to spare (the machine's speed drifts as it runs), in the "
            f"second decides among the {short.reached} cheapest" in sweep_plan.first_line(short, edge, likely=likely))
    assert sweep_plan.second_case_line(short, edge, likely=likely).startswith("[sweep] successive halving kept full")
    # One candidate reached (the Quora file's probe on a slow hour, 2026-12-01): said as one.
    one = sweep_plan.Plan(3520, 6535, 3, 2, reached=1, answers=True, spent_s=851, full_first=False, budget_s=1859)
    assert "--budget=31m decides the cheapest of them alone (about 14m), more where" in sweep_plan.first_line(one, 1859)
    assert "--budget=31m decides full fine-tuning alone (about 14m): give" in sweep_plan.first_line(
        dataclasses.replace(one, full_first=True), 1859)
    # Queued first, full fine-tuning is never ranked at a rung: no such case.
    assert sweep_plan.plan(found, reference, speed, 2, 5, 2, full_pruned=True) == whole


def test_the_plan_prices_full_fine_tuning_at_every_seed_to_its_stopping_rule():
    """Full fine-tuning is what every answer is compared with and the costliest candidate: the plan may not count
    it as pruned by its place in the queue (a sweep that said "enough" once cut it after 4 of 9 epochs)."""
    from tf_transfer.studies.sweep import sweep_plan

    speed = sweep_plan.Speed(example_s=0.02, block_s=0.001, startup_s=20.0, num_layers=6, train_examples=5400,
                             scored_examples=600, steps_per_epoch=169)
    found = sweep.candidates(["freeze", "lora"], num_layers=6)
    reference = sweep.reference(found)
    fixed, epoch = sweep_plan.run_cost(found[reference], speed)
    whole_run = fixed + 5 * epoch  # 350 steps to its best epoch (3 of 169) and patience 2: all 5 epochs
    for full_first in (True, False):
        p = sweep_plan.plan(found, reference, speed, 2, 5, 2, seeds=3, full_first=full_first)
        # 3 seeds; a reference run's epoch (the other worker trains meanwhile), unless full fine-tuning's seed 0
        # measures the first rung
        measuring = 0.0 if full_first else fixed + epoch
        others = p.training_s - 3 * whole_run - measuring
        cheapest_runs = [sum(sweep_plan.run_cost(found[name], speed)) for name in found if name != reference]
        assert others >= sum(cheapest_runs) - 1e-6  # every other candidate at least starts and trains an epoch
        assert p.needed_s >= (measuring + 3 * whole_run) / 2
    # The default candidates are the front's: each costlier one is expected past the rungs, every run to its end.
    default = sweep.candidates(list(methods.registry.in_default_sweep()), num_layers=6)
    assert sweep_session._front(default, speed) and not sweep_session._front(sweep.candidates(["bitfit"], 6), speed)
    fronted = sweep_plan.plan(default, reference, speed, 2, 5, 2, seeds=3, front=True)
    every_run = sum(fixed_s + 5 * epoch_s
                    for fixed_s, epoch_s in (sweep_plan.run_cost(s, speed) for s in default.values()))
    assert fronted.training_s >= every_run + 2 * whole_run  # and full fine-tuning's 2 further seeds
    assert fronted.training_s > sweep_plan.plan(default, reference, speed, 2, 5, 2).training_s  # random order's


def test_the_plan_runs_a_file_of_few_steps_an_epoch_for_more_epochs_up_to_max_epochs():
    """A run's best epoch is planned after `ASSUMED_BEST_STEPS` optimizer steps: at 1, 2 and 9 epochs' worth of
    them, the same candidates' planned training grows; past `max_epochs` it stays."""
    from tf_transfer.studies.sweep import sweep_plan

    found = sweep.candidates(["freeze", "lora"], num_layers=6)
    training = []
    for epochs_to_best in (1, 2, 9, 20):
        steps = -(-sweep_plan.ASSUMED_BEST_STEPS // epochs_to_best)
        speed = sweep_plan.Speed(example_s=0.05, block_s=0.0025, startup_s=30.0, num_layers=6, train_examples=1350,
                                 scored_examples=150, steps_per_epoch=steps)
        training.append(sweep_plan.plan(found, sweep.reference(found), speed, 2, 9, 2).training_s)  # up to 9 epochs
    assert training[0] < training[1] < training[2] == training[3]


@pytest.mark.parametrize("flags, fragment", [
    ([], "the sweep needs --budget"),
    (["--budget=1h", "--seeds=0,1"], "--seeds: the sweep chooses its own seeds"),
    (["--budget=1h", "--methods=adapters"], "--methods: 'adapters' is not a method"),
    (["--budget=1h", "--lora_ranks=eight"], "--lora_ranks takes whole numbers"),
    (["--budget=soon"], "is not a duration"),
    (["--budget=1h", "--presets=all_minilm_l6_v3_en"], "preset 'all_minilm_l6_v3_en' is not a keras-hub preset"),
])
def test_bad_sweep_flags_are_one_error_line_before_anything_is_written(tmp_path, flags, fragment):
    done = run_module("tf_transfer.sweep", "--task=rte", f"--runs_dir={tmp_path}", *flags)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and fragment in errors[0], done.stderr[-2000:]
    assert not os.listdir(tmp_path)


def test_a_sweep_name_given_to_other_settings_is_refused_naming_what_differs(tmp_path):
    first, _ = sweep.open_study(str(tmp_path), {"lr": 1.0, "max_epochs": 3}, lambda: {"a": {}}, 60.0, name="mine")
    with pytest.raises(TransferError, match=r"the sweep mine on sqlite:///.*has other settings \(max_epochs differ\): "
                                            r"give the same settings to join it, or another --sweep_name"):
        sweep.open_study(str(tmp_path), {"lr": 1.0, "max_epochs": 5}, lambda: {"a": {}}, 60.0, name="mine")
    again, _ = sweep.open_study(str(tmp_path), {"lr": 1.0, "max_epochs": 3}, lambda: {"b": {}}, 90.0, name="mine")
    assert again.user_attrs["candidates"] == {"a": {}} and again.user_attrs["budget_s"] == 90.0  # joined, not requeued
    assert len(again.trials) == len(first.trials) == 1


def _opened_sweep(monkeypatch, tmp_path, glue_dir, *flags) -> dict:
    """The settings and identity the sweep command opens its study with, for `flags`."""
    opened = {}

    def open_study(sweep_dir, base, *args, identity=None, **kwargs):
        opened.update(base=base, identity=identity)
        raise TransferError("opened")

    monkeypatch.setattr(sweep, "open_study", open_study)
    done = run_module("tf_transfer.sweep", "--task=rte", f"--data_dir={glue_dir}", f"--runs_dir={tmp_path}",
                      "--budget=1m", *flags)
    assert done.returncode == 2 and "error: opened" in done.stderr, done.stderr[-2000:]
    return opened


def test_a_new_sweeps_runs_pack_and_its_name_is_the_one_it_had(tmp_path, glue_dir, monkeypatch):
    """The settings a new sweep stores for its runs pack their batches; what names the sweep (its identity) is what
    it was before packing was the default, so a sweep begun before is joined with the settings it stored."""
    opened = _opened_sweep(monkeypatch, tmp_path, glue_dir)
    assert opened["base"]["padding"] == "pack" and "padding" not in opened["identity"]["base"]
    assert {k: v for k, v in opened["base"].items() if k != "padding"} == opened["identity"]["base"]
    assert _opened_sweep(monkeypatch, tmp_path, glue_dir, "--padding=pack") == opened  # the default, given


def test_padding_given_to_the_sweep_is_its_runs_and_names_another_sweep(tmp_path, glue_dir, monkeypatch):
    opened = _opened_sweep(monkeypatch, tmp_path, glue_dir, "--padding=bucket")
    assert opened["base"]["padding"] == opened["identity"]["base"]["padding"] == "bucket"


def test_the_sweep_takes_hugging_faces_flag_names():
    from conftest import parsed
    from tf_transfer import grid_flags
    from tf_transfer import sweep as sweep_command

    def given(*args):
        return parsed(sweep_command.COMMAND_FLAGS, args, grid_flags.given_settings)

    hugging_face = given("--train_file=t.csv", "--text_column_names=text", "--label_column_name=target",
                         "--num_train_epochs=3", "--per_device_train_batch_size=8", "--do_regression")
    own = given("--train_file=t.csv", "--text_columns=text", "--label_column=target", "--max_epochs=3",
                "--batch_size=8", "--regression")
    assert hugging_face == own and own["text_columns"] == ("text",) and own["max_epochs"] == 3


def test_the_train_command_of_a_recommendation_trains_that_candidates_settings(tmp_path):
    import shlex

    from conftest import write_csv

    from conftest import parsed
    from tf_transfer import glue
    from tf_transfer.core import settings as settings_lib
    from tf_transfer.reporting import sweep_report
    from tf_transfer.studies.glue.glue_settings import GlueSettings

    base = settings_lib.read_flagfile("flags/sweep.flags", GlueSettings)
    data = write_csv(tmp_path / "tweets.csv", ["text", "target"], [("a b", "1"), ("c d", "0")])
    base.update(train_file=str(data), text_columns=["text"], label_column="target", max_epochs=4)
    for candidate in sweep.candidates(["freeze", "lora", "bitfit"], num_layers=6).values():
        command = shlex.split(sweep_report.train_command(base, candidate))
        assert command[:3] == ["python", "-m", "tf_transfer.glue"] and command[-1] == "--export_dir=model"
        trained = parsed(glue.COMMAND_FLAGS, tuple(command[3:-1]), glue.settings_from_flags)
        assert trained == GlueSettings.from_dict({**base, **candidate, "seed": 0})


def test_a_second_worker_gets_the_flags_given_the_workers_count_and_the_deadline(monkeypatch):
    from conftest import parsed
    from tf_transfer import grid_flags
    from tf_transfer import sweep as sweep_command
    from tf_transfer.studies.sweep import sweep_session

    started = []
    monkeypatch.setattr(sweep_session.subprocess, "Popen", lambda argv, env, preexec_fn: started.append((argv, env)))
    options = parsed(sweep_command.COMMAND_FLAGS, ("--train_file=t.csv", "--text_column_names=text",
                                                   "--label_column=stars", "--budget=30m", "--sweep_name=old"),
                     sweep_command.options_of_flags)
    sweep_session._start_worker(options, 1, 2, "tweets-1a2b3c4d", [0, 1], 1234.5)
    [(argv, env)] = started
    # Its own core alone would make it count one worker: the count is given, so it keeps the sweep's ledger.
    assert argv[1:3] == ["-m", "tf_transfer.sweep"] and argv[-2:] == ["--workers=2", "--sweep_name=tweets-1a2b3c4d"]
    assert {"--train_file=t.csv", "--text_columns=text", "--label_column=stars", "--budget=30m"} <= set(argv)
    assert "--sweep_name=old" not in argv and env[sweep.WORKER] == "1 1234.5"

