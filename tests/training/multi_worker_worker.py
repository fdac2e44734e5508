"""One worker process of tests/training/test_multi_worker_studies.py: every study, one after the other, under the
one `MultiWorkerMirroredStrategy` this process joins (`TF_CONFIG`).

    python tests/training/multi_worker_worker.py SPEC.json OUTPUT_ROOT

SPEC.json maps each study (glue or autofreeze, stack, sentiment or sentiment_frozen, multitask) to the keyword arguments of its
settings (tests/study_runs.py); each study writes to OUTPUT_ROOT/<study> through the same function its command
calls. One process for all four pays TensorFlow's import and the cluster's start-up once (the suite's budget for
tests that start processes is 60 s).
"""

import json
import os
import sys
import time

STARTED = time.monotonic()

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from study_runs import run_study  # noqa: E402  (after the path)


def main(spec_path: str, output_root: str) -> None:
    from tf_transfer.core import strategies  # before TensorFlow: its environment settings, as in a command

    import tensorflow as tf

    # As in the test process whose one-device runs these are compared with (tests/conftest.py says why).
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})

    with open(spec_path) as f:
        specs = json.load(f)
    strategy = strategies.make_strategy("multi_worker")
    # Where the test's time goes, in the worker's log.
    print(f"worker: cluster joined at {time.monotonic() - STARTED:.1f} s", file=sys.stderr, flush=True)
    for name, spec in specs.items():
        run_study(name, spec, os.path.join(output_root, name), strategy, "multi_worker")
        print(f"worker: {name} done at {time.monotonic() - STARTED:.1f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
