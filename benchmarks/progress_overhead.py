"""Does progress inside an epoch slow training? `epoch_time_s` of the same batch-size-1 GLUE run with the engine's
progress display on and off, alternated, each in a fresh process.

Batch size 1 on the frozen-prefix cache with one trainable block makes steps as short as this project's training
gets (a few milliseconds), so a per-step cost of the progress callback shows most there.

    python benchmarks/progress_overhead.py --data_dir=../shared/data/glue --repeats=3

Prints one JSON line per run and a summary line; benchmarks/README.md has the measured numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

RUN = """
import json, sys
from tf_transfer.studies.glue import glue_task as glue
from tf_transfer.studies.glue.glue_settings import GlueSettings
from tf_transfer.training import progress

if sys.argv[2] == "off":
    progress.Progress.step = lambda self, done, **values: None
config = GlueSettings(task="rte", preset="all_minilm_l6_v2_en", trainable_layers=1, lr=1e-3, batch_size=1,
                   max_epochs=1, patience=0, max_train_examples=int(sys.argv[3]), data_dir=sys.argv[1],
                   cache_frozen=True)
summary = glue.run_glue(config, sys.argv[4], overwrite=True)
epoch = summary["epochs"][0]
print("RESULT " + json.dumps({"progress": sys.argv[2], "epoch_time_s": epoch["epoch_time_s"],
                              "steps": summary["examples"]["train"], "loss": epoch["loss"]}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", required=True, help="GLUE folder in the original TSV layout")
    parser.add_argument("--examples", type=int, default=1000, help="training examples (= steps at batch size 1)")
    parser.add_argument("--repeats", type=int, default=3, help="pairs of runs, on then off")
    args = parser.parse_args()
    times = {"on": [], "off": []}
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(args.repeats):
            for state in ("on", "off"):
                done = subprocess.run([sys.executable, "-c", RUN, args.data_dir, state, str(args.examples),
                                       os.path.join(folder, f"{state}{repeat}")], capture_output=True, text=True,
                                      check=True)
                line = next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))
                result = json.loads(line[len("RESULT "):])
                print(json.dumps(result), flush=True)
                times[state].append(result["epoch_time_s"])
    median = {state: sorted(values)[len(values) // 2] for state, values in times.items()}
    print(json.dumps({"median_epoch_time_s": median, "on_over_off": median["on"] / median["off"]}))


if __name__ == "__main__":
    main()
