"""A sweep whose runs are made up, for tests of what several processes do on one sweep (the queue, heartbeats,
retries, the budget, the report) without training: each candidate's validation score per epoch is `CURVES`', an
epoch takes `EPOCH_S` seconds, and a run resumes from its folder's `summary.json` as a real one does.

A process on the sweep, as a test starts it (prints "ended: done|budget" and the report's recommendation line):

    python tests/sweep_fakes.py URL NAME RUNS_DIR BUDGET_S

(`SWEEP_FAKE_HOST`: the host name its trials record, another machine's; `SWEEP_FAKE_TRAINER_PID`: its first
trial's trainer is a child to kill, `trainer_to_kill`.)

The real sweep command, whose runs train, in a process of its own that measures the machine as `measured` does (as
a test's own process does with `sweep_plan.measure` patched):

    python tests/sweep_fakes.py command sweep --train_file=... --storage=URL ...

(A real trainer child killed in a sweep: tests/sweep_children.py.)
"""

from __future__ import annotations

import json
import os
import sys
import time

CURVES = {"a": [0.70, 0.80, 0.85], "b": [0.60, 0.61, 0.62], "c": [0.72, 0.79, 0.83]}
EPOCH_S = float(os.environ.get("SWEEP_FAKE_EPOCH_S", "0.25"))  # a test of the budget makes epochs longer
CONSTANT = {"score": 0.5, "predicts": "0", "examples": 10}


def measured(settings: dict, *args, **kwargs):
    """A made-up `sweep_plan.measure` of the one-block preset on a few dozen examples, for tests of the sweep command
    that check nothing of its plan: measuring builds and trains two models for a few steps (about 3 s of a test) and
    gives only the sweep's first line and its report's plan. tests/studies/test_sweep.py's command test measures."""
    from tf_transfer.studies.sweep import sweep_plan

    train = 36
    return sweep_plan.Speed(example_s=0.002, block_s=0.0005, startup_s=2.0, num_layers=1, train_examples=train,
                            scored_examples=4, steps_per_epoch=-(-train // int(settings["batch_size"])))


def candidates() -> dict:
    return {name: {"trainable_layers": "all", "lr": 1e-3 * (i + 1)} for i, name in enumerate(CURVES)}


def _write(folder: str, summary: dict) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "summary.json.tmp"), "w") as f:
        json.dump(summary, f)
    os.replace(os.path.join(folder, "summary.json.tmp"), os.path.join(folder, "summary.json"))


