"""How long tokenizing and packing a GLUE split takes before training: keras-hub's tokenizer and packer run eagerly
against the same layers traced once (`tf_transfer.data.inputs.encode`; a split of `TRACE_FROM_EXAMPLES` or more is
traced by default), each mode in a fresh process, and whether both give the same arrays.

    taskset -c 0 python benchmarks/tokenize_speed.py --data_dir=$GLUE_DIR --splits=sst2:train,mrpc:train,rte:train

Each mode's process loads the tokenizer (not timed) and times `inputs.encode` of the split, the trace included where
traced, as a run pays it. Prints one JSON line per process and one per split with both times and whether the token
ids, segment ids and lengths are identical (their SHA-256); benchmarks/LOG.md has the measured numbers.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

RUN = """
import hashlib, json, sys, time
import numpy as np
from tf_transfer.data import inputs, tasks
from tf_transfer.models import backbones

from tf_transfer.core.errors import TransferError

data_dir, task, split, mode = sys.argv[1:5]
try:
    examples = tasks.read_glue_split(tasks.get_task(task), data_dir, split)
except (TransferError, KeyError) as e:
    sys.exit(f"{e} (a split: train or one of the task's test files)" if isinstance(e, KeyError) else str(e))
tokenizer = backbones.load_preset("all_minilm_l6_v2_en").tokenizer
inputs.TRACE_FROM_EXAMPLES = 0 if mode == "traced" else 10 ** 12
start = time.perf_counter()
encoded = inputs.encode(examples, tokenizer, 128)
seconds = time.perf_counter() - start
digest = hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes()
                                 for a in (encoded.token_ids, encoded.segment_ids, encoded.lengths))).hexdigest()
print("RESULT " + json.dumps({"split": f"{task}:{split}", "mode": mode, "examples": len(encoded),
                              "pairs": examples.text_b is not None, "encode_s": round(seconds, 3),
                              "sha256": digest}))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", required=True, help="GLUE folder in the original TSV layout")
    parser.add_argument("--splits", default="sst2:train,mrpc:train,rte:train",
                        help="comma-separated task:split (a split: train or a key of the task's test files)")
    args = parser.parse_args()
    specs = [spec.split(":") for spec in args.splits.split(",")]
    if any(len(spec) != 2 for spec in specs):
        parser.error(f"--splits={args.splits}: give task:split pairs, e.g. sst2:train,mrpc:dev")  # exit status 2
    for task, split in specs:
        spec = f"{task}:{split}"
        results = {}
        for mode in ("eager", "traced"):
            done = subprocess.run([sys.executable, "-c", RUN, args.data_dir, task, split, mode], capture_output=True,
                                  text=True)
            if done.returncode != 0:  # an unknown task or split, a missing folder: the child's last line says which
                print(f"error: {spec} ({mode}): {done.stderr.strip().splitlines()[-1]}", file=sys.stderr)
                sys.exit(2)
            line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
            results[mode] = json.loads(line[len("RESULT "):])
            print(json.dumps(results[mode]), flush=True)
        eager, traced = results["eager"], results["traced"]
        print(json.dumps({"split": spec, "examples": eager["examples"], "eager_s": eager["encode_s"],
                          "traced_s": traced["encode_s"], "speedup": round(eager["encode_s"] / traced["encode_s"], 1),
                          "same_arrays": eager["sha256"] == traced["sha256"]}), flush=True)


if __name__ == "__main__":
    main()
