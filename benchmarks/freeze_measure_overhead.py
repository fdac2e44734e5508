"""What does AutoFreeze's measuring cost a step while nothing freezes? The same training steps of full fine-tuning
(`--method=freeze --trainable_layers=all`) and of `--method=autofreeze` (whose step also adds every block's gradient
into its sum), in one process, timed alternately on the same batches.

    python benchmarks/freeze_measure_overhead.py --data_dir=../shared/data/glue --steps=8 --repeats=5

Both models are built and traced first; then each repeat times one `fit` over the same `--steps` batches for each
method in turn (A B A B ...), so that load on the machine falls on both alike. No freeze can happen: the autofreeze
model's decisions are taken by the run's epoch loop, which is not used here. Prints one JSON line per timing and a
summary line (medians and their ratio); benchmarks/README.md has the measured numbers.
"""

from __future__ import annotations

import argparse
import json
import time


def build(task_name: str, data_dir: str, method: str, examples: int, batch_size: int):
    from tf_transfer.studies import glue_task
    from tf_transfer.studies.glue_settings import GlueSettings

    settings = GlueSettings(task=task_name, preset="all_minilm_l6_v2_en", method=method, lr=2e-5,
                            batch_size=batch_size, max_epochs=1, patience=0, max_train_examples=examples,
                            data_dir=data_dir, seed=0)
    task = glue_task.task_for(settings)
    task.build()
    return task


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", required=True, help="GLUE folder in the original TSV layout")
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--steps", type=int, default=8, help="training steps per timing")
    parser.add_argument("--repeats", type=int, default=5, help="timings per method, alternated")
    parser.add_argument("--batch_size", type=int, default=32)
    args = parser.parse_args()
    tasks = {method: build(args.task, args.data_dir, method, args.batch_size * (args.steps + 3), args.batch_size)
             for method in ("freeze", "autofreeze")}
    plan = tasks["freeze"].feed.plan(1)
    warm, timed = plan[:3], plan[3:3 + args.steps]

    def fit(task, batches):
        task.model.fit(task.feed.dataset(batches), epochs=1, verbose=0, shuffle=False)

    for task in tasks.values():
        fit(task, warm)  # traces the step (and the autofreeze step with its sums)
    times = {method: [] for method in tasks}
    for repeat in range(args.repeats):
        for method, task in tasks.items():
            start = time.perf_counter()
            fit(task, timed)
            seconds = (time.perf_counter() - start) / len(timed)
            times[method].append(seconds)
            print(json.dumps({"method": method, "repeat": repeat, "step_s": seconds}), flush=True)
    median = {method: sorted(values)[len(values) // 2] for method, values in times.items()}
    # Each repeat's two timings are adjacent in time, so their ratio cancels load that changes slowly.
    pairs = sorted(a / f for a, f in zip(times["autofreeze"], times["freeze"]))
    print(json.dumps({"median_step_s": median, "autofreeze_over_freeze": median["autofreeze"] / median["freeze"],
                      "median_paired_ratio": pairs[len(pairs) // 2], "steps": len(timed),
                      "batch_size": args.batch_size}))


if __name__ == "__main__":
    main()
