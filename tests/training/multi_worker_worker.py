"""One worker process of tests/training/test_multi_worker_studies.py: every study, one after the other, under the
one `MultiWorkerMirroredStrategy` this process joins (`TF_CONFIG`).

    python tests/training/multi_worker_worker.py SPEC.json OUTPUT_ROOT

SPEC.json maps each study (glue, stack, sentiment, multitask) to the keyword arguments of its settings; each study
writes to OUTPUT_ROOT/<study> through the same function its command calls. One process for all four pays
TensorFlow's import and the cluster's start-up once (the suite's budget for tests that start processes is 60 s).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def run_study(name: str, spec: dict, output_dir: str, strategy) -> None:
    if name == "glue":
        from tf_transfer.studies import glue
        from tf_transfer.studies.glue_config import RunConfig

        glue.run_glue(RunConfig(**spec, distribution="multi_worker"), output_dir, strategy=strategy)
    elif name == "stack":
        from tf_transfer.studies import stack
        from tf_transfer.studies.stack_config import StackConfig

        stack.run_stack(StackConfig(**spec, distribution="multi_worker"), output_dir, strategy=strategy)
    elif name == "sentiment":
        from tf_transfer.data import labelled_texts
        from tf_transfer.studies import sentiment, sentiment_bert

        settings = sentiment.BertSettings(**spec["settings"], distribution="multi_worker")
        sentiment_bert.run_bert(labelled_texts.read_labelled_texts(spec["data"]), output_dir, settings,
                                strategy=strategy)
    elif name == "multitask":
        from tf_transfer.studies import multitask
        from tf_transfer.studies.multitask_settings import MultitaskSettings

        multitask.run_multitask(MultitaskSettings(**spec, distribution="multi_worker"), output_dir,
                                strategy=strategy)
    else:
        raise ValueError(f"unknown study {name!r}")


def main(spec_path: str, output_root: str) -> None:
    from tf_transfer.core import strategies

    with open(spec_path) as f:
        specs = json.load(f)
    strategy = strategies.make_strategy("multi_worker")
    for name, spec in specs.items():
        run_study(name, spec, os.path.join(output_root, name), strategy)


if __name__ == "__main__":
    main(*sys.argv[1:])