def train(where, trial_id, settings, folder, keep_s):
    """A made-up run with the sweep's `train_trial` contract: reports each epoch, stops where the pruner or the
    budget says, resumes from its folder. Where `SWEEP_FAKE_TRAINER_PID` names a file, this process's first trial
    is a trainer child that writes its pid there and waits to be killed (`trainer_to_kill`)."""
    import optuna

    from tf_transfer.studies.sweep import sweep_search as sweep, sweep_trial

    pid_file = os.environ.pop("SWEEP_FAKE_TRAINER_PID", None)  # popped: the first trial alone
    if pid_file:
        return trainer_to_kill(pid_file)

    study = sweep.load(where)
    trial = optuna.trial.Trial(study, trial_id)
    name, seed = os.path.basename(os.path.dirname(folder)), settings["seed"]
    curve = [v + 0.01 * seed for v in CURVES[name]]
    summary = {"seed": seed, "metric": "accuracy", "completed": False, "best_epoch": None, "epochs": [],
               "config": {"max_epochs": len(curve)}, "machine": {"cpu": "made up", "cores": 1}}
    if os.path.exists(os.path.join(folder, "summary.json")):
        with open(os.path.join(folder, "summary.json")) as f:
            summary = json.load(f)
    best = []

    def best_so_far(value):
        best.append(max(best + [value]))
        return best[-1]

    result = {"value": None, "pruned": False, "cut": None, "epoch_time_s": EPOCH_S, "startup_s": 0.0}
    pruned_at = sweep_trial.resume_reports(trial, summary["epochs"], "accuracy", best_so_far, len(curve))
    if pruned_at:
        return {**result, "pruned": True, "pruned_at": pruned_at, "cut": "pruned", "epochs": len(summary["epochs"])}
    start = time.time()
    taken, ends = min(trial.user_attrs.get("started_at") or start, start), []  # as train_trial counts them
    for epoch in range(len(summary["epochs"]) + 1, len(curve) + 1):
        time.sleep(EPOCH_S)
        summary["epochs"].append({"epoch": epoch, "val": {"accuracy": curve[epoch - 1]}, "epoch_time_s": EPOCH_S,
                                  "train_time_s": EPOCH_S * epoch})
        summary["best_epoch"] = 1 + max(range(epoch), key=lambda i: curve[i])
        _write(folder, summary)
        ends.append(time.time() - start)
        epoch_s = sweep_trial.epoch_wall(ends, EPOCH_S)
        if sweep.report_epoch(trial, best_so_far(curve[epoch - 1]), epoch, len(curve)):
            sweep_trial.reserve_rest(study, trial, taken, 0.0, epoch_s, keep_s)
            summary["epochs"][-1]["sweep"] = "pruned"
            _write(folder, summary)
            return {**result, "pruned": True, "cut": "pruned", "epochs": epoch}
        last = epoch == len(curve)
        if not sweep_trial.reserve_rest(study, trial, taken, 0.0 if last else epoch_s, epoch_s, keep_s) and not last:
            summary["epochs"][-1]["sweep"] = "budget"
            _write(folder, summary)
            return {**result, "cut": "budget", "epochs": epoch, "value": max(curve[:epoch])}
    summary["completed"] = True
    _write(folder, summary)
    return {**result, "value": max(curve), "epochs": len(curve)}


def trainer_to_kill(pid_file: str) -> None:
    """A trial's trainer child (as `--isolate_runs` starts one, dying with this process) that waits for a test to
    kill it with its sweep process (kill -9 of both: a machine's processes gone mid-trial); its pid is written to
    `pid_file`. A bare Python (`-S`, nothing imported): the test pays for no child's imports."""
    import subprocess

    from tf_transfer.core import isolated

    child = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(600)"],
                             preexec_fn=isolated.die_with_parent)
    with open(pid_file + ".tmp", "w") as f:
        f.write(str(child.pid))
    os.replace(pid_file + ".tmp", pid_file)
    child.wait()


def main(url: str, name: str, runs_dir: str, budget_s: float) -> None:
    from tf_transfer.reporting import sweep_report
    from tf_transfer.studies.sweep import sweep_search as sweep

    if os.environ.get("SWEEP_FAKE_HOST"):  # a process of another machine: its trials' death is told by heartbeats
        import socket

        socket.gethostname = lambda: os.environ["SWEEP_FAKE_HOST"]
    sweep_dir = os.path.join(runs_dir, "sweep", name)
    study, where = sweep.open_study(sweep_dir, {"max_epochs": 3}, candidates, budget_s, storage=url, name=name,
                                    heartbeat_s=1, constant={"score": None})
    # The constant prediction of every seed's split, known: the report judges without data to read.
    study.set_user_attr("constant", {str(seed): CONSTANT for seed in range(3)})

    ended = sweep.run_sweep(study, where, sweep_dir, train, top=1, seeds=2, log=lambda line: print(line, flush=True))
    _, line, _ = sweep_report.write_report(study, sweep_dir, sweep_dir)
    print(f"ended: {ended}", flush=True)
    print(line, flush=True)


def command(argv: list) -> None:
    """`python -m tf_transfer.experiments argv...` with `measured` in `sweep_plan.measure`'s place."""
    from tf_transfer import experiments
    from tf_transfer.core import cli
    from tf_transfer.studies.sweep import sweep_plan

    sweep_plan.measure = measured
    sys.argv = [experiments.__file__, *argv]
    cli.run(experiments.main, experiments.COMMAND_FLAGS)


if __name__ == "__main__":
    if sys.argv[1] == "command":
        command(sys.argv[2:])
    else:
        main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
